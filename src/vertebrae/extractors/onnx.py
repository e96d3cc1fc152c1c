"""ONNXExtractor: an exported ``.onnx`` model run with onnxruntime (the one onnxruntime adapter).

The model file's contents are its cache identity (hashed without importing
onnxruntime); its graph's inputs and outputs are read at construction (without onnxruntime, see
:mod:`~vertebrae.extractors.onnx_graph`), so a file that is not a model or does not fit the
arguments fails before any run; the session is created on first use.  ``providers`` picks the
execution providers (default: CPU); they run different kernels, so they are part of the identity.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DependencyError, ExtractorError, InputTypeError, InputValidationError
from .._base.extras import install_hint
from .base import check_cache_identity
from .batching import SINGLE_OUTPUT, BatchedExtractor, check_outputs, float_rows, n_inputs, take_rows
from .model_identity import check_paths, files_sha256, function_identity, onnx_model_files, trusted_function
from .onnx_graph import NotOnnx, OnnxGraph, read_onnx_graph

#: What to pass instead of a file that is not an ONNX model.
_ONNX_FIX = "pass the .onnx file that torch.onnx.export, skl2onnx or onnx.save wrote"


class ONNXExtractor(BatchedExtractor):
    """Embed inputs with an ONNX model, one ``session.run`` per batch.

    ``input_fn(rows) -> {input name: array}`` builds the feeds (default: the rows as
    float32 for the model's only input).  Without ``outputs`` the model's first
    output is the embedding; ``outputs=("a", "b")`` keeps those ONNX outputs as named
    outputs.  ``output_fn(dict of ONNX outputs)`` may post-process them and returns an
    array (single output) or a mapping with the ``outputs`` names.
    """

    version = 1
    computes_with = ("onnxruntime",)

    def __init__(self, name: str, model_path: Any, *, input_fn: Callable[[Any], Mapping[str, Any]] | None = None,
                 output_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
                 outputs: Sequence[str] | None = None, providers: Sequence[str] | None = None,
                 batch_size: int = 256, cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"ONNXExtractor {name!r}"
        for argument, fn in (("input_fn", input_fn), ("output_fn", output_fn)):
            if fn is not None and not callable(fn):
                raise InputTypeError(f"{where}: {argument} must be callable or None, got {type(fn).__name__}")
        self.model_path, self.graph = onnx_model(model_path, where=where)
        self.model_files = onnx_model_files(self.model_path, where=where)  # with its external-data files
        self.input_fn, self.output_fn = input_fn, output_fn
        self.outputs = check_outputs(outputs, where=where)
        self._check_graph(where)
        self.providers = check_providers(providers, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.cache_eligible = (trusted_function(input_fn) and trusted_function(output_fn)) or cache_identity is not None
        self.session_: Any = None

    def _check_graph(self, where: str) -> None:
        """What the arguments ask of the graph: one float input for the default feed, and the named outputs."""
        feeds = list(self.graph.feeds.values())
        if self.input_fn is None and len(feeds) != 1:
            raise ConfigError(f"{where}: the model has inputs {[i.name for i in feeds]}; pass input_fn=... "
                              "returning a dict with one array per input")
        if self.input_fn is None and feeds[0].type != "tensor(float)":
            raise ConfigError(f"{where}: the model's input {feeds[0].name!r} takes {feeds[0].type}, and without "
                              f"input_fn the rows are fed as tensor(float); pass input_fn=... returning "
                              f"{{{feeds[0].name!r}: array}} of that type")
        if self.outputs is not None and self.output_fn is None:
            check_graph_outputs(self.outputs, self.graph, self.model_path, argument="outputs", where=where)

    def recipe(self) -> dict[str, Any]:
        return {"type": "onnx", "model_files_sha256": files_sha256(list(self.model_files)),
                "input_fn": function_identity(self.input_fn), "output_fn": function_identity(self.output_fn),
                "outputs": None if self.outputs is None else list(self.outputs), "providers": list(self.providers),
                "batch_size": self.batch_size, "cache_identity": self.cache_identity}

    def load(self) -> Any:
        if self.session_ is None:
            try:
                import onnxruntime
            except ImportError:
                raise DependencyError(f"ONNXExtractor needs onnxruntime; {install_hint('onnx')}") from None
            self.session_ = provided_session(onnxruntime, self.model_path, self.providers,
                                             where=f"ONNXExtractor {self.name!r}")
        return self.session_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"ONNXExtractor {self.name!r}"
        n_rows = n_inputs(X, where=where)
        inputs = list(self.graph.feeds)
        # The first row's feeds, before the model loads: a text in it, or a feed name the graph lacks, fails here.
        first = take_rows(X, np.arange(1))
        if self.input_fn is None:
            self._feed(first, np.arange(1))
        else:
            check_feed_names(self.input_fn(first), self.graph, where=where)
        session = self.load()
        fetch = list(self.graph.outputs) if self.output_fn is not None or self.outputs is None else list(self.outputs)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            batch = take_rows(X, rows)
            given = self.input_fn(batch) if self.input_fn else {inputs[0]: self._feed(batch, rows)}
            check_feeds(given, self.graph, rows, where=where)
            produced = dict(zip(fetch, session.run(fetch, dict(given))))
            if self.output_fn is not None:
                out = self.output_fn(produced)
                return out if self.outputs is not None else {SINGLE_OUTPUT: out}
            return produced if self.outputs is not None else {SINGLE_OUTPUT: produced[fetch[0]]}

        return self._stream(n_rows, embed)

    def _feed(self, batch: Any, rows: np.ndarray) -> np.ndarray:
        """The default feed: the rows as float32, with a row that is not numbers named (:func:`float_rows`)."""
        return float_rows(batch, rows, where=f"ONNXExtractor {self.name!r}", argument="input_fn",
                          builds="the feeds", texts="ONNXTextExtractor")


def check_providers(providers: Any, *, where: str) -> list[str]:
    """The execution providers, a list of names (default CPU): a single string would be read letter by letter."""
    if providers is None:
        return ["CPUExecutionProvider"]
    if isinstance(providers, str) or not isinstance(providers, Sequence) or not providers \
            or not all(isinstance(p, str) and p for p in providers):
        raise ConfigError(f"{where}: providers must be a non-empty list of onnxruntime execution provider names, e.g. "
                          f"['CPUExecutionProvider'], got {providers!r}")
    return list(providers)


def onnx_model(model_path: Any, *, where: str) -> tuple[Path, OnnxGraph]:
    """``model_path`` as an existing, readable ONNX model file, and its graph: a folder, an unreadable file or one
    that is not a model is named here, at construction, not when the session starts mid-run."""
    path = check_paths("model_path", model_path, where=where)[0]
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.onnx"))
        raise InputValidationError(f"{where}: model_path {str(path)!r} is a folder; pass the .onnx file"
                                   + (f" in it ({found})" if found else ""))
    if path.suffix == ".ort":  # onnxruntime reads a .ort file as its own (mobile) format, whose graph is not read here
        raise InputValidationError(f"{where}: model_path {str(path)!r} is an ORT-format model; pass the .onnx file "
                                   "it was converted from")
    try:
        return path, read_onnx_graph(path)
    except OSError as exc:
        raise InputValidationError(f"{where}: model_path {str(path)!r} cannot be read ({exc.strerror or exc}); "
                                   "make it readable by this user, or pass a copy that is") from None
    except NotOnnx as exc:
        raise InputValidationError(f"{where}: model_path {str(path)!r} is not an ONNX model ({exc}); "
                                   f"{_ONNX_FIX}") from None


def check_graph_outputs(names: Sequence[str], graph: OnnxGraph, model_path: Path, *, argument: str,
                        where: str) -> None:
    """Each of ``names`` is an output of the graph; a missing one is named with the closest outputs."""
    missing = [name for name in names if name not in graph.outputs]
    if missing:
        available = list(graph.outputs)
        hints = "; ".join(f"{m!r}: closest {difflib.get_close_matches(m, available, n=3, cutoff=0.4) or 'none'}"
                          for m in missing)
        raise ConfigError(f"{where}: {argument} {missing} are not outputs of {model_path.name} ({hints}); its "
                          f"outputs are {available}; name {argument} from them")


def check_feed_names(feeds: Mapping[str, Any], graph: OnnxGraph, *, where: str) -> None:
    """``input_fn``'s feeds are the graph's inputs: onnxruntime's refusal ("Required inputs (['x']) are missing from
    input feed (['y'])") comes as a failure of user code and only once the session has started."""
    if not isinstance(feeds, Mapping):
        raise ExtractorError(f"{where}: input_fn returned a {type(feeds).__name__}; return a dict with one array per "
                             f"model input {list(graph.feeds)}")
    inputs = {i.name for i in graph.inputs}
    unknown = [name for name in feeds if name not in inputs]
    missing = [name for name in graph.feeds if name not in feeds]
    if unknown or missing:
        wrong = "; ".join(f"{what} {names}" for what, names in (("not model inputs:", unknown),
                                                                  ("missing:", missing)) if names)
        raise ExtractorError(f"{where}: input_fn returned feeds {list(feeds)}, but the model takes inputs "
                             f"{list(graph.feeds)} ({wrong}); return a dict with one array per input, by those names")


def check_feeds(feeds: Mapping[str, Any], graph: OnnxGraph, rows: np.ndarray, *, where: str) -> None:
    """The feeds name the graph's inputs, and each has its input's rank and fixed sizes (a named or None dimension
    is free): onnxruntime's refusal ("Got invalid dimensions for input: x ... Got: 6 Expected: 4") names neither the
    rows nor the fix."""
    check_feed_names(feeds, graph, where=where)
    shapes = {i.name: i.shape for i in graph.inputs}
    for name, array in feeds.items():
        expected, given = shapes[name], np.shape(array)
        if expected is None:  # rank not declared
            continue
        fixed = [isinstance(d, int) and d >= 0 for d in expected]
        wrong = [axis for axis, (d, g, f) in enumerate(zip(expected, given, fixed)) if f and d != g]
        if len(given) == len(expected) and not wrong:
            continue
        shown = "(" + ", ".join("?" if d is None else str(d) for d in expected) + ")"
        if wrong == [0]:
            fix = (f"the model was exported with a fixed batch of {expected[0]}: pass batch_size={expected[0]}, or "
                   "export it with a dynamic batch axis")
        elif len(given) == len(expected) and wrong == [len(expected) - 1]:
            fix = f"it takes rows of width {expected[-1]}, not {given[-1]}: pass inputs of width {expected[-1]}"
        else:
            fix = "pass inputs of that shape"
        raise InputValidationError(f"{where}: the model's input {name!r} takes arrays of shape {shown}, but X rows "
                                   f"{rows[0]}..{rows[-1]} give {given}; {fix} (or an input_fn=... that builds them)")


def provided_session(onnxruntime: Any, model_path: Any, providers: list[str], *, where: str) -> Any:
    """An InferenceSession on exactly ``providers``: onnxruntime falls back to CPU, with only a log line, for a
    provider that is unavailable or misspelt, which would run other kernels than the identity (and key) says."""
    errors = onnxruntime.capi.onnxruntime_pybind11_state
    try:
        session = onnxruntime.InferenceSession(str(model_path), providers=providers)
    except errors.InvalidProtobuf as exc:  # read at construction (onnx_model), so changed since
        raise InputValidationError(f"{where}: model_path {str(model_path)!r} is not an ONNX model (onnxruntime cannot "
                                   f"parse it); {_ONNX_FIX}") from exc
    except errors.InvalidGraph as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise InputValidationError(f"{where}: model_path {str(model_path)!r} is an ONNX file whose graph onnxruntime "
                                   f"refuses ({first}); re-export the model") from exc
    missing = [p for p in providers if p not in session.get_providers()]
    if missing:
        raise ConfigError(f"{where}: execution provider(s) {missing} are not available here (onnxruntime offers "
                          f"{onnxruntime.get_available_providers()}); pass providers this machine has, e.g. "
                          "['CPUExecutionProvider']")
    return session

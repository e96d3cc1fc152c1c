"""TorchExtractor: any ``torch.nn.Module`` as a frozen feature extractor (the one torch adapter).

The model runs under ``eval()`` and ``torch.inference_mode()`` on the resolved
device, one forward pass per batch, and may emit several named outputs from that
pass.  Its previous train/eval state (per submodule) and device are restored
afterwards.  Its cache identity is its class, its configuration (``repr``) and a
hash of its state-dict tensor bytes — or, for a model given as a TorchScript file
or built by a factory from checkpoint files, a hash of those files, computed
without importing torch so that a cache hit never loads the model.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import itertools
import os
import re
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DependencyError, ExtractorError, InputTypeError, InputValidationError
from .._base.config import check_bool
from .._base.extras import install_hint
from .._base.fingerprint import callable_name
from .base import check_cache_identity
from .batching import SINGLE_OUTPUT, BatchedExtractor, check_outputs, float_rows, n_inputs, take_rows
from .model_identity import check_paths, files_sha256, function_identity, trusted_function
from .module_taps import check_layer_names, check_layers_exist, check_tap_poolings, pool_tap, tap_tensor, tapped

#: "auto" or a torch device a model can be moved to, with an optional index ("cuda:1"); "cuda:x" or "auto:1" are
#: refused at construction, not at the first batch.
_DEVICE_SPELLING = re.compile(r"auto|(cpu|cuda|mps)(:\d+)?")


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise DependencyError(f"this extractor needs torch; {install_hint('torch')}") from None
    return torch


def check_device(device: Any, *, where: str) -> str:
    """Validate the device spelling now (no torch import); availability is checked when the model loads."""
    if not isinstance(device, str) or not _DEVICE_SPELLING.fullmatch(device):
        raise ConfigError(f"{where}: device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
    return device


def resolve_device(device: str, *, where: str) -> Any:
    """``"auto"`` picks cuda, then mps, then cpu; an unavailable device is an error, not a silent fallback."""
    torch = import_torch()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{where}: device {device!r} requested but CUDA is not available; use device='cpu' or 'auto'")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{where}: device {device!r} requested but MPS is not available; use device='cpu' or 'auto'")
    return resolved


def state_dict_sha256(module: Any) -> str:
    """Hash of every parameter and buffer: name, dtype, shape and raw bytes."""
    torch = import_torch()
    digest = hashlib.sha256()
    for key, tensor in module.state_dict().items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{key}|{flat.dtype}|{tuple(tensor.shape)}\x00".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def module_identity(module: Any) -> dict[str, Any]:
    """Class, configuration (the module's ``repr`` lists its layers and their hyperparameters), weights, and the
    source of every class in the module tree that torch does not ship (:func:`class_sources`)."""
    return {"class": callable_name(type(module)), "config_sha256": hashlib.sha256(repr(module).encode()).hexdigest(),
            "weights_sha256": state_dict_sha256(module), "class_sources_sha256": class_sources(module)}


def class_sources(module: Any) -> dict[str, str | None]:
    """The SHA-256 of the source of each class in ``module``'s tree outside torch, by qualified name: a
    ``forward`` is code that neither ``repr`` nor the weights describe (torch's own classes are covered by torch's
    version in the key).  None where the source cannot be read (a class defined in a REPL), which leaves the
    model uncacheable without a declared ``cache_identity``."""
    sources: dict[str, str | None] = {}
    for cls in {type(m) for m in module.modules()}:
        if cls.__module__.split(".")[0] == "torch":
            continue
        try:
            sources[callable_name(cls)] = hashlib.sha256(inspect.getsource(cls).encode()).hexdigest()
        except (OSError, TypeError):
            sources[callable_name(cls)] = None
    return dict(sorted(sources.items()))


def is_torch_module(obj: Any) -> bool:
    """True for an ``nn.Module``; never imports torch (a module instance implies torch is already loaded)."""
    return "torch" in sys.modules and isinstance(obj, sys.modules["torch"].nn.Module)


@contextlib.contextmanager
def frozen(module: Any, device: Any, *, inference_mode: bool = True) -> Iterator[None]:
    """Run ``module`` in eval mode without autograd on ``device``; restore modes and device afterwards."""
    torch = import_torch()
    modes = [(m, m.training) for m in module.modules()]
    first = next(iter(module.parameters()), None)
    original = None if first is None else first.device
    if original is not None and original != device:
        module.to(device)
    module.eval()
    try:
        with torch.inference_mode() if inference_mode else torch.no_grad():
            yield
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the extract stage's timing must include queued kernels
    finally:
        for m, training in modes:
            m.training = training
        if original is not None and original != device:
            module.to(original)


def to_device(value: Any, device: Any) -> Any:
    """Tensors (also inside dicts, lists, tuples) moved to ``device``; anything else unchanged."""
    if hasattr(value, "to") and hasattr(value, "device"):
        return value.to(device, non_blocking=True)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def to_numpy(value: Any) -> np.ndarray:
    """A tensor (any device) or array as a NumPy array; bfloat16 and other NumPy-less dtypes become float32."""
    if hasattr(value, "detach"):
        value = value.detach()
        torch = import_torch()
        if value.dtype.is_floating_point and value.dtype not in (torch.float16, torch.float32, torch.float64):
            value = value.float()
        return value.to("cpu").numpy()
    return np.asarray(value)


def default_collate(batch: Any, floats: Callable[[Any], np.ndarray] | None = None) -> Any:
    """Rows as one float32 tensor: a tensor slice stays, a list of tensors is stacked, anything else becomes
    ``floats(batch)`` (default: ``np.asarray(batch, dtype=np.float32)``), so that a caller can name a row that is
    not numbers (``TorchExtractor`` does, with :func:`~vertebrae.extractors.batching.float_rows`)."""
    torch = import_torch()
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, list) and batch and isinstance(batch[0], torch.Tensor):
        return torch.stack(batch)
    return torch.as_tensor(np.asarray(batch, dtype=np.float32) if floats is None else floats(batch))


def call_model(model: Any, inputs: Any) -> Any:
    """A dict of inputs is passed as keywords, a tuple as positional arguments, anything else as one argument."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def check_torchscript_file(path: Path, *, where: str) -> Path:
    """A TorchScript archive (``torch.jit.save``: a zip holding ``constants.pkl``), read from its zip directory
    without importing torch; ``torch.jit.load`` blames anything else on a corrupt file, a state dict included."""
    fix = ("build the module, load the weights (module.load_state_dict(torch.load(path))) and pass the module, or a "
           "factory with checkpoint_paths=[path]; or save TorchScript with "
           "torch.jit.save(torch.jit.script(module), path)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name.rsplit("/", 1)[-1] for name in archive.namelist()]
    except (zipfile.BadZipFile, OSError):
        raise InputValidationError(f"{where}: model {str(path)!r} is not a TorchScript file (torch.jit.save writes a "
                                   f"zip archive); {fix}") from None
    if "constants.pkl" in names:
        return path
    what = ("was written by torch.save (a state dict, as torch.save(model.state_dict(), path) writes, or a pickled "
            "module), not by torch.jit.save" if "data.pkl" in names else "is a zip archive, but not TorchScript")
    raise InputValidationError(f"{where}: model {str(path)!r} {what}, and a path is read as TorchScript; {fix}")


class TorchExtractor(BatchedExtractor):
    """Embed inputs with a frozen torch model, one forward pass per batch.

    ``model`` is an ``nn.Module``, a path to a TorchScript file (``torch.jit.save``),
    or a zero-argument factory returning a module together with the
    ``checkpoint_paths`` it loads.  ``collate_fn(rows) -> model input`` turns a batch
    of dataset rows into the model input (default: one float32 tensor);
    ``output_fn(model output)`` returns a tensor, or with ``outputs=("a", "b")`` a
    mapping holding those named outputs (default: the model output itself).

    ``layers=["features.3", ...]`` instead taps those submodules (``model.named_modules()``
    names) with forward hooks in the same single forward pass, and ``poolings`` (default
    ``"mean"``) pools each: one named output ``<module>_<pooling>`` per pair, as the Hugging
    Face extractors name theirs (see :mod:`vertebrae.extractors.module_taps`).
    """

    version = 1
    computes_with = ("torch",)

    def __init__(self, name: str, model: Any, *, collate_fn: Callable[[Any], Any] | None = None,
                 output_fn: Callable[[Any], Any] | None = None, device: str = "auto",
                 outputs: Sequence[str] | None = None, batch_size: int = 64,
                 checkpoint_paths: Any = None, cache_identity: str | None = None, inference_mode: bool = True,
                 layers: str | Sequence[str] | None = None, poolings: str | Sequence[str] | None = None,
                 progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"TorchExtractor {name!r}"
        for argument, fn in (("collate_fn", collate_fn), ("output_fn", output_fn)):
            if fn is not None and not callable(fn):
                raise InputTypeError(f"{where}: {argument} must be callable or None, got {type(fn).__name__}")
        self.collate_fn, self.output_fn = collate_fn, output_fn
        self.device = check_device(device, where=where)
        self.outputs = check_outputs(outputs, where=where)
        self._set_taps(layers, poolings, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.inference_mode = check_bool(where, "inference_mode", inference_mode)
        self.checkpoint_paths = None if checkpoint_paths is None else check_paths("checkpoint_paths", checkpoint_paths,
                                                                                   where=where)
        self.script_path: Path | None = None
        self.factory: Callable[[], Any] | None = None
        self.model_: Any = None
        readable = True  # every class of an nn.Module's tree has a source to hash
        if isinstance(model, (str, os.PathLike)):
            if self.layers is not None:
                raise ConfigError(f"{where}: layers=[...] taps modules with forward hooks, which TorchScript modules "
                                  "do not support; pass the nn.Module (or a factory that builds it)")
            self.script_path = check_torchscript_file(check_paths("model", model, where=where)[0], where=where)
        elif is_torch_module(model):
            self.model_ = model
            readable = all(source is not None for source in class_sources(model).values())
            if self.layers is not None:
                check_layers_exist(model, self.layers, where=where)
        elif callable(model):
            if self.checkpoint_paths is None and self.cache_identity is None:
                raise InputValidationError(f"{where}: a model factory needs checkpoint_paths=... (the files it loads) "
                                           "or cache_identity=... so its weights can be identified without building it")
            self.factory = model
        else:
            raise InputTypeError(f"{where}: model must be a torch.nn.Module, a TorchScript file path or a factory "
                                 f"function, got {type(model).__name__}")
        trusted = (trusted_function(collate_fn) and trusted_function(output_fn) and trusted_function(self.factory)
                   and readable)
        self.cache_eligible = trusted or self.cache_identity is not None

    def _set_taps(self, layers: Any, poolings: Any, *, where: str) -> None:
        """With ``layers``: every (module, pooling) pair is an output, so ``outputs``/``output_fn`` cannot also be set."""
        self.layers: tuple[str, ...] | None = None
        self.poolings: tuple[str, ...] | None = None
        self.pairs: tuple[tuple[str, str], ...] = ()
        if layers is None:
            if poolings is not None:
                raise ConfigError(f"{where}: poolings={poolings!r} pools tapped modules; name them with "
                                  "layers=[...] (model.named_modules() names)")
            return
        if self.outputs is not None or self.output_fn is not None:
            raise ConfigError(f"{where}: layers=[...] names the outputs itself (<module>_<pooling>); drop outputs= "
                              "and output_fn=, which read the model's own output")
        self.layers = check_layer_names(layers, where=where)
        self.poolings = check_tap_poolings("mean" if poolings is None else poolings, where=where)
        self.pairs = tuple(itertools.product(self.layers, self.poolings))
        self.outputs = check_outputs([f"{layer}_{pooling}" for layer, pooling in self.pairs], where=where)

    def recipe(self) -> dict[str, Any]:
        if self.script_path is not None:
            model: dict[str, Any] = {"class": "torch.jit.ScriptModule", "files_sha256": files_sha256([self.script_path])}
        elif self.factory is not None:
            model = {"factory": function_identity(self.factory),
                     "checkpoint_sha256": None if self.checkpoint_paths is None else files_sha256(self.checkpoint_paths)}
        else:
            model = module_identity(self.model_)
            if self.checkpoint_paths is not None:
                model["checkpoint_sha256"] = files_sha256(self.checkpoint_paths)
        return {"type": "torch", "model": model, "collate_fn": function_identity(self.collate_fn),
                "output_fn": function_identity(self.output_fn),
                "outputs": None if self.outputs is None else list(self.outputs), "batch_size": self.batch_size,
                "device": self.device, "inference_mode": self.inference_mode, "cache_identity": self.cache_identity,
                "layers": None if self.layers is None else list(self.layers),
                "poolings": None if self.poolings is None else list(self.poolings)}

    def load(self) -> Any:
        """The model, loaded on first use (a TorchScript file or a factory call)."""
        if self.model_ is None:
            torch = import_torch()
            device = resolve_device(self.device, where=f"TorchExtractor {self.name!r}")
            if self.script_path is not None:
                self.model_ = torch.jit.load(str(self.script_path), map_location=device)
            else:
                built = self.factory()  # type: ignore[misc]
                if not is_torch_module(built):
                    raise ExtractorError(f"TorchExtractor {self.name!r}: the model factory returned "
                                         f"{type(built).__name__}, not a torch.nn.Module")
                self.model_ = built.to(device)
            if self.layers is not None:
                check_layers_exist(self.model_, self.layers, where=f"TorchExtractor {self.name!r}")
        return self.model_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"TorchExtractor {self.name!r}"
        n_rows = n_inputs(X, where=where)
        if self.collate_fn is None:  # a text in the first row fails here, before the model loads
            self._collate(take_rows(X, np.arange(1)), np.arange(1))
        model = self.load()
        device = resolve_device(self.device, where=where)

        if self.layers is not None:
            return self._embed_taps(X, n_rows, model, device)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            raw = call_model(model, to_device(self._collate(take_rows(X, rows), rows), device))
            return self._named_outputs(raw if self.output_fn is None else self.output_fn(raw))

        with frozen(model, device, inference_mode=self.inference_mode):
            return self._stream(n_rows, embed)

    def _embed_taps(self, X: Any, n_rows: int, model: Any, device: Any) -> dict[str, np.ndarray]:
        """One forward pass per batch; each tapped module's output pooled into its outputs."""
        where = f"TorchExtractor {self.name!r}"
        layers = self.layers or ()

        with frozen(model, device, inference_mode=self.inference_mode), tapped(model, layers) as seen:
            def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
                for captured in seen.values():
                    captured.clear()
                inputs = to_device(self._collate(take_rows(X, rows), rows), device)
                call_model(model, inputs)
                tensors = {layer: tap_tensor(layer, seen[layer], where=where) for layer in layers}
                return {name: to_numpy(pool_tap(layer, tensors[layer], pooling, inputs, where=where).float())
                        for name, (layer, pooling) in zip(self.outputs or (), self.pairs)}

            return self._stream(n_rows, embed)

    def _collate(self, batch: Any, rows: np.ndarray) -> Any:
        """The model input for the dataset rows ``rows``: ``collate_fn(batch)``, or the default collate, which names
        a row that is not numbers (a text, say) and the fix, where NumPy's "could not convert string to float"
        names neither."""
        if self.collate_fn is not None:
            return self.collate_fn(batch)
        return default_collate(batch, functools.partial(
            float_rows, rows=rows, where=f"TorchExtractor {self.name!r}", argument="collate_fn",
            builds="the model input", texts="HFTextExtractor or SentenceTransformerExtractor"))

    def _output_metadata(self) -> dict[str, dict[str, Any]]:
        """A tapped output's module (the ``hidden_layer`` field) and pooling."""
        if self.layers is None:
            return super()._output_metadata()
        return {name: {"hidden_layer": layer, "pooling": pooling}
                for name, (layer, pooling) in zip(self.outputs or (), self.pairs)}

    def _named_outputs(self, out: Any) -> dict[str, np.ndarray]:
        if self.outputs is None:
            if isinstance(out, (Mapping, tuple, list)):
                raise ExtractorError(f"TorchExtractor {self.name!r}: the model output is a {type(out).__name__}; pass "
                                     "output_fn=... to pick the embedding tensor, or outputs=(...) to keep several")
            return {SINGLE_OUTPUT: to_numpy(out)}
        if not isinstance(out, Mapping):
            raise ExtractorError(f"TorchExtractor {self.name!r}: outputs={list(self.outputs)} needs output_fn to return "
                                 f"a mapping of those names to tensors, got {type(out).__name__}")
        missing = [name for name in self.outputs if name not in out]
        if missing:
            raise ExtractorError(f"TorchExtractor {self.name!r}: outputs {missing} are not among the keys of the "
                                 f"{'output_fn result' if self.output_fn else 'model output'} "
                                 f"{sorted(map(str, out))}; name outputs=(...) from those keys")
        return {name: to_numpy(out[name]) for name in self.outputs}  # other keys (logits, ...) are not kept


"""Streaming extraction: embed inputs batch by batch into preallocated output arrays.

Model extractors (torch, sentence-transformers, Hugging Face, ONNX) only say how
to embed one batch of rows; :func:`stream_batches` validates every batch (rows,
width, dtype, finite values, the same named outputs) and writes it into one array
per output allocated on the first batch, so peak memory is the model plus the
outputs plus one batch — never a list of batches plus a concatenated copy.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, ExtractorError, InputTypeError, InputValidationError
from .._base.fingerprint import declared_identity
from .base import check_extractor_name

#: The output name of a single-output extractor's batches.
SINGLE_OUTPUT = "embedding"
#: ``embed(rows)`` returns ``{output name: (len(rows), width) array}`` for the dataset rows ``rows``.
BatchFunction = Callable[[np.ndarray], Mapping[str, Any]]


#: Texts tokenized at once to order rows by length (the token ids of a chunk are dropped after counting).
LENGTH_CHUNK = 10_000

#: ``observer(embed, rows)`` runs one batch call for resource profiling (see vertebrae.extractors.profiling); None: off.
BatchObserver = Callable[[BatchFunction, np.ndarray], Mapping[str, Any]]
_BATCH_OBSERVER: contextvars.ContextVar[BatchObserver | None] = contextvars.ContextVar("batch_observer", default=None)


@contextlib.contextmanager
def observe_batches(observer: BatchObserver) -> Iterator[None]:
    """Route every batch call of :func:`stream_batches` in this context through ``observer``."""
    token = _BATCH_OBSERVER.set(observer)
    try:
        yield
    finally:
        _BATCH_OBSERVER.reset(token)


def n_inputs(X: Any, *, where: str) -> int:
    if isinstance(X, (str, bytes)):
        raise InputTypeError(f"{where}: X must be a sequence of inputs, got a single {type(X).__name__}; "
                             "wrap one input in a list")
    try:
        n = X.shape[0] if hasattr(X, "shape") else len(X)
    except TypeError:
        raise InputTypeError(f"{where}: X must be a sized sequence or array of inputs, got {type(X).__name__}") from None
    if n == 0:
        raise InputValidationError(f"{where}: X is empty; there is nothing to embed")
    return int(n)


def take_rows(X: Any, rows: np.ndarray) -> Any:
    """The inputs at ``rows``: fancy indexing for arrays, a list otherwise."""
    return X[rows] if hasattr(X, "shape") else [X[int(i)] for i in rows]


def float_rows(batch: Any, rows: np.ndarray, *, where: str, argument: str, builds: str, texts: str) -> np.ndarray:
    """The rows as one float32 array: the default input of the ONNX and torch extractors.  NumPy's refusal ("could
    not convert string to float", "inhomogeneous shape") names neither the row nor the fix, so the first row that is
    not numbers is named here, with the extractors that embed ``texts`` and the ``argument`` (a function that
    ``builds`` the model input) that replaces this default."""
    try:
        return np.asarray(batch, dtype=np.float32)
    except (TypeError, ValueError):
        pass
    for row, item in zip(rows, batch):
        try:
            np.asarray(item, dtype=np.float32)
        except (TypeError, ValueError):
            raise InputTypeError(f"{where}: X[{row}] is {item!r:.60} ({type(item).__name__}); without {argument} the "
                                 f"model takes numeric arrays (fed as float32): embed texts with {texts}, or pass "
                                 f"{argument}=... that builds {builds}") from None
    raise InputValidationError(f"{where}: X rows {rows[0]}..{rows[-1]} have different shapes; pass rows of one "
                               f"shape (or {argument}=... that builds {builds})")


def check_texts(X: Any, *, where: str) -> list[str]:
    """Text extractors take a sequence of ``str``; anything else fails before the model loads."""
    n_inputs(X, where=where)
    texts = list(X)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputTypeError(f"{where}: X[{i}] is {type(text).__name__}, not str; text extractors embed strings "
                                 "(convert the column with [str(t) for t in X] if that is what you mean)")
    return texts


def longest_first(texts: Sequence[str], token_counts: Callable[[list[str]], Sequence[int]]) -> np.ndarray:
    """Row order by token count, longest first (ties in dataset order), so a batch pads its texts to a similar
    length instead of its longest outlier; ``token_counts(chunk)`` tokenizes :data:`LENGTH_CHUNK` texts at a time."""
    counts = np.empty(len(texts), dtype=np.int64)
    for start in range(0, len(texts), LENGTH_CHUNK):
        chunk = list(texts[start:start + LENGTH_CHUNK])
        counts[start:start + len(chunk)] = token_counts(chunk)
    return np.argsort(-counts, kind="stable")


def check_batch_size(batch_size: Any, *, where: str) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InputValidationError(f"{where}: batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def check_outputs(outputs: Any, *, where: str) -> tuple[str, ...] | None:
    if outputs is None:
        return None
    names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    if not names or any(not isinstance(n, str) or not n.strip() or ":" in n for n in names):
        raise ConfigError(f"{where}: outputs must be non-empty names without ':' (it joins parent and output "
                          f"names), got {outputs!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: outputs has duplicate names {list(names)}")
    return names


def stream_batches(n_rows: int, batch_size: int, embed: BatchFunction, outputs: Sequence[str], *, source: str,
                   progress: bool | None = None, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Run ``embed`` over consecutive batches of ``order`` (default ``0..n_rows-1``); return one array per output.

    Rows are written back to their dataset position, so an ``order`` that groups
    similar-length texts changes only the batch composition, never the row order.
    """
    from tqdm.auto import tqdm

    from .._base.progress import progress_enabled

    order = np.arange(n_rows) if order is None else order
    expected = tuple(outputs)
    filled: dict[str, np.ndarray] = {}
    observer = _BATCH_OBSERVER.get()
    with tqdm(total=n_rows, desc=source, unit="rows", file=sys.stderr, disable=not progress_enabled(progress)) as bar:
        for start in range(0, n_rows, batch_size):
            rows = order[start:start + batch_size]
            produced = embed(rows) if observer is None else observer(embed, rows)
            batch = _check_batch(produced, rows, expected, filled, source=source)
            for name in expected:
                if name not in filled:
                    filled[name] = np.empty((n_rows, batch[name].shape[1]), dtype=batch[name].dtype)
                filled[name][rows] = batch[name]
            bar.update(len(rows))
    return filled


def _rows_named(rows: np.ndarray) -> str:
    """``rows 4..7`` for a run of rows; the rows themselves (the first few) for a batch of texts of similar length,
    which the extractors gather from anywhere in the dataset."""
    if rows.size and np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        return f"rows {int(rows[0])}..{int(rows[-1])}"
    shown = ", ".join(str(int(r)) for r in np.sort(rows)[:5]) + (", ..." if rows.size > 5 else "")
    return f"{rows.size} rows ({shown})"


def _check_batch(batch: Mapping[str, Any], rows: np.ndarray, expected: tuple[str, ...], filled: dict[str, np.ndarray],
                 *, source: str) -> dict[str, np.ndarray]:
    where = f"{source}: batch of {_rows_named(rows)}"
    if not isinstance(batch, Mapping) or set(batch) != set(expected):
        got = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise ExtractorError(f"{where} returned outputs {got}, expected {list(expected)}; every batch must return "
                             "the same named outputs")
    checked = {}
    for name in expected:
        value = np.asarray(batch[name])
        if value.ndim != 2 or value.shape[0] != len(rows):
            raise ExtractorError(f"{where}: output {name!r} has shape {value.shape}, expected ({len(rows)}, width); "
                                 "return one row per input (pool token states before returning them)")
        if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
            raise ExtractorError(f"{where}: output {name!r} has dtype {value.dtype}; return real numbers")
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            bad = rows[~np.isfinite(value).all(axis=1)]
            raise ExtractorError(f"{where}: output {name!r} has NaN or infinite values in rows "
                                 f"{[int(r) for r in bad[:5]]}; check the model and its inputs (overflow in float16?)")
        if name in filled and (value.shape[1] != filled[name].shape[1] or value.dtype != filled[name].dtype):
            raise ExtractorError(f"{where}: output {name!r} is {value.shape[1]} wide with dtype {value.dtype}, but "
                                 f"earlier batches were {filled[name].shape[1]} wide with dtype {filled[name].dtype}")
        checked[name] = value
    return checked


class BatchedExtractor:
    """Base of the model extractors: single- or multi-output on top of :meth:`_embed_all`.

    With ``outputs`` unset an extractor has one output and only the plain protocol
    (``transform``), so its result is named after the extractor.  With named
    outputs it also has ``output_names()``, ``transform_many(X)`` and
    ``output_metadata()``, and the benchmark scores each output as its own result
    named ``extractor:output``.  (Those three are properties that raise
    AttributeError on a single-output extractor, so ``hasattr`` tells the two apart.)

    ``fit`` learns nothing (the models are frozen) and loads nothing: models load on
    the first transform, so a benchmark whose embeddings are cached never loads them.

    ``recipe()`` names every constructor argument but the ``speed_only`` ones (``batch_size``
    and ``device`` included: batch composition and kernels round differently), and
    ``identity()`` adds the code version and the ``computes_with`` package versions
    (:func:`~vertebrae._base.fingerprint.declared_identity`).
    """

    #: The code version: bump it with any change that can change the outputs (tests/test_code_versions.py).
    version = 1
    #: Distributions whose installed versions enter the identity.
    computes_with: tuple[str, ...] = ()
    #: Constructor arguments left out of the identity: a test shows bitwise-identical outputs across their values.
    speed_only: tuple[str, ...] = ("progress",)
    #: False when the recipe cannot vouch for the computation (set per instance).
    cache_eligible: bool = True
    #: The named outputs, or None for a single-output extractor.
    outputs: tuple[str, ...] | None = None

    def __init__(self, name: str, batch_size: int, progress: bool | None) -> None:
        self.name = check_extractor_name(name)
        self.batch_size = check_batch_size(batch_size, where=f"{type(self).__name__} {name!r}")
        self.progress = progress

    def recipe(self) -> dict[str, Any]:
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        return declared_identity(self, self.recipe())

    def fit(self, X: Any, y: Any = None) -> "BatchedExtractor":
        return self

    def transform(self, X: Any) -> np.ndarray:
        """The embedding matrix of a single-output extractor (or of the one named output there is)."""
        if self.outputs is not None and len(self.outputs) > 1:
            raise ExtractorError(f"{type(self).__name__} {self.name!r} has {len(self.outputs)} named outputs "
                                 f"{list(self.outputs)}; call transform_many(X) (the benchmark does)")
        return self._embed_all(X)[self.outputs[0] if self.outputs else SINGLE_OUTPUT]

    @property
    def output_names(self) -> Callable[[], tuple[str, ...]]:
        self._require_outputs("output_names")
        return self._output_names

    @property
    def transform_many(self) -> Callable[[Any], dict[str, np.ndarray]]:
        """``transform_many(X)``: every named output from one pass over ``X`` (one forward pass per batch)."""
        self._require_outputs("transform_many")
        return self._embed_all

    @property
    def output_metadata(self) -> Callable[[], dict[str, dict[str, Any]]]:
        self._require_outputs("output_metadata")
        return self._output_metadata

    def _require_outputs(self, attribute: str) -> None:
        if self.outputs is None:
            raise AttributeError(f"{type(self).__name__} {self.name!r} has a single output, so it has no {attribute}; "
                                 "use transform(X), or pass outputs=(...) for named outputs")

    def _output_names(self) -> tuple[str, ...]:
        return self.outputs or ()

    def _output_metadata(self) -> dict[str, dict[str, Any]]:
        return {name: {"hidden_layer": None, "pooling": None} for name in self.outputs or ()}

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        """``{output name: matrix}`` (``{SINGLE_OUTPUT: matrix}`` without named outputs)."""
        raise NotImplementedError

    def _stream(self, n_rows: int, embed: BatchFunction, order: np.ndarray | None = None) -> dict[str, np.ndarray]:
        return stream_batches(n_rows, self.batch_size, embed, self.outputs or (SINGLE_OUTPUT,), source=self.name,
                              progress=self.progress, order=order)

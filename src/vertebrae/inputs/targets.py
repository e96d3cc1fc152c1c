"""Validated targets of a labeled dataset: single-label, multi-label or regression.

Targets are validated once, when a dataset is built, so every later stage can trust
them.  Classification labels are stored as semantic keys (see :mod:`vertebrae.inputs.labels`);
multi-label targets as a CSR 0/1 indicator; regression targets as float64 (n, T).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._base.sparse import is_sparse, sparse_module
from ..errors import DataWarning, InputTypeError, InputValidationError
from .labels import LabelCatalog, semantic_key

TargetType = Literal["single_label", "multi_label", "regression"]
TARGET_TYPES: tuple[str, ...] = ("single_label", "multi_label", "regression")
_SHOWN = 5
#: NumPy dtype kinds whose labels are encoded vectorized (bool, ints, floats, fixed-width strings).
_TYPED_KINDS = "biufUS"


@dataclass(frozen=True)
class TargetSource:
    """Where targets were read from (a file and its column), so a message names them instead of ``y``, and
    gives each row's line as an editor numbers it (``lines``: the 1-based line of every row, when the file
    has lines: a CSV's row 7 is line 9 under its header)."""

    description: str
    lines: tuple[int, ...] | None = None

    def __str__(self) -> str:
        return self.description


def _rows_text(rows: Sequence[int], argument: str | TargetSource) -> str:
    rows = [int(row) for row in rows]
    shown = ", ".join(map(str, rows[:_SHOWN])) + (", ..." if len(rows) > _SHOWN else "")
    lines = getattr(argument, "lines", None)
    if lines is None:
        return f"{shown} (0-based; {len(rows)} row(s))"
    at = ", ".join(str(lines[row]) for row in rows[:_SHOWN]) + (", ..." if len(rows) > _SHOWN else "")
    return f"{shown} (0-based; {len(rows)} row(s); line(s) {at} in an editor)"


@dataclass(frozen=True)
class SingleLabelTargets:
    """One class per row, stored as int32 codes into the label catalog (code j = catalog.keys[j])."""

    codes: np.ndarray
    catalog: LabelCatalog
    target_type: str = field(default="single_label", init=False)

    @property
    def keys(self) -> np.ndarray:
        """Semantic key of every row (object array of str)."""
        return np.asarray(self.catalog.keys, dtype=object)[self.codes]

    @property
    def n_samples(self) -> int:
        return int(self.codes.shape[0])

    def counts(self) -> dict[str, int]:
        per_class = np.bincount(self.codes, minlength=len(self.catalog))
        return {key: int(c) for key, c in zip(self.catalog.keys, per_class)}

    def subset(self, rows: np.ndarray) -> "SingleLabelTargets":
        return SingleLabelTargets(self.codes[rows], self.catalog)

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        return {"target_type": self.target_type, "n_samples": self.n_samples, "n_classes": len(self.catalog),
                "class_names": [self.catalog.display(k) for k in self.catalog.keys], "class_counts": counts}


@dataclass(frozen=True)
class MultiLabelTargets:
    indicator: Any  # (n, L) int8 0/1; column j is catalog.keys[j]
    catalog: LabelCatalog
    target_type: str = field(default="multi_label", init=False)

    @property
    def n_samples(self) -> int:
        return int(self.indicator.shape[0])

    def counts(self) -> dict[str, int]:
        per_label = np.asarray(self.indicator.sum(axis=0)).ravel()
        return {key: int(c) for key, c in zip(self.catalog.keys, per_label)}

    def subset(self, rows: np.ndarray) -> "MultiLabelTargets":
        return MultiLabelTargets(self.indicator[rows], self.catalog)

    def summary(self) -> dict[str, Any]:
        per_row = np.diff(self.indicator.indptr)
        labelsets = {tuple(self.indicator.indices[a:b]) for a, b in zip(self.indicator.indptr[:-1], self.indicator.indptr[1:])}
        cardinality = float(per_row.mean())
        return {"target_type": self.target_type, "n_samples": self.n_samples, "n_labels": len(self.catalog),
                "label_names": [self.catalog.display(k) for k in self.catalog.keys], "class_counts": self.counts(),
                "label_cardinality": cardinality, "label_density": cardinality / len(self.catalog),
                "n_distinct_labelsets": len(labelsets)}


@dataclass(frozen=True)
class RegressionTargets:
    values: np.ndarray  # float64 (n, T)
    target_names: tuple[str, ...]
    target_type: str = field(default="regression", init=False)

    @property
    def n_samples(self) -> int:
        return int(self.values.shape[0])

    def constant_targets(self) -> list[str]:
        spread = np.ptp(self.values, axis=0)
        return [name for name, s in zip(self.target_names, spread) if s == 0]

    def subset(self, rows: np.ndarray) -> "RegressionTargets":
        return RegressionTargets(self.values[rows], self.target_names)

    def summary(self) -> dict[str, Any]:
        stats = {name: {"mean": float(col.mean()), "std": float(col.std()), "min": float(col.min()),
                        "max": float(col.max())} for name, col in zip(self.target_names, self.values.T)}
        return {"target_type": self.target_type, "n_samples": self.n_samples, "target_names": list(self.target_names),
                "target_statistics": stats, "constant_targets": self.constant_targets()}


Targets = SingleLabelTargets | MultiLabelTargets | RegressionTargets


def _is_collection(value: Any) -> bool:
    return isinstance(value, (list, tuple, Set, np.ndarray)) and not isinstance(value, str)


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return isinstance(value, (float, np.floating)) and math.isnan(value)
    except TypeError:
        return False


def build_targets(y: Any, *, target_type: str | None = None, label_names: Sequence[Any] | None = None,
                  target_names: Sequence[str] | None = None, n_samples: int | None = None,
                  argument: str | TargetSource = "y") -> Targets:
    """Validate user targets and return the matching targets object.

    ``target_type=None`` infers the type: a 2-D array, a sparse matrix, or a sequence
    whose items are all label collections (lists, tuples, sets, arrays; what
    scikit-learn's ``MultiLabelBinarizer`` reads) is multi-label; anything else is
    single-label.  Tuple-valued single labels (e.g. hierarchy paths) need
    ``target_type="single_label"``.  Regression is never inferred (a float column is
    just as often a class id) and must be requested.
    """
    if target_type is not None and target_type not in TARGET_TYPES:
        raise InputValidationError(f"target_type must be one of {list(TARGET_TYPES)} or None, got {target_type!r}")
    if isinstance(y, (Mapping, Set)):  # its length is not a row count, and a set has no row order
        raise InputTypeError(f"{argument} must hold one target per row, in row order (a list, an array or a "
                             f"Series), got {type(y).__name__}; e.g. [labels[row_id] for row_id in row_ids]")
    _check_rows(argument, _row_count(y), n_samples)  # first: a wrong file explains every later complaint
    if target_names is not None and target_type != "regression":
        raise InputValidationError(f"target_names names the columns of a regression target; pass "
                                   f"target_type=\"regression\" if {argument} is one, else drop target_names (class "
                                   "labels are named by their values, indicator columns by label_names)")
    if target_type == "regression":
        targets: Targets = _regression(y, target_names, argument)
    elif target_type == "multi_label" or (target_type is None and _looks_multilabel(y)):
        targets = _multilabel(y, label_names, argument)
    else:
        if label_names is not None:
            raise InputValidationError(f"label_names only applies to multi-label indicator targets; "
                                       f"for single-label {argument} the labels are the values themselves")
        targets = _single_label(y, argument, inferred=target_type is None)
    _check_rows(argument, targets.n_samples, n_samples)  # targets without a length known before they are read
    return targets


def _row_count(y: Any) -> int | None:
    """How many rows ``y`` holds, when that is known without reading it (None otherwise)."""
    shape = getattr(y, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    return len(y) if hasattr(y, "__len__") and not isinstance(y, (str, bytes)) else None


def _check_rows(argument: Any, rows: int | None, n_samples: int | None) -> None:
    if n_samples is not None and rows is not None and rows != n_samples:
        raise InputValidationError(f"{argument} has {rows} rows but the embeddings/inputs have {n_samples}; "
                                   "give exactly one target per sample, in the same order")


def _looks_multilabel(y: Any) -> bool:
    if is_sparse(y):
        return True
    if isinstance(y, np.ndarray) and (y.dtype != object or y.ndim != 1):
        return y.ndim == 2
    if isinstance(y, (str, bytes)) or not hasattr(y, "__len__") or len(y) == 0:
        return False
    return all(_is_collection(item) for item in y)  # lists, tuples, object arrays, pandas Series


#: Integer-valued numbers (counts, scores such as the diabetes target) read as continuous with at least this
#: many distinct values that are also more than this share of the rows: fewer than 4 rows per "class".
_INTEGER_CONTINUOUS_VALUES, _INTEGER_CONTINUOUS_SHARE = 20, 0.25


def _as_float(value: Any) -> float | None:
    if isinstance(value, float):
        return value
    if isinstance(value, str):  # labels read from a text file
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _numeric_classes(targets: SingleLabelTargets) -> np.ndarray | None:
    """The distinct class labels as numbers when floats (or numeric text) label at least half the rows (and 3
    rows); None otherwise.  Read from the catalog, one value per class, so large targets cost nothing extra."""
    counts = targets.counts()
    numbers = {entry.key: _as_float(entry.value) for entry in targets.catalog.entries}
    numbers = {key: v for key, v in numbers.items() if v is not None and math.isfinite(v)}
    rows = sum(counts[key] for key in numbers)
    if rows < max(targets.n_samples // 2, 3):
        return None
    return np.unique(np.fromiter(numbers.values(), dtype=np.float64, count=len(numbers)))


def _single_label(y: Any, argument: str | TargetSource, inferred: bool = False) -> SingleLabelTargets:
    if isinstance(y, str) or not hasattr(y, "__len__"):
        raise InputTypeError(f"{argument} must be a 1-D sequence of class labels, got {type(y).__name__}")
    if isinstance(y, np.ndarray) and y.ndim != 1:
        raise InputValidationError(f"{argument} must be a 1-D sequence of class labels, got shape {y.shape}")
    typed = isinstance(y, np.ndarray) and y.dtype.kind in _TYPED_KINDS
    values = [] if typed else list(y.tolist() if isinstance(y, np.ndarray) else y)
    if len(y) == 0:
        raise InputValidationError(f"{argument} is empty; a benchmark needs at least two classes with two rows each")
    if typed:  # only float arrays can hold a missing label (NaN)
        missing = np.flatnonzero(~np.isfinite(y)) if y.dtype.kind == "f" else []
    else:
        missing = [i for i, v in enumerate(values) if _is_missing(v)]
    if len(missing):
        raise InputValidationError(f"{argument} has missing labels (None/NaN) at rows {_rows_text(missing, argument)}; "
                                   "drop those rows or assign them a class")
    codes, catalog = _encode_labels(y, values, argument)
    targets = SingleLabelTargets(codes, catalog)
    counts = targets.counts()
    if len(counts) < 2:
        raise InputValidationError(f"{argument} has a single class ({catalog.display(catalog.keys[0])!r}); "
                                   "class separation needs at least two classes")
    small = {k: c for k, c in counts.items() if c < 2}
    numbers = _numeric_classes(targets) if inferred else None
    non_integer = numbers is not None and bool(np.any(numbers != np.round(numbers)))
    many_integers = numbers is not None and numbers.size >= _INTEGER_CONTINUOUS_VALUES and \
        numbers.size > _INTEGER_CONTINUOUS_SHARE * targets.n_samples
    if small and (non_integer or many_integers):  # numbers, some in a single row: a regression target
        raise InputValidationError(
            f"{argument} looks continuous ({len(counts)} distinct numbers in {targets.n_samples} rows, {len(small)} "
            f"of them in a single row), not like class labels; for a regression target pass "
            f"target_type=\"regression\" (in a run config: target_type = \"regression\" in [dataset]); for class "
            "ids, every class needs at least 2 rows")
    if small:
        names = ", ".join(f"{catalog.display(k)!r} ({c} sample)" for k, c in list(small.items())[:_SHOWN])
        code = {key: j for j, key in enumerate(catalog.keys)}
        rows = np.flatnonzero(np.isin(codes, [code[k] for k in small]))
        raise InputValidationError(f"{argument}: class(es) {names} have fewer than 2 samples, at rows "
                                   f"{_rows_text(rows, argument)}; a class needs at least 2 samples to be scored: drop "
                                   "those rows or merge the class")
    if non_integer:  # class ids are rarely fractions: say how it was read and how to choose
        warnings.warn(f"{argument} holds non-integer numbers, read as {len(counts)} class labels; for a regression "
                      f"target pass target_type=\"regression\", for class labels target_type=\"single_label\" "
                      "(which also silences this warning)", DataWarning, stacklevel=2)
    return targets


def _encode_labels(y: Any, values: list[Any], argument: str | TargetSource) -> tuple[np.ndarray, LabelCatalog]:
    """Catalog codes of every row; typed NumPy arrays take a vectorized path (one key per distinct value)."""
    if isinstance(y, np.ndarray) and y.dtype.kind in _TYPED_KINDS:
        uniques, inverse = np.unique(y, return_inverse=True)
        distinct = uniques.tolist()
        catalog = LabelCatalog(distinct)
        position = {key: i for i, key in enumerate(catalog.keys)}
        remap = np.array([position[semantic_key(v)] for v in distinct], dtype=np.int32)
        return remap[inverse.ravel()], catalog
    keys = np.empty(len(values), dtype=object)
    cache: dict[tuple[type, Any], str] = {}
    first: dict[str, Any] = {}
    for i, value in enumerate(values):
        try:
            ident = (type(value), value)
            key = cache.get(ident)
            if key is None:
                key = cache[ident] = semantic_key(value)
                first.setdefault(key, value)
        except TypeError:  # unhashable value
            raise InputTypeError(f"{argument}[{i}] = {value!r} is not a valid class label (unhashable "
                                 f"{type(value).__name__}); for multi-label data pass target_type='multi_label'") from None
        except (InputValidationError, InputTypeError) as exc:
            raise type(exc)(f"{argument}[{i}]: {exc}") from None
        keys[i] = key
    catalog = LabelCatalog(first.values())
    position = {key: i for i, key in enumerate(catalog.keys)}
    return np.fromiter((position[k] for k in keys), dtype=np.int32, count=len(keys)), catalog


#: Said when a multi-label refusal meets an (n, 1) matrix: usually one class id per row as a column
#: (``y.reshape(-1, 1)``, a one-column frame), not a one-label indicator.
_ONE_COLUMN_HINT = "; it has a single column: for one class label per row pass it 1-D (y.ravel())"


def numeric_targets(values: np.ndarray) -> np.ndarray | None:
    """``values`` as numbers: itself when its dtype is numeric, an object array of numbers (pandas' nullable types
    arrive so) as float64, None when it holds anything else (strings, even '1', are labels, not numbers)."""
    if values.dtype.kind in "biuf":
        return values
    if values.dtype.kind != "O" or any(isinstance(v, (str, bytes)) for v in values.flat):
        return None
    try:
        return values.astype(np.float64)
    except (TypeError, ValueError):
        return None


def _indicator_numbers(y: np.ndarray, argument: str | TargetSource) -> np.ndarray:
    """A 2-D array read as a 0/1 indicator matrix, refused with the fix when it holds no numbers (labels such as
    'cat' in a column: scipy's own error named a dtype, not the argument)."""
    numbers = numeric_targets(y)
    if numbers is not None:
        return numbers
    hint = _ONE_COLUMN_HINT if y.ndim == 2 and y.shape[1] == 1 else ""
    first = y.flat[0] if y.size else None
    example = f" such as {first.item() if isinstance(first, np.generic) else first!r}" if y.size else ""
    kind = {"U": "string", "S": "bytes", "O": "object"}.get(y.dtype.kind, y.dtype.name)
    raise InputValidationError(f"{argument} is a 2-D array of {kind} values{example}; 2-D targets are read as a "
                               "multi-label indicator matrix of 0/1 numbers, one column per label (or pass one "
                               "collection of labels per row, e.g. [{'a', 'b'}, {'c'}])" + hint)


def _multilabel(y: Any, label_names: Sequence[Any] | None, argument: str | TargetSource) -> MultiLabelTargets:
    hint = ""
    if is_sparse(y) or (isinstance(y, np.ndarray) and y.ndim == 2):
        if not is_sparse(y):
            y = _indicator_numbers(y, argument)
        indicator = sparse_module().csr_matrix(y)
        if indicator.shape[0] == 0:
            raise InputValidationError(f"{argument} is empty")
        hint = _ONE_COLUMN_HINT if indicator.shape[1] == 1 else ""
        data = indicator.data
        if data.size and not np.all((data == 0) | (data == 1)):
            raise InputValidationError(f"{argument} is a multi-label indicator and must hold only 0/1 values; "
                                       f"found {np.unique(data[(data != 0) & (data != 1)])[:5].tolist()}{hint}")
        indicator = sparse_module().csr_matrix((np.ones(indicator.nnz, np.int8), indicator.indices, indicator.indptr),
                                      shape=indicator.shape)
        indicator.eliminate_zeros()
        if label_names is None:
            names = list(range(indicator.shape[1]))
        else:
            names = list(label_names)
            if len(names) != indicator.shape[1]:
                raise InputValidationError(f"label_names has {len(names)} names but {argument} has "
                                           f"{indicator.shape[1]} indicator columns; give one name per column")
        keys = [semantic_key(n) for n in names]
        if len(set(keys)) != len(keys):
            dup = [n for n, k in zip(names, keys) if keys.count(k) > 1]
            raise InputValidationError(f"label_names has duplicates: {dup[:_SHOWN]}; every column needs a distinct label")
    else:
        if label_names is not None:
            raise InputValidationError("label_names only applies to 0/1 indicator targets; label sequences name their labels")
        rows = list(y)
        if not rows:
            raise InputValidationError(f"{argument} is empty")
        names_seen: dict[str, Any] = {}
        row_keys = []
        for i, row in enumerate(rows):
            if not _is_collection(row):
                raise InputValidationError(f"{argument}[{i}] = {row!r} is not a collection of labels; multi-label "
                                           "targets are sequences of label collections (e.g. [{'a', 'b'}, {'c'}])")
            ks = set()
            for value in row:
                try:
                    k = semantic_key(value)
                except (InputValidationError, InputTypeError) as exc:
                    raise type(exc)(f"{argument}[{i}]: {exc}") from None
                names_seen.setdefault(k, value)
                ks.add(k)
            row_keys.append(ks)
        catalog = LabelCatalog(names_seen.values())
        col = {k: j for j, k in enumerate(catalog.keys)}
        indptr = np.cumsum([0] + [len(ks) for ks in row_keys])
        indices = np.fromiter((col[k] for ks in row_keys for k in sorted(ks, key=col.__getitem__)), dtype=np.int32,
                              count=int(indptr[-1]))
        indicator = sparse_module().csr_matrix((np.ones(indices.size, np.int8), indices, indptr), shape=(len(rows), len(catalog)))
        names, keys = [catalog.value(k) for k in catalog.keys], list(catalog.keys)
    empty = np.flatnonzero(np.diff(indicator.indptr) == 0)
    if empty.size:
        raise InputValidationError(f"{argument}: rows {_rows_text(empty, argument)} have no label; every multi-label "
                                   "row needs at least one label (drop the rows, or add an explicit 'none' label and "
                                   f"exclude it){hint}")
    # Reorder columns into catalog order so column j is always catalog.keys[j].
    catalog = LabelCatalog(names)
    order = [keys.index(k) for k in catalog.keys]
    indicator = indicator[:, order].tocsr()
    indicator.sort_indices()
    targets = MultiLabelTargets(indicator, catalog)
    counts = targets.counts()
    unused = [catalog.display(k) for k, c in counts.items() if c == 0]
    if unused:
        raise InputValidationError(f"{argument}: label(s) {unused[:_SHOWN]} never occur; drop those indicator columns "
                                   "(and their label_names) before benchmarking")
    small = [f"{catalog.display(k)!r} ({c})" for k, c in counts.items() if c < 2]
    if small:
        raise InputValidationError(f"{argument}: label(s) {', '.join(small[:_SHOWN])} occur fewer than 2 times; each "
                                   "label needs at least 2 positive rows: drop it or merge it")
    if len(catalog) < 2:
        raise InputValidationError(f"{argument} has a single label; overlap needs at least two labels{hint}")
    return targets


def _regression(y: Any, target_names: Sequence[str] | None, argument: str | TargetSource) -> RegressionTargets:
    try:
        values = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputTypeError(f"{argument} must be numeric for target_type='regression'") from None
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or values.shape[1] == 0:
        raise InputValidationError(f"{argument} must be 1-D or 2-D (rows x targets) for regression, got shape {values.shape}")
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        raise InputValidationError(f"{argument} has NaN/inf regression targets at rows {_rows_text(np.flatnonzero(bad), argument)}; "
                                   "drop or impute them")
    if values.shape[0] < 3:
        raise InputValidationError(f"{argument} has {values.shape[0]} rows; regression scoring needs at least 3")
    names = tuple(target_names) if target_names is not None else tuple(
        f"target_{j}" for j in range(values.shape[1]))
    if len(names) != values.shape[1] or len(set(names)) != len(names):
        raise InputValidationError(f"target_names must give {values.shape[1]} distinct names, got {list(names)}")
    targets = RegressionTargets(values, names)
    if len(targets.constant_targets()) == values.shape[1]:
        raise InputValidationError(f"{argument}: every regression target is constant ({list(names)}); a constant "
                                   "target cannot be separated, so nothing can be scored")
    return targets

"""Ids, relevance grades and exclusions, read into one query-by-gallery CSR layout.

Relevance may be a NumPy matrix, a SciPy sparse matrix (read from its stored entries,
never densified) or an iterable of ``(query_id, gallery_id, grade)`` records.  Every
reader yields coordinates plus a way to name entry *i* in an error message; one
shared check then rejects non-finite, negative and duplicate entries, so records and
matrices fail the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..._base.sparse import is_sparse, sparse_module
from ...errors import InputTypeError, InputValidationError

#: How many offending ids an error message lists.
_SHOWN = 5
_MATRIX_HINT = ("a nested Python list is read as (query_id, gallery_id, grade) records; for a query-by-gallery "
                "matrix pass a NumPy/SciPy matrix or use RetrievalDataset.from_relevance_matrix(...)")

Coordinates = tuple[np.ndarray, np.ndarray, np.ndarray, Callable[[int], str]]


def shown(values: Sequence[Any]) -> str:
    """A short list of offending values for a message."""
    head = ", ".join(repr(v) for v in list(values)[:_SHOWN])
    return f"{head}{', ...' if len(values) > _SHOWN else ''} ({len(values)} in total)"


def _plain_id(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def check_id(value: Any, where: str) -> None:
    """Ids are str or int, never bool or float: ``True == 1 == 1.0`` would otherwise silently name id 1."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputTypeError(f"{where} is {value!r} of type {type(value).__name__}; ids must be str or int")


def build_ids(ids: Any, n: int, argument: str) -> tuple[tuple[Any, ...], dict[Any, int]]:
    """Validate ids (str or int, unique, one per row); ``None`` means the row positions 0..n-1."""
    if ids is None:
        values: list[Any] = list(range(n))
    else:
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise InputTypeError(f"{argument} must be a sequence of ids (str or int), got {type(ids).__name__}")
        values = [_plain_id(v) for v in (ids.tolist() if isinstance(ids, np.ndarray) else ids)]
    if len(values) != n:
        raise InputValidationError(f"{argument} has {len(values)} ids but there are {n} rows; give exactly one id "
                                   "per row")
    for position, value in enumerate(values):
        check_id(value, f"{argument}[{position}]")
    index: dict[Any, int] = {}
    for position, value in enumerate(values):
        if value in index:
            raise InputValidationError(f"{argument} has duplicate id {value!r} at positions {index[value]} and "
                                       f"{position}; every id must be unique")
        index[value] = position
    return tuple(values), index


def _describe(argument: str, query_ids: Sequence[Any], gallery_ids: Sequence[Any], rows: np.ndarray,
              cols: np.ndarray, by_record: bool) -> Callable[[int], str]:
    """Names entry i as ``relevance[7] (query 'q1', gallery 'd9')`` or ``relevance[0, 8] (...)``."""
    def describe(i: int) -> str:
        position = f"[{i}]" if by_record else f"[{rows[i]}, {cols[i]}]"
        return f"{argument}{position} (query {query_ids[rows[i]]!r}, gallery {gallery_ids[cols[i]]!r})"
    return describe


def _read_matrix(matrix: Any, query_ids: Sequence[Any], gallery_ids: Sequence[Any], argument: str) -> Coordinates:
    """Stored entries of a sparse matrix, or nonzero entries (NaN and inf included) of a dense one."""
    if not is_sparse(matrix):
        matrix = np.asarray(matrix)  # np.matrix (what SciPy's .todense() returns) indexes as 2-D rows
    shape = (len(query_ids), len(gallery_ids))
    if matrix.shape != shape:
        raise InputValidationError(f"{argument} has shape {tuple(matrix.shape)} but there are {shape[0]} queries and "
                                   f"{shape[1]} gallery items; it must be queries x gallery {shape}")
    dtype = matrix.dtype
    if dtype == object or not (np.issubdtype(dtype, np.number) or dtype == np.bool_) \
            or np.issubdtype(dtype, np.complexfloating):
        raise InputTypeError(f"{argument} must hold real numbers, got dtype {dtype}")
    if is_sparse(matrix):
        coo = matrix.tocoo()
        rows, cols, values = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)
    else:
        rows, cols = np.nonzero(matrix)
        values = matrix[rows, cols].astype(np.float64)
    return rows, cols, values, _describe(argument, query_ids, gallery_ids, rows, cols, by_record=False)


def _read_records(records: Any, query_index: Mapping[Any, int], gallery_index: Mapping[Any, int],
                  query_ids: Sequence[Any], gallery_ids: Sequence[Any], argument: str, with_grade: bool) -> Coordinates:
    """``(query_id, gallery_id, grade)`` records (``(query_id, gallery_id)`` pairs when ``with_grade`` is False)."""
    width = 3 if with_grade else 2
    form = "(query_id, gallery_id, grade)" if with_grade else "(query_id, gallery_id)"
    rows, cols, values = [], [], []
    for n, record in enumerate(records):
        if isinstance(record, (str, bytes)) or not hasattr(record, "__len__") or len(record) != width:
            raise InputValidationError(f"{argument}[{n}] is {record!r}; each record must be a {form} tuple"
                                       + (f" ({_MATRIX_HINT})" if with_grade else ""))
        query, gallery = _plain_id(record[0]), _plain_id(record[1])
        for value, index, side, ids in ((query, query_index, "query", query_ids),
                                        (gallery, gallery_index, "gallery", gallery_ids)):
            check_id(value, f"{argument}[{n}]'s {side} id")
            try:
                known = value in index
            except TypeError:
                known = False
            if not known:
                raise InputValidationError(f"{argument}[{n}] names {side} id {value!r}, which is not in {side}_ids "
                                           f"(first ids: {list(ids[:_SHOWN])}); fix the id or add the item")
        grade = _plain_id(record[2]) if with_grade else 1.0
        if not isinstance(grade, (int, float)):
            raise InputTypeError(f"{argument}[{n}] has grade {grade!r} of type {type(grade).__name__}; grades must be "
                                 "finite non-negative numbers")
        rows.append(query_index[query])
        cols.append(gallery_index[gallery])
        values.append(float(grade))
    r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    return r, c, np.asarray(values, dtype=np.float64), _describe(argument, query_ids, gallery_ids, r, c,
                                                                 by_record=True)


def _to_csr(coordinates: Coordinates, shape: tuple[int, int], what: str) -> Any:
    """Reject non-finite, negative and duplicate entries; keep the positive ones as sorted CSR."""
    rows, cols, values, describe = coordinates
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        i = int(bad[0])
        raise InputValidationError(f"{describe(i)} has {what} {float(values[i])!r}; {what}s must be finite and "
                                   f"non-negative ({bad.size} bad entr{'y' if bad.size == 1 else 'ies'})")
    keys = rows * shape[1] + cols
    order = np.argsort(keys, kind="stable")
    repeated = np.flatnonzero(np.diff(keys[order]) == 0)
    if repeated.size:
        first, second = int(order[repeated[0]]), int(order[repeated[0] + 1])
        raise InputValidationError(f"{describe(second)} repeats {describe(first)}; give each (query, gallery) pair "
                                   "once")
    keep = values > 0
    sparse = sparse_module()
    matrix = sparse.csr_matrix((values[keep], (rows[keep], cols[keep])), shape=shape, dtype=np.float64)
    matrix.sort_indices()
    return matrix


def _refuse_dataframe(value: Any, argument: str, form: str) -> None:
    """A DataFrame iterates over its column labels, which would be read as malformed records; say how to pass it."""
    if hasattr(value, "columns") and hasattr(value, "iloc"):
        raise InputTypeError(f"{argument} is a pandas DataFrame, which is read neither as records nor as a matrix: "
                             f"pass list(df.itertuples(index=False, name=None)) when its columns are {form}, or "
                             "df.to_numpy() when it is a queries x gallery grid (rows in query_ids order, columns "
                             "in gallery_ids order)")


def read_relevance(relevance: Any, query_index: Mapping[Any, int], gallery_index: Mapping[Any, int],
                   query_ids: Sequence[Any], gallery_ids: Sequence[Any], *, argument: str = "relevance") -> Any:
    """Relevance as a float64 CSR matrix of the positive grades (grade 0 means judged non-relevant)."""
    shape = (len(query_ids), len(gallery_ids))
    _refuse_dataframe(relevance, argument, "(query_id, gallery_id, grade)")
    if isinstance(relevance, np.ndarray) or is_sparse(relevance):
        coordinates = _read_matrix(relevance, query_ids, gallery_ids, argument)
    elif isinstance(relevance, (str, bytes, Mapping)) or not hasattr(relevance, "__iter__"):
        raise InputTypeError(f"{argument} must be a NumPy/SciPy queries x gallery matrix or an iterable of "
                             f"(query_id, gallery_id, grade) records, got {type(relevance).__name__}; turn a "
                             "{query: {gallery: grade}} mapping into records first")
    else:
        coordinates = _read_records(relevance, query_index, gallery_index, query_ids, gallery_ids, argument, True)
    return _to_csr(coordinates, shape, "grade")


def read_exclusions(exclusions: Any, query_index: Mapping[Any, int], gallery_index: Mapping[Any, int],
                    query_ids: Sequence[Any], gallery_ids: Sequence[Any], *, argument: str = "exclusions") -> Any:
    """Excluded (query, gallery) pairs as a CSR matrix of ones.

    ``"same_id"`` excludes every gallery item whose id equals the query's id (a query's
    own item in a shared collection); a matrix excludes its nonzero entries; any other
    iterable is read as ``(query_id, gallery_id)`` pairs.
    """
    shape = (len(query_ids), len(gallery_ids))
    if exclusions is None:
        return sparse_module().csr_matrix(shape, dtype=np.float64)
    if isinstance(exclusions, str) and exclusions == "same_id":
        exclusions = [(q, q) for q in query_ids if q in gallery_index]
    _refuse_dataframe(exclusions, argument, "(query_id, gallery_id)")
    if isinstance(exclusions, np.ndarray) or is_sparse(exclusions):
        rows, cols, values, describe = _read_matrix(exclusions, query_ids, gallery_ids, argument)
        marked = np.where(np.isfinite(values), values != 0, values)  # nonzero -> excluded; NaN stays an error
        coordinates = (rows, cols, marked, describe)
    elif isinstance(exclusions, (str, bytes, Mapping)) or not hasattr(exclusions, "__iter__"):
        raise InputTypeError(f"{argument} must be None, 'same_id', a queries x gallery matrix or an iterable of "
                             f"(query_id, gallery_id) pairs, got {exclusions!r:.60}")
    else:
        coordinates = _read_records(exclusions, query_index, gallery_index, query_ids, gallery_ids, argument, False)
    return _to_csr(coordinates, shape, "exclusion value")

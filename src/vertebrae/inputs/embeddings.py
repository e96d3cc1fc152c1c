"""Validation and normalization of embedding matrices (dense or SciPy sparse).

Sparse input stays sparse: it is checked on its stored values only and converted to
CSR without densifying.  Dense input is not copied unless a dtype change forces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from scipy import sparse

from .._base.sparse import is_sparse, sparse_module
from ..errors import InputTypeError, InputValidationError

#: How many offending row indices an error message lists.
_SHOWN = 5


def _first_rows(mask_rows: np.ndarray, first_row: int = 0) -> str:
    rows = np.flatnonzero(mask_rows) + first_row
    shown = ", ".join(str(int(r)) for r in rows[:_SHOWN])
    return f"{shown}{', ...' if rows.size > _SHOWN else ''} (0-based; {rows.size} row(s))"


def validate_embeddings(matrix: Any, *, argument: str = "embeddings", n_rows: int | None = None,
                        source: str = "", first_row: int = 0,
                        rows: tuple[str, str] | None = None) -> np.ndarray | sparse.csr_matrix:
    """Return ``matrix`` as a finite 2-D numeric ndarray or CSR matrix, or raise a clear error.

    ``n_rows`` is the row count the matrix must have (the dataset size); ``source``
    names who produced the matrix (an extractor) for the message; ``first_row``: the dataset row of the
    matrix's first row (a shard of rows), so the message names dataset rows; ``rows``: what the rows are when they
    are not the dataset's samples, as ``(plural noun, rule)``, e.g. ``("prompts", "one row per prompt, in
    dataset.flat_prompts order")``, so a row-count error gives the right fix.
    """
    where = f"{argument}{f' from {source}' if source else ''}"
    if is_sparse(matrix):
        if matrix.ndim != 2:
            raise InputValidationError(f"{where} must be 2-D, got a sparse array with {matrix.ndim} dimension(s)")
        csr = matrix.tocsr() if matrix.format != "csr" else matrix
        if not isinstance(csr, sparse_module().csr_matrix):
            csr = sparse_module().csr_matrix(csr)  # sparse arrays -> csr_matrix, sharing buffers where possible
        if not (np.issubdtype(csr.dtype, np.number) or csr.dtype == np.bool_) or np.issubdtype(csr.dtype, np.complexfloating):
            raise InputTypeError(f"{where} must hold real numbers, got dtype {csr.dtype}; cast it with .astype(np.float32)")
        data = csr.data
        bad = ~np.isfinite(data) if np.issubdtype(data.dtype, np.floating) else None
        if bad is not None and bad.any():
            row_of = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
            mask = np.zeros(csr.shape[0], dtype=bool)
            mask[row_of[bad]] = True
            raise InputValidationError(f"{where} has NaN or infinite stored values in rows "
                                       f"{_first_rows(mask, first_row)}; impute or drop those rows before benchmarking")
        result = csr
    else:
        if isinstance(matrix, (list, tuple)):
            lengths = {len(row) if hasattr(row, "__len__") else -1 for row in matrix}
            if len(lengths) > 1:
                raise InputValidationError(f"{where} is ragged: rows have lengths {sorted(lengths)[:5]}; "
                                           "every row must have the same number of features")
        try:
            array = np.asarray(matrix)
        except ValueError as exc:  # ragged nested sequences
            raise InputValidationError(f"{where} is ragged or not array-like ({exc}); every row needs the same width") from None
        if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise InputTypeError(f"{where} must be numeric, got dtype {array.dtype}; convert it to a float array")
        if np.issubdtype(array.dtype, np.complexfloating):
            raise InputTypeError(f"{where} must hold real numbers, got dtype {array.dtype}")
        if array.ndim != 2:
            fix = ("reshape a single feature with x.reshape(-1, 1)" if array.ndim == 1 else
                   "flatten or pool each row's other axes, e.g. x.reshape(len(x), -1)" if array.ndim > 2 else
                   "pass one row of features per sample")
            raise InputValidationError(f"{where} must be 2-D (rows x features), got shape {array.shape}; {fix}")
        if np.issubdtype(array.dtype, np.floating):
            finite = np.isfinite(array)
            if not finite.all():
                raise InputValidationError(f"{where} has NaN or infinite values in rows "
                                           f"{_first_rows(~finite.all(axis=1), first_row)}; impute or drop those rows")
        result = array
    if result.shape[0] == 0:
        raise InputValidationError(f"{where} is empty (0 rows); there is nothing to evaluate")
    if result.shape[1] == 0:
        raise InputValidationError(f"{where} has zero width (0 features); "
                                   + ("the extractor produced no features" if source else "give at least one column"))
    if n_rows is not None and result.shape[0] != n_rows:
        if rows is None:
            raise InputValidationError(f"{where} has {result.shape[0]} rows but the dataset has {n_rows}; "
                                       "embeddings must have exactly one row per sample, in dataset order")
        raise InputValidationError(f"{where} has {result.shape[0]} rows but there are {n_rows} {rows[0]}; "
                                   f"embeddings must have exactly {rows[1]}")
    return result


def embedding_metadata(matrix: np.ndarray | sparse.csr_matrix) -> dict[str, Any]:
    """Shape/dtype/sparsity facts recorded with every extractor result."""
    sparse_input = is_sparse(matrix)
    nbytes = (matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes) if sparse_input else matrix.nbytes
    return {
        "n_samples": int(matrix.shape[0]),
        "embedding_dim": int(matrix.shape[1]),
        "dtype": str(matrix.dtype),
        "sparse": bool(sparse_input),
        "nnz": int(matrix.nnz) if sparse_input else int(matrix.shape[0] * matrix.shape[1]),
        "logical_bytes": int(nbytes),
    }


def zero_rows(X: np.ndarray | sparse.csr_matrix) -> np.ndarray:
    """Indices of all-zero rows (they cannot be L2-normalized and stay at the origin)."""
    if is_sparse(X):
        if (X.data == 0).any():  # explicit stored zeros: count what is really non-zero
            return np.flatnonzero(np.asarray(abs(X).sum(axis=1)).ravel() == 0)
        return np.flatnonzero(np.diff(X.indptr) == 0)
    return np.flatnonzero(~X.any(axis=1))


#: Max-abs values a dependency gets as they are.  OverlapIndex L2-normalizes (and scores) in
#: float32, with its norms floored at float32's eps: a row whose largest value lies outside
#: roughly [1e-6, 1e12] loses its direction there (squares underflow, overflow, or the floor
#: wins; see docs/scoring.md).  Inside this range its float32 arithmetic is exact up to
#: rounding, so ordinary data takes the fast path: no check beyond two row reductions, no copy.
ORDINARY_MAX_ABS = (2.0**-20, 2.0**40)


def max_abs(X: np.ndarray | sparse.csr_matrix, *, per_row: bool) -> np.ndarray:
    """Largest absolute value of each row (``per_row``) or of the whole matrix, as float64.

    From the row max and min, so no ``abs(X)`` copy of a dense matrix is made.
    """
    axis = 1 if per_row else None
    high, low = X.max(axis=axis), X.min(axis=axis)
    if is_sparse(high):
        high, low = high.toarray().ravel(), low.toarray().ravel()
    high, low = np.asarray(high, dtype=np.float64), np.asarray(low, dtype=np.float64)
    return np.maximum(high, -low)


def unit_scaled(X: np.ndarray | sparse.csr_matrix, *, per_row: bool) -> np.ndarray | sparse.csr_matrix:
    """``X`` itself when its max-abs (of each row, or of the matrix) is ordinary; else a float64
    copy in which each row (or the whole matrix) is multiplied by a power of two that brings its
    max-abs into [0.5, 1).

    A power of two is exact in floating point: directions (per row) or the whole geometry
    (per matrix) are unchanged bit for bit, and a row scaled by 2**j gives exactly the same
    float32 unit vector in the dependency as the row itself.  That makes normalized scores
    independent of row scale from 1e-300 to 1e300.  Sparse input stays CSR (values scaled,
    structure copied).  All-zero rows stay zero.
    """
    peaks = max_abs(X, per_row=per_row)
    nonzero = peaks[peaks > 0]
    if ((nonzero >= ORDINARY_MAX_ABS[0]) & (nonzero <= ORDINARY_MAX_ABS[1])).all():
        return X
    shifts = -np.frexp(peaks)[1]  # peak = m * 2**e with m in [0.5, 1): multiply by 2**-e
    if is_sparse(X):
        data = np.ldexp(X.data.astype(np.float64), np.repeat(shifts, np.diff(X.indptr)) if per_row else shifts)
        return sparse_module().csr_matrix((data, X.indices.copy(), X.indptr.copy()), shape=X.shape)
    scaled = np.array(X, dtype=np.float64)
    return np.ldexp(scaled, shifts[:, None] if per_row else shifts, out=scaled)


def evaluated_matrix(X: np.ndarray | sparse.csr_matrix, normalize: bool) -> tuple[Any, np.ndarray]:
    """The matrix a dependency scores: float64 (at most one copy), L2 rows when ``normalize``.

    For dependencies that cast to float64 anyway, converting here once (and normalizing
    in place on that copy) avoids a second full copy.  Extreme scales are first brought
    into range by :func:`unit_scaled` (per row when normalizing, else the whole matrix),
    so neither the squares of the L2 norm nor a dependency's own arithmetic under- or
    overflows.  Returns the matrix and its zero rows.
    """
    from sklearn.preprocessing import normalize as sk_normalize

    Xf = unit_scaled(X, per_row=normalize)
    owned = Xf is not X
    if Xf.dtype != np.float64:
        Xf, owned = Xf.astype(np.float64), True
    zeros = zero_rows(Xf)
    if normalize:
        Xf = sk_normalize(Xf, norm="l2", copy=not owned)
    return Xf, zeros


#: Rows closer than this (after optional normalization) count as the same point.
_SAME_ROW_RTOL, _SAME_ROW_ATOL = 1e-9, 1e-12


def is_constant(matrix: np.ndarray | sparse.csr_matrix, *, normalize: bool = False) -> bool:
    """True when every row is the same point — after L2 normalization when ``normalize``
    (rows that are positive multiples of one vector then collapse too).  Such a space
    separates nothing, yet OverlapIndex reports it as perfectly separated.

    Almost every real matrix differs within its first rows, so those are compared first;
    only when they agree is the whole matrix checked.  Tolerances are relative to the
    matrix's own scale, so a matrix at 1e-200 is as varied as the same matrix at 1.
    """
    if matrix.shape[0] < 2:
        return True
    head = (matrix[:8].toarray() if is_sparse(matrix) else matrix[:8])
    head, _ = evaluated_matrix(head, normalize)
    if not _same_rows(head.min(axis=0), head.max(axis=0)):
        return False
    full, _ = evaluated_matrix(matrix, normalize)
    if is_sparse(full):
        return _same_rows(full.min(axis=0).toarray().ravel(), full.max(axis=0).toarray().ravel())
    return _same_rows(full.min(axis=0), full.max(axis=0))


def _same_rows(low: np.ndarray, high: np.ndarray) -> bool:
    """Column minima equal to column maxima within tolerances scaled to the largest value."""
    scale = max(float(np.abs(low).max()), float(np.abs(high).max()))
    return bool(np.allclose(low, high, rtol=_SAME_ROW_RTOL, atol=_SAME_ROW_ATOL * scale))


#: A space whose distinct rows are fewer than this share of its rows gets a warning (see distinct_rows).
DISTINCT_ROW_SHARE = 0.5


def is_collapsed(distinct: int, n_rows: int) -> bool:
    """Whether ``distinct`` points among ``n_rows`` rows are too few for OverlapIndex's score to be trusted."""
    return distinct < DISTINCT_ROW_SHARE * n_rows


def distinct_rows(matrix: np.ndarray | sparse.csr_matrix, *, normalize: bool = False) -> int:
    """How many different points the rows are (after L2 normalization when ``normalize``).

    OverlapIndex's score is unreliable on coincident rows (a constant space scores 1.0; two points
    under random labels outscore distinct ones), so a space that collapses many inputs onto few
    points -- binary codes of max-pooled outputs, a saturated layer -- can outrank every real one.
    Rows are compared through one seeded random projection, rounded at the tolerance
    :func:`is_constant` uses, block by block (no copy of the matrix); distinct rows that project to the
    same value are measure-zero.
    """
    n, width = matrix.shape
    direction = np.random.default_rng(0).standard_normal(width)
    projected = np.empty(n, dtype=np.float64)
    peak = float(max_abs(matrix, per_row=False))
    shift = 0 if peak == 0 else -int(np.frexp(peak)[1])  # one power of two for the whole matrix: exact
    for start in range(0, n, _SCALE_BLOCK_ROWS):
        block = matrix[start:start + _SCALE_BLOCK_ROWS]
        block = block.astype(np.float64) if is_sparse(block) else np.array(block, dtype=np.float64)
        # Scale before squaring: at 1e+-154 and beyond (or subnormal) the squares overflow or underflow.
        block = unit_scaled(block, per_row=True) if normalize else _times_power_of_two(block, shift)
        values = np.asarray(block @ direction).ravel()
        if normalize:
            squares = block.multiply(block).sum(axis=1) if is_sparse(block) else np.einsum("ij,ij->i", block, block)
            norms = np.sqrt(np.asarray(squares, dtype=np.float64).ravel())
            values = np.divide(values, norms, out=np.zeros_like(values), where=norms > 0)
        projected[start:start + len(values)] = values
    scale = float(np.abs(projected).max()) or 1.0
    return int(np.unique(np.round(projected / (scale * _SAME_ROW_RTOL))).size)


def _times_power_of_two(block: np.ndarray | sparse.csr_matrix, shift: int) -> np.ndarray | sparse.csr_matrix:
    """``block * 2**shift`` (float64, in place: the block is already a copy), exact in floating point."""
    if shift == 0:
        return block
    if is_sparse(block):
        block.data = np.ldexp(block.data, shift)
        return block
    return np.ldexp(block, shift, out=block)


#: A space is scale-dominated when its largest column standard deviation exceeds this multiple of the median one ...
SCALE_RATIO_THRESHOLD = 100.0
#: ... and the columns above that multiple hold more than this share of the mean squared row norm.
SCALE_NORM_SHARE = 0.5
#: Rows per block when summing a dense matrix (bounds the float64 temporary).
_SCALE_BLOCK_ROWS = 4096
#: Dominant columns named in the record and the warning.
_SCALE_SHOWN = 5


def column_scale(X: np.ndarray | sparse.csr_matrix) -> dict[str, Any] | None:
    """The record of a scale-dominated space (see ``SCALE_RATIO_THRESHOLD``), or None when no few columns dominate.

    L2 row normalization divides each row by its norm; when a few columns are orders of
    magnitude wider than the rest (raw tabular features: an area next to a ratio), they make
    up the norm, so after normalization they alone decide the geometry.  One pass over the
    stored values: CSR input is never densified, dense input is summed in float64 row blocks.
    """
    n, d = X.shape
    if is_sparse(X):
        total = np.bincount(X.indices, weights=X.data.astype(np.float64), minlength=d)
        squares = np.bincount(X.indices, weights=np.square(X.data, dtype=np.float64), minlength=d)
    else:
        total, squares = np.zeros(d), np.zeros(d)
        for start in range(0, n, _SCALE_BLOCK_ROWS):
            block = np.asarray(X[start:start + _SCALE_BLOCK_ROWS], dtype=np.float64)
            total += block.sum(axis=0)
            squares += np.einsum("ij,ij->j", block, block)
    mean_square = squares / n
    std = np.sqrt(np.maximum(mean_square - (total / n) ** 2, 0.0))
    median = float(np.median(std))
    if median <= 0.0 or mean_square.sum() <= 0.0:  # most columns constant: a ratio to the median says nothing
        return None
    ratio = float(std.max() / median)
    dominant = np.flatnonzero(std > SCALE_RATIO_THRESHOLD * median)
    share = float(mean_square[dominant].sum() / mean_square.sum())
    if ratio <= SCALE_RATIO_THRESHOLD or share <= SCALE_NORM_SHARE:
        return None
    order = dominant[np.argsort(-std[dominant], kind="stable")]
    return {"std_ratio": ratio, "n_dominant_columns": int(dominant.size),
            "dominant_columns": [int(j) for j in order[:_SCALE_SHOWN]], "norm_share": share,
            "threshold": SCALE_RATIO_THRESHOLD}


def scale_note(record: dict[str, Any]) -> str:
    """The DataWarning text of a scale-dominated space: what happens and how to standardize first."""
    shown = ", ".join(map(str, record["dominant_columns"]))
    more = record["n_dominant_columns"] - len(record["dominant_columns"])
    return (f"{record['n_dominant_columns']} column(s) dominate the row norms (column(s) {shown}"
            f"{f' and {more} more' if more > 0 else ''}: standard deviation up to {record['std_ratio']:,.0f}x the "
            f"median column's, {record['norm_share']:.0%} of the mean squared row norm), so L2 row normalization lets "
            "those columns decide the score; standardize the columns first, e.g. SklearnExtractor(name, "
            "StandardScaler()), or StandardScaler().fit_transform(X) before PrecomputedExtractor (docs/metrics.md, "
            "\"Column scale\")")


def column_scale_notes(embedding: Any) -> list[str]:
    """The scale note a result's embedding metadata records (the front door warns it as a DataWarning)."""
    record = embedding.get("column_scale") if isinstance(embedding, dict) else None
    return [] if not isinstance(record, dict) else [scale_note(record)]

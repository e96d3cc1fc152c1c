"""Validation and normalization of embedding matrices (dense or SciPy sparse).

Sparse input stays sparse: it is checked on its stored values only and converted to
CSR without densifying.  Dense input is not copied unless a dtype change forces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from scipy import sparse

from ._sparse import is_sparse, sparse_module
from .errors import InputTypeError, InputValidationError

#: How many offending row indices an error message lists.
_SHOWN = 5


def _first_rows(mask_rows: np.ndarray) -> str:
    rows = np.flatnonzero(mask_rows)
    shown = ", ".join(str(int(r)) for r in rows[:_SHOWN])
    return f"{shown}{', ...' if rows.size > _SHOWN else ''} ({rows.size} row(s))"


def validate_embeddings(matrix: Any, *, argument: str = "embeddings", n_rows: int | None = None,
                        source: str = "") -> np.ndarray | sparse.csr_matrix:
    """Return ``matrix`` as a finite 2-D numeric ndarray or CSR matrix, or raise a clear error.

    ``n_rows`` is the row count the matrix must have (the dataset size); ``source``
    names who produced the matrix (an extractor) for the message.
    """
    where = f"{argument}{f' from {source}' if source else ''}"
    if is_sparse(matrix):
        if matrix.ndim != 2:
            raise InputValidationError(f"{where} must be 2-D, got a sparse array with {matrix.ndim} dimension(s)")
        csr = matrix.tocsr() if matrix.format != "csr" else matrix
        if not isinstance(csr, sparse_module().csr_matrix):
            csr = sparse_module().csr_matrix(csr)  # sparse arrays -> csr_matrix, sharing buffers where possible
        if not np.issubdtype(csr.dtype, np.number) or np.issubdtype(csr.dtype, np.complexfloating):
            raise InputTypeError(f"{where} must hold real numbers, got dtype {csr.dtype}; cast it with .astype(np.float32)")
        data = csr.data
        bad = ~np.isfinite(data) if np.issubdtype(data.dtype, np.floating) else None
        if bad is not None and bad.any():
            row_of = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
            mask = np.zeros(csr.shape[0], dtype=bool)
            mask[row_of[bad]] = True
            raise InputValidationError(f"{where} has NaN or infinite stored values in rows {_first_rows(mask)}; "
                                       "impute or drop those rows before benchmarking")
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
            raise InputValidationError(f"{where} must be 2-D (rows x features), got shape {array.shape}; "
                                       "reshape a single feature with x.reshape(-1, 1)")
        if np.issubdtype(array.dtype, np.floating):
            finite = np.isfinite(array)
            if not finite.all():
                raise InputValidationError(f"{where} has NaN or infinite values in rows "
                                           f"{_first_rows(~finite.all(axis=1))}; impute or drop those rows")
        result = array
    if result.shape[0] == 0:
        raise InputValidationError(f"{where} is empty (0 rows); there is nothing to evaluate")
    if result.shape[1] == 0:
        raise InputValidationError(f"{where} has zero width (0 features); the extractor produced no features")
    if n_rows is not None and result.shape[0] != n_rows:
        raise InputValidationError(f"{where} has {result.shape[0]} rows but the dataset has {n_rows}; "
                                   "embeddings must have exactly one row per sample, in dataset order")
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


def evaluated_matrix(X: np.ndarray | sparse.csr_matrix, normalize: bool) -> tuple[Any, np.ndarray]:
    """The matrix the dependencies score: float64 (at most one copy), L2 rows when ``normalize``.

    OverlapIndex casts its input to float64 anyway, so converting here once (and
    normalizing in place on that copy) avoids a second full copy.  Zero rows cannot be
    normalized and stay at the origin; their indices are returned for a warning.
    """
    from sklearn.preprocessing import normalize as sk_normalize

    owned = X.dtype != np.float64
    Xf = X.astype(np.float64) if owned else X
    if is_sparse(Xf):
        if (Xf.data == 0).any():  # explicit stored zeros: count what is really non-zero
            zero_rows = np.flatnonzero(np.asarray(abs(Xf).sum(axis=1)).ravel() == 0)
        else:
            zero_rows = np.flatnonzero(np.diff(Xf.indptr) == 0)
    else:
        zero_rows = np.flatnonzero(~Xf.any(axis=1))
    if normalize:
        Xf = sk_normalize(Xf, norm="l2", copy=not owned)
    return Xf, zero_rows


def is_constant(matrix: np.ndarray | sparse.csr_matrix) -> bool:
    """True when every row is identical (such a space separates nothing).

    Almost every real matrix differs between its first rows, so those are compared
    first; only when they agree is the full column-spread check run.
    """
    if matrix.shape[0] < 2:
        return True
    if is_sparse(matrix):
        first = matrix[0]
        if any((matrix[i] != first).nnz for i in range(1, min(8, matrix.shape[0]))):
            return False
        spread = matrix.max(axis=0).toarray() - matrix.min(axis=0).toarray()
        return bool(np.all(spread == 0))
    if not np.all(matrix[:8] == matrix[0]):
        return False
    return bool(np.all(matrix == matrix[0]))

"""What every built-in metric checks of the embeddings it is called with, before any work.

A metric can be called on its own (``LinearProbeMetric()(X, labels)``, docs/metrics.md), where no dataset has
validated ``X``: a 1-D or 3-D array, strings, or NaN failed inside NumPy or LAPACK ("not enough values to unpack",
"Eigenvalues did not converge"), naming neither the argument nor the fix, and some metrics returned a score
computed from NaN.  The check costs one pass for the smallest and the largest value (NaN propagates into both),
which the probes' magnitude check reads anyway; only a failing matrix is scanned again, for the rows to name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._base.sparse import is_sparse
from ..errors import InputTypeError
from ..inputs.embeddings import validate_embeddings


#: The sparse formats whose rows the metrics index and whose ``.data`` holds exactly the stored values (COO, DIA,
#: LIL and DOK failed inside scipy, or read a DIA's padding as values).
SPARSE_FORMATS = ("csr", "csc")


def check_metric_embeddings(metric: str, embeddings: Any) -> float:
    """Refuse what metric ``metric`` cannot score (not a NumPy array or SciPy sparse matrix, not 2-D, not real
    numbers, no rows or columns, NaN or infinite values) with the argument, the rows and the fix; return the
    largest magnitude of a matrix that passes (0 for one without stored values)."""
    where = f"metric {metric!r}: embeddings"
    if not (is_sparse(embeddings) or isinstance(embeddings, np.ndarray)):
        raise InputTypeError(f"{where} must be a NumPy array or a SciPy sparse matrix (rows x features), got "
                             f"{type(embeddings).__name__}; pass np.asarray(embeddings)")
    if is_sparse(embeddings) and embeddings.format not in SPARSE_FORMATS:  # rows are indexed, .data is read
        raise InputTypeError(f"{where} is a SciPy sparse {type(embeddings).__name__}; metrics read CSR (or CSC) "
                             "rows: pass embeddings.tocsr()")
    if embeddings.ndim != 2 or embeddings.dtype.kind not in "biuf" or not all(embeddings.shape):
        validate_embeddings(embeddings, argument=where)  # raises, naming the shape or the dtype
    values = embeddings.data if is_sparse(embeddings) else embeddings
    if values.size == 0:
        return 0.0
    low, high = float(values.min()), float(values.max())
    if not (np.isfinite(low) and np.isfinite(high)):
        validate_embeddings(embeddings, argument=where)  # raises, naming the rows
    return max(abs(low), abs(high))

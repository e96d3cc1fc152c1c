"""StandardScaler's statistics as scikit-learn keeps them, for the probes that standardize without copying a fold.

Every probe standardizes each training fold as ``make_pipeline(StandardScaler(), ...)`` does, and its exactness
claim (equal to the scikit-learn pipeline) holds only if the columns it treats as constant are scikit-learn's: a
column whose variance is within the rounding error of the two-pass variance (``n eps var + (n eps mean)^2``,
Chan, Golub and LeVeque, 1983) keeps scale 1.  That bound needs the column's raw mean: a probe that works on
centered rows must pass the mean it removed, or a near-constant column with a large offset is scaled up by 1e8.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MetricError

EPS = np.finfo(np.float64).eps
#: The range of the largest magnitude every probe standardizes in float64: squares stay normal above 1e-150, and
#: fourth powers (LDA's Ledoit-Wolf shrinkage), summed over billions of rows, finite below 1e70.  Outside it the
#: standardization divides by an infinite or a zero variance (scikit-learn's pipeline too).  Measured: the three
#: probes give their unit-scale scores at 1e-150 ... 1e75 on one data set; LDA fails from 1e80, the others 1e155.
MAGNITUDE_RANGE = (1e-150, 1e70)


def check_magnitude(metric: str, largest: float) -> None:
    """Refuse embeddings a probe cannot standardize in float64 (``largest``: their largest magnitude, from
    :func:`~vertebrae.scoring.metric_embeddings.check_metric_embeddings`), with the fix, instead of a LAPACK failure
    (1e160: "eigenvalues did not converge") or chance scores (1e-300: every column reads as constant)."""
    low, high = MAGNITUDE_RANGE
    if largest > high or 0.0 < largest < low:
        raise MetricError(f"metric {metric!r}: the embedding's largest magnitude is {largest:.3g}, outside "
                          f"[{low:g}, {high:g}], where squares overflow or underflow float64 and standardizing "
                          "fails; rescale the embeddings (e.g. divide them by their largest magnitude)")


def standard_scale(var: np.ndarray, mean: np.ndarray, n: int) -> np.ndarray:
    """``StandardScaler.scale_`` from each column's variance and raw mean over ``n`` rows: the standard deviation,
    or 1 where the variance is within rounding of zero (a slightly negative variance from a difference of sums
    counts as zero)."""
    constant = var <= n * EPS * var + (n * mean * EPS) ** 2
    return np.where(constant, 1.0, np.sqrt(np.maximum(var, 0.0)))


def column_statistics(X: Any, sparse_input: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """StandardScaler's mean, scale and variance of the rows ``X`` (float64).  Sparse (CSR) columns take the
    corrected two-pass variance over their stored values plus the implicit zeros, as scikit-learn's
    ``mean_variance_axis`` does: ``E[x^2] - E[x]^2`` would leave rounding noise of the size of ``E[x]^2`` in a
    constant column and so scale it."""
    n = X.shape[0]
    if not sparse_input:
        mean = X.mean(axis=0, dtype=np.float64)
        var = X.var(axis=0, dtype=np.float64)
        return mean, standard_scale(var, mean, n), var
    X = X.tocsr()
    dim, columns = X.shape[1], X.indices
    values = X.data.astype(np.float64, copy=False)
    mean = np.bincount(columns, weights=values, minlength=dim) / n
    implicit = n - np.bincount(columns, minlength=dim)  # the zeros each column holds
    deviations = values - mean[columns]
    correction = np.bincount(columns, weights=deviations, minlength=dim) - implicit * mean
    var = (np.bincount(columns, weights=deviations * deviations, minlength=dim) + implicit * mean**2
           - correction**2 / n) / n
    return mean, standard_scale(var, mean, n), var

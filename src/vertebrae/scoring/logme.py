"""LogMEMetric: the LogME evidence of You et al., "LogME: Practical Assessment of Pre-trained Models for
Transfer Learning" (ICML 2021), implemented from the paper's equations.

Each target column y (one column per class, one-hot, or one per regression target) is
modelled as y = F w + noise with w ~ N(0, I/alpha) and noise ~ N(0, 1/beta).  With the
eigen-decomposition F^T F = V diag(sigma) V^T (or F F^T when there are fewer rows than
dimensions) and z = the coordinates of y on F's singular directions, every quantity of
the evidence is a sum over the r non-zero sigma_i:

    t_i = alpha + beta sigma_i,  gamma = sum beta sigma_i / t_i,  m^T m = sum beta^2 sigma_i z_i^2 / t_i^2,
    ||F m - y||^2 = sum (alpha / t_i)^2 z_i^2 + (||y||^2 - sum z_i^2),
    log p(y | F, alpha, beta) = n/2 log beta + r/2 log alpha - n/2 log 2 pi - beta/2 ||F m - y||^2
                                - alpha/2 m^T m - 1/2 sum log t_i

(the paper's D/2 log alpha - 1/2 log|A| with A = alpha I + beta F^T F reduces to the r terms).  The fixed
point alpha <- gamma / m^T m, beta <- (n - gamma) / ||F m - y||^2 maximizes it; LogME is the maximum
divided by n, averaged over the target columns.  Only the min(n, D)^2 Gram matrix is dense: CSR input
is never densified row by row, and ``max_dense_bytes`` bounds that matrix and its eigenvectors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_float, check_int
from .._base.sparse import is_sparse
from ..inputs.embeddings import evaluated_matrix
from ..errors import MetricError
from .metric_embeddings import check_metric_embeddings
from .metric_targets import metric_targets
from .metrics import check_metric_name

#: alpha / (beta sigma_max) above which the prior has switched every feature off (w = 0 to 1e-12 relative).
_ALPHA_LIMIT = 1e12
#: Dense float64 arrays of the Gram side held at once: the Gram matrix, its eigenvectors, LAPACK workspace.
GRAM_COPIES = 3


@dataclasses.dataclass(frozen=True)
class LogMEMetric(Config):
    """The LogME evidence per sample: how probable the targets are under a Bayesian linear model on the
    embedding, with its prior and noise precisions chosen to maximize that probability.

    Higher means a linear head on these features is expected to fit the targets
    better without overfitting.  Single-label targets are one-hot columns (one
    evidence per class, averaged); regression targets are used as given (one
    evidence per target, averaged; scaling a target by c shifts its evidence by
    -log|c| for every extractor alike).  Features are used as given: the evidence is
    invariant to rotations and to a common scaling of the features.  Computed on all
    rows at once (no held-out data), so groups do not apply and ``seed`` is unused.
    """

    max_iter: int = 100
    tol: float = 1e-8
    max_dense_bytes: int = 2**30
    name: str = "logme"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "LogME evidence score"
    supported_target_types: ClassVar[tuple[str, ...]] = ("single_label", "regression")
    #: Bumped whenever the same settings give other bytes (2: a column at the alpha -> infinity limit is converged).
    version: ClassVar[int] = 2

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("max_iter", check_int(owner, "max_iter", self.max_iter, minimum=1))
        self._set("tol", check_float(owner, "tol", self.tol, low=0.0, low_open=True))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))

    def identity(self) -> dict[str, Any]:
        """What the cache key hashes: the type, the version and every field."""
        return {"type": "logme", "version": self.version, **self.fingerprint()}

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        check_metric_embeddings(self.name, embeddings)
        n, dim = embeddings.shape
        targets = metric_targets(self.name, labels, target_metadata, n, self.supported_target_types)
        side = min(n, dim)
        dense_bytes = GRAM_COPIES * 8 * side * side
        if dense_bytes > self.max_dense_bytes:
            raise MetricError(f"metric {self.name!r}: the {side:,} x {side:,} Gram matrix of {n:,} rows x {dim:,} "
                              f"dimensions needs about {dense_bytes:,} bytes, over max_dense_bytes="
                              f"{self.max_dense_bytes:,}; raise LogMEMetric.max_dense_bytes or reduce the "
                              "embedding width (e.g. EmbeddingCompressionConfig)")
        Y = targets.columns()
        sigma, Z = spectrum(embeddings, Y)
        evidence, converged = maximize_evidence(sigma, Z, (Y * Y).sum(axis=0), n, self.max_iter, self.tol)
        per_target = dict(zip(targets.names, evidence.tolist()))
        notes = list(targets.warnings)
        if not converged.all():
            notes.append(f"the evidence maximization of {int((~converged).sum())} target column(s) did not converge "
                         f"within max_iter={self.max_iter} (tol={self.tol}); their evidence is the last iterate")
        return {"score": float(evidence.mean()),
                "diagnostics": {"per_target": per_target, "rank": int(sigma.size),
                                "unconverged_targets": int((~converged).sum())},
                "warnings": notes,
                "metadata": {"targets": "one-hot classes" if targets.target_type == "single_label" else "as given",
                             "gram": "features (D x D)" if dim <= n else "samples (n x n)",
                             "dense_shape": [side, side], "dense_bytes": dense_bytes,
                             "sparse_input": is_sparse(embeddings), "groups": "not used (no held-out data)"}}


def spectrum(F: Any, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-zero eigenvalues ``sigma`` (r,) of F^T F and the coordinates ``Z`` (r, T) of Y's columns on the
    matching left singular vectors of F (float64; CSR stays CSR, only the Gram matrix is dense)."""
    F, _ = evaluated_matrix(F, normalize=False)
    n, dim = F.shape
    if dim <= n:
        gram = F.T @ F
        sigma, V = np.linalg.eigh(gram.toarray() if is_sparse(gram) else gram)
        projected = V.T @ np.asarray(F.T @ Y)  # = diag(s) U^T Y
    else:
        gram = F @ F.T
        sigma, U = np.linalg.eigh(gram.toarray() if is_sparse(gram) else gram)
        projected = U.T @ Y
    keep = sigma > sigma.max(initial=0.0) * max(n, dim) * np.finfo(np.float64).eps
    sigma, projected = sigma[keep], projected[keep]
    return sigma, projected / np.sqrt(sigma)[:, None] if dim <= n else projected


def maximize_evidence(sigma: np.ndarray, Z: np.ndarray, y_squared: np.ndarray, n: int, max_iter: int,
                      tol: float) -> tuple[np.ndarray, np.ndarray]:
    """LogME of each target column (the module docstring's evidence at its fixed point, divided by ``n``) and
    whether its fixed-point iteration converged (relative change of alpha and beta below ``tol``).

    The maximum is taken over alpha in (0, infinity]: the limit alpha -> infinity (w = 0, pure noise with
    beta = n / ||y||^2) has a closed form, and it is the maximum when the features explain a column worse than
    noise does (the iteration then drives alpha up without converging) or reach it not at all (z = 0); such a
    column counts as converged, since its evidence is the closed form, not the iterate.
    """
    reached = (Z != 0).any(axis=0)
    evidence = (-math.log(2 * math.pi) + np.log(n / y_squared) - 1.0) / 2  # the alpha -> infinity limit
    converged = np.ones(Z.shape[1], dtype=bool)
    if reached.any():
        fitted, fitted_converged = _fixed_point(sigma, Z[:, reached], y_squared[reached], n, max_iter, tol)
        at_limit = fitted <= evidence[reached]
        evidence[reached] = np.where(at_limit, evidence[reached], fitted)
        # A column whose maximum is the limit is exact whether or not the iteration, drifting alpha towards
        # infinity, met its tolerance: only an evidence that is the last iterate can be unconverged.
        converged[reached] = fitted_converged | at_limit
    return evidence, converged


def _fixed_point(sigma: np.ndarray, Z: np.ndarray, y_squared: np.ndarray, n: int, max_iter: int,
                 tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Iterate alpha <- gamma / m^T m, beta <- (n - gamma) / ||F m - y||^2 from alpha = beta = 1."""
    s = sigma[:, None]
    z2 = Z * Z
    outside = np.maximum(y_squared - z2.sum(axis=0), 0.0)  # the part of y no feature direction reaches
    alpha = np.ones(Z.shape[1])
    beta = np.ones(Z.shape[1])
    converged = np.zeros(Z.shape[1], dtype=bool)
    for _ in range(max_iter):
        t = alpha + beta * s
        gamma = (beta * s / t).sum(axis=0)
        mm = (beta**2 * s * z2 / t**2).sum(axis=0)
        residual = ((alpha / t) ** 2 * z2).sum(axis=0) + outside
        new_alpha, new_beta = gamma / mm, (n - gamma) / residual
        converged = (np.abs(new_alpha - alpha) <= tol * alpha) & (np.abs(new_beta - beta) <= tol * beta)
        # alpha far above every beta sigma_i: w is ~0 and the evidence is the alpha -> infinity limit (the caller's)
        converged |= new_alpha > _ALPHA_LIMIT * new_beta * sigma.max()
        alpha, beta = np.where(converged, alpha, new_alpha), np.where(converged, beta, new_beta)
        if converged.all():
            break
    t = alpha + beta * s
    mm = (beta**2 * s * z2 / t**2).sum(axis=0)
    residual = ((alpha / t) ** 2 * z2).sum(axis=0) + outside
    evidence = (n / 2 * np.log(beta) + sigma.size / 2 * np.log(alpha) - n / 2 * math.log(2 * math.pi)
                - beta / 2 * residual - alpha / 2 * mm - np.log(t).sum(axis=0) / 2)
    return evidence / n, converged

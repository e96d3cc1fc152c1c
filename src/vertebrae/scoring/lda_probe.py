"""LDAProbeMetric: a shrinkage linear discriminant probe (Ledoit–Wolf), one covariance solve per fold.

Per training fold (standardized by ``StandardScaler``), the shared covariance is the prior-weighted sum of
each class's Ledoit–Wolf covariance, shrunk on that class's own standardized rows and scaled back
(``sum_k prior_k D_k ((1 - s_k) R_k + s_k mu_k I) D_k``: ``R_k`` the class's correlation matrix, ``D_k`` its
standard deviations, ``mu_k = trace(R_k) / D``, ``s_k`` the Ledoit–Wolf shrinkage of the standardized rows,
Ledoit and Wolf, "A well-conditioned estimator for large-dimensional covariance matrices", 2004).  One
solve against the class means (Cholesky; for a singular covariance, the least-squares solution scikit-learn
takes) gives the discriminants ``coef = cov^+ means`` and ``intercept = -means coef / 2 + log(prior)``; the
test fold is scored by balanced accuracy of the largest discriminant.  That is ``LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")`` inside
``make_pipeline(StandardScaler(), ...)`` on :class:`~vertebrae.LinearProbeMetric`'s folds.  Measured speed:
docs/metrics.md ("Closed-form probes").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_int
from .._base.sparse import is_sparse
from .._base.threads import limited_threads
from ..errors import MetricError
from .closed_form import StandardizedFold, check_dense_budget, fold_score, probe_folds, probe_payload, \
    scatter_scale, standardized_fold, training_classes
from .metrics import check_metric_name
from .probe_solver import fold_workers, map_folds

#: Dense float64 D x D arrays held at once: the shared covariance, one class's scatter, the solver's copy.
COVARIANCE_COPIES = 3


@dataclasses.dataclass(frozen=True)
class LDAProbeMetric(Config):
    """Held-out balanced accuracy of shrinkage linear discriminant analysis on standardized embeddings,
    averaged over ``n_splits`` folds.

    Estimates how well one shared, well-conditioned Gaussian covariance separates the class means: the
    probe a user gets from ``LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")``.  It needs no
    iterations and no regularization grid (the Ledoit–Wolf shrinkage is estimated), so it is the cheapest
    probe to *screen* a grid toward a linear probe (``ScreeningConfig(metric=LDAProbeMetric())``), and it
    stays stable with fewer rows than dimensions.  Single-label targets only; dense embeddings only (the
    covariance is dense anyway).  Folds are LinearProbeMetric's (seeded, stratified, grouped).
    """

    n_splits: int = 5
    max_dense_bytes: int = 2**30
    n_jobs: int | None = None
    name: str = "lda_probe"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "shrinkage LDA probe"
    supported_target_types: ClassVar[tuple[str, ...]] = ("single_label",)
    #: Folds are fitted on ``n_jobs`` threads, each on one BLAS thread, so the bytes are the same whatever the worker
    #: count (tests/test_closed_form_probes.py), hence not hashed; the dense budget counts every fold in flight.
    speed_only = ("n_jobs",)

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))

    def identity(self) -> dict[str, Any]:
        return {"type": "lda_probe", **self.fingerprint()}

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        target_type = (target_metadata or {}).get("target_type", "single_label")
        if target_type not in self.supported_target_types:
            raise MetricError(f"metric {self.name!r} (shrinkage LDA) is defined for single-label targets only, got "
                              f"{target_type}; use RidgeProbeMetric or LinearProbeMetric for {target_type} targets")
        if is_sparse(embeddings):
            raise MetricError(f"metric {self.name!r} (shrinkage LDA) needs dense embeddings (its covariance is dense "
                              "and scikit-learn's LinearDiscriminantAnalysis refuses sparse input); use "
                              "RidgeProbeMetric, which keeps sparse input sparse, or densify the embeddings")
        folds = probe_folds(self.name, self.n_splits, embeddings, labels, target_metadata, groups, seed,
                            self.supported_target_types)
        workers = fold_workers(self.n_jobs, len(folds.splits))
        check_dense_budget(self.name, embeddings.shape[1], COVARIANCE_COPIES * workers, self.max_dense_bytes,
                           "LDAProbeMetric.max_dense_bytes")
        codes = folds.targets.y

        def fit_split(split: tuple[np.ndarray, np.ndarray], scatter: ClassScatter) -> tuple[float, list[float]]:
            train, test = split
            fold = standardized_fold(embeddings, train, test)
            classes, coef, intercept, shrinkage = _discriminants(fold, codes[train], scatter, test)
            predicted = classes[(fold.test @ coef.T + intercept).argmax(axis=1)]
            return fold_score(folds.targets, test, predicted), shrinkage

        with limited_threads(1):  # the shared scatter too: the same bytes on any number of BLAS threads
            scatter = ClassScatter(embeddings, codes)
        outcomes = map_folds(lambda split: fit_split(split, scatter), folds.splits, workers=workers)
        scores, shrinkages = [score for score, _ in outcomes], [shrinkage for _, shrinkage in outcomes]
        return probe_payload(folds, scores, {"shrinkage": shrinkages}, {
            "model": 'LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")', "scaling": "StandardScaler()",
            "shrinkage": "Ledoit-Wolf, per class on its standardized rows"}, seed, self.n_splits)


class ClassScatter:
    """Every class's rows centered by the class mean (float64) and their Gram matrix, computed once per call: a
    training fold's class scatter is that Gram minus its test rows' (the folds' test rows partition the rows), so
    the folds together cost one pass over the rows instead of one each."""

    def __init__(self, embeddings: np.ndarray, codes: np.ndarray) -> None:
        self.rows, self.centered, self.grams = [], [], []
        for k in range(int(codes.max()) + 1):
            rows = np.flatnonzero(codes == k)
            block = embeddings[rows]
            centered = np.subtract(block, block.mean(axis=0, dtype=np.float64), dtype=np.float64)
            self.rows.append(rows)
            self.centered.append(centered)
            self.grams.append(centered.T @ centered)

    def fold(self, k: int, test: np.ndarray, unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The centered scatter (sum of outer products around the training rows' mean) of class ``k``'s training
        rows, in the input's coordinates, and their standard deviations in ``unit`` (the fold's standardization) as
        ``StandardScaler`` keeps them."""
        held_out = np.isin(self.rows[k], test)
        held = self.centered[k][held_out]
        kept = held_out.size - held.shape[0]
        shift = -held.sum(axis=0) / kept  # the training rows' mean (the class's rows sum to 0 here)
        scatter = self.grams[k] - held.T @ held
        mean_square = np.diagonal(scatter) / (kept * unit**2)
        scatter -= kept * np.outer(shift, shift)
        return scatter, scatter_scale(np.diagonal(scatter) / unit**2, mean_square, kept)


def _discriminants(fold: StandardizedFold, y: np.ndarray, scatter: ClassScatter,
                   test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """``(classes, coef, intercept, shrinkage per class)`` of shrinkage LDA on a standardized training fold
    (``y``: its class codes; ``test``: the fold's test rows, whose scatter ``scatter`` takes away)."""
    from scipy import linalg

    classes, local = training_classes(y)
    n, dim = fold.train.shape
    priors = np.bincount(local) / n
    means = np.empty((classes.size, dim))
    covariance = np.zeros((dim, dim))
    shrinkages = []
    for k, code in enumerate(classes):
        rows = fold.train[local == k]
        means[k] = rows.mean(axis=0)
        # LinearDiscriminantAnalysis standardizes each class (StandardScaler) before shrinking its covariance
        correlation, class_scale = scatter.fold(int(code), test, fold.scale)
        correlation /= rows.shape[0] * np.outer(fold.scale * class_scale, fold.scale * class_scale)
        Z = rows - means[k]
        Z /= class_scale
        shrunk, shrinkage = _ledoit_wolf(correlation, np.einsum("ij,ij->i", Z, Z))
        shrunk *= class_scale[:, None]
        shrunk *= class_scale[None, :]
        covariance += priors[k] * shrunk
        shrinkages.append(shrinkage)
    try:  # positive definite whenever a class was shrunk: one Cholesky solve
        coef = linalg.solve(covariance, means.T, assume_a="pos").T
    except (linalg.LinAlgError, ValueError):  # singular (no shrinkage, a constant column): the least-squares solution
        coef = linalg.lstsq(covariance, means.T)[0].T
    intercept = -0.5 * np.einsum("kd,kd->k", means, coef) + np.log(priors)
    return classes, coef, intercept, shrinkages


def _ledoit_wolf(S: np.ndarray, row_norms: np.ndarray) -> tuple[np.ndarray, float]:
    """The Ledoit–Wolf covariance of standardized, centered rows ``Z`` from ``S = Z^T Z / n`` and the squared row
    norms ``||z_i||^2`` (``S`` is overwritten), and the shrinkage.

    ``mu = trace(S) / D``; the shrinkage is ``min(b, d) / d`` with ``d = ||S - mu I||_F^2 / D`` and
    ``b = (sum_i ||z_i||^4 / n - ||S||_F^2) / (n D)`` (0 when ``b`` is 0, and for a single dimension).
    """
    n, dim = row_norms.size, S.shape[0]
    trace = float(np.trace(S))
    mu = trace / dim
    shrinkage = 0.0
    if dim > 1:
        squared = np.einsum("ij,ij->", S, S)
        beta = (row_norms @ row_norms / n - squared) / (dim * n)
        delta = (squared - 2.0 * mu * trace + dim * mu**2) / dim
        beta = min(beta, delta)
        shrinkage = 0.0 if beta == 0 else beta / delta
    S *= 1.0 - shrinkage
    S.flat[:: dim + 1] += shrinkage * mu
    return S, float(shrinkage)

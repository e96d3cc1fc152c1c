"""LDAProbeMetric: a shrinkage linear discriminant probe (Ledoit–Wolf), one covariance solve per fold.

Per training fold (standardized by ``StandardScaler``), the shared covariance is the prior-weighted sum of
each class's Ledoit–Wolf covariance, shrunk on that class's own standardized rows and scaled back
(``sum_k prior_k D_k ((1 - s_k) R_k + s_k mu_k I) D_k``: ``R_k`` the class's correlation matrix, ``D_k`` its
standard deviations, ``mu_k = trace(R_k) / D``, ``s_k`` the Ledoit–Wolf shrinkage of the standardized rows,
Ledoit and Wolf, "A well-conditioned estimator for large-dimensional covariance matrices", 2004).  One
solve against the class means (Cholesky; for a singular covariance, the least-squares solution scikit-learn
takes) gives the discriminants ``coef = cov^+ means`` and ``intercept = -means coef / 2 + log(prior)``; the
test fold is scored by balanced accuracy of the largest discriminant.  That is
``LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")`` inside ``make_pipeline(StandardScaler(), ...)`` on
:class:`~vertebrae.LinearProbeMetric`'s folds.  Measured speed: docs/metrics.md ("Closed-form probes").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_int
from .._base.sparse import is_sparse
from .._base.threads import map_single_threaded, thread_workers
from ..errors import MetricError
from .closed_form import check_dense_budget, fold_score, probe_folds, probe_payload, scatter_scale, \
    training_classes
from .metrics import check_metric_name

#: Dense float64 D x D arrays held at once per fold in flight: the shared covariance, one class's scatter, the
#: solver's copy (besides one Gram matrix per class, held for the whole call).
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
    #: Bumped when the same settings give other scores: 2 = each fold's StandardScaler statistics and class
    #: covariances read off the per-class Gram matrices, no standardized copy of the fold (equal to scikit-learn's
    #: to rounding; the bytes differ from version 1's).
    version: ClassVar[int] = 2

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))

    def identity(self) -> dict[str, Any]:
        return {"type": "lda_probe", "version": self.version, **self.fingerprint()}

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
        workers = thread_workers(self.n_jobs, len(folds.splits))
        codes = folds.targets.y
        check_dense_budget(self.name, embeddings.shape[1], int(codes.max()) + 1 + COVARIANCE_COPIES * workers,
                           self.max_dense_bytes, "LDAProbeMetric.max_dense_bytes")

        def fit_split(split: tuple[np.ndarray, np.ndarray], scatter: ClassScatter) -> tuple[float, list[float]]:
            train, test = split
            fit = _discriminants(scatter, codes[train], test)
            standardized = np.subtract(embeddings[test], fit.mean, dtype=np.float64)
            standardized /= fit.scale
            predicted = fit.classes[(standardized @ fit.coef.T + fit.intercept).argmax(axis=1)]
            return fold_score(folds.targets, test, predicted), fit.shrinkage

        scatter = ClassScatter(embeddings, codes, workers)
        outcomes = map_single_threaded(lambda split: fit_split(split, scatter), folds.splits, workers=workers)
        scores, shrinkages = [score for score, _ in outcomes], [shrinkage for _, shrinkage in outcomes]
        return probe_payload(folds, scores, {"shrinkage": shrinkages}, {
            "model": 'LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")', "scaling": "StandardScaler()",
            "shrinkage": "Ledoit-Wolf, per class on its standardized rows"}, seed, self.n_splits)


class ClassScatter:
    """Every class's rows centered by the class mean (float64), their Gram matrix and the overall mean, computed
    once per call.  A training fold's class scatter is that Gram minus its test rows' (the folds' test rows partition
    the rows), and the fold's ``StandardScaler`` statistics follow from the classes' (the total scatter is the
    within-class scatter plus the between-class one), so the folds together cost one pass over the rows and no fold
    is copied to be standardized."""

    def __init__(self, embeddings: np.ndarray, codes: np.ndarray, workers: int) -> None:
        self.n = embeddings.shape[0]
        self.overall_mean = embeddings.mean(axis=0, dtype=np.float64)
        self.rows = [np.flatnonzero(codes == k) for k in range(int(codes.max()) + 1)]

        def centered(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            block = embeddings[rows]
            mean = block.mean(axis=0, dtype=np.float64)
            rows_centered = np.subtract(block, mean, dtype=np.float64)
            return mean, rows_centered, rows_centered.T @ rows_centered

        # one class per worker, each product on one BLAS thread: the same bytes on any number of workers
        parts = map_single_threaded(centered, self.rows, workers=workers)
        self.means, self.centered, self.grams = ([part[i] for part in parts] for i in range(3))

    def training(self, k: int, in_test: np.ndarray) -> ClassFold:
        """The moments of class ``k``'s training rows in the fold whose test rows ``in_test`` marks (a mask over
        all rows); :meth:`scatter` gives their scatter matrix."""
        held_out = in_test[self.rows[k]]
        held = self.centered[k][held_out]
        kept = held_out.size - held.shape[0]
        shift = -held.sum(axis=0) / kept  # the training rows' mean minus the class's (its rows sum to 0 here)
        mean_square = (np.diagonal(self.grams[k]) - np.einsum("ij,ij->j", held, held)) / kept
        return ClassFold(k, kept, self.means[k] + shift, shift, mean_square - shift**2, mean_square, ~held_out, held)

    def scatter(self, part: ClassFold) -> np.ndarray:
        """The scatter matrix of ``part``'s rows around their mean (raw coordinates): the class's Gram matrix less
        its held-out rows' and the shift of the mean."""
        gram = self.grams[part.k] - part.held.T @ part.held
        gram -= part.count * np.outer(part.shift, part.shift)
        return gram

    def squared_norms(self, part: ClassFold, unit: np.ndarray) -> np.ndarray:
        """``||(x - mean) / unit||^2`` of the training rows of ``part``, without copying them: with ``c`` a row
        centered by the class's overall mean and ``s`` the training rows' shift, ``sum_j (c_j - s_j)^2 / unit_j^2``
        expanded, every row read in place."""
        inverse = 1.0 / unit**2
        rows = self.centered[part.k]
        norms = np.einsum("ij,ij,j->i", rows, rows, inverse) - 2.0 * (rows @ (part.shift * inverse))
        return norms[part.kept] + part.shift**2 @ inverse


@dataclasses.dataclass(frozen=True)
class ClassFold:
    """Class ``k``'s training rows of one fold: their count and mean, the mean's shift from the class's overall
    mean, each column's variance around their mean and mean square around the class's overall mean, which of the
    class's rows they are, and the class's held-out rows (centered by its overall mean)."""

    k: int
    count: int
    mean: np.ndarray
    shift: np.ndarray
    variance: np.ndarray
    mean_square: np.ndarray
    kept: np.ndarray
    held: np.ndarray


@dataclasses.dataclass(frozen=True)
class Discriminants:
    """Shrinkage LDA of one training fold: ``coef``/``intercept`` act on rows standardized by ``mean``/``scale``
    (the fold's ``StandardScaler``); ``shrinkage`` is each class's Ledoit–Wolf shrinkage."""

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    shrinkage: list[float]
    mean: np.ndarray
    scale: np.ndarray


def _discriminants(scatter: ClassScatter, y: np.ndarray, test: np.ndarray) -> Discriminants:
    """Shrinkage LDA on the training fold whose class codes are ``y`` and whose test rows are ``test``."""
    from scipy import linalg

    classes, local = training_classes(y)
    in_test = np.zeros(scatter.n, dtype=bool)
    in_test[test] = True
    per_class = [scatter.training(int(code), in_test) for code in classes]
    n = sum(part.count for part in per_class)
    priors = np.array([part.count for part in per_class]) / n
    # the fold's StandardScaler statistics: the total variance is the within-class plus the between-class one
    mean = priors @ np.array([part.mean for part in per_class])
    var = sum(part.count * (part.variance + (part.mean - mean) ** 2) for part in per_class) / n
    scale = scatter_scale(n * var, var + (mean - scatter.overall_mean) ** 2, n)
    dim = mean.size
    means = np.empty((classes.size, dim))
    covariance = np.zeros((dim, dim))
    shrinkages = []
    for k, part in enumerate(per_class):  # one class's scatter matrix at a time
        means[k] = (part.mean - mean) / scale
        # LinearDiscriminantAnalysis standardizes each class (StandardScaler) before shrinking its covariance
        correlation = scatter.scatter(part)
        class_scale = scatter_scale(np.diagonal(correlation) / scale**2, part.mean_square / scale**2, part.count)
        unit = scale * class_scale
        correlation /= part.count * np.outer(unit, unit)
        shrunk, shrinkage = _ledoit_wolf(correlation, scatter.squared_norms(part, unit))
        shrunk *= class_scale[:, None]
        shrunk *= class_scale[None, :]
        covariance += priors[k] * shrunk
        shrinkages.append(shrinkage)
    try:  # positive definite whenever a class was shrunk: one Cholesky solve
        coef = linalg.solve(covariance, means.T, assume_a="pos").T
    except (linalg.LinAlgError, ValueError):  # singular (no shrinkage, a constant column): the least-squares solution
        coef = linalg.lstsq(covariance, means.T)[0].T
    intercept = -0.5 * np.einsum("kd,kd->k", means, coef) + np.log(priors)
    return Discriminants(classes, coef, intercept, shrinkages, mean, scale)


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

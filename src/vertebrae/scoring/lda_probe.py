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
from .._base.threads import map_reusing_workspaces, map_single_threaded, thread_workers
from ..errors import MetricError
from .closed_form import (SameFoldsPreflight, check_dense_budget, fold_score, probe_folds, probe_payload,
                          training_classes)
from .metrics import check_metric_name
from .standard_scaling import EPS, standard_scale


@dataclasses.dataclass(frozen=True)
class LDAProbeMetric(SameFoldsPreflight, Config):
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
    #: Bumped when the same settings give other bytes: 2 = each fold's StandardScaler statistics and class
    #: covariances read off the per-class Gram matrices, no standardized copy of the fold; 3 = those Gram matrices
    #: summed from the held-out rows' (one per fold) and each fold's covariance accumulated before its scaling
    #: (equal to scikit-learn's to rounding; the bytes differ from version 2's); 4 = StandardScaler's rule for
    #: constant columns reads each column's mean where the scaler sees it (a near-constant column with a large offset
    #: was scaled by 1e8), and a column holding one value in a class's training rows has variance 0 exactly; 5 =
    #: LinearProbeMetric's fold notes (its version 7: classes by the user's label, classes of one row noted; the
    #: same scores).
    version: ClassVar[int] = 5

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))

    def identity(self) -> dict[str, Any]:
        """What the cache key hashes: the type, the version and every field but the speed-only ``n_jobs``."""
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
        check_dense_budget(self.name, embeddings.shape[1], held_matrices(len(folds.splits), workers),
                           self.max_dense_bytes, "LDAProbeMetric.max_dense_bytes")
        fits = fold_discriminants(embeddings, folds.targets.y, folds.splits, workers)
        scores = [fold_score(folds.targets, test, fit.predicted) for (_, test), fit in zip(folds.splits, fits)]
        return probe_payload(folds, scores, {"shrinkage": [fit.shrinkage for fit in fits]}, {
            "model": 'LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")', "scaling": "StandardScaler()",
            "shrinkage": "Ledoit-Wolf, per class on its standardized rows"}, seed, self.n_splits)


def held_matrices(n_folds: int, workers: int) -> int:
    """Dense float64 D x D matrices held at once: each fold's covariance sum, ``workers + 1`` class workspaces (the
    held-out Gram matrices, one per fold, their sum and a squaring buffer) and per worker the solver's copy of a
    covariance."""
    return n_folds + (workers + 1) * (n_folds + 2) + workers


@dataclasses.dataclass(frozen=True)
class Discriminants:
    """Shrinkage LDA of one training fold: ``coef``/``intercept`` act on rows standardized by the fold's
    ``StandardScaler`` (:class:`FoldScaler`); ``shrinkage`` is each class's Ledoit–Wolf shrinkage; ``predicted``: the
    class codes it predicts for the fold's test rows, in the order of the split's test indices."""

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    shrinkage: list[float]
    predicted: np.ndarray


def fold_discriminants(embeddings: np.ndarray, codes: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]],
                       workers: int) -> list[Discriminants]:
    """Shrinkage LDA of every training fold of ``splits`` (whose test rows partition the rows).

    A fold's covariance is ``S / (scale scale^T) + diag(r)`` with ``S = sum_k prior_k (1 - s_k) T_k / n_k``
    (``T_k`` the class's training scatter, raw coordinates) and ``r = sum_k prior_k s_k mu_k class_scale_k^2``;
    both sums are accumulated class by class, in class order, so the bytes do not depend on ``workers``.
    """
    n_folds = len(splits)
    fold_of = np.full(codes.size, -1)
    for f, (_, test) in enumerate(splits):
        fold_of[test] = f
    classes = int(codes.max()) + 1
    parts = map_single_threaded(lambda k: ClassRows(embeddings, np.flatnonzero(codes == k), fold_of, n_folds),
                                range(classes), workers=workers)
    scalers = [fold_scaler(parts, f, codes[train]) for f, (train, _) in enumerate(splits)]
    dim = embeddings.shape[1]
    scatter_sums = [np.zeros((dim, dim)) for _ in range(n_folds)]
    ridges = [np.zeros(dim) for _ in range(n_folds)]
    shrinkages: list[list[float]] = [[] for _ in range(n_folds)]
    shifts: list[list[np.ndarray]] = [[] for _ in range(n_folds)]
    # scratch arrays reused class after class: fresh D x D arrays cost their page faults every time (measured: a
    # 384 x 384 Gram product 0.59 ms into a reused array, 1.06 ms into a new one)
    rows = max(part.centered.shape[0] for part in parts)
    workspaces = map_reusing_workspaces(lambda part, workspace: class_shares(part, workspace, scalers), parts,
                                        lambda: (np.empty((n_folds + 2, dim, dim)), np.empty((rows, dim))),
                                        workers=workers)
    for shares in workspaces:  # in class order, while the next classes are computed
        for f, share in enumerate(shares):
            if share is not None:
                scatter_sums[f] += share.scatter
                shifts[f].append(share.shift)
                ridges[f] += share.ridge
                shrinkages[f].append(share.shrinkage)
    return map_single_threaded(
        lambda f: _solve(parts, scalers[f], f, scatter_sums[f], np.array(shifts[f]), ridges[f], shrinkages[f],
                         splits[f][1]), range(n_folds), workers=workers)


class ClassRows:
    """One class's rows, centered by the class mean in float64 and ordered by the fold that tests them, with each
    fold's column sums and sums of squares of its held-out rows: a training fold's class moments are the class's
    less its held-out rows'."""

    def __init__(self, embeddings: np.ndarray, rows: np.ndarray, fold_of: np.ndarray, n_folds: int) -> None:
        self.rows = rows = rows[np.argsort(fold_of[rows], kind="stable")]
        block = embeddings[rows]
        self.mean = block.mean(axis=0, dtype=np.float64)
        self.centered = np.subtract(block, self.mean, dtype=np.float64)
        self.bounds = np.searchsorted(fold_of[rows], np.arange(n_folds + 1))
        self.held_sums = np.array([self.held(f).sum(axis=0) for f in range(n_folds)])
        self.held_squares = np.array([np.einsum("ij,ij->j", self.held(f), self.held(f)) for f in range(n_folds)])
        self.counts = rows.size - np.diff(self.bounds)  # training rows per fold

    def held(self, f: int) -> np.ndarray:
        """The rows fold ``f`` tests (a view)."""
        return self.centered[self.bounds[f]:self.bounds[f + 1]]

    def shift(self, f: int) -> np.ndarray:
        """Fold ``f``'s training rows' mean minus the class's (the centered rows sum to 0)."""
        return -self.held_sums[f] / self.counts[f]

    def mean_square(self, f: int) -> np.ndarray:
        """Each column's mean square of fold ``f``'s training rows around the class mean."""
        return (self.held_squares.sum(axis=0) - self.held_squares[f]) / self.counts[f]

    def training_variance(self, f: int, diagonal: np.ndarray) -> np.ndarray:
        """Each column's variance in fold ``f``'s training rows from their scatter's ``diagonal``, 0 exactly where
        they hold one value: a difference of sums leaves rounding there, which StandardScaler's rule for constant
        columns would read as a variance once the class's rows are standardized (their mean is then near 0).  Only
        columns within that rounding of a constant (below ``(n eps mean)^2``) are looked at."""
        count = int(self.counts[f])
        variance = diagonal / count
        suspect = np.flatnonzero(variance <= (count * EPS * self.mean) ** 2)
        if suspect.size:
            training = np.concatenate([self.centered[:self.bounds[f], suspect],
                                       self.centered[self.bounds[f + 1]:, suspect]])
            variance[suspect[training.max(axis=0) == training.min(axis=0)]] = 0.0
        return variance


@dataclasses.dataclass(frozen=True)
class FoldScaler:
    """One training fold's ``StandardScaler`` statistics, its row count and the classes it holds."""

    mean: np.ndarray
    scale: np.ndarray
    count: int
    classes: np.ndarray


def fold_scaler(parts: list[ClassRows], f: int, training_codes: np.ndarray) -> FoldScaler:
    """Fold ``f``'s StandardScaler statistics from its classes': the total variance is the within-class plus the
    between-class one, so no fold is copied to be standardized."""
    classes, _ = training_classes(training_codes)
    counts = np.array([parts[k].counts[f] for k in classes])
    n = int(counts.sum())
    means = np.array([parts[k].mean + parts[k].shift(f) for k in classes])
    mean = (counts / n) @ means
    var = sum(count * (parts[k].mean_square(f) - parts[k].shift(f) ** 2 + (class_mean - mean) ** 2)
              for k, count, class_mean in zip(classes, counts, means)) / n
    return FoldScaler(mean, standard_scale(var, mean, n), n, classes)


@dataclasses.dataclass(frozen=True)
class ClassShare:
    """One class's term of one training fold's covariance before the fold's scaling: ``scatter - outer(shift,
    shift) + diag(ridge)``, i.e. the class's weighted training scatter matrix (raw coordinates) split into its part
    around the class's overall mean and the rank-one correction for the training rows' own mean."""

    scatter: np.ndarray
    shift: np.ndarray
    ridge: np.ndarray
    shrinkage: float


def class_shares(part: ClassRows, workspace: tuple[np.ndarray, np.ndarray],
                 scalers: list[FoldScaler]) -> list[ClassShare | None]:
    """A class's Ledoit–Wolf terms of every training fold (``None`` where the fold holds none of its rows).

    ``LinearDiscriminantAnalysis`` standardizes each class before shrinking its covariance: the class's
    correlation ``R = T / (n u u^T)`` (``T`` the training rows' scatter, ``u`` their standard deviations with
    StandardScaler's rule for constant columns) is shrunk to ``(1 - s) R + s mu I`` and scaled back.  The held-out
    rows' Gram matrices (one per fold) sum to the class's, so ``T = E - n d d^T`` with ``E`` that sum less one of
    them and ``d`` the shift of the training mean: one pass of products over the class's rows serves every fold,
    and the rank-one part enters ``||R||_F`` and the fold's covariance as vectors.  ``workspace``: ``n_folds + 2``
    D x D arrays and a row buffer, which the returned shares' scatter matrices live in.
    """
    n_folds = len(scalers)
    matrices, row_buffer = workspace
    cells, gram, buffer = matrices[:n_folds], matrices[n_folds], matrices[n_folds + 1]
    for f in range(n_folds):
        np.matmul(part.held(f).T, part.held(f), out=cells[f])
    np.add(cells[0], cells[1], out=gram)
    for cell in cells[2:]:
        gram += cell
    folds = [f for f in range(n_folds) if part.counts[f] > 0]
    moments = []
    for f in folds:  # each cell becomes its training rows' scatter around the class mean, in place
        count, shift, scale = int(part.counts[f]), part.shift(f), scalers[f].scale
        scatter = np.subtract(gram, cells[f], out=cells[f])
        diagonal = np.diagonal(scatter) - count * shift**2
        # the class's StandardScaler runs on the fold's standardized rows: its mean is the class's there
        class_mean = (part.mean + shift - scalers[f].mean) / scale
        class_scale = standard_scale(part.training_variance(f, diagonal) / scale**2, class_mean, count)
        weights = 1.0 / (scale * class_scale) ** 2  # 1 / u^2
        weighted_shift = shift * weights
        squared = (weights @ (np.multiply(scatter, scatter, out=buffer) @ weights)
                   - 2.0 * count * (weighted_shift @ (scatter @ weighted_shift))
                   + (count * (shift @ weighted_shift)) ** 2) / count**2  # ||R||_F^2
        moments.append((scatter, class_scale, weights, float(diagonal @ weights) / count, float(squared)))
    # each training row's ||(x - mean) / u||^2 for every fold at once: two products over the class's rows
    fold_weights = np.array([weights for _, _, weights, _, _ in moments]).T.copy()  # one column per fold
    shifts = np.array([part.shift(f) for f in folds]).T.copy()
    squares = np.multiply(part.centered, part.centered, out=row_buffer[:part.centered.shape[0]])
    norms = squares @ fold_weights - 2.0 * (part.centered @ (shifts * fold_weights))
    norms += np.einsum("jf,jf->f", shifts * shifts, fold_weights)
    shares: list[ClassShare | None] = [None] * n_folds
    for i, (f, (scatter, class_scale, _, trace, squared)) in enumerate(zip(folds, moments)):
        count, held = int(part.counts[f]), slice(part.bounds[f], part.bounds[f + 1])
        fourth = float(norms[:, i] @ norms[:, i] - norms[held, i] @ norms[held, i])
        shrinkage, mu = _ledoit_wolf(trace, squared, fourth, count, scatter.shape[0])
        weight = (1.0 - shrinkage) / scalers[f].count  # prior (count / total) times (1 - s) / count
        np.multiply(scatter, weight, out=scatter)
        shares[f] = ClassShare(scatter, np.sqrt(weight * count) * shifts[:, i],
                               count / scalers[f].count * shrinkage * mu * class_scale**2, shrinkage)
    return shares


def _ledoit_wolf(trace: float, squared: float, fourth: float, n: int, dim: int) -> tuple[float, float]:
    """The Ledoit–Wolf shrinkage ``s`` and target ``mu`` of ``n`` standardized, centered rows ``z_i`` in ``dim``
    columns from ``S = Z^T Z / n``'s trace, ``||S||_F^2`` and ``sum_i ||z_i||^4``.

    ``mu = trace(S) / dim``; ``s = min(b, d) / d`` with ``d = ||S - mu I||_F^2 / dim`` and
    ``b = (sum_i ||z_i||^4 / n - ||S||_F^2) / (n dim)`` (0 when ``b`` is 0, and for a single dimension).
    """
    mu = trace / dim
    if dim == 1:
        return 0.0, mu
    beta = (fourth / n - squared) / (dim * n)
    delta = (squared - 2.0 * mu * trace + dim * mu**2) / dim
    beta = min(beta, delta)
    return (0.0 if beta == 0 else beta / delta), mu


def _solve(parts: list[ClassRows], scaler: FoldScaler, f: int, scatter_sum: np.ndarray, shifts: np.ndarray,
           ridge: np.ndarray, shrinkages: list[float], test: np.ndarray) -> Discriminants:
    """One fold's discriminants from its covariance terms (``coef = cov^+ means``, ``intercept = -means coef / 2 +
    log(prior)``) and its predictions for the ``test`` rows."""
    from scipy import linalg

    inverse = 1.0 / scaler.scale
    covariance = scatter_sum  # finished and scaled in place: each fold's sum is used once
    covariance -= shifts.T @ shifts
    covariance *= inverse[:, None]
    covariance *= inverse[None, :]
    covariance.flat[:: covariance.shape[0] + 1] += ridge
    means = np.array([(parts[k].mean + parts[k].shift(f) - scaler.mean) * inverse for k in scaler.classes])
    try:  # positive definite whenever a class was shrunk: one Cholesky solve
        coef = linalg.cho_solve(linalg.cho_factor(covariance, check_finite=False), means.T, check_finite=False).T
    except (linalg.LinAlgError, ValueError):  # singular (no shrinkage, a constant column): the least-squares solution
        coef = linalg.lstsq(covariance, means.T)[0].T
    priors = np.array([parts[k].counts[f] for k in scaler.classes]) / scaler.count
    intercept = -0.5 * np.einsum("kd,kd->k", means, coef) + np.log(priors)
    # the test rows are every class's held-out rows, already centered by their class mean: x = c + class mean
    raw = np.ascontiguousarray((coef * inverse).T)
    predicted = np.empty(sum(part.rows.size for part in parts), dtype=scaler.classes.dtype)  # by row index
    for part in parts:
        decision = part.held(f) @ raw + (((part.mean - scaler.mean) @ raw) + intercept)[None, :]
        predicted[part.rows[part.bounds[f]:part.bounds[f + 1]]] = scaler.classes[decision.argmax(axis=1)]
    return Discriminants(scaler.classes, coef, intercept, shrinkages, predicted[test])

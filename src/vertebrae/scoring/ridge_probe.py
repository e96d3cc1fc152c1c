"""RidgeProbeMetric: a ridge classifier probe whose regularization is chosen by exact leave-one-out, in closed form.

Per training fold (standardized by ``StandardScaler``), one symmetric eigendecomposition gives the ridge
fit for every ``alpha`` of the grid: with the fold's centered, scaled rows ``X`` and ``P = X V`` (``X^T X =
V diag(w) V^T``; with no more rows than columns, ``X X^T = U diag(w) U^T`` and ``P = U diag(sqrt(w))``), the
fitted targets are ``P diag(1 / (w + alpha)) P^T Y`` and the leverages ``h = 1/n + rowsum(P**2 / (w + alpha))``
(the ``1/n`` is the unpenalized intercept), so the leave-one-out residuals are ``(Y - fitted) / (1 - h)``
exactly, for each alpha at the cost of one product.  The alpha of smallest mean squared leave-one-out
residual is kept (the first on ties) and scores the test fold: what ``RidgeClassifierCV(alphas)``
(``RidgeCV`` for regression) does inside ``make_pipeline(StandardScaler(), ...)``, on the same folds as
:class:`~vertebrae.LinearProbeMetric`.  Measured speed: docs/metrics.md ("Closed-form probes").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_float, check_int
from .._base.sparse import is_sparse
from .._base.threads import limited_threads, map_single_threaded, thread_workers
from ..errors import ConfigError, ConfigTypeError
from ..inputs.targets import TARGET_TYPES
from .closed_form import (SameFoldsPreflight, StandardizedFold, check_dense_budget, fold_score, probe_folds,
                          probe_payload, standardized_fold, training_classes)
from .metric_targets import MetricTargets
from .metrics import check_metric_name
from .standard_scaling import standard_scale

#: The default alphas: the 9 decades from 1e-2 to 1e6 (RidgeClassifierCV's own default is 0.1, 1, 10).  On
#: standardized features the useful alpha grows with the rows (the Gram matrix's eigenvalues do), so the grid
#: covers tens to tens of thousands of rows; a choice at either end is reported as a note.  Each alpha costs one
#: product of the fold's rows with its targets, so a finer grid is dearer only there.
DEFAULT_ALPHAS = tuple(float(10.0**k) for k in range(-2, 7))
#: Bytes of temporaries per product when scoring the alpha grid (a block of alphas, or of rows, at once).
PATH_BLOCK_BYTES = 64 * 2**20
#: Rows of P squared at once for the leverages (a temporary that stays in cache instead of a copy of P).
LEVERAGE_ROWS = 2048
#: Dense float64 arrays of the decomposition side held at once: the Gram matrix, its eigenvectors, LAPACK workspace.
GRAM_COPIES = 3


@dataclasses.dataclass(frozen=True)
class RidgeProbeMetric(SameFoldsPreflight, Config):
    """Held-out quality of a ridge classifier on standardized embeddings, its ``alpha`` chosen inside each
    training fold by exact leave-one-out over ``alphas``, averaged over ``n_splits`` folds.

    Estimates what a regularized linear probe reaches on the embedding, at the cost of one eigendecomposition
    per fold: balanced accuracy of a one-vs-rest ridge regression on ±1 targets (``RidgeClassifierCV``),
    macro-F1 for multi-label targets, R² of ``RidgeCV`` for regression.  Use it to *screen* a grid toward the
    probe a user will train (``ScreeningConfig(metric=RidgeProbeMetric())``) or as a cheap reference: it
    orders candidates much like the logistic probe, but it is a least-squares fit, not the logistic one, so
    confirm the pick with :class:`~vertebrae.LinearProbeMetric`.  Folds are LinearProbeMetric's (seeded,
    stratified, grouped); sparse input stays sparse (scaled without centering, the intercept absorbs the mean).
    """

    n_splits: int = 5
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    max_dense_bytes: int = 2**30
    n_jobs: int | None = None
    name: str = "ridge_probe"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "ridge classifier probe"
    supported_target_types: ClassVar[tuple[str, ...]] = TARGET_TYPES
    #: Folds are fitted on ``n_jobs`` threads, each on one BLAS thread, so the bytes are the same whatever the worker
    #: count (tests/test_closed_form_probes.py), hence not hashed; the dense budget counts every fold in flight.
    speed_only = ("n_jobs",)
    #: Bumped when the same settings give other bytes: 2 = StandardScaler's rule for constant columns reads each
    #: fold's raw column mean (a near-constant column with a large offset was scaled by 1e8); 3 = LinearProbeMetric's
    #: fold notes (its version 7: classes by the user's label, classes of one row noted; the same scores).
    version: ClassVar[int] = 3

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))
        if isinstance(self.alphas, (str, bytes)) or not hasattr(self.alphas, "__iter__"):
            raise ConfigTypeError(f"{owner}.alphas must be a sequence of positive numbers, got {self.alphas!r}")
        alphas = tuple(check_float(owner, f"alphas[{i}]", a, low=0.0, low_open=True) for i, a in enumerate(self.alphas))
        if not alphas or len(set(alphas)) != len(alphas):
            raise ConfigError(f"{owner}.alphas must be a non-empty sequence of distinct positive numbers, got "
                              f"{list(alphas)}")
        self._set("alphas", alphas)

    def identity(self) -> dict[str, Any]:
        """What the cache key hashes: the type, the version and every field but the speed-only ``n_jobs``."""
        return {"type": "ridge_probe", "version": self.version, **self.fingerprint()}

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        folds = probe_folds(self.name, self.n_splits, embeddings, labels, target_metadata, groups, seed,
                            self.supported_target_types)
        n, dim = embeddings.shape
        side = min(max(len(train) for train, _ in folds.splits), dim)
        workers = thread_workers(self.n_jobs, len(folds.splits))
        check_dense_budget(self.name, side, GRAM_COPIES * workers, self.max_dense_bytes,
                           "RidgeProbeMetric.max_dense_bytes")
        alphas = np.asarray(self.alphas)
        if not is_sparse(embeddings) and side == dim:
            with limited_threads(1):  # the shared Gram matrix too: the same bytes on any number of BLAS threads
                spectrum_of = FeatureSpectra(embeddings).fold
        else:
            def spectrum_of(train: np.ndarray, test: np.ndarray) -> Spectrum:
                return _spectrum(standardized_fold(embeddings, train, test))

        def fit_split(split: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
            train, test = split
            Y, decode = _encoded(folds.targets, train)
            best, decision = _ridge_path(spectrum_of(train, test), Y, alphas)
            return float(alphas[best]), fold_score(folds.targets, test, decode(decision))

        outcomes = map_single_threaded(fit_split, folds.splits, workers=workers)
        chosen, scores = [alpha for alpha, _ in outcomes], [score for _, score in outcomes]
        edge = sorted({a for a in chosen if a in (alphas.min(), alphas.max())})
        if edge and alphas.size > 1:
            folds.notes.append(f"the chosen alpha is at the end of the grid ({edge}) in some folds; widen alphas so "
                               "the choice is made inside it")
        return probe_payload(folds, scores, {"chosen_alphas": chosen}, {
            "model": _MODELS[folds.targets.target_type], "alphas": list(self.alphas),
            "selection": "exact leave-one-out mean squared error inside each training fold",
            "decomposition": _decompositions(folds.splits, dim, shared=not is_sparse(embeddings) and side == dim),
            "scaling": "StandardScaler(with_mean=False) (sparse input stays sparse)" if is_sparse(embeddings)
            else "StandardScaler()"}, seed, self.n_splits)


def _decompositions(splits: list[tuple[np.ndarray, np.ndarray]], dim: int, shared: bool) -> str | list[str]:
    """``metadata.decomposition``: which side each fold decomposed (dense rows with a fold of at least ``dim`` rows
    share the feature side; otherwise each fold takes the smaller side), one string when every fold took the same."""
    sides = ["features (D x D)" if shared or train.size > dim else "rows (n x n)" for train, _ in splits]
    return sides[0] if len(set(sides)) == 1 else sides


_MODELS = {"single_label": "RidgeClassifierCV", "multi_label": "RidgeClassifierCV (multi-label)",
           "regression": "RidgeCV"}


def _encoded(targets: MetricTargets, train: np.ndarray) -> tuple[np.ndarray, Any]:
    """The training fold's regression targets (±1 per class as ``RidgeClassifier`` encodes them: one column for two
    classes, one per class otherwise; ±1 per label; regression values as given) and how a test fold's decision
    values become predictions."""
    y = targets.y[train]
    if targets.target_type == "regression":
        return y.astype(np.float64), lambda decision: decision
    if targets.target_type == "multi_label":
        return 2.0 * y - 1.0, lambda decision: (decision > 0).astype(np.int8)
    classes, codes = training_classes(y)
    if classes.size == 2:
        return np.where(codes == 1, 1.0, -1.0)[:, None], lambda decision: classes[(decision[:, 0] > 0).astype(int)]
    return 2.0 * np.eye(classes.size)[codes] - 1.0, lambda decision: classes[decision.argmax(axis=1)]


def _ridge_path(spectrum: Spectrum, Y: np.ndarray, alphas: np.ndarray) -> tuple[int, np.ndarray]:
    """The index of the alpha with the smallest mean squared leave-one-out residual, and the test fold's decision
    values of the ridge fitted on the whole training fold with it."""
    w, P, test_factor = spectrum
    n = P.shape[0]
    mean = Y.mean(axis=0)
    Yc = Y - mean
    Q = P.T @ Yc
    inverse = 1.0 / (w[:, None] + alphas[None, :])
    leverage = np.empty((n, alphas.size))
    for start in range(0, n, LEVERAGE_ROWS):  # the squares of P a block of rows at a time (a small temporary)
        leverage[start:start + LEVERAGE_ROWS] = np.square(P[start:start + LEVERAGE_ROWS]) @ inverse
    leverage += 1.0 / n
    errors = np.empty(alphas.size)
    block = max(1, PATH_BLOCK_BYTES // (8 * n * Yc.shape[1]))
    for start in range(0, alphas.size, block):
        stop = min(start + block, alphas.size)
        weights = inverse[:, start:stop, None] * Q[:, None, :]
        residual = (P @ weights.reshape(P.shape[1], -1)).reshape(n, stop - start, Yc.shape[1])  # fitted, then
        np.subtract(residual, Yc[:, None, :], out=residual)  # the residual (its sign does not matter)
        residual /= 1.0 - leverage[:, start:stop, None]
        np.square(residual, out=residual)
        errors[start:stop] = residual.sum(axis=(0, 2)) / (n * Yc.shape[1])
    best = int(np.argmin(errors))
    return best, test_factor(inverse[:, best, None] * Q) + mean


#: ``(w, P, test_factor)`` of a training fold (see :func:`_spectrum`).
Spectrum = tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], np.ndarray]]


class FeatureSpectra:
    """:func:`_spectrum` of any fold of dense rows with more training rows than columns, at the cost of one Gram
    matrix of all rows: each fold's is that minus its test rows' (the folds' test rows partition the rows).

    The rows are centered once by their overall mean in float64 (so the subtraction loses nothing to a large
    mean); each fold is then centered and scaled by its own statistics (``StandardScaler``'s, read off the Gram
    matrix) inside the Gram matrix and the products, so no standardized copy of a fold is made.
    """

    def __init__(self, embeddings: np.ndarray) -> None:
        self.offset = embeddings.mean(axis=0, dtype=np.float64)
        self.rows = np.subtract(embeddings, self.offset, dtype=np.float64)
        self.gram, self.total = self.rows.T @ self.rows, self.rows.sum(axis=0)

    def fold(self, train: np.ndarray, test: np.ndarray) -> Spectrum:
        held = self.rows[test]
        scatter = self.gram - held.T @ held
        mean = (self.total - held.sum(axis=0)) / train.size
        scatter -= train.size * np.outer(mean, mean)
        scale = standard_scale(np.diagonal(scatter) / train.size, self.offset + mean, train.size)
        w, V = np.linalg.eigh(scatter / np.outer(scale, scale))
        V /= scale[:, None]  # coefficients on the unscaled, centered rows
        shift = mean @ V
        P = self.rows[train] @ V
        P -= shift

        def through_features(B: np.ndarray) -> np.ndarray:
            return held @ (V @ B) - shift @ B

        return w, P, through_features


def _spectrum(fold: StandardizedFold) -> Spectrum:
    """``(w, P, test_factor)`` of a training fold: ``P P^T`` is the centered rows' Gram matrix ``X X^T`` with
    ``P^T P = diag(w)``, and ``test_factor(B)`` is ``T V B``: the test rows' decision values for coefficients ``V B``.

    Sparse rows with more rows than columns: ``X^T X = V diag(w) V^T`` and ``P = X V`` (RidgeCV's "cov" mode;
    dense rows take :class:`FeatureSpectra`).  Otherwise ``X X^T = U diag(w) U^T`` and ``P = U diag(sqrt(w))``
    over the positive ``w`` (its "gram" mode); the test rows then reach the fold through ``T X^T`` only.  Sparse
    rows are centered implicitly by ``fold.offset``.
    """
    X, T, offset = fold.train, fold.test, fold.offset
    n, dim = X.shape
    if n > dim:
        gram = (X.T @ X).toarray() - n * np.outer(offset, offset)
        w, V = np.linalg.eigh(gram)
        shift = offset @ V
        P = _dense(X @ V) - shift

        def through_features(B: np.ndarray) -> np.ndarray:
            return _dense(T @ (V @ B)) - shift @ B

        return w, P, through_features
    kernel, cross = _dense(X @ X.T), _dense(T @ X.T)
    if offset is not None:  # the kernels of the centered rows, from those of the scaled rows
        row_means, total = kernel.mean(axis=1), kernel.mean()
        kernel += total - row_means[:, None] - row_means[None, :]
        cross += total - cross.mean(axis=1)[:, None] - row_means[None, :]
    w, U = np.linalg.eigh(kernel)
    keep = w > max(w.max(initial=0.0), 0.0) * n * np.finfo(np.float64).eps
    w, U = w[keep], U[:, keep]
    root = np.sqrt(w)

    def through_rows(B: np.ndarray) -> np.ndarray:
        return cross @ (U @ (B / root[:, None]))

    return w, U * root, through_rows


def _dense(matrix: Any) -> np.ndarray:
    return matrix.toarray() if is_sparse(matrix) else np.asarray(matrix)

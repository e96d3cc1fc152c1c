"""RidgeProbeMetric: a ridge classifier probe whose regularization is chosen in closed form, by exact leave-one-out
or by generalized cross-validation.

Per training fold (standardized by ``StandardScaler``), one symmetric eigendecomposition gives the ridge
fit for every ``alpha`` of the grid: with the fold's centered, scaled rows ``X`` and ``P = X V`` (``X^T X =
V diag(w) V^T``; with no more rows than columns, ``X X^T = U diag(w) U^T`` and ``P = U diag(sqrt(w))``), and the
centered targets' coordinates ``Q = P^T Y``, the fitted targets are ``P diag(1 / (w + alpha)) Q``.

* ``selection="loo"`` (the default): the leverages ``h = 1/n + rowsum(P**2 / (w + alpha))`` (the ``1/n`` is the
  unpenalized intercept) make the leave-one-out residuals ``(Y - fitted) / (1 - h)`` exact, for each alpha at the
  cost of one product with ``P``.  What ``RidgeClassifierCV(alphas)`` (``RidgeCV`` for regression) does inside
  ``make_pipeline(StandardScaler(), ...)``.
* ``selection="gcv"``: generalized cross-validation (Golub, Heath and Wahba 1979), ``|Y - fitted|^2 / (n (1 -
  tr(H) / n)^2)`` with ``tr(H) = 1 + sum(w / (w + alpha))``: leave-one-out with every leverage replaced by their
  mean.  It needs no row's coordinates, only ``w`` and ``Q`` (``|Y - fitted|^2`` is the alpha-free least-squares
  residual plus ``sum_j |Q_j|^2 alpha^2 / (w_j (w_j + alpha)^2)``, :func:`generalized_cross_validation`), so with
  more rows than columns a fold costs its decomposition and little else.

The alpha of the smallest criterion is kept (the first on ties) and scores the test fold, on the same folds as
:class:`~vertebrae.LinearProbeMetric`.  Measured speed: docs/metrics.md ("Closed-form probes").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np

from .._base.config import Config, check_choice, check_int, check_positive_floats
from .._base.sparse import is_sparse
from .._base.threads import map_single_threaded, thread_workers
from ..errors import ConfigError
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
    training fold over ``alphas`` (``selection``: exact leave-one-out, or generalized cross-validation),
    averaged over ``n_splits`` folds.

    Estimates what a regularized linear probe reaches on the embedding, at the cost of one eigendecomposition
    per fold: balanced accuracy of a one-vs-rest ridge regression on ±1 targets (``RidgeClassifierCV``),
    macro-F1 for multi-label targets, R² of ``RidgeCV`` for regression.  Use it to *screen* a grid toward the
    probe a user will train (``ScreeningConfig(metric=RidgeProbeMetric())``) or as a cheap reference: it
    orders candidates much like the logistic probe, but it is a least-squares fit, not the logistic one, so
    confirm the pick with :class:`~vertebrae.LinearProbeMetric`.  ``selection="gcv"`` skips the per-row
    leverages that leave-one-out needs, the dearest step on tall folds (docs/metrics.md).  Folds are
    LinearProbeMetric's (seeded, stratified, grouped); sparse input stays sparse (scaled without centering, the
    intercept absorbs the mean).
    """

    n_splits: int = 5
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    selection: str = "loo"
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
    #: fold's raw column mean (a near-constant column with a large offset was scaled by 1e8); 3 = dense folds'
    #: Gram matrices are sums of the test folds' (rounding differs), ``Q`` comes from the per-fold sums, and
    #: LinearProbeMetric's fold notes (its version 7: classes by the user's label, classes of one row noted); 4 = the
    #: Gram matrices are sums of ``CELLS_PER_FOLD`` cells per test fold (rounding differs).
    version: ClassVar[int] = 4

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("selection", check_choice(owner, "selection", self.selection, tuple(SELECTIONS)))
        self._set("max_dense_bytes", check_int(owner, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))
        alphas = check_positive_floats(owner, "alphas", self.alphas)
        if len(set(alphas)) != len(alphas):
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
        indicator = folds.targets.columns()
        shared = not is_sparse(embeddings) and side == dim
        if shared:
            spectra = FeatureSpectra(embeddings, folds.splits, indicator, workers)
            spectrum_of = spectra.fold
        else:
            def spectrum_of(index: int) -> Spectrum:
                train, test = folds.splits[index]
                return _spectrum(standardized_fold(embeddings, train, test))

        criterion, described = SELECTIONS[self.selection]

        def fit_split(index: int) -> tuple[float, float]:
            train, test = folds.splits[index]
            encoding = _encoding(folds.targets, train)
            Y = encoding.targets(indicator[train])
            best, decision = _ridge_path(spectrum_of(index), Y, encoding, alphas, criterion)
            return float(alphas[best]), fold_score(folds.targets, test, encoding.decode(decision))

        outcomes = map_single_threaded(fit_split, range(len(folds.splits)), workers=workers)
        chosen, scores = [alpha for alpha, _ in outcomes], [score for _, score in outcomes]
        edge = sorted({a for a in chosen if a in (alphas.min(), alphas.max())})
        if edge and alphas.size > 1:
            folds.notes.append(f"the chosen alpha is at the end of the grid ({edge}) in some folds; widen alphas so "
                               "the choice is made inside it")
        return probe_payload(folds, scores, {"chosen_alphas": chosen}, {
            "model": _MODELS[folds.targets.target_type], "alphas": list(self.alphas),
            "selection": described,
            "decomposition": _decompositions(folds.splits, dim, shared=shared),
            "scaling": "StandardScaler(with_mean=False) (sparse input stays sparse)" if is_sparse(embeddings)
            else "StandardScaler()"}, seed, self.n_splits)


def _decompositions(splits: list[tuple[np.ndarray, np.ndarray]], dim: int, shared: bool) -> str | list[str]:
    """``metadata.decomposition``: which side each fold decomposed (dense rows with a fold of at least ``dim`` rows
    share the feature side; otherwise each fold takes the smaller side), one string when every fold took the same."""
    sides = ["features (D x D)" if shared or train.size > dim else "rows (n x n)" for train, _ in splits]
    return sides[0] if len(set(sides)) == 1 else sides


_MODELS = {"single_label": "RidgeClassifierCV", "multi_label": "RidgeClassifierCV (multi-label)",
           "regression": "RidgeCV"}


@dataclasses.dataclass(frozen=True)
class Encoding:
    """A training fold's regression targets as an affine map of the target columns (``MetricTargets.columns()``):
    ``Y = columns[train] @ weights + offset``, so the dense path can read ``X^T Y`` off per-fold sums of
    ``X^T columns`` instead of a pass over the training rows; ``decode`` turns test decision values into
    predictions."""

    weights: np.ndarray
    offset: np.ndarray
    decode: Callable[[np.ndarray], np.ndarray]

    def targets(self, columns: np.ndarray) -> np.ndarray:
        return columns @ self.weights + self.offset


def _encoding(targets: MetricTargets, train: np.ndarray) -> Encoding:
    """How ``RidgeClassifier`` encodes a training fold's targets: ±1 per class (one column for two classes, one per
    class otherwise), ±1 per label, regression values as given."""
    width = targets.y.shape[1] if targets.y.ndim == 2 else len(targets.names)
    if targets.target_type == "regression":
        return Encoding(np.eye(width), np.zeros(width), lambda decision: decision)
    if targets.target_type == "multi_label":
        return Encoding(2.0 * np.eye(width), -np.ones(width), lambda decision: (decision > 0).astype(np.int8))
    classes, _ = training_classes(targets.y[train])
    if classes.size == 2:
        weights = np.zeros((width, 1))
        weights[classes, 0] = (-1.0, 1.0)
        return Encoding(weights, np.zeros(1), lambda decision: classes[(decision[:, 0] > 0).astype(int)])
    return Encoding(2.0 * np.eye(width)[:, classes], -np.ones(classes.size),
                    lambda decision: classes[decision.argmax(axis=1)])


def leave_one_out(spectrum: Spectrum, Yc: np.ndarray, Q: np.ndarray, alphas: np.ndarray,
                  inverse: np.ndarray) -> np.ndarray:
    """Per alpha: the mean of ``((Y - fitted) / (1 - h))**2`` over rows and target columns, ``h`` each row's
    leverage: exact leave-one-out, at the cost of the training rows' coordinates ``P``."""
    P = spectrum.coordinates()
    n = P.shape[0]
    leverage = np.empty((n, inverse.shape[1]))
    for start in range(0, n, LEVERAGE_ROWS):  # the squares of P a block of rows at a time (a small temporary)
        leverage[start:start + LEVERAGE_ROWS] = np.square(P[start:start + LEVERAGE_ROWS]) @ inverse
    leverage += 1.0 / n
    errors = np.empty(inverse.shape[1])
    block = max(1, PATH_BLOCK_BYTES // (8 * n * Yc.shape[1]))
    for start in range(0, inverse.shape[1], block):
        stop = min(start + block, inverse.shape[1])
        weights = inverse[:, start:stop, None] * Q[:, None, :]
        residual = (P @ weights.reshape(P.shape[1], -1)).reshape(n, stop - start, Yc.shape[1])  # fitted, then
        np.subtract(residual, Yc[:, None, :], out=residual)  # the residual (its sign does not matter)
        residual /= 1.0 - leverage[:, start:stop, None]
        np.square(residual, out=residual)
        errors[start:stop] = residual.sum(axis=(0, 2)) / (n * Yc.shape[1])
    return errors


def generalized_cross_validation(spectrum: Spectrum, Yc: np.ndarray, Q: np.ndarray, alphas: np.ndarray,
                                 inverse: np.ndarray) -> np.ndarray:
    """Generalized cross-validation, per alpha: ``|Y - fitted|^2 / (n k (1 - tr(H) / n)^2)`` over ``n`` rows and
    ``k`` target columns, ``tr(H) = 1 + sum(w / (w + alpha))`` over the decomposition's nonzero axes (the intercept
    counts one): leave-one-out with every leverage replaced by their mean, so no row's coordinates.  The residual is
    the alpha-free least-squares residual plus ``sum_j |Q_j|^2 alpha^2 / (w_j (w_j + alpha)^2)``: every term exact,
    where ``|Y|^2`` less the explained part would be all rounding once the fit nearly interpolates (rows <= width).
    """
    n, kept = Yc.shape[0], spectrum.kept
    w = spectrum.w[kept]
    shrunk = np.square(Q[kept]).sum(axis=1) / w
    residual = spectrum.unexplained(Yc, Q) + shrunk @ np.square(alphas[None, :] * inverse[kept])
    slack = 1.0 - (1.0 + w @ inverse[kept]) / n
    with np.errstate(divide="ignore", invalid="ignore"):  # tr(H) < n for every alpha > 0; the guard is for rounding
        return np.where(slack > 0, residual / (n * Yc.shape[1] * np.square(slack)), np.inf)


#: ``selection`` -> its criterion and how ``metadata.selection`` names it.
SELECTIONS = {"loo": (leave_one_out, "exact leave-one-out mean squared error inside each training fold"),
              "gcv": (generalized_cross_validation,
                      "generalized cross-validation (GCV) mean squared error inside each training fold")}


def _ridge_path(spectrum: Spectrum, Y: np.ndarray, encoding: Encoding, alphas: np.ndarray,
                criterion: Callable[..., np.ndarray]) -> tuple[int, np.ndarray]:
    """The index of the alpha with the smallest ``criterion``, and the test fold's decision values of the ridge
    fitted on the whole training fold with it."""
    mean = Y.mean(axis=0)
    Yc = Y - mean
    Q = spectrum.project(Yc, encoding, mean)
    inverse = 1.0 / (spectrum.w[:, None] + alphas[None, :])
    best = int(np.argmin(criterion(spectrum, Yc, Q, alphas, inverse)))
    return best, spectrum.test_factor(inverse[:, best, None] * Q) + mean


@dataclasses.dataclass(frozen=True)
class Spectrum:
    """A training fold's eigendecomposition: ``w``, the eigenvalues; ``coordinates()``, ``P`` (its rows on the
    principal axes, ``P^T P = diag(w)``, made only when leave-one-out asks); ``project(Yc, encoding, mean)``,
    ``Q = P^T Yc``; ``unexplained(Yc, Q)``, the least-squares residual ``|Yc - P diag(1 / w) Q|^2`` over the
    nonzero axes; ``test_factor(B)``, the test rows' decision values for coordinates ``B``."""

    w: np.ndarray
    coordinates: Callable[[], np.ndarray]
    project: Callable[[np.ndarray, Encoding, np.ndarray], np.ndarray]
    unexplained: Callable[[np.ndarray, np.ndarray], float]
    test_factor: Callable[[np.ndarray], np.ndarray]

    @property
    def kept(self) -> np.ndarray:
        return nonzero_axes(self.w)


def nonzero_axes(w: np.ndarray) -> np.ndarray:
    """The axes above the eigensolver's rounding (``max(w) * size * eps``): the rest carry nothing."""
    return w > max(w.max(initial=0.0), 0.0) * w.size * np.finfo(np.float64).eps


#: Cells per test fold: each test fold's rows are cut in two, a cut that does not depend on the thread count (so the
#: bytes do not either) and keeps two threads busy to the end, where five fold-sized cells on two threads left one
#: idle for a fifth of the time (20,000 rows: 81 ms -> 62 ms on two cores).  A fixed count, not a row size, so the
#: cells' Gram matrices held at once stay ``2 x n_splits`` however many rows there are.
CELLS_PER_FOLD = 2


class FoldCell(NamedTuple):
    """Some test rows (``index``; centered by the overall mean, float64) and the sums that training folds are made of."""

    index: np.ndarray
    rows: np.ndarray
    gram: np.ndarray
    total: np.ndarray
    cross: np.ndarray


class FeatureSpectra:
    """The :class:`Spectrum` of any fold of dense rows with more training rows than columns, at the cost of one Gram
    matrix of all rows, made of cells of the test folds' rows (which partition the rows): a fold's is the sum less
    its own cells'.

    The rows are centered once by their overall mean in float64 (so the subtraction loses nothing to a large
    mean), one cell at a time; each fold is then centered and scaled by its own statistics (``StandardScaler``'s,
    read off the Gram matrix) inside the Gram matrix and the products, so no standardized copy of a fold is made.
    The cells' sums of ``rows^T columns`` give each fold's ``X^T Y`` without a pass over its training rows.
    """

    def __init__(self, embeddings: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]], columns: np.ndarray,
                 workers: int) -> None:
        self.splits = splits
        self.offset = embeddings.mean(axis=0, dtype=np.float64)

        def cell(index: np.ndarray) -> FoldCell:
            held = np.subtract(embeddings[index], self.offset, dtype=np.float64)
            return FoldCell(index, held, held.T @ held, held.sum(axis=0), held.T @ columns[index])

        pieces = [index for _, test in splits for index in np.array_split(test, CELLS_PER_FOLD)]
        made = map_single_threaded(cell, pieces, workers=workers)  # one BLAS thread each: the same bytes
        cells = [made[start:start + CELLS_PER_FOLD] for start in range(0, len(made), CELLS_PER_FOLD)]
        self.held = [_sums([(cell.gram, cell.total, cell.cross) for cell in fold]) for fold in cells]
        self.gram, self.total, self.cross = _sums(self.held)  # each test fold's (gram, total, cross), then all rows'
        self.rows = [[(cell.index, cell.rows) for cell in fold] for fold in cells]  # the cells' sums are dropped
        self.n_rows = embeddings.shape[0]

    def fold(self, index: int) -> Spectrum:
        train, _ = self.splits[index]
        held_gram, held_total, held_cross = self.held[index]
        scatter = self.gram - held_gram
        total = self.total - held_total
        mean = total / train.size
        scatter -= train.size * np.outer(mean, mean)
        scale = standard_scale(np.diagonal(scatter) / train.size, self.offset + mean, train.size)
        w, V = np.linalg.eigh(scatter / np.outer(scale, scale))
        V /= scale[:, None]  # coefficients on the unscaled, centered rows
        shift = mean @ V
        cross = self.cross - held_cross

        def coordinates() -> np.ndarray:
            position = np.empty(self.n_rows, dtype=np.intp)  # a row's place among the fold's training rows
            position[train] = np.arange(train.size)
            P = np.empty((train.size, V.shape[1]))
            for fold in self.rows[:index] + self.rows[index + 1:]:
                for rows_index, rows in fold:
                    P[position[rows_index]] = rows @ V
            P -= shift
            return P

        def project(Yc: np.ndarray, encoding: Encoding, target_mean: np.ndarray) -> np.ndarray:
            # X_train^T Yc = rows_train^T Y - total mean_Y^T, and rows_train^T Y = cross W + total offset^T
            return V.T @ (cross @ encoding.weights + np.outer(total, encoding.offset - target_mean))

        def unexplained(Yc: np.ndarray, Q: np.ndarray) -> float:
            # more rows than columns: the residual is of the order of |Yc|^2, so the difference loses nothing
            kept = nonzero_axes(w)
            return max(float(np.square(Yc).sum() - np.square(Q[kept]).sum(axis=1) @ (1.0 / w[kept])), 0.0)

        def through_features(B: np.ndarray) -> np.ndarray:
            VB = V @ B
            return np.concatenate([rows @ VB for _, rows in self.rows[index]]) - shift @ B

        return Spectrum(w, coordinates, project, unexplained, through_features)


def _sums(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """The element-wise sums of equal-shaped tuples of arrays, added in list order (so the bytes are fixed)."""
    return tuple(sum(column[1:], column[0]) for column in zip(*parts))


def _spectrum(fold: StandardizedFold) -> Spectrum:
    """The :class:`Spectrum` of a training fold that :class:`FeatureSpectra` does not take: ``P P^T`` is the
    centered rows' Gram matrix ``X X^T``.

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

        return _explicit(w, P, through_features)
    kernel, cross = _dense(X @ X.T), _dense(T @ X.T)
    if offset is not None:  # the kernels of the centered rows, from those of the scaled rows
        row_means, total = kernel.mean(axis=1), kernel.mean()
        kernel += total - row_means[:, None] - row_means[None, :]
        cross += total - cross.mean(axis=1)[:, None] - row_means[None, :]
    w, U = np.linalg.eigh(kernel)
    keep = nonzero_axes(w)  # the n x n kernel's n eigenvalues
    w, U = w[keep], U[:, keep]
    root = np.sqrt(w)

    def through_rows(B: np.ndarray) -> np.ndarray:
        return cross @ (U @ (B / root[:, None]))

    return _explicit(w, U * root, through_rows)


def _explicit(w: np.ndarray, P: np.ndarray, test_factor: Callable[[np.ndarray], np.ndarray]) -> Spectrum:
    """A :class:`Spectrum` whose coordinates ``P`` are already made (the decomposition needed them), so its
    least-squares residual is computed row by row, exact even where the fit nearly interpolates."""

    def unexplained(Yc: np.ndarray, Q: np.ndarray) -> float:
        kept = spectrum.kept
        return float(np.square(Yc - P[:, kept] @ (Q[kept] / w[kept, None])).sum())

    spectrum = Spectrum(w, lambda: P, lambda Yc, encoding, mean: P.T @ Yc, unexplained, test_factor)
    return spectrum


def _dense(matrix: Any) -> np.ndarray:
    return matrix.toarray() if is_sparse(matrix) else np.asarray(matrix)

"""LinearProbeMetric: the cross-validated score of a standardized linear model, as a user would train it, solved exactly.

The objective, folds and scorer are scikit-learn's (``make_pipeline(StandardScaler(), LogisticRegression(C))``,
one-vs-rest for multi-label, ``Ridge(alpha)`` for regression, on seeded ``StratifiedKFold`` / ``KFold`` /
``GroupKFold`` folds); the optimum is found by :mod:`.probe_solver` (Newton-CG on each fold's principal axes), which
reaches it where scikit-learn's default tolerance stops short.  Sparse input stays CSR.  ``C="auto"`` picks ``C``
per training fold by nested cross-validation over ``C_grid``.  Method, guarantee and measured speed:
docs/metrics.md ("Reference metrics").
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_float, check_int, check_positive_floats
from .._base.sparse import is_sparse
from .._base.threads import map_single_threaded, thread_workers
from ..errors import ConfigError, MetricError
from ..inputs.targets import TARGET_TYPES
from .metric_embeddings import check_metric_embeddings
from .metric_targets import MetricTargets, group_codes, metric_targets, prediction_score
from .metrics import check_metric_name
from .probe_solver import backend_for, choose_C, fold_basis, fit_fold
from .standard_scaling import check_magnitude

#: The default ``C_grid`` of ``C="auto"``: 1e-4 ... 1e4 by factors of 10.
C_GRID = tuple(10.0 ** k for k in range(-4, 5))
#: Inner folds of ``C="auto"`` (the same splitter kind as the outer folds, on each training fold).
INNER_SPLITS = 3
#: A prediction whose deciding margin is below this is a near tie (counted in ``diagnostics.near_ties``).
NEAR_TIE = 1e-6


@dataclasses.dataclass(frozen=True)
class LinearProbeMetric(Config):
    """Held-out quality of a linear model on standardized embeddings, averaged over ``n_repeats x n_splits`` folds.

    Estimates what a user gets by training a linear probe on the embedding: balanced accuracy of an L2 logistic
    regression with ``C`` (scikit-learn's ``LogisticRegression`` objective, solved to its optimum) for single-label
    targets, macro-F1 of one-vs-rest logistic regressions for multi-label targets, R² of ``Ridge(alpha)`` (averaged
    over targets) for regression.  Folds: ``StratifiedKFold`` (single-label) or ``KFold`` (multi-label,
    regression), shuffled with the score stage's ``seed``; with groups, ``GroupKFold`` (shuffled with the same
    seed), so no group is in a training and a test fold at once.  Repeat ``r >= 1`` reshuffles with a seed derived
    from ``(seed, r)``; repeat 0 is exactly the unrepeated folds.  ``C="auto"`` chooses ``C`` from ``C_grid`` in
    every training fold by an inner ``INNER_SPLITS``-fold cross-validation (classification only; regression uses
    ``alpha``); ``C_patience`` (an int) stops each fold's search, from the smallest ``C`` up, once that many values
    in a row score below the best so far (a measured shortcut: docs/metrics.md), ``None`` searches the whole grid.
    ``max_iter`` bounds the Newton iterations of one fit; ``device`` runs the solver on torch
    ("cuda") with the same results to 1e-4.
    """

    n_splits: int = 5
    C: float | str = 1.0
    max_iter: int = 1000
    alpha: float = 1.0
    n_repeats: int = 1
    C_grid: tuple[float, ...] = C_GRID
    C_patience: int | None = None
    device: str = "cpu"
    n_jobs: int | None = None
    name: str = "linear_probe"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "linear probe"
    supported_target_types: ClassVar[tuple[str, ...]] = TARGET_TYPES
    #: Folds are fitted on ``n_jobs`` threads, each on one BLAS thread, so every fold's arithmetic is the same
    #: whatever the worker count: identical bytes (tests/test_probe_solver.py), hence not hashed.
    speed_only = ("n_jobs",)

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        if self.C != "auto":
            self._set("C", check_float(owner, "C", self.C, low=0.0, low_open=True))
        self._set("max_iter", check_int(owner, "max_iter", self.max_iter, minimum=1))
        self._set("alpha", check_float(owner, "alpha", self.alpha, low=0.0))
        self._set("n_repeats", check_int(owner, "n_repeats", self.n_repeats, minimum=1))
        grid = check_positive_floats(owner, "C_grid", self.C_grid)
        if list(grid) != sorted(set(grid)):
            raise ConfigError(f"{owner}.C_grid must be strictly increasing, got {list(grid)}; sort it")
        self._set("C_grid", grid)
        self._set("C_patience", check_int(owner, "C_patience", self.C_patience, minimum=1, allow_none=True))
        changed = [f for f, default in (("C_grid", C_GRID), ("C_patience", None)) if getattr(self, f) != default]
        if self.C != "auto" and changed:  # as StabilityConfig refuses adaptive fields a fixed repeats never reads
            raise ConfigError(f"{owner}.{changed[0]} is read only with C='auto' (C chosen per fold), but C={self.C}; "
                              f"pass C='auto' or leave {changed[0]} out")
        self._set("n_jobs", check_int(owner, "n_jobs", self.n_jobs, minimum=1, allow_none=True))
        if not isinstance(self.device, str) or not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"{owner}.device must be 'cpu' or 'cuda' (or 'cuda:N'), got {self.device!r}")

    #: Bumped when the same settings give other bytes: 2 = solved to the exact optimum (probe_solver.py);
    #: 3 = one BLAS thread per fold, the last Newton step's conjugate gradients stopped at the tolerance and
    #: Hessian-vector products in float32 (the optimum is the same to the tolerance; the bytes are not);
    #: 4 = ``C="auto"``'s inner paths start each ``C`` from the previous optimum moved along the path's tangent, and
    #: a Newton step may take 1,000 CG steps instead of 250 (the same optima to the tolerance; only fits that reached
    #: the old cap take another path there); 5 = a Hessian-vector product is one float32 product each way with
    #: ``[Z, 1]`` (the intercept's row included) and CG's inner products are BLAS dot products, updated in place
    #: (the same optima to the tolerance; a few CG steps differ), and ``C="auto"`` records ``inner_scores``; 6 = a
    #: sparse column's variance is StandardScaler's corrected two-pass sum (a dense constant column of a CSR matrix
    #: was scaled by its rounding noise) and a scale below 10 eps is kept, as StandardScaler keeps it; 7 = the fold
    #: notes name classes by the user's label (``1``, not ``'vk:int:1'``) and note classes of one row (the scores
    #: are version 6's).
    version: ClassVar[int] = 7

    def fold_workers(self, n_folds: int) -> int:
        """Threads fitting folds at once (:func:`~vertebrae._base.threads.thread_workers`); one on a GPU."""
        return 1 if self.device != "cpu" else thread_workers(self.n_jobs, n_folds)

    def identity(self) -> dict[str, Any]:
        """What the cache key hashes: the type, the version and every field but the speed-only ``n_jobs``."""
        return {"type": "linear_probe", "version": self.version, **self.fingerprint()}

    def folds(self, target_type: str, seed: int | None, grouped: bool, n_splits: int | None = None) -> Any:
        """The cross-validation splitter (see the class docstring)."""
        from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or not 0 <= seed <= 2**32 - 1):  # what a direct call may pass; a run's seeds are checked
            raise MetricError(f"metric {self.name!r}: seed must be an integer in [0, 2**32 - 1] or None, got {seed!r}")
        n_splits = n_splits or self.n_splits
        if grouped:
            return GroupKFold(n_splits, shuffle=True, random_state=seed)
        if target_type == "single_label":
            return StratifiedKFold(n_splits, shuffle=True, random_state=seed)
        return KFold(n_splits, shuffle=True, random_state=seed)

    def preflight(self, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                  groups: Any = None) -> None:
        """Raise the MetricError a call would raise on these targets whatever the embedding: folds that cannot be
        made (:meth:`fold_notes`), a device that is not there (``backend_for``)."""
        n = labels.shape[0]
        targets = metric_targets(self.name, labels, target_metadata, n, self.supported_target_types)
        self.fold_notes(targets, group_codes(self.name, groups, n), n)
        backend_for(self.device)

    def splits(self, targets: MetricTargets, codes: np.ndarray | None, seed: int | None
               ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every (train, test) pair, repeat-major: repeat 0 with ``seed``, repeat r with :func:`repeat_seed`."""
        n = targets.y.shape[0]
        out = []
        for repeat in range(self.n_repeats):
            splitter = self.folds(targets.target_type, repeat_seed(seed, repeat), codes is not None)
            out.extend(splitter.split(np.zeros((n, 1)), _split_target(targets), groups=codes))
        return out

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        check_magnitude(self.name, check_metric_embeddings(self.name, embeddings))
        n = embeddings.shape[0]
        targets = metric_targets(self.name, labels, target_metadata, n, self.supported_target_types)
        codes = group_codes(self.name, groups, n)
        notes = [*targets.warnings, *self.fold_notes(targets, codes, n)]
        backend = backend_for(self.device)
        sparse_input = is_sparse(embeddings)
        X = embeddings.tocsr() if sparse_input else np.asarray(embeddings)
        auto = self.C == "auto" and targets.target_type != "regression"

        def score(y_true: np.ndarray, predicted: np.ndarray) -> float:
            return prediction_score(dataclasses.replace(targets, y=y_true), predicted)

        splits = self.splits(targets, codes, seed)

        def fit_split(split: tuple[np.ndarray, np.ndarray]) -> tuple[float, int, list[Any], float | None, list[float]]:
            """One outer fold: its score, near ties, fits and (``C="auto"``) the chosen ``C`` and the inner scores."""
            train, test = split
            C, warm, inner_scores = self.C, None, []
            if auto:
                inner = self.folds(targets.target_type, seed, codes is not None, INNER_SPLITS).split(
                    np.zeros((train.size, 1)), _split_target(targets, train),
                    groups=None if codes is None else codes[train])
                C, inner_scores, inner_models = choose_C(X, targets.y,
                                                         [(train[a], train[b]) for a, b in inner], self.C_grid,
                                                         targets.target_type, score, backend=backend,
                                                         sparse_input=sparse_input, max_iter=self.max_iter,
                                                         patience=self.C_patience)
                warm = inner_models[0].warm
            basis = fold_basis(X[train], backend, sparse_input)
            model = fit_fold(basis, targets.y[train], targets.target_type, C=C, alpha=self.alpha,
                             max_iter=self.max_iter, warm=warm)
            predicted, margins = model.predict(X[test])
            return (score(targets.y[test], predicted), 0 if margins is None else int((margins < NEAR_TIE).sum()),
                    list(model.fits), C if auto else None, inner_scores)

        outcomes = map_single_threaded(fit_split, splits, workers=self.fold_workers(len(splits)))
        scores = [outcome[0] for outcome in outcomes]
        near_ties = sum(outcome[1] for outcome in outcomes)
        fits = [fit for outcome in outcomes for fit in outcome[2]]
        chosen = [outcome[3] for outcome in outcomes]
        unconverged = sum(not fit.converged for fit in fits)
        if unconverged:
            notes.append(f"the logistic regression did not reach its optimum within max_iter={self.max_iter} "
                         f"Newton iterations in {unconverged} fit(s); raise max_iter")
        fold_scores = np.asarray(scores)
        diagnostics: dict[str, Any] = {
            "measure": targets.scorer, "fold_scores": fold_scores.tolist(), "fold_std": float(fold_scores.std()),
            "unconverged_fits": unconverged, "near_ties": near_ties,
            "solver": "closed-form ridge" if targets.target_type == "regression" else "newton-cg",
            "newton_iterations": [fit.newton_iterations for fit in fits],
            "cg_iterations": [fit.cg_iterations for fit in fits],
            "max_gradient_ratio": max((fit.gradient_ratio for fit in fits), default=0.0)}
        if auto:  # each fold's chosen C, and the mean inner score of every C its search evaluated, in grid order
            diagnostics["chosen_C"] = chosen
            diagnostics["inner_scores"] = [outcome[4] for outcome in outcomes]
        return {"score": float(fold_scores.mean()),
                "diagnostics": diagnostics,
                "warnings": notes,
                "metadata": {"model": _model_name(targets.target_type), "scaling": (
                                 "StandardScaler(with_mean=False) (sparse input stays sparse)" if sparse_input
                                 else "StandardScaler()"),
                             "solver": ("vertebrae.scoring.probe_solver: " + (
                                 "ridge in closed form on each fold's principal axes" if not sparse_input else
                                 "ridge by conjugate gradients on the sparse matrix")
                                 if targets.target_type == "regression" else
                                 "vertebrae.scoring.probe_solver: Newton-CG with a diagonal preconditioner "
                                 "on each fold's " + (
                                     "principal axes" if not sparse_input else "sparse matrix (implicitly centered)")),
                             "device": self.device, "C": "auto" if auto else self.C,
                             "folds": type(self.folds(targets.target_type, seed, codes is not None)).__name__,
                             "n_splits": self.n_splits, "n_repeats": self.n_repeats, "seed": seed,
                             "fold_test_sizes": [int(test.size) for _, test in splits],
                             "fold_train_sizes": [int(train.size) for train, _ in splits]}}

    def fold_notes(self, targets: MetricTargets, codes: np.ndarray | None, n: int) -> list[str]:
        """Fail when the folds cannot be made or cannot be trained on; note classes too small to appear in every
        test fold, and classes of one row (the probe tested on that row never saw its class)."""
        if codes is not None:
            n_groups = int(codes.max()) + 1
            if n_groups < self.n_splits:
                raise MetricError(f"metric {self.name!r}: {n_groups} groups cannot make n_splits={self.n_splits} "
                                  "group folds; lower n_splits or drop the dataset's groups")
            self._check_inner_folds(targets, codes, n)
            return []
        if n < self.n_splits:
            raise MetricError(f"metric {self.name!r}: {n} rows cannot make n_splits={self.n_splits} folds; lower "
                              "n_splits or add rows")
        if targets.target_type != "single_label":
            self._check_inner_folds(targets, codes, n)
            return []
        counts = np.bincount(targets.y)
        if counts.max() < self.n_splits:
            raise MetricError(f"metric {self.name!r}: every class has fewer rows than n_splits={self.n_splits} (the "
                              f"largest has {counts.max()}); lower n_splits to at most {counts.max()}")
        kept = self._training_counts(targets, n)
        self._check_training_classes(targets, counts, kept)
        self._check_inner_folds(targets, codes, n, kept)
        small = [targets.labels[j] for j in np.flatnonzero(counts < self.n_splits)]
        single = [targets.labels[j] for j in np.flatnonzero(counts == 1)]
        return ([] if not small else [f"class(es) {small[:5]} have fewer rows than n_splits={self.n_splits}, so "
                                      "some test folds lack them"]) + (
            [] if not single else [f"class(es) {single[:5]} have one row each, so the probe tested on such a row "
                                   "was trained without its class and cannot predict it"])

    def _training_counts(self, targets: MetricTargets, n: int) -> np.ndarray:
        """The rows of each class in each outer training fold, ``(n_splits, n_classes)``, single-label targets
        without groups.  They do not depend on the seed: ``StratifiedKFold`` deals each class to the test folds
        round-robin in a fixed order and the shuffle only picks which of its rows go where, so the folds are made
        once with any seed and counted."""
        with warnings.catch_warnings():  # a class below n_splits: fold_notes says so
            warnings.simplefilter("ignore", UserWarning)
            outer = self.folds("single_label", 0, False).split(np.zeros((n, 1)), targets.y)
            return np.array([np.bincount(targets.y[train], minlength=len(targets.names)) for train, _ in outer])

    def _check_training_classes(self, targets: MetricTargets, counts: np.ndarray, kept: np.ndarray) -> None:
        """Fail before any fit when some training fold ``kept`` would hold one class (a classifier needs two, so
        scikit-learn's ``cross_val_score`` fails on that fold mid-run): its test fold holds every row of every
        other class, which only a class of one row allows (one of 2 rows or more is dealt to 2 test folds)."""
        for fold in kept:
            present = np.flatnonzero(fold)
            if present.size < 2:
                lacking = ", ".join(f"{targets.labels[k]!r} ({counts[k]} row(s))"
                                    for k in np.flatnonzero(fold == 0)[:5])
                raise MetricError(f"metric {self.name!r}: class(es) {lacking} sit in one test fold, so its training "
                                  f"fold holds class {targets.labels[present[0]]!r} alone, and a probe needs two "
                                  "classes to train; drop those classes' rows or add rows to them (a class of 2 rows "
                                  "or more is in every training fold)")

    def _check_inner_folds(self, targets: MetricTargets, codes: np.ndarray | None, n: int,
                           kept: np.ndarray | None = None) -> None:
        """``C="auto"``: fail when some outer training fold cannot make the inner ``INNER_SPLITS`` folds, or when
        an inner training fold can hold one class only, whatever the seed.

        How many rows of each class (``kept``: :meth:`_training_counts`, single-label), groups or rows an outer
        training fold holds does not depend on the shuffle (shuffled ``GroupKFold`` deals ``ceil`` or ``floor``
        of ``n_groups / n_splits`` groups to each test fold; ``KFold`` ``ceil`` or ``floor`` of the rows).  The
        inner ``StratifiedKFold`` needs a class with ``INNER_SPLITS`` rows in the training fold, and each inner
        training fold holds every class with at least 2 rows there (one with 1 row sits in some inner test fold),
        so two such classes make every inner fit possible; with fewer, some inner fold can train on one class
        (for certain with at most one class of 1 row; with several, on the seeds that deal them to one inner
        fold), so this refuses it.  Group folds: only the inner group count is checked (which classes a group
        fold holds depends on the seed)."""
        if self.C != "auto" or targets.target_type == "regression":
            return
        fix = ("lower n_splits (each training fold keeps (n_splits - 1) / n_splits of the rows), pass a fixed C "
               "(e.g. C=1.0) or add rows")
        head = f"metric {self.name!r}: C='auto' chooses C by {INNER_SPLITS}-fold cross-validation inside each of " \
               f"the n_splits={self.n_splits} training folds, but "
        if codes is not None:
            n_groups = int(codes.max()) + 1
            kept_groups = n_groups - -(-n_groups // self.n_splits)
            if kept_groups < INNER_SPLITS:
                raise MetricError(head + f"a training fold keeps {kept_groups} of the {n_groups} groups and the "
                                  f"inner group folds need {INNER_SPLITS}; " + fix.replace("rows", "groups"))
            return
        if targets.target_type != "single_label" or kept is None:  # multi-label: plain KFold
            kept_rows = n - -(-n // self.n_splits)
            if kept_rows < INNER_SPLITS:
                raise MetricError(head + f"a training fold keeps {kept_rows} of the {n} rows and the inner folds "
                                  f"need {INNER_SPLITS}; " + fix)
            return
        counts = np.bincount(targets.y, minlength=len(targets.names))
        for fold in kept:
            if fold.max() < INNER_SPLITS:
                raise MetricError(head + f"a training fold keeps at most {fold.max()} rows of any class and the "
                                  f"inner stratified folds need a class with {INNER_SPLITS}; " + fix)
            enough = np.flatnonzero(fold >= 2)
            if enough.size < 2:  # a class short of 2 exists: the fold holds two classes (_check_training_classes)
                short = min((k for k in range(counts.size) if k not in enough), key=lambda k: counts[k])
                needed = next(c for c in range(2, n + 2) if c - -(-c // self.n_splits) >= 2)
                raise MetricError(head + f"class {targets.labels[short]!r} has {counts[short]} row(s), so a "
                                  f"training fold keeps {fold[short]} of them and an inner fold can train on one "
                                  f"class only; it needs {needed} rows with n_splits={self.n_splits} (2 in every "
                                  "training fold); " + fix)


def repeat_seed(seed: int | None, repeat: int) -> int | None:
    """The fold seed of repeat ``repeat``: the stage seed itself for repeat 0, else one drawn from ``(seed, repeat)``
    (``None`` stays ``None``: unseeded folds, reshuffled on every call)."""
    if repeat == 0 or seed is None:
        return seed
    return int(np.random.SeedSequence([seed, repeat]).generate_state(1)[0])


def _split_target(targets: MetricTargets, rows: np.ndarray | None = None) -> np.ndarray:
    """What the splitter stratifies on: class codes (single-label); anything of the right length otherwise."""
    y = targets.y if rows is None else targets.y[rows]
    return y if targets.target_type == "single_label" else np.zeros(y.shape[0])


def _model_name(target_type: str) -> str:
    return {"single_label": "LogisticRegression", "multi_label": "OneVsRestClassifier(LogisticRegression)",
            "regression": "Ridge"}[target_type]

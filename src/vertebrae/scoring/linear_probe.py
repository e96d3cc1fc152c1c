"""LinearProbeMetric: the cross-validated score of a standardized linear model, as a user would train it.

The model, folds and scorer are scikit-learn's, assembled here once so that the
metric equals ``cross_val_score(make_pipeline(StandardScaler(), model), X, y,
cv=folds, scoring=...)`` on the same folds (the test checks exactly that).  Sparse
input stays CSR: it is scaled without centering (``StandardScaler(with_mean=False)``),
which keeps it sparse; the model's intercept absorbs the mean.  Defaults and
measured speed are in docs/metrics.md ("Reference metrics").
"""

from __future__ import annotations

import dataclasses
import warnings as warnings_module
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_float, check_int
from .._base.sparse import is_sparse
from ..errors import MetricError
from ..inputs.targets import TARGET_TYPES
from .metric_targets import MetricTargets, group_codes, metric_targets
from .metrics import check_metric_name


@dataclasses.dataclass(frozen=True)
class LinearProbeMetric(Config):
    """Held-out quality of a linear model on standardized embeddings, averaged over ``n_splits`` folds.

    Estimates what a user gets by training a linear probe on the embedding: balanced
    accuracy of ``LogisticRegression(C, max_iter)`` for single-label targets, macro-F1
    of one-vs-rest logistic regressions for multi-label targets, R² of ``Ridge(alpha)``
    (averaged over targets) for regression.  Folds: ``StratifiedKFold`` (single-label)
    or ``KFold`` (multi-label, regression), shuffled with the score stage's ``seed``;
    with groups, ``GroupKFold`` (shuffled with the same seed), so no group is in a
    training and a test fold at once.
    """

    n_splits: int = 5
    C: float = 1.0
    max_iter: int = 1000
    alpha: float = 1.0
    name: str = "linear_probe"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "linear probe"
    supported_target_types: ClassVar[tuple[str, ...]] = TARGET_TYPES

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("n_splits", check_int(owner, "n_splits", self.n_splits, minimum=2))
        self._set("C", check_float(owner, "C", self.C, low=0.0, low_open=True))
        self._set("max_iter", check_int(owner, "max_iter", self.max_iter, minimum=1))
        self._set("alpha", check_float(owner, "alpha", self.alpha, low=0.0))

    def identity(self) -> dict[str, Any]:
        return {"type": "linear_probe", **self.fingerprint()}

    def estimator(self, target_type: str, seed: int | None, *, sparse_input: bool = False) -> Any:
        """The pipeline fitted on every training fold: scaling, then the model of ``target_type``."""
        from sklearn.linear_model import LogisticRegression, Ridge
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if target_type == "regression":
            model: Any = Ridge(alpha=self.alpha)
        else:
            model = LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=seed)
            if target_type == "multi_label":
                model = OneVsRestClassifier(model)
        return make_pipeline(StandardScaler(with_mean=not sparse_input), model)

    def folds(self, target_type: str, seed: int | None, grouped: bool) -> Any:
        """The cross-validation splitter (see the class docstring)."""
        from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold

        if grouped:
            return GroupKFold(self.n_splits, shuffle=True, random_state=seed)
        if target_type == "single_label":
            return StratifiedKFold(self.n_splits, shuffle=True, random_state=seed)
        return KFold(self.n_splits, shuffle=True, random_state=seed)

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.model_selection import cross_val_score

        n = embeddings.shape[0]
        targets = metric_targets(self.name, labels, target_metadata, n, self.supported_target_types)
        codes = group_codes(self.name, groups, n)
        notes = [*targets.warnings, *self._fold_notes(targets, codes, n)]
        sparse_input = is_sparse(embeddings)
        y = targets.y[:, 0] if targets.target_type == "regression" and targets.y.shape[1] == 1 else targets.y
        folds = self.folds(targets.target_type, seed, codes is not None)
        with warnings_module.catch_warnings(record=True) as caught:
            warnings_module.simplefilter("always")
            scores = cross_val_score(self.estimator(targets.target_type, seed, sparse_input=sparse_input),
                                     embeddings, y, groups=codes, cv=folds, scoring=targets.scorer,
                                     error_score="raise")
        unconverged = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
        if unconverged:
            notes.append(f"the logistic regression did not converge within max_iter={self.max_iter} in "
                         f"{unconverged} fit(s); raise max_iter for a fully converged probe")
        return {"score": float(scores.mean()),
                "diagnostics": {"measure": targets.scorer, "fold_scores": scores.tolist(),
                                "fold_std": float(scores.std()), "unconverged_fits": unconverged},
                "warnings": notes,
                "metadata": {"model": _model_name(targets.target_type), "scaling": (
                                 "StandardScaler(with_mean=False) (sparse input stays sparse)" if sparse_input
                                 else "StandardScaler()"),
                             "folds": type(folds).__name__,
                             "n_splits": self.n_splits, "seed": seed}}

    def _fold_notes(self, targets: MetricTargets, codes: np.ndarray | None, n: int) -> list[str]:
        """Fail when the folds cannot be made; note classes too small to appear in every test fold."""
        if codes is not None:
            n_groups = int(codes.max()) + 1
            if n_groups < self.n_splits:
                raise MetricError(f"metric {self.name!r}: {n_groups} groups cannot make n_splits={self.n_splits} "
                                  "group folds; lower n_splits or drop the dataset's groups")
            return []
        if n < self.n_splits:
            raise MetricError(f"metric {self.name!r}: {n} rows cannot make n_splits={self.n_splits} folds")
        if targets.target_type != "single_label":
            return []
        counts = np.bincount(targets.y)
        if counts.max() < self.n_splits:
            raise MetricError(f"metric {self.name!r}: every class has fewer rows than n_splits={self.n_splits}; "
                              "lower n_splits")
        small = [targets.names[j] for j in np.flatnonzero(counts < self.n_splits)]
        return [] if not small else [f"class(es) {small[:5]} have fewer rows than n_splits={self.n_splits}, so some "
                                     "test folds lack them"]


def _model_name(target_type: str) -> str:
    return {"single_label": "LogisticRegression", "multi_label": "OneVsRestClassifier(LogisticRegression)",
            "regression": "Ridge"}[target_type]

"""Numeric targets and groups for the reference metrics (kNN, linear probe, LogME).

:func:`~vertebrae.scoring.metrics.run_metrics` hands every metric marked label keys,
a CSR indicator or float targets (docs/metrics.md).  Metrics that predict or fit
need them as numbers; decoding them in one place keeps the three reference metrics
consistent: the same class order (sorted marked keys, which is also scikit-learn's
``classes_`` order), the same treatment of constant regression targets, and one
score per target type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base.sparse import is_sparse
from ..errors import MetricError
from ..inputs.labels import label_value
from ..inputs.targets import numeric_targets

#: The prediction score of each target type, as scikit-learn's scorer names it.
SCORERS = {"single_label": "balanced_accuracy", "multi_label": "f1_macro", "regression": "r2"}


@dataclasses.dataclass(frozen=True)
class MetricTargets:
    """``y`` as numbers: class codes ``(n,)`` (code j is ``names[j]``), a dense 0/1 ``int8`` indicator ``(n, L)``,
    or ``float64`` regression values ``(n, T)`` without constant targets.  ``warnings`` say what was left out.
    ``labels`` (single-label): the user's own label of each code (:func:`~vertebrae.inputs.labels.label_value`),
    so that messages name ``1``, not the marked key ``'vk:int:1'`` the metric received."""

    target_type: str
    y: np.ndarray
    names: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    labels: tuple[Any, ...] = ()

    @property
    def scorer(self) -> str:
        return SCORERS[self.target_type]

    def columns(self) -> np.ndarray:
        """The targets as float64 columns: one-hot ``(n, C)`` for single-label codes, else ``y`` as float64."""
        if self.target_type == "single_label":
            return np.eye(len(self.names))[self.y]
        return self.y.astype(np.float64)


def metric_targets(metric: str, labels: Any, target_metadata: Mapping[str, Any] | None, n_rows: int,
                   supported: tuple[str, ...]) -> MetricTargets:
    """Decode what :func:`run_metrics` passes into :class:`MetricTargets`, or raise :class:`MetricError`."""
    target_type = (target_metadata or {}).get("target_type", "single_label")
    if target_type not in supported:
        raise MetricError(f"metric {metric!r} supports {list(supported)} targets, got {target_type}")
    labels = labels if is_sparse(labels) else np.asarray(labels)  # a direct call may pass a list
    if labels.ndim == 0 or labels.shape[0] != n_rows:
        raise MetricError(f"metric {metric!r}: labels must hold one target per embedding row ({n_rows}), got "
                          + (f"{labels.shape[0]} rows" if labels.ndim else f"{type(labels.item()).__name__}"))
    if target_type == "single_label":
        if labels.ndim != 1:
            raise MetricError(f"metric {metric!r}: single-label labels must be 1-D, got shape {labels.shape}")
        classes, codes = np.unique(labels, return_inverse=True)
        if classes.size < 2:
            raise MetricError(f"metric {metric!r}: a single class; the score needs at least two")
        return MetricTargets(target_type, codes.astype(np.intp), tuple(map(str, classes)),
                             labels=tuple(map(label_value, classes.tolist())))
    numbers = labels if is_sparse(labels) else numeric_targets(labels)
    if numbers is None or numbers.dtype.kind not in "biuf":
        raise MetricError(f"metric {metric!r}: {target_type.replace('_', '-')} targets must be numbers ("
                          + ("a 0/1 indicator matrix" if target_type == "multi_label" else "one column per target")
                          + f"), got dtype {labels.dtype}")
    labels = numbers
    if target_type == "multi_label":
        indicator = labels.toarray() if is_sparse(labels) else labels
        names = tuple((target_metadata or {}).get("label_names") or map(str, range(indicator.shape[1])))
        return MetricTargets(target_type, (indicator != 0).astype(np.int8), names)
    values = np.asarray(labels, dtype=np.float64)
    values = values[:, None] if values.ndim == 1 else values
    if not np.isfinite(values).all():
        raise MetricError(f"metric {metric!r}: regression targets hold NaN or infinite values; drop those rows")
    names = tuple((target_metadata or {}).get("target_names") or map(str, range(values.shape[1])))
    constant = [j for j in range(values.shape[1]) if np.ptp(values[:, j]) == 0]
    if len(constant) == values.shape[1]:
        raise MetricError(f"metric {metric!r}: every regression target is constant ({list(names)}); nothing to score")
    notes = () if not constant else (f"constant regression target(s) {[names[j] for j in constant]} carry no "
                                     "information and were left out",)
    keep = [j for j in range(values.shape[1]) if j not in constant]
    return MetricTargets(target_type, values[:, keep], tuple(names[j] for j in keep), notes)


def group_codes(metric: str, groups: Any, n_rows: int) -> np.ndarray | None:
    """Integer codes of the groups (``None`` without groups); at least two groups are needed to hold one out."""
    if groups is None:
        return None
    groups = np.asarray(groups)
    if groups.shape != (n_rows,):
        raise MetricError(f"metric {metric!r}: groups must have one entry per embedding row ({n_rows}), "
                          f"got shape {groups.shape}")
    _, codes = np.unique(groups, return_inverse=True)
    if codes.max(initial=0) == 0:
        raise MetricError(f"metric {metric!r}: every row is in one group, so no row has a neighbour or fold from "
                          "another group; drop the dataset's groups or add more groups")
    return codes.astype(np.intp)


def prediction_score(targets: MetricTargets, predicted: np.ndarray) -> float:
    """Balanced accuracy (single-label), macro-F1 over labels (multi-label) or R² averaged over targets
    (regression), exactly as scikit-learn's scorers of :data:`SCORERS` compute them."""
    from sklearn.metrics import balanced_accuracy_score, f1_score, r2_score

    if targets.target_type == "single_label":
        return float(balanced_accuracy_score(targets.y, predicted))
    if targets.target_type == "multi_label":
        return float(f1_score(targets.y, predicted, average="macro", zero_division=0))
    return float(r2_score(targets.y, predicted))

"""What the closed-form probes (:class:`~vertebrae.RidgeProbeMetric`, :class:`~vertebrae.LDAProbeMetric`) share.

Both answer "what would a linear probe score here?" on the very folds :class:`~vertebrae.LinearProbeMetric`
uses (its splitter and its fold checks, borrowed from a probe built with the same ``n_splits`` and name, so
the three can be compared fold by fold), standardize each training fold with scikit-learn's own
``StandardScaler`` (the first step of the pipeline they equal), and score every test fold with the
scorer of the target type.  Only the fitting in between differs, and that lives in their modules.
"""

from __future__ import annotations

import dataclasses
import warnings as warnings_module
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base.sparse import is_sparse
from ..errors import MetricError
from .metric_embeddings import check_metric_embeddings
from .metric_targets import MetricTargets, group_codes, metric_targets, prediction_score
from .standard_scaling import check_magnitude


@dataclasses.dataclass(frozen=True)
class ProbeFolds:
    """The decoded targets, the group codes and the seeded folds of one probe call, with their notes."""

    targets: MetricTargets
    codes: np.ndarray | None
    splits: list[tuple[np.ndarray, np.ndarray]]
    splitter: str
    notes: list[str]


def same_folds(name: str, n_splits: int) -> Any:
    """The :class:`~vertebrae.LinearProbeMetric` whose folds and fold checks a closed-form probe borrows."""
    from .linear_probe import LinearProbeMetric

    return LinearProbeMetric(n_splits=n_splits, name=name)


class SameFoldsPreflight:
    """``preflight`` of a closed-form probe (``name``, ``n_splits``): its folds are LinearProbeMetric's, so that
    probe's own checks say whether they can be made on the dataset before any extractor runs."""

    name: str
    n_splits: int

    def preflight(self, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                  groups: Any = None) -> None:
        same_folds(self.name, self.n_splits).preflight(labels, target_metadata=target_metadata, groups=groups)


def probe_folds(name: str, n_splits: int, embeddings: Any, labels: Any, target_metadata: Mapping[str, Any] | None,
                groups: Any, seed: int | None, supported: tuple[str, ...]) -> ProbeFolds:
    """Decode the call's targets and groups and draw :class:`~vertebrae.LinearProbeMetric`'s folds for them."""
    check_magnitude(name, check_metric_embeddings(name, embeddings))
    n = embeddings.shape[0]
    targets = metric_targets(name, labels, target_metadata, n, supported)
    codes = group_codes(name, groups, n)
    folds = same_folds(name, n_splits)
    notes = [*targets.warnings, *folds.fold_notes(targets, codes, n)]
    splitter = folds.folds(targets.target_type, seed, codes is not None)
    splits = list(splitter.split(np.zeros((n, 1)), targets.y, codes))
    return ProbeFolds(targets, codes, splits, type(splitter).__name__, notes)


def check_dense_budget(name: str, side: int, copies: int, max_dense_bytes: int, field: str) -> int:
    """Fail before any fold is fitted when ``copies`` dense float64 ``side x side`` matrices exceed the budget."""
    needed = copies * 8 * side * side
    if needed > max_dense_bytes:
        raise MetricError(f"metric {name!r}: the {side:,} x {side:,} matrices of its folds need about {needed:,} "
                          f"bytes, over {field}={max_dense_bytes:,}; raise {field} or reduce the embedding width "
                          "(e.g. EmbeddingCompressionConfig)")
    return needed


@dataclasses.dataclass(frozen=True)
class StandardizedFold:
    """A training fold standardized with ``StandardScaler`` (the pipeline's first step) and its test rows.

    Dense: ``train`` and ``test`` are float64 copies, centered and scaled by the training fold.  Sparse (CSR):
    they are scaled but not centered (``StandardScaler(with_mean=False)``, so they stay sparse); ``offset`` is the
    training mean after scaling, which a model with an intercept subtracts implicitly.  ``scale``: the scaler's.
    """

    train: Any
    test: Any
    offset: np.ndarray | None
    scale: np.ndarray


def standardized_fold(embeddings: Any, train: np.ndarray, test: np.ndarray) -> StandardizedFold:
    """One fold's standardized rows (made when the fold is fitted, so only the folds being fitted hold copies)."""
    from sklearn.preprocessing import StandardScaler

    sparse_input = is_sparse(embeddings)
    scaler = StandardScaler(with_mean=not sparse_input).fit(embeddings[train])
    scale = scaler.scale_.astype(np.float64)
    if sparse_input:
        inverse = 1.0 / scale
        return StandardizedFold(_scaled_columns(embeddings[train], inverse), _scaled_columns(embeddings[test], inverse),
                                scaler.mean_.astype(np.float64) * inverse, scale)
    mean = scaler.mean_.astype(np.float64)
    return StandardizedFold(_standardized(embeddings[train], mean, scale), _standardized(embeddings[test], mean, scale),
                            None, scale)


def _standardized(rows: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(rows - mean) / scale`` as one new float64 array (the fancy-indexed rows are a copy already)."""
    out = np.subtract(rows, mean, dtype=np.float64)
    out /= scale
    return out


def _scaled_columns(rows: Any, inverse: np.ndarray) -> Any:
    """CSR rows with every column multiplied by ``inverse``, in float64, still CSR."""
    rows = rows.tocsr().astype(np.float64)
    rows.data *= inverse[rows.indices]
    return rows


def training_classes(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(y, return_inverse=True)`` of a training fold's class codes, which a classifier needs two of."""
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise MetricError(f"a training fold holds the single class {classes.tolist()}; a classifier needs two "
                          "(the groups put every other class's rows in one fold): lower n_splits or drop the groups")
    return classes, codes


def fold_score(targets: MetricTargets, test: np.ndarray, predicted: np.ndarray) -> float:
    """The target type's score of one test fold (balanced accuracy, macro-F1 or R², as ``cross_val_score``'s).

    scikit-learn's notes about classes a test fold lacks are silenced: the fold notes already say so once.
    """
    with warnings_module.catch_warnings():
        warnings_module.simplefilter("ignore")
        return prediction_score(dataclasses.replace(targets, y=targets.y[test]), predicted)


def probe_payload(folds: ProbeFolds, scores: list[float], diagnostics: Mapping[str, Any],
                  metadata: Mapping[str, Any], seed: int | None, n_splits: int) -> dict[str, Any]:
    """The metric payload of a probe: the mean fold score, the fold scores and what produced them."""
    values = np.asarray(scores)
    return {"score": float(values.mean()),
            "diagnostics": {"measure": folds.targets.scorer, "fold_scores": values.tolist(),
                            "fold_std": float(values.std()), **diagnostics},
            "warnings": folds.notes,
            "metadata": {**metadata, "folds": folds.splitter, "n_splits": n_splits, "seed": seed}}

"""Independent references shared by tests: the dependency called directly, never through vertebrae."""

from __future__ import annotations

import numpy as np
from overlapindex import OverlapIndex


def direct_oi(X, y, k, seed=0, exclude=None, normalize_rows=True):
    """Reference: the dependency called directly on the same data with the same settings (what
    ``OverlapIndexScorer`` documents it calls: MiniBatchKMeans backend, ``random_state`` = the seed, L2 rows)."""
    oi = OverlapIndex(model_type="MiniBatchKMeans", kmeans_k=k, kmeans_kwargs={"random_state": seed},
                      offline_chunk_size=10_000, exclude_classes=exclude,
                      feature_normalization="l2" if normalize_rows else None)
    oi.fit_offline(X, y)
    return oi


def label_codes(y) -> np.ndarray:
    """Single-label targets as integer codes in sorted label order (the codes OverlapIndex is given)."""
    return np.unique(np.asarray(y), return_inverse=True)[1]


def per_class_rows(y, per_class, seed) -> np.ndarray:
    """The documented target-preserving subsample, restated: one ``np.random.default_rng(seed)``; for each class in
    sorted label order, ``per_class[i]`` of its rows drawn without replacement (``Generator.choice``); all sorted."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), s, replace=False)
                                   for c, s in zip(np.unique(y), per_class)]))

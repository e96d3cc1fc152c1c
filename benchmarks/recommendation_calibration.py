"""Measure overlap scores on targets of known predictability, to calibrate recommendation cut-offs.

Regression: Gaussian embeddings, targets y = X w + noise at chosen linear R² levels,
plus a magnitude target (y = |x|, which row normalization removes) and sin(3 x0).
Each is scored with ContinuousOverlapIndex with normalize_embeddings True and False;
the references are 5-fold cross-validated Ridge and 10-NN R² from scikit-learn.

Multi-label: labels thresholded from noisy linear projections at chosen noise levels,
at two label densities; the reference is the cross-validated macro F1 of a one-vs-rest
logistic probe.

Each case runs at two sizes (rows x dims).  docs/results.md records what it printed.
Run: python benchmarks/recommendation_calibration.py
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import f1_score
from sklearn.model_selection import cross_val_predict, cross_val_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.neighbors import KNeighborsRegressor

from vertebrae import ContinuousOverlapScoringConfig, OverlapScoringConfig
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.inputs.targets import build_targets

SIZES = ((1000, 16), (2000, 64))
R2_LEVELS = (0.98, 0.9, 0.75, 0.5, 0.25, 0.1, 0.0)


def regression_cases(rng: np.random.Generator, n: int, d: int):
    X = rng.normal(size=(n, d))
    signal = X @ rng.normal(size=d)
    for r2 in R2_LEVELS:
        if r2 == 0:
            y = rng.normal(size=n)
        else:
            y = signal + rng.normal(size=n) * np.sqrt(signal.var() * (1 - r2) / r2)
        yield f"linear R2={r2:.2f}", X, y
    yield "magnitude |x|", X, np.linalg.norm(X, axis=1)
    yield "sin(3 x0)", X, np.sin(3 * X[:, 0])


def regression(n: int, d: int) -> None:
    rng = np.random.default_rng(0)
    print(f"\nregression {n} x {d}\ntarget | ridge R2 | kNN R2 | score(norm) | score(raw)")
    for name, X, y in regression_cases(rng, n, d):
        ridge = cross_val_score(Ridge(1.0), X, y, cv=5, scoring="r2").mean()
        knn = cross_val_score(KNeighborsRegressor(10), X, y, cv=5, scoring="r2").mean()
        cells = [name, f"{ridge:.3f}", f"{knn:.3f}"]
        for normalize in (True, False):
            scorer = OverlapIndexScorer(continuous_config=ContinuousOverlapScoringConfig(normalize_embeddings=normalize))
            cells.append(f"{scorer.score(X, build_targets(y, target_type='regression', n_samples=n)).score:.3f}")
        print(" | ".join(cells), flush=True)


def multi_label(n: int, d: int) -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, d))
    W = rng.normal(size=(d, 4))
    print(f"\nmulti-label {n} x {d}, 4 labels\nthreshold | label noise | density | probe macro F1 | score")
    for threshold in (0.0, 1.0):
        for noise in (0.0, 0.5, 1.0, 2.0, 100.0):
            logits = (X @ W) / np.sqrt(d) + rng.normal(size=(n, 4)) * noise
            Y = (logits > threshold).astype(int)
            Y[np.arange(n), logits.argmax(axis=1)] = 1  # every row needs at least one label
            pred = cross_val_predict(OneVsRestClassifier(LogisticRegression(max_iter=500)), X, Y, cv=5)
            f1 = f1_score(Y, pred, average="macro")
            score = OverlapIndexScorer(OverlapScoringConfig()).score(
                X, build_targets(Y, target_type="multi_label", n_samples=n)).score
            print(f"{threshold:g} | {noise:g} | {Y.mean():.2f} | {f1:.3f} | {score:.3f}", flush=True)


if __name__ == "__main__":
    for n, d in SIZES:
        multi_label(n, d)
    for n, d in SIZES:
        regression(n, d)

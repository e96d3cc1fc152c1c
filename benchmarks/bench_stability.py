"""Wall time of prototype stability against bare scoring calls.

Times 20 prototype repeats at n_jobs=1 and n_jobs=2 and reports each as a ratio to
20 x one bare ``OverlapIndexScorer.score`` call (same scorer and k) measured in
the same run, so the figures isolate the analysis overhead and the parallel gain
from the speed of the machine.  Each figure is the best of two rounds, because other
processes on a small shared machine inflate single timings.  Full size: 20,000 x 384 float32, 20 Gaussian classes;
``--small``: 2,000 x 64, 10 classes.

    python benchmarks/bench_stability.py [--small]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from vertebrae.scoring.overlap import OverlapIndexScorer, OverlapScoringConfig
from vertebrae.scoring.stability import StabilityConfig, run_stability_analysis
from vertebrae.targets import build_targets

REPEATS = 20
ROUNDS = 2


def make_data(n: int, dim: int, n_classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Center spread 0.1 against unit noise: overlapping classes (score about 0.7 at full size), not a trivial 1.0.
    centers = rng.normal(0.0, 0.1, (n_classes, dim)).astype(np.float32)
    labels = np.repeat(np.arange(n_classes), n // n_classes)
    return centers[labels] + rng.normal(0.0, 1.0, (labels.size, dim)).astype(np.float32), labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2,000 x 64, 10 classes (a quick run)")
    args = parser.parse_args()
    n, dim, n_classes = (2_000, 64, 10) if args.small else (20_000, 384, 20)
    X, labels = make_data(n, dim, n_classes)
    targets = build_targets(labels)
    scorer = OverlapIndexScorer(OverlapScoringConfig(k=20))
    config = StabilityConfig(repeats=REPEATS)

    scorer.score(X, targets)  # warm-up: first-call import and allocation costs are not the subject
    bare = []
    for _ in range(3):
        start = time.perf_counter()
        scorer.score(X, targets)
        bare.append(time.perf_counter() - start)
    unit = REPEATS * statistics.median(bare)
    print(f"data: {n:,} x {dim} float32, {n_classes} classes, k=20, {REPEATS} prototype repeats; "
          f"load average at start {os.getloadavg()[0]:.2f}")
    print(f"bare scoring call (median of 3): {statistics.median(bare):.2f} s -> {REPEATS} x bare = {unit:.1f} s")

    results = {}
    for n_jobs in (1, 2):
        elapsed = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            results[n_jobs] = run_stability_analysis(X, targets, config=config.replace(n_jobs=n_jobs), scorer=scorer)
            elapsed.append(time.perf_counter() - start)
        print(f"stability n_jobs={n_jobs} (best of {ROUNDS}): {min(elapsed):.1f} s = {min(elapsed) / unit:.2f} x "
              f"({REPEATS} x bare); all rounds {', '.join(f'{e:.1f}' for e in elapsed)} s")
    same = results[1].repeat_scores == results[2].repeat_scores
    print(f"n_jobs=2 repeats identical to n_jobs=1: {same}; "
          f"score {results[1].summary.mean:.4f} +- {results[1].summary.std:.4f} (std, ddof=1)")


if __name__ == "__main__":
    main()

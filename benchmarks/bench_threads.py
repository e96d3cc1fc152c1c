"""Why the default thread limit is 1: OverlapIndexScorer at thread_limit=1 vs 2 vs None on the same data.

    python benchmarks/bench_threads.py [--small]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

from bench_overlap import make_dense

from vertebrae import OverlapScoringConfig
from vertebrae.scoring import OverlapIndexScorer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    X, y = make_dense(n=2_000 if args.small else 20_000, dim=384, n_classes=20)
    print(f"{os.cpu_count()} CPUs; {X.shape[0]} x {X.shape[1]} float32, 20 classes, k=20")
    times, scores = {}, {}
    for limit in (1, 2, None):
        config = OverlapScoringConfig(k=20, min_samples_per_cluster=1, thread_limit=limit)
        runs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            scores[limit] = OverlapIndexScorer(config).score(X, y).score
            runs.append(time.perf_counter() - start)
        times[limit] = statistics.median(runs)
    for limit, seconds in times.items():
        print(f"thread_limit={str(limit):<5} {seconds:7.2f} s  ({seconds / times[1]:.2f}x of 1 thread)  "
              f"score {scores[limit]:.6f}")


if __name__ == "__main__":
    main()

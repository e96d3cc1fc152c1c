"""Peak memory of a whole Benchmark.run with 1 vs 8 extractors of 20,000 x 384 float32.

The local runner frees each extractor's embedding as soon as its chain is done, so the
peak should not grow with the number of extractors.  Each run is a fresh child
process; the script prints peak RSS above the process baseline (data generated, modules
imported) and the 8-extractor / 1-extractor ratio (target <= 1.3), plus the ratio of
the 1-extractor run to a bare OverlapIndex.fit_offline on the same matrix.

    python benchmarks/bench_runner_memory.py            # 20,000 x 384
    python benchmarks/bench_runner_memory.py --small    # quick check
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from fresh_process import in_fresh_process

K, SEED = 20, 0


def scaled(factor: float):
    """A module-level extractor function: a fresh float32 matrix per call, like a real model."""
    def embed(X: np.ndarray) -> np.ndarray:
        return (X * factor).astype(np.float32)
    return embed


def _child(kind: str, n: int, dim: int, queue) -> None:
    import warnings

    import sklearn.preprocessing  # noqa: F401
    from overlapindex import OverlapIndex
    from threadpoolctl import threadpool_limits

    from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, OverlapScoringConfig,
                               SeparatixConfig)

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 0.15, (20, dim))
    y = rng.integers(0, 20, n)
    X = (centers[y] + rng.normal(0, 1.0, (n, dim))).astype(np.float32)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    if kind == "bare":
        with threadpool_limits(limits=1):
            OverlapIndex(model_type="MiniBatchKMeans", kmeans_k=K, kmeans_kwargs={"random_state": SEED},
                         feature_normalization="l2").fit_offline(X, y)
    else:
        count = int(kind)
        dataset = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("bench", "1"))
        extractors = [CallableExtractor(f"e{i}", scaled(1.0 + i), cache_identity=f"scaled-{i}") for i in range(count)]
        Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=K, min_samples_per_cluster=1),
                  separatix_config=SeparatixConfig(enabled=False), progress=False).run()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    queue.put((seconds, peak - base, peak))


def once(kind: str, n: int, dim: int) -> tuple[float, int, int]:
    return in_fresh_process(_child, kind, n, dim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    n, dim = (2_000, 384) if args.small else (20_000, 384)
    runs = {kind: once(kind, n, dim) for kind in ("bare", "1", "8")}
    print(f"{'run':<14} {'seconds':>8} {'peak above baseline MiB':>24} {'peak RSS MiB':>13}")
    for kind, (seconds, above, peak) in runs.items():
        label = "bare OverlapIndex" if kind == "bare" else f"{kind} extractor(s)"
        print(f"{label:<14} {seconds:>8.2f} {above / 2**20:>24.0f} {peak / 2**20:>13.0f}")
    print(f"8 / 1 extractors, peak RSS: {runs['8'][2] / runs['1'][2]:.3f}x  (target <= 1.3)")
    print(f"1 extractor / bare call, peak RSS: {runs['1'][2] / runs['bare'][2]:.3f}x")


if __name__ == "__main__":
    main()

"""What sharded extraction through the store and distributed profiling cost on a 2-worker local dask cluster.

One extractor (a Gaussian random projection of 100,000 x 384 float32 rows to 256 dimensions),
sharded in 10 shards of 10,000 rows, on one 2-worker ``LocalCluster`` (started once and warmed
up by one run, neither timed).  Each mode is one whole ``Benchmark.run()``; scoring is kept small
and equal in every mode by a 160 MiB memory budget (a scoring subsample of the 100,000 rows), so
the differences are the extract:

- ``futures``: no cache, the shards travel as dask futures (the ratios' denominator);
- ``store miss``: a fresh folder store: every shard written, read back and stacked, the job stored;
- ``store hit``: the same store again (one read on a worker, no shard runs);
- ``profiled``: ``futures`` with ``ResourceProfilingConfig()`` (every shard measured on its worker);
- bare reference: the same fit, scatter, one plain ``transform`` task per shard and one
  ``np.concatenate`` task, straight on the client.

``--rounds N`` alternates the modes N times and reports the best of each.

    python benchmarks/bench_dask_shards.py [--rounds 2] [--small]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings

import numpy as np


def make(X, labels, store=None, profiled=False):
    from sklearn.random_projection import GaussianRandomProjection

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, MemoryConfig, ResourceProfilingConfig,
                               SeparatixConfig, SklearnExtractor)
    from vertebrae.artifacts.cache import CacheConfig

    data = BenchmarkDataset.from_arrays(X, labels, identity=DatasetIdentity.declared("bench-shards", "1"))
    return Benchmark(data, [SklearnExtractor("proj", GaussianRandomProjection(256, random_state=0))],
                     separatix_config=SeparatixConfig(enabled=False), progress=False,
                     memory_config=MemoryConfig(max_scoring_bytes=160 * 2**20),
                     cache_config=None if store is None else CacheConfig(store=store),
                     resource_profiling=ResourceProfilingConfig() if profiled else None)


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _transform(projection, X, start, stop):
    return projection.transform(X[start:stop])


def _stacked_shape(*parts):
    return np.concatenate(parts).shape


def bare(client, X, shard_rows: int) -> None:
    """The reference: fit, scatter, one plain transform task per shard, one concatenate task."""
    from sklearn.random_projection import GaussianRandomProjection

    projection = GaussianRandomProjection(256, random_state=0).fit(X)
    [fitted, data] = client.scatter([projection, X], broadcast=True)
    shards = [client.submit(_transform, fitted, data, a, min(a + shard_rows, len(X)), pure=False)
              for a in range(0, len(X), shard_rows)]
    client.submit(_stacked_shape, *shards, pure=False).result()


MODES = ("futures", "store miss", "store hit", "profiled")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="20,000 rows, 5 shards")
    args = parser.parse_args()
    from distributed import Client

    from vertebrae.execution import DaskRunner
    from vertebrae.execution.dask import local_cluster

    n, shard_rows = (20_000, 4_000) if args.small else (100_000, 10_000)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(20), n // 20)
    X = (rng.normal(0.0, 0.1, (20, 384))[labels] + rng.normal(size=(n, 384))).astype(np.float32)
    best = dict.fromkeys((*MODES, "bare"), np.inf)
    warnings.simplefilter("ignore")  # the memory budget's subsample warning
    folder = tempfile.mkdtemp(prefix="bench-shards-")
    try:
        with local_cluster(2) as cluster, Client(cluster) as client:
            client.wait_for_workers(2)
            runner = DaskRunner(client, shard_rows=shard_rows)
            make(X, labels).run(runner=runner)  # warm-up, not timed: the workers import the stages and scoring
            for _ in range(args.rounds):
                shutil.rmtree(folder)
                benchmarks = {"futures": make(X, labels), "store miss": make(X, labels, folder),
                              "store hit": make(X, labels, folder), "profiled": make(X, labels, profiled=True)}
                for mode in MODES:  # in this order: the hit reads what the miss stored
                    best[mode] = min(best[mode], timed(lambda: benchmarks[mode].run(runner=runner)))  # noqa: B023
                best["bare"] = min(best["bare"], timed(lambda: bare(client, X, shard_rows)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{n:,} x 384 float32 -> 256 (GaussianRandomProjection), {n // shard_rows} shards of {shard_rows:,} rows, "
          f"2 local workers, whole Benchmark.run() (cluster already up), best of {args.rounds}")
    for mode in MODES:
        print(f"  {mode:10s}: {best[mode]:6.2f} s  ({best[mode] / best['futures']:.2f}x futures)")
    print(f"  bare dask : {best['bare']:6.2f} s  (fit, scatter, transform shards, concatenate); "
          f"futures / bare = {best['futures'] / best['bare']:.2f}x")


if __name__ == "__main__":
    main()

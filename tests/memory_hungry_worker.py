"""Run by tests/test_dask_faults.py in its own process (and session): one dask worker with a 300 MiB memory limit
runs an extract job that allocates 800 MiB. The nanny terminates the worker (dask's memory.terminate fraction),
so the run must end in a named ExecutionError; a separate process keeps a runaway allocation away from pytest."""

from __future__ import annotations

import logging
import time

import numpy as np

#: What the job allocates (and touches) against the worker's limit.
ALLOCATION_MIB, LIMIT_MIB = 800, 300


def hungry(X):
    block = np.ones(ALLOCATION_MIB * 2**20 // 8)
    time.sleep(3)  # hold it past the nanny's memory check
    return np.asarray(X)[:, :4] + block[:1]


def main() -> None:
    import dask
    from distributed import Client, LocalCluster

    from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity
    from vertebrae.errors import ExecutionError
    from vertebrae.execution import DaskRunner

    rng = np.random.default_rng(0)
    dataset = BenchmarkDataset.from_arrays(rng.normal(size=(60, 8)), np.repeat([0, 1, 2], 20),
                                           identity=DatasetIdentity.declared("memory", "1"))
    settings = {"distributed.scheduler.allowed-failures": 1, "distributed.worker.memory.terminate": 0.95}
    with dask.config.set(settings), LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                                 memory_limit=f"{LIMIT_MIB}MiB", host="127.0.0.1",
                                                 dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
            Client(cluster) as client:
        start = time.perf_counter()
        try:
            Benchmark(dataset, [CallableExtractor("hungry", hungry, cache_identity="hungry-v1")]).run(
                runner=DaskRunner(client, shard_rows=None))
        except ExecutionError as error:
            print(f"ExecutionError after {time.perf_counter() - start:.1f} s: {error}")
            return
        print("finished without an error")


if __name__ == "__main__":
    main()

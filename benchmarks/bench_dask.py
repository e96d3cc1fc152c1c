"""Whole-process wall time of a benchmark on a 2-worker local dask cluster against the sequential local runner.

The workload of issue 15: 20,000 x 384 float32, 20 Gaussian classes, 3 extractors
(the precomputed matrix, PCA(128), a Gaussian random projection to 256), k=31 and 20
prototype stability repeats each: 3 score jobs + 60 repeats = 63 scoring calls.
Each mode runs in a fresh Python process (imports, cluster start and teardown
included), timed from outside; the two result JSON files must be byte-identical
minus their ``timing`` section.  A third process is the bare reference: the same 63
``OverlapIndexScorer.score`` calls (same matrices and seeds) mapped straight onto a fresh
2-worker ``LocalCluster`` with ``client.map``, so the runner's overhead shows as a ratio to
what dask itself gives on this machine.  All processes run with one BLAS/OpenMP thread
(``OMP_NUM_THREADS=1``, what dask's nanny sets for its workers): PCA and the random
projection round differently with 2 BLAS threads, which would change the embeddings,
not the runner.  ``--small``: 2,000 x 64, 10 classes, 5 repeats.
``--rounds N`` alternates the modes N times and reports the best of each.  ``--workers 2,4,8,16`` runs the
dask and bare modes at each cluster size (one worker process per core; default 2), against one sequential run.

    python benchmarks/bench_dask.py [--small] [--rounds 1] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np


def make_data(n: int, dim: int, n_classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 0.1, (n_classes, dim)).astype(np.float32)  # overlapping classes, not a trivial 1.0
    labels = np.repeat(np.arange(n_classes), n // n_classes)
    return centers[labels] + rng.normal(0.0, 1.0, (labels.size, dim)).astype(np.float32), labels


def _score(X: np.ndarray, labels: np.ndarray, seed: int | None) -> float:
    from vertebrae.scoring.overlap import OverlapIndexScorer, OverlapScoringConfig
    from vertebrae.inputs.targets import build_targets

    return OverlapIndexScorer(OverlapScoringConfig(k=31)).score(X, build_targets(labels), seed=seed).score


def bare(small: bool, workers: int) -> None:
    """The reference: every scoring call of the benchmark as one plain task on a fresh cluster of ``workers``."""
    from distributed import Client
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    from vertebrae import StabilityConfig
    from vertebrae.execution.dask import local_cluster
    from vertebrae.scoring.stability import plan_repeats
    from vertebrae.inputs.targets import build_targets

    n, dim, n_classes, repeats = (2_000, 64, 10, 5) if small else (20_000, 384, 20, 20)
    X, labels = make_data(n, dim, n_classes)
    matrices = [X, PCA(dim // 3, random_state=0).fit_transform(X),
                GaussianRandomProjection(2 * dim // 3, random_state=0).fit_transform(X)]
    seeds = [None] + [r.scoring_seed for r in plan_repeats(build_targets(labels), StabilityConfig(repeats=repeats))[0]]
    with local_cluster(workers) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)
        shared = client.scatter(matrices + [labels], broadcast=True)
        futures = [client.submit(_score, m, shared[-1], seed, pure=False) for m in shared[:-1] for seed in seeds]
        client.gather(futures)


def child(mode: str, small: bool, output: str, workers: int) -> None:
    """One whole run (what the parent times): build the benchmark, run it, write the result JSON."""
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, OverlapScoringConfig,
                               PrecomputedExtractor, SeparatixConfig, SklearnExtractor, StabilityConfig)
    from vertebrae.execution import DaskRunner

    if mode == "bare":
        bare(small, workers)
        return
    n, dim, n_classes, repeats = (2_000, 64, 10, 5) if small else (20_000, 384, 20, 20)
    X, labels = make_data(n, dim, n_classes)
    dataset = BenchmarkDataset.from_embeddings(X, labels, identity=DatasetIdentity.declared("bench-dask", "1"))
    extractors = [PrecomputedExtractor("raw"), SklearnExtractor("pca", PCA(dim // 3, random_state=0)),
                  SklearnExtractor("projection", GaussianRandomProjection(2 * dim // 3, random_state=0))]
    benchmark = Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=31),
                          stability_config=StabilityConfig(repeats=repeats),
                          separatix_config=SeparatixConfig(enabled=False), progress=False)
    # --small is below the runner's sequential threshold on purpose; force the cluster to show what it costs there.
    runner = DaskRunner(n_workers=workers, sequential_below=0 if small else 1_000_000, progress=False) if mode == "dask" else None
    result = benchmark.run(runner=runner)
    if runner is not None and runner.last_path != "dask":
        raise SystemExit(f"the dask runner took the {runner.last_path} path; the benchmark must exercise the cluster")
    result.save_json(output)


def timed(mode: str, small: bool, output: pathlib.Path, workers: int) -> float:
    command = [sys.executable, __file__, "--child", mode, "--output", str(output), "--workers", str(workers)] + (
        ["--small"] if small else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env)
    return time.perf_counter() - start


def without_timing(path: pathlib.Path) -> str:
    data = json.loads(path.read_text())
    data.pop("timing")
    return json.dumps(data, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2,000 x 64, 10 classes, 5 repeats (a quick run)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the modes this many times")
    parser.add_argument("--workers", default="2", help="comma-separated cluster sizes, e.g. 2,4,8,16")
    parser.add_argument("--child", choices=("local", "dask", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(w) for w in args.workers.split(",")]
    if args.child:
        child(args.child, args.small, args.output, sizes[0])
        return
    print(f"{'2,000 x 64, 10 classes, 5' if args.small else '20,000 x 384, 20 classes, 20'} prototype repeats, "
          f"3 extractors, k=31; {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}")
    runs = [("local", 1)] + [(mode, n) for n in sizes for mode in ("dask", "bare")]
    times: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    identical = True
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for mode, n in runs:
                output = pathlib.Path(tmp, f"{mode}-{n}.json")
                times[mode, n].append(timed(mode, args.small, output, n))
                print(f"  {mode:>5} ({n} worker{'s' if n > 1 else ''}): {times[mode, n][-1]:6.1f} s "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
                if mode == "dask":
                    identical &= without_timing(output) == without_timing(pathlib.Path(tmp, "local-1.json"))
    local = min(times["local", 1])
    print(f"sequential local runner: {local:.1f} s; result JSON identical minus timing in every dask run: {identical}")
    for n in sizes:
        distributed, reference = min(times["dask", n]), min(times["bare", n])
        print(f"DaskRunner(n_workers={n}): {distributed:.1f} s, speed-up {local / distributed:.2f}x; bare dask map of "
              f"the same scoring calls: {reference:.1f} s (speed-up {local / reference:.2f}x); DaskRunner / bare dask: "
              f"{distributed / reference:.2f}x")
    if not identical:
        raise SystemExit("a dask result differs from the sequential one")


if __name__ == "__main__":
    main()

"""Whole-process wall time of a benchmark on a 2-worker local dask cluster against the sequential local runner.

The workload of issue 15: 20,000 x 384 float32, 20 Gaussian classes, 3 extractors
(the precomputed matrix, PCA(128), a Gaussian random projection to 256), k=31 and 20
prototype stability repeats each: 3 score jobs + 60 repeats = 63 scoring calls.
Each mode runs in a fresh Python process (imports, cluster start and teardown
included), timed from outside; the two result JSON files must be byte-identical
minus their ``timing`` section.  Both processes run with one BLAS/OpenMP thread
(``OMP_NUM_THREADS=1``, what dask's nanny sets for its workers): PCA and the random
projection round differently with 2 BLAS threads, which would change the embeddings,
not the runner.  ``--small``: 2,000 x 64, 10 classes, 5 repeats.
``--rounds N`` alternates the modes N times and reports the best of each.

    python benchmarks/bench_dask.py [--small] [--rounds 1]
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


def child(mode: str, small: bool, output: str) -> None:
    """One whole run (what the parent times): build the benchmark, run it, write the result JSON."""
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, OverlapScoringConfig, PrecomputedExtractor,
                           SeparatixConfig, SklearnExtractor, StabilityConfig)
    from vertebrae.execution import DaskRunner

    n, dim, n_classes, repeats = (2_000, 64, 10, 5) if small else (20_000, 384, 20, 20)
    X, labels = make_data(n, dim, n_classes)
    dataset = BenchmarkDataset.from_embeddings(X, labels, identity=DatasetIdentity.declared("bench-dask", "1"))
    extractors = [PrecomputedExtractor("raw"), SklearnExtractor("pca", PCA(dim // 3, random_state=0)),
                  SklearnExtractor("projection", GaussianRandomProjection(2 * dim // 3, random_state=0))]
    benchmark = Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=31),
                          stability_config=StabilityConfig(repeats=repeats),
                          separatix_config=SeparatixConfig(enabled=False), progress=False)
    runner = DaskRunner(n_workers=2, progress=False) if mode == "dask" else None
    result = benchmark.run(runner=runner)
    if runner is not None and runner.last_path != "dask":
        raise SystemExit(f"the dask runner took the {runner.last_path} path; the benchmark must exercise the cluster")
    result.save_json(output)


def timed(mode: str, small: bool, output: pathlib.Path) -> float:
    command = [sys.executable, __file__, "--child", mode, "--output", str(output)] + (["--small"] if small else [])
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
    parser.add_argument("--rounds", type=int, default=1, help="alternate the two modes this many times")
    parser.add_argument("--child", choices=("local", "dask"), help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.small, args.output)
        return
    print(f"{'2,000 x 64, 10 classes, 5' if args.small else '20,000 x 384, 20 classes, 20'} prototype repeats, "
          f"3 extractors, k=31; {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}")
    times: dict[str, list[float]] = {"local": [], "dask": []}
    with tempfile.TemporaryDirectory() as tmp:
        files = {mode: pathlib.Path(tmp, f"{mode}.json") for mode in times}
        for _ in range(args.rounds):
            for mode in times:
                times[mode].append(timed(mode, args.small, files[mode]))
                print(f"  {mode:>5}: {times[mode][-1]:6.1f} s (load average {os.getloadavg()[0]:.2f})", flush=True)
        identical = without_timing(files["local"]) == without_timing(files["dask"])
    local, distributed = min(times["local"]), min(times["dask"])
    print(f"sequential local runner: {local:.1f} s; DaskRunner(n_workers=2): {distributed:.1f} s; "
          f"speed-up {local / distributed:.2f}x; result JSON identical minus timing: {identical}")
    if not identical:
        raise SystemExit("the two results differ")


if __name__ == "__main__":
    main()

"""Zero-shot benchmark: blocked nearest-prototype classification against a bare blocked GEMM + argmax.

Full size: 10,000 samples x 1,000 classes x 384 float32 dimensions, 2 prompts per
class (samples are noisy copies of their class direction).  ``--small`` (or
``VERTEBRAE_BENCH_SMALL=1``) runs 2,000 x 200 x 64 for a quick check.

Printed:
* wall time of the stage code (prototypes + blocked classification with ranks and
  margins, default budget) relative to a bare loop over sample blocks doing only the
  float32 GEMM against the prototypes and ``argmax`` (target <= 1.3x); the bare loop
  runs at our block size and at 64-row blocks, and the faster one counts; best of
  ``--repeats`` each, interleaved, because the machine may be shared; once with the
  BLAS library's default threads and once with one thread;
* the tracemalloc peak of classification under the default budget and under a small
  one, against ``max_dense_bytes`` (the sample embeddings exist before the call);
* agreement of the predictions with the bare loop's, and the per-stage runtimes of one
  complete ``ZeroShotBenchmark.run()`` (which also scores OverlapIndex as context).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
import warnings

import numpy as np

from vertebrae import (BenchmarkDataset, DatasetIdentity, PrecomputedZeroShotEncoder, ZeroShotBenchmark,
                           ZeroShotConfig, ZeroShotDataset)
from vertebrae.families.zero_shot.classify import build_prototypes, classify, plan_blocks

FULL = (10_000, 1_000, 384)
SMALL = (2_000, 200, 64)
PROMPTS_PER_CLASS = 2
SMALL_BUDGET = 24 * 2**20  # one 4,096-row tile of 1,000 classes needs 19.5 MiB


def make_data(n: int, n_classes: int, dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, dim), dtype=np.float32)
    y = np.concatenate([np.arange(n_classes), rng.integers(0, n_classes, n - n_classes)])
    samples = centers[y] + 6.0 * rng.standard_normal((n, dim), dtype=np.float32)
    prompts = np.repeat(centers, PROMPTS_PER_CLASS, axis=0) + 0.5 * rng.standard_normal(
        (n_classes * PROMPTS_PER_CLASS, dim), dtype=np.float32)
    return samples, y, prompts


def ours(samples, y, prompts, n_classes: int, budget: int):
    started = time.perf_counter()
    classes = np.repeat(np.arange(n_classes), PROMPTS_PER_CLASS)
    prototypes = build_prototypes(prompts, classes, [str(c) for c in range(n_classes)],
                                  [str(i) for i in range(len(prompts))], "cosine").matrix
    outcome = classify(samples, prototypes, y, "cosine", plan_blocks(len(y), n_classes, budget, None))
    return time.perf_counter() - started, outcome, prototypes


def bare(samples, prototypes, rows: int):
    """Blocked float32 GEMM + argmax: the floor any exact nearest-prototype classifier pays."""
    started = time.perf_counter()
    transposed = np.ascontiguousarray(prototypes.T)
    buffer = np.empty((rows, prototypes.shape[0]), dtype=np.float32)
    predictions = np.empty(samples.shape[0], dtype=np.int64)
    for start in range(0, samples.shape[0], rows):
        stop = min(start + rows, samples.shape[0])
        block = np.matmul(samples[start:stop], transposed, out=buffer[: stop - start])
        predictions[start:stop] = block.argmax(axis=1)
    return time.perf_counter() - started, predictions


def compare(samples, y, prompts, n_classes: int, budget: int, plan, repeats: int, label: str):
    """Best-of-``repeats`` wall times of ours and of the bare loops, interleaved; prints the ratio."""
    our_times, bare_block, bare_tile = [], [], []
    for _ in range(repeats):
        seconds, outcome, prototypes = ours(samples, y, prompts, n_classes, budget)
        our_times.append(seconds)
        seconds, predictions = bare(samples, prototypes, plan.rows_per_block)
        bare_block.append(seconds)
        bare_tile.append(bare(samples, prototypes, 64)[0])
    floor = min(min(bare_block), min(bare_tile))
    print(f"{label}: prototypes + blocked classify {min(our_times):.3f} s; bare GEMM + argmax "
          f"{min(bare_block):.3f} s at {plan.rows_per_block}-row blocks, {min(bare_tile):.3f} s at 64-row blocks -> "
          f"ratio {min(our_times) / floor:.2f}x to the faster (target <= 1.3x); all runs: ours "
          f"{[round(t, 3) for t in our_times]}, bare {[round(t, 3) for t in bare_block]} / "
          f"{[round(t, 3) for t in bare_tile]}")
    return outcome, predictions


def traced_peak(samples, y, prompts, n_classes: int, budget: int) -> int:
    tracemalloc.start()
    ours(samples, y, prompts, n_classes, budget)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", default=os.environ.get("VERTEBRAE_BENCH_SMALL") == "1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-full-run", action="store_true", help="skip the end-to-end run (OverlapIndex)")
    args = parser.parse_args()
    n, n_classes, dim = SMALL if args.small else FULL
    from threadpoolctl import threadpool_info, threadpool_limits

    threads = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    print(f"zero-shot benchmark: {n} samples x {n_classes} classes x {dim} float32, {PROMPTS_PER_CLASS} prompts per "
          f"class; BLAS threads {threads}; {os.cpu_count()} CPUs")
    samples, y, prompts = make_data(n, n_classes, dim)
    budget = ZeroShotConfig().max_dense_bytes
    plan = plan_blocks(n, n_classes, budget, None)

    ours(samples, y, prompts, n_classes, budget)  # warm-up
    for threads in (None, 1):
        with threadpool_limits(threads):
            outcome, predictions = compare(samples, y, prompts, n_classes, budget, plan, args.repeats,
                                           "BLAS default threads" if threads is None else "1 BLAS thread")
    agreement = float((outcome.predictions == predictions).mean())
    print(f"predictions equal to the bare loop's: {agreement:.4%}; top-1 accuracy {float((outcome.predictions == y).mean()):.4f}")

    embeddings = samples.nbytes + prompts.nbytes
    for label, limit in (("default", budget), ("small", SMALL_BUDGET)):
        peak = traced_peak(samples, y, prompts, n_classes, limit)
        limited = plan_blocks(n, n_classes, limit, None)
        print(f"tracemalloc peak of classification, {label} budget {limit / 2**20:.0f} MiB "
              f"({limited.rows_per_block} rows x {limited.n_blocks} block(s), planned block {limited.peak_bytes / 2**20:.1f} "
              f"MiB): {peak / 2**20:.1f} MiB -> {'within' if peak <= limit + embeddings else 'ABOVE'} "
              f"max_dense_bytes + embeddings ({(limit + embeddings) / 2**20:.1f} MiB)")

    if not args.skip_full_run:
        source = BenchmarkDataset.from_embeddings(samples, y, identity=DatasetIdentity.declared("bench-zero-shot", "1"))
        data = ZeroShotDataset.from_prompts(source, {c: [f"class {c} prompt {j}" for j in range(PROMPTS_PER_CLASS)]
                                                     for c in range(n_classes)})
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("bench", samples, prompts)],
                                       progress=False).run()
        runtime = {stage: round(seconds, 3) for stage, seconds in result["bench"].runtime.items()}
        print(f"ZeroShotBenchmark.run(): {time.perf_counter() - started:.2f} s in all; stage seconds {runtime}; "
              f"top-1 accuracy {result['bench'].primary_score:.4f}, overlap score (context) "
              f"{result['bench'].overlap.score:.4f}")


if __name__ == "__main__":
    main()

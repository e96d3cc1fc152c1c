"""Wall time of prototype stability against bare scoring calls.

Times 20 prototype repeats at n_jobs=1 and n_jobs=2 and reports each as a ratio to
20 x one bare ``OverlapIndexScorer.score`` call (same scorer and k) measured in
the same run, so the figures isolate the analysis overhead and the parallel gain
from the speed of the machine.  Each figure is the best of two rounds, because other
processes on a small shared machine inflate single timings.  Full size: 20,000 x 384 float32, 20 Gaussian classes;
``--small``: 2,000 x 64, 10 classes.

``--adaptive`` compares ``StabilityConfig(repeats="auto")`` with 20 fixed repeats through
``Benchmark.run()`` on three extractors of that data (the data itself: the clear winner; two
copies with independent extra noise: tied runners-up), in the same process, and prints the
repeats used, the time and tracemalloc-peak ratios, and whether the paired verdicts are identical.

    python benchmarks/bench_stability.py [--small] [--adaptive]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc

import numpy as np

from vertebrae.scoring.overlap import OverlapIndexScorer, OverlapScoringConfig
from vertebrae.scoring.stability import StabilityConfig, run_stability_analysis
from vertebrae.inputs.targets import build_targets

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
    parser.add_argument("--adaptive", action="store_true", help="repeats='auto' against 20 fixed repeats")
    args = parser.parse_args()
    n, dim, n_classes = (2_000, 64, 10) if args.small else (20_000, 384, 20)
    X, labels = make_data(n, dim, n_classes)
    if args.adaptive:
        adaptive(X, labels, n_classes)
        return
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


def adaptive(X: np.ndarray, labels: np.ndarray, n_classes: int) -> None:
    """Auto against fixed repeats on one clear winner and two tied runners-up, through Benchmark.run()."""
    from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, PrecomputedExtractor, SeparatixConfig

    rng = np.random.default_rng(1)
    runner_up = [X + rng.normal(0.0, 0.5, X.shape).astype(np.float32) for _ in range(2)]
    extractors = [PrecomputedExtractor("winner", X), PrecomputedExtractor("runner_up_a", runner_up[0]),
                  PrecomputedExtractor("runner_up_b", runner_up[1])]
    configs = {"fixed": StabilityConfig(repeats=REPEATS), "auto": StabilityConfig(repeats="auto")}
    print(f"data: {X.shape[0]:,} x {X.shape[1]} float32, {n_classes} classes, k=20, 3 extractors (winner, two tied "
          f"runners-up with extra N(0, 0.5) noise); load average at start {os.getloadavg()[0]:.2f}")

    def run(config: StabilityConfig, rows: slice = slice(None)):
        data = BenchmarkDataset.from_arrays(X[rows], labels[rows], identity=DatasetIdentity.declared("bench", "1"))
        return Benchmark(data, [PrecomputedExtractor(e.name, e.embeddings[rows]) for e in extractors],
                         scoring_config=OverlapScoringConfig(k=20), stability_config=config,
                         separatix_config=SeparatixConfig(enabled=False), progress=False).run()

    run(StabilityConfig(repeats=2), slice(0, X.shape[0] // 10))  # warm-up: imports and first-call costs
    measured = {}
    for name, config in configs.items():
        start = time.perf_counter()
        result = run(config)
        elapsed = time.perf_counter() - start
        tracemalloc.start()  # a second run for memory: tracemalloc slows the allocations it counts
        run(config)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        verdicts = [(c.candidate, c.verdict) for c in result.paired_verdicts().against_best]
        repeats = len(result["winner"].stability.repeat_scores["score"])
        measured[name] = (elapsed, peak, verdicts, repeats)
        record = result.metadata.get("adaptive_repeats")
        rounds = "" if record is None else f" in {record['rounds']} round(s), stopped: {record['stopped']}"
        print(f"{name}: {repeats} repeats{rounds}, {elapsed:.1f} s, tracemalloc peak {peak / 2**20:.0f} MiB, "
              "verdicts " + ", ".join(f"{c}={v}" for c, v in verdicts))
    (fixed_s, fixed_peak, fixed_verdicts, _), (auto_s, auto_peak, auto_verdicts, auto_n) = (measured["fixed"],
                                                                                           measured["auto"])
    print(f"auto used {auto_n} of {REPEATS} repeats: time ratio auto/fixed {auto_s / fixed_s:.2f}, peak memory ratio "
          f"{auto_peak / fixed_peak:.2f}; verdicts identical: {auto_verdicts == fixed_verdicts}")


if __name__ == "__main__":
    main()

"""Screening at scale: 500 cheap candidates over one 50,000 x 256 matrix (issue 27, item 5).

One float32 matrix of 50,000 rows and 256 columns, 4 classes: the class means differ in the
first 32 columns only, the other 224 are noise.  Each candidate is a ``CallableExtractor`` of a
module-level function that returns 64 of the columns (scaled by a per-candidate factor) for the
rows it is asked for: most candidates draw their 64 columns at random from all 256 (about 8
informative ones); candidates 5, 105, 205, ... take all 32 informative columns (clearly better).
The dataset's inputs are the row numbers, so an extractor asked for a rung's rows returns exactly
those rows.

Each run is a fresh spawned process: ``Benchmark.run()`` with
``ScreeningConfig(start_fraction=0.02)``, the full evaluation a user would run on the finalists
(``StabilityConfig(repeats=20)``), and Separatix off (on 50,000 rows it costs seconds per finalist
and says nothing about how screening scales).  Each reports its
``run()`` seconds, its peak RSS and, per rung, the rows, the candidates scored, the survivors and
the rung's seconds.  Printed: peak RSS of the 500-candidate run against a 10-candidate run (goal
<= 1.3x), and the time of each next to the candidate-rows it scored (rows x candidates, summed
over the rungs).  A 10-candidate run without screening, with the same full evaluation (stability
on), gives the cost of one candidate evaluated in full.

    python benchmarks/bench_screening_scale.py            # 10 and 500 screened, 10 in full (~4 min on 2 quiet cores)
    python benchmarks/bench_screening_scale.py --small    # 5,000 rows: a quick check of the script
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import time
from typing import Any

from fresh_process import in_fresh_process

N_COLUMNS, INFORMATIVE, WIDTH, N_CLASSES = 256, 32, 64, 4
#: Candidates GOOD_FIRST, GOOD_FIRST + GOOD_EVERY, ... take every informative column.
GOOD_EVERY, GOOD_FIRST = 100, 5
START_FRACTION = 0.02
STABILITY_REPEATS = 20
_BASE: dict[int, Any] = {}


def base_matrix(n_rows: int) -> tuple[Any, Any]:
    """The shared matrix and its labels (built once per process, seeded)."""
    import numpy as np

    if n_rows not in _BASE:
        rng = np.random.default_rng(0)
        labels = rng.integers(0, N_CLASSES, n_rows)
        matrix = rng.standard_normal((n_rows, N_COLUMNS), dtype=np.float32)
        means = rng.standard_normal((N_CLASSES, INFORMATIVE), dtype=np.float32)
        matrix[:, :INFORMATIVE] += 0.6 * means[labels]
        _BASE[n_rows] = (matrix, labels)
    return _BASE[n_rows]


def candidate_columns(i: int) -> Any:
    """Candidate ``i``'s 64 columns: all 32 informative ones for one in GOOD_EVERY, else a seeded random draw."""
    import numpy as np

    rng = np.random.default_rng(1000 + i)
    if i % GOOD_EVERY == GOOD_FIRST:
        return np.concatenate([np.arange(INFORMATIVE), rng.choice(np.arange(INFORMATIVE, N_COLUMNS), WIDTH - INFORMATIVE,
                                                                  replace=False)])
    return np.sort(rng.choice(N_COLUMNS, WIDTH, replace=False))


def column_view(i: int, n_rows: int, rows: Any) -> Any:
    """Candidate ``i``'s embedding of the asked rows (the dataset's inputs are row numbers)."""
    import numpy as np

    matrix, _ = base_matrix(n_rows)
    return matrix[np.asarray(rows).ravel()][:, candidate_columns(i)] * np.float32(1.0 + (i % 7) / 7)


def _child(n_candidates: int, n_rows: int, screen: bool, queue: Any) -> None:
    import warnings

    import numpy as np

    from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, ScreeningConfig,
                               SeparatixConfig, StabilityConfig)

    warnings.simplefilter("ignore")
    _, labels = base_matrix(n_rows)
    dataset = BenchmarkDataset.from_arrays(np.arange(n_rows).reshape(-1, 1), labels,
                                           identity=DatasetIdentity.declared("screening-scale", f"{n_rows}-v1"))
    extractors = [CallableExtractor(f"c{i:03d}", functools.partial(column_view, i, n_rows))
                  for i in range(n_candidates)]
    start = time.perf_counter()
    screening = ScreeningConfig(start_fraction=START_FRACTION) if screen else None
    result = Benchmark(dataset, extractors, screening=screening, separatix_config=SeparatixConfig(enabled=False),
                       stability_config=StabilityConfig(repeats=STABILITY_REPEATS), progress=False).run()
    seconds = time.perf_counter() - start
    ranked = result.ranked_results()
    record = result.metadata.get("screening", {})
    queue.put({"seconds": seconds, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "rungs": record.get("rungs"), "rung_seconds": result.timing.get("screening_seconds"),
               "top1": ranked[0].name if ranked else None})


def candidate_rows(rungs: list[dict[str, Any]]) -> int:
    """Rows scored summed over the candidates of every rung: the work screening does, rung by rung."""
    return sum(r["rows"] * r["candidates"] for r in rungs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="5,000 rows instead of 50,000")
    args = parser.parse_args()
    n_rows = 5000 if args.small else 50_000
    print(f"{n_rows} x {N_COLUMNS} float32, {N_CLASSES} classes, candidates of {WIDTH} columns, "
          f"ScreeningConfig(start_fraction={START_FRACTION}), stability {STABILITY_REPEATS} repeats, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    runs = {}
    for n in (10, 500):
        runs[n] = in_fresh_process(_child, n, n_rows, True)
        r = runs[n]
        print(f"\n{n} candidates (load average {os.getloadavg()[0]:.1f}): run() {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB, "
              f"top-1 {r['top1']}, candidate-rows {candidate_rows(r['rungs']):,}", flush=True)
        print(f"  {'rung':>4} {'rows':>7} {'candidates':>10} {'survivors':>9} {'seconds':>8} {'ms per 1k cand-rows':>19}")
        for rung, seconds in zip(r["rungs"], r["rung_seconds"]):
            work = rung["rows"] * rung["candidates"]
            print(f"  {rung['rung']:>4} {rung['rows']:>7} {rung['candidates']:>10} {rung['survivors']:>9} "
                  f"{seconds:>8.1f} {1000 * seconds / max(work / 1000, 1e-9):>19.2f}")
    plain = in_fresh_process(_child, 10, n_rows, False)
    print(f"\n10 candidates without screening (load average {os.getloadavg()[0]:.1f}): run() {plain['seconds']:.1f} s ({plain['seconds'] / 10:.1f} s a "
          f"candidate, so about {50 * plain['seconds']:.0f} s for 500), peak RSS {plain['peak_rss'] / 2**20:.0f} MiB, "
          f"top-1 {plain['top1']}")
    base, big = runs[10], runs[500]
    print(f"\npeak RSS 500 / 10 candidates: {big['peak_rss'] / base['peak_rss']:.3f} (goal <= 1.3)")
    print(f"time 500 / 10 candidates: {big['seconds'] / base['seconds']:.2f}x for "
          f"{candidate_rows(big['rungs']) / candidate_rows(base['rungs']):.2f}x the candidate-rows")


if __name__ == "__main__":
    main()

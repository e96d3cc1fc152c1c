"""The scoring-memory estimate of MemoryConfig against the measured peak RSS of one scoring call.

Each size runs in a fresh process: it builds the data, resets the kernel's peak-RSS
mark (``/proc/self/clear_refs``), scores once with ``OverlapIndexScorer`` and reports
the growth of the peak (VmHWM) over the resident size before the call, next to
``estimate_scoring_bytes`` for the same shape.  Linux only.

    python benchmarks/bench_memory.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SIZES = [(20_000, 384, 20, 20), (100_000, 384, 50, 20), (50_000, 768, 20, 31)]


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def child(n: int, dim: int, n_classes: int, k: int) -> None:
    import numpy as np

    from vertebrae.scoring.memory import estimate_scoring_bytes
    from vertebrae.scoring.overlap import OverlapIndexScorer, OverlapScoringConfig
    from vertebrae.inputs.targets import build_targets

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(n_classes), n // n_classes)
    X = np.empty((labels.size, dim), dtype=np.float32)
    for start in range(0, labels.size, 10_000):  # in blocks: no float64 temporary of the whole matrix
        X[start:start + 10_000] = rng.normal(0.0, 1.0, (min(10_000, labels.size - start), dim))
    X += rng.normal(0.0, 0.1, (n_classes, dim)).astype(np.float32)[labels]
    targets = build_targets(labels)
    config = OverlapScoringConfig(k=k)
    scorer = OverlapIndexScorer(config)
    scorer.score(X[:2000], targets.subset(np.arange(0, labels.size, labels.size // 2000)[:2000]))  # imports, warm-up
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset the peak-RSS mark to the current RSS
    before = _status("VmRSS")
    start = time.perf_counter()
    scorer.score(X, targets)
    seconds = time.perf_counter() - start
    measured = _status("VmHWM") - before
    estimate = estimate_scoring_bytes(X, targets, config)
    print(json.dumps({"n": n, "dim": dim, "classes": n_classes, "k": k, "measured": measured, "estimate": estimate,
                      "seconds": seconds}))


def main() -> None:
    if len(sys.argv) > 1:
        child(*map(int, sys.argv[1:]))
        return
    print(f"rows x dim, classes, k: measured peak growth / estimate (ratio estimate / measured); "
          f"load average {os.getloadavg()[0]:.2f}")
    for size in SIZES:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, __file__, *map(str, size)], check=True, capture_output=True, text=True,
                             env=env)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{row['n']:>8,} x {row['dim']}, {row['classes']} classes, k={row['k']}: "
              f"{row['measured'] / 2**20:7.1f} MiB / {row['estimate'] / 2**20:7.1f} MiB "
              f"({row['estimate'] / row['measured']:.2f}); {row['seconds']:.1f} s, "
              f"{row['seconds'] / row['n'] * 1e6:.0f} us per row", flush=True)


if __name__ == "__main__":
    main()

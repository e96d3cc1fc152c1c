"""A monitor writer for the crash tests: appends evaluations until it is killed.

Run in child processes started from a forkserver that preloads this module, so each
child starts with NumPy, scikit-learn, OverlapIndex and vertebrae already imported.
After every ``evaluate`` returns, the child appends ``index snapshot_id score`` to an
acknowledgement file: those are the rows the history must never lose.
"""

from __future__ import annotations

import os

import numpy as np
import overlapindex  # noqa: F401  (warm import in the fork server)
import sklearn.cluster  # noqa: F401  (warm import in the fork server)

from vertebrae import (BenchmarkDataset, DatasetIdentity, OverlapScoringConfig, PrecomputedExtractor,
                           RepresentationMonitor, SeparatixConfig)

SETTINGS = {"scoring_config": OverlapScoringConfig(k=4), "separatix_config": SeparatixConfig(enabled=False)}


def crash_dataset() -> BenchmarkDataset:
    rng = np.random.default_rng(7)
    centers = rng.normal(0.0, 2.0, size=(3, 4))
    X = np.vstack([rng.normal(centers[c], 1.0, size=(20, 4)) for c in range(3)])
    y = np.repeat(np.arange(3), 20)
    return BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("crash-test", "1"))


def snapshot(index: int) -> np.ndarray:
    """Snapshot ``index``'s embeddings: the data plus index-dependent noise, so scores differ between snapshots."""
    X = crash_dataset().embeddings
    return X + np.random.default_rng(index).normal(0.0, 0.3 + 0.4 * (index % 6), X.shape)


def open_monitor(history: str) -> RepresentationMonitor:
    return RepresentationMonitor(crash_dataset(), history=history, reporters=[], **SETTINGS)


def write_until_killed(history: str, acks: str) -> None:
    """Evaluate snapshot after snapshot, acknowledging each returned row, until killed."""
    ack = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with open_monitor(history) as monitor:
        index = len(monitor.history)
        while True:
            row = monitor.evaluate(PrecomputedExtractor("snapshot", snapshot(index)), snapshot_id=f"s{index}",
                                   step=index)
            os.write(ack, f"{row['evaluation_index']} {row['snapshot_id']} {row['overlap_score'].hex()}\n".encode())
            index += 1


def append_past_size_limit(history: str, report: str) -> None:
    """Hit a real partial write: RLIMIT_FSIZE stops a large line midway (EFBIG, SIGXFSZ ignored).

    Writes what it observed to ``report``: the error, whether the file shrank back, and
    whether a following evaluation still appended cleanly.
    """
    import resource
    import signal

    with open_monitor(history) as monitor:
        monitor.evaluate(PrecomputedExtractor("snapshot", snapshot(0)), snapshot_id="s0")
        size = os.path.getsize(history)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, resource.RLIM_INFINITY))
        try:
            monitor.evaluate(PrecomputedExtractor("snapshot", snapshot(1)), snapshot_id="too-big",
                             context_metadata={"padding": "x" * 65536})
            error = "none"
        except OSError as exc:
            error = f"{exc.errno}"
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        shrank_back = os.path.getsize(history) == size
        row = monitor.evaluate(PrecomputedExtractor("snapshot", snapshot(1)), snapshot_id="s1")
        with open(report, "w") as handle:
            handle.write(f"{error} {shrank_back} {row['evaluation_index']}\n")


def try_to_open(history: str, report: str) -> None:
    """Open a second writer on ``history`` and write the outcome (the error class, or "opened") to ``report``."""
    try:
        open_monitor(history).close()
        outcome = "opened"
    except Exception as exc:  # the test asserts which error it was
        outcome = f"{type(exc).__name__}: {exc}"
    with open(report, "w") as handle:
        handle.write(outcome)


def open_then_start_a_slow_child(history: str, started: str, hold: float) -> None:
    """Open ``history``, then start a subprocess that stays ``hold`` seconds between its fork and its exec.

    That child holds a copy of the locked descriptor (``O_CLOEXEC`` closes it only at exec), as
    ``lscpu`` and ``uname -p`` do for a moment when the first evaluation starts them: the test
    kills this writer meanwhile. ``started`` is created once the child runs.
    """
    import subprocess
    import time

    def between_fork_and_exec() -> None:
        open(started, "w").close()
        time.sleep(hold)

    with open_monitor(history):
        subprocess.run(["true"], preexec_fn=between_fork_and_exec, check=False)

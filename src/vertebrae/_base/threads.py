"""Thread limits for the numerical dependencies, and independent tasks (a probe's folds) on threads.

On small (2-vCPU) machines MiniBatchKMeans (OpenMP) and the Separatix probes (BLAS)
were measured 3-30x *slower* with two threads than with one, with identical results,
so every dependency call runs under ``threadpoolctl`` with a configurable limit
(default 1).  ``None`` leaves the libraries' own defaults in place.

Finding the loaded libraries costs ~4 ms (threadpoolctl walks every shared object of the
process), more than a small scoring call itself, so the controller is kept and rebuilt only
when the process has imported more modules since (a new BLAS/OpenMP library arrives with one).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
W = TypeVar("W")

#: Default thread limit for dependency calls (measured, see docs/performance.md).
DEFAULT_THREAD_LIMIT = 1

_controller: tuple[int, Any] | None = None  # (len(sys.modules) when built, the ThreadpoolController)


@contextlib.contextmanager
def limited_threads(limit: int | None) -> Iterator[None]:
    """Run the block with at most ``limit`` BLAS/OpenMP threads (no limit when None)."""
    if limit is None:
        yield
        return
    with _threadpool_controller().limit(limits=limit):
        yield


def _threadpool_controller() -> Any:
    """The process's ThreadpoolController, rebuilt when modules were imported since it was built."""
    global _controller
    modules = len(sys.modules)
    if _controller is None or _controller[0] != modules:
        from threadpoolctl import ThreadpoolController

        _controller = (len(sys.modules), ThreadpoolController())  # after the import, which may add modules
    return _controller[1]


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_workers(n_jobs: int | None, tasks: int) -> int:
    """Threads to run ``tasks`` independent tasks on: ``n_jobs``, or the CPUs this process may use, at most one per
    task."""
    return max(1, min(tasks, n_jobs or available_cpus()))


def map_single_threaded(task: Callable[[Any], T], items: Sequence[Any], *, workers: int) -> list[T]:
    """``[task(item) for item in items]`` on ``workers`` threads, every BLAS call on one thread.

    One BLAS thread per task makes each task's arithmetic independent of the worker count (the same bytes with 1
    or 8 workers), and the tasks (a probe's folds, say), not the matrix products, share the cores: on a 2-core
    machine, multithreaded products of a 1,200 x 384 fold by 3 columns were measured 7x slower than
    single-threaded ones under load.  NumPy releases the GIL inside BLAS, so threads suffice.
    """
    with limited_threads(1):
        if workers <= 1 or len(items) <= 1:
            return [task(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(task, items))


def map_reusing_workspaces(task: Callable[[Any, W], T], items: Sequence[Any], make_workspace: Callable[[], W], *,
                           workers: int) -> Iterator[T]:
    """``task(item, workspace)`` for every item on ``workers`` threads (one BLAS thread each), results yielded in
    order, each item's ``workspace`` one of ``workers + 1`` made once and reused.

    A result may live in its workspace (large scratch arrays: made once instead of page-faulted in per item) until
    the caller asks for the next result: item ``i`` starts only once the caller has taken the result of item
    ``i - workers - 1``, the last to use its workspace.  Unlike map_single_threaded in chunks of ``workers`` items,
    no worker waits for a slower neighbour, and the caller's work on one result overlaps the next items'.
    """
    slots = workers + 1 if workers > 1 and len(items) > 1 else 1
    workspaces = [make_workspace() for _ in range(min(slots, len(items)))]
    with limited_threads(1):
        if slots == 1:
            for item in items:
                yield task(item, workspaces[0])
            return
        free = [threading.Event() for _ in items]
        for event in free[:slots]:
            event.set()
        stopped = False

        def run(i: int) -> T | None:
            free[i].wait()
            return None if stopped else task(items[i], workspaces[i % slots])

        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            for i, result in enumerate(pool.map(run, range(len(items)))):
                yield result
                if i + slots < len(items):
                    free[i + slots].set()
        finally:  # on an error or an abandoned iteration, release every waiting item so that the pool can stop
            stopped = True
            for event in free:
                event.set()
            pool.shutdown(wait=True, cancel_futures=True)

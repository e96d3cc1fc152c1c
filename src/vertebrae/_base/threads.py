"""Thread limits for the numerical dependencies.

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
from collections.abc import Iterator
from typing import Any

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

"""Thread limits for the numerical dependencies.

On small (2-vCPU) machines MiniBatchKMeans (OpenMP) and the Separatix probes (BLAS)
were measured 3-30x *slower* with two threads than with one, with identical results,
so every dependency call runs under ``threadpoolctl`` with a configurable limit
(default 1).  ``None`` leaves the libraries' own defaults in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Default thread limit for dependency calls (measured, see docs/performance.md).
DEFAULT_THREAD_LIMIT = 1


@contextlib.contextmanager
def limited_threads(limit: int | None) -> Iterator[None]:
    """Run the block with at most ``limit`` BLAS/OpenMP threads (no limit when None)."""
    if limit is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=limit):
        yield

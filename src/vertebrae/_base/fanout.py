"""Fan-out of independent sub-tasks inside one job (stability repeats), when the runner offers it.

A stage stays one job of the plan; a runner that can run sub-tasks in parallel (the
dask runner, on its workers) installs a mapper for the duration of a job, and the
stage maps its repeats through :func:`fanout_map`.  Without a mapper (the local
runner) the stage runs its own loop, so results never depend on the runner.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

#: ``mapper(function, shared, items) -> [function(*shared, item) for item in items]``, in item order.
Mapper = Callable[[Callable[..., Any], tuple, Sequence[Any]], list[Any]]

_MAPPER: contextvars.ContextVar[Mapper | None] = contextvars.ContextVar("vertebrae_fanout", default=None)


def fanout_map(function: Callable[..., Any], shared: tuple, items: Sequence[Any]) -> list[Any] | None:
    """``[function(*shared, item) ...]`` through the runner's mapper; ``None`` when no runner offers one.

    ``shared`` (the large arguments, e.g. the embedding matrix) is shipped once, not per item.
    """
    mapper = _MAPPER.get()
    if mapper is None or len(items) < 2:
        return None
    return mapper(function, shared, items)


@contextlib.contextmanager
def installed(mapper: Mapper) -> Iterator[None]:
    """Offer ``mapper`` to the stages of the job run inside this block (this thread only)."""
    token = _MAPPER.set(mapper)
    try:
        yield
    finally:
        _MAPPER.reset(token)

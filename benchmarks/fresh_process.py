"""Run one measurement in a fresh spawned process, so its peak RSS is its own (shared by the bench scripts)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any


def in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    """Call ``target(*args, queue)`` in a new ``spawn`` process and return what it puts on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result

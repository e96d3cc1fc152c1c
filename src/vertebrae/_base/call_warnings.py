"""Record the warnings a dependency call raises, and only those.

``warnings.catch_warnings(record=True)`` takes every warning issued while the block runs, in any
thread and from any code: a ``ResourceWarning`` about a file some earlier code left open, fired when
the garbage collector happens to run during the call, would be recorded as the dependency's own
warning about the embedding being scored.  :func:`call_warnings` records a warning only when its
origin is the call: issued on the calling thread, and not of a category Python raises from object
finalizers (``ResourceWarning``: its origin is whichever object the collector freed, not the code
that was running).  Every other warning is issued again after the block, where it came from, so the
outer filters and handlers (the user's, pytest's) see it as they would have without the block.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator

#: Warnings that report on the lifetime of an object (raised by its finalizer), not on the call in progress.
FINALIZER_CATEGORIES: tuple[type[Warning], ...] = (ResourceWarning,)


@contextlib.contextmanager
def call_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Yield the list that receives the block's own warnings (each occurrence, ``simplefilter("always")``)."""
    owner = threading.get_ident()
    recorded: list[warnings.WarningMessage] = []
    passed: list[warnings.WarningMessage] = []

    def keep(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 - warnings' API
        item = warnings.WarningMessage(message, category, filename, lineno, file, line)
        own = threading.get_ident() == owner and not issubclass(category, FINALIZER_CATEGORIES)
        (recorded if own else passed).append(item)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = keep  # restored by catch_warnings
            yield recorded
    finally:
        for item in passed:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)

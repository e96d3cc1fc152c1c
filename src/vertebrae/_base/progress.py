"""When progress bars show: one rule for every runner and batched extractor."""

from __future__ import annotations

import sys
from typing import Any

from ..errors import ConfigTypeError


def progress_enabled(progress: bool | None) -> bool:
    """``None``: show bars only when stderr is a terminal; ``True``/``False`` force it."""
    return sys.stderr.isatty() if progress is None else bool(progress)


def check_progress(owner: str, progress: Any) -> bool | None:
    """``progress`` is None or a bool: ``"yes"`` or ``3`` would otherwise be read as True without a word."""
    if progress is not None and not isinstance(progress, bool):
        raise ConfigTypeError(f"{owner}: progress must be True, False or None (bars only when stderr is a terminal), "
                              f"got {type(progress).__name__} {progress!r}")
    return progress

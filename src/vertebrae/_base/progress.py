"""When progress bars show: one rule for every runner and batched extractor."""

from __future__ import annotations

import sys


def progress_enabled(progress: bool | None) -> bool:
    """``None``: show bars only when stderr is a terminal; ``True``/``False`` force it."""
    return sys.stderr.isatty() if progress is None else bool(progress)

"""The one wrapper around calls into user code (an extractor's or encoder's fit, transform, encode).

vertebrae's own errors pass through unchanged (they already name the argument and the fix);
any other exception becomes an :class:`~vertebrae.errors.ExtractorError` that names the
call, with the original exception as ``__cause__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..errors import ExtractorError, VertebraeError


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the block as user code; ``what`` names it in the error (``extractor 'a' failed in encode_queries``)."""
    try:
        yield
    except VertebraeError:
        raise
    except Exception as exc:
        raise ExtractorError(f"{what}: {type(exc).__name__}: {exc}") from exc

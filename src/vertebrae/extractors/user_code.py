"""The one wrapper around calls into user code (an extractor's or encoder's fit, transform, encode).

vertebrae's own errors pass through unchanged (they already name the argument and the fix);
any other exception becomes a :class:`~vertebrae.errors.UserCodeError` (an ``ExtractorError``)
that names the call, with the original exception as ``__cause__`` and its traceback as text
(what ``vertebrae run --traceback`` shows).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

from ..errors import UserCodeError, VertebraeError


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run the block as user code; ``what`` names it in the error (``extractor 'a' failed in encode_queries``)."""
    try:
        yield
    except VertebraeError:
        raise
    except Exception as exc:
        raise UserCodeError(f"{what}: {type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))) from exc

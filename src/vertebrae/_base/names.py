"""Text that is not valid Unicode: file names whose bytes are not UTF-8, rendered losslessly.

On POSIX, Python decodes an undecodable byte of a file name as a lone surrogate (``b"\\xff"`` -> ``"\\udcff"``,
PEP 383), and such a string cannot be encoded as UTF-8: written as is it raises ``UnicodeEncodeError``.  JSON
keeps it as the escape ``\\udcff`` (read back as the same string, so the bytes survive a round trip); Markdown,
HTML and the console show each such byte as ``\\xff``, the way Python's ``ascii()`` does.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point - 0xDC00:02x}" if 0xDC80 <= point <= 0xDCFF else f"\\u{point:04x}"


def printable(text: str) -> str:
    """``text`` with every lone surrogate shown as ``\\xNN`` (an undecodable byte ``NN`` of a file name) or
    ``\\uXXXX``: what a report or a terminal can encode as UTF-8."""
    return _SURROGATE.sub(_shown, text) if _SURROGATE.search(text) else text


def json_escaped(text: str) -> str:
    """JSON text with every lone surrogate written as its ``\\uXXXX`` escape (valid JSON, encodable as UTF-8, and
    decoded back to the same string)."""
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text) if _SURROGATE.search(text) else text

"""The one Markdown cell renderer: every table cell in every report goes through it."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any


def plain(value: Any, digits: int = 4) -> str:
    """The display text of one value, shared by the Markdown and HTML renderers (escaping is theirs)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "–" if not math.isfinite(value) else f"{value:.{digits}f}"
    return str(value)


#: Inline Markdown a name or label must not start: a link or image (a ``]`` followed by ``(``, ``[`` or ``:`` is
#: escaped, so ``[..](..)``, ``![..](..)``, ``[..][..]`` and ``[..]: url`` stay text while an interval such as
#: ``[0.19, 0.25]`` stays as written), emphasis, strikethrough and math (GitHub reads ``$..$``); ``_`` only where it
#: can delimit emphasis (not inside a word, so ``raw_pixels`` stays as written).
_INLINE_MARKUP = re.compile(r"\](?=[(\[:])|[*~$]|(?<![^\W_])_|_(?![^\W_])")
#: A line start Markdown reads as a block: heading, quote, list item or rule (what a name may begin with).
_BLOCK_MARKUP = re.compile(r"^(?:#{1,6}|[-+](?!-)|-{3,}|(\d{1,9})[.)])(?=\s|$)")


def cell(value: Any, digits: int = 4) -> str:
    """Render one value as a safe cell: HTML, pipes, backslashes, backticks and the inline markup of
    ``_INLINE_MARKUP`` escaped, line breaks as <br>, so a label is shown as written and never becomes a link."""
    text = plain(value, digits)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # no raw HTML from labels
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    text = _INLINE_MARKUP.sub(lambda match: "\\" + match.group(), text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")
    return text


def line_start(markdown: str) -> str:
    """Rendered inline Markdown that begins a line (a paragraph, a list item), with a leading ``#``, ``-``, ``+``
    or ``1.`` escaped so a name cannot open a heading, list or rule there (``>`` is already ``&gt;``)."""
    match = _BLOCK_MARKUP.match(markdown)
    if match is None:
        return markdown
    cut = match.end() - 1 if match.group(1) else 0  # digits cannot be escaped: escape the "." or ")" after them
    return markdown[:cut] + "\\" + markdown[cut:]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table; every header and cell is escaped."""
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(v, digits) for v in row) + " |")
    return "\n".join(lines) + "\n"


def text(value: Any) -> str:
    """Escape free text outside tables (one line; no Markdown injection through line breaks)."""
    return cell(value)

"""The one Markdown cell renderer: every table cell in every report goes through it."""

from __future__ import annotations

import math
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


def cell(value: Any, digits: int = 4) -> str:
    """Render one value as a safe cell: HTML, pipes, backslashes and backticks escaped, line breaks as <br>."""
    text = plain(value, digits)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # no raw HTML from labels
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")
    return text


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

"""The benchmark report as data: sections of paragraphs, lists and tables, built once from the serialized result.

Both renderers walk the same sections (:func:`to_markdown` here, :func:`vertebrae.reports.html.html_sections`
for the page), so the Markdown and HTML reports cannot drift apart: a section or a caveat added for one
appears in the other.  Text is plain; each renderer escapes it its own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from .markdown_table import line_start, table, text


@dataclass(frozen=True)
class Strong:
    """Emphasized text inside a paragraph (bold)."""

    text: str


@dataclass(frozen=True)
class Code:
    """A value name inside a paragraph (a recommendation label, a JSON field)."""

    text: str


Span = Union[str, Strong, Code]


@dataclass(frozen=True)
class Para:
    """One paragraph of spans."""

    spans: tuple[Span, ...]

    def __init__(self, *spans: Span) -> None:
        object.__setattr__(self, "spans", tuple(spans))


@dataclass(frozen=True)
class Items:
    """A bulleted (or numbered) list; each item is a sequence of spans."""

    items: tuple[tuple[Span, ...], ...]
    ordered: bool = False


@dataclass(frozen=True)
class Table:
    """Rows under headers.  ``secondary`` names columns a page of limited width may move out of sight: the HTML
    report shows them in a folded table beside the first ``keys`` columns (Markdown keeps one table)."""

    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    secondary: frozenset[str] = frozenset()
    keys: int = 2


@dataclass(frozen=True)
class Section:
    """A titled section; ``blocks`` may hold subsections (one level deeper)."""

    title: str
    blocks: list[Any] = field(default_factory=list)
    level: int = 2


Block = Union[Para, Items, Table, Section]


def items(entries: Sequence[Any], ordered: bool = False) -> Items:
    """A list from plain strings or span tuples."""
    return Items(tuple(entry if isinstance(entry, tuple) else (entry,) for entry in entries), ordered)


# ------------------------------------------------------------------ Markdown
def _md_spans(spans: Sequence[Span]) -> str:
    out = []
    for span in spans:
        if isinstance(span, Strong):
            out.append(f"**{text(span.text)}**")
        elif isinstance(span, Code):  # a code span is literal: no entities, only its delimiter must not occur
            out.append("`" + " ".join(str(span.text).replace("`", "'").split()) + "`")
        else:
            out.append(text(span))
    return "".join(out)


def _md_block(block: Block) -> str:
    if isinstance(block, Section):
        return section_markdown(block)
    if isinstance(block, Table):
        return table(block.headers, block.rows)
    if isinstance(block, Items):
        return "".join(f"{'1.' if block.ordered else '-'} {line_start(_md_spans(item))}\n" for item in block.items)
    return line_start(_md_spans(block.spans)) + "\n"


def section_markdown(section: Section) -> str:
    """``## Title`` then each block, blank-line separated."""
    return "#" * section.level + f" {text(section.title)}\n" + "".join("\n" + _md_block(b) for b in section.blocks)


def to_markdown(title: str, sections: Sequence[Section]) -> str:
    """The whole Markdown document: the ``#`` title, then every non-empty section."""
    return "\n".join([f"# {text(title)}\n", *(section_markdown(s) for s in sections)])

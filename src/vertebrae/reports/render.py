"""Pick the Markdown renderer of a serialized result by its ``result_type``.

Each renderer takes the decoded JSON document only (never live objects), so an
archived file regenerates the same report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._base.names import printable
from ..errors import SerializationError


def _markdown_renderers() -> dict[str, Callable[[Mapping[str, Any]], str]]:
    from ..families.retrieval.report import render_markdown as retrieval
    from ..families.zero_shot.report import render_markdown as zero_shot
    from .markdown import render_benchmark

    return {"benchmark": render_benchmark, "retrieval": retrieval, "zero_shot": zero_shot}


def render_markdown(data: Mapping[str, Any]) -> str:
    """The Markdown report of any serialized vertebrae result (a file name's undecodable bytes shown as ``\\xNN``)."""
    renderers = _markdown_renderers()
    kind = data.get("result_type")
    if kind not in renderers:
        raise SerializationError(f"$.result_type: no Markdown report for result type {kind!r}; expected one of "
                                 f"{sorted(renderers)}")
    return printable(renderers[kind](data))

"""Markdown trend table of a RepresentationMonitor history: one row per evaluation, in evaluation order.

Rendered from the monitor's rows only (the lines of its JSONL history), so a history
file read back with :func:`vertebrae.monitoring.read_history` gives the same table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .markdown_stability import interval_text
from .markdown_table import table, text


def render_trend(rows: Sequence[Mapping[str, Any]], title: str = "Representation trend") -> str:
    """A heading, a one-line summary and the table: score per snapshot, change, stability interval, errors."""
    if not rows:
        return f"# {text(title)}\n\nNo evaluations recorded yet.\n"
    primary = rows[0]["primary_metric"]
    optional = [name for name in ("epoch", "step") if any(row.get(name) is not None for row in rows)]
    stability = any(row.get("stability_mode") is not None for row in rows)
    headers = ["#", "snapshot", *optional, "status", primary, "change", "overlap_score",
               *(["stability_interval"] if stability else []), "weakest_class", "note"]
    body, previous = [], None
    for row in rows:
        score = row["primary_score"]
        change = None if score is None or previous is None else f"{score - previous:+.4f}"
        previous = score if score is not None else previous
        cells = [row["evaluation_index"], row.get("snapshot_id"), *(row.get(name) for name in optional),
                 row["status"], score, change, row.get("overlap_score")]
        if stability:
            cells.append(interval_text(row.get("stability_interval_low"), row.get("stability_interval_high")))
        body.append([*cells, row.get("weakest_class"), _note(row)])
    return "\n".join([f"# {text(title)}\n", _summary(rows, primary), table(headers, body)])


def _note(row: Mapping[str, Any]) -> str | None:
    if row["status"] == "failed":
        message = (row.get("error_message") or "").splitlines()
        return f"{row.get('error_type')} in {row.get('error_stage')}: {message[0] if message else ''}"
    if not row.get("aggregate_valid"):
        return "invalid aggregate (unscored)"
    return None


def _summary(rows: Sequence[Mapping[str, Any]], primary: str) -> str:
    failed = sum(row["status"] == "failed" for row in rows)
    scored = [row for row in rows if row["primary_score"] is not None]
    line = f"{len(rows)} evaluation(s), {failed} failed. Primary metric: **{text(primary)}**"
    if len(scored) >= 2:
        first, last = scored[0], scored[-1]
        change = last["primary_score"] - first["primary_score"]
        line += (f"; first scored snapshot {_name(first)} {first['primary_score']:.4f}, latest {_name(last)} "
                 f"{last['primary_score']:.4f} ({change:+.4f})")
    return line + ".\n"


def _name(row: Mapping[str, Any]) -> str:
    return text(row.get("snapshot_id") or f"#{row['evaluation_index']}")

"""The referee section: which of the close candidates the reference metric picks (beside "Would a linear probe ...").

Rendered from ``metadata["referee"]`` (:func:`vertebrae.selection.referee.referee_record`).  Its runtime stays in the JSON's
``timing`` section (``timing.referee.seconds``, and ``runtime.referee`` per finalist), so the report is the same
text run to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import Code, Para, Section, Table, items

BASIS_TEXT = {"tied_with_best_and_quality_cohort": "tied with the best (paired verdicts) or in the quality cohort",
              "quality_cohort": "in the quality cohort (paired verdicts need stability repeats)"}


def referee_section(data: Mapping[str, Any]) -> Section | None:
    """Per view: the finalists, their referee scores and the pick; None when no referee ran."""
    record = data["metadata"].get("referee")
    if not record:
        return None
    primary = data["metadata"]["primary_metric"]
    label, metric = record["label"], record["metric"]
    blocks: list[Any] = [Para(
        f"The ranking is by {primary}. The {label} (", Code(metric), ") referees only the finalists of each view — the "
        f"candidates {'; '.join(sorted({BASIS_TEXT[d['basis']] for d in record['views']}))} — and names its pick "
        "among them; it never changes the ranking.")]
    several = len(record["views"]) > 1
    blocks.append(items([f"[{d['view']}] {d['summary']}." if several else f"{d['summary']}." for d in record["views"]]))
    notes = [f"{'' if not several else '[' + str(d['view']) + '] '}{d['basis_note']}" for d in record["views"]
             if d["basis_note"]]
    if notes:
        blocks.append(items(notes))
    rows = []
    for d in record["views"]:
        for name in d["finalists"]:
            scored = d["results"].get(name)
            score = None if scored is None or scored["score"] is None else f"{scored['score']:.4f}"
            note = None if scored is None else scored.get("error")
            rows.append([*([d["view"]] if several else []), name, score, name == d["pick"], note])
    if any(d["needed"] for d in record["views"]):
        blocks.append(Table([*(["view"] if several else []), "finalist", metric, "pick", "error"], rows))
    return Section(f"Referee: which finalist would a {label} pick?", blocks)

"""The referee section: which of the close candidates the reference metric picks (beside "Would a linear probe ...").

Rendered from ``metadata["referee"]`` (:func:`vertebrae.selection.referee.referee_record`).  Its runtime stays in the JSON's
``timing`` section (``timing.referee.seconds``, and ``runtime.referee`` per finalist), so the report is the same
text run to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scoring.probe_verdicts import tied_clause
from .document import Code, Para, Section, Table, items

BASIS_TEXT = {"tied_with_best_and_quality_cohort": "tied with the best (paired verdicts) or in the quality cohort",
              "quality_cohort": "in the quality cohort (paired verdicts need stability repeats)",
              "every_valid_candidate": "with a valid primary score (every one)",
              "tied_with_best_quality_cohort_and_top_quarter": "tied with the best (paired verdicts), in the quality "
                                                               "cohort or in the top quarter of the ranking",
              "quality_cohort_and_top_quarter": "in the quality cohort or the top quarter of the ranking (paired "
                                                "verdicts need stability repeats)"}


def referee_section(data: Mapping[str, Any]) -> Section | None:
    """Per view: the finalists, their referee scores, the pick and whom it cannot tell from it; None without a
    referee."""
    from ..families.result_protocol import result_from_dict

    record = data["metadata"].get("referee")
    if not record:
        return None
    primary = data["metadata"]["primary_metric"]
    label, metric = record["label"], record["metric"]
    blocks: list[Any] = [Para(
        f"The ranking is by {primary}. The {label} (", Code(metric), ") referees only the finalists of each view — the "
        f"candidates {'; '.join(sorted({BASIS_TEXT[d['basis']] for d in record['views']}))} — and names its pick "
        "among them; it never changes the ranking.")]
    policy = record.get("finalists_policy")
    if policy is not None:
        blocks.append(Para(f"Finalist policy {policy['policy']!r}: {policy['why']}."))
    several = len(record["views"]) > 1
    result = result_from_dict(data)
    lines = []
    for d in record["views"]:
        clause = _tied_clause(result.referee_verdicts(d["view"]))
        lines.append(f"{'[' + str(d['view']) + '] ' if several else ''}{d['summary']}{clause}.")
    blocks.append(items(lines))
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


def _tied_clause(verdicts: Any) -> str:
    """"; it cannot tell X from Y on these folds" over the judged candidates ("" without paired fold scores)."""
    clause = tied_clause(verdicts) if verdicts.available else None
    return "" if clause is None else f"; {clause}"

"""The report section "Screening": what each rung kept, and each candidate's partial scores rung by rung."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import Para, Section, Table

TITLE = "Screening"


def screening_section(data: Mapping[str, Any]) -> Section | None:
    """The rungs (rows, candidates, survivors) and every candidate's rung history; None without screening."""
    record = data["metadata"].get("screening")
    if record is None:
        return None
    config = record["config"]
    rungs = [[r["rung"], r["rows"], r["new_rows"], r["candidates"], r["survivors"],
              "full evaluation" if r["final"] else r.get("best")] for r in record["rungs"]]
    candidates = []
    for r in data["extractor_results"]:
        screening = r.get("screening") or {}
        status = screening.get("status") or ("failed" if r.get("error") else "-")
        for entry in screening.get("rungs", []):
            verdict = entry["verdict"]
            candidates.append([r["name"], entry["rung"], entry["rows"], entry["partial_score"], verdict["verdict"],
                               verdict["mean_difference"], "yes" if entry["continued"] else entry.get("reason"),
                               status])
    return Section(TITLE, [
        Para(f"{len(record['finalists'])} of {record['candidates']} candidates reached the full evaluation. Each rung "
             f"scored every remaining candidate {config['repeats']} times on the same target-preserving subsamples "
             f"({config['subsample_fraction']} of the rung's rows); a candidate left when its paired verdict against "
             f"the rung's best was worse, and at most 1/{config['eta']} of them continued (seed {config['seed']}). "
             "Partial scores are means of the rung's repeats, comparable within a rung only; screened-out "
             "candidates are not ranked."),
        Table(["rung", "rows", "new rows", "candidates", "survivors", "best"], rungs),
        Table(["candidate", "rung", "rows", "partial score", "verdict", "mean difference", "continued", "status"],
              candidates)])


def screened_out_text(r: Mapping[str, Any]) -> str:
    """One line for a screened-out candidate's detail: where it left and why."""
    s = r["screening"]
    why = "its paired verdict against the rung's best was worse" if s["reason"] == "worse" else \
        "it was not among the rung's best 1/eta"
    return (f"Screened out at rung {s['last_rung']} ({s['rows']} rows, partial score {s['partial_score']:.4f}): "
            f"{why}. Not ranked; see Screening.")

"""The "Would a linear probe pick the same?" section and the answer's caveats on agreement and column scale.

Rendered from the serialized result's ``agreement`` list (:meth:`vertebrae.families.labeled.results.BenchmarkResult.agreement`)
and each result's ``embedding.column_scale`` record (:func:`vertebrae.inputs.embeddings.column_scale`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scoring.probe_verdicts import tied_sentence
from .document import Code, Para, Section, Strong, Table, items
from .reading import scale_text

PROBE_LABEL = "linear probe"


def agreement_title(data: Mapping[str, Any]) -> str:
    labels = {a["reference_label"] for a in data.get("agreement") or []}
    return f"Would a {PROBE_LABEL} pick the same?" if PROBE_LABEL in labels else "Would a reference metric pick the same?"


def _number(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def _verdict(a: Mapping[str, Any]) -> tuple[Any, ...]:
    """One sentence per reference metric: does it pick the primary's top candidate, and what would the pick cost."""
    head = (Strong(f"{a['reference_label']}"), " (", Code(a["reference_metric"]), "): ")
    if a["primary_top1"] is None:
        return (*head, f"not compared: {a['reason']}.")
    if a["top1_same"]:
        others = [n for n in a["reference_top1"] if n != a["primary_top1"]]
        tied = f" (tied with {', '.join(others)})" if others else ""
        return (*head, f"picks the same top candidate, {a['primary_top1']}{tied}.")
    return (*head, f"picks {', '.join(a['reference_top1'])}, not {a['primary_top1']}; taking {a['primary_top1']} "
            f"gives up {a['regret']:.4f} of its {a['reference_metric']} score.")


def agreement_section(data: Mapping[str, Any]) -> Section | None:
    """Per view and reference metric: same top-1, regret and rank correlations; None when no reference metric ran."""
    agreements = data.get("agreement") or []
    if not agreements:
        return None
    primary = agreements[0]["primary_metric"]
    views = list(dict.fromkeys(a["view"] for a in agreements))
    blocks: list[Any] = [Para(
        f"The ranking is by {primary}. The reference metrics below were scored on the same embeddings and estimate "
        "what a model trained on each would reach; they check the ranking and never change it. Regret is how much "
        f"reference score you give up by taking {primary}'s top candidate instead of the reference's best (0 when "
        "they agree). Kendall tau-b compares the whole order and weighted tau (hyperbolic weights) counts the top "
        "of the order most: 1 means the same order, 0 unrelated, -1 reversed.")]
    blocks.append(items([_verdict(a) if len(views) == 1 else (f"[{a['view']}] ", *_verdict(a)) for a in agreements]))
    probe_lines = _probe_verdict_lines(data, views)
    if probe_lines:
        blocks.append(Para(Strong("Probe verdicts"), " (each candidate against the probe's best on the same folds; "
                           "Nadeau and Bengio's corrected resampled t, docs/metrics.md \"Probe verdicts\"):"))
        blocks.append(items(probe_lines))
    view_column = ["view"] if len(views) > 1 else []
    rows = [[*([a["view"]] if view_column else []), a["reference_metric"], len(a["candidates"]),
             a["top1_same"], a["primary_top1"], ", ".join(a["reference_top1"]) or None, _number(a["regret"]),
             _number(a["kendall_tau_b"]), _number(a["weighted_tau"])] for a in agreements]
    blocks.append(Table([*view_column, "reference", "candidates", "same top-1", f"{primary} pick", "reference pick",
                         "regret", "Kendall tau-b", "weighted tau"], rows))
    notes = [f"{a['reference_metric']}{'' if len(views) == 1 else ' [' + str(a['view']) + ']'}: {a['reason']}"
             for a in agreements if a["reason"] and a["primary_top1"] is not None]
    notes += [f"{a['reference_metric']}: not compared (no valid score): {', '.join(a['excluded'])}"
              for a in agreements if a["excluded"]]
    if notes:
        blocks.append(items(notes))
    return Section(agreement_title(data), blocks)


def _probe_verdict_lines(data: Mapping[str, Any], views: list[Any]) -> list[str]:
    """"the linear probe picks X; it cannot tell X from Y and Z on these folds", per view and reference metric whose
    results carry paired fold scores."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    lines = []
    for view in views:
        for name, label in result.reference_metrics.items():
            verdicts = result.paired_verdicts(view, name)
            if verdicts.available and len(verdicts.against_best) > 1:
                worse = [c.candidate for c in verdicts.against_best if c.verdict == "worse"]
                lines.append(f"{'' if len(views) == 1 else '[' + str(view) + '] '}{tied_sentence(label, verdicts)} "
                             f"({verdicts.n_repeats} paired folds, {verdicts.interval_level:.0%} interval; worse: "
                             f"{', '.join(worse) or 'none'}).")
    return lines


def agreement_caveats(data: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """A reference metric that picks another candidate, and spaces whose few wide columns decide the score."""
    caveats: list[tuple[Any, ...]] = []
    for a in data.get("agreement") or []:
        if a["top1_same"] is False:
            where = "" if a["view"] is None else f" [{a['view']}]"
            caveats.append((Strong(f"A {a['reference_label']} would pick another candidate{where}:"),
                            f" {', '.join(a['reference_top1'])} instead of {a['primary_top1']} (regret "
                            f"{a['regret']:.4f} in {a['reference_metric']}; section \"{agreement_title(data)}\")."))
    for r in data["extractor_results"]:
        scale = (r.get("embedding") or {}).get("column_scale")
        if scale:
            caveats.append((Strong(f"A few columns decide {r['name']}'s score:"), f" {scale_text(scale)}; L2 row "
                            "normalization leaves them in charge. Standardize the columns first and compare again "
                            "(docs/metrics.md, \"Column scale\")."))
    return caveats


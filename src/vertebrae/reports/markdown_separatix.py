"""The compact Separatix part of an extractor's report detail (the full report stays in the JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import Code, Para, Section, Table
from .markdown_table import plain
from .reading import SEPARATIX_SCORE_DIRECTIONS, class_display


def _number(value: Any) -> str:
    return "–" if value is None else f"{value:.4f}"


def separatix_detail(s: Mapping[str, Any], overlap: Mapping[str, Any]) -> Section:
    """Recommendation with its decision path, key scores, probe evidence, then context and skips in one paragraph;
    class keys are shown by the labels of the extractor's ``overlap``."""
    if s["status"] != "completed":
        return Section("Separatix diagnostic", [Para("Status ", Code(s["status"]), f": {s['reason']}")], level=4)
    path = " ".join(f"({i}) {step}" for i, step in enumerate(s["decision_path"], 1))
    blocks: list[Any] = [Para("Recommendation ", Code(s["recommendation"]), f" (confidence {s['confidence']}); "
                              "descriptive only, it does not affect ranking."
                              + (f" Blocking skip: {s['reason']}." if s["reason"] else "")
                              + (f" Decision path: {path}" if path else ""))]
    scores = [[name, value, SEPARATIX_SCORE_DIRECTIONS.get(name, "see the Separatix documentation")]
              for name, value in s["scores"].items() if value is not None]
    if scores:
        blocks.append(Table(["Separatix score", "value", "direction (Separatix's own)"], scores))
    blocks += _probe_evidence(s["probe_summary"])
    blocks.append(Para(_context(s, overlap)))
    if s["warnings"]:
        blocks.append(Para("Separatix warnings: " + "; ".join(s["warnings"])))
    return Section("Separatix diagnostic", blocks, level=4)


def _probe_evidence(p: Mapping[str, Any]) -> list[Any]:
    metric = p["probe_metric"]
    if metric is None:
        head = "Best probe: unavailable (Separatix declared no primary metric for this target)."
    else:
        head = f"Best probe: {p['best_probe']} ({metric} = {_number(p['probe_score'])}; {p['metric_source']})."
    comparison = p["linear_vs_nonlinear"].get(metric) if metric else None
    if comparison:
        paired = comparison["paired"]
        interval = ("" if paired is None else
                    f", paired 95% interval [{paired['lower_95']:.4f}, {paired['upper_95']:.4f}]")
        head += (f" Linear vs nonlinear on {metric} ({comparison['direction'].replace('_', ' ')}): linear "
                 f"{_number(comparison['linear_score'])} vs {comparison['nonlinear_probe']} "
                 f"{_number(comparison['nonlinear_score'])}; favors {comparison['favored_family']} "
                 f"(nonlinear improvement {_number(comparison['nonlinear_improvement'])}{interval}; comparison "
                 f"confidence {comparison['confidence']}, recommendation confidence {p['recommendation_confidence']}).")
    columns = p["declared_primary_metrics"] or ([metric] if metric else [])
    rows = [[name, entry["family"], *(entry["metrics"].get(c) for c in columns), entry["skipped_reason"]]
            for name, entry in p["probes"].items()]
    return [Para(head), Table(["probe", "family", *columns, "skipped"], rows)]


def _preprocessing(pre: Mapping[str, Any]) -> str:
    """What Separatix was given (vertebrae's normalization and input facts) and what separatix did to it, so a
    sparse run says it stayed sparse and how the probes scaled it."""
    own = ", ".join(f"{name} {plain(value)}" for name, value in pre.items() if name != "separatix")
    theirs = ", ".join(f"{name} {plain(value)}" for name, value in (pre.get("separatix") or {}).items())
    return f"Preprocessing: {own}" + (f"; separatix's own: {theirs}" if theirs else "") + "."


def _context(s: Mapping[str, Any], overlap: Mapping[str, Any]) -> str:
    """Evaluation, preprocessing, grouping, the dense budget, skipped diagnostics and densification, as one
    paragraph."""
    p = s["probe_summary"]
    e, g, sampling = p["evaluation"], p["grouping"], p["sampling"] or {}
    parts = [f"Evaluation: {plain(e.get('cv_method'))}, {plain(e.get('n_splits'))} folds, group-aware "
             f"{plain(e.get('group_aware'))}, mode {plain(e.get('evaluation_mode'))}; probe rows "
             f"{plain(sampling.get('n_used'))} of {plain(sampling.get('n_original'))}"
             f"{' (sampled)' if sampling.get('sampled') else ''}."]
    parts.append(_preprocessing(s["preprocessing"]))
    if g.get("provided"):
        skipped = ", ".join(class_display(overlap, k) for k in g["skipped"])
        parts.append(f"Groups: {plain(g.get('group_count'))}; classes the group-aware split supports "
                     f"{plain(g.get('supported_count'))}, skipped {plain(g.get('skipped_count'))}"
                     + (f": {skipped}" if skipped else "") + ".")
    parts.append(f"Dense budget {s['effective_max_dense_mb']} MiB ({s['dense_budget_source']}), policy "
                 f"{s['config']['densify_policy']}, budget {s['config']['budget']}.")
    skips = [f"{d['name']}: {d.get('reason', '')}" for d in s["skipped_diagnostics"]]
    skips += [f"probe {name}: {reason}" for name, reason in p["skip_reasons"].items()]
    if skips:
        parts.append("Skipped: " + "; ".join(skips) + ".")
    events = [f"{e.get('operation')} for {e.get('reason')}: {e.get('status')} ({e.get('n_used')} of "
              f"{e.get('n_original')} rows, policy {e.get('policy')})" for e in s["densification_events"]]
    if events:
        parts.append("Densification: " + "; ".join(events) + ".")
    return " ".join(parts)

"""Compact Markdown for one serialized SeparatixResult (the full report stays in JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .markdown_table import table, text
from .reading import SEPARATIX_SCORE_DIRECTIONS


def _number(value: Any) -> str:
    return "–" if value is None else f"{value:.4f}"


def separatix_detail(s: Mapping[str, Any]) -> str:
    """Recommendation, confidence, decision path, key scores, probe evidence, context and skips."""
    lines = ["#### Separatix diagnostic\n"]
    if s["status"] != "completed":
        lines.append(f"Status `{s['status']}`: {text(s['reason'])}\n")
        return "\n".join(lines)
    lines.append(f"Recommendation `{text(s['recommendation'])}` (confidence {text(s['confidence'])}). "
                 "Descriptive only; it does not affect ranking.\n")
    if s["reason"]:
        lines.append(f"Blocking skip: {text(s['reason'])}\n")
    if s["decision_path"]:
        lines.append("Decision path:\n\n" + "".join(f"1. {text(step)}\n" for step in s["decision_path"]))
    scores = [[name, value, SEPARATIX_SCORE_DIRECTIONS.get(name, "see the Separatix documentation")]
              for name, value in s["scores"].items() if value is not None]
    if scores:
        lines.append(table(["Separatix score", "value", "direction (Separatix's own)"], scores))
    lines.append(_probe_evidence(s["probe_summary"]))
    lines.append(_context(s))
    skips = [f"{d['name']}: {d.get('reason', '')}" for d in s["skipped_diagnostics"]]
    skips += [f"probe {name}: {reason}" for name, reason in s["probe_summary"]["skip_reasons"].items()]
    if skips:
        lines.append("Skipped:\n\n" + "".join(f"- {text(item)}\n" for item in skips))
    events = [f"{e.get('operation')} for {e.get('reason')}: {e.get('status')} ({e.get('n_used')} of "
              f"{e.get('n_original')} rows, policy {e.get('policy')})" for e in s["densification_events"]]
    if events:
        lines.append("Densification:\n\n" + "".join(f"- {text(item)}\n" for item in events))
    if s["warnings"]:
        lines.append("Separatix warnings:\n\n" + "".join(f"- {text(w)}\n" for w in s["warnings"]))
    return "\n".join(lines)


def _probe_evidence(p: Mapping[str, Any]) -> str:
    metric = p["probe_metric"]
    if metric is None:
        head = "Best probe: unavailable (Separatix declared no primary metric for this target).\n"
    else:
        head = (f"Best probe: {text(p['best_probe'])} ({text(metric)} = {_number(p['probe_score'])}; "
                f"{text(p['metric_source'])}).\n")
    columns = p["declared_primary_metrics"] or ([metric] if metric else [])
    rows = [[name, entry["family"], *(entry["metrics"].get(c) for c in columns), entry["skipped_reason"]]
            for name, entry in p["probes"].items()]
    parts = [head, table(["probe", "family", *columns, "skipped"], rows)]
    comparison = p["linear_vs_nonlinear"].get(metric) if metric else None
    if comparison:
        paired = comparison["paired"]
        interval = ("" if paired is None else
                    f", paired 95% interval [{paired['lower_95']:.4f}, {paired['upper_95']:.4f}]")
        parts.append(
            f"Linear vs nonlinear on {text(metric)} ({comparison['direction'].replace('_', ' ')}): linear "
            f"{_number(comparison['linear_score'])} vs {text(comparison['nonlinear_probe'])} "
            f"{_number(comparison['nonlinear_score'])}; favors {comparison['favored_family']} "
            f"(nonlinear improvement {_number(comparison['nonlinear_improvement'])}{interval}; comparison confidence "
            f"{comparison['confidence']}, recommendation confidence {text(p['recommendation_confidence'])}).\n")
    return "\n".join(parts)


def _context(s: Mapping[str, Any]) -> str:
    p = s["probe_summary"]
    e, g, sampling = p["evaluation"], p["grouping"], p["sampling"] or {}
    text_parts = [f"Evaluation: {text(e.get('cv_method'))}, {text(e.get('n_splits'))} folds, "
                  f"group-aware {text(e.get('group_aware'))}, mode {text(e.get('evaluation_mode'))}; "
                  f"probe rows {text(sampling.get('n_used'))} of {text(sampling.get('n_original'))}"
                  f"{' (sampled)' if sampling.get('sampled') else ''}."]
    if g.get("provided"):
        text_parts.append(f"Groups: {text(g.get('group_count'))} ({text(g.get('supported_count'))} supported, "
                          f"{text(g.get('skipped_count'))} skipped"
                          + (f": {', '.join(text(k) for k in g['skipped'])}" if g["skipped"] else "") + ").")
    text_parts.append(f"Dense budget {s['effective_max_dense_mb']} MiB ({text(s['dense_budget_source'])}), "
                      f"policy {text(s['config']['densify_policy'])}, budget {text(s['config']['budget'])}.")
    return " ".join(text_parts) + "\n"

"""Markdown and HTML for a comparison document (built by :func:`vertebrae.reports.compare.compare_results`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._base.names import printable
from .markdown_stability import interval_text
from .markdown_table import table, text

COLUMNS = ["extractor", "rank A", "rank B", "score A", "score B", "delta", "interval A", "interval B",
           "beyond intervals", "regressed"]


def _rows(comparison: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    for c in comparison["candidates"]:
        a, b = c["interval_a"], c["interval_b"]
        rows.append([c["extractor"], c["rank_a"], c["rank_b"], c["score_a"], c["score_b"],
                     None if c["delta"] is None else f"{c['delta']:+.4f}", interval_text(*a) if a else None,
                     interval_text(*b) if b else None, c["beyond_intervals"], c["regressed"]])
    return rows


def _summary(comparison: Mapping[str, Any]) -> list[str]:
    """Plain-text sentences: the verdict, the protocol check, the top candidates and the membership changes."""
    a, b = comparison["names"]
    missing = comparison["missing"]
    regressed = [name for name in comparison["regressed"] if name not in missing]
    lines = [f"Regressed (primary score worse by more than {comparison['tolerance']:g}): {', '.join(regressed)}."
             if regressed else f"No candidate's primary score got worse by more than {comparison['tolerance']:g}."]
    if missing:
        lines.append(f"Regressed (missing from {b}; --allow-missing accepts that): {', '.join(missing)}.")
    if comparison["screened_out"]:
        lines.append("Screened out (no full-data score, so not a regression): " + ", ".join(
            f"{c['extractor']} in {c['run']} (rung {c['last_rung']}, {c['rows']} rows, partial score "
            f"{c['partial_score']:.4f})" for c in comparison["screened_out"]) + ".")
    if comparison["protocol_match"]:
        lines.append("The protocols match (dataset identity, target type, primary metric and settings).")
    else:
        lines.append("The protocols differ, so score changes may come from the protocol rather than the "
                     "representations: " + "; ".join(comparison["protocol_differences"]))
    if comparison["top_a"] == comparison["top_b"]:
        lines.append(f"Top candidate in both runs: {comparison['top_a']}.")
    else:
        lines.append(f"Top candidate changed: {comparison['top_a']} in {a}, {comparison['top_b']} in {b}.")
    if comparison["only_in_a"] and not missing:
        lines.append(f"Only in {a}: {', '.join(comparison['only_in_a'])}.")
    if comparison["only_in_b"]:
        lines.append(f"Only in {b}: {', '.join(comparison['only_in_b'])}.")
    lines.append("Deltas are B - A. 'beyond intervals' means the two runs' stability intervals do not overlap "
                 "(shown only where both runs have them); smaller changes are within the protocol's spread.")
    return lines


VERDICT_COLUMNS = ["extractor", "verdict A", "verdict B", "changed"]


def _verdict_rows(comparison: Mapping[str, Any]) -> list[list[Any]]:
    return [[r["extractor"], r["verdict_a"], r["verdict_b"], r["changed"]]
            for r in comparison["verdicts"]["candidates"]]


def _verdict_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The verdict changes in words, and why a run has no verdicts (never an empty section)."""
    verdicts = comparison["verdicts"]
    changes = [f"{r['extractor']} ({r['verdict_a']} → {r['verdict_b']})" for r in verdicts["candidates"]
               if r["changed"]]
    lines = [f"Paired verdicts against the best changed for: {', '.join(changes)}." if changes else
             "No candidate's paired verdict against the best changed between the runs."]
    lines += [f"Paired verdicts unavailable in {reason}." for reason in verdicts["unavailable"]]
    return lines


def _class_rows(comparison: Mapping[str, Any]) -> list[list[Any]]:
    return [[r["extractor"], r["class"], r["score_a"], r["score_b"], f"{r['delta']:+.4f}"]
            for r in comparison["class_regressions"]]


def render_comparison_markdown(comparison: Mapping[str, Any]) -> str:
    a, b = comparison["names"]
    parts = [f"# vertebrae comparison: {text(a)} vs {text(b)}\n",
             "".join(f"{text(line)}\n\n" for line in _summary(comparison)),
             f"## Primary score ({text(comparison['primary_metric'])})\n", table(COLUMNS, _rows(comparison))]
    if "verdicts" in comparison:
        parts += ["\n## Paired verdicts (which differences are real)\n",
                  "".join(f"{text(line)}\n\n" for line in _verdict_lines(comparison)),
                  table(VERDICT_COLUMNS, _verdict_rows(comparison))]
    if comparison["class_regressions"]:
        parts += ["\n## Per-class regressions\n", table(["extractor", "class", "score A", "score B", "delta"],
                                                        _class_rows(comparison))]
    return printable("\n".join(parts))


def render_comparison_html(comparison: Mapping[str, Any]) -> str:
    from .html import page, paragraphs, esc, html_table

    a, b = comparison["names"]
    body = [paragraphs(_summary(comparison)), f"<h2>Primary score ({esc(comparison['primary_metric'])})</h2>\n",
            html_table(COLUMNS, _rows(comparison))]
    if "verdicts" in comparison:
        body += ["<h2>Paired verdicts (which differences are real)</h2>\n", paragraphs(_verdict_lines(comparison)),
                 html_table(VERDICT_COLUMNS, _verdict_rows(comparison))]
    if comparison["class_regressions"]:
        body += ["<h2>Per-class regressions</h2>\n",
                 html_table(["extractor", "class", "score A", "score B", "delta"], _class_rows(comparison))]
    return printable(page(f"vertebrae comparison: {a} vs {b}", body))

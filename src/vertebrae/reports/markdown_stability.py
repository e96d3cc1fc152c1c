"""Markdown for stability analyses and ranking stability, from a serialized benchmark result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .markdown_table import table, text


def interval_text(low: float | None, high: float | None) -> str | None:
    """``[low, high]`` of a stability interval, or None (rendered as a dash) when absent."""
    return None if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


def stability_section(data: Mapping[str, Any]) -> str:
    """Per-extractor stability summaries and the ranking stability; empty without a stability stage."""
    analysed = [r for r in data["extractor_results"] if r.get("stability")]
    if not analysed:
        return ""
    first = analysed[0]["stability"]
    config = first["config"]
    how = (f"subsample mode (fraction {config['subsample_fraction']}, effective "
           f"{min(first['effective_subsample_fractions']):.4f})" if config["mode"] == "subsample"
           else "prototype mode (fixed data, MiniBatchKMeans seed varies)")
    lines = ["## Stability\n",
             f"Overlap score over {config['repeats']} repeats, {how}, random_state {config['random_state']}. The "
             f"stability interval is the central {config['interval_level']:.0%} percentile range of the repeat scores "
             "(a spread under this protocol, not a confidence interval); std uses ddof=1.\n"]
    rows = []
    for r in analysed:
        s = r["stability"]["summaries"]["score"]
        rows.append([r["name"], s["mean"], s["std"], s["min"], s["max"],
                     interval_text(s["interval_low"], s["interval_high"]), s["interval_high"] - s["interval_low"]])
    lines.append(table(["extractor", "mean", "std", "min", "max", "stability_interval", "width"], rows))
    ranking = data.get("ranking_stability")
    if ranking:
        tau = ranking["mean_kendall_tau"]
        lines.append("### Ranking stability\n")
        primary = data["metadata"].get("primary_metric", "overlap")
        if primary != "overlap":
            lines.append(f"These repeats re-score the overlap metric, so this is the stability of the overlap-score "
                         f"ranking, not of the **{text(primary)}** ranking in the table above.\n")
        lines.append(f"Reference ranking: mean repeat overlap score. {text(ranking['top_extractor'])} ranks first in "
                     f"{ranking['top_retention']:.0%} of the {ranking['n_repeats']} repeats; mean Kendall tau "
                     f"between repeat rankings {'–' if tau is None else f'{tau:.4f}'} "
                     f"({ranking['kendall_tau_pairs']} pairs).\n")
        lines.append(table(["extractor", "reference rank", "mean rank", "rank retention"],
                           [[name, ranking["reference_ranks"][name], ranking["mean_ranks"][name],
                             ranking["rank_retention"][name]] for name in ranking["extractors"]]))
    return "\n".join(lines)

"""Markdown for stability analyses and ranking stability, from a serialized benchmark result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scoring.stability import score_position
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
    primary = ("The first repeat (repeat 0) is the primary draw (the scorer's own seed), so the ranked score is one of the repeats. "
               if first.get("includes_primary_draw") else "")
    lines = ["## Stability\n",
             f"Overlap score over {config['repeats']} repeats, {how}, random_state {config['random_state']}. The "
             f"stability interval is the central {config['interval_level']:.0%} percentile range of the repeat scores "
             "(a spread under this protocol, not a confidence interval); std uses ddof=1. " + primary +
             "*Ranked percentile* is the share of repeats below the ranked score (ties count half).\n"]
    rows, outside = [], []
    for r in analysed:
        s = r["stability"]["summaries"]["score"]
        position = score_position(r["overlap"]["score"], r["stability"]["repeat_scores"]["score"], s["interval_low"],
                                  s["interval_high"])
        if position["relative_to_interval"] != "inside":
            outside.append(f"{text(r['name'])} ({position['score']:.4f} is {position['relative_to_interval']} "
                           f"[{s['interval_low']:.4f}, {s['interval_high']:.4f}], mean {s['mean']:.4f})")
        rows.append([r["name"], position["score"], position["percentile"], s["mean"], s["std"], s["min"], s["max"],
                     interval_text(s["interval_low"], s["interval_high"]), s["interval_high"] - s["interval_low"]])
    lines.append(table(["extractor", "ranked score", "ranked percentile", "mean", "std", "min", "max",
                        "stability_interval", "width"], rows))
    if outside:
        lines.append("**The ranked score lies outside its own stability interval** for " + "; ".join(outside)
                     + ": the ranked draw is an outlier among its own repeats, so compare extractors by the repeat "
                     "mean too.\n")
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
        if "pair_agreement" in ranking:
            lines.append(_order_text(ranking))
    return "\n".join(lines)


def _order_text(ranking: Mapping[str, Any]) -> str:
    """How often the repeats keep each adjacent pair of the overlap ranking, and the flag when one does not."""
    pairs = ", ".join(f"{text(p['better'])} over {text(p['worse'])} in {p['agreement']:.0%}"
                      for p in ranking["pair_agreement"])
    if ranking["order_stable"]:
        return f"The overlap ranking's order holds across the repeats ({pairs}).\n"
    flagged = ", ".join(f"{text(p['better'])} over {text(p['worse'])} ({p['agreement']:.0%})"
                        for p in ranking["unstable_pairs"])
    return (f"**Unstable ranking:** the repeats keep the overlap ranking's order below "
            f"{ranking['order_agreement_threshold']:.0%} of the time for {flagged}; treat those extractors as tied "
            f"under this protocol. All pairs: {pairs}.\n")

"""Report sections for stability analyses and ranking stability, and the caveats they raise for the answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..scoring.stability import score_position
from .document import Para, Section, Strong, Table


def interval_text(low: float | None, high: float | None) -> str | None:
    """``[low, high]`` of a stability interval, or None (rendered as a dash) when absent."""
    return None if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


def draw_note(score: float | None, stability: Mapping[str, Any] | None, *, with_mean: bool = True) -> str | None:
    """Why a ranked score lies outside its own stability interval, for the same line as the score; None inside.

    The ranking is by the seeded draw (the primary score; in prototype mode repeat 0 of the repeats) and
    the interval is the central percentile range of all repeats, so with few repeats the draw is often one
    of the extremes the interval leaves out.  Said where the score is shown, with the repeat mean beside it
    (``with_mean=False`` where a column already shows the mean).
    """
    if score is None or not stability:
        return None
    summary = stability["summaries"]["score"]
    position = score_position(score, stability["repeat_scores"]["score"], summary["interval_low"],
                              summary["interval_high"])
    where = position["relative_to_interval"]
    if where == "inside":
        return None
    n = position["n_repeats"]
    beyond = position["repeats_above"] if where == "above" else position["repeats_below"]
    extreme = "highest" if where == "above" else "lowest"
    config = stability["config"]
    if stability.get("includes_primary_draw"):
        why = (f"this draw is repeat 0 and the {extreme} of its {n} repeats" if beyond == 0
               else f"this draw is repeat 0, with only {beyond} of its {n} repeats {where} it")
    elif config["mode"] == "subsample":
        why = f"this draw scores every row, the repeats {config['subsample_fraction']} subsamples"
    else:
        why = f"this draw is one seed of the scorer, the {n} repeats other seeds"
    return (f"{where} its stability interval {interval_text(summary['interval_low'], summary['interval_high'])}: "
            f"{why}" + (f"; repeat mean {summary['mean']:.4f}" if with_mean else ""))


def _analysed(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in data["extractor_results"] if r.get("stability")]


def _position(r: Mapping[str, Any]) -> dict[str, Any]:
    s = r["stability"]["summaries"]["score"]
    return score_position(r["overlap"]["score"], r["stability"]["repeat_scores"]["score"], s["interval_low"],
                          s["interval_high"])


def answer_caveats(data: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What the stability analysis says against reading the ranking at face value (shown with the answer)."""
    caveats: list[tuple[Any, ...]] = []
    outside = []
    for r in _analysed(data):
        note = draw_note(r["overlap"]["score"], r["stability"])
        if note is not None:
            outside.append(f"{r['name']} ({r['overlap']['score']:.4f}, {note})")
    if outside:
        caveats.append((Strong("The ranked score lies outside its own stability interval"),
                        " for " + "; ".join(outside) + ": the ranked draw is an outlier among its own repeats, so "
                        "compare extractors by the repeat mean too (section Stability)."))
    ranking = data.get("ranking_stability")
    if ranking and ranking.get("order_stable") is False:
        flagged = ", ".join(f"{p['better']} over {p['worse']} ({p['agreement']:.0%})"
                            for p in ranking["unstable_pairs"])
        caveats.append((Strong("Unstable ranking:"), " the repeats keep the overlap ranking's order below "
                        f"{ranking['order_agreement_threshold']:.0%} of the time for {flagged}; treat those "
                        "extractors as tied under this protocol."))
    return caveats


def stability_section(data: Mapping[str, Any]) -> Section | None:
    """Per-extractor stability summaries and the ranking stability; None without a stability stage."""
    analysed = _analysed(data)
    if not analysed:
        return None
    first = analysed[0]["stability"]
    config = first["config"]
    how = (f"subsample mode (fraction {config['subsample_fraction']}, effective "
           f"{min(first['effective_subsample_fractions']):.4f})" if config["mode"] == "subsample"
           else "prototype mode (fixed data, MiniBatchKMeans seed varies)")
    primary = ("The first repeat (repeat 0) is the primary draw (the scorer's own seed), so the ranked score is one "
               "of the repeats. " if first.get("includes_primary_draw") else "")
    blocks: list[Any] = [Para(
        f"Overlap score over {len(first['repeat_scores']['score'])} repeats"
        + (" (adaptive: repeats = auto)" if config["repeats"] == "auto" else "") + f", {how}, random_state {config['random_state']}. The "
        f"stability interval is the central {config['interval_level']:.0%} percentile range of the repeat scores "
        "(a spread under this protocol, not a confidence interval); std uses ddof=1. " + primary +
        "Ranked percentile is the share of repeats below the ranked score (ties count half).")]
    rows = []
    for r in analysed:
        s, position = r["stability"]["summaries"]["score"], _position(r)
        rows.append([r["name"], position["score"], position["percentile"], s["mean"], s["std"], s["min"], s["max"],
                     draw_note(r["overlap"]["score"], r["stability"]) or interval_text(s["interval_low"],
                                                                                        s["interval_high"]),
                     s["interval_high"] - s["interval_low"]])
    blocks.append(Table(["extractor", "ranked score", "ranked percentile", "mean", "std", "min", "max",
                         "stability_interval", "width"], rows))
    ranking = data.get("ranking_stability")
    if ranking:
        blocks.append(_ranking_stability(data, ranking))
    return Section("Stability", blocks)


def _ranking_stability(data: Mapping[str, Any], ranking: Mapping[str, Any]) -> Section:
    tau = ranking["mean_kendall_tau"]
    blocks: list[Any] = []
    primary = data["metadata"].get("primary_metric", "overlap")
    if primary != "overlap":
        blocks.append(Para("These repeats re-score the overlap metric, so this is the stability of the overlap-score "
                           "ranking, not of the ", Strong(primary), " ranking in the table above."))
    blocks.append(Para(f"Reference ranking: mean repeat overlap score. {ranking['top_extractor']} ranks first in "
                       f"{ranking['top_retention']:.0%} of the {ranking['n_repeats']} repeats; mean Kendall tau "
                       f"between repeat rankings {'–' if tau is None else f'{tau:.4f}'} "
                       f"({ranking['kendall_tau_pairs']} pairs)."))
    blocks.append(Table(["extractor", "reference rank", "mean rank", "rank retention"],
                        [[name, ranking["reference_ranks"][name], ranking["mean_ranks"][name],
                          ranking["rank_retention"][name]] for name in ranking["extractors"]]))
    if "pair_agreement" in ranking:
        pairs = ", ".join(f"{p['better']} over {p['worse']} in {p['agreement']:.0%}" for p in ranking["pair_agreement"])
        verdict = ("The overlap ranking's order holds across the repeats" if ranking["order_stable"] else
                   "The overlap ranking's order does not hold across the repeats (see the caveat in the answer)")
        blocks.append(Para(f"{verdict}: {pairs}."))
    return Section("Ranking stability", blocks, level=3)

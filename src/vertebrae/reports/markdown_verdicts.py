"""The report section "Which differences are real?": paired verdicts beside the fixed-tolerance quality cohort."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .document import Para, Section, Strong, Table
from .markdown_stability import interval_text

TITLE = "Which differences are real?"


def verdict_section(data: Mapping[str, Any]) -> Section | None:
    """Per view: each candidate against the best on the same repeats, the adjacent ranks, and the quality cohort.

    None when no view has two ranked candidates (there is no difference to judge).
    """
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    views = [view for view in result.views() if len(result.ranked_results(view)) > 1]
    if not views:
        return None
    tolerance = data["metadata"].get("quality_tolerance", 0.0)
    adaptive = data["metadata"].get("adaptive_repeats")
    blocks: list[Any] = [] if adaptive is None else [Para(adaptive_text(adaptive))]
    for view in views:
        view_blocks = _view_blocks(result, view, tolerance)
        blocks += view_blocks if len(result.views()) == 1 else [Section(view or "dataset targets", view_blocks,
                                                                        level=3)]
    return Section(TITLE, blocks)


def verdict_lines(data: Mapping[str, Any]) -> list[Para]:
    """The answer's verdict line per view with two or more ranked candidates: the tied set, or why there is none."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    lines = []
    for view in result.views():
        if len(result.ranked_results(view)) < 2:
            continue
        verdicts = result.paired_verdicts(view)
        where = "" if view is None else f" ({view})"
        if not verdicts.available:
            lines.append(Para(Strong(f"Which differences are real{where}:"), f" unavailable; {verdicts.reason}."))
            continue
        lines.append(Para(Strong(f"Tied with the best{where}"),
                          verdict_text(verdicts, data["metadata"].get("adaptive_repeats"))))
    return lines


def verdict_text(verdicts: Any, adaptive: Mapping[str, Any] | None) -> str:
    """What follows "Tied with the best" in the verdict line (the reports' answer and the CLI's summary)."""
    worse = [c.candidate for c in verdicts.against_best if c.verdict == "worse"]
    return (f" (paired verdicts over {verdicts.n_repeats} repeats, {verdicts.interval_level:.0%} interval): "
            f"{', '.join(verdicts.tied_names)}"
            + (f"; worse: {', '.join(worse)}." if worse else "; no candidate is clearly worse.")
            + ("" if adaptive is None else f" {adaptive_text(adaptive)}"))


def adaptive_text(record: Mapping[str, Any]) -> str:
    """The adaptive-repeats line: how many repeats in how many rounds, and which verdicts stayed undecided."""
    rounds = record["rounds"]
    head = (f"Adaptive repeats: stopped after {record['repeats']} repeats ({rounds} round{'' if rounds == 1 else 's'}); ")
    if not record["undecided"]:
        return head + "all verdicts decided."
    return head + ("max_repeats reached with these verdicts undecided (their interval covers 0 but not only within "
                   f"the equivalence margin {record['equivalence_margin']:g}): {', '.join(record['undecided'])}.")


def _view_blocks(result: Any, view: str | None, tolerance: float) -> list[Any]:
    verdicts = result.paired_verdicts(view)
    cohort = [r.name for r in result.quality_cohort(view=view)]
    cohort_text = (f"Quality cohort (within a fixed {tolerance:g} of the best primary score, the spec's rule): "
                   f"{', '.join(cohort)}.")
    if not verdicts.available:
        return [Para(Strong("Paired verdicts unavailable:"), f" {verdicts.reason}."), Para(cohort_text)]
    scores = {r.name: r.primary_score for r in result.ranked_results(view)}
    ranks = {r.result.name: r.rank for r in result.ranking(view)}
    level = f"{verdicts.interval_level:.0%}"
    blocks: list[Any] = [Para(
        f"Each candidate is compared with the best on the same {verdicts.n_repeats} stability repeats (same seeds "
        "and rows, so the noise they share cancels): d_r is the candidate's repeat score minus the best's, signed so "
        f"that negative means worse. The interval is the {level} confidence interval of the mean d_r (Student's t over "
        "the repeats, the paired t-test's interval: it narrows as repeats are added); share better counts the "
        "repeats in which the "
        "candidate beats the best, ties counting half. Verdict: tied when the interval covers 0, worse when it lies "
        "entirely below 0."),
        Table(["rank", "extractor", "primary score", "mean difference", "difference interval", "share better",
               "verdict"],
              [[ranks[c.candidate], c.candidate, scores[c.candidate], c.mean_difference,
                interval_text(c.difference_low, c.difference_high), c.share_better,
                c.verdict + (" (repeats favour it)" if c.contradicts_ranking else "")]
               for c in verdicts.against_best])]
    contradicted = [c.candidate for c in verdicts.against_best if c.contradicts_ranking]
    if contradicted:
        blocks.append(Para(Strong("The repeats contradict the ranking"), f" for {', '.join(contradicted)}: its paired "
                           "interval lies entirely above 0, so it beats the top candidate in the repeats although the "
                           "full-data score ranks it lower. It is kept in the tied set, never called worse."))
    blocks.append(Para(Strong("Tied with the best:"), f" {', '.join(verdicts.tied_names)}. ", cohort_text,
                       " The cohort asks whether a score is within a fixed distance of the best; the verdict asks "
                       "whether the difference exceeds the repeat-to-repeat noise of this run, so the two can "
                       "disagree either way."))
    blocks.append(Para("Adjacent ranks, each against the one above it on the same repeats:"))
    blocks.append(Table(["above", "below", "mean difference", "difference interval", "share better", "verdict"],
                        [[c.reference, c.candidate, c.mean_difference,
                          interval_text(c.difference_low, c.difference_high), c.share_better,
                          c.verdict + (" (repeats favour the lower)" if c.contradicts_ranking else "")]
                         for c in verdicts.adjacent]))
    return blocks

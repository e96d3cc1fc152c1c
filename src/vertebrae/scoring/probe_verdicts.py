"""Probe verdicts: which differences between cross-validated probe scores are larger than the folds' noise.

A probe metric (``LinearProbeMetric`` and any metric that records ``diagnostics["fold_scores"]``)
scores every candidate of a run on the *same* folds: the folds depend only on the labels, the
groups and the seed, which a run shares.  So fold j of one candidate is paired with fold j of
another, and comparing the candidates fold by fold cancels the difficulty both folds share.

Fold scores are not independent draws, though: two folds' training sets overlap in
``(K - 2) / (K - 1)`` of their rows, so the plain paired-t interval is too narrow.  Nadeau and
Bengio's corrected resampled t (Machine Learning 52, 2003) widens the variance of the mean paired
difference from ``s² / J`` to ``s² · (1/J + n_test/n_train)``, J the number of paired folds
(``n_splits × n_repeats``), with Student's t on J - 1 degrees of freedom.  The verdicts then read as
the overlap score's paired verdicts do (:mod:`vertebrae.scoring.paired_verdicts`): ``best``, ``tied``
(the interval covers 0) or ``worse``.  Rules: docs/metrics.md ("Probe verdicts").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metric_result import MetricResult
from .paired_verdicts import Interval, PairedVerdicts, adjacent, against_best, best_itself, t_interval

#: The two-sided level of every probe verdict's interval (the stability default's).
PROBE_INTERVAL_LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class FoldPlan:
    """How one candidate's fold scores were made: what must match for two candidates to be paired."""

    n_splits: int
    n_repeats: int
    seed: Any
    #: Mean test-fold size over mean training-fold size (``1 / (n_splits - 1)`` when the sizes are not recorded).
    test_train_ratio: float
    fold_test_sizes: tuple[int, ...] | None

    def pairing(self) -> tuple[Any, ...]:
        return self.n_splits, self.n_repeats, self.seed, self.fold_test_sizes


def fold_plan(result: MetricResult) -> tuple[FoldPlan | None, np.ndarray | None, str | None]:
    """(plan, fold scores, why not) of one probe MetricResult; the plan is None when it has no usable fold scores."""
    scores = result.diagnostics.get("fold_scores")
    n_splits = result.metadata.get("n_splits")
    if not isinstance(scores, list) or not scores or not isinstance(n_splits, int):
        return None, None, "carries no per-fold scores (diagnostics['fold_scores'] and metadata['n_splits'])"
    n_repeats = int(result.metadata.get("n_repeats", 1))
    values = np.asarray(scores, dtype=np.float64)
    if values.size != n_splits * n_repeats or not np.isfinite(values).all():
        return None, None, (f"has {values.size} fold scores for n_splits={n_splits} x n_repeats={n_repeats}, or a "
                            "non-finite one")
    tests, trains = result.metadata.get("fold_test_sizes"), result.metadata.get("fold_train_sizes")
    ratio = (float(np.mean(tests)) / float(np.mean(trains)) if tests and trains else 1.0 / (n_splits - 1))
    return FoldPlan(n_splits, n_repeats, result.metadata.get("seed"), ratio,
                    None if not tests else tuple(int(t) for t in tests)), values, None


def corrected_interval(test_train_ratio: float) -> Interval:
    """Nadeau and Bengio's corrected resampled t interval of the mean paired fold difference.

    ``mean ± t(level, J - 1) · s · sqrt(1/J + n_test/n_train)``: :func:`t_interval` with the divisor
    ``1 / sqrt(1/J + ratio)`` (the plain paired t's is ``sqrt(J)``).
    """
    def interval(differences: np.ndarray, level: float) -> tuple[float, float, float]:
        return t_interval(differences, level, 1.0 / np.sqrt(1.0 / differences.size + test_train_ratio))

    return interval


def probe_verdicts(view: str | None, scored: Sequence[tuple[str, MetricResult]], metric: str,
                   level: float = PROBE_INTERVAL_LEVEL) -> PairedVerdicts:
    """Every candidate of ``scored`` ((name, its ``metric`` result), in the primary ranking's order) against the
    metric's best on the same folds.

    Candidates without a valid score are left out; the best is the highest score in the metric's direction
    (equal scores: the first in ranking order).  ``available`` is False with a ``reason`` when there are no
    paired fold scores to compare.
    """
    valid = [(name, r) for name, r in scored if r.rankable]
    if not valid:
        return PairedVerdicts(view=view, available=False,
                              reason=f"no candidate has a valid {metric} score, so there is nothing to compare")
    higher = valid[0][1].higher_is_better
    ordered = sorted(valid, key=lambda item: -item[1].score if higher else item[1].score)  # stable: ties keep order
    plans, lists = [], []
    for name, r in ordered:
        plan, values, why = fold_plan(r)
        if plan is None:
            return PairedVerdicts(view=view, available=False, reason=f"{metric} of {name} {why}, so its folds "
                                  "cannot be paired (probe verdicts need a metric that records its fold scores, "
                                  "e.g. LinearProbeMetric)")
        plans.append(plan)
        lists.append((name, values))
    unpaired = [name for (name, _), plan in zip(ordered, plans) if plan.pairing() != plans[0].pairing()]
    if unpaired:
        return PairedVerdicts(view=view, available=False, reason=(
            f"{metric} of {', '.join(unpaired)} used other folds than {ordered[0][0]} (n_splits, n_repeats, seed "
            "or fold sizes differ), so the fold scores are not paired (score every candidate in one run)"))
    n_folds = plans[0].n_splits * plans[0].n_repeats
    if len(lists) == 1:
        return PairedVerdicts(view=view, available=True, interval_level=level, n_repeats=n_folds,
                              against_best=(best_itself(lists[0][0], n_folds),))
    rule = {"higher_is_better": higher, "interval_level": level,
            "interval": corrected_interval(plans[0].test_train_ratio)}
    return PairedVerdicts(view=view, available=True, interval_level=level, n_repeats=n_folds,
                          against_best=tuple(against_best(lists, **rule)), adjacent=tuple(adjacent(lists, **rule)))


def tied_sentence(label: str, verdicts: PairedVerdicts) -> str:
    """"the linear probe picks X; it cannot tell X from Y and Z on these folds" (see :func:`tied_clause`)."""
    clause = tied_clause(verdicts)
    return f"the {label} picks {verdicts.tied_names[0]}" + ("" if clause is None else f"; {clause}")


def tied_clause(verdicts: PairedVerdicts) -> str | None:
    """"it cannot tell X from Y and Z on these folds", or that every other candidate is worse; None with one."""
    best, *tied = verdicts.tied_names
    if len(verdicts.against_best) == 1:
        return None
    if not tied:
        return f"every other candidate is worse than {best} on these folds"
    return f"it cannot tell {best} from {_and(tied)} on these folds"


def capitalized(sentence: str) -> str:
    """The sentence with its first letter upper-cased (candidate names inside keep their case)."""
    return sentence[:1].upper() + sentence[1:]


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

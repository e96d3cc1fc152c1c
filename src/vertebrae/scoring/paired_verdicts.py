"""Paired verdicts: which differences between candidates are larger than the repeat-to-repeat noise.

A benchmark gives every candidate the same :class:`StabilityConfig`, so repeat r of every
candidate used the same scoring seed (and, in subsample mode, the same rows): the repeats
are *paired*.  Comparing a candidate with a reference repeat by repeat cancels the noise
both share, which makes small real differences visible that two overlapping stability
intervals would hide.  The rules are spelled out in docs/stability.md ("Paired verdicts").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import InputValidationError

#: ``best``: the top candidate of its view; ``tied``: the paired interval covers 0 (or lies entirely on the better
#: side, flagged by ``contradicts_ranking``); ``worse``: the interval lies entirely on the worse side.
VERDICTS = ("best", "tied", "worse")
#: What turns paired verdicts on (said wherever they are unavailable for lack of repeats).
NEEDS_STABILITY = ("paired verdicts need stability repeats: pass stability_config=StabilityConfig(mode='prototype', "
                   "repeats=20) to Benchmark, or add a [stability] section with repeats = 20 to the run config")


@dataclasses.dataclass(frozen=True)
class PairedComparison:
    """``candidate`` against ``reference`` over the same repeats.

    Differences are signed so that negative means the candidate is worse, whatever the
    metric's direction: ``d_r = s_candidate,r - s_reference,r`` for a higher-is-better
    score, the opposite for lower-is-better.  ``difference_low``/``difference_high`` are
    the ``interval_level`` confidence interval of the mean paired difference (Student's t
    over the ``d_r``, the paired t-test's interval): it narrows as repeats are added, which
    is what lets adaptive repeats decide (a screening rung passes its own, wider interval:
    vertebrae.selection.screening.full_data_interval); ``share_better`` is the share of repeats with
    ``d_r > 0``, ties counting half.  ``contradicts_ranking`` is True when the whole interval lies above 0:
    the repeats say the lower-ranked candidate is better, against the full-data ranking
    (its verdict stays ``tied``: it cannot be ruled out, and it is never called ``worse``).
    """

    candidate: str
    reference: str
    n_repeats: int
    mean_difference: float
    difference_low: float
    difference_high: float
    share_better: float
    verdict: str
    contradicts_ranking: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: ``interval(differences, level) -> (mean, low, high)``: how a comparison turns the paired differences into an interval.
Interval = Callable[[np.ndarray, float], tuple[float, float, float]]


def compare_paired(candidate: str, reference: str, candidate_scores: Sequence[float],
                   reference_scores: Sequence[float], *, higher_is_better: bool,
                   interval_level: float, interval: Interval | None = None) -> PairedComparison:
    """The paired comparison of two aligned repeat-score lists (``tied`` or ``worse``; see :class:`PairedComparison`).

    ``interval`` defaults to :func:`mean_interval`; screening rungs pass their own (vertebrae.selection.screening).
    """
    a = np.asarray(candidate_scores, dtype=np.float64)
    b = np.asarray(reference_scores, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise InputValidationError(f"paired comparison of {candidate!r} with {reference!r} needs two aligned lists of "
                                   f"at least 2 repeat scores, got {a.size} and {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise InputValidationError(f"paired comparison of {candidate!r} with {reference!r}: repeat scores must be "
                                   "finite")
    d = a - b if higher_is_better else b - a
    mean, low, high = (mean_interval if interval is None else interval)(d, interval_level)
    share = float(((d > 0).sum() + 0.5 * (d == 0).sum()) / d.size)
    verdict = "worse" if high < 0 else "tied"
    return PairedComparison(candidate=candidate, reference=reference, n_repeats=int(d.size),
                            mean_difference=mean, difference_low=low, difference_high=high, share_better=share,
                            verdict=verdict, contradicts_ranking=bool(low > 0))


def mean_interval(differences: np.ndarray, level: float) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided ``level`` Student-t confidence interval of the mean of ``differences``.

    Identical differences (zero spread) give the point interval ``[mean, mean]``.
    """
    return t_interval(differences, level, np.sqrt(differences.size))


def t_interval(differences: np.ndarray, level: float, divisor: float) -> tuple[float, float, float]:
    """(mean, low, high): ``mean ± t(level, n - 1) · sd / divisor``, the shape of every paired interval (``divisor``
    sqrt(n) gives the mean's; a screening rung's is :func:`vertebrae.selection.screening.full_data_interval`)."""
    from scipy import stats

    mean = float(differences.mean())
    spread = float(differences.std(ddof=1))
    half = float(stats.t.ppf((1 + level) / 2, differences.size - 1) * spread / divisor) if spread > 0 else 0.0
    return mean, mean - half, mean + half


def best_itself(name: str, n_repeats: int) -> PairedComparison:
    """The top candidate's own entry: verdict ``best``, difference 0, half of its repeats 'better' than itself."""
    return PairedComparison(candidate=name, reference=name, n_repeats=n_repeats, mean_difference=0.0,
                            difference_low=0.0, difference_high=0.0, share_better=0.5, verdict="best",
                            contradicts_ranking=False)


def against_best(ranked: Sequence[tuple[str, Sequence[float]]], *, higher_is_better: bool,
                 interval_level: float, interval: Interval | None = None) -> list[PairedComparison]:
    """Every candidate of ``ranked`` ((name, repeat scores), best first) against the first one."""
    (best, best_scores), rest = ranked[0], ranked[1:]
    return [best_itself(best, len(best_scores)),
            *(compare_paired(name, best, scores, best_scores, higher_is_better=higher_is_better,
                             interval_level=interval_level, interval=interval) for name, scores in rest)]


def adjacent(ranked: Sequence[tuple[str, Sequence[float]]], *, higher_is_better: bool,
             interval_level: float, interval: Interval | None = None) -> list[PairedComparison]:
    """Each rank against the rank above it (candidate: the lower-ranked one; reference: the one above)."""
    return [compare_paired(lower, upper, lower_scores, upper_scores, higher_is_better=higher_is_better,
                           interval_level=interval_level, interval=interval)
            for (upper, upper_scores), (lower, lower_scores) in zip(ranked, ranked[1:])]


@dataclasses.dataclass(frozen=True)
class PairedVerdicts:
    """The paired verdicts of one view, or why there are none (``available`` False and a ``reason``).

    ``against_best`` is in ranking order and starts with the best itself; ``adjacent`` has one
    entry per adjacent pair of the ranking.  Probe verdicts (:mod:`vertebrae.scoring.probe_verdicts`) have the
    same shape, ordered by the probe's score, with ``n_repeats`` the number of paired folds (splits x repeats).
    """

    view: str | None
    available: bool
    reason: str | None = None
    interval_level: float | None = None
    n_repeats: int | None = None
    against_best: tuple[PairedComparison, ...] = ()
    adjacent: tuple[PairedComparison, ...] = ()

    @property
    def tied_names(self) -> list[str]:
        """The best and every candidate ``tied`` with it, in ranking order."""
        return [c.candidate for c in self.against_best if c.verdict in ("best", "tied")]

"""Agreement of the primary ranking with each reference metric's ranking ("would a linear probe pick the same?").

A metric is a *reference* when it declares ``reference`` — the plain-language name of the model
it stands for, e.g. ``LinearProbeMetric.reference == "linear probe"``.  A benchmark records its
reference metrics in ``metadata["reference_metrics"]`` (name and label, in order), and everything here is
derived from the results: per view, over the candidates that have a valid primary score and a
valid reference score, both rankings oriented so that better is higher.  Definitions and the
rules for ties and small views are in docs/metrics.md ("Agreement with the reference metrics").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..families.result_protocol import rank_results

#: Fewest candidates a rank correlation is defined on.
MIN_CANDIDATES = 2


def reference_metrics(metrics: Sequence[Any], primary_metric: str) -> list[dict[str, str]]:
    """``[{"name", "label"}]`` of the metrics that declare a ``reference`` label, in their order, the primary excepted.

    A list, not a mapping: the JSON writer sorts keys, and the agreement keeps the metrics' order.
    """
    return [{"name": m.name, "label": m.reference} for m in metrics
            if isinstance(getattr(m, "reference", None), str) and m.reference and m.name != primary_metric]


def probe_metrics() -> list[Any]:
    """What ``vertebrae run --probe`` (``[benchmark] probe = true``) adds: a linear probe and a k-NN model."""
    from ..scoring.knn_metric import KNNMetric
    from ..scoring.linear_probe import LinearProbeMetric

    return [LinearProbeMetric(), KNNMetric()]


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How one view's primary ranking agrees with one reference metric's ranking.

    ``candidates`` are the compared results in primary-ranking order; ``excluded`` have a valid
    primary score but no valid reference score.  ``regret`` is in the reference metric's units:
    how much worse (by the reference) the primary's top candidate is than the reference's best
    (0.0 when they agree).  A value that is undefined is None and ``reason`` says why.
    """

    view: str | None
    primary_metric: str
    reference_metric: str
    reference_label: str
    candidates: list[str]
    excluded: list[str]
    kendall_tau_b: float | None
    weighted_tau: float | None
    primary_top1: str | None
    reference_top1: list[str]
    top1_same: bool | None
    regret: float | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _oriented(score: float, higher_is_better: bool) -> float:
    return score if higher_is_better else -score


def reference_scores(results: Sequence[Any], metric: str) -> dict[str, float]:
    """Name -> reference score oriented higher-is-better, for valid results whose reference score is valid."""
    scores = {}
    for r in results:
        m = r.metrics.get(metric) if r.aggregate_valid else None
        if m is not None and m.rankable:
            scores[r.name] = _oriented(m.score, m.higher_is_better)
    return scores


def competition_ranks(scores: Mapping[str, float]) -> dict[str, int]:
    """Rank 1 for the highest score; equal scores share the better rank (1, 1, 3), as the primary ranking does."""
    ordered = sorted(scores.values(), reverse=True)
    return {name: ordered.index(score) + 1 for name, score in scores.items()}


def view_agreement(results: Sequence[Any], primary_metric: str, metric: str, label: str,
                   view: str | None) -> Agreement:
    """The agreement of one view's primary ranking (``results``: that view's results) with ``metric``."""
    from scipy import stats

    ranked = [r.result for r in rank_results(results)]
    reference = reference_scores(ranked, metric)
    compared = [r for r in ranked if r.name in reference]
    names = [r.name for r in compared]
    primary = [_oriented(r.primary_score, r.higher_is_better) for r in compared]
    ref = [reference[name] for name in names]
    facts: dict[str, Any] = {"kendall_tau_b": None, "weighted_tau": None, "primary_top1": None, "reference_top1": [],
                             "top1_same": None, "regret": None, "reason": None}
    if not compared:
        facts["reason"] = (f"no candidate has both a valid primary score and a valid {metric!r} score, so nothing "
                           "can be compared")
    else:
        best = max(ref)
        facts.update(primary_top1=names[0], reference_top1=[n for n, s in zip(names, ref) if s == best],
                     top1_same=bool(ref[0] == best), regret=float(best - ref[0]))
        if len(compared) < MIN_CANDIDATES:
            facts["reason"] = (f"rank correlations need at least {MIN_CANDIDATES} candidates with valid scores on "
                               f"both metrics; this view has {len(compared)}")
        elif len(set(primary)) == 1 or len(set(ref)) == 1:
            tied = "the primary metric" if len(set(primary)) == 1 else repr(metric)
            facts["reason"] = f"every candidate has the same score under {tied}, so rank correlations are undefined"
        else:
            facts["kendall_tau_b"] = float(stats.kendalltau(primary, ref).statistic)
            facts["weighted_tau"] = float(stats.weightedtau(primary, ref).statistic)
    excluded = [r.name for r in ranked if r.name not in reference]
    return Agreement(view=view, primary_metric=primary_metric, reference_metric=metric, reference_label=label,
                     candidates=names, excluded=excluded, **facts)

"""The referee: the primary metric screens every candidate, a reference metric judges only the finalists.

``Benchmark(..., referee=LinearProbeMetric())`` keeps the ranking the primary metric's (the spec), and
then asks the question the user asks next — which of the close candidates would a linear probe
pick? — at the probe's cost on a few candidates instead of all of them.  Finalists per view are the
candidates statistically tied with the best (paired verdicts, :meth:`BenchmarkResult.tied_with_best`)
plus the fixed-tolerance quality cohort, valid results only; without stability repeats the finalists
are the quality cohort and the record says so.  A single finalist needs no referee (it is not
computed).  The referee's scores come from the ``referee`` stage (:mod:`vertebrae.families.labeled.stages`),
planned in a second round for the finalists only, so its keys, cache and runners are the run path's.

The record lives in ``metadata["referee"]`` of the result (:func:`referee_record`); the
recommendations and the report name the pick.  Definitions: docs/metrics.md ("The referee").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from .._base.result_schema import ANY, NUMBER, Choice, MapOf, nullable
from ..scoring import metric_result
from ..scoring.metric_result import MetricResult
from ..scoring.metrics import Metric, check_metric

#: ``vertebrae run --referee NAME`` / ``[benchmark] referee = "NAME"``: the built-in referees.
REFEREE_NAMES = ("probe",)
#: How the finalists were chosen: paired verdicts plus the quality cohort, or the quality cohort alone.
BASES = ("tied_with_best_and_quality_cohort", "quality_cohort")


def referee_metric(name: Any, where: str = "referee") -> Metric:
    """The metric a referee name stands for (``probe``: :class:`~vertebrae.LinearProbeMetric` with its defaults)."""
    if name == "probe":
        from ..scoring.linear_probe import LinearProbeMetric

        return LinearProbeMetric()
    raise ConfigError(f"{where} must be one of {list(REFEREE_NAMES)}, got {name!r}")


def check_referee(referee: Any, target_type: str) -> Metric | None:
    """``Benchmark(referee=...)``: None, or a rankable metric of the metric protocol that supports the targets."""
    if referee is None:
        return None
    check_metric(referee, "referee", target_type, remove="pass another referee or none")
    if not referee.aggregate_valid:
        raise ConfigError(f"referee {referee.name!r} declares aggregate_valid=False (a descriptive metric); a referee "
                          "must rank the finalists, e.g. referee=LinearProbeMetric()")
    return referee


def label_of(metric: Metric) -> str:
    """How sentences name the referee: its ``reference`` label (``linear probe``), else its metric name."""
    label = getattr(metric, "reference", None)
    return label if isinstance(label, str) and label else metric.name


def finalists(result: Any, view: str | None) -> tuple[list[str], str, str | None]:
    """(finalist names in ranking order, basis, why paired verdicts were not used) of one view of a result.

    Valid results only: the tied set (when paired verdicts are available) united with the quality cohort.
    """
    ranked = [r.name for r in result.ranked_results(view)]
    chosen = {r.name for r in result.quality_cohort(view=view)}
    verdicts = result.paired_verdicts(view) if ranked else None
    if verdicts is not None and verdicts.available:
        chosen |= set(verdicts.tied_names)
        return [name for name in ranked if name in chosen], BASES[0], None
    reason = None if verdicts is None else verdicts.reason
    return [name for name in ranked if name in chosen], BASES[1], reason


@dataclasses.dataclass(frozen=True)
class RefereeDecision:
    """The referee's verdict in one view: who were the finalists, their referee scores, the pick and why."""

    view: str | None
    basis: str
    basis_note: str | None
    finalists: list[str]
    #: Finalist name -> the referee's MetricResult (empty when the referee was not needed).
    results: dict[str, MetricResult]
    pick: str | None
    needed: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.view, "basis": self.basis, "basis_note": self.basis_note, "finalists": list(self.finalists),
                "results": {name: r.to_dict() for name, r in self.results.items()}, "pick": self.pick,
                "needed": self.needed, "summary": self.summary}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RefereeDecision":
        return cls(data["view"], data["basis"], data["basis_note"], list(data["finalists"]),
                   {name: MetricResult.from_dict(r) for name, r in data["results"].items()}, data["pick"],
                   data["needed"], data["summary"])


def decide(view: str | None, names: Sequence[str], basis: str, basis_note: str | None, referee: Metric,
           results: Mapping[str, MetricResult], primary: str) -> RefereeDecision:
    """The pick among ``names`` (ranking order) by the referee's valid scores, direction-aware; ties keep ranking order."""
    label, count = label_of(referee), len(names)
    head = f"{primary} finalists: {count}"
    if count == 0:
        return RefereeDecision(view, basis, basis_note, [], {}, None, False,
                               f"{head}; no candidate has a valid {primary} score, so there is nothing to referee")
    if count == 1:
        return RefereeDecision(view, basis, basis_note, list(names), {}, names[0], False,
                               f"{head} ({names[0]}); the {label} referee was not needed")
    valid = [(name, results[name].score) for name in names if name in results and results[name].rankable]
    if not valid:
        return RefereeDecision(view, basis, basis_note, list(names), dict(results), None, True,
                               f"{head}; no finalist has a valid {referee.name} score, so the {label} picks none "
                               f"(see each finalist's error)")
    sign = 1.0 if referee.higher_is_better else -1.0
    pick, score = max(valid, key=lambda item: sign * item[1])  # max keeps the first (best-ranked) of equal scores
    return RefereeDecision(view, basis, basis_note, list(names), dict(results), pick, True,
                           f"{head}; the {label} picks {pick} ({referee.name} = {score:.4f})"
                           + ("" if pick == names[0] else f", not {primary}'s top candidate {names[0]}"))


def referee_record(referee: Metric, decisions: Sequence[RefereeDecision]) -> dict[str, Any]:
    """``metadata["referee"]``: the metric (name, label, direction, identity) and one decision per view."""
    return {"metric": referee.name, "label": label_of(referee), "higher_is_better": referee.higher_is_better,
            "identity": referee.identity(), "views": [d.to_dict() for d in decisions]}


def referee_notes(record: Mapping[str, Any] | None, view: str | None, where: str) -> list[str]:
    """The recommendation line of one view ("overlap finalists: 4; the linear probe picks L5_cls")."""
    for decision in (record or {}).get("views", []):
        if decision["view"] == view:
            basis = "" if decision["basis"] == BASES[0] else " (the quality cohort; paired verdicts need stability)"
            return [f"{where}Referee: {decision['summary']}{basis}; the ranking stays the primary metric's."]
    return []


#: What reports read of ``metadata["referee"]`` (checked on load; older files have none).
SCHEMA = nullable({"metric": str, "label": str, "higher_is_better": bool, "identity": ANY, "views": [{
    "view": nullable(str), "basis": Choice(BASES), "basis_note": nullable(str), "finalists": [str],
    "results": MapOf(metric_result.SCHEMA), "pick": nullable(str), "needed": bool, "summary": str}]})
#: Seconds the referee round took (``timing["referee"]``).
TIMING_SCHEMA = {"seconds": NUMBER}

"""The referee: the primary metric screens every candidate, a reference metric judges only the finalists.

``Benchmark(..., referee=LinearProbeMetric())`` keeps the ranking the primary metric's (the spec), and
then asks the question the user asks next — which of the close candidates would a linear probe
pick? — at the probe's cost on a few candidates instead of all of them.  Finalists per view are the
candidates statistically tied with the best (paired verdicts, :meth:`BenchmarkResult.tied_with_best`)
plus the fixed-tolerance quality cohort, valid results only; without stability repeats the finalists
are the quality cohort and the record says so.  A single finalist needs no referee (it is not
computed).  The referee's scores come from the ``referee`` stage (:mod:`vertebrae.families.labeled.stages`),
planned in a second round for the finalists only, so its keys, cache and runners are the run path's.

``referee_finalists`` chooses whom the referee judges: ``"overlap"`` (the default, the finalists above),
``"all"`` (every valid candidate) or ``"auto"`` — every valid candidate when judging the ones beyond the
widened finalists (tied with the best, the quality cohort and the top quarter of the ranking) is
estimated to cost at most ``referee_share`` of what the run's scoring cost (a deterministic n·d cost
model, :func:`auto_estimate`, so a warm rerun takes the same branch and reads every referee score from
the cache), else the widened finalists.

The record lives in ``metadata["referee"]`` of the result (:func:`referee_record`); the
recommendations and the report name the pick and the candidates the referee cannot tell from it
(probe verdicts, :mod:`vertebrae.scoring.probe_verdicts`).  Definitions: docs/metrics.md ("The referee").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._base.config import check_float
from ..errors import ConfigError
from .._base.result_schema import ANY, NUMBER, Choice, MapOf, nullable
from ..scoring import metric_result
from ..scoring.metric_result import MetricResult
from ..scoring.metrics import Metric, check_metric
from ..scoring.probe_verdicts import tied_clause

#: ``vertebrae run --referee NAME`` / ``[benchmark] referee = "NAME"``: the built-in referees.
REFEREE_NAMES = ("probe",)
#: How the finalists were chosen: paired verdicts plus the quality cohort, or the quality cohort alone (the
#: ``"overlap"`` policy); every valid candidate (``"all"``); the widened finalists of ``"auto"``, with or without
#: paired verdicts.
BASES = ("tied_with_best_and_quality_cohort", "quality_cohort", "every_valid_candidate",
         "tied_with_best_quality_cohort_and_top_quarter", "quality_cohort_and_top_quarter")
#: ``Benchmark(referee_finalists=...)`` / ``vertebrae run --finalists``: whom the referee judges.
FINALIST_POLICIES = ("overlap", "all", "auto")
#: ``"auto"`` judges every candidate when the extra referee work is at most this share of the run's scoring cost.
DEFAULT_REFEREE_SHARE = 0.25
#: The cost model's one constant: one probe of a candidate costs this many overlap scorings of it.  Measured with
#: scikit-learn's logistic engine on MiniLM states of 1,500 tweets (0.53-1.12 s against 0.12-0.18 s per candidate,
#: issue 39); both scale with rows x width x classes, so the ratio carries over to other sizes.
PROBE_COST_PER_OVERLAP_SCORE = 5.0


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


def check_finalist_policy(policy: Any, share: Any, referee: Metric | None) -> tuple[str, float]:
    """``Benchmark(referee_finalists=..., referee_share=...)``: a policy of :data:`FINALIST_POLICIES` (other than
    ``"overlap"`` only with a referee), a share in (0, 1] that only ``"auto"`` reads (``None``: the default), so any
    other policy refuses a share given at all rather than ignore it.  The one check of the API and of
    ``vertebrae run`` (which calls it before reading any file), so each message names the keyword and the flag."""
    if policy not in FINALIST_POLICIES:
        raise ConfigError(f"Benchmark.referee_finalists (--finalists) must be one of {list(FINALIST_POLICIES)}, got "
                          f"{policy!r}")
    if policy != "overlap" and referee is None:
        raise ConfigError(f"Benchmark.referee_finalists={policy!r} (--finalists {policy}) chooses whom a referee "
                          "judges, but no referee is set: pass referee=LinearProbeMetric() (vertebrae run: add "
                          "--referee probe)")
    if share is None:
        return policy, DEFAULT_REFEREE_SHARE
    share = check_float("Benchmark", "referee_share", share, low=0.0, high=1.0, low_open=True)
    if policy != "auto":
        raise ConfigError(f"Benchmark.referee_share={share!r} is the budget of the 'auto' finalist policy, but "
                          f"referee_finalists is {policy!r}: pass referee_finalists='auto' (--finalists auto) with a "
                          "referee, or drop referee_share")
    return policy, share


def finalists(result: Any, view: str | None, widened: bool = False) -> tuple[list[str], str, str | None]:
    """(finalist names in ranking order, basis, why paired verdicts were not used) of one view of a result.

    Valid results only: the tied set (when paired verdicts are available) united with the quality cohort, and
    with ``widened`` the top quarter of the ranking (at least one) too.
    """
    ranked = [r.name for r in result.ranked_results(view)]
    chosen = {r.name for r in result.quality_cohort(view=view)}
    if widened:
        chosen |= set(ranked[:math.ceil(len(ranked) / 4)])
    verdicts = result.paired_verdicts(view) if ranked else None
    paired = verdicts is not None and verdicts.available
    if paired:
        chosen |= set(verdicts.tied_names)
    basis = BASES[(0 if paired else 1) + (3 if widened else 0)]
    return [name for name in ranked if name in chosen], basis, None if paired or verdicts is None else verdicts.reason


def scoring_cost(result: Any) -> float:
    """The cost model's units of one candidate's overlap scoring: its width x (1 + stability repeats).

    Rows and classes are left out: every candidate of a run shares them, and the probe's cost scales with them too.
    """
    repeats = 0 if result.stability is None else len(result.stability.repeat_scores["score"])
    return float(result.embedding.get("embedding_dim") or 1) * (1 + repeats)


def auto_estimate(result: Any, widened: Mapping[Any, Sequence[str]], share: float) -> dict[str, Any]:
    """``"auto"``'s decision: the estimated cost of judging the valid candidates beyond the widened finalists, as a
    share of the run's scoring cost, and whether it is within ``share`` (then every valid candidate is judged).

    Cost model (deterministic, so a warm rerun decides alike): one overlap scoring of a candidate costs its width
    (x rows, shared by the view) per repeat; one probe costs :data:`PROBE_COST_PER_OVERLAP_SCORE` scorings.
    Extraction and screening rungs are not counted, which errs toward the widened finalists.
    """
    valid = [r for view in result.views() for r in result.ranked_results(view)]
    extra = [r for r in valid if r.name not in set(widened.get(r.view, ()))]
    spent = sum(scoring_cost(r) for r in valid)
    added = sum(PROBE_COST_PER_OVERLAP_SCORE * float(r.embedding.get("embedding_dim") or 1) for r in extra)
    estimated = added / spent if spent else 0.0
    judged = "all" if estimated <= share else "widened"
    why = (f"judging the {len(extra)} candidate(s) beyond the widened finalists is estimated at {estimated:.0%} of "
           f"the run's scoring cost ({'within' if judged == 'all' else 'above'} the {share:.0%} share), so the "
           f"referee judges {'every valid candidate' if judged == 'all' else 'the widened finalists'}")
    return {"policy": "auto", "share": share, "basis": "cost_model", "estimated_share": estimated,
            "probe_cost_per_overlap_score": PROBE_COST_PER_OVERLAP_SCORE, "judged": judged, "why": why}


def choose_finalists(result: Any, policy: str, share: float) -> tuple[dict[Any, tuple[list[str], str, str | None]],
                                                                      dict[str, Any] | None]:
    """Per view (finalists, basis, note) under ``policy``, and the policy's record (None for ``"overlap"``)."""
    views = result.views()
    if policy == "overlap":
        return {view: finalists(result, view) for view in views}, None
    every = {view: ([r.name for r in result.ranked_results(view)], BASES[2], None) for view in views}
    if policy == "all":
        return every, {"policy": "all", "share": None, "basis": "requested", "estimated_share": None,
                       "probe_cost_per_overlap_score": None, "judged": "all",
                       "why": "referee_finalists='all' judges every valid candidate"}
    widened = {view: finalists(result, view, widened=True) for view in views}
    record = auto_estimate(result, {view: chosen[0] for view, chosen in widened.items()}, share)
    return (every if record["judged"] == "all" else widened), record


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
    head = {BASES[2]: f"every valid candidate: {count}", BASES[3]: f"{primary} finalists, widened: {count}",
            BASES[4]: f"{primary} finalists, widened: {count}"}.get(basis, f"{primary} finalists: {count}")
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


def referee_record(referee: Metric, decisions: Sequence[RefereeDecision],
                   policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``metadata["referee"]``: the metric (name, label, direction, identity), one decision per view and, for a
    finalist policy other than ``"overlap"``, the policy's record (``finalists_policy``: policy, basis, why)."""
    return {"metric": referee.name, "label": label_of(referee), "higher_is_better": referee.higher_is_better,
            "identity": referee.identity(), "views": [d.to_dict() for d in decisions],
            **({} if policy is None else {"finalists_policy": dict(policy)})}


def referee_notes(record: Mapping[str, Any] | None, view: str | None, where: str, verdicts: Any = None) -> list[str]:
    """The recommendation line of one view ("overlap finalists: 4; the linear probe picks L5_cls; it cannot tell
    L5_cls from L6_mean on these folds"); ``verdicts``: the probe verdicts over the judged candidates."""
    for decision in (record or {}).get("views", []):
        if decision["view"] == view:
            basis = {BASES[1]: " (the quality cohort; paired verdicts need stability)",
                     BASES[4]: " (the quality cohort and the top quarter; paired verdicts need stability)"
                     }.get(decision["basis"], "")
            clause = tied_clause(verdicts) if verdicts is not None and verdicts.available else None
            tied = "" if clause is None else f"; {clause}"
            return [f"{where}Referee: {decision['summary']}{tied}{basis}; the ranking stays the primary metric's."]
    return []


#: What reports read of ``metadata["referee"]`` (checked on load; older files have none).
POLICY_SCHEMA = {"policy": Choice(FINALIST_POLICIES[1:]), "share": nullable(NUMBER), "basis": Choice(("requested",
                 "cost_model")), "estimated_share": nullable(NUMBER), "probe_cost_per_overlap_score": nullable(NUMBER),
                 "judged": Choice(("all", "widened")), "why": str}
SCHEMA = nullable({"metric": str, "label": str, "higher_is_better": bool, "identity": ANY,
                   "finalists_policy?": POLICY_SCHEMA, "views": [{
    "view": nullable(str), "basis": Choice(BASES), "basis_note": nullable(str), "finalists": [str],
    "results": MapOf(metric_result.SCHEMA), "pick": nullable(str), "needed": bool, "summary": str}]})
#: Seconds the referee round took (``timing["referee"]``).
TIMING_SCHEMA = {"seconds": NUMBER}

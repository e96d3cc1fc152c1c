"""Screening: successive halving over nested target-preserving subsamples, so a grid of candidates costs little.

``Benchmark(..., screening=ScreeningConfig())`` scores every candidate (extractor, output,
compression variant) on a small rung of rows first, with a few *paired* repeats (one
subsample-mode :class:`~vertebrae.scoring.stability.StabilityConfig` for all, so repeat r of
every candidate scores the same rows with the same seed).  A candidate leaves when its paired
verdict against the rung's best is ``worse``, and at most ``ceil(n / eta)`` of the ``n`` continue
to the next rung, ``eta`` times larger and holding the previous one (nested).  The last rung is
the full dataset: the finalists get the ordinary evaluation, with the same artifact keys and
scores as a benchmark of the finalists alone.  Each rung embeds only the rows it adds
(:mod:`vertebrae.selection.screening_stages`), through the run's runner and cache, ``EXTRACT_BATCH``
extractors at a time, and the increments wait on disk (:mod:`vertebrae.selection.screening_spill`), so
memory does not grow with the number of candidates.  A rung scores its candidates with stage jobs too
(``screening/rung_score``, the benchmark's own stability stage on the rung's rows; ``screening/rung_metric``
when ``ScreeningConfig.metric`` ranks the rungs by another metric), through the same runner and cache.  The rounds read the run through its :class:`~vertebrae.families.front_door.RunScope`, never the
front door.  The rules, and what screening may miss, are in docs/screening.md.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._base.config import Config, check_float, check_int, check_seed
from ..families.labeled.stages import output_metadata, stacked_outputs
from ..families.embedding_set import Embedding, EmbeddingSet
from ..inputs.embeddings import embedding_metadata
from ..errors import ArtifactError, ConfigError, ConfigTypeError, DataWarning
from ..execution.caching import Compute, execute_job
from ..execution.context import Chain, RunContext
from ..execution.jobs import RunOutcome
from ..execution.plan import Plan, StageJob, build_plan
from ..families.front_door import RunScope
from ..families.labeled.results import ExtractorResult
from ..scoring.metric_result import OVERLAP_METRIC
from ..scoring.metrics import Metric, check_metric, check_metrics_feasible, metrics_from_config
from ..scoring.paired_verdicts import Interval, against_best, t_interval
from ..scoring.stability import MAX_REPEATS, StabilityConfig, SubsampleInfeasible, draw_subsample, plan_repeats
from .screening_spill import IncrementStore
from .screening_stages import PIPELINE, RungContext, RungSettings
from ..inputs.targets import Targets

#: A screened-out result's ``recommendation`` and ``screening.status``; finalists have status ``finalist``.
SCREENED_OUT, FINALIST = "screened_out", "finalist"
#: Extractors embedded per runner call at a rung: the most increments the rung loop holds in memory at once.
EXTRACT_BATCH = 8


@dataclasses.dataclass(frozen=True)
class ScreeningConfig(Config):
    """How to screen candidates before the full evaluation (docs/screening.md).

    The first rung holds ``start_fraction`` of the rows, and at least ``start_rows`` when given;
    each later rung is ``eta`` times larger, and the last one is the whole dataset.  At each rung
    every candidate is scored ``repeats`` times on target-preserving subsamples of
    ``subsample_fraction`` (< 1) of the rung's rows (the same subsamples for every candidate); the
    paired verdict uses an ``interval_level`` interval of how far the rung's difference may lie from
    the full data's (:func:`full_data_interval`).  ``seed`` draws the rungs' rows and the repeats.

    Three repeats by default: the rung scoring calls are most of a screened run's own cost (the first
    rung scores every candidate), and more repeats only estimate the spread better, since the rung
    interval does not narrow with them (docs/screening.md, "Measured").

    ``metric`` ranks the rungs by any rankable metric of the metric protocol instead of the overlap
    score (e.g. ``RidgeProbeMetric()``, to screen a grid toward the probe a user will train): every
    repeat calls it on the repeat's rows with the repeat's seed.  None (the default) keeps the overlap
    score, and then the config's dict and every key are what they were before the field existed.
    A built-in may be named here as in a run config (``metric="ridge_probe"``, see :data:`SCREENING_METRICS`);
    a run config may also give a metrics entry (``metric = {path = "pkg.module:fn", ...}``).
    """

    start_fraction: float = 0.1
    start_rows: int | None = None
    eta: int = 3
    repeats: int = 3
    subsample_fraction: float = 0.8
    interval_level: float = 0.95
    seed: int = 0
    metric: Any = None

    def _validate(self) -> None:
        name = type(self).__name__
        if isinstance(self.metric, str):  # a built-in's name, as a run config gives it
            self._set("metric", screening_metric(self.metric))
        if self.metric is not None:
            # the protocol now; the dataset's target type when the run is checked (check_screening)
            metric = check_metric(self.metric, f"{name}.metric", _a_supported_target_type(self.metric),
                                  remove="screen by another metric")
            if not metric.aggregate_valid:
                raise ConfigError(f"{name}.metric {metric.name!r} declares aggregate_valid=False (a descriptive "
                                  "metric that is never ranked); screening ranks candidates, so pick a rankable "
                                  "metric, e.g. RidgeProbeMetric()")
        self._set("start_fraction", check_float(name, "start_fraction", self.start_fraction, low=0.0, high=1.0,
                                                low_open=True, high_open=True))
        self._set("start_rows", check_int(name, "start_rows", self.start_rows, minimum=1, allow_none=True))
        self._set("eta", check_int(name, "eta", self.eta, minimum=2))
        self._set("repeats", check_int(name, "repeats", self.repeats, minimum=2))
        if self.repeats > MAX_REPEATS:
            raise ConfigError(f"{name}.repeats must be <= {MAX_REPEATS} (each repeat is one scoring call per "
                              f"candidate), got {self.repeats}")
        self._set("subsample_fraction", check_float(name, "subsample_fraction", self.subsample_fraction, low=0.0,
                                                    high=1.0, low_open=True, high_open=True))
        self._set("interval_level", check_float(name, "interval_level", self.interval_level, low=0.0, high=1.0,
                                                low_open=True, high_open=True))
        self._set("seed", check_seed(name, "seed", self.seed, allow_none=False))

    def to_dict(self) -> dict[str, Any]:
        """Every field; ``metric`` (its identity) only when one is set, so the default's dict is unchanged."""
        data = super().to_dict()
        if self.metric is None:
            del data["metric"]
        return data

    def _encode_field(self, name: str, value: Any) -> Any:
        return value.identity() if name == "metric" and value is not None else super()._encode_field(name, value)

    @classmethod
    def _decode_fields(cls, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("metric") is not None:
            data["metric"] = screening_metric(data["metric"])
        return data


def _a_supported_target_type(metric: Any) -> str:
    supported = getattr(metric, "supported_target_types", None)
    return supported[0] if isinstance(supported, (tuple, list)) and supported else "single_label"


#: ``[screening] metric = "NAME"``: the built-in metrics a run config may screen by, with their defaults.
SCREENING_METRICS = ("ridge_probe", "lda_probe", "linear_probe", "knn", "logme")


def screening_metric(entry: Any) -> Metric:
    """The metric of a run config's ``[screening] metric``: a name of :data:`SCREENING_METRICS`, or a table of
    ``metrics`` entry keys (``{path = "pkg.module:fn", name = ..., params = {...}}``)."""
    if isinstance(entry, str):
        from ..scoring.knn_metric import KNNMetric
        from ..scoring.lda_probe import LDAProbeMetric
        from ..scoring.linear_probe import LinearProbeMetric
        from ..scoring.logme import LogMEMetric
        from ..scoring.ridge_probe import RidgeProbeMetric

        built = {"ridge_probe": RidgeProbeMetric, "lda_probe": LDAProbeMetric, "linear_probe": LinearProbeMetric,
                 "knn": KNNMetric, "logme": LogMEMetric}
        if entry not in built:
            raise ConfigError(f"ScreeningConfig.metric {entry!r} is not a built-in screening metric; use one of "
                              f"{list(SCREENING_METRICS)} or a table such as {{path = \"pkg.module:fn\"}}")
        return built[entry]()
    if isinstance(entry, Mapping):
        return metrics_from_config([dict(entry)])[0]
    raise ConfigTypeError(f"ScreeningConfig.metric must be a metric object, one of {list(SCREENING_METRICS)} or a "
                          f"table with path = \"pkg.module:fn\", got {type(entry).__name__}")


@dataclasses.dataclass(frozen=True)
class Rung:
    """One screening rung: its rows in embedding order (its increments, concatenated) and the rows it adds."""

    index: int
    rows: np.ndarray
    increment: np.ndarray
    #: The paired repeats every candidate gets on this rung.
    repeats: StabilityConfig


# ----------------------------------------------------------------------------- rungs
#: Below this many rows the first rung's cut is mostly noise (measured by a new user: on 60 regression rows the
#: default start of 6 rows cut the candidate a full run ranks first); screening warns before any work.
MIN_FIRST_RUNG_ROWS = 50


def rung_sizes(n_samples: int, config: ScreeningConfig) -> list[int]:
    """Sizes of the screening rungs (the full dataset follows them): ``ceil(n / eta^k)`` down to the start size."""
    start = max(math.ceil(n_samples * Fraction(str(config.start_fraction))), config.start_rows or 0)
    if start >= n_samples:
        raise ConfigError(f"ScreeningConfig: the first rung needs {start} rows (start_fraction="
                          f"{config.start_fraction}, start_rows={config.start_rows}) but the dataset has only "
                          f"{n_samples}; lower start_fraction or start_rows, or run without screening")
    sizes, size = [], Fraction(n_samples)
    while size / config.eta >= start:
        size /= config.eta
        sizes.append(math.ceil(size))
    return sorted(sizes) or [start]


def plan_rungs(targets: Targets, config: ScreeningConfig) -> list[Rung]:
    """The nested screening rungs, drawn largest first with the stability subsample rules (every class, or every
    multi-label label, keeps at least 2 rows; regression keeps at least 3 rows in which a target varies), and each
    rung's paired repeats; ConfigError (before any extraction) when a rung or its repeats cannot keep the targets."""
    sizes = rung_sizes(targets.n_samples, config)
    row_seeds, repeat_seeds = np.random.SeedSequence(config.seed).spawn(2)
    row_seeds, repeat_seeds = row_seeds.generate_state(len(sizes)), repeat_seeds.generate_state(len(sizes))
    current, drawn = np.arange(targets.n_samples), []
    for index in reversed(range(len(sizes))):
        try:
            picked = _draw_rung(targets.subset(current), sizes[index], int(row_seeds[index]))
        except SubsampleInfeasible as exc:  # its counts: the rung's fraction is no setting of the user's
            raise ConfigError(f"ScreeningConfig: rung {index} ({sizes[index]} of {targets.n_samples} rows) cannot keep "
                              f"the targets (the rung {exc.counts}); raise start_fraction or start_rows, or run without "
                              "screening") from None
        current = current[picked]
        drawn.append(current)
    drawn.reverse()
    rungs, order = [], np.empty(0, dtype=np.int64)
    for index, rows in enumerate(drawn):
        increment = np.setdiff1d(rows, order, assume_unique=True).astype(np.int64)
        order = np.concatenate([order, increment])
        repeats = StabilityConfig(mode="subsample", repeats=config.repeats, interval_level=config.interval_level,
                                  subsample_fraction=config.subsample_fraction, random_state=int(repeat_seeds[index]))
        try:
            plan_repeats(targets.subset(order), repeats)
        except ConfigError as exc:
            raise ConfigError(f"ScreeningConfig: the repeats of rung {index} ({order.size} rows) cannot keep the "
                              f"targets ({_reason(exc)}); raise subsample_fraction, start_fraction or start_rows") \
                from None
        rungs.append(Rung(index, order, increment, repeats))
    return rungs


def _draw_rung(targets: Targets, size: int, seed: int) -> np.ndarray:
    """At least ``size`` rows of ``targets`` by the stability sampler's rules, as an exact fraction (a float share
    lost a row to rounding: 442 x float(148/442) floors to 147).  The sampler floors each class's share, so a rung
    can come out a few rows short; the fraction then grows by the shortfall until it holds ``size`` rows, which
    keeps ``start_rows`` the floor it is documented to be (measured before: 57 asked, 50 drawn on digits)."""
    n, fraction = targets.n_samples, Fraction(size, targets.n_samples)
    while True:
        picked = draw_subsample(targets, fraction, seed)
        if picked.size >= size or fraction == 1:
            return picked
        fraction = min(Fraction(1), fraction + Fraction(size - picked.size, n))


def _reason(exc: ConfigError) -> str:
    """The stability sampler's reason without its advice about StabilityConfig fields (screening has its own)."""
    return str(exc).split(": ", 1)[-1].split(". The subset", 1)[0]


def check_screening(config: ScreeningConfig, settings: Any, chains: Sequence[Chain], targets: Targets,
                    groups: Any = None) -> None:
    """Everything screening needs, checked before any extraction (ConfigError naming the fix)."""
    ranked_by = OVERLAP_METRIC if config.metric is None else config.metric.name
    if settings.primary_metric not in (OVERLAP_METRIC, ranked_by):
        raise ConfigError(f"screening ranks candidates by paired {ranked_by} repeats, but primary_metric is "
                          f"{settings.primary_metric!r}; rank by the overlap score"
                          + ("" if config.metric is None else f" or by {ranked_by!r}")
                          + ", screen by ScreeningConfig(metric=...) of the primary metric, or run without screening")
    if config.metric is not None:
        check_metric(config.metric, "ScreeningConfig.metric", targets.target_type, remove="screen by another metric")
    if any(chain.view is not None for chain in chains):
        raise ConfigError("screening compares candidates on the dataset's own targets; drop target_view_config / "
                          "label_view_config or run without screening")
    if settings.resource_profiling is not None and settings.resource_profiling.enabled:
        raise ConfigError("resource profiling measures whole extractions, but screening embeds rows rung by rung; "
                          "profile in a run without screening")
    if len(chains) < 2:
        raise ConfigError(f"screening needs at least 2 candidates (extractors x outputs x compression variants), got "
                          f"{len(chains)}; add candidates or run without screening")
    rungs = plan_rungs(targets, config)
    if config.metric is not None:  # the rows each rung repeat scores are drawn here already: ask the metric on them
        for rung in rungs:
            rung_targets = targets.subset(rung.rows)
            rung_groups = None if groups is None else groups.subset(rung.rows)
            for index, repeat in enumerate(plan_repeats(rung_targets, rung.repeats)[0]):
                rows = repeat.rows  # None: the repeat scores the whole rung
                try:
                    check_metrics_feasible([config.metric], rung_targets if rows is None else
                                           rung_targets.subset(rows),
                                           rung_groups if rung_groups is None or rows is None else
                                           rung_groups.subset(rows))
                except ConfigError as exc:
                    raise ConfigError(f"screening.metric on rung {rung.index} ({rung.rows.size} of "
                                      f"{targets.n_samples} rows), repeat {index}: {str(exc).split(' (on this')[0]}; "
                                      "raise ScreeningConfig.start_rows or start_fraction (or subsample_fraction), "
                                      "screen by another metric, or run without screening") from None
    first = rungs[0].rows.size
    if first < MIN_FIRST_RUNG_ROWS:
        warnings.warn(f"screening's first rung holds {first} of {targets.n_samples} rows: a cut made on so few rows is "
                      "mostly noise and can drop the best candidate; raise ScreeningConfig.start_rows (e.g. "
                      f"{MIN_FIRST_RUNG_ROWS}) or run without screening", DataWarning, stacklevel=3)


# ----------------------------------------------------------------------------- the rung loop
@dataclasses.dataclass(frozen=True)
class RungJob:
    """A candidate's job at a rung, as it ran: its key and cache status (what its result records)."""

    key: str
    status: str


@dataclasses.dataclass
class Screened:
    """What the rung loop did: the finalists' plan and outcome (the ordinary full evaluation), every candidate that
    left early (screened out, or failed under ``on_error="record"``), each candidate's rung history and the
    per-rung table."""

    plan: Plan
    outcome: RunOutcome
    chains: list[Chain]
    early: dict[str, ExtractorResult]
    history: dict[str, list[dict[str, Any]]]
    rungs: list[dict[str, Any]]
    config: ScreeningConfig
    seconds: list[float]

    def results(self, finalists: Sequence[ExtractorResult]) -> list[ExtractorResult]:
        """Every candidate's result in candidate order; finalists get their rung history."""
        by_name = {**self.early, **{r.name: r for r in finalists}}
        for result in finalists:
            result.screening = {"status": FINALIST, "rungs": self.history[result.name]}
        return [by_name[chain.name] for chain in self.chains]

    def metadata(self) -> dict[str, Any]:
        """``metadata["screening"]`` of the result: the config, the candidates, the finalists and every rung."""
        finalists = [c.name for c in self.plan.chains]
        return {"config": self.config.to_dict(), "candidates": len(self.chains), "finalists": finalists,
                "rungs": self.rungs}


def screening_note(record: dict[str, Any]) -> str:
    """The recommendation line of a screened run: how many candidates reached the full evaluation."""
    finalists, screened = len(record["finalists"]), len(record["rungs"]) - 1
    return (f"Screening kept {finalists} of {record['candidates']} candidates for the full evaluation after "
            f"{screened} rung(s); the ranking, cohort and verdicts cover the finalists only (see Screening).")


def run_screening(scope: RunScope, config: ScreeningConfig) -> Screened:
    """Run the rungs, then the finalists' full evaluation, in the run's ``scope`` (its runner and cache)."""
    rungs = plan_rungs(scope.dataset.targets, config)
    held = IncrementStore()
    try:
        return _rung_loop(scope, config, rungs, held)
    finally:
        held.close()


def _rung_loop(scope: RunScope, config: ScreeningConfig, rungs: list[Rung], held: IncrementStore) -> Screened:
    """Score the live candidates rung by rung, then evaluate the finalists (``held``: the embedded increments)."""
    chains, dataset = list(scope.chains), scope.dataset
    context = scope.context()  # where a screened-out candidate's extractor is found
    alive = list(chains)
    early: dict[str, ExtractorResult] = {}
    history: dict[str, list[dict[str, Any]]] = {chain.name: [] for chain in chains}
    table, seconds, order = [], [], np.empty(0, dtype=np.int64)
    for rung in rungs:
        if len(alive) < 2:  # nothing left to compare: the finalist goes straight to the full evaluation
            break
        started = time.perf_counter()
        alive, extracted = _extract(scope, alive, rung.increment, held, early, f"screening rung {rung.index}")
        order = rung.rows
        scored, scoring = _score(scope, alive, rung, held, early, config)
        jobs = {chain.name: {"extract_rows": extracted[chain.name], score_stage(config): scoring[chain.name]}
                for chain, _ in scored}
        kept = _judge(scored, rung, config, history, dataset.n_samples, jobs)
        for chain, _ in scored:
            if chain not in kept:
                keys = {stage: job.key for stage, job in jobs[chain.name].items()}
                early[chain.name] = _screened_out(scope, chain, context.extractor_of(chain), history[chain.name],
                                                  keys)
        table.append({"rung": rung.index, "rows": int(order.size), "new_rows": int(rung.increment.size),
                      "candidates": len(scored), "survivors": len(kept),
                      "best": scored[0][0].name if scored else None, "final": False})
        alive = [chain for chain in alive if chain in kept]
        held.keep_only({chain.extractor_id for chain in alive})  # a dropped extractor's rows are never needed again
        seconds.append(time.perf_counter() - started)
    started = time.perf_counter()
    rest = np.setdiff1d(np.arange(dataset.n_samples), order).astype(np.int64)
    if alive and rest.size:
        alive, _ = _extract(scope, alive, rest, held, early, "screening: the rest of the rows")
    order = np.concatenate([order, rest])
    table.append({"rung": len(table), "rows": int(dataset.n_samples), "new_rows": int(rest.size),
                  "candidates": len(alive), "survivors": len(alive), "best": None, "final": True})
    plan, outcome = _evaluate(scope, alive, held, np.argsort(order, kind="stable"))
    seconds.append(time.perf_counter() - started)
    return Screened(plan, outcome, chains, early, history, table, config, seconds)


def score_stage(config: ScreeningConfig) -> str:
    """The stage that scores a rung's repeats: ``rung_score`` (overlap) or ``rung_metric`` (``config.metric``)."""
    return "rung_score" if config.metric is None else "rung_metric"


def _rung_context(scope: RunScope, rows: np.ndarray, repeats: StabilityConfig | None = None,
                  metric: Any = None) -> RungContext:
    """The run context of a rung's plan over ``rows`` (scoring it when ``repeats`` are given, by ``metric`` when
    one is given)."""
    settings = RungSettings(rows, scope.settings.scoring_config, scope.settings.continuous_config, repeats, metric)
    return RungContext(settings, scope.extractors, scope.dataset, cache=scope.cache)


def _batches(alive: list[Chain]) -> list[list[Chain]]:
    """The live candidates, ``EXTRACT_BATCH`` extractors (with all their candidates) per runner call."""
    extractor_ids = list(dict.fromkeys(chain.extractor_id for chain in alive))
    return [[chain for chain in alive if chain.extractor_id in set(extractor_ids[start:start + EXTRACT_BATCH])]
            for start in range(0, len(extractor_ids), EXTRACT_BATCH)]


def _failed(scope: RunScope, chain: Chain, failure: Any, keys: dict[str, str]) -> ExtractorResult:
    """The invalid result of a candidate whose rung job failed under ``on_error="record"``."""
    return ExtractorResult.failed(chain.name, scope.settings.primary_metric, failure.to_dict(chain.parent),
                                  artifact_keys=dict(keys))


def _extract(scope: RunScope, alive: list[Chain], increment: np.ndarray, held: IncrementStore,
             early: dict[str, ExtractorResult], description: str) -> tuple[list[Chain], dict[str, RungJob]]:
    """Embed ``increment`` with every extractor a live candidate needs (once per extractor, all its outputs),
    ``EXTRACT_BATCH`` extractors per runner call, each batch written to ``held`` before the next is embedded.
    Returns the candidates still alive and each one's ``extract_rows`` job."""
    context = _rung_context(scope, increment)
    failed: set[str] = set()
    ran: dict[str, RungJob] = {}
    for batch in _batches(alive):
        plan = build_plan(PIPELINE, batch, context)
        jobs = [job for job in plan.jobs if job.stage == "extract_rows"]
        outcome = scope.runner.run(jobs, context, on_error=scope.on_error, description=description)
        added = set()
        for chain, keys in zip(plan.chains, plan.chain_keys):
            key = keys["extract_rows"]
            if key in outcome.failures:
                early[chain.name] = _failed(scope, chain, outcome.failures[key], {"extract_rows": key})
                failed.add(chain.name)
                continue
            ran[chain.name] = RungJob(key, outcome.statuses[key])
            if chain.extractor_id not in added:
                added.add(chain.extractor_id)
                held.add(chain.extractor_id, outcome.artifacts[key])
        del outcome  # the batch's embeddings are on disk now
    return [chain for chain in alive if chain.name not in failed], ran


def _score(scope: RunScope, alive: list[Chain], rung: Rung, held: IncrementStore, early: dict[str, ExtractorResult],
           config: ScreeningConfig) -> tuple[list[tuple[Chain, list[float]]], dict[str, RungJob]]:
    """Every live candidate's paired repeat scores on the rung, in candidate order (a candidate whose job failed
    under ``on_error="record"`` is recorded in ``early`` instead), and each one's scoring job (``rung_score``, or
    ``rung_metric`` with ``config.metric``).

    The scoring jobs run with the run's runner, ``EXTRACT_BATCH`` extractors per call; each reads
    the rung's ``extract_rows`` job over all the rung's rows, which is not run: its artifact is assembled from the
    increments in ``held`` and given to the runner (sent to the workers that read it)."""
    context = _rung_context(scope, rung.rows, rung.repeats, config.metric)
    stage = score_stage(config)
    scores: dict[str, list[float]] = {}
    ran: dict[str, RungJob] = {}
    for batch in _batches(alive):
        plan = build_plan(PIPELINE, batch, context)
        given = {keys["extract_rows"]: _rung_rows(held, chain) for chain, keys in zip(plan.chains, plan.chain_keys)}
        jobs = [job for job in plan.jobs if job.key not in given]
        outcome = scope.runner.run(jobs, context, on_error=scope.on_error, description=f"screening rung "
                                   f"{rung.index} scores", given=given)
        for chain, keys in zip(plan.chains, plan.chain_keys):
            key = keys[stage]
            if key in outcome.failures:
                early[chain.name] = _failed(scope, chain, outcome.failures[key], keys)
                continue
            artifact = outcome.artifacts[key]
            scores[chain.name] = (artifact.stability.repeat_scores["score"] if config.metric is None
                                  else artifact.repeat_scores)
            ran[chain.name] = RungJob(key, outcome.statuses[key])
        del given, outcome  # the batch's rung embeddings are released before the next batch is assembled
    return [(chain, scores[chain.name]) for chain in alive if chain.name in scores], ran


def _rung_rows(held: IncrementStore, chain: Chain) -> EmbeddingSet:
    """The extractor's outputs on the rung's rows so far (its increments, concatenated in rung order): what its
    ``extract_rows`` job over those rows would compute, since a row's embedding does not depend on its batch."""
    parts = {}
    for output in held.outputs(chain.extractor_id):
        matrix = held.rows(chain.extractor_id, output)
        parts[output] = Embedding(matrix, embedding_metadata(matrix))
    return EmbeddingSet(parts)


def full_data_interval(subsample_fraction: float, rung_share: float) -> Interval:
    """The paired interval of a rung: where the *full data's* difference may lie, given the rung's repeats.

    A rung's repeats are subsamples of its rows, so their spread says how a difference moves between
    subsamples of those rows, not how far the rung's difference lies from the full data's: the t-interval of
    their mean narrows with every repeat and called the full run's winner ``worse`` on 165 tweets (docs/screening.md).
    Subsamples of a fraction f estimate the variance of the rung's statistic as f / (1 - f) times their own
    variance (the delete-d jackknife, Shao & Wu 1989), and the rung is a sample of the full data, which
    removes the share ``rung_share`` of it (the finite-population correction):
    ``half width = t(level, repeats - 1) * sd(differences) * sqrt(f / (1 - f) * (1 - rung_share))``.
    It does not narrow with repeats; more repeats only estimate the spread better.
    """
    divisor = math.sqrt((1 - subsample_fraction) / subsample_fraction / (1 - rung_share))
    return lambda differences, level: t_interval(differences, level, divisor)


def _judge(scored: list[tuple[Chain, list[float]]], rung: Rung, config: ScreeningConfig,
           history: dict[str, list[dict[str, Any]]], n_samples: int,
           jobs: dict[str, dict[str, RungJob]]) -> list[Chain]:
    """Rank by mean repeat score (ties keep candidate order); keep the first ``ceil(n / eta)`` not judged worse.
    Each candidate's rung entry records the cache statuses of its rung ``jobs`` (by stage)."""
    if not scored:
        return []
    higher = config.metric is None or config.metric.higher_is_better
    scored.sort(key=lambda item: -float(np.mean(item[1])) if higher else float(np.mean(item[1])))
    comparisons = against_best([(chain.name, scores) for chain, scores in scored], higher_is_better=higher,
                               interval_level=config.interval_level,
                               interval=full_data_interval(config.subsample_fraction, rung.rows.size / n_samples))
    limit, kept = math.ceil(len(scored) / config.eta), []
    for (chain, scores), comparison in zip(scored, comparisons):
        continues = comparison.verdict != "worse" and len(kept) < limit
        if continues:
            kept.append(chain)
        history[chain.name].append({
            "rung": rung.index, "rows": int(rung.rows.size), "partial_score": float(np.mean(scores)),
            "repeat_scores": [float(s) for s in scores], "verdict": comparison.to_dict(), "continued": continues,
            "reason": None if continues else ("worse" if comparison.verdict == "worse" else "cut"),
            "cache_status": {stage: job.status for stage, job in jobs[chain.name].items()}})
    return kept


def _screened_out(scope: RunScope, chain: Chain, extractor: Any, history: list[dict[str, Any]],
                  keys: dict[str, str]) -> ExtractorResult:
    """The result of a candidate that left at a rung: its recipe, its last rung and its verdict there, the keys of
    that rung's jobs (its increment's ``extract_rows``, its ``rung_score``); never ranked."""
    recipe = extractor.recipe()
    last = history[-1]
    embedding: dict[str, Any] = {"parent_extractor_name": chain.parent}
    if chain.output is not None:
        embedding.update(output_metadata(extractor, chain.output))
    return ExtractorResult(
        name=chain.name, extractor_type=recipe.get("type", type(extractor).__name__), recipe=recipe, overlap=None,
        metrics={}, primary_metric_name=scope.settings.primary_metric, primary_score=None, embedding=embedding,
        warnings=[], recommendation=SCREENED_OUT, weakest_class=None, artifact_keys=keys,
        screening={"status": SCREENED_OUT, "last_rung": last["rung"], "rows": last["rows"],
                   "partial_score": last["partial_score"], "verdict": last["verdict"]["verdict"],
                   "reason": last["reason"], "rungs": history})


def _evaluate(scope: RunScope, finalists: list[Chain], held: IncrementStore,
              inverse: np.ndarray) -> tuple[Plan, RunOutcome]:
    """The finalists' ordinary plan.  Its extract jobs do not run: each is settled here through the cache (a hit
    is read; otherwise the embedding is assembled from the increments and stored under the job's key) and handed
    to the runner as a ``given`` artifact, which ``DaskRunner`` sends only to the workers that read it (a runner's
    workers may not see the local spill folder)."""
    context = scope.context()
    plan = build_plan(scope.pipeline, finalists, context)
    given, settled = {}, {}
    for job in plan.jobs:
        if job.stage == "extract":
            try:
                ran = execute_job(job, {}, context, compute=_assembly(job, context, held, inverse))
            except ArtifactError:  # a read_only cache's corrupt entry: the runner runs the job and reports it
                continue
            given[job.key], settled[job.key] = ran.artifact, (ran.timings, ran.status, ran.footprint())
    held.close()
    outcome = scope.runner.run([job for job in plan.jobs if job.key not in given], context, on_error=scope.on_error,
                               description=scope.description, given=given, **scope.kept(plan.jobs))
    for key, (timings, status, footprint) in settled.items():
        outcome.timings[key], outcome.statuses[key], outcome.persisted[key] = timings, status, footprint
    return plan, outcome


def _assembly(job: StageJob, context: RunContext, held: IncrementStore, inverse: np.ndarray) -> Compute:
    """How an extract job's full-data embedding is made from its extractor's increments, in dataset row order."""
    def assemble() -> tuple[EmbeddingSet, dict[str, float]]:
        start = time.perf_counter()
        extractor_id = job.params["extractor"]
        rows = {output: held.rows(extractor_id, output)[inverse] for output in held.outputs(extractor_id)}
        return stacked_outputs(job, context, [rows]), {"seconds": time.perf_counter() - start}

    return assemble

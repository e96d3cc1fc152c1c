"""Benchmark: the front door of a labeled-data comparison of extractors.

``Benchmark(dataset, extractors, ...)`` validates everything up front, builds a plan
of stage jobs over the ``benchmark`` pipeline (see :mod:`vertebrae.families.labeled.stages`
and docs/architecture.md) and runs it with a runner (in-process by default).
``run()`` returns a :class:`~vertebrae.families.labeled.results.BenchmarkResult`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from ..._base.config import check_config, check_float
from ...selection.agreement import reference_metrics
from ...artifacts.cache import CacheConfig
from ...extractors.compression import EmbeddingCompressionConfig, check_compression, variant_name
from ...inputs.datasets import BenchmarkDataset
from ...errors import ConfigError, InputTypeError, InputValidationError, VertebraeError
from ...selection import adaptive_repeats
from . import stages as benchmark_stages  # noqa: F401  (benchmark_stages: this pipeline's stages)
from ...execution.caching import stage_cache
from ...execution.context import Chain, RunContext
from ...execution.jobs import RunOutcome, check_on_error
from ...execution.plan import Plan
from ...extractors.base import Extractor, PrecomputedExtractor
from ...inputs.embeddings import validate_embeddings
from ..front_door import (EmbeddingSource, FrontDoor, Rounds, chain_runtime, check_unique_names,
                          validate_extractor_list)
from ...inputs.audio import check_extractor_rates
from ...inputs.modalities import check_extractor_modalities
from ...inputs.multimodal import check_extractor_fields
from ...selection.referee import (DEFAULT_REFEREE_SHARE, check_finalist_policy, check_referee, choose_finalists,
                                  decide, referee_notes, referee_record)
from ...extractors.profiling import ResourceProfilingConfig, chain_profile, check_profiling
from ..._base.profile_records import PROFILE_KEY
from ..._base.progress import check_progress
from .results import BenchmarkResult, ExtractorResult
from ...scoring.memory import MemoryConfig, check_budget_feasible
from ...scoring.metric_result import OVERLAP_METRIC, MetricResult
from ...scoring.metrics import (Metric, check_metrics_feasible, check_primary_metric, metric_arguments,
                                metrics_fingerprint, resolve_metrics)
from ...scoring.probe_verdicts import capitalized, tied_sentence
from ...scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig, check_class_settings
from ...scoring.separatix import SeparatixConfig
from ...scoring.stability import StabilityConfig, plan_repeats
from ...selection.screening import Screened, ScreeningConfig, check_screening, run_screening, screening_note
from ...inputs.views import LabelViewConfig, TargetViewConfig, plan_views, view_label

DEFAULT_QUALITY_TOLERANCE = 0.02
#: What makes one result: (extractor position, output, compression variant, view, result name).
ResultParts = tuple[int, "str | None", "EmbeddingCompressionConfig | None", "tuple[str, str] | None", str]


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings:
    """Every setting that shapes a run; picklable so remote runners can receive it."""

    scoring_config: OverlapScoringConfig
    continuous_config: ContinuousOverlapScoringConfig
    primary_metric: str = OVERLAP_METRIC
    quality_tolerance: float = DEFAULT_QUALITY_TOLERANCE
    #: Custom metrics (the built-in overlap metric is not listed here: it always runs in the score stage).
    metrics: tuple[Metric, ...] = ()
    separatix_config: SeparatixConfig | None = None
    stability_config: StabilityConfig | None = None
    memory_config: MemoryConfig | None = None
    #: Compression variants evaluated for every extractor (empty: the raw embedding only).
    compression: tuple[EmbeddingCompressionConfig, ...] = ()
    #: Measure each extraction (latency, memory, footprints); None: no resource profiles.
    resource_profiling: ResourceProfilingConfig | None = None
    #: The reference metric that judges each view's finalists (vertebrae.selection.referee); None: no referee.
    referee: Metric | None = None
    #: Whom the referee judges (vertebrae.selection.referee.FINALIST_POLICIES) and ``"auto"``'s cost share.
    referee_policy: str = "overlap"
    referee_share: float = DEFAULT_REFEREE_SHARE

    def to_dict(self) -> dict[str, Any]:
        return {"scoring_config": self.scoring_config.to_dict(), "continuous_config": self.continuous_config.to_dict(),
                "primary_metric": self.primary_metric, "quality_tolerance": self.quality_tolerance,
                "metrics": metrics_fingerprint(self.metrics)["metrics"],
                "separatix_config": None if self.separatix_config is None else self.separatix_config.to_dict(),
                "stability_config": None if self.stability_config is None else self.stability_config.to_dict(),
                "memory_config": None if self.memory_config is None else self.memory_config.to_dict(),
                "compression": [config.to_dict() for config in self.compression],
                "resource_profiling": None if self.resource_profiling is None else self.resource_profiling.to_dict(),
                **({} if self.referee is None else {"referee": self.referee.identity()}),
                **({} if self.referee_policy == "overlap" else  # the default keeps older keys and bytes
                   {"referee_finalists": self.referee_policy, "referee_share": self.referee_share})}


class Benchmark(FrontDoor):
    """Compare extractors on one labeled dataset (a declaration over the shared run path, :mod:`vertebrae.families.front_door`)."""

    pipeline = "benchmark"

    def __init__(self, dataset: BenchmarkDataset, extractors: Sequence[Extractor], *,
                 scoring_config: OverlapScoringConfig | None = None,
                 continuous_config: ContinuousOverlapScoringConfig | None = None,
                 metrics: Sequence[Any] | None = None,
                 primary_metric: str = OVERLAP_METRIC,
                 quality_tolerance: float = DEFAULT_QUALITY_TOLERANCE,
                 separatix_config: SeparatixConfig | None = None,
                 stability_config: StabilityConfig | None = None,
                 target_view_config: TargetViewConfig | None = None,
                 label_view_config: LabelViewConfig | None = None,
                 compression: Sequence[EmbeddingCompressionConfig] | None = None,
                 resource_profiling: ResourceProfilingConfig | None = None,
                 on_error: str = "raise",
                 progress: bool | None = None,
                 memory_config: MemoryConfig | None = None,
                 cache_config: CacheConfig | None = None,
                 referee: Metric | None = None,
                 referee_finalists: str = "overlap",
                 referee_share: float | None = None,
                 screening: ScreeningConfig | None = None) -> None:
        if not isinstance(dataset, BenchmarkDataset):
            raise InputTypeError(f"dataset must be a BenchmarkDataset, got {type(dataset).__name__}; build one with "
                                 "BenchmarkDataset.from_embeddings(...) or BenchmarkDataset.from_arrays(...)")
        self.dataset = dataset
        self.extractors = _validate_extractors(extractors)
        check_extractor_fields(dataset, self.extractors)
        _check_precomputed(dataset, self.extractors)
        check_extractor_rates(dataset, self.extractors)
        check_extractor_modalities(dataset, self.extractors)
        scoring_config, continuous_config, custom_metrics = resolve_metrics(metrics, scoring_config, continuous_config,
                                                                            dataset.target_type)
        scoring_config = check_config("scoring_config", scoring_config, OverlapScoringConfig,
                                      default=OverlapScoringConfig())
        continuous_config = check_config("continuous_config", continuous_config, ContinuousOverlapScoringConfig,
                                         default=ContinuousOverlapScoringConfig())
        # Separatix is the default complexity diagnostic (gated on the overlap score);
        # SeparatixConfig(enabled=False) turns it off.
        separatix_config = check_config("separatix_config", separatix_config, SeparatixConfig,
                                        default=SeparatixConfig())
        check_config("stability_config", stability_config, StabilityConfig)
        check_config("memory_config", memory_config, MemoryConfig,
                     hint="e.g. MemoryConfig(max_scoring_bytes=8 * 2**30, policy='subsample')")
        check_primary_metric(primary_metric, custom_metrics)
        adaptive_repeats.check_adaptive(stability_config, primary_metric)
        self.settings = BenchmarkSettings(
            scoring_config, continuous_config, primary_metric,
            check_float("Benchmark", "quality_tolerance", quality_tolerance, low=0.0),
            separatix_config=separatix_config, metrics=custom_metrics, stability_config=stability_config,
            compression=check_compression("Benchmark", compression), memory_config=memory_config,
            resource_profiling=check_profiling("Benchmark", resource_profiling),
            referee=check_referee(referee, dataset.target_type),
            **dict(zip(("referee_policy", "referee_share"), check_finalist_policy(referee_finalists, referee_share,
                                                                                  referee))))
        check_config("target_view_config", target_view_config, TargetViewConfig)
        check_config("label_view_config", label_view_config, LabelViewConfig)
        self.target_view_config, self.label_view_config = target_view_config, label_view_config
        self._views = plan_views(target_view_config, label_view_config, dataset, self._outputs())
        self._check_unique_results()
        self._check_labels_against_config(metric_arguments(metrics, custom_metrics))
        self.on_error = check_on_error("Benchmark", on_error)
        self.progress = check_progress("Benchmark", progress)
        #: Successive halving before the full evaluation (docs/screening.md); None: every candidate in full.
        self.screening = check_config("screening", screening, ScreeningConfig)
        self._screened: Screened | None = None
        self.cache = stage_cache(cache_config)  # opens the store now: a bad URL fails before any work
        self._adaptive_record: dict[str, Any] | None = None  # the last run's rounds (refine -> build_result)
        if self.screening is not None:  # rungs, repeats and candidates: before any extraction
            check_screening(self.screening, self.settings, self.chains(), dataset.targets, dataset.groups)

    def _check_labels_against_config(self, arguments: tuple[str, ...]) -> None:
        """Label-dependent settings must fit every scored target (view): fail before any extractor runs.
        ``arguments``: where each of ``settings.metrics`` was given (``metrics[i]``), for the messages."""
        views = {view for chosen in self._views.values() for view in (chosen or [None])}
        for view in sorted(views, key=str):
            targets = self.dataset.view_targets(view)
            where = "" if view is None else f" (in {view[0]} view {view[1]!r})"
            try:
                if targets.target_type != "regression":
                    check_class_settings(self.settings.scoring_config, targets.counts(), targets.catalog)
                stability = self.settings.stability_config
                if stability is not None and stability.mode == "subsample":
                    plan_repeats(targets, stability)  # an infeasible subsample fails here, before any work
                if self.settings.memory_config is not None:  # a budget no embedding width could meet
                    check_budget_feasible(targets, self.settings.memory_config, self.settings.scoring_config,
                                          self.settings.continuous_config)
                referee = () if self.settings.referee is None else (self.settings.referee,)
                check_metrics_feasible([*self.settings.metrics, *referee], targets, self.dataset.groups,
                                       [*arguments, *("referee" for _ in referee)])
            except VertebraeError as exc:
                raise type(exc)(f"{exc}{where}") from None

    @staticmethod
    def _extractor_outputs(extractor: Any) -> tuple[str | None, ...]:
        return tuple(extractor.output_names()) if hasattr(extractor, "output_names") else (None,)

    def _outputs(self) -> list[str | None]:
        return [output for e in self.extractors for output in self._extractor_outputs(e)]

    def _results(self) -> list[ResultParts]:
        """The parts of every result, in plan order.

        Names read ``extractor``, ``extractor:output``, ``extractor+pca64``, ``extractor[target=coarse]`` or
        ``extractor:output+int8[level=family]`` (spec, results page).
        """
        results = []
        for position, extractor in enumerate(self.extractors):
            for output in self._extractor_outputs(extractor):
                base = extractor.name if output is None else f"{extractor.name}:{output}"
                for variant in self.settings.compression or (None,):
                    for view in self._views[output] or [None]:
                        name = variant_name(base, variant) + ("" if view is None else f"[{view_label(view)}]")
                        results.append((position, output, variant, view, name))
        return results

    def _check_unique_results(self) -> None:
        """Results are looked up, reported and reloaded by name: two results with one name (an extractor named like
        another's output, variant or view) would shadow each other, so the clash is refused before any work."""
        seen: dict[str, str] = {}
        for position, output, variant, view, name in self._results():
            maker = (f"extractors[{position}] ({self.extractors[position].name!r}"
                     + ("" if output is None else f", output {output!r}")
                     + ("" if variant is None or variant.method == "none" else f", compression {variant.label!r}")
                     + ("" if view is None else f", view {view_label(view)!r}") + ")")
            if name in seen:
                raise ConfigError(f"{maker} and {seen[name]} both make the result named {name!r}; rename the "
                                  "extractor (or the output) so that every result has its own name")
            seen[name] = maker

    def chains(self, context: RunContext | None = None) -> list[Chain]:
        """One chain per result (:meth:`_results`): each extractor (or each named output of it), times each
        compression variant, times each scored view."""
        context = self._context() if context is None else context
        extractor_ids = context.extractor_ids()
        target_types = {view: self.dataset.view_targets(view).target_type
                        for chosen in self._views.values() for view in (chosen or [None])}
        return [Chain(name, extractor_ids[position], self.extractors[position].name, output, view, variant,
                      target_types[view])
                for position, output, variant, view, name in self._results()]

    def execute(self, runner: Any = None, description: str | None = None) -> tuple[Plan, RunOutcome]:
        """The shared run path's execute; with screening, the rungs first and the finalists' plan in full."""
        if self.screening is None:
            return super().execute(runner, description)
        self._screened = run_screening(self.scope(runner), self.screening)
        return self._screened.plan, self._screened.outcome

    # -- the declaration the shared run path reads ---------------------------------------------------
    def embedding_sources(self, chain: Chain) -> dict[None, EmbeddingSource]:
        return {None: EmbeddingSource("extract", chain.output)}

    def failed_result(self, chain: Chain, error: dict[str, Any], keys: dict[str, str]) -> ExtractorResult:
        return ExtractorResult.failed(chain.name, self.settings.primary_metric, error, artifact_keys=keys)

    def complete(self, result: ExtractorResult, chain: Chain, keys: dict[str, str], outcome: RunOutcome,
                 plan: Plan) -> ExtractorResult:
        """Separatix's runtime is its job's (beside the artifact, like every runtime); the resource profile."""
        if result.separatix is not None:  # its runtime travels beside the artifact, like every runtime
            result.separatix = dataclasses.replace(result.separatix, runtime_seconds=result.runtime.get("separatix"))
        profiling = self.settings.resource_profiling
        if profiling is not None and profiling.enabled:
            measured = outcome.timings.get(keys["extract"], {}).get(PROFILE_KEY)
            logical = result.embedding.get("logical_bytes")
            raw = logical if result.compression is None else result.compression.get("footprint", {}).get("raw_bytes")
            result.resource_profile = chain_profile(measured, result.embedding["cache_status"], raw, logical,
                                                    result.embedding.get("footprint"))
        return result

    def has_later_rounds(self) -> bool:
        stability = self.settings.stability_config
        return self.settings.referee is not None or (stability is not None and stability.adaptive)

    def follow_up(self, result: BenchmarkResult, rounds: Rounds) -> BenchmarkResult:
        """The referee round (when a referee is set): score each view's finalists with it and record the pick."""
        referee = self.settings.referee
        if referee is None:
            return result
        started = time.perf_counter()
        chosen, policy = choose_finalists(result, self.settings.referee_policy, self.settings.referee_share)
        refereed = {name for names, _, _ in chosen.values() if len(names) > 1 for name in names}
        scores: dict[str, MetricResult] = {}
        if refereed:  # a second round of the one run path: the referee stage, for the finalists only
            plan, outcome = rounds.run(("referee",), f"{self.description} referee",
                                       state={"referee_finalists": frozenset(refereed)})
            for chain, keys in zip(plan.chains, plan.chain_keys):
                if chain.name in refereed:
                    scores[chain.name] = _referee_score(referee, keys["referee"], outcome)
                    finalist = result[chain.name]
                    finalist.runtime.update(chain_runtime({"referee": keys["referee"]}, plan, outcome))
                    finalist.artifact_keys["referee"] = keys["referee"]
                    result.metadata["plan"].append({"stage": "referee", "extractor": chain.name,
                                                    "key": keys["referee"]})
        decisions = [decide(view, names, basis, note, referee, {n: scores[n] for n in names if n in scores},
                            self.settings.primary_metric) for view, (names, basis, note) in chosen.items()]
        result.metadata["referee"] = referee_record(referee, decisions, policy)
        result.timing["referee"] = {"seconds": time.perf_counter() - started}
        result.recommendations = benchmark_recommendations(result)
        return result

    def refine(self, results: list[ExtractorResult], plan: Plan, outcome: RunOutcome,
               rounds: Rounds) -> list[ExtractorResult]:
        """``repeats="auto"``: more stability rounds until the verdicts are decided (vertebrae.selection.adaptive_repeats)."""
        self._adaptive_record = None
        stability = self.settings.stability_config
        if stability is None or not stability.adaptive:
            return results
        results, self._adaptive_record = adaptive_repeats.run_rounds(results, plan, outcome, rounds)
        return results

    def check_staged(self) -> None:
        """A staged plan (plan/embed/score/collect) writes every job ahead: refuse what decides its jobs while it
        runs (screening rungs, a referee round, adaptive repeats), with what to do instead."""
        if self.screening is not None:
            raise ConfigError("[screening] decides each rung's jobs from the scores of the rung before, so there is "
                              "no plan to write ahead; use vertebrae run --screen (--cache reuses its increments and "
                              "rung scores; with --dask-address its extraction and scoring jobs run on the cluster, "
                              "the rung loop in the calling process), or remove [screening] to plan")
        if self.settings.referee is not None:
            raise ConfigError("[benchmark] referee needs a round after scoring (its finalists come from the scores), "
                              "which a staged run does not plan; run it with vertebrae run")
        adaptive_repeats.check_staged(self.settings.stability_config)

    def build_result(self, results: list[ExtractorResult], notes: list[str]) -> BenchmarkResult:
        screened = self._screened if self.screening is not None else None
        if screened is not None:  # every candidate keeps a result; screened-out ones are never ranked
            results = screened.results(results)
        result = _build_result(self.dataset, results, self.settings)
        if self._adaptive_record is not None:
            result.metadata["adaptive_repeats"] = self._adaptive_record
        if screened is not None:
            result.metadata["screening"] = screened.metadata()
            result.timing["screening_seconds"] = screened.seconds
            result.recommendations.append(screening_note(screened.metadata()))
        return result


def _referee_score(referee: Metric, key: str, outcome: RunOutcome) -> MetricResult:
    """The referee's MetricResult of one finalist; a failed job (``on_error="record"``) is an invalid score."""
    if key in outcome.artifacts:
        return outcome.artifacts[key]
    failure = outcome.failures[key]
    return MetricResult(name=referee.name, score=None, higher_is_better=referee.higher_is_better,
                        aggregate_valid=False, error=f"{failure.stage} stage: {failure.error_type}: {failure.message}")


def _validate_extractors(extractors: Sequence[Any]) -> list[Any]:
    extractors = validate_extractor_list(extractors, hint=" (objects with name, fit, transform, recipe)")
    for i, extractor in enumerate(extractors):
        missing = [attr for attr in ("name", "fit", "transform", "recipe") if not hasattr(extractor, attr)]
        if missing:
            raise InputTypeError(f"extractors[{i}] ({type(extractor).__name__}) lacks {missing}; an extractor needs "
                                 "name, fit, transform and recipe (see vertebrae.extractors.Extractor)")
    check_unique_names(extractors, [f"extractors[{i}]" for i in range(len(extractors))])
    return extractors


def _check_precomputed(dataset: BenchmarkDataset, extractors: Sequence[Any]) -> None:
    """A precomputed matrix must have one row per sample, and one without a matrix passes the dataset's inputs
    through, which must then be an embedding matrix: both fail here, not after the extractors before it ran."""
    for i, extractor in enumerate(extractors):
        if not isinstance(extractor, PrecomputedExtractor):
            continue
        where = f"extractors[{i}] PrecomputedExtractor {extractor.name!r}"
        if extractor.embeddings is not None and extractor.embeddings.shape[0] != dataset.n_samples:
            raise InputValidationError(f"{where} holds {extractor.embeddings.shape[0]} rows but the dataset has "
                                       f"{dataset.n_samples}; pass one embedding row per sample, in dataset order")
        if extractor.embeddings is None and dataset.embeddings is None:
            try:
                validate_embeddings(dataset.inputs, argument="dataset.inputs")
            except VertebraeError as exc:
                raise type(exc)(f"{where} has no embeddings of its own, so it would score the dataset's inputs, "
                                f"which are not an embedding matrix ({exc}); pass embeddings=... (one row per "
                                "sample) or build the dataset with BenchmarkDataset.from_embeddings") from None


def _build_result(dataset: BenchmarkDataset, results: list[ExtractorResult],
                  settings: BenchmarkSettings) -> BenchmarkResult:
    metadata = {
        "settings": settings.to_dict(),
        "quality_tolerance": settings.quality_tolerance,
        "primary_metric": settings.primary_metric,
        "label_catalog": None if dataset.target_type == "regression" else dataset.targets.catalog.to_dict(),
    }
    references = reference_metrics(settings.metrics, settings.primary_metric)
    if references:  # the result reports how the primary ranking agrees with each (BenchmarkResult.agreement)
        metadata["reference_metrics"] = references
    result = BenchmarkResult(dataset.summary(), results, [], metadata)
    result.recommendations = benchmark_recommendations(result)
    return result


def probe_verdict_notes(result: BenchmarkResult, view: str | None, where: str) -> list[str]:
    """One line per reference metric with paired fold scores: its pick and the candidates it cannot tell from it."""
    notes = []
    for name, label in result.reference_metrics.items():
        verdicts = result.paired_verdicts(view, name)
        if verdicts.available and len(verdicts.against_best) > 1:
            notes.append(f"{where}{capitalized(tied_sentence(label, verdicts))} "
                         f"({verdicts.n_repeats} paired folds, corrected resampled t, {verdicts.interval_level:.0%}).")
    return notes


def ranked_draw_note(result: ExtractorResult, *, with_mean: bool = True) -> str | None:
    """Why a ranked overlap score lies outside its own stability interval (None inside, or without repeats)."""
    from ...reports.markdown_stability import draw_note

    if result.stability is None or result.primary_metric_name != "overlap":
        return None
    return draw_note(result.primary_score, result.stability.to_dict(), with_mean=with_mean)


def benchmark_recommendations(result: BenchmarkResult) -> list[str]:
    """Short practitioner guidance derived from each view's ranking (never a composite score)."""
    views = result.views()
    notes: list[str] = []
    for view in views:
        where = "" if len(views) == 1 else f"[{view}] "
        ranked = result.ranked_results(view)
        if not ranked:
            notes.append(f"{where}No extractor has a valid primary aggregate; rankings and the quality cohort are "
                         "unavailable.")
            continue
        best = ranked[0]
        notes.append(f"{where}Top candidate: {best.name} ({best.primary_metric_name} = {best.primary_score:.4f}"
                     f"{'; ' + note if (note := ranked_draw_note(best)) else ''}).")
        notes += probe_verdict_notes(result, view, where)
        notes += referee_notes(result.metadata.get("referee"), view, where, result.referee_verdicts(view))
        cohort = result.quality_cohort(view=view)
        if len(cohort) > 1:
            notes.append(f"{where}Within {result.metadata['quality_tolerance']} of the best: "
                         + ", ".join(r.name for r in cohort) + " — compare them on cost before choosing.")
        for r in ranked:
            if r.weakest_class and r.weakest_class["score"] < 0.5 and r.overlap.target_type != "regression":
                notes.append(f"{r.name}: class {r.weakest_class['display']!r} overlaps heavily "
                             f"(per-class overlap {r.weakest_class['score']:.4f}); inspect it before relying on this "
                             "space.")
    return notes

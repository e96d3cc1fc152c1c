"""Benchmark: the front door of a labeled-data comparison of extractors.

``Benchmark(dataset, extractors, ...)`` validates everything up front, builds a plan
of stage jobs (see :mod:`vertebrae.execution.plan`) and runs it with the in-process
runner.  ``run()`` returns a :class:`~vertebrae.results.BenchmarkResult`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
from collections.abc import Sequence
from typing import Any

from ._config import check_float
from .datasets import BenchmarkDataset
from .errors import ConfigTypeError, InputTypeError, InputValidationError
from .execution import stages
from .execution.local import LocalRunner
from .execution.plan import StageJob, artifact_key, build_plan
from .extractors.base import Extractor
from .results import BenchmarkResult, ExtractorResult
from .scoring.metric_result import OVERLAP_METRIC
from .scoring.metrics import Metric, check_primary_metric, metrics_fingerprint, resolve_metrics, run_metrics
from .scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig, check_class_settings
from .scoring.separatix import SeparatixConfig
from .scoring.stability import StabilityConfig, plan_repeats

# Adding a per-extractor stage: a BenchmarkSettings field + an analysis_stages() entry, a `functions`
# entry in Benchmark.run, its artifact in stages.assemble, then ExtractorResult, results.result_row
# and reports.markdown.SECTIONS for the reports.

DEFAULT_QUALITY_TOLERANCE = 0.02


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

    def scoring_fingerprint(self) -> dict[str, Any]:
        return {"overlap": self.scoring_config.to_dict(), "continuous": self.continuous_config.to_dict()}

    def fingerprint(self) -> dict[str, Any]:
        return {"primary_metric": self.primary_metric, "quality_tolerance": self.quality_tolerance}

    def analysis_stages(self) -> list[tuple[str, dict[str, Any]]]:
        """Optional per-extractor stages after scoring: (stage name, config fingerprint)."""
        stages: list[tuple[str, dict[str, Any]]] = []
        if self.stability_config is not None:
            stages.append(("stability", self.stability_config.fingerprint()))
        if self.metrics:
            stages.append(("metrics", metrics_fingerprint(self.metrics)))
        if self.separatix_config is not None and self.separatix_config.enabled:
            stages.append(("diagnose", self.separatix_config.to_dict()))
        return stages

    def to_dict(self) -> dict[str, Any]:
        return {"scoring_config": self.scoring_config.to_dict(), "continuous_config": self.continuous_config.to_dict(),
                "primary_metric": self.primary_metric, "quality_tolerance": self.quality_tolerance,
                "metrics": metrics_fingerprint(self.metrics)["metrics"],
                "separatix_config": None if self.separatix_config is None else self.separatix_config.to_dict(),
                "stability_config": None if self.stability_config is None else self.stability_config.to_dict()}


class Benchmark:
    """Compare extractors on one labeled dataset."""

    def __init__(self, dataset: BenchmarkDataset, extractors: Sequence[Extractor], *,
                 scoring_config: OverlapScoringConfig | None = None,
                 continuous_config: ContinuousOverlapScoringConfig | None = None,
                 metrics: Sequence[Any] | None = None,
                 primary_metric: str = OVERLAP_METRIC,
                 quality_tolerance: float = DEFAULT_QUALITY_TOLERANCE,
                 separatix_config: SeparatixConfig | None = None,
                 stability_config: StabilityConfig | None = None,
                 progress: bool | None = None) -> None:
        if not isinstance(dataset, BenchmarkDataset):
            raise InputTypeError(f"dataset must be a BenchmarkDataset, got {type(dataset).__name__}; build one with "
                                 "BenchmarkDataset.from_embeddings(...) or BenchmarkDataset.from_arrays(...)")
        self.dataset = dataset
        self.extractors = _validate_extractors(extractors)
        scoring_config, continuous_config, custom_metrics = resolve_metrics(metrics, scoring_config, continuous_config,
                                                                            dataset.target_type)
        scoring_config = scoring_config or OverlapScoringConfig()
        continuous_config = continuous_config or ContinuousOverlapScoringConfig()
        if not isinstance(scoring_config, OverlapScoringConfig):
            raise ConfigTypeError(f"scoring_config must be an OverlapScoringConfig, got {type(scoring_config).__name__}")
        if not isinstance(continuous_config, ContinuousOverlapScoringConfig):
            raise ConfigTypeError("continuous_config must be a ContinuousOverlapScoringConfig, got "
                                  f"{type(continuous_config).__name__}")
        # Separatix is the default complexity diagnostic (gated on the overlap score);
        # SeparatixConfig(enabled=False) turns it off.
        separatix_config = SeparatixConfig() if separatix_config is None else separatix_config
        if not isinstance(separatix_config, SeparatixConfig):
            raise ConfigTypeError(f"separatix_config must be a SeparatixConfig or None, "
                                  f"got {type(separatix_config).__name__}")
        if stability_config is not None and not isinstance(stability_config, StabilityConfig):
            raise ConfigTypeError(f"stability_config must be a StabilityConfig or None, "
                                  f"got {type(stability_config).__name__}")
        check_primary_metric(primary_metric, custom_metrics)
        self.settings = BenchmarkSettings(
            scoring_config, continuous_config, primary_metric,
            check_float("Benchmark", "quality_tolerance", quality_tolerance, low=0.0),
            separatix_config=separatix_config, metrics=custom_metrics, stability_config=stability_config)
        self._check_labels_against_config()
        self.progress = progress

    def _check_labels_against_config(self) -> None:
        """Label-dependent settings must fit the dataset: fail before any extractor runs."""
        targets = self.dataset.targets
        if targets.target_type != "regression":
            check_class_settings(self.settings.scoring_config, targets.counts(), targets.catalog)
        stability = self.settings.stability_config
        if stability is not None and stability.mode == "subsample":
            plan_repeats(targets, stability)  # an infeasible subsample fails here, before any extractor runs

    def plan(self) -> list[StageJob]:
        recipes = [(e.name, e.recipe()) for e in self.extractors]
        return build_plan(self.dataset.fingerprint, recipes, self.settings)

    def run(self) -> BenchmarkResult:
        started = _dt.datetime.now(_dt.timezone.utc)
        by_name = {e.name: e for e in self.extractors}
        dataset, settings = self.dataset, self.settings
        functions = {
            "extract": lambda job, inputs: stages.extract(dataset, by_name[job.extractor]),
            "score": lambda job, inputs: stages.score(inputs["extract"], dataset.targets, settings),
            "stability": lambda job, inputs: stages.stability(inputs["extract"], dataset.targets, settings),
            "diagnose": lambda job, inputs: stages.diagnose(inputs["extract"], inputs["score"], dataset.targets,
                                                            dataset.groups, settings),
            "metrics": lambda job, inputs: run_metrics(settings.metrics, inputs["extract"].matrix, dataset.targets,
                                                       dataset.groups, seed=inputs["score"].overlap.metadata["seed"],
                                                       extractor=job.extractor),
            "assemble": lambda job, inputs: stages.assemble(by_name[job.extractor], inputs, settings),
        }
        jobs = self.plan()
        store = LocalRunner(self.progress).run(jobs, functions)
        results: list[ExtractorResult] = []
        for job in jobs:
            if job.stage == "assemble":
                result = store[job.key]
                result.artifact_keys = {"assemble": job.key, **{k.split("/")[0]: k for k in job.needs}}
                results.append(result)
        return _build_result(dataset, results, settings, jobs, started)


def _validate_extractors(extractors: Sequence[Any]) -> list[Any]:
    if isinstance(extractors, (str, bytes)) or not isinstance(extractors, Sequence):
        raise InputTypeError("extractors must be a list of extractors (objects with name, fit, transform, recipe)")
    if not extractors:
        raise InputValidationError("extractors is empty; pass at least one extractor")
    seen: dict[str, int] = {}
    for i, extractor in enumerate(extractors):
        missing = [attr for attr in ("name", "fit", "transform", "recipe") if not hasattr(extractor, attr)]
        if missing:
            raise InputTypeError(f"extractors[{i}] ({type(extractor).__name__}) lacks {missing}; an extractor needs "
                                 "name, fit, transform and recipe (see vertebrae.extractors.Extractor)")
        if extractor.name in seen:
            raise InputValidationError(f"extractors[{i}] and extractors[{seen[extractor.name]}] are both named "
                                       f"{extractor.name!r}; give every extractor a unique name")
        seen[extractor.name] = i
    return list(extractors)


def _build_result(dataset: BenchmarkDataset, results: list[ExtractorResult], settings: BenchmarkSettings,
                  jobs: list[StageJob], started: _dt.datetime) -> BenchmarkResult:
    from importlib.metadata import version

    metadata = {
        "settings": settings.to_dict(),
        "quality_tolerance": settings.quality_tolerance,
        "primary_metric": settings.primary_metric,
        "label_catalog": None if dataset.target_type == "regression" else dataset.targets.catalog.to_dict(),
        "plan": [{"stage": j.stage, "extractor": j.extractor, "key": j.key} for j in jobs],
        "run_key": artifact_key("run", dataset.identity.fingerprint, [j.key for j in jobs]),
        "versions": {name: version(name)
                     for name in ("vertebrae", "overlapindex", "separatix", "numpy", "scipy", "scikit-learn")},
    }
    result = BenchmarkResult(dataset.summary(), results, [], metadata,
                             timing={"started_at": started.isoformat(),
                                     "host": {"python": platform.python_version(), "platform": platform.platform(),
                                              "machine": platform.machine()}})
    result.recommendations = benchmark_recommendations(result)
    return result


def benchmark_recommendations(result: BenchmarkResult) -> list[str]:
    """Short practitioner guidance derived from the ranking (never a composite score)."""
    ranked = result.ranked_results()
    if not ranked:
        return ["No extractor has a valid primary aggregate; rankings and the quality cohort are unavailable."]
    best = ranked[0]
    notes = [f"Top candidate: {best.name} ({best.primary_metric_name} = {best.primary_score:.4f})."]
    cohort = result.quality_cohort()
    if len(cohort) > 1:
        notes.append(f"Within {result.metadata['quality_tolerance']} of the best: "
                     + ", ".join(r.name for r in cohort) + " — compare them on cost before choosing.")
    for r in ranked:
        if r.weakest_class and r.weakest_class["score"] < 0.5 and r.overlap.target_type != "regression":
            notes.append(f"{r.name}: class {r.weakest_class['display']!r} overlaps heavily "
                         f"(per-class overlap {r.weakest_class['score']:.4f}); inspect it before relying on this space.")
    return notes

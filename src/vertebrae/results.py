"""Result objects, ranking views and the one tabular row builder.

Reports are rendered from ``to_dict()`` output only (see :mod:`vertebrae.reports`),
so an archived JSON file regenerates the same report later.  Timing and host facts
live in the top-level ``timing`` section of the JSON so everything else is
byte-identical for the same inputs and seeds.
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, SerializationError
from .scoring.metric_result import MetricResult
from .scoring.overlap import OverlapScoreResult
from .scoring.separatix import SeparatixResult
from .scoring.stability import StabilityResult, ranking_stability

SCHEMA_VERSION = 1
#: Recommendation thresholds on the overlap score (documented in docs/results.md).
STRONG_OVERLAP = 0.8
MODERATE_OVERLAP = 0.5


def recommendation_label(overlap_score: float) -> str:
    """Lightweight guidance from the overlap score, not a verdict."""
    if overlap_score >= STRONG_OVERLAP:
        return "strong_separation"
    if overlap_score >= MODERATE_OVERLAP:
        return "moderate_separation"
    return "weak_separation"


@dataclasses.dataclass
class ExtractorResult:
    """Everything measured for one extractor (or one named output of one)."""

    name: str
    extractor_type: str
    recipe: dict[str, Any]
    overlap: OverlapScoreResult | None
    metrics: dict[str, MetricResult]
    primary_metric_name: str
    primary_score: float | None
    embedding: dict[str, Any]
    warnings: list[str]
    recommendation: str
    weakest_class: dict[str, Any] | None
    artifact_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Descriptive Separatix diagnostic (None when not configured); never used for ranking.
    separatix: SeparatixResult | None = None
    #: Repeated overlap scoring (None when no StabilityConfig was given).
    stability: StabilityResult | None = None
    #: Why this result has no scores (``Benchmark(on_error="record")``): stage, type, message, extractor.
    error: dict[str, Any] | None = None
    #: The named target view / hierarchy level this result scores (None: the dataset's own targets).
    target_view: str | None = None
    label_view: str | None = None

    @property
    def view(self) -> str | None:
        """``target=<name>`` or ``level=<name>``: the task this result belongs to (None: the dataset's targets)."""
        if self.target_view is not None:
            return f"target={self.target_view}"
        return None if self.label_view is None else f"level={self.label_view}"

    @classmethod
    def failed(cls, name: str, primary_metric_name: str, error: dict[str, Any],
               artifact_keys: dict[str, str]) -> "ExtractorResult":
        """An invalid, unranked result standing for an extractor whose chain failed."""
        return cls(name=name, extractor_type="failed", recipe={}, overlap=None, metrics={},
                   primary_metric_name=primary_metric_name, primary_score=None, embedding={},
                   warnings=[f"failed in the {error['stage']} stage: {error['type']}: {error['message']}"],
                   recommendation="failed", weakest_class=None, artifact_keys=artifact_keys, error=error)

    @property
    def primary_metric(self) -> MetricResult:
        return self.metrics[self.primary_metric_name]

    @property
    def aggregate_valid(self) -> bool:
        return self.error is None and self.primary_metric.rankable

    @property
    def stability_position(self) -> dict[str, Any] | None:
        """Where the ranked overlap score sits among this extractor's stability repeats (None without stability)."""
        return None if self.stability is None else self.stability.position_of(self.overlap.score)

    def to_dict(self) -> dict[str, Any]:
        """JSON form without ``runtime`` (the benchmark result stores timings separately); ``error`` only when set."""
        optional = ("error", "target_view", "label_view")  # written only when set
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "runtime" and not (f.name in optional and getattr(self, f.name) is None)}
        data["overlap"] = None if self.overlap is None else self.overlap.to_dict()
        data["metrics"] = {name: m.to_dict() for name, m in self.metrics.items()}
        data["separatix"] = None if self.separatix is None else self.separatix.to_dict()
        data["stability"] = None if self.stability is None else self.stability.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], runtime: Mapping[str, float] | None = None) -> "ExtractorResult":
        fields = dict(data)
        fields["overlap"] = None if fields["overlap"] is None else OverlapScoreResult.from_dict(fields["overlap"])
        fields["metrics"] = {name: MetricResult.from_dict(m) for name, m in fields["metrics"].items()}
        if fields.get("separatix") is not None:
            fields["separatix"] = SeparatixResult.from_dict(fields["separatix"])
        if fields.get("stability") is not None:
            fields["stability"] = StabilityResult.from_dict(fields["stability"])
        fields["runtime"] = dict(runtime or {})
        return cls(**fields)


@dataclasses.dataclass
class BenchmarkResult:
    dataset_summary: dict[str, Any]
    extractor_results: list[ExtractorResult]
    recommendations: list[str]
    metadata: dict[str, Any]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)

    # -- ranking views ---------------------------------------------------------
    def views(self) -> list[str | None]:
        """The tasks in this result, in order: ``None`` (the dataset's targets) and/or ``target=…``/``level=…``."""
        return list(dict.fromkeys(r.view for r in self.extractor_results))

    def ranked_results(self, view: str | None = None) -> list[ExtractorResult]:
        """Valid results best-first by the primary metric, respecting its direction.

        Invalid aggregates are omitted; if every aggregate is invalid the ranking is
        empty (never filled with a fallback).  Ties keep extractor order.  A view is a
        different task, so views are never ranked against each other: ``view=`` gives one
        view's ranking, and without it the per-view rankings follow each other in view order.
        """
        if view is not None and view not in self.views():
            raise KeyError(f"no view {view!r} in this result; views: {self.views()}")
        ranked = []
        for task in ([view] if view is not None else self.views()):
            valid = [r for r in self.extractor_results if r.aggregate_valid and r.view == task]
            ranked += sorted(valid, key=lambda r: -r.primary_score if r.primary_metric.higher_is_better
                             else r.primary_score)
        return ranked

    @property
    def ranking_stability(self) -> dict[str, Any] | None:
        """How stable the overlap-score ranking is across stability repeats (see docs/stability.md).

        Derived from the extractors' repeat scores, which share seeds because a benchmark
        gives every extractor the same StabilityConfig; None with fewer than two analysed,
        and None when the result scores several views (separate tasks: read each view's intervals).
        """
        if len(self.views()) > 1:
            return None
        analysed = [r for r in self.extractor_results if r.stability is not None]
        if len(analysed) < 2:
            return None
        by_overlap = sorted(analysed, key=lambda r: -r.overlap.score)  # the overlap ranking (ties: extractor order)
        return ranking_stability({r.name: r.stability.repeat_scores["score"] for r in analysed},
                                 ranked=[r.name for r in by_overlap])

    @property
    def ranking_available(self) -> bool:
        return bool(self.ranked_results())

    def quality_cohort(self, tolerance: float | None = None, view: str | None = None) -> list[ExtractorResult]:
        """Results within an absolute ``tolerance`` of the best primary score, in ranking order (of one view)."""
        tolerance = self.metadata.get("quality_tolerance", 0.0) if tolerance is None else tolerance
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        if view is None and len(self.views()) > 1:
            raise ConfigError(f"this result scores several views {self.views()}; a quality cohort is defined within "
                              "one view: pass view=...")
        ranked = self.ranked_results(view if view is not None else self.views()[0] if self.views() else None)
        if not ranked:
            return []
        best = ranked[0]
        return [r for r in ranked if abs(r.primary_score - best.primary_score) <= tolerance + 1e-12]

    def __getitem__(self, name: str) -> ExtractorResult:
        for result in self.extractor_results:
            if result.name == name:
                return result
        raise KeyError(f"no extractor result named {name!r}; have {[r.name for r in self.extractor_results]}")

    # -- tabular ---------------------------------------------------------------
    def rows(self, include_invalid: bool = False) -> list[dict[str, Any]]:
        """One flat dict per result (the DataFrame rows), ranked; invalid ones last with rank None."""
        ranked = self.ranked_results()
        rank_of = {id(r): i + 1 for view in self.views() for i, r in enumerate(self.ranked_results(view))}
        chosen = ranked + ([r for r in self.extractor_results if id(r) not in rank_of] if include_invalid else [])
        return [result_row(r, rank_of.get(id(r))) for r in chosen]

    def to_dataframe(self, include_invalid: bool = False) -> Any:
        """A pandas DataFrame, ranked and valid-only unless ``include_invalid=True``.

        With no valid aggregate the default frame is empty (the ranking is unavailable)
        but keeps the canonical columns, so column access still works.
        """
        import pandas as pd

        rows = self.rows(include_invalid)
        if rows or not self.extractor_results:
            frame = pd.DataFrame(rows)
        else:
            frame = pd.DataFrame(columns=list(result_row(self.extractor_results[0], None)))
        if "rank" in frame:
            frame["rank"] = frame["rank"].astype("Int64")
        return frame

    # -- persistence -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form; every wall-clock measurement is moved into the top-level ``timing`` section."""
        results = [r.to_dict() for r in self.extractor_results]
        diagnostic_timings = {}
        for data in results:
            if data.get("separatix") is not None:
                data["separatix"] = copy.deepcopy(data["separatix"])
                diagnostic_timings[data["name"]] = sorted(pop_timings(data["separatix"]), key=lambda t: str(t[0]))
        return {
            "schema_version": SCHEMA_VERSION,
            "result_type": "benchmark",
            "dataset_summary": self.dataset_summary,
            "extractor_results": results,
            "recommendations": list(self.recommendations),
            "ranking_stability": self.ranking_stability,
            "metadata": self.metadata,
            "timing": {**self.timing, "runtime": {r.name: dict(r.runtime) for r in self.extractor_results},
                       "separatix": diagnostic_timings},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchmarkResult":
        if data.get("result_type") != "benchmark" or data.get("schema_version") != SCHEMA_VERSION:
            raise SerializationError(f"$: not a vertebrae benchmark result of schema {SCHEMA_VERSION} "
                                     f"(result_type={data.get('result_type')!r}, schema_version={data.get('schema_version')!r})")
        timing = dict(data.get("timing", {}))
        runtime = timing.pop("runtime", {})
        diagnostic_timings = timing.pop("separatix", {})
        results = []
        for item in data["extractor_results"]:
            if item.get("separatix") is not None and item["name"] in diagnostic_timings:
                item = {**item, "separatix": copy.deepcopy(item["separatix"])}
                put_timings(item["separatix"], diagnostic_timings[item["name"]])
            results.append(ExtractorResult.from_dict(item, runtime.get(item["name"])))
        return cls(dict(data["dataset_summary"]), results, list(data["recommendations"]), dict(data["metadata"]), timing)

    def save_json(self, path: str | pathlib.Path) -> pathlib.Path:
        from .reports import json_codec

        return json_codec.write(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> "BenchmarkResult":
        from .reports import json_codec

        return cls.from_dict(json_codec.decode(json_codec.read(path)))

    def to_markdown(self) -> str:
        """Rendered from exactly what ``save_json`` writes, so archived JSON gives the same report."""
        import json

        from .reports import json_codec
        from .reports.markdown import render_benchmark

        return render_benchmark(json_codec.decode(json.loads(json_codec.dumps(self.to_dict()))))

    def save_markdown(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        text = self.to_markdown()
        path.write_text(text, encoding="utf-8")
        return path


# --------------------------------------------------------------------- timings
#: Keys that hold wall-clock measurements wherever they occur inside a diagnostic payload.
TIMING_KEYS = frozenset({"runtime_seconds", "total_seconds"})


def pop_timings(payload: Any, path: tuple = ()) -> list[list[Any]]:
    """Remove timing values from ``payload`` in place; return them as ``[path segments, value]`` pairs.

    Keeping them in the ``timing`` section makes the rest of the JSON byte-identical
    for the same inputs and seeds; :func:`put_timings` restores them on load.
    """
    found: list[list[Any]] = []
    if isinstance(payload, dict):
        for key in list(payload):
            if key in TIMING_KEYS and isinstance(payload[key], (int, float)) and not isinstance(payload[key], bool):
                found.append([[*path, key], payload.pop(key)])
            else:
                found += pop_timings(payload[key], (*path, key))
    elif isinstance(payload, list):
        for i, item in enumerate(payload):
            found += pop_timings(item, (*path, i))
    return found


def put_timings(payload: Any, timings: list[list[Any]]) -> None:
    for segments, value in timings:
        target = payload
        for segment in segments[:-1]:
            target = target[segment]
        target[segments[-1]] = value


# --------------------------------------------------------------------- row builder
def result_row(result: ExtractorResult, rank: int | None) -> dict[str, Any]:
    """The canonical flat row of one result; every tabular view uses this builder."""
    weakest = result.weakest_class or {}
    separatix = result.separatix
    probes = separatix.probe_summary if separatix is not None else {}
    row: dict[str, Any] = {
        "rank": rank,
        "extractor": result.name,
        "extractor_type": result.extractor_type,
        "parent_extractor": result.embedding.get("parent_extractor_name", result.name),
        "output_name": result.embedding.get("output_name"),
        "hidden_layer": result.embedding.get("hidden_layer"),
        "pooling": result.embedding.get("pooling"),
        "target_view": result.target_view,
        "label_view": result.label_view,
        "primary_metric": result.primary_metric_name,
        "primary_score": result.primary_score,
        "aggregate_valid": result.aggregate_valid,
        "target_type": None if result.overlap is None else result.overlap.target_type,
        "overlap_score": None if result.overlap is None else result.overlap.score,
        "overlap_macro": None if result.overlap is None else result.overlap.macro_score,
        "overlap_weighted": None if result.overlap is None else result.overlap.weighted_score,
        "weakest_class": weakest.get("display"),
        "weakest_class_score": weakest.get("score"),
        "best_probe": probes.get("best_probe"),
        "probe_metric": probes.get("probe_metric"),
        "probe_score": probes.get("probe_score"),
        "recommendation": result.recommendation,
        "separatix_status": None if separatix is None else separatix.status,
        "separatix_recommendation": None if separatix is None else separatix.recommendation,
        "separatix_confidence": None if separatix is None else separatix.confidence,
        "embedding_dim": result.embedding.get("embedding_dim"),
        "embedding_dtype": result.embedding.get("dtype"),
        "embedding_sparse": result.embedding.get("sparse"),
        "embedding_nnz": result.embedding.get("nnz"),
        "warnings": len(result.warnings),
        **_stability_columns(result.stability, None if result.overlap is None else result.overlap.score),
    }
    for name, metric in result.metrics.items():
        row[f"metric.{name}"] = metric.score
    for stage, seconds in result.runtime.items():
        row[f"runtime.{stage}"] = seconds
    return row


#: StabilitySummary fields flattened into rows as ``stability_<field>`` (primary overlap score).
STABILITY_SUMMARY_FIELDS = ("mean", "std", "min", "max", "interval_low", "interval_high", "interval_width")


def _stability_columns(stability: StabilityResult | None, score: float | None) -> dict[str, Any]:
    """The stability row columns (``score`` is the ranked overlap score); all None when no stability analysis ran."""
    names = ["mode", "repeats", "interval_level", *STABILITY_SUMMARY_FIELDS, "score_percentile", "score_position"]
    if stability is None:
        return {f"stability_{name}": None for name in names}
    config, summary = stability.config, stability.summary
    position = stability.position_of(score)
    values = [config.mode, config.repeats, config.interval_level,
              *(getattr(summary, field) for field in STABILITY_SUMMARY_FIELDS),
              position["percentile"], position["relative_to_interval"]]
    return {f"stability_{name}": value for name, value in zip(names, values)}

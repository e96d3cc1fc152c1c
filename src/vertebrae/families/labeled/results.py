"""Result objects, ranking views and the one tabular row builder.

Reports are rendered from ``to_dict()`` output only (see :mod:`vertebrae.reports`),
so an archived JSON file regenerates the same report later.  Timing and host facts
live in the top-level ``timing`` section of the JSON so everything else is
byte-identical for the same inputs and seeds.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from ..._base import json_codec
from ..._base.config import check_bool, check_float
from ..._base.files import write_text_atomic
from ...inputs.views import view_name
from ...selection import referee
from ...selection.agreement import Agreement, competition_ranks, reference_scores, view_agreement
from ...errors import ConfigError
from ...extractors.compression import not_applied_reason
from ...extractors.profiling import ResourceProfile
from ..result_protocol import (CHAIN_SCHEMA, ENVELOPE_SCHEMA, IDENTITY_SCHEMA, RECOMMENDATION_CUTOFFS,
                               TIMING_ENVELOPE_SCHEMA, ChainResult, Ranked, check_header, rank_results, read_json,
                               reading, register_result_type)
from ...execution.caching import NOT_MEASURED_CACHE_HIT
from ..._base.result_schema import ANY, INT, NUMBER, AnyOf, Choice, MapOf, Number, Switch, both, check, nullable, rule
# Loading and recommendations live at the protocol layer (reports use them without this module); kept importable here.
from ..result_protocol import load_result, recommendation_label, result_from_dict  # noqa: F401
from ...scoring import metric_result, overlap, separatix, stability
from ...scoring.metric_result import OVERLAP_METRIC, MetricResult
from ...scoring.overlap import OverlapScoreResult
from ...scoring.paired_verdicts import (NEEDS_STABILITY, PairedComparison, PairedVerdicts, adjacent, against_best,
                                        best_itself)
from ...scoring.probe_verdicts import probe_verdicts
from ...scoring.separatix import SeparatixResult
from ...scoring.stability import ADAPTIVE_SCHEMA, StabilityResult, ranking_stability

SCHEMA_VERSION = 1
STRONG_OVERLAP, MODERATE_OVERLAP, _ = RECOMMENDATION_CUTOFFS["single_label"]


#: The DataFrame columns of a row's paired verdict against the best of its view (None when there is none).
VERDICT_COLUMNS = ("verdict", "paired_difference_mean", "paired_difference_low", "paired_difference_high",
                   "paired_share_better")
#: Ranked lines shown by ``repr()`` of a result; the DataFrame shows them all.
REPR_ROWS = 5


class ResultFamily:
    """What every result type shares: lookup by name, the ranking, the quality cohort, tables, persistence, reports.

    Subclasses provide ``RESULT_TYPE``, ``extractor_results`` (:class:`ChainResult` objects), ``metadata`` and
    ``timing`` (where the shared run path writes the run envelope: ``result_protocol.ENVELOPE_SCHEMA``),
    ``_row()`` (their flat DataFrame row), ``to_dict()`` and ``from_dict()``.  Markdown and
    HTML are rendered from exactly the JSON ``save_json`` writes, so an archived file
    regenerates the same report.
    """

    RESULT_TYPE: ClassVar[str]
    extractor_results: list[Any]
    #: The run key, versions, plan and cache record of the run (and a family's own run facts).
    metadata: dict[str, Any]
    #: When and where the run ran, and each result's runtimes: never compared.
    timing: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_result_type(cls)  # any document of this type can now be rebuilt (result_protocol.result_from_dict)

    def ranking(self) -> list[Ranked]:
        """``(rank, result)`` of every valid result, best first, under the one tie rule (``rank_results``)."""
        return rank_results(self.extractor_results)

    def ranked_results(self) -> list[Any]:
        """Valid results best-first by the primary metric in its direction; ties keep input order."""
        return [ranked.result for ranked in self.ranking()]

    def _row(self, result: Any, rank: int | None) -> dict[str, Any]:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def rows(self, include_invalid: bool = False) -> list[dict[str, Any]]:
        """One flat dict per result (the DataFrame rows) in ranking order; tied scores share a rank.

        ``include_invalid=True`` appends the results that are not ranked, with rank None.
        """
        check_bool(type(self).__name__ + ".rows", "include_invalid", include_invalid)
        rows = [self._row(ranked.result, ranked.rank) for ranked in self.ranking()]
        if include_invalid:
            rows += [self._row(r, None) for r in self.extractor_results if not r.aggregate_valid]
        return rows

    def to_dataframe(self, include_invalid: bool = False) -> Any:
        """A pandas DataFrame of :meth:`rows`, ranked and valid-only unless ``include_invalid=True``.

        With no valid aggregate the default frame is empty (the ranking is unavailable)
        but keeps the canonical columns, so column access still works.
        """
        import pandas as pd

        rows = self.rows(include_invalid)
        if rows or not self.extractor_results:
            frame = pd.DataFrame(rows)
        else:
            frame = pd.DataFrame(columns=list(self._row(self.extractor_results[0], None)))
        if "rank" in frame:
            frame["rank"] = frame["rank"].astype("Int64")
        return frame

    def _top_lines(self, detail: Any = lambda result: "") -> list[str]:
        """The first ``REPR_ROWS`` lines of the ranking for ``repr()``: rank, name, primary score and ``detail``."""
        ranking = self.ranking()
        lines = [f"  {r.rank}. {r.result.name}: {_score_text(r.result.primary_score)}{detail(r.result)}"
                 for r in ranking[:REPR_ROWS]]
        if len(ranking) > REPR_ROWS:
            lines.append(f"  ... {len(ranking) - REPR_ROWS} more; see to_dataframe()")
        return lines

    def _default_tolerance(self) -> float:
        return 0.0

    def __getitem__(self, name: str) -> Any:
        for result in self.extractor_results:
            if result.name == name:
                return result
        raise KeyError(f"no extractor result named {name!r}; have {[r.name for r in self.extractor_results]}")

    def quality_cohort(self, tolerance: float | None = None) -> list[Any]:
        """Results within an absolute ``tolerance`` of the best primary score, in ranking order."""
        return self._cohort(self.ranked_results(), tolerance)

    def _cohort(self, ranked: list[Any], tolerance: float | None) -> list[Any]:
        tolerance = check_float(type(self).__name__ + ".quality_cohort", "tolerance", tolerance, low=0.0,
                                allow_none=True)
        tolerance = self._default_tolerance() if tolerance is None else tolerance
        if not ranked:
            return []
        best = ranked[0]
        return [r for r in ranked if abs(r.primary_score - best.primary_score) <= tolerance + 1e-12]

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def serialized(self) -> dict[str, Any]:
        """The decoded JSON document ``save_json`` writes (what every report is rendered from)."""
        return json_codec.decode(json.loads(self.to_json()))

    def to_json(self) -> str:
        return json_codec.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Any:
        return cls.from_dict(json_codec.decode(json_codec.loads(text)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def save_json(self, path: str | pathlib.Path) -> pathlib.Path:
        return json_codec.write(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> Any:
        return cls.from_dict(read_json(path))

    def to_markdown(self) -> str:
        from ...reports.render import render_markdown

        return render_markdown(self.serialized())

    def save_markdown(self, path: str | pathlib.Path) -> pathlib.Path:
        return write_text_atomic(path, self.to_markdown())

    def to_html(self) -> str:
        """One self-contained HTML page (figures inline when matplotlib is installed)."""
        from ...reports.html import render_html

        return render_html(self.serialized())

    def save_html(self, path: str | pathlib.Path) -> pathlib.Path:
        return write_text_atomic(path, self.to_html())


def deprecated_alias(old: str, new: str) -> property:
    """A read-only property ``old`` that returns ``new`` with a DeprecationWarning (kept for one release)."""
    def get(self: Any) -> Any:
        warnings.warn(f"{type(self).__name__}.{old} is deprecated; use .{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated alias of ``{new}``.")


def _score_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


#: ExtractorResult fields written to JSON only when they are set (older files stay byte-identical).
OPTIONAL_FIELDS = frozenset({"error", "resource_profile", "target_view", "label_view", "compression", "screening"})


@dataclasses.dataclass
class ExtractorResult(ChainResult):
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
        return view_name(self.target_view, self.label_view)
    #: Measured resources (latency, memory, model and embedding bytes) when profiling ran: a
    #: LocalResourceProfile or DistributedResourceProfile (both dicts); see docs/profiling.md.
    resource_profile: ResourceProfile | None = None
    #: The compression variant this result evaluates (method, dims, applied, footprint); None without variants.
    compression: dict[str, Any] | None = None
    #: What screening did with this candidate (``status`` finalist or screened_out, its rungs); None without
    #: screening.  See :mod:`vertebrae.selection.screening`.
    screening: dict[str, Any] | None = None

    @property
    def screened_out(self) -> bool:
        """Left at a screening rung: not failed, not ranked; ``screening`` holds its last rung and verdict."""
        return (self.screening or {}).get("status") == "screened_out"

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

    def __repr__(self) -> str:
        dim = self.embedding.get("embedding_dim")
        return (f"ExtractorResult(name={self.name!r}, {self.primary_metric_name}={_score_text(self.primary_score)}, "
                f"recommendation={self.recommendation!r}, dim={dim}, warnings={len(self.warnings)})")

    @property
    def higher_is_better(self) -> bool:
        """The primary metric's declared direction (True for a failed result, which has no metrics)."""
        metric = self.metrics.get(self.primary_metric_name)
        return True if metric is None else metric.higher_is_better

    def _primary_aggregate_valid(self) -> bool:
        return self.primary_metric.rankable

    @property
    def stability_position(self) -> dict[str, Any] | None:
        """Where the ranked overlap score sits among this extractor's stability repeats (None without stability)."""
        return None if self.stability is None else self.stability.position_of(self.overlap.score)

    def to_dict(self) -> dict[str, Any]:
        """JSON form without ``runtime`` (the benchmark result stores timings separately).

        ``error``, ``resource_profile``, ``target_view`` and ``label_view`` are written only when set.
        """
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "runtime"
                and not (f.name in OPTIONAL_FIELDS and getattr(self, f.name) is None)}
        data["overlap"] = None if self.overlap is None else self.overlap.to_dict()
        data["metrics"] = {name: m.to_dict() for name, m in self.metrics.items()}
        data["separatix"] = None if self.separatix is None else self.separatix.to_dict()
        data["stability"] = None if self.stability is None else self.stability.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], runtime: Mapping[str, float] | None = None,
                  path: str = "$") -> "ExtractorResult":
        with reading(path):
            fields = dict(data)
            overlap, metrics = fields["overlap"], dict(fields["metrics"])
        with reading(f"{path}.overlap"):
            fields["overlap"] = None if overlap is None else OverlapScoreResult.from_dict(overlap)
        fields["metrics"] = {}
        for name, m in metrics.items():
            with reading(f"{path}.metrics.{name}"):
                fields["metrics"][name] = MetricResult.from_dict(m)
        if fields.get("separatix") is not None:
            with reading(f"{path}.separatix"):
                fields["separatix"] = SeparatixResult.from_dict(fields["separatix"])
        if fields.get("stability") is not None:
            with reading(f"{path}.stability"):
                fields["stability"] = StabilityResult.from_dict(fields["stability"])
        if fields.get("resource_profile") is not None:
            fields["resource_profile"] = ResourceProfile.load(fields["resource_profile"], f"{path}.resource_profile")
        fields["runtime"] = dict(runtime or {})
        with reading(path):
            return cls(**fields)


def compression_schema(footprint: Any) -> Any:
    """What reports read of a compression variant; ``footprint`` per family (flat, or per endpoint or branch)."""
    return nullable({"source?": ANY, "variant": ANY, "method": ANY, "requested_dim": ANY, "output_dim": ANY,
                     "applied": ANY, "explained_variance_ratio?": ANY, "footprint": footprint})


#: Bytes per row of one embedding before and after its compression variant.
FOOTPRINT_SCHEMA = {"raw_bytes_per_row": NUMBER, "evaluated_bytes_per_row": NUMBER}
#: Seconds per stage per extractor, in a result's ``timing`` section.
#: Seconds per stage of each result; a step a cache hit did not run reads ``not_measured_cache_hit``.
RUNTIME_SCHEMA = MapOf(MapOf(AnyOf((NUMBER, Choice((NOT_MEASURED_CACHE_HIT,))))))


def _rankable_score(metric: Mapping[str, Any]) -> float | None:
    """A serialized metric's score when it may be ranked (what ``primary_score`` holds), else None."""
    return metric["score"] if metric.get("aggregate_valid", True) and metric["score"] is not None else None


def _referee_views_are_result_views(data: Mapping[str, Any]) -> bool:
    """Each referee decision is about a view of the result (the report renders its verdicts from that view)."""
    views = {view_name(r.get("target_view"), r.get("label_view")) for r in data["extractor_results"]}
    return all(d["view"] in views for d in (data["metadata"].get("referee") or {}).get("views", []))


def _named_classes(names: str) -> Any:
    """Class (or label) names, one per counted class, in the dataset summary."""
    return both({names: list, "class_counts": dict},
                rule(lambda s: 0 < len(s[names]) == len(s["class_counts"]), f"{names} needs one name per class count"))


#: What reports read of a candidate's screening record (vertebrae.selection.screening).
_VERDICT = Choice(("best", "tied", "worse"))
#: Why a candidate left at a rung: its verdict was worse, or it was not among the rung's best 1/eta.
_LEFT_BECAUSE = Choice(("worse", "cut"))
_RUNG_SCHEMA = {"rung": int, "rows": int, "partial_score": NUMBER, "repeat_scores": [NUMBER],
                "verdict": {"verdict": _VERDICT, "mean_difference": NUMBER}, "continued": bool,
                "reason?": nullable(_LEFT_BECAUSE), "cache_status?": {"extract_rows": str, "rung_score": str}}
SCREENING_SCHEMA = both(
    Switch("status", {"finalist": {"rungs": [_RUNG_SCHEMA]},
                      "screened_out": {"rungs": [_RUNG_SCHEMA], "last_rung": int, "rows": int, "partial_score": NUMBER,
                                       "verdict": _VERDICT, "reason": _LEFT_BECAUSE}}),
    rule(lambda s: s["status"] == "finalist" or (s["rungs"] and not s["rungs"][-1]["continued"]),
         "a screened-out candidate's last rung must say it did not continue"))
#: ``metadata["screening"]``: the settings the report states, and what each rung kept.
SCREENING_RECORD_SCHEMA = {
    "config": {"repeats": INT, "subsample_fraction": NUMBER, "eta": NUMBER, "seed": INT}, "candidates": int,
    "finalists": [str], "rungs": [{"rung": int, "rows": int, "new_rows": int, "candidates": int, "survivors": int,
                                   "final": bool, "best?": nullable(str)}]}
#: ``metadata["reference_metrics"]``: the reference metrics that ran beside the primary (name and label, in order).
#: A later-round feature that adds a metadata record (a probe verdict, a referee policy) declares it beside these.
REFERENCE_METRICS_SCHEMA = nullable([{"name": str, "label": str}])

_EXTRACTOR_SCHEMA = both(
    {**CHAIN_SCHEMA, "extractor_type": str, "recipe": {"type?": str}, "overlap": nullable(overlap.SCHEMA),
     "metrics": MapOf(metric_result.SCHEMA), "primary_metric_name": str, "embedding": dict, "recommendation": str,
     "weakest_class": nullable({"display": ANY, "score": NUMBER}), "separatix?": nullable(separatix.SCHEMA),
     "stability?": nullable(stability.SCHEMA), "target_view?": nullable(str), "label_view?": nullable(str),
     "compression?": compression_schema(FOOTPRINT_SCHEMA), "screening?": nullable(SCREENING_SCHEMA)},
    rule(lambda r: r.get("error") is not None or (r.get("screening") or {}).get("status") == "screened_out"
         or (r["overlap"] is not None and r["primary_metric_name"] in r["metrics"]),
         "a result without an error needs its overlap scores and its primary metric among its metrics"),
    rule(lambda r: r.get("error") is not None or (r.get("screening") or {}).get("status") == "screened_out"
         or r["primary_score"] == _rankable_score(r["metrics"][r["primary_metric_name"]]),
         "primary_score must be the primary metric's score (None when its aggregate is invalid)"),
    rule(lambda r: (r.get("screening") or {}).get("status") != "screened_out" or r.get("primary_score") is None,
         "a screened-out candidate has no primary_score (its partial score is in screening.partial_score)"),
    rule(lambda r: r.get("stability") is None or r["overlap"] is not None, "a stability analysis needs overlap scores"))
#: One set of targets as summarized: the dataset's own, a target view's or a hierarchy level's.
_TARGETS_SCHEMA = Switch("target_type", {
    "single_label": both({"n_classes": ANY}, _named_classes("class_names")),
    "multi_label": both({"n_labels": ANY, "label_cardinality": ANY, "label_density": ANY,
                         "n_distinct_labelsets": ANY}, _named_classes("label_names")),
    "regression": {"target_names": [str], "constant_targets": [str],
                   "target_statistics": MapOf({"mean": ANY, "std": ANY, "min": ANY, "max": ANY})}})


def _result_views_are_summarized(data: Mapping[str, Any]) -> bool:
    """Each result's target view or hierarchy level is in the dataset summary (the report reads its classes there)."""
    s = data["dataset_summary"]
    return all((r.get("target_view") is None or r["target_view"] in s.get("target_views", {}))
               and (r.get("label_view") is None or r["label_view"] in s.get("label_levels", {}))
               for r in data["extractor_results"])


#: What reports, DataFrames and ``compare`` read of a serialized BenchmarkResult (checked on load).
SCHEMA = both({
    "dataset_summary": _TARGETS_SCHEMA,
    "extractor_results": [_EXTRACTOR_SCHEMA],
    "recommendations": [str],
    "metadata": {
        "settings": {"scoring_config": {"exclude_classes?": [{"label_key": str}], "random_state": ANY,
                                        "k?": AnyOf(([{"label_key": str, "k": ANY}], str, NUMBER, dict))},
                     "continuous_config?": dict},
        **ENVELOPE_SCHEMA, "primary_metric": str, "quality_tolerance?": Number(low=0.0),
        "input_files?": [{"role": ANY, "path": ANY, "sha256": ANY, "size_bytes": ANY}],
        "label_catalog?": nullable({"entries": [{"key": str, "display": ANY}]}), "referee?": referee.SCHEMA,
        "adaptive_repeats?": ADAPTIVE_SCHEMA, "screening?": SCREENING_RECORD_SCHEMA,
        "reference_metrics?": REFERENCE_METRICS_SCHEMA},
    "timing?": {**TIMING_ENVELOPE_SCHEMA, "runtime?": RUNTIME_SCHEMA, "separatix?": MapOf(list),
                "referee?": referee.TIMING_SCHEMA}},
    {"dataset_summary": {"identity": IDENTITY_SCHEMA, "n_samples": ANY, "groups?": nullable(
        {"n_groups": ANY, "group_size_min": ANY, "group_size_max": ANY}), "structure?": nullable(dict),
        "target_views?": MapOf(_TARGETS_SCHEMA), "label_levels?": MapOf(_TARGETS_SCHEMA)}},
    rule(lambda d: len({len(r["stability"]["repeat_scores"]["score"]) for r in d["extractor_results"]
                        if r.get("stability")}) <= 1, "every stability analysis of one result has the same repeats"),
    rule(_referee_views_are_result_views, "every view of metadata.referee.views must be a view of the results"),
    rule(_result_views_are_summarized, "every result's target_view (label_view) must be summarized under "
                                       "dataset_summary.target_views (label_levels)"))


@dataclasses.dataclass(eq=True)
class BenchmarkResult(ResultFamily):
    """The result of ``Benchmark.run()``: one ExtractorResult per extractor (or named output)."""

    RESULT_TYPE: ClassVar[str] = "benchmark"
    dataset_summary: dict[str, Any]
    extractor_results: list[ExtractorResult]
    recommendations: list[str]
    metadata: dict[str, Any]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)

    # -- ranking views ---------------------------------------------------------
    def views(self) -> list[str | None]:
        """The tasks in this result, in order: ``None`` (the dataset's targets) and/or ``target=…``/``level=…``."""
        return list(dict.fromkeys(r.view for r in self.extractor_results))

    def ranking(self, view: str | None = None) -> list[Ranked]:
        """``(rank, result)`` of valid results best-first by the primary metric, respecting its direction.

        Invalid aggregates are omitted; if every aggregate is invalid the ranking is
        empty (never filled with a fallback).  Ties follow the one tie rule (shared rank,
        input order; see ``result_protocol.rank_results``).  A view is a different task, so views
        are never ranked against each other: ``view=`` gives one view's ranking, and without
        it the per-view rankings (each starting at rank 1) follow each other in view order.
        """
        self._check_view(view)
        return [ranked for task in ([view] if view is not None else self.views())
                for ranked in rank_results(r for r in self.extractor_results if r.view == task)]

    def ranked_results(self, view: str | None = None) -> list[ExtractorResult]:
        """Valid results best-first by the primary metric (see :meth:`ranking`), optionally of one view."""
        return [ranked.result for ranked in self.ranking(view)]

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

    # -- agreement with the reference metrics ------------------------------------
    @property
    def reference_metrics(self) -> dict[str, str]:
        """``{metric name: label}`` of the reference metrics that ran beside the primary (e.g. ``--probe``)."""
        return {entry["name"]: entry["label"] for entry in self.metadata.get("reference_metrics") or []}

    def agreement(self, view: str | None = None) -> list[Agreement]:
        """How the primary ranking agrees with each reference metric's ranking, per view (see :mod:`vertebrae.selection.agreement`).

        One :class:`~vertebrae.selection.agreement.Agreement` per view and reference metric, in view order
        (``view=`` for one view); empty when no reference metric ran.  Derived from the results:
        valid results only, each metric in its own direction.
        """
        self._check_view(view)
        primary = self.metadata.get("primary_metric", "overlap")
        return [view_agreement([r for r in self.extractor_results if r.view == task], primary, name, label, task)
                for task in ([view] if view is not None else self.views())
                for name, label in self.reference_metrics.items()]

    def _agreement_columns(self, result: ExtractorResult) -> dict[str, Any]:
        """``agreement.<metric>.rank`` and ``.regret`` of one result: its rank by each reference metric within its
        view, and how far (in that metric's units) its reference score falls short of the view's best."""
        columns: dict[str, Any] = {}
        for name in self.reference_metrics:
            scores = reference_scores([r for r in self.extractor_results if r.view == result.view], name)
            known = result.name in scores
            columns[f"agreement.{name}.rank"] = competition_ranks(scores)[result.name] if known else None
            columns[f"agreement.{name}.regret"] = float(max(scores.values()) - scores[result.name]) if known else None
        return columns

    def referee_decisions(self) -> list[referee.RefereeDecision]:
        """The referee's decision per view (finalists, their referee scores, the pick and why); empty without one."""
        return [referee.RefereeDecision.from_dict(d) for d in (self.metadata.get("referee") or {}).get("views", [])]

    @property
    def ranking_available(self) -> bool:
        return bool(self.ranked_results())

    def quality_cohort(self, tolerance: float | None = None, view: str | None = None) -> list[ExtractorResult]:
        """Results within an absolute ``tolerance`` of the best primary score, in ranking order, within one view."""
        views = self.views()
        if view is None and len(views) > 1:
            raise ConfigError(f"this result scores several views {views}; a quality cohort is defined within "
                              "one view: pass view=...")
        return self._cohort(self.ranked_results(view), tolerance)

    def _default_tolerance(self) -> float:
        return self.metadata.get("quality_tolerance", 0.0)

    # -- paired verdicts ---------------------------------------------------------
    def _one_view(self, view: str | None, what: str) -> str | None:
        """``view``, or the only view when it is None (several views: ConfigError, they are separate tasks)."""
        views = self.views()
        if view is None:
            if len(views) > 1:
                raise ConfigError(f"this result scores several views {views}; {what} are defined within one view: "
                                  "pass view=...")
            return views[0] if views else None
        self._check_view(view)
        return view

    def _check_view(self, view: str | None) -> None:
        """Refuse a ``view=`` argument that names none of this result's views (None: every view, always valid)."""
        if view is not None and view not in self.views():
            raise ConfigError(f"view={view!r} names no view of this result; its views: {self.views()} "
                              "(None: the dataset's own targets)")

    def _paired_ranking(self, view: str | None) -> tuple[list[ExtractorResult], str | None]:
        """The ranked results of exactly ``view`` (None: the dataset's own targets) and why they cannot be paired
        (None when they can)."""
        ranked = [r.result for r in rank_results(r for r in self.extractor_results if r.view == view)]
        if not ranked:
            return ranked, "no candidate has a valid primary aggregate, so there is no ranking to judge"
        if ranked[0].primary_metric_name != OVERLAP_METRIC:
            return ranked, (f"the ranking is by {ranked[0].primary_metric_name!r}, but stability repeats re-score the "
                            "overlap metric, so paired verdicts would judge a different ranking (the Ranking "
                            "stability section describes the overlap ranking)")
        if len(ranked) == 1:
            return ranked, None
        missing = [r.name for r in ranked if r.stability is None]
        if len(missing) == len(ranked):
            return ranked, NEEDS_STABILITY
        if missing:
            return ranked, (f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no stability repeats; "
                            "every ranked candidate needs them (one StabilityConfig for the whole run)")
        best = ranked[0].stability
        plan = (best.config.fingerprint(), best.scoring_seeds, best.sampling_seeds)
        unpaired = [r.name for r in ranked if (r.stability.config.fingerprint(), r.stability.scoring_seeds,
                                               r.stability.sampling_seeds) != plan]
        if unpaired:
            return ranked, (f"{', '.join(unpaired)} {'was' if len(unpaired) == 1 else 'were'} repeated with other "
                            f"seeds or settings than {ranked[0].name}, so the repeats are not paired (run every "
                            "candidate with one StabilityConfig)")
        return ranked, None

    def paired_verdicts(self, view: str | None = None, metric: str | None = None) -> PairedVerdicts:
        """Every ranked candidate of one view against its best on the same repeats (docs/stability.md), or with
        ``metric=`` (e.g. ``"linear_probe"``) on the same folds of that probe metric (probe verdicts,
        :mod:`vertebrae.scoring.probe_verdicts`; docs/metrics.md).

        Derived from the stored repeat or fold scores (nothing extra is written to the JSON).  When the
        verdicts cannot be given, ``available`` is False and ``reason`` says why and what to do
        (without stability: how to turn it on).  ``view=None`` means the only view.  A probe metric
        that ran only as the referee is judged over the candidates it judged.
        """
        if metric is not None and metric != OVERLAP_METRIC:
            return self._probe_verdicts(view, metric)
        task = self._one_view(view, "paired verdicts")
        ranked, reason = self._paired_ranking(task)
        if reason is not None:
            return PairedVerdicts(view=task, available=False, reason=reason)
        stability = ranked[0].stability
        if len(ranked) == 1:
            n = None if stability is None else len(stability.repeat_scores["score"])
            return PairedVerdicts(view=task, available=True, n_repeats=n,
                                  against_best=(best_itself(ranked[0].name, n or 0),))
        scores = [(r.name, r.stability.repeat_scores["score"]) for r in ranked]
        rule = {"higher_is_better": ranked[0].higher_is_better, "interval_level": stability.config.interval_level}
        return PairedVerdicts(view=task, available=True, interval_level=rule["interval_level"],
                              n_repeats=len(scores[0][1]), against_best=tuple(against_best(scores, **rule)),
                              adjacent=tuple(adjacent(scores, **rule)))

    def _probe_verdicts(self, view: str | None, metric: str) -> PairedVerdicts:
        """Probe verdicts of ``metric`` in one view: over every ranked candidate that scored it, else (a metric that
        ran only as the referee) over the referee's judged candidates."""
        task = self._one_view(view, "paired verdicts")
        if any(metric in r.metrics for r in self.extractor_results):
            ranked = [r for r in self.ranked_results(task) if metric in r.metrics]
            return probe_verdicts(task, [(r.name, r.metrics[metric]) for r in ranked], metric)
        if (self.metadata.get("referee") or {}).get("metric") == metric:
            return self.referee_verdicts(task)
        known = sorted({name for r in self.extractor_results for name in r.metrics}
                       | {(self.metadata.get("referee") or {}).get("metric")} - {None})
        raise ConfigError(f"no metric {metric!r} in this result, so it has no probe verdicts; its metrics: {known} "
                          "(add the probe with metrics=[LinearProbeMetric()] or vertebrae run --probe)")

    def referee_verdicts(self, view: str | None = None) -> PairedVerdicts:
        """Probe verdicts over the candidates the referee judged in one view (its pick and its tied set).

        ``available`` is False when no referee ran or it judged fewer than two candidates' folds.
        """
        task = self._one_view(view, "referee verdicts")
        record = self.metadata.get("referee") or {}
        decision = next((d for d in record.get("views", []) if d["view"] == task), None)
        if decision is None or not decision["results"]:
            why = "no referee ran" if decision is None else "the referee was not needed (one finalist)"
            return PairedVerdicts(view=task, available=False, reason=why)
        return probe_verdicts(task, [(name, MetricResult.from_dict(decision["results"][name]))
                                     for name in decision["finalists"] if name in decision["results"]],
                              record["metric"])

    def _available_verdicts(self, view: str | None, metric: str | None = None) -> PairedVerdicts:
        verdicts = self.paired_verdicts(view, metric)
        if not verdicts.available:
            where = "" if verdicts.view is None else f" for view {verdicts.view!r}"
            of = "" if metric is None else f" of metric {metric!r}"
            raise ConfigError(f"no paired verdicts{of}{where}: {verdicts.reason}")
        return verdicts

    def tied_with_best(self, view: str | None = None, metric: str | None = None) -> list[ExtractorResult]:
        """The best of one view and every candidate statistically tied with it (paired verdict ``tied``).

        Valid results only, direction-aware.  By default the primary ranking's, on the stability repeats;
        ``metric="linear_probe"`` gives that probe metric's best and its tied set on the same folds
        (probe verdicts, in the probe's order).  Raises ConfigError saying why (and how to turn
        stability on) when there are no such verdicts; compare :meth:`quality_cohort`, which uses a
        fixed tolerance instead of the repeats.
        """
        verdicts = self._available_verdicts(view, metric)
        if metric is not None and metric != OVERLAP_METRIC:
            return [self[name] for name in verdicts.tied_names]
        tied = set(verdicts.tied_names)
        return [r for r in self._paired_ranking(verdicts.view)[0] if r.name in tied]

    def rank_verdicts(self, view: str | None = None, metric: str | None = None) -> list[PairedComparison]:
        """Each rank of one view against the rank above it on the same repeats (or, with ``metric=``, the same
        folds of that probe metric, in its order); ConfigError when unavailable."""
        return list(self._available_verdicts(view, metric).adjacent)

    def _verdict_columns(self, result: ExtractorResult, rank: int | None) -> dict[str, Any]:
        """The row's paired verdict against the best of its view; all None when unranked or unavailable."""
        names = VERDICT_COLUMNS
        ranked, reason = self._paired_ranking(result.view) if rank is not None else ([], "unranked")
        if reason is not None:
            return dict.fromkeys(names)
        n = 0 if result.stability is None else len(result.stability.repeat_scores["score"])
        if result is ranked[0]:
            c = best_itself(result.name, n)
        else:
            c = against_best([(ranked[0].name, ranked[0].stability.repeat_scores["score"]),
                              (result.name, result.stability.repeat_scores["score"])],
                             higher_is_better=result.higher_is_better,
                             interval_level=ranked[0].stability.config.interval_level)[1]
        values = [c.verdict, c.mean_difference, c.difference_low, c.difference_high, c.share_better]
        return dict(zip(names, values))

    def __repr__(self) -> str:
        head = (f"BenchmarkResult(dataset={self.dataset_summary.get('name')!r}, "
                f"target_type={self.dataset_summary.get('target_type')!r}, "
                f"{len(self.extractor_results)} extractor result(s), ranked by "
                f"{self.metadata.get('primary_metric', 'overlap')!r})")
        return "\n".join([head, *self._top_lines(lambda r: f" ({r.recommendation})")])

    # -- tabular ---------------------------------------------------------------
    def _row(self, result: ExtractorResult, rank: int | None) -> dict[str, Any]:
        """The canonical row (:func:`result_row`) plus the structure columns of structured unit outputs."""
        structure = self.dataset_summary.get("structure", {})
        extra = ({k: structure.get(k) for k in ("task_family", "alignment_mode", "alignment_recipe")}
                 if structure.get("task_family") is not None else {})
        return {**result_row(result, rank), **self._verdict_columns(result, rank), **extra,
                **self._agreement_columns(result), **self._screening_columns(result)}

    # -- screening ----------------------------------------------------------------
    def _screening_columns(self, result: ExtractorResult) -> dict[str, Any]:
        """``screening_status`` and the last rung's ``screening_rung``/``_rows``/``_partial_score``/``_verdict``
        (only in a screened result)."""
        if "screening" not in self.metadata:
            return {}
        rungs = (result.screening or {}).get("rungs") or [{}]
        last = rungs[-1]
        return {"screening_status": (result.screening or {}).get("status"), "screening_rung": last.get("rung"),
                "screening_rows": last.get("rows"), "screening_partial_score": last.get("partial_score"),
                "screening_verdict": (last.get("verdict") or {}).get("verdict")}

    def screening_rows(self) -> list[dict[str, Any]]:
        """One row per candidate per screening rung it was scored on (empty without screening)."""
        return [{"extractor": r.name, "status": r.screening["status"], "rung": entry["rung"], "rows": entry["rows"],
                 "partial_score": entry["partial_score"], "verdict": entry["verdict"]["verdict"],
                 "mean_difference": entry["verdict"]["mean_difference"], "continued": entry["continued"],
                 "reason": entry.get("reason")}
                for r in self.extractor_results if r.screening for entry in r.screening["rungs"]]

    def screening_table(self) -> Any:
        """The rung-by-rung screening table (:meth:`screening_rows`) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.screening_rows(), columns=["extractor", "status", "rung", "rows", "partial_score",
                                                            "verdict", "mean_difference", "continued", "reason"])

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
            **({"agreement": [a.to_dict() for a in self.agreement()]} if self.reference_metrics else {}),
            "metadata": self.metadata,
            "timing": {**self.timing, "runtime": {r.name: dict(r.runtime) for r in self.extractor_results},
                       "separatix": diagnostic_timings},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchmarkResult":
        check_header(data, cls.RESULT_TYPE, (SCHEMA_VERSION,))
        check(data, SCHEMA)  # whatever loads renders (docs/results.md)
        with reading("$.timing"):
            timing = dict(data.get("timing", {}))
            runtime = dict(timing.pop("runtime", {}))
            diagnostic_timings = dict(timing.pop("separatix", {}))
        with reading("$"):
            items = list(data["extractor_results"])
        results = []
        for i, item in enumerate(items):
            path = f"$.extractor_results[{i}]"
            with reading(path):
                name = item["name"]
                if item.get("separatix") is not None and name in diagnostic_timings:
                    item = {**item, "separatix": copy.deepcopy(item["separatix"])}
                    put_timings(item["separatix"], diagnostic_timings[name])
            results.append(ExtractorResult.from_dict(item, runtime.get(name), path))
        with reading("$"):
            return cls(dict(data["dataset_summary"]), results, list(data["recommendations"]), dict(data["metadata"]),
                       timing)


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
        **probe_context_columns(separatix),
        "embedding_dim": result.embedding.get("embedding_dim"),
        "embedding_dtype": result.embedding.get("dtype"),
        "embedding_sparse": result.embedding.get("sparse"),
        "embedding_nnz": result.embedding.get("nnz"),
        "warnings": len(result.warnings),
        **_stability_columns(result.stability, None if result.overlap is None else result.overlap.score),
        **compression_columns(result.compression),
    }
    for name, metric in result.metrics.items():
        row[f"metric.{name}"] = metric.score
    for stage, seconds in result.runtime.items():
        row[f"runtime.{stage}"] = seconds
    if result.resource_profile is not None:
        from ...extractors.profiling import resource_columns

        row.update(resource_columns(result.resource_profile))
    return row


def probe_context_columns(separatix: SeparatixResult | None) -> dict[str, Any]:
    """What spec 003 puts beside probe_metric/probe_score in a row: the probes' evaluation mode, sampling, grouping
    counts and skip reasons, from the stored ``probe_summary`` and ``reason``; all None without a diagnostic (a
    gated or skipped one has only ``separatix_skip_reason``).  The full evidence stays in the JSON."""
    probes = separatix.probe_summary if separatix is not None else {}
    evaluation, grouping = probes.get("evaluation") or {}, probes.get("grouping") or {}
    sampling = probes.get("sampling") or {}
    skipped = "; ".join(f"{name}: {why}" for name, why in (probes.get("skip_reasons") or {}).items())
    return {"probe_evaluation_mode": evaluation.get("evaluation_mode"),
            "probe_sampled": sampling.get("sampled"), "probe_rows_used": sampling.get("n_used"),
            "probe_group_count": grouping.get("group_count"),
            "probe_group_supported_count": grouping.get("supported_count"),
            "probe_group_skipped_count": grouping.get("skipped_count"),
            "probe_skip_reasons": skipped or None,
            "separatix_skip_reason": None if separatix is None else separatix.reason}


#: Compression facts flattened into rows as ``compression_<field>`` (footprints under their own names);
#: ``compression_not_applied_reason`` follows ``compression_applied``.
COMPRESSION_FIELDS = ("variant", "method", "requested_dim", "output_dim", "applied", "explained_variance_ratio")
FOOTPRINT_FIELDS = ("raw_bytes_per_row", "evaluated_bytes_per_row", "raw_bytes", "evaluated_bytes")


def compression_columns(compression: dict[str, Any] | None, endpoint: str | None = None) -> dict[str, Any]:
    """The compression row columns; all None when the benchmark has no compression variants.

    Retrieval and zero-shot footprints are per endpoint or branch: ``endpoint`` picks the one
    shown (the side the variant is fitted on: ``gallery``, ``samples``).
    """
    compression = compression or {}
    footprint = compression.get("footprint", {})
    if endpoint is not None and footprint:
        footprint = footprint[endpoint]
    columns: dict[str, Any] = {}
    for name in COMPRESSION_FIELDS:
        columns[f"compression_{name}"] = compression.get(name)
        if name == "applied":  # why not, right beside it
            columns["compression_not_applied_reason"] = not_applied_reason(compression)
    return {**columns, **{name: footprint.get(name) for name in FOOTPRINT_FIELDS}}


#: StabilitySummary fields flattened into rows as ``stability_<field>`` (primary overlap score).
STABILITY_SUMMARY_FIELDS = ("mean", "std", "min", "max", "interval_low", "interval_high", "interval_width")


def _stability_columns(stability: StabilityResult | None, score: float | None) -> dict[str, Any]:
    """The stability row columns (``score`` is the ranked overlap score); all None when no stability analysis ran."""
    names = ["mode", "repeats", "interval_level", *STABILITY_SUMMARY_FIELDS, "score_percentile", "score_position"]
    if stability is None:
        return {f"stability_{name}": None for name in names}
    config, summary = stability.config, stability.summary
    position = stability.position_of(score)
    values = [config.mode, len(stability.repeat_scores["score"]), config.interval_level,
              *(getattr(summary, field) for field in STABILITY_SUMMARY_FIELDS),
              position["percentile"], position["relative_to_interval"]]
    return {f"stability_{name}": value for name, value in zip(names, values)}

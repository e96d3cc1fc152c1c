"""RetrievalBenchmarkResult: the complete protocol plus one entry per extractor.

The JSON form is strict and deterministic: the same inputs give byte-identical
JSON except the top-level ``timing`` section (start time, host, per-stage
runtimes).  Markdown and DataFrame views are built from the serialized dict, so an
archived JSON file regenerates the same report.  Results only combine when their
configuration, protocol fingerprint and dataset identity are identical.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ...errors import InputTypeError, InputValidationError
from ...extractors.profiling import ResourceProfile, endpoint_resource_columns, load_endpoint_profiles
from ...execution.plan import artifact_key
from ..result_protocol import (CHAIN_SCHEMA, IDENTITY_SCHEMA, RECORDED_ENVELOPE_SCHEMA, TIMING_ENVELOPE_SCHEMA,
                               ChainResult, check_header, current_envelope, family_document, reading)
from ..._base.result_schema import ANY, NUMBER, MapOf, Number, both, check, nullable, rule
from ..labeled.results import (FOOTPRINT_SCHEMA, RUNTIME_SCHEMA, ResultFamily, compression_columns,
                               compression_schema, deprecated_alias)
from .config import CUTOFF_METRICS, DIRECTIONS, FULL_RANKING_METRICS, RetrievalConfig

#: Schema 4 carries the run envelope (``metadata``: run key, versions, plan, cache; ``timing.started_at``/``host``;
#: docs/results.md), which schema 3 kept partly in ``protocol.cache`` and ``timing.runs``. Schema 3 follows the
#: result protocol: each entry's endpoint metadata is ``embedding`` and its compression variant ``compression``
#: (schema 2 kept both in ``embeddings``); schema 2 names entries ``extractor_results`` with ``name``. Schema 1
#: files (``entries`` / ``extractor``) and schemas 2 and 3 still load.
SCHEMA_VERSION = 4
READABLE_SCHEMAS = (1, 2, 3, 4)
RESULT_TYPE = "retrieval"


@dataclasses.dataclass
class DirectionResult:
    """Mean metrics of one ranking direction (forward: query -> gallery; reverse: gallery -> query).

    ``block_plan`` records how the memory budget was split (rows per block etc.).
    """

    n_queries: int
    metrics: dict[str, float]
    diagnostics: dict[str, Any]
    block_plan: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: RetrievalEntry fields written to JSON only when they are set.
OPTIONAL_FIELDS = frozenset({"error", "resource_profile", "compression"})


@dataclasses.dataclass
class RetrievalEntry(ChainResult):
    """Everything measured for one extractor; ``runtime`` is stored in the result's timing section.

    ``primary_metric_name`` is filled from the protocol by the owning result;
    ``artifact_keys`` maps each stage of the entry's chain to its artifact key.
    """

    name: str
    recipe: dict[str, Any]
    primary_score: float | None
    forward: DirectionResult | None
    reverse: DirectionResult | None
    #: Endpoint metadata: ``{"query": ..., "gallery": ...}`` (empty for a failed entry).
    embedding: dict[str, dict[str, Any]]
    warnings: list[str]
    #: Stage name -> artifact key of every job behind this entry.
    artifact_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Why this entry has no scores (``on_error="record"``): stage, type, message, extractor.
    error: dict[str, Any] | None = None
    primary_metric_name: str = ""
    #: ``{"query": profile, "gallery": profile}`` when resource profiling ran (typed, docs/profiling.md); else None.
    resource_profile: dict[str, ResourceProfile] | None = None
    #: The paired compression variant (method, dims, applied, query and gallery footprints); None without variants.
    compression: dict[str, Any] | None = None

    extractor = deprecated_alias("extractor", "name")
    embeddings = deprecated_alias("embeddings", "embedding")

    @classmethod
    def failed(cls, name: str, recipe: dict[str, Any], error: dict[str, Any]) -> "RetrievalEntry":
        """An unranked entry standing for an extractor whose chain failed."""
        return cls(name, recipe, None, None, None, {},
                   [f"failed in the {error['stage']} stage: {error['type']}: {error['message']}"], error=error)

    def direction(self, name: str) -> DirectionResult | None:
        return self.forward if name == "forward" else self.reverse

    def __repr__(self) -> str:
        dims = "/".join(str(self.embedding.get(side, {}).get("embedding_dim")) for side in ("query", "gallery"))
        score = "failed" if self.primary_score is None else f"{self.primary_score:.4f}"
        return (f"RetrievalEntry(name={self.name!r}, {self.primary_metric_name or 'primary_score'}={score}, "
                f"query/gallery dim={dims}, warnings={len(self.warnings)})")

    def to_dict(self) -> dict[str, Any]:
        """JSON form without ``runtime`` (stored in the result's timing section); ``error``, ``resource_profile``
        and ``compression`` only when set.

        ``primary_metric_name`` is the protocol's and is not repeated per entry.
        """
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("runtime", "primary_metric_name")
                and not (f.name in OPTIONAL_FIELDS and getattr(self, f.name) is None)}
        data["forward"] = None if self.forward is None else self.forward.to_dict()
        data["reverse"] = None if self.reverse is None else self.reverse.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], runtime: Mapping[str, float] | None,
                  path: str = "$") -> "RetrievalEntry":
        with reading(path):
            fields = current_entry(data)
        for side in DIRECTIONS:
            with reading(f"{path}.{side}"):
                fields[side] = None if fields[side] is None else DirectionResult(**fields[side])
        fields["resource_profile"] = load_endpoint_profiles(fields.get("resource_profile"), f"{path}.resource_profile")
        with reading(path):
            return cls(**fields, runtime=dict(runtime or {}))


def current_entry(data: Mapping[str, Any]) -> dict[str, Any]:
    """An entry of any readable schema in the schema-3 form: ``name``, ``embedding`` and ``compression``."""
    fields = dict(data)
    if "extractor" in fields and "name" not in fields:  # schema 1
        fields["name"] = fields.pop("extractor")
    if "embeddings" in fields and "embedding" not in fields:  # schemas 1 and 2: compression inside
        fields["embedding"] = dict(fields.pop("embeddings"))
        if "compression" in fields["embedding"]:
            fields["compression"] = fields["embedding"].pop("compression")
    return fields


_ENDPOINT_SCHEMA = {"embedding_dim": ANY, "dtype": ANY, "sparse": ANY}
_DIRECTION_SCHEMA = {"n_queries": ANY, "metrics": MapOf(NUMBER), "block_plan": {"rows_per_block": ANY},
                     "diagnostics": {"mean_positive_similarity": ANY, "mean_negative_similarity": ANY,
                                     "similarity_margin": ANY}}
_ENTRY_SCHEMA = both(
    {**CHAIN_SCHEMA, "forward": nullable(_DIRECTION_SCHEMA), "reverse": nullable(_DIRECTION_SCHEMA),
     "embedding": MapOf(_ENDPOINT_SCHEMA), "compression?": compression_schema(MapOf(FOOTPRINT_SCHEMA))},
    rule(lambda e: e.get("error") is not None
         or (e["forward"] is not None and {"query", "gallery"} <= set(e["embedding"])),
         "an entry without an error needs its forward metrics and its query and gallery embeddings"))


def _metrics_complete(data: Mapping[str, Any]) -> bool:
    """Every scored entry has every metric the reports show, at every cutoff, in the same directions."""
    cutoffs = data["protocol"]["config"]["cutoffs"]
    names = {f"{m}@{k}" for m in CUTOFF_METRICS for k in cutoffs} | set(FULL_RANKING_METRICS)
    scored = [e for e in data["extractor_results"] if not e.get("error")]
    return (len({e["reverse"] is None for e in scored}) <= 1
            and all(names <= set(e[d]["metrics"]) for e in scored for d in DIRECTIONS if e[d] is not None))


def _primary_scores_are_means(data: Mapping[str, Any], path: str) -> None:
    """Every scored entry's primary score is the mean of its directions' primary metric, as ``assemble`` writes
    it (the ranking figure draws it: a score no run could give, 1e308, broke the axis)."""
    primary = data["protocol"]["config"]["primary_metric"]

    def is_mean(entry: Mapping[str, Any]) -> bool:
        scores = [entry[d]["metrics"].get(primary) for d in DIRECTIONS if entry[d] is not None]
        return entry.get("error") is not None or (None not in scores
                                                  and entry["primary_score"] == float(np.mean(scores)))

    mean = rule(is_mean, f"primary_score must be the mean of its directions' {primary!r}")
    for i, entry in enumerate(data["extractor_results"]):
        check(entry, mean, f"{path}.extractor_results[{i}]")


#: What reports, DataFrames and ``compare`` read of a serialized RetrievalBenchmarkResult (checked on load).
SCHEMA = both({
    "protocol": {"config": {"primary_metric": str, "cutoffs": [Number(integer=True, low=1)], "similarity": ANY,
                            "bidirectional": ANY, "memory_budget_bytes": ANY, "block_size": ANY,
                            "thread_limit": ANY, "quality_tolerance?": Number(low=0.0)},
                 "identity": IDENTITY_SCHEMA, "fingerprint": ANY, "n_queries": ANY, "n_gallery": ANY,
                 "n_relevant_pairs": ANY, "n_excluded_pairs": ANY, "tie_rule": ANY,
                 "relevant_per_query": {"min": ANY, "mean": NUMBER, "max": ANY},
                 "grades": {"min": NUMBER, "max": NUMBER, "distinct": ANY},
                 "reverse": nullable({"n_queries": ANY, "n_skipped": ANY})},
    "extractor_results": [_ENTRY_SCHEMA], "warnings": [str],
    "metadata": RECORDED_ENVELOPE_SCHEMA, "timing": {**TIMING_ENVELOPE_SCHEMA, "runtime": RUNTIME_SCHEMA}},
    rule(_metrics_complete, "every scored entry needs every metric at every cutoff, in the same directions"),
    _primary_scores_are_means)


@dataclasses.dataclass
class RetrievalBenchmarkResult(ResultFamily):
    """The result of ``RetrievalBenchmark.run()``: the complete protocol and one entry per extractor."""

    RESULT_TYPE: ClassVar[str] = RESULT_TYPE
    protocol: dict[str, Any]
    extractor_results: list[RetrievalEntry]
    warnings: list[str]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The run envelope: run key, versions, plan and (with a cache) the cache record.
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    entries = deprecated_alias("entries", "extractor_results")

    def __post_init__(self) -> None:
        primary = self.protocol.get("config", {}).get("primary_metric", "")
        for entry in self.extractor_results:
            entry.primary_metric_name = primary

    @property
    def config(self) -> RetrievalConfig:
        return RetrievalConfig.from_dict(self.protocol["config"])

    def _default_tolerance(self) -> float:
        """The run's ``RetrievalConfig.quality_tolerance``; 0 for files written before it existed (their cohort)."""
        return self.protocol["config"].get("quality_tolerance", 0.0)

    def __repr__(self) -> str:
        head = (f"RetrievalBenchmarkResult(dataset={self.protocol['identity'].get('dataset_id')!r}, "
                f"{self.protocol.get('n_queries')} queries x {self.protocol.get('n_gallery')} gallery items, "
                f"{len(self.ranking())} extractor result(s), ranked by {self.protocol['config']['primary_metric']!r})")
        return "\n".join([head, *self._top_lines()])

    # -- tables ----------------------------------------------------------------
    def _row(self, entry: RetrievalEntry, rank: int | None) -> dict[str, Any]:
        return result_row(entry, rank, self.protocol["config"]["primary_metric"])

    # -- combining ---------------------------------------------------------------
    @classmethod
    def combine(cls, results: Sequence["RetrievalBenchmarkResult"]) -> "RetrievalBenchmarkResult":
        """One result from several runs of the same protocol (e.g. extractors evaluated separately).

        Its envelope: the runs' plans in order (a job shared by two runs once), the run key of that plan, the
        common versions and cache record (refused when the versions differ; no cache record when the caches
        differ), and each run's start, host and extractors in ``timing.runs``.
        """
        if isinstance(results, RetrievalBenchmarkResult) or not isinstance(results, Sequence) or not results:
            raise InputTypeError("RetrievalBenchmarkResult.combine expects a non-empty list of results")
        for i, result in enumerate(results):
            if not isinstance(result, RetrievalBenchmarkResult):
                raise InputTypeError(f"results[{i}] is a {type(result).__name__}, not a RetrievalBenchmarkResult")
        first = results[0].protocol
        checks = (("config", "retrieval configuration"), ("identity", "dataset identity"),
                  ("fingerprint", "protocol fingerprint (ids, relevance, exclusions)"),
                  ("versions", "set of package versions"))
        for i, result in enumerate(results[1:], start=1):
            for key, what in checks:
                ours, theirs = ((r.metadata if key == "versions" else r.protocol).get(key)
                                for r in (results[0], result))
                if theirs != ours:
                    difference = _difference(ours, theirs)
                    raise InputValidationError(
                        f"results[{i}] has a different {what} than results[0] ({difference}); only results of the "
                        "identical protocol can be combined — rerun with the same dataset, RetrievalConfig and "
                        "packages")
        entries = [entry for result in results for entry in result.extractor_results]
        seen: dict[str, int] = {}
        for i, result in enumerate(results):
            for entry in result.extractor_results:
                if entry.name in seen:
                    raise InputValidationError(f"extractor {entry.name!r} appears in "
                                               f"results[{seen[entry.name]}] and results[{i}]; each extractor "
                                               "may appear once in a combined result")
                seen[entry.name] = i
        warnings = list(dict.fromkeys(w for result in results for w in result.warnings))
        return cls(dict(first), entries, warnings, {"runs": [run for result in results for run in _runs(result)]},
                   _combined_envelope(results))

    # -- persistence -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return family_document(RESULT_TYPE, SCHEMA_VERSION, self.protocol, self.extractor_results, self.warnings,
                               self.metadata, self.timing)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RetrievalBenchmarkResult":
        check_header(data, RESULT_TYPE, READABLE_SCHEMAS)
        if data["schema_version"] < 2:  # schema 1 names the entries ``entries``
            with reading("$"):
                data = {**{k: v for k, v in data.items() if k != "entries"}, "extractor_results": data["entries"]}
        with reading("$.extractor_results"):
            data = {**data, "extractor_results": [current_entry(item) for item in data["extractor_results"]]}
        data = current_envelope(data)  # schemas 1-3: the run facts they recorded, in the envelope's places
        check(data, SCHEMA)  # whatever loads renders (docs/results.md)
        timing = dict(data["timing"])
        runtime = dict(timing.pop("runtime"))
        entries = [RetrievalEntry.from_dict(item, runtime.get(item["name"]), f"$.extractor_results[{i}]")
                   for i, item in enumerate(data["extractor_results"])]
        with reading("$"):
            return cls(dict(data["protocol"]), entries, list(data["warnings"]), timing, dict(data["metadata"]))


def _runs(result: RetrievalBenchmarkResult) -> list[dict[str, Any]]:
    """When, where and for which extractors ``result`` ran: its ``timing.runs``, or its own run's facts."""
    if "runs" in result.timing:
        return list(result.timing["runs"])
    return [{**{key: result.timing[key] for key in ("started_at", "host") if key in result.timing},
             "extractors": [e.name for e in result.extractor_results]}]


def _combined_envelope(results: Sequence[RetrievalBenchmarkResult]) -> dict[str, Any]:
    """The envelope of a combined result (see :meth:`RetrievalBenchmarkResult.combine`)."""
    plan: dict[str, Any] = {}
    for job in (job for result in results for job in result.metadata.get("plan", [])):
        plan.setdefault(job["key"], job)
    caches = [result.metadata.get("cache") for result in results]
    return {"run_key": artifact_key("run", list(plan)), "versions": dict(results[0].metadata.get("versions", {})),
            "plan": list(plan.values()),
            **({"cache": caches[0]} if caches[0] is not None and caches.count(caches[0]) == len(caches) else {})}


def result_row(entry: RetrievalEntry, rank: int | None, primary_metric: str) -> dict[str, Any]:
    """The canonical flat row of one entry; the DataFrame and the Markdown ranking use it."""
    row: dict[str, Any] = {"rank": rank, "extractor": entry.name, "primary_metric": primary_metric,
                           "primary_score": entry.primary_score, "aggregate_valid": entry.aggregate_valid}
    for name in DIRECTIONS:
        direction = entry.direction(name)
        if direction is not None:
            row[f"{name}.n_queries"] = direction.n_queries
            row.update({f"{name}.{metric}": value for metric, value in direction.metrics.items()})
            row.update({f"{name}.{key}": value for key, value in direction.diagnostics.items()})
    for side in ("query", "gallery"):
        meta = entry.embedding.get(side, {})  # empty for a failed entry
        row[f"{side}_embedding_dim"] = meta.get("embedding_dim")
        row[f"{side}_embedding_dtype"] = meta.get("dtype")
        row[f"{side}_embedding_sparse"] = meta.get("sparse")
    row["warnings"] = len(entry.warnings)
    row.update(compression_columns(entry.compression, "gallery"))  # the variant is fitted on the gallery
    row.update({f"runtime.{stage}": seconds for stage, seconds in entry.runtime.items()})
    row.update(endpoint_resource_columns(entry.resource_profile))
    return row


def _difference(expected: Any, found: Any) -> str:
    if isinstance(expected, Mapping) and isinstance(found, Mapping):
        keys = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
        return "; ".join(f"{k}: {expected.get(k)!r} vs {found.get(k)!r}" for k in keys)
    return f"{str(expected)[:16]}... vs {str(found)[:16]}..."

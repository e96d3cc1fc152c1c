"""ZeroShotBenchmarkResult: the complete protocol plus one result per encoder.

Field names follow :class:`~vertebrae.families.labeled.results.BenchmarkResult` (``extractor_results``,
``name``, ``primary_metric_name``, ``primary_score``, ``artifact_keys``,
``ranked_results()``, ``quality_cohort()``, ``to_dataframe()``).  The ranking uses
the configured zero-shot metric only; OverlapIndex of the sample embeddings is
kept beside it as context and never combined with it.  JSON is strict and
deterministic apart from the top-level ``timing`` section; Markdown and DataFrame
views are built from the serialized dict, so archived JSON regenerates the report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from ...extractors.profiling import ResourceProfile, endpoint_resource_columns, load_endpoint_profiles
from ..result_protocol import (CHAIN_SCHEMA, IDENTITY_SCHEMA, RECORDED_ENVELOPE_SCHEMA, TIMING_ENVELOPE_SCHEMA,
                               ChainResult, check_header, current_envelope, family_document, reading)
from ..._base.result_schema import ANY, MapOf, Number, both, check, fail, nullable, rule
from ..labeled.results import (FOOTPRINT_SCHEMA, RUNTIME_SCHEMA, ResultFamily, compression_columns,
                               compression_schema, deprecated_alias)
from ...scoring import overlap
from ...scoring.overlap import OverlapScoreResult
from .config import ZeroShotConfig
from .metrics import REPORTED_MARGINS

#: Schema 2 carries the run envelope (``metadata``: run key, versions, plan, cache; docs/results.md), which schema 1
#: kept partly in ``protocol.run_key`` and ``protocol.cache``; schema 1 files still load.
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
RESULT_TYPE = "zero_shot"


#: ZeroShotExtractorResult fields written to JSON only when they are set.
OPTIONAL_FIELDS = frozenset({"error", "compression", "resource_profile"})


@dataclasses.dataclass
class ZeroShotExtractorResult(ChainResult):
    """Everything measured for one encoder; ``runtime`` is stored in the result's timing section.

    ``per_class`` maps each semantic class key to precision, recall, f1, support and
    predicted (count); ``confusion_matrix`` rows are true classes and columns
    predicted classes, both in label catalog order.
    """

    name: str
    extractor_type: str
    recipe: dict[str, Any]
    primary_metric_name: str
    primary_score: float | None
    scores: dict[str, float]
    top_k_accuracies: dict[str, float]
    per_class: dict[str, dict[str, Any]]
    confusion_matrix: list[list[int]]
    margins: dict[str, Any]
    #: OverlapIndex of the sample embeddings (context; never part of the ranking).
    overlap: OverlapScoreResult | None
    #: Branch metadata: ``samples`` and ``prompts`` (shape, dtype, modality, branch, source, cache facts).
    embedding: dict[str, dict[str, Any]]
    prototypes: dict[str, Any]
    warnings: list[str]
    artifact_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Why this result has no scores (``on_error="record"``): stage, type, message, extractor.
    error: dict[str, Any] | None = None
    #: The compression variant this result evaluates (method, requested/output dims, applied, footprints of both
    #: branches, ``fitted_on``, ``source``); None without compression variants.
    compression: dict[str, Any] | None = None
    #: ``{"samples": profile, "prompts": profile}`` when resource profiling ran (typed, docs/profiling.md); else None.
    resource_profile: dict[str, ResourceProfile] | None = None

    @classmethod
    def failed(cls, name: str, recipe: dict[str, Any], primary_metric_name: str, error: dict[str, Any],
               artifact_keys: dict[str, str]) -> "ZeroShotExtractorResult":
        """An unranked result standing for an encoder whose chain failed."""
        return cls(name, recipe.get("type", "encoder"), recipe, primary_metric_name, None, {}, {}, {}, [], {}, None,
                   {}, {}, [f"failed in the {error['stage']} stage: {error['type']}: {error['message']}"],
                   artifact_keys=artifact_keys, error=error)

    valid = deprecated_alias("valid", "aggregate_valid")

    def to_dict(self) -> dict[str, Any]:
        """JSON form without ``runtime`` (stored in the result's timing section); ``error``, ``compression`` and
        ``resource_profile`` only when set."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "runtime" and not (f.name in OPTIONAL_FIELDS and getattr(self, f.name) is None)}
        data["overlap"] = None if self.overlap is None else self.overlap.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], runtime: Mapping[str, float] | None = None,
                  path: str = "$") -> "ZeroShotExtractorResult":
        with reading(path):
            fields = dict(data)
            overlap = fields["overlap"]
        with reading(f"{path}.overlap"):
            fields["overlap"] = None if overlap is None else OverlapScoreResult.from_dict(overlap)
        fields["resource_profile"] = load_endpoint_profiles(fields.get("resource_profile"), f"{path}.resource_profile")
        with reading(path):
            return cls(**fields, runtime=dict(runtime or {}))


_BRANCH_SCHEMA = {"embedding_dim": ANY, "dtype": ANY, "sparse": ANY, "modality": ANY}
_RESULT_SCHEMA = both(
    {**CHAIN_SCHEMA, "extractor_type": ANY, "primary_metric_name": str, "scores": dict, "top_k_accuracies": dict,
     "per_class": MapOf({"support": ANY, "predicted": ANY, "precision": ANY, "recall": ANY, "f1": ANY}),
     "confusion_matrix": [[Number(integer=True, low=0)]], "margins": dict, "overlap": nullable(overlap.SCHEMA),
     "prototypes": dict,
     "embedding": {"samples?": _BRANCH_SCHEMA, "prompts?": _BRANCH_SCHEMA},
     "compression?": compression_schema({"samples": FOOTPRINT_SCHEMA})},
    rule(lambda r: r.get("error") is not None or set(REPORTED_MARGINS) <= set(r["margins"]),
         f"a result without an error needs the margins {list(REPORTED_MARGINS)}"),
    rule(lambda r: r.get("error") is not None or (r["primary_metric_name"] in r["scores"]
                                                  and r["primary_score"] == r["scores"][r["primary_metric_name"]]),
         "primary_score must be the score of the primary metric"))


def _confusion_matrices(document: Mapping[str, Any], path: str) -> None:
    """A scored result's confusion matrix has one row and one column per class (the report tables it so)."""
    n = len(document["protocol"]["prompts"])
    for i, result in enumerate(document["extractor_results"]):
        matrix = result["confusion_matrix"]
        if result.get("error") is None and (len(matrix) != n or any(len(row) != n for row in matrix)):
            widths = sorted({len(row) for row in matrix})
            fail(f"{path}.extractor_results[{i}].confusion_matrix",
                 f"malformed value (expected {n} x {n} counts, one row and column per class; got {len(matrix)} "
                 f"row(s) of width {widths})")


#: What reports, DataFrames and ``compare`` read of a serialized ZeroShotBenchmarkResult (checked on load).
SCHEMA = both({
    "protocol": {"config": {"metric": str, "top_k": [Number(integer=True, low=1)], "similarity": ANY,
                            "max_dense_bytes": ANY, "quality_tolerance": Number(low=0.0)},
                 "identity": IDENTITY_SCHEMA, "prompts": [{"label_key": str, "display": ANY, "prompts": [str]}],
                 "dataset": {"templates": nullable(list), "n_samples": ANY, "n_classes": ANY, "n_prompts": ANY},
                 "block_plan": {"rows_per_block": ANY, "n_blocks": ANY}, "prompts_fingerprint": ANY,
                 "targets_fingerprint": ANY, "tie_rule": ANY, "ensemble": ANY, "ranking": ANY},
    "extractor_results": [_RESULT_SCHEMA], "warnings": [str],
    "metadata": RECORDED_ENVELOPE_SCHEMA, "timing": {**TIMING_ENVELOPE_SCHEMA, "runtime": RUNTIME_SCHEMA}},
    rule(lambda d: all(set(r["per_class"]) <= {p["label_key"] for p in d["protocol"]["prompts"]}
                       for r in d["extractor_results"]), "per_class names a class that has no prompts"),
    _confusion_matrices)


@dataclasses.dataclass(repr=False)
class ZeroShotBenchmarkResult(ResultFamily):
    """The protocol (config, ordered prompts, fingerprints, tie and ensemble rules) and each encoder's result.

    Lookup by name, the quality cohort, JSON, Markdown and HTML come from
    :class:`~vertebrae.families.labeled.results.ResultFamily`, shared with the other result types.
    """

    RESULT_TYPE: ClassVar[str] = RESULT_TYPE

    protocol: dict[str, Any]
    extractor_results: list[ZeroShotExtractorResult]
    warnings: list[str]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The run envelope: run key, versions, plan and (with a cache) the cache record.
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def config(self) -> ZeroShotConfig:
        return ZeroShotConfig.from_dict(self.protocol["config"])

    @property
    def primary_metric_name(self) -> str:
        return self.protocol["config"]["metric"]

    def _default_tolerance(self) -> float:
        return self.protocol["config"]["quality_tolerance"]

    # -- tables ----------------------------------------------------------------
    def _row(self, result: ZeroShotExtractorResult, rank: int | None) -> dict[str, Any]:
        return result_row(result, rank)

    # -- persistence -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return family_document(RESULT_TYPE, SCHEMA_VERSION, self.protocol, self.extractor_results, self.warnings,
                               self.metadata, self.timing)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ZeroShotBenchmarkResult":
        check_header(data, RESULT_TYPE, READABLE_SCHEMAS)
        data = current_envelope(data)  # schema 1: the run facts it recorded, in the envelope's places
        check(data, SCHEMA)  # whatever loads renders (docs/results.md)
        with reading("$"):
            timing = dict(data["timing"])
            items = list(data["extractor_results"])
        with reading("$.timing"):
            runtime = dict(timing.pop("runtime"))
        results = []
        for i, item in enumerate(items):
            with reading(f"$.extractor_results[{i}]"):
                name = item["name"]
            results.append(ZeroShotExtractorResult.from_dict(item, runtime.get(name), f"$.extractor_results[{i}]"))
        with reading("$"):
            return cls(dict(data["protocol"]), results, list(data["warnings"]), timing, dict(data["metadata"]))

    def __repr__(self) -> str:
        head = (f"ZeroShotBenchmarkResult({len(self.extractor_results)} encoder(s), {len(self.protocol['prompts'])} "
                f"class(es), ranked by {self.primary_metric_name})")
        return "\n".join([head, *self._top_lines()])


def result_row(result: ZeroShotExtractorResult, rank: int | None) -> dict[str, Any]:
    """The canonical flat row of one result; the DataFrame and the Markdown ranking use it."""
    samples = result.embedding.get("samples", {})
    overlap = result.overlap
    row: dict[str, Any] = {
        "rank": rank, "extractor": result.name, "extractor_type": result.extractor_type,
        "primary_metric": result.primary_metric_name, "primary_score": result.primary_score,
        "aggregate_valid": result.aggregate_valid, **result.scores, **result.top_k_accuracies,
        "margin_mean": result.margins.get("mean"), "margin_median": result.margins.get("median"),
        "overlap_score": None if overlap is None else overlap.score,
        "overlap_macro": None if overlap is None else overlap.macro_score,
        "overlap_weighted": None if overlap is None else overlap.weighted_score,
        "embedding_dim": samples.get("embedding_dim"), "embedding_dtype": samples.get("dtype"),
        "embedding_sparse": samples.get("sparse"), "warnings": len(result.warnings),
        **compression_columns(result.compression, "samples"),  # fitted on the samples
    }
    row.update({f"runtime.{stage}": seconds for stage, seconds in result.runtime.items()})
    row.update(endpoint_resource_columns(result.resource_profile))
    return row

"""The one protocol every per-chain result follows, the one ranking rule, and the JSON reading helpers.

Labeled-data (``ExtractorResult``), retrieval (``RetrievalEntry``) and zero-shot
(``ZeroShotExtractorResult``) results derive from :class:`ChainResult`, so the same
names mean the same thing in every family, and :func:`rank_results` is the only place a
ranking and its ranks are decided (``ranked_results()``, DataFrames, reports and
``vertebrae compare`` all use it).  See docs/results.md ("One result protocol").
"""

from __future__ import annotations

import contextlib
import importlib
import pathlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from .._base import json_codec
from ..errors import SerializationError
from .._base.result_schema import NUMBER, MapOf, nullable

#: Attributes every per-chain result has, under these names (checked by tests/test_result_family.py).
PROTOCOL_FIELDS = ("name", "primary_metric_name", "primary_score", "higher_is_better", "aggregate_valid", "error",
                   "artifact_keys", "runtime", "embedding", "compression")
#: Columns every family's DataFrame row has (runtime follows as ``runtime.<stage>``).
PROTOCOL_COLUMNS = ("rank", "extractor", "primary_metric", "primary_score", "aggregate_valid", "warnings",
                    "compression_variant", "compression_method", "compression_requested_dim",
                    "compression_output_dim", "compression_applied", "compression_not_applied_reason",
                    "raw_bytes_per_row", "evaluated_bytes_per_row")


#: What every report reads of a serialized dataset identity (checked on load; see vertebrae._base.result_schema).
IDENTITY_SCHEMA = {"kind": str, "dataset_id": str, "revision?": nullable(str), "content_sha256?": nullable(str)}
#: What every report and ``compare`` read of any family's per-chain result (the protocol fields).
CHAIN_SCHEMA = {"name": str, "primary_score": nullable(NUMBER), "warnings": [str], "recipe": dict,
                "error?": nullable({"stage": str, "type": str, "message": str}), "artifact_keys?": MapOf(str),
                "compression?": nullable(dict), "resource_profile?": nullable(dict)}


#: The run envelope: what every family's result records about the run itself, in the same places
#: (docs/results.md, "The run envelope"), written once by the shared run path (``front_door.run_envelope``).
#: ``metadata`` holds the run key, the package versions, the plan and (with a cache) the cache record ...
ENVELOPE_SCHEMA = {"run_key": str, "versions": MapOf(str), "plan": [{"stage": str, "extractor": str, "key": str}],
                   "cache?": nullable({"store": str, "mode": str})}
#: ... and ``timing`` when and where the run ran (a combined result lists its runs instead); timings are never compared.
TIMING_ENVELOPE_SCHEMA = {"started_at?": str, "host?": dict,
                          "runs?": [{"started_at": str, "host": dict, "extractors": [str]}]}
#: The envelope as retrieval and zero-shot results are checked: the same fields, each optional, since files written
#: before the envelope (retrieval schemas 1-3, zero-shot schema 1) recorded only some of them (the labeled family's
#: files always held all four, and its report shows them).
RECORDED_ENVELOPE_SCHEMA = {key.rstrip("?") + "?": value for key, value in ENVELOPE_SCHEMA.items()}


def current_envelope(data: Mapping[str, Any]) -> dict[str, Any]:
    """A retrieval or zero-shot document written before the envelope, with its run facts moved to the envelope's
    places: ``protocol.run_key`` and ``protocol.cache`` into ``metadata``, a single run's ``timing.runs`` entry into
    ``timing.started_at`` and ``timing.host``.  A current document is returned as it is."""
    if "metadata" in data:
        return dict(data)
    with reading("$"):
        protocol, timing = dict(data["protocol"]), dict(data["timing"])
    metadata = {key: protocol.pop(key) for key in ("run_key", "cache") if key in protocol}
    runs = timing.get("runs")
    if isinstance(runs, list) and len(runs) == 1 and isinstance(runs[0], Mapping):
        del timing["runs"]
        timing.update({key: runs[0][key] for key in ("started_at", "host") if key in runs[0]})
    return {**data, "protocol": protocol, "metadata": metadata, "timing": timing}


class ChainResult:
    """Base of every per-chain result: the shared field names and the one validity rule.

    Subclasses are dataclasses with the fields ``name``, ``primary_metric_name``,
    ``primary_score`` (None when there is none), ``error`` (stage, type, message of a
    failed chain, else None), ``artifact_keys`` (stage -> artifact key), ``runtime``
    (seconds per stage, stored in the result's ``timing`` section), ``embedding`` (the
    embedding metadata: flat for one embedding, per endpoint or branch otherwise) and
    ``compression`` (the evaluated compression variant, None without variants).
    """

    name: str
    primary_metric_name: str
    primary_score: float | None
    error: dict[str, Any] | None
    artifact_keys: dict[str, str]
    runtime: dict[str, Any]
    embedding: dict[str, Any]
    compression: dict[str, Any] | None

    @property
    def higher_is_better(self) -> bool:
        """The primary metric's direction (retrieval and zero-shot metrics are all higher-is-better)."""
        return True

    def _primary_aggregate_valid(self) -> bool:
        """Whether the primary metric itself declares its aggregate valid (labeled data: custom metrics may not)."""
        return True

    @property
    def aggregate_valid(self) -> bool:
        """The one validity rule: no error, a primary score, and a primary aggregate declared valid; only valid
        results are ranked."""
        return self.error is None and self.primary_score is not None and self._primary_aggregate_valid()


R = TypeVar("R", bound=ChainResult)


class Ranked(NamedTuple):
    """One ranked result and its rank (see :func:`rank_results`)."""

    rank: int
    result: Any


def family_document(result_type: str, schema_version: int, protocol: Mapping[str, Any], results: Sequence[Any],
                    warnings: Sequence[str], metadata: Mapping[str, Any], timing: Mapping[str, Any]) -> dict[str, Any]:
    """The serialized form of a family result whose chains carry their own runtimes: the run envelope
    (``metadata``, ``timing``) around the protocol and the per-chain results, each chain's runtime under
    ``timing.runtime`` (timings live only in ``timing``)."""
    return {"schema_version": schema_version, "result_type": result_type, "protocol": protocol,
            "extractor_results": [r.to_dict() for r in results], "warnings": list(warnings), "metadata": metadata,
            "timing": {**timing, "runtime": {r.name: dict(r.runtime) for r in results}}}


def rank_results(results: Iterable[R]) -> list[Ranked]:
    """Valid results best-first in their primary metric's direction, with their ranks.

    The one tie rule is competition ranking: results with exactly equal primary scores share
    the better (lower) rank and the next rank skips (1, 1, 3); within a tie the input order is
    kept (the sort is stable).  Invalid results are left out (never ranked with a fallback).
    """
    ordered = sorted((r for r in results if r.aggregate_valid),
                     key=lambda r: -r.primary_score if r.higher_is_better else r.primary_score)
    ranked: list[Ranked] = []
    for position, result in enumerate(ordered, start=1):
        tied = ranked and result.primary_score == ranked[-1].result.primary_score
        ranked.append(Ranked(ranked[-1].rank if tied else position, result))
    return ranked


# --------------------------------------------------------------------- reading JSON
@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Turn a missing key or a wrongly typed value inside ``path`` into one SerializationError.

    Every result family loads its JSON through this, so malformed or foreign documents fail
    with the path inside the document instead of a bare ``KeyError``.
    """
    try:
        yield
    except SerializationError:
        raise
    except KeyError as exc:
        raise SerializationError(f"{path}: missing key {exc.args[0]!r}; the file is incomplete, edited by hand or "
                                 "not written by this version of vertebrae") from None
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SerializationError(f"{path}: malformed value ({type(exc).__name__}: {exc})") from None


def check_header(data: Any, result_type: str, schema_versions: tuple[int, ...]) -> None:
    """The document is a JSON object of ``result_type`` in one of ``schema_versions``, else a SerializationError."""
    if not isinstance(data, Mapping):
        raise SerializationError(f"$: not a vertebrae {result_type} result: expected a JSON object, "
                                 f"got {type(data).__name__}")
    if data.get("result_type") != result_type or data.get("schema_version") not in schema_versions:
        raise SerializationError(f"$: not a vertebrae {result_type} result of schema {schema_versions[-1]} "
                                 f"(result_type={data.get('result_type')!r}, "
                                 f"schema_version={data.get('schema_version')!r})")


# --------------------------------------------------------------------- recommendations
#: Recommendation cut-offs on the overlap score per target type: (strong, moderate, label stem).
#: Multi-label and regression cut-offs were calibrated on targets of known predictability
#: (benchmarks/recommendation_calibration.py; evidence in docs/results.md).
RECOMMENDATION_CUTOFFS: dict[str, tuple[float, float, str]] = {
    "single_label": (0.8, 0.5, "separation"),
    "multi_label": (0.5, 0.35, "separation"),
    "regression": (0.25, 0.10, "continuous_structure"),
}


def recommendation_label(overlap_score: float, target_type: str = "single_label") -> str:
    """Lightweight guidance from the overlap score with the cut-offs of the target type, not a verdict."""
    if target_type not in RECOMMENDATION_CUTOFFS:
        raise ValueError(f"target_type must be one of {sorted(RECOMMENDATION_CUTOFFS)}, got {target_type!r}")
    strong, moderate, stem = RECOMMENDATION_CUTOFFS[target_type]
    if overlap_score >= strong:
        return f"strong_{stem}"
    if overlap_score >= moderate:
        return f"moderate_{stem}"
    return f"weak_{stem}"


def read_json(path: str | pathlib.Path) -> Any:
    """The decoded JSON document at ``path``; invalid, unbounded or malformed JSON is a SerializationError."""
    return json_codec.decode(json_codec.read(path))


#: Result type -> the module that defines its class (imported when a document of that type is read first).
RESULT_MODULES = {"benchmark": "vertebrae.families.labeled.results", "retrieval": "vertebrae.families.retrieval.result",
                  "zero_shot": "vertebrae.families.zero_shot.result"}
#: Result type -> its class: every result family registers itself when its class is defined.
_RESULT_TYPES: dict[str, type] = {}


def register_result_type(cls: type) -> type:
    """Record ``cls`` (a result family with ``RESULT_TYPE``) so any document of its type can be rebuilt."""
    _RESULT_TYPES[cls.RESULT_TYPE] = cls
    return cls


def result_from_dict(data: Any) -> Any:
    """Rebuild any vertebrae result (benchmark, retrieval, zero-shot) from its serialized dict.

    Reports and ``compare`` read results through this, so they depend on no result module (the result
    classes render reports; a report never imports them back).
    """
    kind = data.get("result_type") if isinstance(data, Mapping) else None
    if not isinstance(kind, str) or kind not in RESULT_MODULES:
        raise SerializationError(f"$.result_type: {kind!r} is not a vertebrae result type; expected one of "
                                 f"{sorted(RESULT_MODULES)}")
    if kind not in _RESULT_TYPES:
        importlib.import_module(RESULT_MODULES[kind])  # defines (and so registers) the class
    return _RESULT_TYPES[kind].from_dict(data)


def load_result(path: str | pathlib.Path) -> Any:
    """Load any vertebrae result JSON file, whatever its result type; every error names the file once."""
    document = json_codec.read(path)  # a file that is not JSON: its message names the file
    try:
        return result_from_dict(json_codec.decode(document))
    except SerializationError as exc:  # names the place inside the document ("$.timing: ...")
        raise SerializationError(f"{path}: {exc}") from None

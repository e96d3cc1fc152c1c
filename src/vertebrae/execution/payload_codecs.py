"""Serialized forms of the scoring payloads: score, stability, metrics, diagnose and the assembled results.

Each is one strict-JSON document (through the result codec), so a store shared by
staged or distributed runs can hold every artifact of a plan.  Runtimes are never
inside an artifact: wall-clock fields of Separatix payloads are dropped on encode and
read back as ``None`` ("not measured by this run").  These codecs are ``cached=False``:
the embedding cache reuses extractions, while scores are recomputed and timed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..artifacts.codecs import StoredArtifact
from ..errors import ArtifactIntegrityError
from .caching import ArtifactCodec, register_codec


def _json_codec(kind: str, to_document: Callable[[Any], Mapping[str, Any]],
                from_document: Callable[[Mapping[str, Any]], Any]) -> ArtifactCodec:
    def encode(artifact: Any) -> StoredArtifact:
        return StoredArtifact(kind, {}, dict(to_document(artifact)))

    def decode(stored: StoredArtifact) -> Any:
        try:
            return from_document(stored.document)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactIntegrityError(f"{kind} artifact is malformed: {type(exc).__name__}: {exc}") from None

    return ArtifactCodec(kind, encode, decode, cached=False)


def _without_timings(data: dict[str, Any]) -> dict[str, Any]:
    from ..results import pop_timings

    pop_timings(data)
    return data


# ----------------------------------------------------------------------------- benchmark pipeline
def _score_document(artifact: Any) -> dict[str, Any]:
    return {"overlap": artifact.overlap.to_dict()}


def _score(document: Mapping[str, Any]) -> Any:
    from ..scoring.overlap import OverlapScoreResult
    from .stages import ScoreArtifact

    return ScoreArtifact(OverlapScoreResult.from_dict(document["overlap"]))


def _stability(document: Mapping[str, Any]) -> Any:
    from ..scoring.stability import StabilityResult
    from .stages import StabilityArtifact

    return StabilityArtifact(StabilityResult.from_dict(document["stability"]))


def _metrics(document: Mapping[str, Any]) -> Any:
    from ..scoring.metric_result import MetricResult
    from ..scoring.metrics import MetricsArtifact

    return MetricsArtifact([MetricResult.from_dict(m) for m in document["results"]], list(document["violations"]))


def _separatix_document(result: Any) -> dict[str, Any]:
    document = _without_timings(result.to_dict())
    document.pop("runtime_seconds", None)  # None when the result was itself read back from a store
    return document


def _separatix(document: Mapping[str, Any]) -> Any:
    from ..scoring.separatix import SeparatixResult

    return SeparatixResult.from_dict({**document, "runtime_seconds": None})


def _result_document(result: Any) -> dict[str, Any]:
    data = result.to_dict()
    if data.get("separatix") is not None:
        data["separatix"] = _without_timings(data["separatix"])
    return data


def _result(document: Mapping[str, Any]) -> Any:
    from ..results import ExtractorResult

    data = dict(document)
    if data.get("separatix") is not None:
        data["separatix"] = {**data["separatix"], "runtime_seconds": None}
    return ExtractorResult.from_dict(data)


# ----------------------------------------------------------------------------- retrieval pipeline
def _direction(document: Mapping[str, Any]) -> Any:
    from ..retrieval.result import DirectionResult

    return DirectionResult(**document)


def _entry(document: Mapping[str, Any]) -> Any:
    from ..retrieval.result import RetrievalEntry

    return RetrievalEntry.from_dict(document, None)


register_codec("benchmark", "score", _json_codec("overlap_score", _score_document, _score))
register_codec("benchmark", "stability", _json_codec("stability", lambda a: {"stability": a.stability.to_dict()},
                                                     _stability))
register_codec("benchmark", "metrics", _json_codec("metrics", lambda a: {"results": [m.to_dict() for m in a.results],
                                                                        "violations": list(a.violations)}, _metrics))
register_codec("benchmark", "diagnose", _json_codec("separatix", _separatix_document, _separatix))
register_codec("benchmark", "assemble", _json_codec("extractor_result", _result_document, _result))
register_codec("retrieval", "rank_forward", _json_codec("ranking_direction", lambda d: d.to_dict(), _direction))
register_codec("retrieval", "rank_reverse", _json_codec("ranking_direction", lambda d: d.to_dict(), _direction))
register_codec("retrieval", "assemble", _json_codec("retrieval_entry", lambda e: e.to_dict(), _entry))

"""RetrievalBenchmarkResult: the complete protocol plus one entry per extractor.

The JSON form is strict and deterministic: the same inputs give byte-identical
JSON except the top-level ``timing`` section (start time, host, per-stage
runtimes).  Markdown and DataFrame views are built from the serialized dict, so an
archived JSON file regenerates the same report.  Results only combine when their
configuration, protocol fingerprint and dataset identity are identical.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputTypeError, InputValidationError, SerializationError
from .config import RetrievalConfig

SCHEMA_VERSION = 1
RESULT_TYPE = "retrieval"
DIRECTIONS = ("forward", "reverse")


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


@dataclasses.dataclass
class RetrievalEntry:
    """Everything measured for one extractor; ``runtime`` is stored in the result's timing section."""

    extractor: str
    recipe: dict[str, Any]
    primary_score: float | None
    forward: DirectionResult | None
    reverse: DirectionResult | None
    embeddings: dict[str, dict[str, Any]]
    warnings: list[str]
    #: Stage name -> artifact key of every job behind this entry.
    artifact_keys: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Why this entry has no scores (``on_error="record"``): stage, type, message, extractor.
    error: dict[str, Any] | None = None

    @classmethod
    def failed(cls, extractor: str, recipe: dict[str, Any], error: dict[str, Any]) -> "RetrievalEntry":
        """An unranked entry standing for an extractor whose chain failed."""
        return cls(extractor, recipe, None, None, None, {},
                   [f"failed in the {error['stage']} stage: {error['type']}: {error['message']}"], error=error)

    def direction(self, name: str) -> DirectionResult | None:
        return self.forward if name == "forward" else self.reverse

    def to_dict(self) -> dict[str, Any]:
        """JSON form without ``runtime`` (stored in the result's timing section); ``error`` only when set."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "runtime" and not (f.name == "error" and self.error is None)}
        data["forward"] = None if self.forward is None else self.forward.to_dict()
        data["reverse"] = None if self.reverse is None else self.reverse.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], runtime: Mapping[str, float] | None) -> "RetrievalEntry":
        fields = dict(data)
        fields["forward"] = None if fields["forward"] is None else DirectionResult(**fields["forward"])
        fields["reverse"] = None if fields["reverse"] is None else DirectionResult(**fields["reverse"])
        return cls(**fields, runtime=dict(runtime or {}))


@dataclasses.dataclass
class RetrievalBenchmarkResult:
    protocol: dict[str, Any]
    entries: list[RetrievalEntry]
    warnings: list[str]
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def config(self) -> RetrievalConfig:
        return RetrievalConfig.from_dict(self.protocol["config"])

    def __getitem__(self, name: str) -> RetrievalEntry:
        for entry in self.entries:
            if entry.extractor == name:
                return entry
        raise KeyError(f"no retrieval result named {name!r}; have {[e.extractor for e in self.entries]}")

    # -- ranking views ---------------------------------------------------------
    def ranked_results(self) -> list[RetrievalEntry]:
        """Scored entries best-first by primary score (every retrieval metric is higher-is-better); ties by name.

        Failed entries (``on_error="record"``) are not ranked."""
        return sorted((e for e in self.entries if e.error is None), key=lambda e: (-e.primary_score, e.extractor))

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per entry in rank order (the DataFrame rows); tied scores share a rank."""
        ranked = self.ranked_results()
        rows, rank = [], 0
        for position, entry in enumerate(ranked, start=1):
            if position == 1 or entry.primary_score != ranked[position - 2].primary_score:
                rank = position
            rows.append(result_row(entry, rank, self.protocol["config"]["primary_metric"]))
        return rows

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of :meth:`rows` (columns like ``forward.ndcg@10`` and ``runtime.rank_forward``)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    # -- combining ---------------------------------------------------------------
    @classmethod
    def combine(cls, results: Sequence["RetrievalBenchmarkResult"]) -> "RetrievalBenchmarkResult":
        """One result from several runs of the same protocol (e.g. extractors evaluated separately)."""
        if isinstance(results, RetrievalBenchmarkResult) or not isinstance(results, Sequence) or not results:
            raise InputTypeError("RetrievalBenchmarkResult.combine expects a non-empty list of results")
        for i, result in enumerate(results):
            if not isinstance(result, RetrievalBenchmarkResult):
                raise InputTypeError(f"results[{i}] is a {type(result).__name__}, not a RetrievalBenchmarkResult")
        first = results[0].protocol
        checks = (("config", "retrieval configuration"), ("identity", "dataset identity"),
                  ("fingerprint", "protocol fingerprint (ids, relevance, exclusions)"))
        for i, result in enumerate(results[1:], start=1):
            for key, what in checks:
                if result.protocol[key] != first[key]:
                    difference = _difference(first[key], result.protocol[key])
                    raise InputValidationError(
                        f"results[{i}] has a different {what} than results[0] ({difference}); only results of the "
                        "identical protocol can be combined — rerun with the same dataset and RetrievalConfig")
        entries = [entry for result in results for entry in result.entries]
        seen: dict[str, int] = {}
        for i, result in enumerate(results):
            for entry in result.entries:
                if entry.extractor in seen:
                    raise InputValidationError(f"extractor {entry.extractor!r} appears in "
                                               f"results[{seen[entry.extractor]}] and results[{i}]; each extractor "
                                               "may appear once in a combined result")
                seen[entry.extractor] = i
        warnings = list(dict.fromkeys(w for result in results for w in result.warnings))
        runs = [run for result in results for run in result.timing.get("runs", [])]
        return cls(dict(first), entries, warnings, {"runs": runs})

    # -- persistence -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "result_type": RESULT_TYPE,
            "protocol": self.protocol,
            "entries": [e.to_dict() for e in self.entries],
            "warnings": list(self.warnings),
            "timing": {**self.timing, "runtime": {e.extractor: dict(e.runtime) for e in self.entries}},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RetrievalBenchmarkResult":
        if not isinstance(data, Mapping) or data.get("result_type") != RESULT_TYPE \
                or data.get("schema_version") != SCHEMA_VERSION:
            found = (data.get("result_type"), data.get("schema_version")) if isinstance(data, Mapping) else type(data)
            raise SerializationError(f"$: not a vertebrae retrieval result of schema {SCHEMA_VERSION} (found "
                                     f"result_type/schema_version {found!r})")
        try:
            timing = dict(data["timing"])
            runtime = timing.pop("runtime")
            entries = [RetrievalEntry.from_dict(e, runtime.get(e["extractor"])) for e in data["entries"]]
            return cls(dict(data["protocol"]), entries, list(data["warnings"]), timing)
        except (KeyError, TypeError) as exc:
            raise SerializationError(f"$: malformed retrieval result ({type(exc).__name__}: {exc}); the file is "
                                     "incomplete or was edited by hand") from None

    def to_json(self) -> str:
        from ..reports import json_codec

        return json_codec.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "RetrievalBenchmarkResult":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SerializationError(f"$: not valid JSON ({exc})") from None
        return cls.from_dict(data)

    def save_json(self, path: str | pathlib.Path) -> pathlib.Path:
        from ..reports import json_codec

        return json_codec.write(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | pathlib.Path) -> "RetrievalBenchmarkResult":
        return cls.from_json(pathlib.Path(path).read_text(encoding="utf-8"))

    def to_markdown(self) -> str:
        from .report import render_markdown

        return render_markdown(json.loads(self.to_json()))

    def save_markdown(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        path.write_text(self.to_markdown(), encoding="utf-8")
        return path


def result_row(entry: RetrievalEntry, rank: int, primary_metric: str) -> dict[str, Any]:
    """The canonical flat row of one entry; the DataFrame and the Markdown ranking use it."""
    row: dict[str, Any] = {"rank": rank, "extractor": entry.extractor, "primary_metric": primary_metric,
                           "primary_score": entry.primary_score}
    for name in DIRECTIONS:
        direction = entry.direction(name)
        if direction is not None:
            row[f"{name}.n_queries"] = direction.n_queries
            row.update({f"{name}.{metric}": value for metric, value in direction.metrics.items()})
            row.update({f"{name}.{key}": value for key, value in direction.diagnostics.items()})
    for side in ("query", "gallery"):
        meta = entry.embeddings[side]
        row[f"{side}_embedding_dim"] = meta["embedding_dim"]
        row[f"{side}_embedding_dtype"] = meta["dtype"]
        row[f"{side}_embedding_sparse"] = meta["sparse"]
    row["warnings"] = len(entry.warnings)
    row.update({f"runtime.{stage}": seconds for stage, seconds in entry.runtime.items()})
    return row


def _difference(expected: Any, found: Any) -> str:
    if isinstance(expected, Mapping) and isinstance(found, Mapping):
        keys = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
        return "; ".join(f"{k}: {expected.get(k)!r} vs {found.get(k)!r}" for k in keys)
    return f"{str(expected)[:16]}... vs {str(found)[:16]}..."

"""RetrievalBenchmark: exact ranking evaluation of frozen embeddings against a gallery.

It embeds both endpoints with each extractor, ranks every relevant item exactly
(:mod:`vertebrae.retrieval.ranking`) and reports trec_eval-style metrics
(:mod:`vertebrae.retrieval.metrics`).  It fits no head, builds no ANN index and
mines no negatives.  Everything that can be checked without running an extractor
(types, names, recipes, the memory plan, precomputed embeddings) is checked in the
constructor.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._config import check_config
from ..compression import EmbeddingCompressionConfig, check_compression
from ..errors import DataWarning, InputTypeError, InputValidationError, SerializationError, warn_result_notes
from ..execution.caching import HIT, NOT_MEASURED_CACHE_HIT, cache_summary, endpoint_footprint, stage_cache
from ..execution.context import RunContext, variant_chains
from ..execution.local import check_on_error, execute_plan
from ..execution.plan import Plan, build_plan
from ..reports import json_codec
from ..profiling import PROFILE_KEY, ResourceProfilingConfig, chain_profile, check_profiling
from .config import RetrievalConfig
from .dataset import RetrievalDataset
from .extractors import PrecomputedPairExtractor, RetrievalExtractor, as_retrieval_extractor
from .ranking import BlockPlan, plan_blocks, prepare_endpoints
from .result import RetrievalBenchmarkResult, RetrievalEntry
from .stages import RetrievalSettings, encode_endpoints

TIE_RULE = ("pessimistic: at equal similarity every non-relevant item ranks before every relevant one; relevant "
            "items follow by ascending grade, then ascending gallery index")


class RetrievalBenchmark:
    """Compare extractors on one retrieval protocol (queries, gallery, graded relevance)."""

    def __init__(self, dataset: RetrievalDataset, extractors: Sequence[Any], *,
                 retrieval_config: RetrievalConfig | None = None, on_error: str = "raise",
                 progress: bool | None = None,
                 compression: Sequence[EmbeddingCompressionConfig] | None = None, cache_config: Any = None,
                 resource_profiling: ResourceProfilingConfig | None = None) -> None:
        if not isinstance(dataset, RetrievalDataset):
            raise InputTypeError(f"dataset must be a RetrievalDataset, got {type(dataset).__name__}; build one with "
                                 "RetrievalDataset.from_embeddings(...) or RetrievalDataset.from_inputs(...)")
        config = check_config("retrieval_config", retrieval_config, RetrievalConfig, default=RetrievalConfig())
        self.dataset, self.config, self.progress = dataset, config, progress
        self.on_error = check_on_error("RetrievalBenchmark", on_error)
        #: Paired compression variants (fitted on the gallery, applied to the queries); empty: raw endpoints only.
        self.compression = check_compression("RetrievalBenchmark", compression)
        self.cache = stage_cache(cache_config)  # opens the store now: a bad URL fails before any work
        self.extractors = _validate_extractors(extractors, dataset)
        self.recipes = {e.name: _plain(e.recipe(), f"recipe of {e.name!r}") for e in self.extractors}
        self._reverse = _reverse_protocol(dataset) if config.bidirectional else None
        self.settings = RetrievalSettings(config, self._reverse, self.recipes,
                                          check_profiling("RetrievalBenchmark", resource_profiling))
        self._block_plans(sparse=False)  # a budget too small for one row fails here, before any extractor runs
        for extractor in self.extractors:
            if _precomputed(extractor):
                self._validate_precomputed(extractor)

    # -- protocol --------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The complete protocol stored in the result: config, dataset summary, tie rule, block plans."""
        reverse = None
        if self._reverse is not None:
            reverse = {"n_queries": int(self._reverse.rows.size),
                       "n_skipped": int(self.dataset.n_gallery - self._reverse.rows.size)}
        return {"config": self.config.to_dict(), **self.dataset.summary(), "tie_rule": TIE_RULE, "reverse": reverse,
                "compression": [config.to_dict() for config in self.compression]}

    def protocol_warnings(self) -> list[str]:
        notes = list(self.dataset.warnings)
        largest = self.config.cutoffs[-1]
        sizes = [("gallery", self.dataset.n_gallery)] + ([("query set", self.dataset.n_queries)]
                                                         if self.config.bidirectional else [])
        for what, size in sizes:
            if largest > size:
                notes.append(f"cutoff {largest} exceeds the {what} size ({size}); precision@{largest} still divides "
                             f"by {largest} (trec_eval convention), so it cannot reach 1")
        skipped = 0 if self._reverse is None else self.dataset.n_gallery - self._reverse.rows.size
        if skipped:
            notes.append(f"reverse direction: {skipped} of {self.dataset.n_gallery} gallery item(s) have no relevant "
                         "query and were skipped as reverse queries")
        return notes

    # -- running ---------------------------------------------------------------
    def _context(self) -> RunContext:
        return RunContext(self.settings, self.extractors, self.dataset, cache=self.cache)

    def plan(self, context: RunContext | None = None) -> Plan:
        """The stage jobs of this benchmark, one chain per extractor and compression variant."""
        context = self._context() if context is None else context
        chains = variant_chains(self.extractors, context.extractor_ids(), self.compression)
        return build_plan("retrieval", chains, context)

    def run(self, runner: Any = None) -> RetrievalBenchmarkResult:
        """Execute the plan with ``runner`` (default: an in-process LocalRunner)."""
        started = _dt.datetime.now(_dt.timezone.utc)
        notes = self.protocol_warnings()
        for note in notes:
            warnings.warn(note, DataWarning, stacklevel=2)
        plan, outcome = execute_plan(self, runner, description="vertebrae retrieval")
        entries = []
        for chain, keys in zip(plan.chains, plan.chain_keys):
            entry = outcome.artifacts.get(keys["assemble"])
            if entry is None:
                failure = outcome.failures[keys["assemble"]]
                entry = RetrievalEntry.failed(chain.name, self.recipes[chain.parent],
                                              {**failure.to_dict(), "extractor": chain.parent})
            warn_result_notes(chain.name, entry.warnings)
            entry.artifact_keys = dict(keys)
            entry.runtime = _runtime(keys, outcome)
            if entry.embeddings:
                entry.embeddings = _with_cache_facts(entry.embeddings, keys["encode"], plan, outcome, self.cache)
            profiling = self.settings.resource_profiling
            if profiling is not None and profiling.enabled and entry.error is None:
                entry.resource_profile = _endpoint_profiles(entry, keys, outcome)
            entries.append(entry)
        run = {"started_at": started.isoformat(), "host": _host(), "extractors": [e.name for e in entries]}
        protocol = self.protocol()
        if self.cache is not None:
            protocol["cache"] = cache_summary(self.cache)
        return RetrievalBenchmarkResult(protocol, entries, notes, {"runs": [run]})

    def _validate_precomputed(self, extractor: RetrievalExtractor) -> None:
        """Rows, widths and norms of embeddings that exist already, checked before any extractor runs."""
        encoded = encode_endpoints(extractor, extractor.name, self.dataset, {})
        prepare_endpoints(encoded.queries.matrix, encoded.gallery.matrix, self.config.similarity, query_ids=self.dataset.query_ids,
                          gallery_ids=self.dataset.gallery_ids, source=f"extractor {extractor.name!r}")

    def _block_plans(self, sparse: bool) -> dict[str, BlockPlan]:
        """Block plans per direction under the memory budget (sparse endpoints need more room per row)."""
        budget, block_size = self.config.memory_budget_bytes, self.config.block_size
        plans = {"forward": plan_blocks(self.dataset.n_queries, self.dataset.n_gallery, budget, block_size,
                                        sparse=sparse)}
        if self._reverse is not None:
            plans["reverse"] = plan_blocks(self._reverse.rows.size, self.dataset.n_queries, budget, block_size,
                                           sparse=sparse)
        return plans


def _with_cache_facts(embeddings: dict[str, dict[str, Any]], encode_key: str, plan: Plan, outcome: Any,
                      cache: Any) -> dict[str, dict[str, Any]]:
    """Each endpoint's metadata plus cache eligibility and status (and footprints when a cache is used)."""
    eligible = next(job.cache_eligible for job in plan.jobs if job.key == encode_key)
    facts = {"cache_eligible": eligible, "cache_status": outcome.statuses[encode_key]}
    updated = {}
    for side, metadata in embeddings.items():
        updated[side] = {**metadata, **facts}
        if cache is not None:
            array = "queries" if side == "query" else "gallery"
            persisted = outcome.persisted.get(encode_key)
            updated[side]["footprint"] = endpoint_footprint(metadata["logical_bytes"], persisted, array)
    return updated


def _endpoint_profiles(entry: RetrievalEntry, keys: dict[str, str], outcome: Any) -> dict[str, Any]:
    """``{"query": profile, "gallery": profile}``: each endpoint's encode measurements plus its embedding bytes."""
    measured = outcome.timings.get(keys["encode"], {}).get(PROFILE_KEY) or {}
    status = outcome.statuses.get(keys["encode"], "disabled")
    compression = entry.embeddings.get("compression")
    profiles = {}
    for side in ("query", "gallery"):
        evaluated = entry.embeddings[side].get("logical_bytes")
        raw = evaluated if compression is None else compression["footprint"][side].get("raw_bytes")
        profiles[side] = chain_profile(measured.get(side), status, raw, evaluated)
    return profiles


def _runtime(keys: dict[str, str], outcome: Any) -> dict[str, Any]:
    """Seconds of this run: fit (on the gallery), encode_queries, encode_gallery, compress, rank_* (beside the
    artifacts).

    On a cache hit nothing was fitted or encoded: those steps read ``not_measured_cache_hit``.
    """
    timings = outcome.timings
    if outcome.statuses.get(keys["encode"]) == HIT:
        runtime: dict[str, Any] = {step: NOT_MEASURED_CACHE_HIT for step in ("fit", "encode_queries", "encode_gallery")}
        runtime["encode_cache_read"] = timings[keys["encode"]]["seconds"]
    else:
        runtime = {step: seconds for step, seconds in timings.get(keys["encode"], {}).items()
                   if step not in ("seconds", PROFILE_KEY)}
    for stage in ("compress", "rank_forward", "rank_reverse"):
        if stage in keys and keys[stage] in timings:
            runtime[stage] = timings[keys[stage]]["seconds"]
    return runtime


class _ReverseProtocol(NamedTuple):
    """Gallery -> query: gallery items with a positive become queries; relevance and exclusions transposed."""

    rows: np.ndarray
    relevance: Any
    exclusions: Any


def _reverse_protocol(dataset: RetrievalDataset) -> _ReverseProtocol:
    relevance = dataset.relevance.T.tocsr()
    relevance.sort_indices()
    rows = np.flatnonzero(np.diff(relevance.indptr) > 0)
    exclusions = dataset.exclusions.T.tocsr()
    exclusions.sort_indices()
    return _ReverseProtocol(rows, relevance[rows], exclusions[rows])


def _validate_extractors(extractors: Any, dataset: RetrievalDataset) -> list[RetrievalExtractor]:
    if isinstance(extractors, (str, bytes)) or not isinstance(extractors, Sequence):
        raise InputTypeError("extractors must be a list of extractors, e.g. [PrecomputedExtractor('candidate')]")
    if not extractors:
        raise InputValidationError("extractors is empty; pass at least one extractor")
    adapted, seen = [], {}
    for i, extractor in enumerate(extractors):
        adapted.append(as_retrieval_extractor(extractor, i, dataset.has_embeddings))
        name = adapted[-1].name
        if name in seen:
            raise InputValidationError(f"extractors[{i}] and extractors[{seen[name]}] are both named {name!r}; give "
                                       "every extractor a unique name")
        seen[name] = i
    return adapted


def _precomputed(extractor: RetrievalExtractor) -> bool:
    """Extractors whose embeddings exist already, so they can be validated up front."""
    from ..extractors.base import PrecomputedExtractor

    inner = getattr(extractor, "extractor", None)
    return isinstance(extractor, PrecomputedPairExtractor) or isinstance(inner, PrecomputedExtractor)


def _plain(value: Any, where: str) -> Any:
    """JSON-plain copy (tuples become lists), so a reloaded result compares equal; fails early if not serializable."""
    try:
        return json.loads(json_codec.dumps(value))
    except SerializationError as exc:  # the message names the path inside the value
        raise SerializationError(f"{where} is not JSON-serializable: {exc}") from None


def _host() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    blas = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "numpy": np.__version__, "blas_threads": blas[0]["num_threads"] if blas else None}

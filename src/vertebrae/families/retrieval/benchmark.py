"""RetrievalBenchmark: exact ranking evaluation of frozen embeddings against a gallery.

It embeds both endpoints with each extractor, ranks every relevant item exactly
(:mod:`vertebrae.families.retrieval.ranking`) and reports trec_eval-style metrics
(:mod:`vertebrae.families.retrieval.metrics`).  It fits no head, builds no ANN index and
mines no negatives.  Everything that can be checked without running an extractor
(types, names, recipes, the declared input kinds, the memory plan, precomputed embeddings) is
checked in the constructor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._base.progress import check_progress
from ..._base.config import check_config
from ...extractors.compression import EmbeddingCompressionConfig, check_compression
from ...errors import InputTypeError
from ...execution.caching import stage_cache
from ...execution.context import Chain, RunContext
from ...execution.jobs import RunOutcome, check_on_error
from ...execution.plan import Plan
from ...inputs.modalities import check_input_modality, inputs_modality, model_modalities
from ..front_door import (EmbeddingSource, FrontDoor, check_unique_names, plain_recipe, validate_extractor_list,
                          variant_chains)
from ...extractors.profiling import ResourceProfilingConfig, check_profiling, endpoint_profiles
from ..._base.profile_records import PROFILE_KEY
from .config import RetrievalConfig
from .dataset import RetrievalDataset
from .extractors import (UNDECLARED, PrecomputedPairExtractor, RetrievalExtractor, as_retrieval_extractor,
                         check_endpoint_modalities)
from .ranking import BlockPlan, plan_blocks, prepare_endpoints
from .result import RetrievalBenchmarkResult, RetrievalEntry
from .stages import RetrievalSettings, encode_endpoints

TIE_RULE = ("pessimistic: at equal similarity every non-relevant item ranks before every relevant one; relevant "
            "items follow by ascending grade, then ascending gallery index")


class RetrievalBenchmark(FrontDoor):
    """Compare extractors on one retrieval protocol (queries, gallery, graded relevance).

    A declaration over the shared run path (:mod:`vertebrae.families.front_door`).
    """

    pipeline = "retrieval"
    description = "vertebrae retrieval"
    fitted_branch = "gallery"

    def __init__(self, dataset: RetrievalDataset, extractors: Sequence[Any], *,
                 retrieval_config: RetrievalConfig | None = None, on_error: str = "raise",
                 progress: bool | None = None,
                 compression: Sequence[EmbeddingCompressionConfig] | None = None, cache_config: Any = None,
                 resource_profiling: ResourceProfilingConfig | None = None) -> None:
        if not isinstance(dataset, RetrievalDataset):
            raise InputTypeError(f"dataset must be a RetrievalDataset, got {type(dataset).__name__}; build one with "
                                 "RetrievalDataset.from_embeddings(...) or RetrievalDataset.from_inputs(...)")
        config = check_config("retrieval_config", retrieval_config, RetrievalConfig, default=RetrievalConfig())
        self.dataset, self.config, self.progress = dataset, config, check_progress("RetrievalBenchmark", progress)
        self.on_error = check_on_error("RetrievalBenchmark", on_error)
        #: Paired compression variants (fitted on the gallery, applied to the queries); empty: raw endpoints only.
        self.compression = check_compression("RetrievalBenchmark", compression)
        self.cache = stage_cache(cache_config)  # opens the store now: a bad URL fails before any work
        self.extractors = _validate_extractors(extractors, dataset)
        for extractor in self.extractors:  # a recipe the result cannot store fails here, before any work
            plain_recipe(extractor)
        self._reverse = _reverse_protocol(dataset) if config.bidirectional else None
        self.settings = RetrievalSettings(config, self._reverse,
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

    # -- the declaration the shared run path reads ---------------------------------------------------
    def chains(self, context: RunContext | None = None) -> list[Chain]:
        """One chain per extractor and compression variant."""
        context = self._context() if context is None else context
        return variant_chains(self.extractors, context.extractor_ids(), self.compression)

    def embedding_sources(self, chain: Chain) -> dict[str, EmbeddingSource]:
        return {"query": EmbeddingSource("encode", "query"), "gallery": EmbeddingSource("encode", "gallery")}

    def failed_result(self, chain: Chain, error: dict[str, Any], keys: dict[str, str]) -> RetrievalEntry:
        entry = RetrievalEntry.failed(chain.name, plain_recipe(self._context().extractor_of(chain)), error)
        entry.artifact_keys = keys
        return entry

    def complete(self, entry: RetrievalEntry, chain: Chain, keys: dict[str, str], outcome: RunOutcome,
                 plan: Plan) -> RetrievalEntry:
        profiling = self.settings.resource_profiling
        if profiling is not None and profiling.enabled:
            measured = outcome.timings.get(keys["encode"], {}).get(PROFILE_KEY) or {}
            extractor = self._context().extractor_of(chain)
            entry.resource_profile = endpoint_profiles({side: measured.get(side) for side in ("query", "gallery")},
                                                       entry.embedding, entry.compression,
                                                       model_modalities(extractor, UNDECLARED))
        return entry

    def build_result(self, entries: list[RetrievalEntry], notes: list[str]) -> RetrievalBenchmarkResult:
        return RetrievalBenchmarkResult(self.protocol(), entries, notes)

    def _validate_precomputed(self, extractor: RetrievalExtractor) -> None:
        """Rows, widths and norms of embeddings that exist already, checked before any extractor runs."""
        encoded = encode_endpoints(extractor, extractor.name, self.dataset, {})
        prepare_endpoints(encoded["query"].matrix, encoded["gallery"].matrix, self.config.similarity,
                          query_ids=self.dataset.query_ids, gallery_ids=self.dataset.gallery_ids,
                          source=f"extractor {extractor.name!r}")

    def _block_plans(self, sparse: bool) -> dict[str, BlockPlan]:
        """Block plans per direction under the memory budget (sparse endpoints need more room per row)."""
        budget, block_size = self.config.memory_budget_bytes, self.config.block_size
        plans = {"forward": plan_blocks(self.dataset.n_queries, self.dataset.n_gallery, budget, block_size,
                                        sparse=sparse)}
        if self._reverse is not None:
            plans["reverse"] = plan_blocks(self._reverse.rows.size, self.dataset.n_queries, budget, block_size,
                                           sparse=sparse)
        return plans


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
    extractors = validate_extractor_list(extractors, hint=", e.g. [PrecomputedExtractor('candidate')]")
    adapted = [as_retrieval_extractor(extractor, i, dataset.has_embeddings) for i, extractor in enumerate(extractors)]
    check_unique_names(adapted, [f"extractors[{i}]" for i in range(len(adapted))], given=extractors)
    sides = (("query", inputs_modality(dataset.query_inputs)), ("gallery", inputs_modality(dataset.gallery_inputs)))
    for i, extractor in enumerate(adapted):  # a model given the wrong kind fails here, before any extractor runs
        inner = getattr(extractor, "extractor", extractor)
        who = f"extractors[{i}] ({inner.name!r}, {type(inner).__name__})"
        declared = check_endpoint_modalities(who, extractor)
        if _precomputed(extractor):  # embeddings that exist already read no inputs
            continue
        model = getattr(inner, "input_modality", None)
        for side, have in sides:  # the model's own kind is checked on both endpoints, a declared one on its own
            for speaker, want in ((who, model), (f"{who} {side} endpoint", declared[side])):
                check_input_modality(speaker, want, have, f"{side}_inputs", "extractor",
                                     f"give {want} {side}_inputs to RetrievalDataset.from_inputs")
    return adapted


def _precomputed(extractor: RetrievalExtractor) -> bool:
    """Extractors whose embeddings exist already, so they can be validated up front."""
    from ...extractors.base import PrecomputedExtractor

    inner = getattr(extractor, "extractor", None)
    return isinstance(extractor, PrecomputedPairExtractor) or isinstance(inner, PrecomputedExtractor)

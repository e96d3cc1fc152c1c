"""RetrievalBenchmark: exact ranking evaluation of frozen embeddings against a gallery.

It embeds both endpoints with each extractor, ranks every relevant item exactly
(:mod:`vertebrae.retrieval.ranking`) and reports trec_eval-style metrics
(:mod:`vertebrae.retrieval.metrics`).  It fits no head, builds no ANN index and
mines no negatives.  Everything that can be checked without running an extractor
(types, names, recipes, the memory plan, precomputed embeddings) is checked in the
constructor.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import platform
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..embeddings import embedding_metadata, is_constant, validate_embeddings
from ..errors import (ConfigTypeError, DataWarning, ExtractorError, InputTypeError,
                      InputValidationError, ScoringWarning, SerializationError)
from ..execution.local import progress_enabled
from ..reports import json_codec
from ..threads import limited_threads
from .config import RetrievalConfig
from .dataset import RetrievalDataset
from .extractors import PrecomputedPairExtractor, RetrievalExtractor, as_retrieval_extractor
from .metrics import ranking_metrics, similarity_diagnostics
from .ranking import BlockPlan, Endpoints, plan_blocks, prepare_endpoints, rank_relevant
from .result import DirectionResult, RetrievalBenchmarkResult, RetrievalEntry

TIE_RULE = ("pessimistic: at equal similarity every non-relevant item ranks before every relevant one; relevant "
            "items follow by ascending grade, then ascending gallery index")


class RetrievalBenchmark:
    """Compare extractors on one retrieval protocol (queries, gallery, graded relevance)."""

    def __init__(self, dataset: RetrievalDataset, extractors: Sequence[Any], *,
                 retrieval_config: RetrievalConfig | None = None, progress: bool | None = None) -> None:
        if not isinstance(dataset, RetrievalDataset):
            raise InputTypeError(f"dataset must be a RetrievalDataset, got {type(dataset).__name__}; build one with "
                                 "RetrievalDataset.from_embeddings(...) or RetrievalDataset.from_inputs(...)")
        config = RetrievalConfig() if retrieval_config is None else retrieval_config
        if not isinstance(config, RetrievalConfig):
            raise ConfigTypeError(f"retrieval_config must be a RetrievalConfig, got {type(config).__name__}")
        self.dataset, self.config, self.progress = dataset, config, progress
        self.extractors = _validate_extractors(extractors, dataset)
        self.recipes = {e.name: _plain(e.recipe(), f"recipe of {e.name!r}") for e in self.extractors}
        self._reverse = _reverse_protocol(dataset) if config.bidirectional else None
        self._plan(sparse=False)  # a budget too small for one row fails here, before any extractor runs
        for extractor in self.extractors:
            if _precomputed(extractor):
                self._encode(extractor)  # validates rows, widths, norms before any extractor runs

    # -- protocol --------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The complete protocol stored in the result: config, dataset summary, tie rule, block plans."""
        reverse = None
        if self._reverse is not None:
            reverse = {"n_queries": int(self._reverse.rows.size),
                       "n_skipped": int(self.dataset.n_gallery - self._reverse.rows.size)}
        return {"config": self.config.to_dict(), **self.dataset.summary(), "tie_rule": TIE_RULE, "reverse": reverse}

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
    def run(self) -> RetrievalBenchmarkResult:
        from tqdm.auto import tqdm

        started = _dt.datetime.now(_dt.timezone.utc)
        notes = self.protocol_warnings()
        for note in notes:
            warnings.warn(note, DataWarning, stacklevel=2)
        entries = []
        with tqdm(self.extractors, disable=not progress_enabled(self.progress), desc="vertebrae retrieval",
                  unit="extractor", file=sys.stderr) as bar:
            for extractor in bar:
                bar.set_postfix_str(extractor.name)
                entries.append(self._evaluate(extractor))
        run = {"started_at": started.isoformat(), "host": _host(), "extractors": [e.extractor for e in entries]}
        return RetrievalBenchmarkResult(self.protocol(), entries, notes, {"runs": [run]})

    def _encode(self, extractor: RetrievalExtractor,
                runtime: dict[str, float] | None = None) -> tuple[Endpoints, dict[str, Any], list[str]]:
        """Fit on the gallery, embed and validate both endpoints: scoring input, per-endpoint metadata, warnings."""
        runtime = {} if runtime is None else runtime
        queries_in, gallery_in = self.dataset.endpoint_data()
        with _stage(runtime, "fit"):
            _call(extractor, "fit", gallery_in)
        with _stage(runtime, "encode_queries"):
            queries = _call(extractor, "encode_queries", queries_in)
        with _stage(runtime, "encode_gallery"):
            gallery = _call(extractor, "encode_gallery", gallery_in)
        queries = validate_embeddings(queries, argument="query embeddings", n_rows=self.dataset.n_queries,
                                      source=f"extractor {extractor.name!r}")
        gallery = validate_embeddings(gallery, argument="gallery embeddings", n_rows=self.dataset.n_gallery,
                                      source=f"extractor {extractor.name!r}")
        metadata = {"query": embedding_metadata(queries), "gallery": embedding_metadata(gallery)}
        endpoints = prepare_endpoints(queries, gallery, self.config.similarity, query_ids=self.dataset.query_ids,
                                      gallery_ids=self.dataset.gallery_ids, source=f"extractor {extractor.name!r}")
        notes = []
        if self.dataset.n_gallery > 1 and is_constant(gallery):
            notes.append(f"all {self.dataset.n_gallery} gallery embeddings are identical, so every query sees tied "
                         "similarities and scores by the pessimistic tie rule (worst case); check the extractor")
        return endpoints, metadata, notes

    def _evaluate(self, extractor: RetrievalExtractor) -> RetrievalEntry:
        runtime: dict[str, float] = {}
        endpoints, metadata, notes = self._encode(extractor, runtime)
        for note in notes:
            warnings.warn(f"{extractor.name}: {note}", ScoringWarning, stacklevel=3)
        dataset, plans = self.dataset, self._plan(endpoints.sparse)
        with _stage(runtime, "rank_forward"):
            forward = self._direction(endpoints, dataset.relevance, dataset.exclusions, plans["forward"])
        reverse = None
        if self._reverse is not None:
            with _stage(runtime, "rank_reverse"):
                reverse = self._direction(endpoints.reversed(self._reverse.rows), self._reverse.relevance,
                                          self._reverse.exclusions, plans["reverse"])
        primary = self.config.primary_metric
        scores = [forward.metrics[primary]] + ([reverse.metrics[primary]] if reverse is not None else [])
        return RetrievalEntry(extractor.name, self.recipes[extractor.name], float(np.mean(scores)), forward, reverse,
                              metadata, notes, runtime)

    def _plan(self, sparse: bool) -> dict[str, BlockPlan]:
        """Block plans per direction under the memory budget (sparse endpoints need more room per row)."""
        budget, block_size = self.config.memory_budget_bytes, self.config.block_size
        plans = {"forward": plan_blocks(self.dataset.n_queries, self.dataset.n_gallery, budget, block_size,
                                        sparse=sparse)}
        if self._reverse is not None:
            plans["reverse"] = plan_blocks(self._reverse.rows.size, self.dataset.n_queries, budget, block_size,
                                           sparse=sparse)
        return plans

    def _direction(self, endpoints: Endpoints, relevance: Any, exclusions: Any, plan: BlockPlan) -> DirectionResult:
        with limited_threads(self.config.thread_limit):
            ranked = rank_relevant(endpoints, relevance, exclusions, plan)
        per_query = ranking_metrics(relevance.indptr, relevance.data, ranked.ranks, self.config.cutoffs)
        metrics = {name: float(values.mean()) for name, values in per_query.items()}
        diagnostics = similarity_diagnostics(relevance.indptr, ranked.similarities, ranked.eligible_similarity_sums,
                                             ranked.n_eligible)
        return DirectionResult(int(relevance.shape[0]), metrics, diagnostics, plan.to_dict())


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


def _call(extractor: RetrievalExtractor, method: str, data: Any) -> Any:
    try:
        return getattr(extractor, method)(data)
    except Exception as exc:
        raise ExtractorError(f"extractor {extractor.name!r} failed in {method}: {type(exc).__name__}: {exc}") from exc


@contextlib.contextmanager
def _stage(runtime: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    runtime[name] = time.perf_counter() - started


def _host() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    blas = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "numpy": np.__version__, "blas_threads": blas[0]["num_threads"] if blas else None}

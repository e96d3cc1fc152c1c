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
from typing import Any

import numpy as np

from ..embeddings import embedding_metadata, validate_embeddings
from ..errors import (ConfigError, DataWarning, ExtractorError, InputTypeError, InputValidationError,
                      SerializationError)
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
            raise ConfigError(f"retrieval_config must be a RetrievalConfig, got {type(config).__name__}")
        self.dataset, self.config, self.progress = dataset, config, progress
        self.extractors = _validate_extractors(extractors, dataset)
        self.recipes = {e.name: _plain(e.recipe(), f"recipe of {e.name!r}") for e in self.extractors}
        relevance_t = dataset.relevance.T.tocsr()
        relevance_t.sort_indices()
        self._reverse_rows = np.flatnonzero(np.diff(relevance_t.indptr) > 0)
        self._reverse_relevance = relevance_t[self._reverse_rows]
        self._reverse_exclusions = dataset.exclusions.T.tocsr()[self._reverse_rows]
        self._plans = {"forward": plan_blocks(dataset.n_queries, dataset.n_gallery, config.memory_budget_bytes,
                                              config.block_size)}
        if config.bidirectional:
            self._plans["reverse"] = plan_blocks(self._reverse_rows.size, dataset.n_queries,
                                                 config.memory_budget_bytes, config.block_size)
        for extractor in self.extractors:
            if _precomputed(extractor):
                self._encode(extractor)  # validates rows, widths, norms before any extractor runs

    # -- protocol --------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The complete protocol stored in the result: config, dataset summary, tie rule, block plans."""
        reverse = None
        if self.config.bidirectional:
            reverse = {"n_queries": int(self._reverse_rows.size),
                       "n_skipped": int(self.dataset.n_gallery - self._reverse_rows.size)}
        return {"config": self.config.to_dict(), **self.dataset.summary(), "tie_rule": TIE_RULE, "reverse": reverse,
                "block_plan": {name: plan.to_dict() for name, plan in self._plans.items()}}

    def protocol_warnings(self) -> list[str]:
        notes = list(self.dataset.warnings)
        largest = self.config.cutoffs[-1]
        sizes = [("gallery", self.dataset.n_gallery)] + ([("query set", self.dataset.n_queries)]
                                                         if self.config.bidirectional else [])
        for what, size in sizes:
            if largest > size:
                notes.append(f"cutoff {largest} exceeds the {what} size ({size}); precision@{largest} still divides "
                             f"by {largest} (trec_eval convention), so it cannot reach 1")
        skipped = self.dataset.n_gallery - self._reverse_rows.size
        if self.config.bidirectional and skipped:
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
                runtime: dict[str, float] | None = None) -> tuple[Endpoints, dict[str, Any]]:
        """Fit on the gallery, embed both endpoints, validate them; returns scoring input and per-endpoint metadata."""
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
        return endpoints, metadata

    def _evaluate(self, extractor: RetrievalExtractor) -> RetrievalEntry:
        runtime: dict[str, float] = {}
        endpoints, metadata = self._encode(extractor, runtime)
        dataset, plans = self.dataset, self._plans
        with _stage(runtime, "rank_forward"):
            forward = self._direction(endpoints, dataset.relevance, dataset.exclusions, plans["forward"])
        reverse = None
        if self.config.bidirectional:
            with _stage(runtime, "rank_reverse"):
                reverse = self._direction(endpoints.reversed(self._reverse_rows), self._reverse_relevance,
                                          self._reverse_exclusions, plans["reverse"])
        primary = self.config.primary_metric
        scores = [forward.metrics[primary]] + ([reverse.metrics[primary]] if reverse is not None else [])
        return RetrievalEntry(extractor.name, self.recipes[extractor.name], float(np.mean(scores)), forward, reverse,
                              metadata, [], runtime)

    def _direction(self, endpoints: Endpoints, relevance: Any, exclusions: Any, plan: BlockPlan) -> DirectionResult:
        with limited_threads(self.config.thread_limit):
            ranked = rank_relevant(endpoints, relevance, exclusions, plan)
        per_query = ranking_metrics(relevance.indptr, relevance.data, ranked.ranks, self.config.cutoffs)
        metrics = {name: float(values.mean()) for name, values in per_query.items()}
        diagnostics = similarity_diagnostics(relevance.indptr, ranked.similarities, ranked.eligible_similarity_sums,
                                             ranked.n_eligible)
        return DirectionResult(int(relevance.shape[0]), metrics, diagnostics)


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

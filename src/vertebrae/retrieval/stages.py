"""The stages of a retrieval benchmark, registered under the ``retrieval`` pipeline.

encode -> endpoints -> rank_forward (, rank_reverse) -> assemble, one chain per
extractor, executed by the same runners as the labeled-data benchmark.  ``encode``
fits the extractor once on the gallery and embeds both endpoints (a fitted extractor
is not an artifact, so fitting and both encodings share one job); its artifact holds
the raw query and gallery matrices, ``endpoints`` the similarity-ready copies.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..embeddings import embedding_metadata, is_constant, validate_embeddings
from ..errors import ExtractorError
from ..execution.registry import stage
from ..threads import limited_threads
from .metrics import ranking_metrics, similarity_diagnostics
from .ranking import Endpoints, plan_blocks, prepare_endpoints, rank_relevant
from .result import DirectionResult, RetrievalEntry

PIPELINE = "retrieval"


@dataclasses.dataclass
class EndpointArtifact:
    """One endpoint's validated embedding matrix and its metadata."""

    matrix: Any
    metadata: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class RetrievalSettings:
    """What retrieval stages read besides the dataset: the config, the reverse protocol (or None), the recipes."""

    config: Any
    reverse: Any
    #: Extractor name -> its JSON-plain recipe (shown in the entry).
    recipes: Mapping[str, Any]


def _call(extractor: Any, name: str, method: str, data: Any) -> Any:
    try:
        return getattr(extractor, method)(data)
    except Exception as exc:  # an extractor is user code: name it in the error
        raise ExtractorError(f"extractor {name!r} failed in {method}: {type(exc).__name__}: {exc}") from exc


@dataclasses.dataclass
class EncodedEndpoints:
    queries: EndpointArtifact
    gallery: EndpointArtifact


def encode_endpoints(extractor: Any, name: str, dataset: Any, timings: dict[str, float]) -> EncodedEndpoints:
    """Fit on the gallery, embed and validate both endpoints (also run before any work for precomputed inputs)."""
    queries_in, gallery_in = dataset.endpoint_data()
    outputs = {}
    for method, data in (("fit", gallery_in), ("encode_queries", queries_in), ("encode_gallery", gallery_in)):
        start = time.perf_counter()
        outputs[method] = _call(extractor, name, method, data)
        timings[method] = time.perf_counter() - start
    queries = validate_embeddings(outputs["encode_queries"], argument="query embeddings", n_rows=dataset.n_queries,
                                  source=f"extractor {name!r}")
    gallery = validate_embeddings(outputs["encode_gallery"], argument="gallery embeddings",
                                  n_rows=dataset.n_gallery, source=f"extractor {name!r}")
    return EncodedEndpoints(EndpointArtifact(queries, embedding_metadata(queries)),
                            EndpointArtifact(gallery, embedding_metadata(gallery)))


@stage(PIPELINE, "encode", version=1, context=("query_inputs", "gallery_inputs", "extractor"), packages=("numpy",))
def encode(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EncodedEndpoints:
    return encode_endpoints(context.extractor(job), job.params["name"], context.dataset, timings)


def _similarity(settings: RetrievalSettings, chain: Any) -> dict[str, Any]:
    return {"similarity": settings.config.similarity}


@stage(PIPELINE, "endpoints", version=1, reads=("encode",), config=_similarity)
def endpoints(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Endpoints:
    """Both endpoints in the similarity's geometry (checked: same width, bounded norms)."""
    dataset = context.dataset
    return prepare_endpoints(inputs["encode"].queries.matrix, inputs["encode"].gallery.matrix,
                             context.settings.config.similarity, query_ids=dataset.query_ids,
                             gallery_ids=dataset.gallery_ids, source=f"extractor {job.params['name']!r}")


def _ranking_config(settings: RetrievalSettings, chain: Any) -> dict[str, Any]:
    return settings.config.to_dict()


def _reverse_config(settings: RetrievalSettings, chain: Any) -> dict[str, Any] | None:
    return None if settings.reverse is None else settings.config.to_dict()


def rank_direction(endpoints_: Endpoints, relevance: Any, exclusions: Any, n_rows: int, n_cols: int,
                   config: Any) -> DirectionResult:
    """Exact ranks of every relevant pair in one direction, then the mean metrics over its queries."""
    plan = plan_blocks(n_rows, n_cols, config.memory_budget_bytes, config.block_size, sparse=endpoints_.sparse)
    with limited_threads(config.thread_limit):
        ranked = rank_relevant(endpoints_, relevance, exclusions, plan)
    per_query = ranking_metrics(relevance.indptr, relevance.data, ranked.ranks, config.cutoffs)
    metrics = {name: float(values.mean()) for name, values in per_query.items()}
    diagnostics = similarity_diagnostics(relevance.indptr, ranked.similarities, ranked.eligible_similarity_sums,
                                         ranked.n_eligible)
    return DirectionResult(int(relevance.shape[0]), metrics, diagnostics, plan.to_dict())


@stage(PIPELINE, "rank_forward", version=1, reads=("endpoints",), context=("relevance",), config=_ranking_config)
def rank_forward(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> DirectionResult:
    dataset = context.dataset
    return rank_direction(inputs["endpoints"], dataset.relevance, dataset.exclusions, dataset.n_queries,
                          dataset.n_gallery, context.settings.config)


@stage(PIPELINE, "rank_reverse", version=1, reads=("endpoints",), context=("relevance",), config=_reverse_config)
def rank_reverse(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> DirectionResult:
    """Gallery items with a relevant query become the queries; relevance and exclusions transposed."""
    reverse, dataset = context.settings.reverse, context.dataset
    return rank_direction(inputs["endpoints"].reversed(reverse.rows), reverse.relevance, reverse.exclusions,
                          int(reverse.rows.size), dataset.n_queries, context.settings.config)


@stage(PIPELINE, "assemble", version=1, reads=("encode", "rank_forward"),
       optional_reads=("rank_reverse",), context=("name", "extractor"), config=_ranking_config, final=True)
def assemble(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> RetrievalEntry:
    """The entry of one extractor: primary score = mean of the directions' primary metric."""
    config, dataset, name = context.settings.config, context.dataset, job.params["name"]
    forward, reverse = inputs["rank_forward"], inputs.get("rank_reverse")
    notes = []
    encoded: EncodedEndpoints = inputs["encode"]
    if dataset.n_gallery > 1 and is_constant(encoded.gallery.matrix):
        notes.append(f"all {dataset.n_gallery} gallery embeddings are identical, so every query sees tied "
                     "similarities and scores by the pessimistic tie rule (worst case); check the extractor")
    scores = [forward.metrics[config.primary_metric]] + ([] if reverse is None else [reverse.metrics[config.primary_metric]])
    metadata = {"query": encoded.queries.metadata, "gallery": encoded.gallery.metadata}
    return RetrievalEntry(name, context.settings.recipes[name], float(np.mean(scores)), forward, reverse, metadata, notes)

"""The stages of a retrieval benchmark, registered under the ``retrieval`` pipeline.

encode (-> compress) -> endpoints -> rank_forward (, rank_reverse) -> assemble, one
chain per extractor and compression variant, executed by the same runners as the
labeled-data benchmark.  ``compress`` (paired compression) fits the variant on the
gallery and applies it to both endpoints.  ``encode``
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

from ...artifacts.codecs import document_codec
from ...extractors.compression import compression_fingerprint
from ..embedding_set import (Embedding, EmbeddingSet, compress_embeddings, embedding_set_codec,
                             evaluated, variant_facts)
from ...inputs.embeddings import embedding_metadata, is_constant, validate_embeddings
from ...execution.registry import COLLECT, EMBED, SCORE, stage
from ...extractors.user_code import user_code
from ..front_door import plain_recipe
from ..._base.threads import limited_threads
from .metrics import ranking_metrics, similarity_diagnostics
from .ranking import Endpoints, plan_blocks, prepare_endpoints, rank_relevant
from .result import DirectionResult, RetrievalEntry

PIPELINE = "retrieval"


@dataclasses.dataclass(frozen=True)
class RetrievalSettings:
    """What retrieval stages read besides the dataset and the extractors: the config, the reverse protocol (or None)."""

    config: Any
    reverse: Any
    #: A ResourceProfilingConfig: measure each endpoint's encoding; None: no profiles.
    resource_profiling: Any = None


def _call(extractor: Any, name: str, method: str, data: Any) -> Any:
    with user_code(f"extractor {name!r} failed in {method}"):
        return getattr(extractor, method)(data)


def evaluated_endpoints(inputs: Mapping[str, Any]) -> tuple[Embedding, Embedding]:
    """(query, gallery) as ranked: the chain's compressed variant when it has one, else as encoded."""
    return evaluated(inputs, "query", "encode"), evaluated(inputs, "gallery", "encode")


def encode_endpoints(extractor: Any, name: str, dataset: Any, timings: dict[str, Any],
                     profiling: Any = None) -> EmbeddingSet:
    """Fit on the gallery, embed and validate both endpoints (also run before any work for precomputed inputs).

    With resource profiling on, each endpoint's encoding is measured on its own and the two profiles are returned
    beside the artifact in ``timings`` (``{"query": ..., "gallery": ...}``).
    """
    from ...extractors.profiling import measured_call
    from ..._base.profile_records import PROFILE_KEY

    queries_in, gallery_in = dataset.endpoint_data()
    outputs, measured = {}, {}
    for method, data in (("fit", gallery_in), ("encode_queries", queries_in), ("encode_gallery", gallery_in)):
        start = time.perf_counter()
        outputs[method], measured[method] = measured_call(
            None if method == "fit" else profiling, extractor, data,
            lambda: _call(extractor, name, method, data))  # noqa: B023 (called now)
        timings[method] = time.perf_counter() - start
    if measured["encode_queries"] is not None:
        timings[PROFILE_KEY] = {"query": measured["encode_queries"], "gallery": measured["encode_gallery"]}
    queries = validate_embeddings(outputs["encode_queries"], argument="query embeddings", n_rows=dataset.n_queries,
                                  source=f"extractor {name!r}",
                                  rows=("queries", "one row per query, in query_ids order"))
    gallery = validate_embeddings(outputs["encode_gallery"], argument="gallery embeddings",
                                  n_rows=dataset.n_gallery, source=f"extractor {name!r}",
                                  rows=("gallery items", "one row per gallery item, in gallery_ids order"))
    return EmbeddingSet({"query": Embedding(queries, embedding_metadata(queries)),
                         "gallery": Embedding(gallery, embedding_metadata(gallery))})


# ----------------------------------------------------------------------------- stored forms
#: Either endpoint may be one repeated row (assemble warns about a constant gallery; it does not fail).
ENDPOINTS = frozenset({"query", "gallery"})
DIRECTION_CODEC = document_codec("ranking_direction", lambda d: d.to_dict(), lambda d: DirectionResult(**d))
ENTRY_CODEC = document_codec("retrieval_entry", lambda e: e.to_dict(), lambda d: RetrievalEntry.from_dict(d, None))


@stage(PIPELINE, "encode", version=2, context=("query_inputs", "gallery_inputs", "extractor"), packages=("numpy",),
       codec=embedding_set_codec(ENDPOINTS), phase=EMBED, runtime="steps",
       steps=("fit", "encode_queries", "encode_gallery"))
def encode(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    return encode_endpoints(context.extractor(job), job.params["name"], context.dataset, timings,
                            profiling=getattr(context.settings, "resource_profiling", None))


@stage(PIPELINE, "compress", version=2, reads=("encode",), context=("extractor",), packages=("numpy", "scikit-learn"),
       config=compression_fingerprint, codec=embedding_set_codec(ENDPOINTS, cached=False), phase=EMBED,
       runtime="seconds")
def compress(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Paired compression: fit the variant on the gallery, apply the same fitted transform to both endpoints."""
    return compress_embeddings(job, inputs, context, reads=("encode",), fit_on="gallery",
                               source=f"extractor {job.params['name']!r}")


def _similarity(settings: RetrievalSettings, chain: Any) -> dict[str, Any]:
    return {"similarity": settings.config.similarity}


@stage(PIPELINE, "endpoints", version=1, reads=("encode",), optional_reads=("compress",), config=_similarity)
def endpoints(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Endpoints:
    """Both endpoints in the similarity's geometry (checked: same width, bounded norms)."""
    dataset, (queries, gallery) = context.dataset, evaluated_endpoints(inputs)
    return prepare_endpoints(queries.matrix, gallery.matrix,
                             context.settings.config.similarity, query_ids=dataset.query_ids,
                             gallery_ids=dataset.gallery_ids, source=f"extractor {job.params['name']!r}")


def _ranking_config(settings: RetrievalSettings, chain: Any) -> dict[str, Any]:
    """What a ranking reads of the config: the cutoffs and the block settings (its artifact records the block plan).

    Not the primary metric (read by assemble), nor ``bidirectional`` (it only plans the reverse job), nor the
    similarity (the endpoints' key holds it).  The thread limit is read: BLAS threads can round the similarities
    differently (RetrievalConfig)."""
    fingerprint = settings.config.fingerprint()
    return {name: fingerprint[name] for name in ("cutoffs", "memory_budget_bytes", "block_size", "thread_limit")}


def _reverse_config(settings: RetrievalSettings, chain: Any) -> dict[str, Any] | None:
    return None if settings.reverse is None else _ranking_config(settings, chain)


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


@stage(PIPELINE, "rank_forward", version=1, reads=("endpoints",), context=("relevance",), config=_ranking_config,
       codec=DIRECTION_CODEC, phase=SCORE, runtime="seconds", scoring_units=lambda settings: 1)
def rank_forward(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> DirectionResult:
    dataset = context.dataset
    return rank_direction(inputs["endpoints"], dataset.relevance, dataset.exclusions, dataset.n_queries,
                          dataset.n_gallery, context.settings.config)


@stage(PIPELINE, "rank_reverse", version=1, reads=("endpoints",), context=("relevance",), config=_reverse_config,
       codec=DIRECTION_CODEC, phase=SCORE, runtime="seconds", scoring_units=lambda settings: 1)
def rank_reverse(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> DirectionResult:
    """Gallery items with a relevant query become the queries; relevance and exclusions transposed."""
    reverse, dataset = context.settings.reverse, context.dataset
    return rank_direction(inputs["endpoints"].reversed(reverse.rows), reverse.relevance, reverse.exclusions,
                          int(reverse.rows.size), dataset.n_queries, context.settings.config)


def _assemble_config(settings: RetrievalSettings, chain: Any) -> dict[str, Any]:
    config = {**_ranking_config(settings, chain), "primary_metric": settings.config.primary_metric}
    if getattr(chain, "variant", None) is not None:  # the entry records its variant (also the raw `none` one)
        config = {**config, "variant": chain.variant.to_dict()}
    return config


@stage(PIPELINE, "assemble", version=1, reads=("encode", "rank_forward"),
       optional_reads=("compress", "rank_reverse"), context=("name", "extractor"), config=_assemble_config,
       final=True, codec=ENTRY_CODEC, phase=COLLECT)
def assemble(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> RetrievalEntry:
    """The entry of one extractor: primary score = mean of the directions' primary metric."""
    config, dataset, name = context.settings.config, context.dataset, job.params["name"]
    forward, reverse = inputs["rank_forward"], inputs.get("rank_reverse")
    notes = []
    queries, gallery = evaluated_endpoints(inputs)
    if dataset.n_gallery > 1 and is_constant(gallery.matrix):
        notes.append(f"all {dataset.n_gallery} gallery embeddings are identical, so every query sees tied "
                     "similarities and scores by the pessimistic tie rule (worst case); check the extractor")
    scores = [forward.metrics[config.primary_metric]] + ([] if reverse is None else [reverse.metrics[config.primary_metric]])
    metadata = {"query": queries.metadata, "gallery": gallery.metadata}
    compression = _compression(job, inputs)
    if compression is not None:
        notes += compression["warnings"]
    return RetrievalEntry(name, plain_recipe(context.extractor(job)), float(np.mean(scores)), forward,
                          reverse, metadata, notes, compression=compression)


def _compression(job: Any, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The paired compression facts of this entry's variant; None without compression variants."""
    return variant_facts(job, inputs, reads=("encode",), fit_on="gallery", result_of=f"extractor {job.params['name']!r}")

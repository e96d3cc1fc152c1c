"""The stages of a zero-shot benchmark, registered under the ``zero_shot`` pipeline.

(fit ->) encode_samples, encode_prompts (-> compress) -> prototypes -> classify ->
overlap -> assemble, one chain per encoder and compression variant, executed by the same
runners as the other pipelines.  An encoder with ``fit(sample_inputs)`` (an
:class:`ExtractorEncoder`) is fitted once, by its ``fit`` job, whose artifact is the fitted
encoder: both encode jobs read it (on dask it travels to them as a future), so the two
branches are always encoded by one fit, even an unseeded one.  The two encode stages stay
separate jobs, so changing a prompt re-embeds only the prompts.  ``compress`` (compressed
variants only) fits the variant on the sample embeddings and applies the same fitted
transform to the prompt embeddings, so both branches stay in one space; every later stage
reads the compressed branches.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...extractors.compression import compression_fingerprint
from ..embedding_set import (EMBEDDINGS_CODEC, Embedding, EmbeddingSet, compress_embeddings, embedding_set_codec,
                             evaluated as evaluated_part, variant_facts)
from ...inputs.embeddings import embedding_metadata, is_constant, validate_embeddings
from ...inputs.modalities import model_modalities
from ...errors import ExtractorError
from ...execution.registry import EMBED, stage
from ...extractors.user_code import user_code
from ..front_door import plain_recipe
from ...scoring.overlap import OverlapIndexScorer, OverlapScoreResult
from ..._base.threads import limited_threads
from .classify import Classification, Prototypes, build_prototypes, classify as classify_samples, plan_blocks
from .encoders import DEFAULT_MODALITIES
from .metrics import zero_shot_metrics

PIPELINE = "zero_shot"
#: Prompts may all embed to one row (a cold run scores them; only constant samples are refused, encode_branch).
PROMPTS = frozenset({"prompts"})


@dataclasses.dataclass(frozen=True)
class ZeroShotSettings:
    """What zero-shot stages read besides the dataset and the encoders: the config, the overlap config."""

    config: Any
    scoring_config: Any
    #: Names of the encoders with ``fit(sample_inputs)``: their chains have a ``fit`` job.
    fitted: frozenset[str] = frozenset()
    #: A ResourceProfilingConfig: measure each branch's encoding (beside the artifact, never in a key); None: off.
    resource_profiling: Any = None


def _call(encoder: Any, name: str, method: str, data: Any) -> Any:
    with user_code(f"encoder {name!r} failed in {method}"):
        return getattr(encoder, method)(data)


def encode_branch(encoder: Any, name: str, branch: str, dataset: Any, timings: dict[str, Any],
                  profiling: Any = None) -> EmbeddingSet:
    """Embed and validate one branch with an encoder already fitted (also run before any work for precomputed
    encoders).

    With resource profiling on, the encode call is measured and its profile returned beside the artifact in
    ``timings`` (one profile: a branch job encodes one branch).
    """
    from ...extractors.profiling import measured_call
    from ..._base.profile_records import PROFILE_KEY

    method = f"encode_{branch}"
    data = dataset.sample_input if branch == "samples" else dataset.flat_prompts
    n_rows = dataset.n_samples if branch == "samples" else len(data)
    start = time.perf_counter()
    raw, measured = measured_call(profiling, encoder, data, lambda: _call(encoder, name, method, data))
    timings[method] = time.perf_counter() - start
    if measured is not None:
        timings[PROFILE_KEY] = measured
    rows = None if branch == "samples" else ("prompts", "one row per prompt, in dataset.flat_prompts order")
    matrix = validate_embeddings(raw, argument=f"{branch} embeddings", n_rows=n_rows, source=f"encoder {name!r}",
                                 rows=rows)
    if branch == "samples" and is_constant(matrix):
        raise ExtractorError(f"encoder {name!r} returned the same sample embedding for every row, so every sample "
                             "gets the same prediction; check the encoder (a collapsed model, or the inputs?)")
    metadata = {**embedding_metadata(matrix), "branch": branch,
                "modality": model_modalities(encoder, DEFAULT_MODALITIES)[branch],
                "source": f"{type(encoder).__name__}.{method}"}
    return EmbeddingSet({branch: Embedding(matrix, metadata)})


# ----------------------------------------------------------------------------- stages
def _fit_config(settings: ZeroShotSettings, chain: Any) -> dict[str, Any] | None:
    """Only the chains of encoders with ``fit`` have a fit job (the others' keys are unchanged by it)."""
    return {} if getattr(chain, "parent", None) in settings.fitted else None


@stage(PIPELINE, "fit", version=1, context=("inputs", "extractor"), config=_fit_config, runtime="seconds")
def fit(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Any:
    """Fit the encoder on the sample inputs (never the labels or prompts); the fitted encoder is the artifact.

    It is fitted here and nowhere else: both encode jobs read this artifact (in this process, on another
    worker, or after a pickle round trip), so the two branches are encoded by one fit.
    """
    encoder = context.extractor(job)
    _call(encoder, job.params["parent"], "fit", context.dataset.sample_input)
    return encoder


def _encoder(job: Any, inputs: Mapping[str, Any], context: Any) -> Any:
    """The encoder a branch job encodes with: the chain's fitted one when it has a fit job."""
    return inputs["fit"] if "fit" in inputs else context.extractor(job)


@stage(PIPELINE, "encode_samples", version=2, optional_reads=("fit",), context=("inputs", "extractor"),
       packages=("numpy",), codec=EMBEDDINGS_CODEC, phase=EMBED, runtime="steps", steps=("encode_samples",))
def encode_samples(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    return encode_branch(_encoder(job, inputs, context), job.params["parent"], "samples", context.dataset, timings,
                         context.settings.resource_profiling)


@stage(PIPELINE, "encode_prompts", version=2, optional_reads=("fit",), context=("prompts", "inputs", "extractor"),
       packages=("numpy",), codec=embedding_set_codec(PROMPTS), phase=EMBED, runtime="steps", steps=("encode_prompts",))
def encode_prompts(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    return encode_branch(_encoder(job, inputs, context), job.params["parent"], "prompts", context.dataset, timings,
                         context.settings.resource_profiling)


def evaluated(inputs: Mapping[str, Any], branch: str) -> Embedding:
    """The branch a stage scores: the chain's compressed variant when it has one, else the encoded branch."""
    return evaluated_part(inputs, branch, f"encode_{branch}")


@stage(PIPELINE, "compress", version=2, reads=("encode_samples", "encode_prompts"), context=("extractor",),
       packages=("numpy", "scikit-learn"), config=compression_fingerprint,
       codec=embedding_set_codec(PROMPTS, cached=False), phase=EMBED, runtime="seconds")
def compress(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Fit the variant on the sample embeddings and apply the same fitted transform to the prompt embeddings.

    The samples go through ``fit_transform`` (for PCA, scikit-learn's own, as in every pipeline), the prompts
    through ``transform``.
    """
    return compress_embeddings(job, inputs, context, reads=("encode_samples", "encode_prompts"), fit_on="samples",
                               source=f"encoder {job.params['parent']!r}")


def _similarity(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    return {"similarity": settings.config.similarity}


@stage(PIPELINE, "prototypes", version=1, reads=("encode_prompts",), optional_reads=("compress",),
       context=("prompts",), config=_similarity, runtime="seconds")
def prototypes(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Prototypes:
    dataset = context.dataset
    names = [dataset.catalog.display(key) for key in dataset.catalog.keys]
    return build_prototypes(evaluated(inputs, "prompts").matrix, np.asarray(dataset.prompt_classes), names,
                            dataset.flat_prompts, context.settings.config.similarity)


@stage(PIPELINE, "classify", version=1, reads=("encode_samples", "prototypes"), optional_reads=("compress",),
       context=("targets",), config=_similarity, runtime="seconds")
def classify(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Classification:
    """Nearest prototype of every sample, blocked under the budget (the blocking never changes the outcome)."""
    config, dataset = context.settings.config, context.dataset
    plan = plan_blocks(dataset.n_samples, dataset.n_classes, config.max_dense_bytes, config.block_rows)
    with limited_threads(config.thread_limit):
        return classify_samples(evaluated(inputs, "samples").matrix, inputs["prototypes"].matrix, dataset.targets.codes,
                                config.similarity, plan)


def _overlap_config(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    return {"overlap": settings.scoring_config.fingerprint()}


@stage(PIPELINE, "overlap", version=2, reads=("encode_samples",), optional_reads=("compress",), context=("targets",),
       packages=("overlapindex",), config=_overlap_config, runtime="seconds")
def overlap(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> OverlapScoreResult:
    """OverlapIndex of the sample embeddings: contextual evidence, never mixed into the zero-shot score.

    Its warnings are recorded in the result (and re-emitted by the benchmark once, also for remote runs).
    """
    return OverlapIndexScorer(context.settings.scoring_config).score(evaluated(inputs, "samples").matrix,
                                                                    context.dataset.targets, warn=False)


def _assemble_config(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    config = settings.config
    fingerprint = {"metric": config.metric, "top_k": list(config.top_k)}
    if getattr(chain, "variant", None) is not None:  # the result records its variant (also the raw `none` one)
        fingerprint["variant"] = chain.variant.to_dict()
    return fingerprint


@stage(PIPELINE, "assemble", version=1, reads=("encode_samples", "encode_prompts", "prototypes", "classify", "overlap"),
       optional_reads=("compress",), context=("name", "extractor", "targets"), config=_assemble_config, final=True)
def assemble(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Any:
    """The result of one encoder: zero-shot scores ranked by the configured metric, overlap beside them."""
    from .result import ZeroShotExtractorResult

    config, dataset, name = context.settings.config, context.dataset, job.params["name"]
    outcome: Classification = inputs["classify"]
    measured = zero_shot_metrics(dataset.targets.codes, outcome, dataset.n_classes, config.top_k)
    keys = list(dataset.catalog.keys)
    per_class = {key: {field: values[i] for field, values in measured["per_class"].items()}
                 for i, key in enumerate(keys)}
    notes = []
    if outcome.n_zero_rows:
        notes.append(f"{outcome.n_zero_rows} sample embedding(s) are all-zero: cosine similarity is 0 to every "
                     "class, so they are predicted as the first class by the tie rule")
    overlap_result: OverlapScoreResult = inputs["overlap"]
    recipe = plain_recipe(context.extractor(job))
    compression = _compression(job, inputs)
    return ZeroShotExtractorResult(
        name=name, extractor_type=recipe.get("type", "encoder"), recipe=recipe, primary_metric_name=config.metric,
        primary_score=measured["scores"][config.metric], scores=measured["scores"],
        top_k_accuracies=measured["top_k_accuracies"], per_class=per_class,
        confusion_matrix=measured["confusion_matrix"], margins=measured["margins"], overlap=overlap_result,
        embedding={"samples": evaluated(inputs, "samples").metadata, "prompts": evaluated(inputs, "prompts").metadata},
        prototypes=inputs["prototypes"].metadata,
        warnings=notes + list(overlap_result.warnings) + list((compression or {}).get("warnings", [])),
        compression=compression)


def _compression(job: Any, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The variant's compression facts plus ``source`` (the encoder's name); None without compression variants."""
    facts = variant_facts(job, inputs, reads=("encode_samples", "encode_prompts"), fit_on="samples",
                          result_of=f"encoder {job.params['parent']!r}")
    return None if facts is None else {**facts, "source": job.params["parent"]}

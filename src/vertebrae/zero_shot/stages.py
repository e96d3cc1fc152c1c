"""The stages of a zero-shot benchmark, registered under the ``zero_shot`` pipeline.

encode_samples, encode_prompts -> prototypes -> classify -> overlap -> assemble, one
chain per encoder, executed by the same runners as the other pipelines.  The two
encode stages are separate jobs, so changing a prompt re-embeds only the prompts.
``encode_prompts`` also declares the sample inputs: an :class:`ExtractorEncoder` is
fitted on the samples, so its prompt embeddings depend on them.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..embeddings import embedding_metadata, is_constant, validate_embeddings
from ..errors import ExtractorError, ScoringWarning, VertebraeError
from ..execution.registry import stage
from ..scoring.overlap import OverlapIndexScorer, OverlapScoreResult
from ..threads import limited_threads
from .classify import Classification, Prototypes, build_prototypes, classify as classify_samples, plan_blocks
from .encoders import modalities
from .metrics import zero_shot_metrics

PIPELINE = "zero_shot"


@dataclasses.dataclass(frozen=True)
class ZeroShotSettings:
    """What zero-shot stages read besides the dataset: the config, the overlap config, the recipes."""

    config: Any
    scoring_config: Any
    #: Encoder name -> its JSON-plain recipe (shown in the result).
    recipes: Mapping[str, Any]


@dataclasses.dataclass
class BranchArtifact:
    """One branch's validated embedding matrix and its metadata (modality, branch, source, shape)."""

    matrix: Any
    metadata: dict[str, Any]


def encode_branch(encoder: Any, name: str, branch: str, dataset: Any, timings: dict[str, float]) -> BranchArtifact:
    """Embed and validate one branch (also run before any work for precomputed encoders)."""
    method = f"encode_{branch}"
    data = dataset.sample_input if branch == "samples" else dataset.flat_prompts
    n_rows = dataset.n_samples if branch == "samples" else len(data)
    start = time.perf_counter()
    try:
        if hasattr(encoder, "fit"):
            encoder.fit(dataset.sample_input)
        raw = getattr(encoder, method)(data)
    except VertebraeError:
        raise
    except Exception as exc:  # an encoder is user code: name it in the error
        raise ExtractorError(f"encoder {name!r} failed in {method}: {type(exc).__name__}: {exc}") from exc
    timings[method] = time.perf_counter() - start
    matrix = validate_embeddings(raw, argument=f"{branch} embeddings", n_rows=n_rows, source=f"encoder {name!r}")
    if branch == "samples" and is_constant(matrix):
        raise ExtractorError(f"encoder {name!r} returned the same sample embedding for every row, so every sample "
                             "gets the same prediction; check the encoder (a collapsed model, or the inputs?)")
    metadata = {**embedding_metadata(matrix), "branch": branch, "modality": modalities(encoder)[branch],
                "source": f"{type(encoder).__name__}.{method}"}
    return BranchArtifact(matrix, metadata)


@stage(PIPELINE, "encode_samples", version=1, context=("inputs", "extractor"), packages=("numpy",))
def encode_samples(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> BranchArtifact:
    return encode_branch(context.extractor(job), job.params["name"], "samples", context.dataset, timings)


@stage(PIPELINE, "encode_prompts", version=1, context=("prompts", "inputs", "extractor"), packages=("numpy",))
def encode_prompts(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> BranchArtifact:
    return encode_branch(context.extractor(job), job.params["name"], "prompts", context.dataset, timings)


def _similarity(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    return {"similarity": settings.config.similarity}


@stage(PIPELINE, "prototypes", version=1, reads=("encode_prompts",), context=("prompts",), config=_similarity)
def prototypes(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Prototypes:
    dataset = context.dataset
    names = [dataset.catalog.display(key) for key in dataset.catalog.keys]
    return build_prototypes(inputs["encode_prompts"].matrix, np.asarray(dataset.prompt_classes), names,
                            dataset.flat_prompts, context.settings.config.similarity)


@stage(PIPELINE, "classify", version=1, reads=("encode_samples", "prototypes"), context=("targets",),
       config=_similarity)
def classify(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Classification:
    """Nearest prototype of every sample, blocked under the budget (the blocking never changes the outcome)."""
    config, dataset = context.settings.config, context.dataset
    plan = plan_blocks(dataset.n_samples, dataset.n_classes, config.max_dense_bytes, config.block_rows)
    with limited_threads(config.thread_limit):
        return classify_samples(inputs["encode_samples"].matrix, inputs["prototypes"].matrix, dataset.targets.codes,
                                config.similarity, plan)


def _overlap_config(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    return {"overlap": settings.scoring_config.to_dict()}


@stage(PIPELINE, "overlap", version=1, reads=("encode_samples",), context=("targets",), packages=("overlapindex",),
       config=_overlap_config)
def overlap(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> OverlapScoreResult:
    """OverlapIndex of the sample embeddings: contextual evidence, never mixed into the zero-shot score.

    Its warnings are recorded in the result (and re-emitted by the benchmark once, also for remote runs).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        return OverlapIndexScorer(context.settings.scoring_config).score(inputs["encode_samples"].matrix,
                                                                        context.dataset.targets)


def _assemble_config(settings: ZeroShotSettings, chain: Any) -> dict[str, Any]:
    config = settings.config
    return {"metric": config.metric, "top_k": list(config.top_k)}


@stage(PIPELINE, "assemble", version=1, reads=("encode_samples", "encode_prompts", "prototypes", "classify", "overlap"),
       context=("name", "extractor", "targets"), config=_assemble_config, final=True)
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
    recipe = context.settings.recipes[name]
    return ZeroShotExtractorResult(
        name=name, extractor_type=recipe.get("type", "encoder"), recipe=recipe, primary_metric_name=config.metric,
        primary_score=measured["scores"][config.metric], scores=measured["scores"],
        top_k_accuracies=measured["top_k_accuracies"], per_class=per_class,
        confusion_matrix=measured["confusion_matrix"], margins=measured["margins"], overlap=overlap_result,
        embedding={"samples": inputs["encode_samples"].metadata, "prompts": inputs["encode_prompts"].metadata},
        prototypes=inputs["prototypes"].metadata, warnings=notes + list(overlap_result.warnings))

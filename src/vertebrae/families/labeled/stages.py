"""The stages of a labeled-data benchmark, registered under the ``benchmark`` pipeline.

extract -> embedding (-> compress) (-> budget) -> score -> (stability, metrics, diagnose)
-> assemble, one chain per result.  ``compress`` is in the plan only for a compressed
variant; the analysis stages read :func:`evaluated` (the compressed matrix when present,
else the raw one), or the ``budget`` stage's subsample when a MemoryConfig is set
(:func:`scoring_input`).  Each stage is a module-level function of (job, input artifacts, run
context, timings); its declaration says what its key hashes.  Adding a stage is one
``@stage`` function here (or in any imported module) plus, for the reports, the field
it adds to :class:`~vertebrae.families.labeled.results.ExtractorResult` — see docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..._base.sparse import is_sparse, sparse_module
from .. import embedding_set
from ...artifacts.codecs import document_codec
from ...extractors.compression import compression_fingerprint
from ..embedding_set import (COMPRESSED_CODEC, EMBEDDINGS_CODEC, Embedding, EmbeddingSet, compress_embeddings,
                             variant_facts)
from ...inputs.embeddings import (column_scale, column_scale_notes, embedding_metadata, is_constant,
                                  validate_embeddings)
from ...errors import ExtractorError
from ...execution.registry import COLLECT, EMBED, SCORE, RowShards, stage
from ...extractors.user_code import user_code
from ...inputs.multimodal import input_source
from ...scoring.metric_result import OVERLAP_METRIC, MetricResult, overlap_metric_result
from ...scoring.memory import BudgetedInput, apply_memory_budget
from ...scoring.metrics import (MetricsArtifact, attributed_results, metric_warnings, metrics_cache_eligible,
                                metrics_key_fingerprint, run_metrics)
from ...scoring.overlap import OverlapIndexScorer, OverlapScoreResult
from ...scoring.separatix import SeparatixResult, SeparatixScorer
from ...scoring.stability import PROTOCOL_VERSION as STABILITY_PROTOCOL
from ...scoring.stability import StabilityResult, run_stability_analysis, stored_round
from ...inputs.targets import MultiLabelTargets, RegressionTargets, Targets

PIPELINE = "benchmark"


def evaluated(inputs: Mapping[str, Any]) -> Embedding:
    """The embedding the analyses read: the chain's compressed variant when it has one, else the raw embedding."""
    return embedding_set.evaluated(inputs, None, "embedding")


@dataclasses.dataclass
class ScoreArtifact:
    overlap: OverlapScoreResult


@dataclasses.dataclass
class StabilityArtifact:
    stability: StabilityResult


def estimator_targets(targets: Targets) -> Any:
    """Targets in the form a supervised scikit-learn transformer accepts."""
    if isinstance(targets, MultiLabelTargets):
        return targets.indicator
    if isinstance(targets, RegressionTargets):
        return targets.values if targets.values.shape[1] > 1 else targets.values[:, 0]
    return targets.keys.astype(str)


def scorer_config(settings: Any, target_type: str) -> Any:
    """The overlap config that scores ``target_type``: the continuous one for regression, else the fixed one."""
    return settings.continuous_config if target_type == "regression" else settings.scoring_config


def scoring_fingerprint(settings: Any, chain: Any) -> dict[str, Any]:
    """What a scoring key hashes of the scorer: the fingerprint of the config that applies to the chain's targets
    (both, for a chain that does not say its target type)."""
    target_type = getattr(chain, "target_type", None)
    if target_type is None:
        return {"overlap": settings.scoring_config.fingerprint(), "continuous": settings.continuous_config.fingerprint()}
    name = "continuous" if target_type == "regression" else "overlap"
    return {name: scorer_config(settings, target_type).fingerprint()}


# ----------------------------------------------------------------------------- stored forms
def _without_separatix_runtime(data: dict[str, Any]) -> dict[str, Any]:
    """Runtimes never enter an artifact: Separatix's wall-clock fields are dropped (read back as None)."""
    from .results import pop_timings

    pop_timings(data)
    data.pop("runtime_seconds", None)  # None when the result was itself read back from a store
    return data


def _result_document(result: Any) -> dict[str, Any]:
    data = result.to_dict()
    if data.get("separatix") is not None:
        data["separatix"] = _without_separatix_runtime(data["separatix"])
    return data


def _result(document: Mapping[str, Any]) -> Any:
    from .results import ExtractorResult

    data = dict(document)
    if data.get("separatix") is not None:
        data["separatix"] = {**data["separatix"], "runtime_seconds": None}
    return ExtractorResult.from_dict(data)


SCORE_CODEC = document_codec("overlap_score", lambda a: {"overlap": a.overlap.to_dict()},
                             lambda d: ScoreArtifact(OverlapScoreResult.from_dict(d["overlap"])))
STABILITY_CODEC = document_codec("stability", lambda a: {"stability": a.stability.to_dict()},
                                 lambda d: StabilityArtifact(StabilityResult.from_dict(d["stability"])))
METRICS_CODEC = document_codec("metrics", lambda a: {"results": [m.to_dict() for m in a.results],
                                                     "violations": list(a.violations)},
                               lambda d: MetricsArtifact([MetricResult.from_dict(m) for m in d["results"]],
                                                         list(d["violations"])))
SEPARATIX_CODEC = document_codec("separatix", lambda r: _without_separatix_runtime(r.to_dict()),
                                 lambda d: SeparatixResult.from_dict({**d, "runtime_seconds": None}))
RESULT_CODEC = document_codec("extractor_result", _result_document, _result)


# ----------------------------------------------------------------------------- the steps of an extraction
def fit_extractor(job: Any, context: Any) -> Any:
    """Step 1 of extract: the job's extractor fitted on every dataset row (returned, so it can travel)."""
    extractor, dataset = context.extractor(job), context.dataset
    supervised = bool(getattr(extractor, "supervised", False))
    with user_code(f"extractor {job.params['parent']!r} failed during fit/transform"):
        extractor.fit(dataset.extractor_input, estimator_targets(dataset.targets) if supervised else None)
    return extractor


def transform_rows(job: Any, extractor: Any, rows: Any, profiling: Any = None,
                   timings: dict[str, Any] | None = None) -> dict[str | None, Any]:
    """Step 2 of extract: the fitted extractor's raw output(s) for some input rows (profiled when asked)."""
    with user_code(f"extractor {job.params['parent']!r} failed during fit/transform"):
        return _transform(extractor, rows, profiling, {} if timings is None else timings)


def measured_rows(job: Any, extractor: Any, rows: Any, profiling: Any,
                  worker: str) -> tuple[dict[str | None, Any], Any]:
    """Step 2 on a cluster worker with resource profiling on: the outputs and that worker's measurement of them."""
    from ...extractors.profiling import measure_on_worker

    return measure_on_worker(profiling, extractor, rows, lambda: transform_rows(job, extractor, rows), worker)


def checked_rows(job: Any, outputs: dict[str | None, Any], start: int, stop: int) -> dict[str | None, Any]:
    """A shard of step 2 validated where it is made (rows ``start:stop``), so that an invalid one is never stored."""
    source = f"extractor {job.params['parent']!r}"
    return {output: validate_embeddings(value, argument=f"output shard {start}:{stop}", source=source, first_row=start)
            for output, value in outputs.items()}


def stacked_outputs(job: Any, context: Any, parts: list[dict[str | None, Any]]) -> EmbeddingSet:
    """Step 3 of extract: stack the row parts (in row order) of every output, then validate each matrix."""
    dataset, name = context.dataset, job.params["parent"]
    outputs = {}
    for output in parts[0]:
        source = f"extractor {name!r}" + ("" if output is None else f" output {output!r}")
        raw = parts[0][output] if len(parts) == 1 else stack_rows([part[output] for part in parts])
        matrix = validate_embeddings(raw, argument="output", n_rows=dataset.n_samples, source=source)
        if is_constant(matrix):
            raise ExtractorError(f"{source} returned the same embedding for every row, so it separates nothing; "
                                 "check the extractor (a collapsed or untrained model?)")
        outputs[output] = Embedding(matrix, embedding_metadata(matrix))
    return EmbeddingSet(outputs)


def stack_rows(parts: list[Any]) -> Any:
    """One matrix from validated row shards (:func:`checked_rows`, or parts of a stored embedding): sparse shards
    stack as CSR, dense ones as one array; the stacked matrix is validated as a whole by its caller."""
    if any(is_sparse(part) for part in parts):
        sparse = sparse_module()
        return sparse.csr_matrix(sparse.vstack([sparse.csr_matrix(part) for part in parts], format="csr"))
    return np.concatenate(parts, axis=0)


def _transform(extractor: Any, X: Any, profiling: Any, timings: dict[str, Any]) -> dict[str | None, Any]:
    """Every output of the extractor; measured (into ``timings``, beside the artifact) when profiling is on."""
    def call() -> dict[str | None, Any]:
        if hasattr(extractor, "transform_many"):
            return dict(extractor.transform_many(X))
        return {None: extractor.transform(X)}

    if profiling is None or not profiling.enabled:
        return call()
    from ...extractors.profiling import profile_extraction
    from ..._base.profile_records import PROFILE_KEY

    outputs, timings[PROFILE_KEY] = profile_extraction(profiling, extractor, X, call)
    return outputs


# ----------------------------------------------------------------------------- stages
@stage(PIPELINE, "extract", version=1, context=("inputs", "fit_targets", "extractor"), packages=("numpy",),
       codec=EMBEDDINGS_CODEC, phase=EMBED, runtime="seconds_and_steps",
       shards=RowShards(fit_extractor, transform_rows, stacked_outputs, lambda context: context.dataset.extractor_input,
                        measured_rows, checked_rows))
def extract(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Fit the extractor on the dataset inputs (with targets only when it is supervised), embed, validate.

    The three steps are separate functions so a distributed runner can fit once and
    transform row shards in parallel (:mod:`vertebrae.execution.dask`); run here they
    are one call each on the whole dataset.
    """
    extractor = fit_extractor(job, context)
    profiling = getattr(context.settings, "resource_profiling", None)
    return stacked_outputs(job, context, [transform_rows(job, extractor, context.dataset.extractor_input, profiling,
                                                       timings)])


@stage(PIPELINE, "embedding", version=1, reads=("extract",), context=("output",))
def embedding(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Embedding:
    """The one output this chain scores (a view of the extract artifact, no copy)."""
    produced: EmbeddingSet = inputs["extract"]
    output = job.params["output"]
    if output not in produced.parts:
        raise ExtractorError(f"extractor {job.params['name']!r} did not produce output {output!r}; it produced "
                             f"{sorted(map(str, produced.parts))}")
    embedding = produced[output]
    return Embedding(embedding.matrix, dict(embedding.metadata))


@stage(PIPELINE, "compress", version=3, reads=("embedding",), context=("extractor",),
       packages=("numpy", "scikit-learn"), config=compression_fingerprint, codec=COMPRESSED_CODEC, phase=EMBED,
       runtime="seconds_and_steps")
def compress(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Fit the chain's variant on the evaluated embedding and apply it (transductive, like every variant)."""
    return compress_embeddings(job, inputs, context, reads=("embedding",), fit_on=None,
                               source=f"extractor {job.params['name']!r}")


def _budget_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """The budget, the scorer's fingerprint and the tile size: the estimate of a classification scoring call's memory
    reads ``offline_chunk_size``, which the scores themselves never depend on."""
    memory = getattr(settings, "memory_config", None)
    if memory is None:
        return None
    tiles = {} if getattr(chain, "target_type", None) == "regression" else \
        {"offline_chunk_size": settings.scoring_config.offline_chunk_size}
    return {"memory": memory.fingerprint(), **scoring_fingerprint(settings, chain), **tiles}


@stage(PIPELINE, "budget", version=1, reads=("embedding",), optional_reads=("compress",),
       context=("targets", "groups"), config=_budget_config)
def budget(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> BudgetedInput:
    """The MemoryConfig check before scoring (only in plans with a MemoryConfig): subsample or fail."""
    settings = context.settings
    return apply_memory_budget(evaluated(inputs).matrix, context.targets(job), context.dataset.groups,
                               settings.memory_config, settings.scoring_config, settings.continuous_config,
                               source=f"extractor {job.params['name']!r}")


def scoring_input(job: Any, inputs: Mapping[str, Any], context: Any) -> tuple[Any, Targets, Any]:
    """(matrix, targets, groups) every scoring stage scores: the budget's subsample when there is one."""
    budgeted: BudgetedInput | None = inputs.get("budget")
    if budgeted is not None:
        return budgeted.matrix, budgeted.targets, budgeted.groups
    return evaluated(inputs).matrix, context.targets(job), context.dataset.groups


@stage(PIPELINE, "score", version=4, reads=("embedding",), optional_reads=("compress", "budget"),
       context=("targets",), packages=("overlapindex",), config=scoring_fingerprint, codec=SCORE_CODEC, phase=SCORE,
       runtime="seconds_and_steps", scoring_units=lambda settings: 1)
def score(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> ScoreArtifact:
    settings = context.settings
    scorer = OverlapIndexScorer(settings.scoring_config, settings.continuous_config)
    matrix, targets, _ = scoring_input(job, inputs, context)
    return ScoreArtifact(scorer.score(matrix, targets, warn=False))  # the front door warns, named


def _stability_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    if settings.stability_config is None or settings.stability_config.adaptive:  # auto: stability_round instead
        return None
    return {"stability": settings.stability_config.fingerprint(), "protocol_version": STABILITY_PROTOCOL,
            **scoring_fingerprint(settings, chain)}


@stage(PIPELINE, "stability", version=3, reads=("embedding",), optional_reads=("compress", "budget"),
       context=("targets",), packages=("overlapindex",), config=_stability_config, codec=STABILITY_CODEC,
       phase=SCORE, runtime="seconds_and_steps", scoring_units=lambda settings: settings.stability_config.repeats)
def stability(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> StabilityArtifact:
    """Repeated overlap scoring of the matrix the score stage scored, with the same scorer settings.

    Every extractor gets the same StabilityConfig, hence the same seeds (and rows), which
    is what makes the ranking-stability comparison meaningful.
    """
    settings = context.settings
    scorer = OverlapIndexScorer(settings.scoring_config, settings.continuous_config)
    matrix, targets, _ = scoring_input(job, inputs, context)
    result = run_stability_analysis(matrix, targets, config=settings.stability_config, scorer=scorer)
    return StabilityArtifact(result)


def repeat_window(settings: Any) -> tuple[int, int]:
    """The repeats of the adaptive round a plan runs: its ``stability_window`` (round state:
    front_door.RoundSettings), else the first round."""
    window = getattr(settings, "stability_window", None)
    return (0, settings.stability_config.min_repeats) if window is None else tuple(window)


def _round_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """Only with ``repeats="auto"``: the draws and the repeat range (not the stopping rule, so rounds are reused)."""
    config = settings.stability_config
    if config is None or not config.adaptive:
        return None
    return {"draws": config.draws(), "window": list(repeat_window(settings)), **scoring_fingerprint(settings, chain)}


#: Stored and reused by the cache (unlike a fixed run's stability document): a rerun of an adaptive run reads its
#: rounds back instead of rescoring them.
ROUND_CODEC = dataclasses.replace(document_codec("stability_round", lambda a: {"stability": a.stability.to_dict()},
                                                 lambda d: StabilityArtifact(StabilityResult.from_dict(d["stability"]))),
                                  cached=True)


@stage(PIPELINE, "stability_round", version=4, reads=("embedding",), optional_reads=("compress", "budget"),
       context=("targets",), packages=("overlapindex",), config=_round_config, codec=ROUND_CODEC, final=True,
       runtime="seconds", scoring_units=lambda settings: len(range(*repeat_window(settings))))
def stability_round(job: Any, inputs: Mapping[str, Any], context: Any,
                    timings: dict[str, float]) -> StabilityArtifact:
    """One round of adaptive repeats (``repeats="auto"``): repeats ``start..stop-1`` of the stability plan.

    A final artifact, so every runner hands it back; vertebrae.selection.adaptive_repeats merges the rounds.
    """
    settings = context.settings
    scorer = OverlapIndexScorer(settings.scoring_config, settings.continuous_config)
    matrix, targets, _ = scoring_input(job, inputs, context)
    return StabilityArtifact(stored_round(run_stability_analysis(matrix, targets, config=settings.stability_config,
                                                                scorer=scorer, window=repeat_window(settings))))


def _metrics_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """The metrics and the one scorer setting they read: the seed the score stage scores with."""
    if not settings.metrics:
        return None
    return {**metrics_key_fingerprint(settings.metrics), "seed": scoring_seed(settings, chain)}


def scoring_seed(settings: Any, chain: Any) -> int | list[int]:
    """The seed the score stage uses for the chain's targets (both configs' seeds for a chain that does not say)."""
    target_type = getattr(chain, "target_type", None)
    if target_type is None:
        return [settings.scoring_config.random_state, settings.continuous_config.random_state]
    return scorer_config(settings, target_type).random_state


def _metrics_safe(settings: Any) -> bool:
    return metrics_cache_eligible(settings.metrics)


def _metric_steps(settings: Any) -> tuple[str, ...]:
    return tuple(f"metric.{metric.name}" for metric in settings.metrics)  # run_metrics times each one


@stage(PIPELINE, "metrics", version=2, reads=("embedding",), optional_reads=("compress", "budget"),
       context=("targets", "groups"), config=_metrics_config, safe=_metrics_safe, codec=METRICS_CODEC, phase=SCORE,
       runtime="seconds_and_steps", steps=_metric_steps)
def metrics(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> MetricsArtifact:
    """Custom metrics on the matrix the score stage scores, with the seed it scores with (not the score itself:
    an overlap setting that changes the score leaves the metrics' key alone).

    The artifact names no extractor (every chain with this embedding shares it): assemble phrases failures.
    """
    matrix, targets, groups = scoring_input(job, inputs, context)
    seed = scorer_config(context.settings, targets.target_type).random_state
    return run_metrics(context.settings.metrics, matrix, targets, groups, seed=seed, timings=timings)


def _diagnose_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    config = settings.separatix_config
    if config is None or not config.enabled:
        return None
    # Separatix reads the applicable scorer config and the fixed one's dense budget (also for regression targets).
    return {"separatix": config.fingerprint(), **scoring_fingerprint(settings, chain),
            "overlap_max_dense_bytes": settings.scoring_config.max_dense_bytes}


@stage(PIPELINE, "diagnose", version=2, reads=("embedding", "score"), optional_reads=("compress", "budget"),
       context=("targets", "groups"), packages=("separatix",), config=_diagnose_config, codec=SEPARATIX_CODEC,
       phase=SCORE, runtime="steps", steps=("separatix",))
def diagnose(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> SeparatixResult:
    """Separatix on the matrix the score stage scored, gated by that overlap score."""
    settings = context.settings
    scorer = SeparatixScorer(settings.separatix_config, settings.scoring_config, settings.continuous_config)
    matrix, targets, groups = scoring_input(job, inputs, context)
    result = scorer.diagnose(matrix, targets, overlap_score=inputs["score"].overlap.score, groups=groups,
                             source=f"extractor {job.params['name']!r}")
    timings["separatix"] = result.runtime_seconds  # beside the artifact too: a stored diagnosis carries no runtime
    return result


def _assemble_config(settings: Any, chain: Any) -> dict[str, Any]:
    config = {"primary_metric": settings.primary_metric, "quality_tolerance": settings.quality_tolerance}
    if getattr(chain, "variant", None) is not None:  # the result records its variant (also the raw `none` one)
        config["variant"] = chain.variant.to_dict()
    return config


@stage(PIPELINE, "assemble", version=2, reads=("embedding", "score"),
       optional_reads=("compress", "budget", "stability", "metrics", "diagnose"),
       context=("name", "output", "view", "extractor"), config=_assemble_config, final=True, codec=RESULT_CODEC,
       phase=COLLECT)
def assemble(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Any:
    """Build the ExtractorResult of one chain from its stage artifacts."""
    from ..result_protocol import recommendation_label
    from .results import ExtractorResult

    settings, extractor = context.settings, context.extractor(job)
    embedding_artifact = evaluated(inputs)
    overlap = inputs["score"].overlap
    separatix: SeparatixResult | None = inputs.get("diagnose")
    repeated: StabilityArtifact | None = inputs.get("stability")
    measured = attributed_results(inputs.get("metrics", MetricsArtifact()), job.params["name"])
    metrics = {OVERLAP_METRIC: overlap_metric_result(overlap), **{m.name: m for m in measured}}
    primary = metrics[settings.primary_metric]
    weakest = overlap.weakest_class()
    recipe = extractor.recipe()
    compression = _compression(job, inputs)
    embedding_metadata = {**embedding_artifact.metadata, "parent_extractor_name": job.params["parent"]}
    if job.params["output"] is not None:
        embedding_metadata.update(output_metadata(extractor, job.params["output"]))
    embedding_metadata.update(input_source(extractor, context.dataset))  # multi-modal: fields read, source
    budgeted: BudgetedInput | None = inputs.get("budget")
    if budgeted is not None:
        embedding_metadata["memory_budget"] = budgeted.record
    budget_notes = [] if budgeted is None or budgeted.warning is None else [budgeted.warning]
    scale = column_scale(embedding_artifact.matrix) if overlap.metadata.get("normalize_embeddings") else None
    if scale is not None:  # a few columns decide the normalized geometry (warned as a DataWarning, named)
        embedding_metadata["column_scale"] = scale
    view = job.params.get("view")
    return ExtractorResult(
        name=job.params["name"], extractor_type=recipe.get("type", type(extractor).__name__), recipe=recipe,
        overlap=overlap, metrics=metrics, primary_metric_name=primary.name,
        primary_score=primary.score if primary.rankable else None, embedding=embedding_metadata,
        warnings=budget_notes + list(overlap.warnings) + metric_warnings(measured)
        + list((compression or {}).get("warnings", [])) + column_scale_notes(embedding_metadata),
        recommendation=recommendation_label(overlap.score, overlap.target_type),
        weakest_class=None if weakest is None else {"key": weakest[0], "display": overlap.display(weakest[0]),
                                                    "score": weakest[1]},
        separatix=separatix, stability=None if repeated is None else repeated.stability,
        compression=compression,
        target_view=view[1] if view is not None and view[0] == "target" else None,
        label_view=view[1] if view is not None and view[0] == "level" else None)


def _referee_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """Only in a referee round (its ``referee_finalists``, round state: front_door.RoundSettings), only for its
    finalists; the key hashes the metric and the seeds, never the name."""
    referee = getattr(settings, "referee", None)
    if referee is None or chain is None or chain.name not in getattr(settings, "referee_finalists", ()):
        return None
    return {"referee": metrics_key_fingerprint([referee])["metrics"][0], "seed": scoring_seed(settings, chain)}


def _referee_safe(settings: Any) -> bool:
    return settings.referee is None or metrics_cache_eligible([settings.referee])


#: A referee score (a cross-validated probe) costs more than its read: the cache reuses it, like an extraction.
REFEREE_CODEC = dataclasses.replace(document_codec("referee", lambda r: r.to_dict(), MetricResult.from_dict),
                                    cached=True)


@stage(PIPELINE, "referee", version=1, reads=("embedding",), optional_reads=("compress", "budget"),
       context=("targets", "groups"), config=_referee_config, safe=_referee_safe, codec=REFEREE_CODEC, phase=SCORE,
       runtime="seconds", final=True)
def referee(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> MetricResult:
    """The referee metric on one finalist's scored matrix, with the seed the score stage used (see vertebrae.selection.referee).

    Planned only in the referee round (``Benchmark.follow_up``); a failing metric is an invalid score, as in
    ``metrics``.  The artifact names no extractor.
    """
    matrix, targets, groups = scoring_input(job, inputs, context)
    seed = scorer_config(context.settings, targets.target_type).random_state
    return run_metrics([context.settings.referee], matrix, targets, groups, seed=seed).results[0]


def _compression(job: Any, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The variant's compression facts (plus ``source``: the result name of its raw embedding); None without
    compression variants."""
    facts = variant_facts(job, inputs, reads=("embedding",), fit_on=None, result_of=f"extractor {job.params['name']!r}")
    if facts is None:
        return None
    parent, output = job.params["parent"], job.params["output"]
    return {**facts, "source": parent if output is None else f"{parent}:{output}"}


def output_metadata(extractor: Any, output: str) -> dict[str, Any]:
    """``output_name`` plus what a multi-output extractor says about the output (hidden layer, pooling)."""
    described = extractor.output_metadata().get(output, {}) if hasattr(extractor, "output_metadata") else {}
    return {"output_name": output, "hidden_layer": described.get("hidden_layer"),
            "pooling": described.get("pooling")}


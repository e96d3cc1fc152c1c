"""The stages of a screened benchmark, registered under the ``screening`` pipeline.

``extract_rows`` embeds only the rows a screening rung adds (its *increment*): the rows are part of
its key (honest keys), so the cache reuses an increment exactly when the same rows of the same
inputs are embedded by the same extractor again.  The extractor is fitted on every dataset row, as
in ``benchmark/extract``, so row i has the same embedding in every rung and in the full extraction;
a multi-output extractor embeds each increment once for all its outputs.

A rung's candidates are scored by a plan of the same pipeline over the rung's rows (in rung order):
``extract_rows`` of all of them — never run, but assembled by the rung loop from the increments and
handed to the runner as a ``given`` artifact (it is what that job would compute) — then the
benchmark's own ``embedding`` and ``compress`` stages, and ``rung_score``, the benchmark's
``stability`` stage under the rung's paired repeats and targets (:class:`RungContext`).  So rung
scoring has the keys, cache and runners of every stage: its jobs run on a cluster's workers, and a
rerun reads the scores back (``RUNG_CODEC`` is cached).

The finalists' ``benchmark/extract`` jobs are not run again: the screening loop
(:mod:`vertebrae.selection.screening`) assembles each one's full-data embedding from the increments in the
dataset's row order (the same artifact a whole extraction makes, as a row-sharded extraction is:
the increments are shards of the rows) and settles it through the cache under the job's own key.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..families.labeled import stages as benchmark_stages
from ..artifacts.codecs import document_codec
from ..families.labeled.stages import StabilityArtifact, fit_extractor, scorer_config, scoring_seed, transform_rows
from ..extractors.compression import compression_fingerprint
from ..families.embedding_set import EMBEDDINGS_CODEC, Embedding, EmbeddingSet
from ..inputs.embeddings import embedding_metadata, validate_embeddings
from ..execution.context import RunContext
from ..execution.registry import EMBED, get_stage, stage
from .._base.fingerprint import content_sha256
from ..inputs.images import ImageInputs
from ..inputs.multimodal import MultiModalInputs
from ..errors import MetricError
from ..scoring.metrics import metrics_cache_eligible, metrics_key_fingerprint, run_metrics
from ..scoring.stability import StabilityConfig, StabilityResult, plan_repeats
from ..inputs.targets import Targets

PIPELINE = "screening"


@dataclasses.dataclass(frozen=True)
class RungSettings:
    """What a rung's jobs read: the rows its ``extract_rows`` jobs embed (a rung's increment, or the whole rung in
    rung order when scoring it), the benchmark's overlap configs and, when scoring, the rung's paired repeats."""

    rows: np.ndarray
    scoring_config: Any
    continuous_config: Any
    #: The paired repeats every candidate gets on the rung; None: an extraction plan (no ``rung_score`` jobs).
    stability_config: StabilityConfig | None = None
    #: The metric that scores the repeats (``ScreeningConfig.metric``); None: the overlap score (``rung_score``).
    metric: Any = None


class RungContext(RunContext):
    """The run context of a rung's plan: the jobs score the targets of the rung's rows, in rung order."""

    def targets(self, job: Any) -> Targets:
        return self.dataset.targets.subset(self.settings.rows)


def _rows_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """The rows (a content hash) when planning a rung; None (not planned) otherwise."""
    if not isinstance(settings, RungSettings):
        return None
    return {"rows": content_sha256(settings.rows), "n_rows": int(settings.rows.size)}


@stage(PIPELINE, "extract_rows", version=1, context=("inputs", "fit_targets", "extractor"), packages=("numpy",),
       config=_rows_config, codec=EMBEDDINGS_CODEC, phase=EMBED, runtime="seconds_and_steps", final=True)
def extract_rows(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Fit the extractor on every row (as ``benchmark/extract`` does), embed only the increment's rows.

    An extractor that declares ``shardable = False`` (a precomputed matrix: nothing to compute, and it ignores the
    rows it is given) is asked for every row, and the increment's rows are taken from its output.
    """
    rows = context.settings.rows
    extractor = fit_extractor(job, context)
    inputs = context.dataset.extractor_input
    if getattr(extractor, "shardable", True):
        outputs = transform_rows(job, extractor, rows_of(inputs, rows), None, timings)
    else:
        outputs = {output: rows_of(raw, rows) for output, raw in transform_rows(job, extractor, inputs).items()}
    name = job.params["parent"]
    return EmbeddingSet({output: _validated(raw, rows.size, f"extractor {name!r}" + (
        "" if output is None else f" output {output!r}")) for output, raw in outputs.items()})


@stage(PIPELINE, "embedding", version=1, reads=("extract_rows",), context=("output",))
def embedding(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> Embedding:
    """The chain's output on the rows: the benchmark's ``embedding`` stage over this pipeline's extraction."""
    return benchmark_stages.embedding(job, {"extract": inputs["extract_rows"]}, context, timings)


@stage(PIPELINE, "compress", version=1, reads=("embedding",), context=("extractor",),
       packages=("numpy", "scikit-learn"), config=compression_fingerprint)
def compress(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """The benchmark's ``compress`` stage on the rung's rows (fitted on them, as the full evaluation fits it on every
    row); not stored.  Its notes are silenced: the full evaluation reports each variant's notes, named, once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return benchmark_stages.compress(job, inputs, context, timings)


def _rung_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """Only when scoring a rung: its rows, and the config the benchmark's ``stability`` stage hashes (the repeats,
    their seed, the overlap configs)."""
    if not isinstance(settings, RungSettings) or settings.stability_config is None or settings.metric is not None:
        return None
    return {"rows": content_sha256(settings.rows), **get_stage("benchmark", "stability").config(settings, chain)}


#: Stored and reused by the cache, as an adaptive round is: a rerun reads a rung's scores back instead of rescoring.
RUNG_CODEC = dataclasses.replace(document_codec("rung_score", lambda a: {"stability": a.stability.to_dict()},
                                                lambda d: StabilityArtifact(StabilityResult.from_dict(d["stability"]))),
                                 cached=True)


@stage(PIPELINE, "rung_score", version=2, reads=("embedding",), optional_reads=("compress",), context=("targets",),
       packages=("overlapindex",), config=_rung_config, codec=RUNG_CODEC, final=True, runtime="seconds",
       scoring_units=lambda settings: settings.stability_config.repeats)
def rung_score(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> StabilityArtifact:
    """A candidate's paired repeats on the rung: the benchmark's ``stability`` stage, whose settings here are the
    rung's repeats and whose targets are the rung's rows (:class:`RungContext`)."""
    return benchmark_stages.stability(job, inputs, context, timings)


@dataclasses.dataclass
class RungMetricArtifact:
    """A candidate's repeat scores on a rung by the screening metric, with the repeats' scoring seeds."""

    repeat_scores: list[float]
    scoring_seeds: list[int]
    warnings: list[str]


def _rung_metric_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """Only when scoring a rung with ``ScreeningConfig.metric``: its rows, the repeats, the metric's identity and
    the seed its first repeat scores with (the overlap scorer's, as the metrics stage passes it)."""
    if not isinstance(settings, RungSettings) or settings.stability_config is None or settings.metric is None:
        return None
    return {"rows": content_sha256(settings.rows), "stability": settings.stability_config.fingerprint(),
            "seed": scoring_seed(settings, chain), **metrics_key_fingerprint([settings.metric])}


RUNG_METRIC_CODEC = dataclasses.replace(document_codec("rung_metric", dataclasses.asdict,
                                                       lambda d: RungMetricArtifact(**d)), cached=True)


@stage(PIPELINE, "rung_metric", version=1, reads=("embedding",), optional_reads=("compress",),
       context=("targets", "groups"), config=_rung_metric_config, safe=lambda s: metrics_cache_eligible([s.metric]),
       codec=RUNG_METRIC_CODEC, final=True, runtime="seconds",
       scoring_units=lambda settings: settings.stability_config.repeats)
def rung_metric(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> RungMetricArtifact:
    """A candidate's paired repeats on the rung scored by the screening metric: repeat r calls the metric on the
    rows and with the seed repeat r of the ``rung_score`` stage would score (the same draws for every candidate),
    through :func:`~vertebrae.scoring.metrics.run_metrics` (the metrics stage's label boundary).  A failing or
    invalid score fails the job: a candidate the metric cannot rank cannot be screened by it."""
    settings = context.settings
    matrix, targets, _ = benchmark_stages.scoring_input(job, inputs, context)
    groups = None if context.dataset.groups is None else context.dataset.groups.subset(settings.rows)
    repeats, _ = plan_repeats(targets, settings.stability_config, primary_seed=scorer_config(settings, targets.target_type).random_state)
    scores, notes = [], []
    for index, repeat in enumerate(repeats):
        rows = repeat.rows
        artifact = run_metrics([settings.metric], matrix if rows is None else matrix[rows],
                               targets if rows is None else targets.subset(rows),
                               None if groups is None or rows is None else groups.subset(rows), seed=repeat.scoring_seed)
        result = artifact.results[0]
        if result.error is not None or not result.aggregate_valid:
            raise MetricError(f"screening metric {settings.metric.name!r} cannot rank extractor "
                              f"{job.params['name']!r} on rung repeat {index}: "
                              f"{result.error or 'its score is marked invalid'}; screen by another metric")
        scores.append(result.score)
        notes.extend(result.warnings)
    return RungMetricArtifact(scores, [r.scoring_seed for r in repeats], list(dict.fromkeys(notes)))


def _validated(raw: Any, n_rows: int, source: str) -> Embedding:
    matrix = validate_embeddings(raw, argument="output", n_rows=n_rows, source=source)
    return Embedding(matrix, embedding_metadata(matrix))


def rows_of(inputs: Any, rows: Any) -> Any:
    """The given rows of an extractor input (an array, a sparse matrix, a DataFrame, a sequence, multi-modal fields;
    lazy images stay lazy)."""
    if isinstance(inputs, MultiModalInputs):
        return MultiModalInputs({field: rows_of(values, rows) for field, _, values in inputs}, inputs.modalities)
    if isinstance(inputs, ImageInputs):
        return inputs.subset(rows)
    if hasattr(inputs, "iloc"):
        return inputs.iloc[rows]
    if hasattr(inputs, "shape"):
        return inputs[rows]
    return [inputs[int(i)] for i in rows]

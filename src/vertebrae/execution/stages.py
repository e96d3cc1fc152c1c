"""Stage functions: pure functions of their inputs, so any runner can execute them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from ..embeddings import embedding_metadata, is_constant, validate_embeddings
from ..errors import ExtractorError, VertebraeError
from ..scoring.metric_result import OVERLAP_METRIC, overlap_metric_result
from ..scoring.metrics import MetricsArtifact
from ..scoring.overlap import OverlapIndexScorer, OverlapScoreResult
from ..scoring.separatix import SeparatixResult, SeparatixScorer
from ..scoring.stability import StabilityResult, run_stability_analysis
from ..targets import MultiLabelTargets, RegressionTargets, Targets


@dataclasses.dataclass
class EmbeddingArtifact:
    """The evaluated embedding matrix of one extractor plus how it was made."""

    extractor: str
    matrix: Any
    metadata: dict[str, Any]
    seconds: float


@dataclasses.dataclass
class ScoreArtifact:
    overlap: OverlapScoreResult
    seconds: float


def estimator_targets(targets: Targets) -> Any:
    """Targets in the form a supervised scikit-learn transformer accepts."""
    if isinstance(targets, MultiLabelTargets):
        return targets.indicator
    if isinstance(targets, RegressionTargets):
        return targets.values if targets.values.shape[1] > 1 else targets.values[:, 0]
    return targets.keys.astype(str)


def extract(dataset: Any, extractor: Any) -> EmbeddingArtifact:
    """Fit the extractor on the dataset inputs, transform them, validate the output."""
    start = time.perf_counter()
    try:
        extractor.fit(dataset.extractor_input, estimator_targets(dataset.targets))
        output = extractor.transform(dataset.extractor_input)
    except VertebraeError:
        raise
    except Exception as exc:  # an extractor is user code: name it in the error
        raise ExtractorError(f"extractor {extractor.name!r} failed during fit/transform: "
                             f"{type(exc).__name__}: {exc}") from exc
    matrix = validate_embeddings(output, argument="output", n_rows=dataset.n_samples,
                                 source=f"extractor {extractor.name!r}")
    if is_constant(matrix):
        raise ExtractorError(f"extractor {extractor.name!r} returned the same embedding for every row, so it separates "
                             "nothing; check the extractor (a collapsed or untrained model?)")
    metadata = embedding_metadata(matrix)
    metadata["parent_extractor_name"] = extractor.name
    return EmbeddingArtifact(extractor.name, matrix, metadata, time.perf_counter() - start)


def score(artifact: EmbeddingArtifact, targets: Targets, settings: Any) -> ScoreArtifact:
    start = time.perf_counter()
    scorer = OverlapIndexScorer(settings.scoring_config, settings.continuous_config)
    overlap = scorer.score(artifact.matrix, targets)
    return ScoreArtifact(overlap, time.perf_counter() - start)


@dataclasses.dataclass
class StabilityArtifact:
    stability: StabilityResult
    seconds: float


def stability(artifact: EmbeddingArtifact, targets: Targets, settings: Any) -> StabilityArtifact:
    """Repeated overlap scoring of the matrix the score stage scored, with the same scorer settings.

    Every extractor gets the same StabilityConfig, hence the same seeds (and rows), which
    is what makes the ranking-stability comparison meaningful.
    """
    start = time.perf_counter()
    scorer = OverlapIndexScorer(settings.scoring_config, settings.continuous_config)
    result = run_stability_analysis(artifact.matrix, targets, config=settings.stability_config, scorer=scorer)
    return StabilityArtifact(result, time.perf_counter() - start)


def diagnose(artifact: EmbeddingArtifact, scored: ScoreArtifact, targets: Targets, groups: Any,
             settings: Any) -> SeparatixResult:
    """Separatix on the matrix the score stage scored, gated by that overlap score."""
    scorer = SeparatixScorer(settings.separatix_config, settings.scoring_config, settings.continuous_config)
    return scorer.diagnose(artifact.matrix, targets, overlap_score=scored.overlap.score, groups=groups,
                           source=f"extractor {artifact.extractor!r}")


def assemble(extractor: Any, artifacts: Mapping[str, Any], settings: Any) -> Any:
    """Build the ExtractorResult from the stage artifacts of one extractor."""
    from ..results import ExtractorResult, recommendation_label

    embedding: EmbeddingArtifact = artifacts["extract"]
    scored: ScoreArtifact = artifacts["score"]
    separatix: SeparatixResult | None = artifacts.get("diagnose")
    repeated: StabilityArtifact | None = artifacts.get("stability")
    measured: MetricsArtifact = artifacts.get("metrics", MetricsArtifact())
    overlap = scored.overlap
    metrics = {OVERLAP_METRIC: overlap_metric_result(overlap), **{m.name: m for m in measured.results}}
    primary = metrics[settings.primary_metric]
    weakest = overlap.weakest_class()
    recipe = extractor.recipe()
    return ExtractorResult(
        name=extractor.name, extractor_type=recipe.get("type", type(extractor).__name__), recipe=recipe,
        overlap=overlap, metrics=metrics, primary_metric_name=primary.name,
        primary_score=primary.score if primary.rankable else None, embedding=dict(embedding.metadata),
        warnings=list(overlap.warnings) + measured.warnings(), recommendation=recommendation_label(overlap.score),
        weakest_class=None if weakest is None else {"key": weakest[0], "display": overlap.display(weakest[0]),
                                                    "score": weakest[1]},
        separatix=separatix, stability=None if repeated is None else repeated.stability,
        runtime={"extract": embedding.seconds, "score": scored.seconds, **measured.runtime(),
                 **({} if repeated is None else {"stability": repeated.seconds}),
                 **({} if separatix is None else {"separatix": separatix.runtime_seconds})})

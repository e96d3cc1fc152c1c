"""ZeroShotBenchmark: fixed prompt-prototype classification of frozen encoders.

Each encoder embeds the samples and the prompts; prompts are averaged into one
prototype per class (:mod:`vertebrae.families.zero_shot.classify`) and every sample is
assigned its nearest prototype, blocked under a memory budget.  Encoders are ranked
by the configured zero-shot metric; OverlapIndex of the sample embeddings is
reported beside it as context.  With ``compression=[...]`` every encoder is evaluated
once per variant (fitted on its sample embeddings, applied to both branches).  With
``cache_config`` the two encode stages are read from / written to an artifact store,
like the labeled-data benchmark's extractions.  Everything that can be checked without
running an encoder (types, names, the config, the variants, the store, the memory plan,
precomputed embeddings) is checked in the constructor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._base.progress import check_progress
from ..._base.config import check_config
from ...extractors.compression import EmbeddingCompressionConfig, check_compression
from ...errors import InputTypeError, InputValidationError
from ...execution.caching import stage_cache
from ...execution.context import Chain, RunContext
from ...execution.jobs import RunOutcome, check_on_error
from ...execution.plan import Plan
from ...inputs.modalities import (BUILDERS, check_input_modality, declared_modalities, inputs_modality,
                                  model_modalities)
from ..front_door import EmbeddingSource, FrontDoor, plain_recipe, variant_chains
from ...extractors.profiling import ResourceProfilingConfig, check_profiling, endpoint_profiles
from ..._base.profile_records import PROFILE_KEY
from ...scoring.overlap import OverlapScoringConfig, check_class_settings
from .classify import ENSEMBLE_RULE, TIE_RULE, build_prototypes, plan_blocks
from .config import ZeroShotConfig
from .dataset import ZeroShotDataset
from .encoders import DEFAULT_MODALITIES, PrecomputedZeroShotEncoder, as_encoders
from .result import ZeroShotBenchmarkResult, ZeroShotExtractorResult
from .stages import PIPELINE, ZeroShotSettings, encode_branch

#: The two branches every encoder embeds, in the order results report them.
BRANCHES = ("samples", "prompts")


class ZeroShotBenchmark(FrontDoor):
    """Compare encoders on one zero-shot protocol (a single-label dataset and its ordered prompts).

    A declaration over the shared run path (:mod:`vertebrae.families.front_door`).
    """

    pipeline = PIPELINE
    description = "vertebrae zero-shot"
    fitted_branch = "samples"

    def __init__(self, dataset: ZeroShotDataset, encoders: Any, *, config: ZeroShotConfig | None = None,
                 scoring_config: OverlapScoringConfig | None = None, on_error: str = "raise",
                 progress: bool | None = None, compression: Sequence[EmbeddingCompressionConfig] | None = None,
                 cache_config: Any = None, resource_profiling: ResourceProfilingConfig | None = None) -> None:
        if not isinstance(dataset, ZeroShotDataset):
            raise InputTypeError(f"dataset must be a ZeroShotDataset, got {type(dataset).__name__}; build one with "
                                 "ZeroShotDataset.from_templates(source_dataset, templates=[...]) or .from_prompts")
        config = check_config("config", config, ZeroShotConfig, default=ZeroShotConfig())
        scoring_config = check_config("scoring_config", scoring_config, OverlapScoringConfig,
                                      default=OverlapScoringConfig())
        check_class_settings(scoring_config, dataset.targets.counts(), dataset.catalog)
        self.dataset, self.config, self.progress = dataset, config, check_progress("ZeroShotBenchmark", progress)
        self.on_error = check_on_error("ZeroShotBenchmark", on_error)
        #: Compression variants (fitted on the sample embeddings, applied to both branches); empty: raw only.
        self.compression = check_compression("ZeroShotBenchmark", compression)
        self.cache = stage_cache(cache_config)  # opens the store now: a bad URL fails before any work
        self.encoders = self.extractors = as_encoders(encoders)
        for encoder in self.encoders:  # a recipe the result cannot store fails here, before any work
            plain_recipe(encoder)
        _check_encoder_modalities(dataset, self.encoders)
        self.settings = ZeroShotSettings(config, scoring_config,
                                         frozenset(e.name for e in self.encoders if hasattr(e, "fit")),
                                         check_profiling("ZeroShotBenchmark", resource_profiling))
        # A budget too small for one tile fails here, before any encoder runs.
        self.block_plan = plan_blocks(dataset.n_samples, dataset.n_classes, config.max_dense_bytes, config.block_rows)
        for encoder in self.encoders:
            if isinstance(encoder, PrecomputedZeroShotEncoder):
                self._validate_precomputed(encoder)

    # -- protocol --------------------------------------------------------------
    def protocol(self) -> dict[str, Any]:
        """The complete protocol stored in the result: config, dataset summary, ordered prompts, rules, block plan."""
        return {"config": self.config.to_dict(), "overlap_config": self.settings.scoring_config.to_dict(),
                "dataset": self.dataset.summary(), "prompts": self.dataset.declaration(),
                "prompts_fingerprint": self.dataset.fingerprint,
                "targets_fingerprint": self.dataset.targets_fingerprint(),
                "identity": self.dataset.identity.to_dict(), "tie_rule": TIE_RULE,
                "ensemble": ENSEMBLE_RULE[self.config.similarity], "block_plan": self.block_plan.to_dict(),
                "ranking": f"by {self.config.metric} only; OverlapIndex of the sample embeddings is context and is "
                           "never combined with it",
                "compression": [variant.to_dict() for variant in self.compression]}

    def protocol_warnings(self) -> list[str]:
        n_classes = self.dataset.n_classes
        trivial = [k for k in self.config.top_k if k >= n_classes and k > 1]
        if trivial:
            return [f"top-k accuracy for k = {trivial} is 1 by construction with {n_classes} classes "
                    "(scikit-learn's top_k_accuracy_score convention)"]
        return []

    # -- the declaration the shared run path reads ---------------------------------------------------
    def chains(self, context: RunContext | None = None) -> list[Chain]:
        """One chain per encoder and compression variant.

        A variant's result is named ``<encoder>+<label>`` (``minilm+pca64``) whether or not the compression
        could be applied; the variants of one encoder share its encode jobs.
        """
        context = self._context() if context is None else context
        return variant_chains(self.encoders, context.extractor_ids(), self.compression)

    def embedding_sources(self, chain: Chain) -> dict[str, EmbeddingSource]:
        # A compressed branch is derived from its encoding: it reports that encoding's eligibility and status.
        return {branch: EmbeddingSource(f"encode_{branch}", branch) for branch in BRANCHES}

    def failed_result(self, chain: Chain, error: dict[str, Any], keys: dict[str, str]) -> ZeroShotExtractorResult:
        recipe = plain_recipe(self._context().extractor_of(chain))
        return ZeroShotExtractorResult.failed(chain.name, recipe, self.config.metric, error, keys)

    def complete(self, result: ZeroShotExtractorResult, chain: Chain, keys: dict[str, str], outcome: RunOutcome,
                 plan: Plan) -> ZeroShotExtractorResult:
        """Each branch's resource profile (samples and prompts, never merged) when profiling is on."""
        profiling = self.settings.resource_profiling
        if profiling is not None and profiling.enabled:
            measured = {branch: outcome.timings.get(keys[f"encode_{branch}"], {}).get(PROFILE_KEY)
                        for branch in BRANCHES}
            encoder = self._context().extractor_of(chain)
            result.resource_profile = endpoint_profiles(measured, result.embedding, result.compression,
                                                        model_modalities(encoder, DEFAULT_MODALITIES))
        return result

    def build_result(self, results: list[ZeroShotExtractorResult], notes: list[str]) -> ZeroShotBenchmarkResult:
        return ZeroShotBenchmarkResult(self.protocol(), results, notes)

    def _validate_precomputed(self, encoder: PrecomputedZeroShotEncoder) -> None:
        """Rows, widths and prompt norms of embeddings that exist already, checked before any work."""
        samples = encode_branch(encoder, encoder.name, "samples", self.dataset, {})["samples"]
        prompts = encode_branch(encoder, encoder.name, "prompts", self.dataset, {})["prompts"]
        if samples.matrix.shape[1] != prompts.matrix.shape[1]:
            raise InputValidationError(f"encoder {encoder.name!r}: sample embeddings have {samples.matrix.shape[1]} columns "
                              f"but prompt embeddings have {prompts.matrix.shape[1]}; both must share one space")
        names = [self.dataset.catalog.display(k) for k in self.dataset.catalog.keys]
        build_prototypes(prompts.matrix, self.dataset.prompt_classes, names, self.dataset.flat_prompts,
                         self.config.similarity)


def _check_encoder_modalities(dataset: ZeroShotDataset, encoders: Sequence[Any]) -> None:
    """Each branch's declared kind matches the samples and the (text) prompts, before any encoder runs.

    Every declaration is checked for typos; precomputed encoders read nothing, so their kinds are not checked
    against the data; an adapted extractor reads what it declares.
    """
    samples, prompts = inputs_modality(dataset.sample_input), inputs_modality(dataset.flat_prompts)
    for i, encoder in enumerate(encoders):
        who = f"encoders[{i}] ({encoder.name!r}, {type(encoder).__name__})"
        branches = declared_modalities(who, encoder, DEFAULT_MODALITIES, "branch", "a zero-shot encoder's branches",
                                       "{'samples': 'image', 'prompts': 'text'}")
        if isinstance(encoder, PrecomputedZeroShotEncoder):
            continue
        declared = getattr(getattr(encoder, "extractor", None), "input_modality", None)
        want = declared or branches["samples"]
        check_input_modality(f"{who} samples branch", want, samples, "the source dataset", "encoder",
                             f"build the source dataset from {want} with {BUILDERS.get(want, 'its constructor')}")
        check_input_modality(f"{who} prompts branch", declared or branches["prompts"],
                             prompts, "dataset.flat_prompts", "encoder")

"""The one run path every front door shares: validate → plan → execute → collect results.

``Benchmark``, ``RetrievalBenchmark`` and ``ZeroShotBenchmark`` are thin declarations over
:class:`FrontDoor`: their pipeline, their chains, where each chain's embeddings come from
(which stage produced them, and which part of its EmbeddingSet), their result class and
their protocol.  Everything else — building the run context and plan, executing it with a runner
under the ``on_error`` policy, turning a failed chain into an invalid result, recording
artifact keys, runtimes (derived from the stages' declarations) and cache facts, the run envelope
(:func:`run_envelope`: run key, versions, plan, cache record, start time and host, in the same places for
every family) and extractor-list validation — is written once, here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import platform
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._base import json_codec
from ..artifacts.codecs import output_array
from ..inputs.embeddings import column_scale_notes
from ..errors import (CompressionWarning, DataWarning, InputTypeError, InputValidationError, SerializationError,
                      warn_result_notes)
from ..execution.caching import (HIT, NOT_MEASURED_CACHE_HIT, NOT_NEEDED, StageCache, cache_summary,
                                 endpoint_footprint, footprint_notes)
from ..execution.context import Chain, RunContext
from ..execution.jobs import JobFailure, RunOutcome
from ..execution.local import LocalRunner
from ..execution.plan import Plan, artifact_key, build_plan
from ..execution.registry import definition_of
from ..extractors.base import check_extractor_name
from ..extractors.compression import variant_name
from .._base.fingerprint import package_version

#: The packages whose versions every result records (``metadata.versions``): vertebrae and the required
#: dependencies that compute its scores and diagnostics.
RUN_PACKAGES = ("vertebrae", "overlapindex", "separatix", "numpy", "scipy", "scikit-learn")


def variant_chains(extractors: Sequence[Any], extractor_ids: Sequence[str], compression: Sequence[Any]) -> list[Chain]:
    """One chain per extractor x compression variant (none given: the raw embedding), named ``extractor+variant``."""
    return [Chain(variant_name(e.name, variant), extractor_id, e.name, variant=variant)
            for e, extractor_id in zip(extractors, extractor_ids) for variant in compression or (None,)]


@dataclasses.dataclass(frozen=True)
class EmbeddingSource:
    """Where one embedding a result reports comes from: part ``part`` of the EmbeddingSet that ``stage`` made."""

    stage: str
    part: str | None


class FrontDoor:
    """The shared run path; a subclass sets the attributes below and implements the hooks.

    Attributes a subclass sets in its constructor: ``dataset``, ``extractors``, ``settings``,
    ``on_error``, ``progress``, ``cache`` (a StageCache or None).
    """

    #: The registered pipeline this front door plans over.
    pipeline: str = ""
    #: The progress-bar label.
    description: str = "vertebrae"
    #: The stage whose artifact is a chain's result.
    final_stage: str = "assemble"
    #: The embedding a compressed variant is fitted on (its cache facts are the variant's); None: the only one.
    fitted_branch: str | None = None

    dataset: Any
    extractors: list[Any]
    settings: Any
    on_error: str
    progress: bool | None
    cache: StageCache | None
    #: The run context of the run in progress (None between runs, so a changed dataset is fingerprinted again).
    _running: RunContext | None = None

    # ------------------------------------------------------------------ hooks
    def chains(self, context: RunContext | None = None) -> list[Chain]:
        """One chain per result (default: one per extractor and compression variant)."""
        raise NotImplementedError

    def protocol_warnings(self) -> list[str]:
        """Facts about the protocol the user should see before the run (emitted as DataWarning)."""
        return []

    def failed_result(self, chain: Chain, error: dict[str, Any], keys: dict[str, str]) -> Any:
        """The invalid, unranked result of a chain whose job failed (``on_error="record"``)."""
        raise NotImplementedError

    def embedding_sources(self, chain: Chain) -> Mapping[str | None, EmbeddingSource]:
        """Each embedding a result reports (``None``: the result's single embedding) and where it came from."""
        raise NotImplementedError

    def complete(self, result: Any, chain: Chain, keys: dict[str, str], outcome: RunOutcome, plan: Plan) -> Any:
        """Family-specific facts a result gets after the run (e.g. its resource profile); returns the result."""
        return result

    def build_result(self, results: list[Any], notes: list[str]) -> Any:
        """The family's benchmark result from the chains' results (the run envelope is added by :meth:`run`)."""
        raise NotImplementedError

    def has_later_rounds(self) -> bool:
        """Whether ``run`` adds rounds (:meth:`refine`, :meth:`follow_up`) that read the first round's artifacts."""
        return False

    def refine(self, results: list[Any], plan: Plan, outcome: RunOutcome, rounds: Rounds) -> list[Any]:
        """More rounds on the chains' results before the benchmark result is built (e.g. adaptive repeats)."""
        return results

    def follow_up(self, result: Any, rounds: Rounds) -> Any:
        """Rounds that depend on the built result (e.g. the benchmark's referee); returns the result."""
        return result

    # ------------------------------------------------------------------ the run path
    def _context(self) -> RunContext:
        """The run context: during :meth:`run` the run's own (hooks find extractors through it), else a new one."""
        if self._running is not None:
            return self._running
        return RunContext(self.settings, self.extractors, self.dataset, cache=self.cache)

    def plan(self, context: RunContext | None = None) -> Plan:
        """The stage jobs of this benchmark (what ``run`` executes), with their content-aware keys."""
        context = self._context() if context is None else context
        return build_plan(self.pipeline, self.chains(context), context)

    def execute(self, runner: Any = None, description: str | None = None) -> tuple[Plan, RunOutcome]:
        """(plan, outcome): plan from one run context and execute it with ``runner`` under ``on_error``.

        When the front door has later rounds (:meth:`has_later_rounds`), every artifact a job reads is kept in
        the outcome for them (:class:`Rounds`).
        """
        context = self._context()
        plan = self.plan(context)
        runner = LocalRunner(self.progress) if runner is None else runner
        outcome = runner.run(plan.jobs, context, on_error=self.on_error, description=description or self.description,
                             **kept_for_rounds(plan.jobs, self.has_later_rounds()))
        return plan, outcome

    def scope(self, runner: Any = None) -> RunScope:
        """What the rounds over this run read (:class:`RunScope`); ``runner`` None: an in-process one."""
        return RunScope(self.dataset, tuple(self.extractors), tuple(self.chains()), self.settings, self.cache,
                        self.on_error, LocalRunner(self.progress) if runner is None else runner, self.pipeline,
                        self.description, self.has_later_rounds())

    def run(self, runner: Any = None) -> Any:
        """Execute the plan with ``runner`` (default: an in-process :class:`LocalRunner`) and collect the results."""
        started = _dt.datetime.now(_dt.timezone.utc)
        notes = self.protocol_warnings()
        for note in notes:
            warnings.warn(note, DataWarning, stacklevel=2)
        runner = LocalRunner(self.progress) if runner is None else runner
        self._running = self._context()
        try:
            plan, outcome = self.execute(runner)
            rounds = Rounds(self.scope(runner), outcome.artifacts)
            results = [self._chain_result(chain, keys, plan, outcome)
                       for chain, keys in zip(plan.chains, plan.chain_keys)]
            results = self.refine(results, plan, outcome, rounds)
        finally:
            self._running = None
        for result in results:  # stages record notes; each is warned here once, named, at the user's call
            compression = set((result.compression or {}).get("warnings", []))
            data = set(column_scale_notes(result.embedding)) - compression  # a scale-dominated space: the data's doing
            warn_result_notes(result.name, [n for n in result.warnings if n in compression], CompressionWarning)
            warn_result_notes(result.name, [n for n in result.warnings if n in data], DataWarning)
            warn_result_notes(result.name, [n for n in result.warnings if n not in compression | data])
        result = self.build_result(results, notes)
        metadata, timing = run_envelope(plan, self.cache, started)  # the run envelope, the same for every family
        result.metadata.update(metadata)
        result.timing.update(timing)
        return self.follow_up(result, rounds)

    def _chain_result(self, chain: Chain, keys: dict[str, str], plan: Plan, outcome: RunOutcome) -> Any:
        final = keys[self.final_stage]
        assembled = outcome.artifacts.get(final)
        if assembled is None:
            failure: JobFailure = outcome.failures[final]
            return self.failed_result(chain, failure.to_dict(chain.parent), dict(keys))
        result = dataclasses.replace(assembled, artifact_keys=dict(keys), warnings=list(assembled.warnings))
        result.runtime = chain_runtime(keys, plan, outcome)
        sources = self.embedding_sources(chain)
        for branch, source in sources.items():
            self._add_cache_facts(result, branch, source, keys, plan, outcome)
        if result.compression is not None:  # a derived artifact keeps its source's cache facts
            result.compression = {**result.compression,
                                  **cache_facts(keys[sources[self.fitted_branch].stage], plan, outcome)}
        return self.complete(result, chain, keys, outcome, plan)

    def _add_cache_facts(self, result: Any, branch: str | None, source: EmbeddingSource, keys: dict[str, str],
                         plan: Plan, outcome: RunOutcome) -> None:
        """Cache eligibility and status of the job that produced an embedding (and footprints with a cache)."""
        key = keys[source.stage]
        embedding = result.embedding if branch is None else result.embedding[branch]
        updated = {**embedding, **cache_facts(key, plan, outcome)}
        if self.cache is not None:  # raw: the extraction as stored; evaluated: what was scored (a variant's)
            updated["footprint"] = endpoint_footprint(embedding["logical_bytes"], outcome.persisted.get(key),
                                                      output_array(source.part))
            result.warnings.extend(footprint_notes(updated["footprint"]))  # a failed object stat, explained
        result.embedding = updated if branch is None else {**result.embedding, branch: updated}


@dataclasses.dataclass(frozen=True)
class RunScope:
    """What a round over one run reads — screening, adaptive repeats, the referee — instead of the front door.

    The run's dataset, extractors and chains, its settings (the user's, never changed by a round), cache, error
    policy and runner, the pipeline it plans over and its progress label, and whether later rounds read the first
    round's artifacts (then the first round keeps every artifact a job reads: :meth:`kept`).
    """

    dataset: Any
    extractors: tuple[Any, ...]
    chains: tuple[Chain, ...]
    settings: Any
    cache: StageCache | None
    on_error: str
    runner: Any
    pipeline: str
    description: str
    later_rounds: bool = False

    def context(self, settings: Any = None) -> RunContext:
        """A run context of this run, under ``settings`` (default: the run's own)."""
        return RunContext(self.settings if settings is None else settings, self.extractors, self.dataset,
                          cache=self.cache)

    def kept(self, jobs: Sequence[Any]) -> dict[str, Any]:
        """The runner's ``keep`` argument for the first round's ``jobs`` (:func:`kept_for_rounds`)."""
        return kept_for_rounds(jobs, self.later_rounds)


def kept_for_rounds(jobs: Sequence[Any], later_rounds: bool) -> dict[str, Any]:
    """The runner's ``keep`` argument for a first round: every artifact a job reads when later rounds will read them
    too (:class:`Rounds`); nothing otherwise (each artifact is freed once read)."""
    return {"keep": {key for job in jobs for key in job.needs.values()}} if later_rounds else {}


@dataclasses.dataclass(frozen=True)
class RoundSettings:
    """The settings one later round plans under: the run's settings, unchanged, plus the round's own state.

    Round state (the referee's finalists, the repeats of an adaptive round) is never the user's setting: it lives
    here, and a stage's config reads it as an attribute (``getattr(settings, "stability_window", None)``); every
    other attribute is the run's setting, so a key hashes the same content whichever round plans it.
    """

    run: Any
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("run", "state"):  # copy/pickle probes; fields not yet set on unpickling
            raise AttributeError(name)
        return self.state[name] if name in self.state else getattr(self.run, name)


class Rounds:
    """The later rounds of one run: the same runner, reading the artifacts the first round kept.

    Nothing the first round computed runs again — not even an extraction no cache could serve (an unsafe
    identity), which might differ from the embedding the first round scored.  Keeping costs memory: every
    chain's embeddings stay resident until the run ends (docs/architecture.md).
    """

    def __init__(self, scope: RunScope, kept: Mapping[str, Any]) -> None:
        self.scope, self.kept = scope, kept

    def run(self, stages: Sequence[str], description: str, chains: Sequence[Chain] | None = None,
            state: Mapping[str, Any] | None = None) -> tuple[Plan, RunOutcome]:
        """Plan ``chains`` (default: all) under the run's settings plus the round's ``state``
        (:class:`RoundSettings`) and run the jobs of ``stages`` and what they read that the first round did not
        keep."""
        scope = self.scope
        context = scope.context(RoundSettings(scope.settings, dict(state or {})))
        plan = build_plan(scope.pipeline, scope.chains if chains is None else chains, context)
        wanted = [key for keys in plan.chain_keys for stage, key in keys.items() if stage in stages]
        needed: set[str] = set()
        while wanted:
            key = wanted.pop()
            if key not in needed:
                needed.add(key)
                if key not in self.kept:
                    wanted.extend(plan.job(key).needs.values())
        jobs = [job for job in plan.jobs if job.key in needed and job.key not in self.kept]
        given = {key: self.kept[key] for key in needed if key in self.kept}
        return plan, scope.runner.run(jobs, context, on_error=scope.on_error, description=description, given=given)


def run_envelope(plan: Plan, cache: StageCache | None,
                 started: _dt.datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, timing) of the run envelope every family's result carries in the same places
    (``result_protocol.ENVELOPE_SCHEMA``): the run key (a hash of every job key), the package versions, the plan
    (each job's stage, result name and key), where the cache lives and its mode (only with a cache); then when the
    run started and on what host (the ``timing`` section, never compared)."""
    metadata = {"run_key": artifact_key("run", [job.key for job in plan.jobs]),
                "versions": {name: package_version(name) for name in RUN_PACKAGES},
                "plan": [{"stage": job.stage, "extractor": job.extractor, "key": job.key} for job in plan.jobs],
                **({} if cache is None else {"cache": cache_summary(cache)})}
    return metadata, {"started_at": started.isoformat(), "host": host_facts()}


def cache_facts(key: str, plan: Plan, outcome: RunOutcome) -> dict[str, Any]:
    """``cache_eligible`` and ``cache_status`` of one job's artifact."""
    return {"cache_eligible": plan.job(key).cache_eligible, "cache_status": outcome.statuses[key]}


def chain_runtime(keys: Mapping[str, str], plan: Plan, outcome: RunOutcome) -> dict[str, Any]:
    """Seconds of this run per stage of one chain, as each stage's declaration says (``runtime``, ``steps``).

    A stage reporting ``seconds`` gives its wall seconds under its name; ``steps`` gives the sub-step seconds it
    recorded (``cache_write`` as ``<stage>_cache_write``); ``seconds_and_steps`` gives both.  A job read from the
    cache ran nothing: what it would report reads ``not_measured_cache_hit`` and the read is timed as
    ``<stage>_cache_read``; so does a job that was not run because the cache served every reader of it
    (``not_needed``), without a read.  Runtimes travel beside artifacts, never inside them.
    """
    from .._base.profile_records import PROFILE_KEY

    runtime: dict[str, Any] = {}
    for stage, key in keys.items():
        definition = definition_of(plan.job(key))
        timings = outcome.timings.get(key)
        status = outcome.statuses.get(key)
        if definition.runtime is None or not (timings or status == NOT_NEEDED):
            continue
        if status in (HIT, NOT_NEEDED):
            names = definition.steps if definition.runtime == "steps" else (stage,)
            runtime.update({name: NOT_MEASURED_CACHE_HIT for name in names})
            if status == HIT:
                runtime[f"{stage}_cache_read"] = timings["seconds"]
            continue
        if definition.runtime != "steps":
            runtime[stage] = timings["seconds"]
        if definition.runtime != "seconds":
            runtime.update({f"{stage}_cache_write" if name == "cache_write" else name: seconds
                            for name, seconds in timings.items() if name not in ("seconds", PROFILE_KEY)})
    return runtime


def host_facts() -> dict[str, Any]:
    """The host a run ran on (kept in the ``timing`` section): Python, platform, machine, NumPy, BLAS threads."""
    import numpy as np
    from threadpoolctl import threadpool_info

    blas = [pool for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "numpy": np.__version__, "blas_threads": blas[0]["num_threads"] if blas else None}


def validate_extractor_list(extractors: Any, what: str = "extractors", hint: str = "") -> list[Any]:
    """A non-empty list (not a string); each item is checked by the caller, names by :func:`check_unique_names`."""
    if isinstance(extractors, (str, bytes)) or not isinstance(extractors, Sequence):
        raise InputTypeError(f"{what} must be a list of {what}{hint}, got {type(extractors).__name__}")
    if not extractors:
        raise InputValidationError(f"{what} is empty; pass at least one")
    return list(extractors)


def check_unique_names(items: Sequence[Any], where: Sequence[str], what: str = "extractor",
                       given: Sequence[Any] | None = None) -> None:
    """Every result needs its own valid name, in every family: a non-empty string without ``+`` (which result names
    put before a compression variant; :func:`~vertebrae.extractors.base.check_extractor_name`), and not one an
    earlier item has (the first repeat is named with both positions).  ``given``: the objects the user passed, when
    ``items`` wraps them, so that a message names the user's type."""
    seen: dict[str, str] = {}
    for item, position, source in zip(items, where, items if given is None else given):
        check_extractor_name(item.name, f"{position} ({type(source).__name__}) name")
        if item.name in seen:
            raise InputValidationError(f"{position} and {seen[item.name]} are both named {item.name!r}; give every "
                                       f"{what} a unique name")
        seen[item.name] = position


def plain_recipe(extractor: Any) -> dict[str, Any]:
    """An extractor's recipe as a result stores it: a JSON-plain copy (tuples become lists), so a reloaded result
    compares equal; a recipe that is not serializable fails early, naming the extractor and the path inside it."""
    try:
        return json.loads(json_codec.dumps(extractor.recipe()))
    except SerializationError as exc:  # the message names the path inside the value
        raise SerializationError(f"recipe of {extractor.name!r} is not JSON-serializable: {exc}") from None

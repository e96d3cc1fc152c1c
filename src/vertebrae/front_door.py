"""The one run path every front door shares: validate → plan → execute → collect results.

``Benchmark``, ``RetrievalBenchmark`` and ``ZeroShotBenchmark`` are thin declarations over
:class:`FrontDoor`: their pipeline, their chains, where each chain's embeddings come from
(which stage produced them, and which part of its EmbeddingSet), their result class and
their protocol.  Everything else — building the run context and plan, executing it with a runner
under the ``on_error`` policy, turning a failed chain into an invalid result, recording
artifact keys, runtimes (derived from the stages' declarations) and cache facts, host facts
and extractor-list validation — is written once, here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import platform
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from . import json_codec
from .artifacts.codecs import output_array
from .embeddings import column_scale_notes
from .errors import (CompressionWarning, DataWarning, InputTypeError, InputValidationError, SerializationError,
                     warn_result_notes)
from .execution.caching import (HIT, NOT_MEASURED_CACHE_HIT, NOT_NEEDED, StageCache, cache_summary,
                                endpoint_footprint, footprint_notes)
from .execution.context import Chain, RunContext
from .execution.jobs import JobFailure, RunOutcome
from .execution.local import LocalRunner
from .execution.plan import Plan, build_plan
from .execution.registry import definition_of


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

    def build_result(self, plan: Plan, results: list[Any], notes: list[str], started: _dt.datetime) -> Any:
        """The family's benchmark result from the chains' results."""
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
                             **self.kept_for_rounds(plan.jobs))
        return plan, outcome

    def kept_for_rounds(self, jobs: Sequence[Any]) -> dict[str, Any]:
        """The runner's ``keep`` argument for the first round: every artifact a job reads when later rounds will
        read them too (:class:`Rounds`); nothing otherwise (each artifact is freed once read)."""
        return {"keep": {key for job in jobs for key in job.needs.values()}} if self.has_later_rounds() else {}

    def run(self, runner: Any = None) -> Any:
        """Execute the plan with ``runner`` (default: an in-process :class:`LocalRunner`) and collect the results."""
        started = _dt.datetime.now(_dt.timezone.utc)
        notes = self.protocol_warnings()
        for note in notes:
            warnings.warn(note, DataWarning, stacklevel=2)
        runner = LocalRunner(self.progress) if runner is None else runner
        plan, outcome = self.execute(runner)
        rounds = Rounds(self, runner, outcome.artifacts)
        results = [self._chain_result(chain, keys, plan, outcome) for chain, keys in zip(plan.chains, plan.chain_keys)]
        results = self.refine(results, plan, outcome, rounds)
        for result in results:  # stages record notes; each is warned here once, named, at the user's call
            compression = set((result.compression or {}).get("warnings", []))
            data = set(column_scale_notes(result.embedding)) - compression  # a scale-dominated space: the data's doing
            warn_result_notes(result.name, [n for n in result.warnings if n in compression], CompressionWarning)
            warn_result_notes(result.name, [n for n in result.warnings if n in data], DataWarning)
            warn_result_notes(result.name, [n for n in result.warnings if n not in compression | data])
        return self.follow_up(self.build_result(plan, results, notes, started), rounds)

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

    def run_facts(self, started: _dt.datetime) -> dict[str, Any]:
        """When the run started and on what host (the result's ``timing`` section, never compared)."""
        return {"started_at": started.isoformat(), "host": host_facts()}

    def cache_record(self) -> dict[str, Any] | None:
        """Where the run's cache lives and its mode (None without a cache)."""
        return None if self.cache is None else cache_summary(self.cache)


class Rounds:
    """The later rounds of one run: the same runner, reading the artifacts the first round kept.

    Nothing the first round computed runs again — not even an extraction no cache could serve (an unsafe
    identity), which might differ from the embedding the first round scored.  Keeping costs memory: every
    chain's embeddings stay resident until the run ends (docs/architecture.md).
    """

    def __init__(self, door: FrontDoor, runner: Any, kept: Mapping[str, Any]) -> None:
        self.door, self.runner, self.kept = door, runner, kept

    def run(self, settings: Any, stages: Sequence[str], description: str,
            chains: Sequence[Chain] | None = None) -> tuple[Plan, RunOutcome]:
        """Plan ``chains`` (default: all) under ``settings`` and run the jobs of ``stages`` and what they read that
        the first round did not keep."""
        door = self.door
        context = RunContext(settings, door.extractors, door.dataset, cache=door.cache)
        plan = build_plan(door.pipeline, door.chains(context) if chains is None else chains, context)
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
        return plan, self.runner.run(jobs, context, on_error=door.on_error, description=description, given=given)


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
    from .profiling import PROFILE_KEY

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


def check_unique_names(items: Sequence[Any], where: Sequence[str], what: str = "extractor") -> None:
    """Every result needs its own name: the first repeated one is named with both positions."""
    seen: dict[str, str] = {}
    for item, position in zip(items, where):
        if item.name in seen:
            raise InputValidationError(f"{position} and {seen[item.name]} are both named {item.name!r}; give every "
                                       f"{what} a unique name")
        seen[item.name] = position


def plain(value: Any, where: str) -> Any:
    """JSON-plain copy (tuples become lists), so a reloaded result compares equal; fails early if not serializable."""
    try:
        return json.loads(json_codec.dumps(value))
    except SerializationError as exc:  # the message names the path inside the value
        raise SerializationError(f"{where} is not JSON-serializable: {exc}") from None

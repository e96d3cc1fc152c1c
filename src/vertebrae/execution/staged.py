"""The store runner of staged runs: one phase of a plan, in whatever process runs it.

A staged run (``vertebrae plan``, ``embed``, ``score``, ``collect``; the plan file and the
commands live in :mod:`vertebrae.cli.staged_workflow`) executes each **phase** of one plan
with a :class:`StoreRunner` over the plan's store:

- ``embed``: the jobs of stages declared ``phase=EMBED`` (the extractions and compressed
  variants); the extractions are stored exactly as the embedding cache stores them (an
  artifact already there is reused);
- ``score``: the jobs declared ``phase=SCORE``, reading their inputs back from the store;
- ``collect``: the jobs declared ``phase=COLLECT`` (the final ones), reading everything back.

Stages without a stored form (no ``phase``) are cheap views and checks: each process
recomputes them from their stored inputs.  A :class:`Shard` splits ``embed`` by extractor
and the later phases by result (chain), so shards never need each other's work.  What a
phase measured (seconds, cache status, stored bytes, a failure) is written beside the
artifacts as a small ``job_record`` per job and plan, never inside an artifact; ``collect``
reports it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from ..artifacts.codecs import StoredArtifact
from ..errors import ArtifactNotFoundError, ConfigError, PlanError, VertebraeError
from .._base.progress import progress_enabled
from .caching import JobRun, StageCache, computed_run
from .jobs import JobFailure, RunOutcome, UpstreamFailed, annotate, check_on_error, run_job
from .plan import StageJob, artifact_key
from .registry import COLLECT, EMBED, PHASES, definition_of


class StagedPlan(Protocol):
    """What the runner reads of a plan: its id (job records are filed under it) and the jobs it pins, one
    ``{"key", "stage", "extractor", "phase"}`` entry each."""

    @property
    def plan_id(self) -> str: ...

    @property
    def jobs(self) -> list[dict[str, Any]]: ...


def phase_of(job: StageJob) -> str | None:
    """The phase that stores ``job``'s artifact, as its stage declares; None: recomputed where it is read."""
    return definition_of(job).phase


@dataclasses.dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as ``--shard 2/4`` reads): every ``count``-th result of a phase."""

    index: int = 1
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise ConfigError(f"--shard must read i/n with whole numbers (e.g. 1/4), got {text!r}") from None
        if count < 1:
            raise ConfigError(f"--shard {text}: n (the number of shards) must be at least 1, e.g. 1/4")
        if not 1 <= index <= count:
            raise ConfigError(f"--shard {text}: i must be between 1 and n (shards are numbered 1/{count} to "
                              f"{count}/{count})")
        return cls(index, count)

    def owns(self, position: int) -> bool:
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


# ----------------------------------------------------------------------------- records beside the artifacts
def _record_key(plan_id: str, job_key: str) -> str:
    return artifact_key("job_record", [plan_id, job_key])


# ----------------------------------------------------------------------------- the runner
class StoreRunner:
    """Runs one phase of a plan (one shard of it) against the run's store.

    The run context must carry the plan's store as its cache (``context.cache``); the jobs
    must be the plan's (keys checked first, so changed code or package versions fail
    before any work), except those of the ``unchecked`` stages, whose keys a phase may
    change on purpose (``vertebrae score --metric``).
    """

    def __init__(self, plan: StagedPlan, phase: str, shard: Shard = Shard(), *, progress: bool | None = None,
                 unchecked: frozenset[str] = frozenset()) -> None:
        if phase not in PHASES:
            raise ConfigError(f"StoreRunner: phase must be one of {list(PHASES)}, got {phase!r}")
        self.plan, self.phase, self.shard, self.progress = plan, phase, shard, progress
        self.unchecked = frozenset(unchecked)

    def run(self, jobs: Sequence[StageJob], context: Any, *, on_error: str = "raise",
            description: str = "vertebrae") -> RunOutcome:
        check_on_error("StoreRunner.run", on_error)
        if not isinstance(getattr(context, "cache", None), StageCache):
            raise PlanError("a staged run needs the plan's store as the run's cache (the plan file's [cache] "
                            "section); write the plan with `vertebrae plan CONFIG --store URL`")
        self._check_keys(jobs)
        return _StagedRun(self, list(jobs), context, on_error).execute(description)

    def _check_keys(self, jobs: Sequence[StageJob]) -> None:
        """The plan file's jobs must be exactly the rebuilt plan's: the same set, each with the same key."""
        skip = self.unchecked
        planned = {(j["stage"], j["extractor"]): j["key"] for j in self.plan.jobs if j["stage"] not in skip}
        now = {(job.stage, job.extractor): job.key for job in jobs if job.stage not in skip}
        unlisted = sorted(f"{stage} of {name!r}" for stage, name in set(now) - set(planned))
        if unlisted:
            raise PlanError(f"the plan file does not list {len(unlisted)} job(s) its config plans "
                            f"({', '.join(unlisted[:3])}{', …' if len(unlisted) > 3 else ''}): it was edited or "
                            "truncated; write the plan again with `vertebrae plan`")
        changed = sorted(f"{stage} of {name!r}" for (stage, name), key in planned.items()
                         if now.get((stage, name)) != key)
        if changed:
            raise PlanError(f"the plan no longer matches its inputs or this installation: {len(changed)} job key(s) "
                            f"differ ({', '.join(changed[:3])}{', …' if len(changed) > 3 else ''}), e.g. after "
                            "upgrading vertebrae or a scoring package; write the plan again with `vertebrae plan` "
                            "and run every phase with the same installation")


class _StagedRun:
    def __init__(self, runner: StoreRunner, jobs: list[StageJob], context: Any, on_error: str) -> None:
        self.runner, self.context, self.on_error = runner, context, on_error
        self.phase, self.plan_id = runner.phase, runner.plan.plan_id
        self.cache: StageCache = context.cache
        self.by_key = {job.key: job for job in jobs}
        self.jobs = jobs
        self.memory: dict[str, Any] = {}
        self.outcome = RunOutcome({}, {}, {})

    def own_jobs(self) -> list[StageJob]:
        """This phase's jobs in this shard, dealt in plan order: ``embed`` by extractor (its extraction and its
        compressed variants together), the later phases by result."""
        units: dict[str, int] = {}
        own = []
        for job in self.jobs:
            unit = job.params["parent"] if self.phase == EMBED else job.extractor
            if phase_of(job) == self.phase and self.runner.shard.owns(units.setdefault(unit, len(units))):
                own.append(job)
        return own

    def execute(self, description: str) -> RunOutcome:
        from tqdm.auto import tqdm

        own = self.own_jobs()
        final = {job.key for job in own if self.phase == COLLECT}
        with tqdm(total=len(own), disable=not progress_enabled(self.runner.progress), desc=description, unit="job",
                  file=sys.stderr) as bar:
            for position, job in enumerate(own):
                bar.set_postfix_str(f"{job.stage} {job.extractor}")
                if job.key not in self.memory and job.key not in self.outcome.failures:
                    self._run_own(job)
                later = {key for other in own[position + 1:] for key in other.needs.values()}
                for key in [k for k in self.memory if k not in later and k not in final]:
                    del self.memory[key]  # one result's embeddings at a time, as in the local runner
                bar.update(1)
        self.outcome.artifacts = {key: self.memory[key] for key in final if key in self.memory}
        return self.outcome

    # ------------------------------------------------------------ this phase's jobs
    def _run_own(self, job: StageJob) -> None:
        """Compute or read one job of this phase.  Its inputs are obtained only when the store does not hold its
        artifact (pull-based: a warm ``score`` reads no embedding)."""
        obtaining = False

        def compute() -> tuple[Any, dict[str, float]]:
            nonlocal obtaining
            obtaining = True
            inputs = {stage: self._obtain(key) for stage, key in job.needs.items()}
            obtaining = False
            return run_job(job, inputs, self.context)

        try:
            if self.phase == COLLECT:
                ran = computed_run(job, *compute())
            else:
                ran = self.cache.run(job, compute, self.context, definition_of(job).codec, must_store=True)
        except UpstreamFailed as upstream:
            cause = self.outcome.failures[upstream.key]
            self._fail(job, cause.through(upstream.key))
            return
        except Exception as exc:
            if obtaining:  # an input's own error (already annotated in raise mode) or a missing phase: not this job's
                raise
            if self.on_error == "raise":
                raise annotate(exc, job)
            self._fail(job, JobFailure.of(job, exc))
            return
        self._keep(job, ran)
        if self.phase != COLLECT:
            self._write_record(job, ran, None)

    def _fail(self, job: StageJob, failure: JobFailure) -> None:
        self.outcome.failures[job.key] = failure
        if self.phase != COLLECT and phase_of(job) == self.phase:
            self._write_record(job, None, failure)

    def _keep(self, job: StageJob, ran: JobRun) -> None:
        self.memory[job.key] = ran.artifact
        self.outcome.timings[job.key] = ran.timings
        self.outcome.statuses[job.key] = ran.status
        self.outcome.persisted[job.key] = ran.footprint()

    # ------------------------------------------------------------ inputs
    def _obtain(self, key: str) -> Any:
        """An input: in memory, recomputed (stages without a stored form), or read back from the store."""
        if key in self.memory:
            return self.memory[key]
        if key in self.outcome.failures:
            raise UpstreamFailed(key)
        job = self.by_key[key]
        phase = phase_of(job)
        if phase is None:
            try:
                inputs = {stage: self._obtain(k) for stage, k in job.needs.items()}
            except UpstreamFailed as upstream:
                cause = self.outcome.failures[upstream.key]
                self.outcome.failures[key] = cause.through(upstream.key)
                raise UpstreamFailed(key) from None
            try:
                self._keep(job, computed_run(job, *run_job(job, inputs, self.context)))
            except Exception as exc:
                if self.on_error == "raise":
                    raise annotate(exc, job)
                self.outcome.failures[key] = JobFailure.of(job, exc)
                raise UpstreamFailed(key) from None
            return self.memory[key]
        return self._read(job, phase)

    def _read(self, job: StageJob, phase: str) -> Any:
        """A stored input.  A verified artifact wins over a failure record (the same job may have been stored since,
        e.g. by ``vertebrae run --cache``); the record's failure counts only while the artifact is absent."""
        repair = None if phase == self.phase else f"Run `vertebrae {phase} PLAN` again to recompute and replace it"
        ran = self.cache.lookup(job, definition_of(job).codec, repair=repair)
        record = self._record(job) if ran is None or self.phase == COLLECT else None
        if ran is None:
            if record is not None and record["failure"] is not None:
                self.outcome.failures[job.key] = JobFailure(**record["failure"])
                raise UpstreamFailed(job.key)
            if phase == self.phase:  # a job of this phase that another shard has not stored (yet): compute it
                self._run_own(job)
                if job.key in self.outcome.failures:
                    raise UpstreamFailed(job.key)
                return self.memory[job.key]
            raise PlanError(f"the {job.stage} artifact of {job.extractor!r} ({job.key}) is not in the store "
                            f"{self.cache.config.url}: run `vertebrae {phase} PLAN` first (every shard of it)")
        if record is not None and record["failure"] is None:  # report what the phase that made it measured
            ran = dataclasses.replace(ran, timings=dict(record["measured"]), status=record["status"],
                                      persisted=dict(record["footprint"]["bytes"]),
                                      persisted_status=record["footprint"]["status"],
                                      persisted_reason=record["footprint"].get("reason"),
                                      logical=dict(record["footprint"]["logical"]))
        self._keep(job, ran)
        return ran.artifact

    # ------------------------------------------------------------ job records
    def _record(self, job: StageJob) -> dict[str, Any] | None:
        try:
            return dict(self.cache.store.read(_record_key(self.plan_id, job.key)).document)
        except ArtifactNotFoundError:
            return None
        except VertebraeError:
            return None  # an unreadable record only loses the measurements; the artifact itself is verified

    def _write_record(self, job: StageJob, ran: JobRun | None, failure: JobFailure | None) -> None:
        document = {"job": job.key, "stage": job.stage, "phase": self.phase,
                    "status": None if ran is None else ran.status,
                    "measured": {} if ran is None else ran.timings,
                    "footprint": None if ran is None else ran.footprint(),
                    "failure": None if failure is None else dataclasses.asdict(failure)}
        self.cache.store.write(_record_key(self.plan_id, job.key), StoredArtifact("job_record", {}, document),
                               metadata={"extractor": job.extractor, "dataset": f"plan {self.plan_id[:12]}"})

"""In-process runner: executes a plan's jobs in order, freeing each artifact when nothing needs it.

The plan lists jobs depth-first (chain by chain), and an artifact is dropped as soon
as the last job reading it has run, so peak memory holds one chain's embeddings, not
every extractor's.  Jobs are unique by key, so identical work runs once.  Per-job
wall-clock seconds are recorded beside the artifacts (``RunOutcome.timings``).
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from .plan import StageJob
from .registry import get_stage

ON_ERROR = ("raise", "record")


def progress_enabled(progress: bool | None) -> bool:
    """``None``: show bars only when stderr is a terminal; ``True``/``False`` force it."""
    return sys.stderr.isatty() if progress is None else bool(progress)


def check_on_error(owner: str, value: Any) -> str:
    if value not in ON_ERROR:
        raise ConfigError(f"{owner}: on_error must be one of {list(ON_ERROR)}, got {value!r}; 'record' keeps the "
                          "other extractors' results when one fails, 'raise' stops at the first failure")
    return value


@dataclasses.dataclass(frozen=True)
class JobFailure:
    """Why a job produced no artifact: its own error, or a failed upstream job (``upstream`` = that job's key)."""

    stage: str
    error_type: str
    message: str
    upstream: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "type": self.error_type, "message": self.message}


@dataclasses.dataclass
class RunOutcome:
    """What a runner returns: the final artifacts, timings and failures, all by job key."""

    artifacts: dict[str, Any]
    #: key -> {"seconds": wall seconds of the job, plus sub-step seconds the stage recorded}.
    timings: dict[str, dict[str, float]]
    failures: dict[str, JobFailure]
    #: key -> cache status of the artifact: hit, miss, disabled (no cache) or bypassed_unsafe_identity.
    statuses: dict[str, str] = dataclasses.field(default_factory=dict)
    #: key -> {"status": measured | not_persisted | unavailable, "bytes": {array: stored object bytes},
    #: "logical": {array: resident bytes}} (arrays only for cacheable stages).
    persisted: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def run_job(job: StageJob, inputs: dict[str, Any], context: Any) -> tuple[Any, dict[str, float]]:
    """Run one job: (artifact, timings).  Shared by every runner, so all execute the same stage code."""
    definition = get_stage(job.pipeline, job.stage)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    artifact = definition.function(job, inputs, context, timings)
    timings["seconds"] = time.perf_counter() - start
    return artifact, timings


class LocalRunner:
    """Runs jobs one after another in this process."""

    def __init__(self, progress: bool | None = None) -> None:
        self.progress = progress

    def run(self, jobs: Sequence[StageJob], context: Any, *, on_error: str = "raise",
            description: str = "vertebrae") -> RunOutcome:
        from tqdm.auto import tqdm

        from .caching import execute_job

        check_on_error("LocalRunner.run", on_error)
        remaining_reads = collections.Counter(key for job in jobs for key in job.needs.values())
        final = {job.key for job in jobs if get_stage(job.pipeline, job.stage).final}
        memory: dict[str, Any] = {}
        outcome = RunOutcome({}, {}, {})
        with tqdm(total=len(jobs), disable=not progress_enabled(self.progress), desc=description, unit="job",
                  file=sys.stderr) as bar:
            for job in jobs:
                bar.set_postfix_str(f"{job.stage} {job.extractor}")
                failed_upstream = next((key for key in job.needs.values() if key in outcome.failures), None)
                if failed_upstream is not None:
                    cause = outcome.failures[failed_upstream]
                    outcome.failures[job.key] = dataclasses.replace(cause, upstream=cause.upstream or failed_upstream)
                else:
                    try:
                        ran = execute_job(job, {stage: memory[key] for stage, key in job.needs.items()}, context)
                    except Exception as exc:
                        if on_error == "raise":
                            exc.add_note(f"vertebrae: raised in the {job.stage} stage of {job.extractor!r}")
                            raise
                        outcome.failures[job.key] = JobFailure(job.stage, type(exc).__name__, str(exc))
                    else:
                        memory[job.key] = ran.artifact
                        outcome.timings[job.key] = ran.timings
                        outcome.statuses[job.key] = ran.status
                        outcome.persisted[job.key] = ran.footprint()
                for key in job.needs.values():
                    remaining_reads[key] -= 1
                    if remaining_reads[key] == 0 and key not in final:
                        memory.pop(key, None)
                bar.update(1)
        outcome.artifacts = {key: memory[key] for key in final if key in memory}
        return outcome


def execute_plan(front: Any, runner: Any = None, *, description: str = "vertebrae") -> tuple[Any, RunOutcome]:
    """(plan, outcome) of a front door (``Benchmark``, ``RetrievalBenchmark``, ``ZeroShotBenchmark``).

    Every front door plans from one run context and executes with ``runner`` (default: a
    :class:`LocalRunner` honouring its ``progress``), under its ``on_error`` policy.
    """
    context = front._context()
    plan = front.plan(context)
    runner = LocalRunner(front.progress) if runner is None else runner
    return plan, runner.run(plan.jobs, context, on_error=front.on_error, description=description)

"""In-process runner: executes a plan's jobs in order, freeing each artifact when nothing needs it.

The plan lists jobs depth-first (chain by chain), and an artifact is dropped as soon
as the last job reading it has run, so peak memory holds one chain's embeddings, not
every extractor's.  Jobs are unique by key, so identical work runs once.  Only the jobs
:func:`~vertebrae.execution.caching.pull` finds needed run: a cache hit is read without
computing its inputs.  Per-job wall-clock seconds are recorded beside the artifacts
(``RunOutcome.timings``).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._base.progress import progress_enabled
from .caching import JobRun, execute_job, pull, record_not_needed
from .jobs import JobFailure, RunOutcome, UpstreamFailed, annotate, check_on_error, run_job
from .plan import StageJob
from .registry import definition_of


class LocalRunner:
    """Runs jobs one after another in this process."""

    def __init__(self, progress: bool | None = None) -> None:
        self.progress = progress

    def run(self, jobs: Sequence[StageJob], context: Any, *, on_error: str = "raise",
            description: str = "vertebrae", given: Mapping[str, Any] | None = None,
            keep: Collection[str] = ()) -> RunOutcome:
        """Run ``jobs``; ``given`` artifacts (an earlier round's, by key) are read, never recomputed; the artifacts of
        ``keep`` keys are returned beside the final ones (for a later round)."""
        from tqdm.auto import tqdm

        check_on_error("LocalRunner.run", on_error)
        given = dict(given or {})
        pulled = pull(jobs, context, keep=keep, given=given)
        computing = [job for job in pulled.jobs if job.key not in pulled.hits]
        remaining_reads = collections.Counter(key for job in computing for key in job.needs.values())
        final = {job.key for job in jobs if definition_of(job).final} | set(keep)
        run = _LocalRun(jobs, pulled.hits, context, on_error, given)
        with tqdm(total=len(pulled.jobs), disable=not progress_enabled(self.progress), desc=description, unit="job",
                  file=sys.stderr) as bar:
            for job in pulled.jobs:
                bar.set_postfix_str(f"{job.stage} {job.extractor}")
                run.run(job)
                freed = [*run.fallback, *(job.needs.values() if job.key not in pulled.hits else ())]
                run.fallback.clear()
                for key in freed:
                    remaining_reads[key] -= 1
                    if remaining_reads[key] <= 0 and key not in final:
                        run.memory.pop(key, None)
                bar.update(1)
        record_not_needed(run.outcome, jobs)
        run.outcome.artifacts = {key: run.memory[key] for key in final if key in run.memory}
        return run.outcome


class _LocalRun:
    """One run's artifacts in memory, its outcome, and how a job obtains its inputs."""

    def __init__(self, jobs: Sequence[StageJob], hits: frozenset[str], context: Any, on_error: str,
                 given: dict[str, Any]) -> None:
        self.by_key = {job.key: job for job in jobs}
        self.hits, self.context, self.on_error = hits, context, on_error
        self.memory: dict[str, Any] = given
        self.outcome = RunOutcome({}, {}, {})
        #: Keys computed only because an expected hit could not be read (freed after the job that needed them).
        self.fallback: list[str] = []
        #: The exception this run is raising (``on_error="raise"``): annotated once, by the job that raised it.
        self.raising: BaseException | None = None

    def run(self, job: StageJob) -> None:
        """Run ``job`` (unless it already ran): read from the cache when it is an expected hit, else computed."""
        if job.key in self.memory or job.key in self.outcome.failures:
            return
        try:
            if job.key in self.hits:  # inputs only if the stored artifact turns out corrupt or gone
                ran = execute_job(job, {}, self.context, compute=lambda: run_job(job, self._inputs(job), self.context))
            else:
                ran = execute_job(job, self._inputs(job), self.context)
        except UpstreamFailed as upstream:
            cause = self.outcome.failures[upstream.key]
            self.outcome.failures[job.key] = cause.through(upstream.key)
            return
        except Exception as exc:
            if self.on_error == "raise":
                if exc is not self.raising:
                    self.raising = annotate(exc, job)
                raise
            self.outcome.failures[job.key] = JobFailure.of(job, exc)
            return
        self._keep(job, ran)

    def _inputs(self, job: StageJob) -> dict[str, Any]:
        """The artifacts ``job`` reads.  In plan order they are in memory; an input that is not (an expected hit's,
        which turned out unreadable, or one of that input's own inputs) is computed now."""
        inputs = {}
        for stage, key in job.needs.items():
            if key not in self.memory and key not in self.outcome.failures:
                self.run(self.by_key[key])
                self.fallback.append(key)
            if key in self.outcome.failures:
                raise UpstreamFailed(key)
            inputs[stage] = self.memory[key]
        return inputs

    def _keep(self, job: StageJob, ran: JobRun) -> None:
        self.memory[job.key] = ran.artifact
        self.outcome.timings[job.key] = ran.timings
        self.outcome.statuses[job.key] = ran.status
        self.outcome.persisted[job.key] = ran.footprint()

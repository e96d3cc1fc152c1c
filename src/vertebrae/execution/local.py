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
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..progress import progress_enabled
from .caching import execute_job
from .jobs import JobFailure, RunOutcome, annotate, check_on_error
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
        remaining_reads = collections.Counter(key for job in jobs for key in job.needs.values())
        final = {job.key for job in jobs if definition_of(job).final} | set(keep)
        memory: dict[str, Any] = dict(given or {})
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
                            raise annotate(exc, job)
                        outcome.failures[job.key] = JobFailure.of(job, exc)
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

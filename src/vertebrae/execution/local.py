"""In-process runner: executes a plan's stage jobs in order, artifacts kept in memory."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .plan import StageJob


def progress_enabled(progress: bool | None) -> bool:
    """``None``: show bars only when stderr is a terminal; ``True``/``False`` force it."""
    return sys.stderr.isatty() if progress is None else bool(progress)


class LocalRunner:
    """Runs each job by calling ``stage_functions[job.stage](job, inputs)``.

    ``inputs`` maps the upstream stage name to its artifact.  Artifacts live in a dict
    keyed by the job key, so identical jobs (same key) run once.
    """

    def __init__(self, progress: bool | None = None) -> None:
        self.progress = progress

    def run(self, jobs: Sequence[StageJob],
            stage_functions: Mapping[str, Callable[[StageJob, dict[str, Any]], Any]]) -> dict[str, Any]:
        from tqdm.auto import tqdm

        store: dict[str, Any] = {}
        stage_of = {job.key: job.stage for job in jobs}
        with tqdm(total=len(jobs), disable=not progress_enabled(self.progress), desc="vertebrae",
                  unit="job", file=sys.stderr) as bar:
            for job in jobs:
                bar.set_postfix_str(f"{job.stage} {job.extractor}")
                if job.key not in store:
                    inputs = {stage_of[key]: store[key] for key in job.needs}
                    store[job.key] = stage_functions[job.stage](job, inputs)
                bar.update(1)
        return store

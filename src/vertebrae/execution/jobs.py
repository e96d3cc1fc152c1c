"""Running one job, and what a run returns: artifacts, timings, cache facts and structured failures.

Every runner (local, dask, staged) runs a job through :func:`run_job` and reports a failing
job as a :class:`JobFailure`.  In ``on_error="raise"`` mode the exception itself carries its
failure (:func:`annotate`): the stage and type travel as data (``exc.vertebrae_failure``),
the note only tells a human reading the traceback.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..errors import ConfigError
from .plan import StageJob
from .registry import definition_of

ON_ERROR = ("raise", "record")


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

    @classmethod
    def of(cls, job: StageJob, exc: BaseException) -> JobFailure:
        return cls(job.stage, type(exc).__name__, str(exc))

    def through(self, key: str) -> JobFailure:
        """This failure as inherited by a reader of job ``key``: ``upstream`` names the job that failed first."""
        return dataclasses.replace(self, upstream=self.upstream or key)

    def to_dict(self, extractor: str) -> dict[str, Any]:
        """The ``error`` of a result: the failing stage, the exception type and message, the chain's extractor."""
        return {"stage": self.stage, "type": self.error_type, "message": self.message, "extractor": extractor}


class UpstreamFailed(Exception):
    """Raised while obtaining a job's inputs: the input ``key`` failed (its failure is recorded under that key)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def annotate(exc: BaseException, job: StageJob) -> BaseException:
    """Attach the job's failure to an exception that stops a run (``on_error="raise"``)."""
    exc.vertebrae_failure = JobFailure.of(job, exc)  # type: ignore[attr-defined]
    exc.add_note(f"vertebrae: raised in the {job.stage} stage of {job.extractor!r}")
    return exc


def failure_of(exc: BaseException) -> JobFailure | None:
    """The failure a runner attached to ``exc`` (None: it was raised before any stage ran)."""
    return getattr(exc, "vertebrae_failure", None)


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
    definition = definition_of(job)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    artifact = definition.function(job, inputs, context, timings)
    timings["seconds"] = time.perf_counter() - start
    return artifact, timings

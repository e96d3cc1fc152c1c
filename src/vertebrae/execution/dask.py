"""The dask.distributed runner: a plan's jobs as cluster tasks, running the same stage code as the local runner.

Every job becomes one task that calls :func:`~vertebrae.execution.caching.execute_job`
(the run's cache, then the stage through ``run_job``) on a worker; its inputs are the futures of the jobs it reads, so independent chains run in
parallel and artifacts stay on the workers (only the final ``assemble`` artifacts and
each job's timings come back to the driver).  Two kinds of work fan out further:

- an ``extract`` job over more than ``shard_rows`` rows fits its extractor once, then
  transforms row shards as separate tasks and stacks them on a worker (the steps of the
  extract stage, declared by its stage as :class:`~vertebrae.execution.registry.RowShards`); with the
  run's cache on a shared store the shards are written there and read back by the stacking
  task (shards already stored are not recomputed), else they travel as futures;
- a stage that maps independent repeats (stability) sends them to the cluster through
  :mod:`vertebrae.execution.fanout`, the embedding matrix shipped once.

With resource profiling on, every extractor call is measured on its worker and the stacking
task merges the shards' measurements (:func:`~vertebrae._base.profile_records.distributed_profile`).

Execution is pull-based, as in the local runner (:func:`~vertebrae.execution.caching.pull`):
a job whose artifact the cache holds is submitted without its inputs, and a job only such hits
read is not submitted; an expected hit a worker cannot read comes back ``stale`` and is
submitted again with its inputs.

User errors behave as in the local runner (``on_error="raise"`` re-raises the stage's
exception with the same note, ``"record"`` returns a :class:`JobFailure`).  A job whose
worker dies is retried by the scheduler.  Work the scheduler cannot retry — the run context
(scattered data dask cannot recompute) when every worker holding it died, or a job's
fanned-out sub-tasks (stability repeats) lost under it — goes through one resubmission: the
unfinished jobs are submitted again, up to ``distributed.scheduler.allowed-failures`` times
per run.  Beyond it (and for a task out of the scheduler's own retries) the job ends in one
:class:`ExecutionError` naming the stage, the extractor, the job and what happened (the dask
exception is its ``__cause__``): raised under ``on_error="raise"``, recorded as the job's
failure under ``"record"`` (the other chains finish).  A scheduler that goes away raises in
either mode.  dask is imported only when a runner connects (the ``[dask]`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pickle
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from .._base.config import check_int
from ..artifacts.store import MemoryStore
from ..errors import ArtifactError, ArtifactWarning, ConfigError, DependencyError, ExecutionError
from .._base.extras import install_hint
from .._base.profile_records import PROFILE_KEY
from .._base import fanout
from .._base.progress import progress_enabled
from .caching import job_cache, pull, record_not_needed, shard_key
from .jobs import JobFailure, RunOutcome, annotate, check_on_error
from .local import LocalRunner
from .plan import StageJob
from .registry import definition_of

#: Rows per extract shard: 100,000 rows x 768 float32 dimensions is 307 MB per shard.
DEFAULT_SHARD_ROWS = 100_000
#: A private cluster starts only for plans with at least this many row-scorings (rows x scoring calls): one
#: overlap scoring call costs about 25 us per row on a quiet core (20,000 x 384, k=20), so 1,000,000 is ~25 s
#: of sequential scoring, against ~4 s (idle machine) to start 2 workers and import the scoring stack in them.
SEQUENTIAL_BELOW = 1_000_000
WORKER_HINT = ("The scheduler retries a task whose worker dies up to distributed.scheduler.allowed-failures times; "
               "check the workers' memory limits and logs, then rerun")
SCHEDULER_HINT = "check that the scheduler is running (its logs, its memory), then rerun"
#: How long a resubmission waits for a worker: a nanny restarting a killed worker took up to ~20 s on a loaded
#: 2-core machine (the new process imports the scoring stack again).
WORKER_RESTART_S = 120


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise DependencyError(f"DaskRunner needs dask.distributed; {install_hint('dask')}") from None
    return distributed


class DaskRunner:
    """Runs a plan on a dask.distributed cluster.

    Give exactly one of ``client`` (a connected ``distributed.Client``, left open),
    ``address`` (a scheduler address such as ``tcp://10.0.0.5:8786``; the runner
    connects and disconnects per run) or ``n_workers`` (a private ``LocalCluster`` of
    that many single-threaded worker processes on 127.0.0.1, started per run, but only
    when the plan's work, rows x parallel scoring units, is at least ``sequential_below``:
    starting a cluster costs seconds, so smaller runs stay on the sequential
    :class:`LocalRunner`).  ``shard_rows`` is the row count of one extract shard
    (``None``: never shard).
    """

    def __init__(self, client: Any = None, *, address: str | None = None, n_workers: int | None = None,
                 shard_rows: int | None = DEFAULT_SHARD_ROWS, sequential_below: int = SEQUENTIAL_BELOW,
                 progress: bool | None = None) -> None:
        given = [name for name, value in (("client", client), ("address", address), ("n_workers", n_workers))
                 if value is not None]
        if len(given) != 1:
            raise ConfigError(f"DaskRunner needs exactly one of client=, address= or n_workers=, got "
                              f"{given or 'none'}; e.g. DaskRunner(address='tcp://scheduler:8786') or "
                              "DaskRunner(n_workers=2) for a local process cluster")
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigError(f"DaskRunner: address must be a scheduler address string such as "
                              f"'tcp://10.0.0.5:8786', got {address!r}")
        self.client, self.address = client, address
        self.n_workers = check_int("DaskRunner", "n_workers", n_workers, minimum=1, allow_none=True)
        self.shard_rows = check_int("DaskRunner", "shard_rows", shard_rows, minimum=1, allow_none=True)
        self.sequential_below = check_int("DaskRunner", "sequential_below", sequential_below, minimum=0)
        self.progress = progress
        #: "dask" or "sequential": which path the last run took (a private cluster skips small runs).
        self.last_path: str | None = None

    def run(self, jobs: Sequence[StageJob], context: Any, *, on_error: str = "raise",
            description: str = "vertebrae", given: Mapping[str, Any] | None = None,
            keep: Collection[str] = ()) -> RunOutcome:
        """As :meth:`LocalRunner.run`: ``given`` artifacts are sent to the workers and read, never recomputed; the
        artifacts of ``keep`` keys come back to the driver beside the final ones."""
        check_on_error("DaskRunner.run", on_error)
        given = dict(given or {})
        if self.n_workers is not None and parallel_work(jobs, context) < self.sequential_below:
            self.last_path = "sequential"
            return LocalRunner(self.progress).run(jobs, context, on_error=on_error, description=description,
                                                  given=given, keep=keep)
        distributed = _distributed()
        self.last_path = "dask"

        def execute(client: Any) -> RunOutcome:
            return _DaskRun(client, jobs, context, on_error, self.shard_rows, self._bar(description),
                            given, set(keep)).execute()

        if self.client is not None:
            return execute(self.client)
        if self.address is not None:
            with _connected(self.address) as client:
                return execute(client)
        with local_cluster(self.n_workers) as cluster, distributed.Client(cluster) as client:
            client.wait_for_workers(self.n_workers)
            return execute(client)

    def _bar(self, description: str) -> Callable[[int], Any]:
        from tqdm.auto import tqdm

        return lambda total: tqdm(total=total, disable=not progress_enabled(self.progress), desc=description,
                                  unit="job", file=sys.stderr)


class _ReconnectCancelled(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


@contextlib.contextmanager
def quiet_reconnect() -> Iterator[None]:
    """While open, drop what dask's client logs when closing it cancels its attempts to reach a scheduler that
    is gone: an ERROR record with a CancelledError traceback (the run's ExecutionError already says what
    happened). Wrap the ``with client:`` block of a client the caller closes."""
    log, quiet = logging.getLogger("distributed.client"), _ReconnectCancelled()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


@contextlib.contextmanager
def _connected(address: str) -> Iterator[Any]:
    """A client of the scheduler at ``address`` for one run; a scheduler that cannot be reached is an ExecutionError."""
    distributed = _distributed()
    try:
        client = distributed.Client(address)
    except OSError as exc:  # refused, unresolvable, or a timeout (distributed.comm.timeouts.connect)
        raise ExecutionError(f"cannot connect to the dask scheduler at {address} ({type(exc).__name__}: {exc}); "
                             "check the address and that the scheduler is running") from exc
    with quiet_reconnect(), client:
        yield client


#: The allocator variable dask's nanny sets for its workers (and leaves in the parent's environment).
MALLOC_TRIM = "MALLOC_TRIM_THRESHOLD_"


@contextlib.contextmanager
def local_cluster(n_workers: int) -> Iterator[Any]:
    """A private LocalCluster: worker processes with one thread each, on 127.0.0.1, no dashboard.

    dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which turns off glibc's dynamic
    mmap threshold, so every large temporary array becomes a fresh ``mmap`` and page-faults in again;
    an overlap scoring call then took 1.55x the CPU time in a worker that it took in the driver
    (docs/distributed.md). The private cluster's workers run without the variable: it is left out of
    the nanny's settings and, while the cluster runs, out of this process's environment, which the
    workers inherit (an earlier dask cluster in this process leaves it there).
    """
    distributed = _distributed()
    import dask

    saved = os.environ.pop(MALLOC_TRIM, None)
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{MALLOC_TRIM}": None}):
            cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
        with cluster:
            yield cluster
    finally:
        if saved is not None:
            os.environ.setdefault(MALLOC_TRIM, saved)


def parallel_work(jobs: Sequence[StageJob], context: Any) -> int:
    """Rows x independent scoring units (each stage declares its own: a score job 1, stability its repeats)."""
    units = sum(definition_of(job).units(context.settings) for job in jobs)
    dataset = context.dataset
    rows = getattr(dataset, "n_samples", None) or getattr(dataset, "n_gallery", 0)
    return units * int(rows)


# ------------------------------------------------------------------------ tasks (run on workers)
@dataclasses.dataclass
class _Failed:
    """A job's error, carried as a task result so dependents can propagate it like the local runner."""

    failure: JobFailure
    key: str
    #: The exception itself when it survives pickling (to re-raise it on the driver), else None.
    exception: BaseException | None
    traceback: str

    @classmethod
    def of(cls, job: StageJob, exc: BaseException) -> _Failed:
        return cls(JobFailure.of(job, exc), job.key, _carried(exc), "".join(traceback.format_exception(exc)))


def _carried(exc: BaseException) -> BaseException | None:
    """``exc`` when it survives pickling (to travel from a worker to the driver), else None."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # an exception type that cannot be rebuilt: its type and message still travel
        return None


@dataclasses.dataclass
class _Done:
    """A task's result: the artifact, its timings and cache facts (``JobRun``), or the failure."""

    artifact: Any = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    failed: _Failed | None = None
    status: str = ""
    footprint: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: An expected cache hit the worker could not read (corrupt or gone), or a job reading one: the driver
    #: submits it again, with its inputs.
    stale: bool = False

    @classmethod
    def of(cls, ran: Any) -> _Done:
        return cls(ran.artifact, ran.timings, None, ran.status, ran.footprint())


class _StaleHit(Exception):
    """The stored artifact of an expected hit could not be read: the job needs its inputs after all."""


def _unread() -> tuple[Any, dict[str, float]]:
    raise _StaleHit


class _FanoutLost(ExecutionError):
    """A job's fanned-out sub-tasks were lost on the cluster (raised on its worker): the driver resubmits the job."""

    def __init__(self, message: str, job_key: str = "", cause: BaseException | None = None) -> None:
        super().__init__(message, job_key, cause)
        self.message, self.job_key, self.cause = message, job_key, cause

    def __str__(self) -> str:
        return self.message


def _upstream(job: StageJob, done: Sequence[_Done | None]) -> _Done | None:
    """The upstream failure or staleness a job inherits (an input is None only beside a failed one)."""
    for item in done:
        if item is not None and item.failed is not None:
            cause = item.failed
            return _Done(failed=dataclasses.replace(
                cause, failure=cause.failure.through(cause.key)))
    if any(item.stale for item in done):
        return _Done(stale=True)
    return None


def _execute(job: StageJob, context: Any, *needed: _Done, hit: bool = False) -> _Done:
    """One job on a worker: its inputs are the artifacts of the jobs it reads, in ``job.needs`` order; an expected
    cache ``hit`` gets none, and comes back stale when its stored artifact cannot be read."""
    failed = _upstream(job, needed)
    if failed is not None:
        return failed
    from .caching import execute_job

    inputs = {stage: item.artifact for stage, item in zip(job.needs, needed)}
    started = time.time()
    try:
        with fanout.installed(_cluster_map):  # the run's cache, when it has one, as in the local runner
            ran = execute_job(job, inputs, context, compute=_unread if hit else None)
    except _StaleHit:
        return _Done(stale=True)
    except _FanoutLost as lost:  # the cluster's failure, not the stage's: the driver resubmits the job
        raise _FanoutLost(lost.message, job.key, lost.cause) from None
    except Exception as exc:
        return _Done(failed=_Failed.of(job, exc))
    if PROFILE_KEY in ran.timings:
        ran.timings[PROFILE_KEY] = _whole_job_profile(ran.timings[PROFILE_KEY], started)
    return _Done.of(ran)


def _worker_address() -> str:
    from distributed import get_worker

    return get_worker().address


def _whole_job_profile(measured: dict[str, Any], started: float) -> dict[str, Any]:
    """An unsharded job's profile measured on this worker, as a distributed profile (retrieval: per endpoint)."""
    from .._base.profile_records import WorkerMeasurement, distributed_profile

    worker = _worker_address()
    if "schema" in measured:
        return distributed_profile([WorkerMeasurement(worker, started, measured)])
    return {side: distributed_profile([WorkerMeasurement(worker, started, profile)])
            for side, profile in measured.items()}


@dataclasses.dataclass(frozen=True)
class _ShardRef:
    """A shard written to the run's store: the stack task reads it back (only this reference travels)."""

    start: int
    stop: int
    #: Stored by an earlier run and not recomputed in this one.
    reused: bool = False


def _fit(job: StageJob, context: Any) -> _Done:
    """Extract step 1 (sharded extract): the fitted extractor travels to the shard tasks."""
    start = time.perf_counter()
    try:
        return _Done(definition_of(job).shards.fit(job, context), {"fit": time.perf_counter() - start})
    except Exception as exc:
        return _Done(failed=_Failed.of(job, exc))


def _transform(job: StageJob, context: Any, fitted: _Done, start: int, stop: int, stored: bool) -> _Done:
    """Extract step 2 (sharded extract): the raw outputs of rows ``start:stop``; ``stored``: written to the
    run's store instead, and only a :class:`_ShardRef` returned (the stack task reads it back)."""
    if fitted.failed is not None:
        return fitted
    try:
        outputs, timings = _compute_shard(job, context, fitted.artifact, start, stop)
        if stored:
            return _Done(_store_shard(job, context, start, stop, outputs, timings), timings)
        return _Done(outputs, timings)
    except Exception as exc:
        return _Done(failed=_Failed.of(job, exc))


def _compute_shard(job: StageJob, context: Any, extractor: Any, start: int,
                   stop: int) -> tuple[dict[str | None, Any], dict[str, Any]]:
    """(rows ``start:stop``'s outputs, their timings); profiled on this worker when resource profiling is on."""
    shards = definition_of(job).shards
    rows = shards.rows(context)[start:stop]
    profiling = getattr(context.settings, "resource_profiling", None)
    began = time.perf_counter()
    timings: dict[str, Any] = {}
    if profiling is None or not profiling.enabled:
        outputs = shards.transform(job, extractor, rows)
    else:
        outputs, timings[PROFILE_KEY] = shards.measured(job, extractor, rows, profiling, _worker_address())
    timings["transform"] = time.perf_counter() - began
    return outputs, timings


def _store_shard(job: StageJob, context: Any, start: int, stop: int, outputs: dict[str | None, Any],
                 timings: dict[str, Any]) -> _ShardRef | dict[str | None, Any]:
    """Check a shard (its stage's hook: no invalid shard is stored) and write it to the store; the outputs themselves
    when the store refuses (as a cache write, a warning)."""
    from .caching import write_shard

    began = time.perf_counter()
    checked = definition_of(job).shards.check(job, outputs, start, stop)
    try:
        write_shard(context.cache, job, context, start, stop, checked)
    except ArtifactError as exc:
        warnings.warn(f"cache: could not store rows {start}:{stop} of {job.key} in {context.cache.config.url} "
                      f"({exc}); the shard travels to the stack task instead", ArtifactWarning, stacklevel=2)
        return checked
    timings["shard_write"] = time.perf_counter() - began
    return _ShardRef(start, stop)


def _stack(job: StageJob, context: Any, fitted: _Done | None, *parts: _Done) -> _Done:
    """Extract step 3 (sharded extract): stack and validate the shards (read back from the store when they were
    written there) into the job's artifact, stored through the run's cache like any extract result."""
    from .caching import record_computed

    failed = next((item for item in (fitted, *parts) if item is not None and item.failed is not None), None)
    if failed is not None:
        return failed
    began = time.perf_counter()
    try:
        artifact = definition_of(job).shards.stack(job, context,
                                                   [_shard_outputs(job, context, fitted, part) for part in parts])
    except Exception as exc:
        return _Done(failed=_Failed.of(job, exc))
    computed = [part for part in parts if not (isinstance(part.artifact, _ShardRef) and part.artifact.reused)]
    timings: dict[str, Any] = {"fit": fitted.timings["fit"]} if fitted is not None else {}
    timings.update(transform=sum(part.timings["transform"] for part in computed), shards=float(len(parts)))
    if len(computed) < len(parts):
        timings["shards_reused"] = float(len(parts) - len(computed))
    if any("shard_write" in part.timings for part in computed):
        timings["shard_write"] = sum(part.timings.get("shard_write", 0.0) for part in computed)
    timings["stack"] = time.perf_counter() - began
    timings["seconds"] = timings.get("fit", 0.0) + timings["transform"] + timings["stack"]
    profiling = getattr(context.settings, "resource_profiling", None)
    if profiling is not None and profiling.enabled:
        from .._base.profile_records import distributed_profile

        timings[PROFILE_KEY] = distributed_profile([part.timings[PROFILE_KEY] for part in computed],
                                                   shards=len(parts), shards_reused=len(parts) - len(computed))
    return _Done.of(record_computed(job, artifact, timings, context))


def _shard_outputs(job: StageJob, context: Any, fitted: _Done | None, part: _Done) -> dict[str | None, Any]:
    """A shard's outputs: carried in ``part``, or read from the store (a reused shard found corrupt or gone is
    recomputed here and stored again, with a warning, as the cache does with a corrupt entry)."""
    from .caching import read_shard

    ref = part.artifact
    if not isinstance(ref, _ShardRef):
        return ref
    try:
        return read_shard(context.cache, job, ref.start, ref.stop)
    except ArtifactError as exc:
        if not ref.reused:
            raise  # written in this run and unreadable now: the store is failing, not an old entry
        warnings.warn(f"cache: rows {ref.start}:{ref.stop} of {job.key} in {context.cache.config.url} cannot be "
                      f"reused ({exc}); recomputing them", ArtifactWarning, stacklevel=2)
    extractor = fitted.artifact if fitted is not None else definition_of(job).shards.fit(job, context)
    outputs, timings = _compute_shard(job, context, extractor, ref.start, ref.stop)
    part.artifact, part.timings = _store_shard(job, context, ref.start, ref.stop, outputs, timings), timings
    return outputs


def _report(done: _Done) -> _Done:
    """The small part of a result the driver needs for every job: timings and failure, not the artifact."""
    return _Done(None, done.timings, done.failed, done.status, done.footprint, done.stale)


def _apply(function: Callable[..., Any], shared: tuple, item: Any) -> Any:
    return function(*shared, item)


def _cluster_map(function: Callable[..., Any], shared: tuple, items: Sequence[Any]) -> list[Any]:
    """The fan-out mapper installed on workers: ``shared`` is scattered once, each item is one task."""
    from distributed import worker_client

    with worker_client() as client:  # secedes this task's thread, so its sub-tasks can run on this worker too
        # A copy on every worker: losing one worker must not lose the only copy (scattered data is not recomputable).
        [shared_future] = client.scatter([shared], hash=False, broadcast=True)
        token = uuid.uuid4().hex[:8]
        futures = [client.submit(_apply, function, shared_future, item, key=f"vertebrae-fanout-{token}-{i}",
                                 pure=False) for i, item in enumerate(items)]
        try:
            return client.gather(futures)
        except _cluster_errors() as exc:
            raise _FanoutLost("its fanned-out sub-tasks (stability repeats) were lost on the cluster",
                              cause=_carried(exc)) from exc


def _cluster_errors() -> tuple[type[BaseException], ...]:
    """What the cluster raises when tasks are lost (worker deaths, cancellation), as opposed to user errors."""
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    return KilledWorker, FutureCancelledError


# ------------------------------------------------------------------------ the driver
# The reasons distributed's client gives a cancelled future when it lost its scheduler (client.py); any other
# reason comes from a live scheduler that forgot the task.
SCHEDULER_GONE = frozenset({"scheduler-connection-lost", "scheduler-restart"})


@dataclasses.dataclass(frozen=True)
class _Loss:
    """Work of ``job`` the cluster lost and the scheduler cannot retry: resubmitted, up to allowed-failures."""

    job: StageJob
    what: str
    cause: BaseException


def _holds(cache: Any, key: str) -> bool | None:
    """Whether the run's store holds ``key`` (a manifest lookup, no data read); None when it cannot answer."""
    try:
        return cache.store.has(key)
    except ArtifactError:
        return None


class _DaskRun:
    def __init__(self, client: Any, jobs: Sequence[StageJob], context: Any, on_error: str, shard_rows: int | None,
                 bar: Callable[[int], Any], given: Mapping[str, Any], keep: set[str]) -> None:
        self.client, self.jobs, self.context, self.on_error = client, list(jobs), context, on_error
        self.shard_rows, self.bar = shard_rows, bar
        #: An earlier round's artifacts the jobs read (scattered, never recomputed), and the keys to bring back whole.
        self.given, self.keep = given, keep
        self.token = uuid.uuid4().hex[:8]
        #: dask key -> the job it belongs to (to name the job a lost worker was running).
        self.owners: dict[str, StageJob] = {}
        self.by_key = {job.key: job for job in self.jobs}
        pulled = pull(self.jobs, context, keep=keep, given=given)
        #: The jobs the run needs (pull-based), and the expected cache hits among them (submitted without inputs;
        #: one a worker could not read leaves this set and is submitted again with its inputs).
        self.needed, self.hits = {job.key for job in pulled.jobs}, set(pulled.hits)

    def _key(self, job: StageJob, part: str) -> str:
        key = f"vertebrae-{job.stage}-{job.key.rsplit('/', 1)[-1][:12]}-{self.token}-{part}"
        self.owners[key] = job
        return key

    def _shards(self, job: StageJob) -> list[tuple[int, int]] | None:
        """Row ranges of a job whose stage declares row shards (an extraction), or None when it runs as one task."""
        shards = definition_of(job).shards
        if shards is None or self.shard_rows is None:
            return None
        rows = shards.rows(self.context)
        if not (hasattr(rows, "shape") or isinstance(rows, (list, tuple))):
            return None  # inputs that do not slice by rows (e.g. multi-modal fields) run whole
        n = rows.shape[0] if hasattr(rows, "shape") else len(rows)
        extractor = self.context.extractors.get(job.params["extractor"])
        if n <= self.shard_rows or not getattr(extractor, "shardable", True):
            return None
        return [(start, min(start + self.shard_rows, n)) for start in range(0, n, self.shard_rows)]

    def _submit(self, job: StageJob, context: Any, needed: list[Any]) -> Any:
        submit = self.client.submit
        if job.key in self.hits:  # read on a worker, without its inputs
            return submit(_execute, job, context, hit=True, key=self._key(job, "job"), pure=False)
        shards = self._shards(job)
        cache, _ = job_cache(job, self.context)
        mode = None if cache is None else cache.config.mode
        held = shards is not None and cache is not None and _holds(cache, job.key)
        if shards is None or held is None or (held and mode != "refresh"):
            # Whole through the cache on a worker: a stored extract is a hit there and its shards never run; a
            # store the driver cannot query is handled there as in the local runner (per the cache mode).
            return submit(_execute, job, context, *needed, key=self._key(job, "job"), pure=False)
        # With a shared store (not read_only, not in-memory) the shards go through it; otherwise they are futures.
        stored = mode in ("read_write", "refresh") and not isinstance(cache.store, MemoryStore)
        reused = {i for i, (start, stop) in enumerate(shards)
                  if stored and mode == "read_write" and _holds(cache, shard_key(job.key, start, stop))}
        fitted = None if len(reused) == len(shards) else submit(_fit, job, context, key=self._key(job, "fit"),
                                                                pure=False)
        parts = [_Done(_ShardRef(start, stop, reused=True)) if i in reused else
                 submit(_transform, job, context, fitted, start, stop, stored, key=self._key(job, f"shard{i}"),
                        pure=False)
                 for i, (start, stop) in enumerate(shards)]
        return submit(_stack, job, context, fitted, *parts, key=self._key(job, "job"), pure=False)

    def execute(self) -> RunOutcome:
        """Submit the needed jobs and collect them; lost work is resubmitted, up to allowed-failures times.

        The run context is scattered data, which dask cannot recompute: when every worker holding it
        dies (a worker killed twice in a row, each retry on the other one), the scheduler forgets it and
        every task waiting on it.  A job whose fanned-out sub-tasks were lost did not die itself, so the
        scheduler does not retry it either.  Both are the same loss: the unfinished jobs are submitted
        again (with a fresh copy of the context), up to ``distributed.scheduler.allowed-failures`` times
        per run, as dask itself retries a task whose worker died.  Beyond that, each lost job ends in an
        :class:`ExecutionError`: raised, or recorded as its failure under ``on_error="record"``.
        """
        distributed = _distributed()
        import dask

        allowed = int(dask.config.get("distributed.scheduler.allowed-failures"))
        done: dict[str, _Done] = {}
        losses = 0
        with self.bar(len(self.needed)) as bar:
            while self._required(done):
                lost = self._attempt(distributed, done, bar, resubmission=losses > 0)
                if not lost:
                    continue
                losses += 1
                if losses <= allowed:
                    continue
                errors = [self._failed(loss.job, f"{loss.what}, {losses} times; the runner resubmits lost work up "
                                       f"to distributed.scheduler.allowed-failures ({allowed}) times. {WORKER_HINT}",
                                       loss.cause) for loss in lost]
                if self.on_error == "raise":
                    raise errors[0] from lost[0].cause
                for loss, error in zip(lost, errors):
                    done[loss.job.key] = _Done(failed=_Failed.of(loss.job, error))
        return self._outcome(done)

    def _required(self, done: dict[str, _Done]) -> set[str]:
        """Keys of the jobs the next attempt submits: every needed job without a report, plus the inputs of those
        it computes whose artifacts the driver does not hold (an intermediate artifact went with the attempt that
        made it; a failure or a whole artifact travels from the driver; a job with a failed input needs no other)."""
        required = {key for key in self.needed if key not in done}
        for job in reversed(self.jobs):  # plan order is a topological order
            held = {key: self._input(key, done) for key in job.needs.values()}
            if job.key in required and job.key not in self.hits and not any(
                    report is not None and report.failed is not None for report in held.values()):
                required.update(key for key, report in held.items() if key not in self.given and report is None)
        return required

    def _input(self, key: str, done: dict[str, _Done]) -> _Done | None:
        """What the driver holds of an input: its failure, or its whole artifact (final or kept); else None."""
        report = done.get(key)
        if report is not None and (report.failed is not None or self._whole(self.by_key[key])):
            return report
        return None

    def _attempt(self, distributed: Any, done: dict[str, _Done], bar: Any, *, resubmission: bool) -> list[_Loss]:
        """Submit the required jobs and collect those not yet ``done`` into ``done``; returns the work lost.

        The driver holds only each job's small report (the whole result for a final job), so the
        scheduler frees every intermediate artifact once the jobs reading it are done.
        """
        if resubmission:
            self.token = uuid.uuid4().hex[:8]  # fresh keys: tasks of the lost attempt may still be known there
        required = self._required(done)
        try:
            if resubmission:  # the workers that died may still be restarting
                self.client.wait_for_workers(1, timeout=WORKER_RESTART_S)
            # On every worker: scattered data is not recomputable, so one dead worker must not hold the only copy.
            [context] = self.client.scatter([self.context], hash=False, broadcast=True)
        except OSError as exc:  # CommClosedError, TimeoutError: no scheduler, or no worker to hold the context
            raise self._failed(self._waiting(done), "the run context could not be sent to the workers; check that "
                               "the scheduler runs and has workers", exc) from exc
        futures: dict[str, Any] = dict(zip(self.given, self.client.scatter([_Done(a) for a in self.given.values()],
                                                                          hash=False))) if self.given else {}
        for job in self.jobs:
            if job.key in required:
                inputs = [futures[key] if key in futures else self._input(key, done) for key in job.needs.values()]
                futures[job.key] = self._submit(job, context, inputs)
        wanted = {job.key: futures[job.key] if self._whole(job) else
                  self.client.submit(_report, futures[job.key], key=self._key(job, "report"), pure=False)
                  for job in self.jobs if job.key in required and job.key not in done}
        futures.clear()  # the scheduler frees each intermediate artifact once the jobs reading it are done
        try:
            return self._collect(distributed, wanted, done, bar)
        except BaseException:
            if self.client.status == "running":
                with contextlib.suppress(Exception):
                    self.client.cancel(list(wanted.values()))
            raise

    def _whole(self, job: StageJob) -> bool:
        """Whether the driver receives the job's artifact (a final one, or one kept for a later round)."""
        return definition_of(job).final or job.key in self.keep

    def _collect(self, distributed: Any, wanted: dict[str, Any], done: dict[str, _Done], bar: Any) -> list[_Loss]:
        """Each job's report as it completes, into ``done``; returns the work lost (once every job of this attempt
        has settled).  Raises at the first error in ``raise`` mode, and when the scheduler went away."""
        from distributed.client import FutureCancelledError

        by_future = {future.key: self.by_key[key] for key, future in wanted.items()}
        lost: dict[str, _Loss] = {}
        cancelled: dict[str, BaseException] = {}
        for future in distributed.as_completed(list(wanted.values())):
            job = by_future[future.key]
            if future.status == "error":
                exc = future.exception()
                if isinstance(exc, _FanoutLost):  # its dependents' tasks carry the same error: one loss
                    owner = self.by_key.get(exc.job_key, job)
                    lost.setdefault(owner.key, _Loss(owner, exc.message, exc.cause or exc))
                    continue
                owner, error = self._lost(exc, job)  # a task out of the scheduler's retries
                if self.on_error == "raise":
                    raise error from exc
                done[owner.key] = _Done(failed=_Failed.of(owner, error))  # its readers fail upstream on the next try
                continue
            try:
                report = future.result()
            except FutureCancelledError as exc:
                if exc.reason in SCHEDULER_GONE:
                    raise self._failed(self._waiting(done), f"the dask scheduler went away ({exc.reason}); "
                                       f"{SCHEDULER_HINT}", exc) from exc
                # The scheduler lives but forgot the task ("already forgotten", "lost dependencies", or no reason):
                # its run context was lost with the workers holding it. The other jobs of this attempt settle too
                # (forgotten as well, or erred: a task out of retries is reported as such, not resubmitted).
                cancelled[job.key] = exc
                continue
            except OSError as exc:  # the connection dropped while reading the result
                raise self._failed(job, f"the connection to the dask scheduler was lost; {SCHEDULER_HINT}",
                                   exc) from exc
            if report.stale:  # an expected hit that could not be read: submitted again with its inputs
                self.hits.discard(job.key)
                continue
            bar.update(1)
            done[job.key] = report
            if report.failed is not None and report.failed.failure.upstream is None and self.on_error == "raise":
                raise self._reraise(report.failed)
        for job in self.jobs:  # a forgotten job none of whose inputs was forgotten lost the context itself
            if job.key in cancelled and not any(key in cancelled for key in job.needs.values()):
                lost.setdefault(job.key, _Loss(job, "every worker holding the run context died", cancelled[job.key]))
        return list(lost.values())

    def _waiting(self, done: dict[str, _Done]) -> StageJob:
        """The job the run was waiting for: the first one not done whose inputs are (it was running or next)."""
        required = self._required(done)
        pending = [job for job in self.jobs if job.key in required and job.key not in done]
        return next((job for job in pending if all(key in done for key in job.needs.values())), pending[0])

    def _reraise(self, failed: _Failed) -> BaseException:
        job = next(job for job in self.jobs if job.key == failed.key)
        exc = failed.exception
        if exc is None:
            exc = ExecutionError(f"the {job.stage} stage of {job.extractor!r} raised {failed.failure.error_type}: "
                                 f"{failed.failure.message}")
        annotate(exc, job)
        exc.add_note(f"vertebrae: on a dask worker; its traceback:\n{failed.traceback}")
        return exc

    def _lost(self, exc: BaseException, waiting: StageJob) -> tuple[StageJob, ExecutionError]:
        """A task that never returned (its workers died, or it raised the cluster's error): its job and the error.

        The job is the one the error names (KilledWorker names the task), else ``waiting``,
        the job whose result could not be read.
        """
        from distributed.scheduler import KilledWorker

        task = getattr(exc, "task", None)
        job = self.owners.get(task, waiting) if isinstance(task, str) else waiting
        if isinstance(exc, KilledWorker):
            return job, self._failed(job, f"the worker running it died on every try. {WORKER_HINT}", exc)
        return job, self._failed(job, "its task failed on the cluster", exc)

    @staticmethod
    def _failed(job: StageJob, what: str, exc: BaseException) -> ExecutionError:
        """The one message for a job the cluster could not finish: stage, extractor, job key, what happened
        (the dask exception's first line; the exception itself becomes the error's ``__cause__``)."""
        cause = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}".rstrip(": ")
        return ExecutionError(f"the {job.stage} stage of {job.extractor!r} (job {job.key}) did not finish on the "
                              f"dask cluster: {what} ({cause})")

    def _outcome(self, done: dict[str, _Done]) -> RunOutcome:
        outcome = RunOutcome({}, {}, {})
        for job in self.jobs:
            report = done.get(job.key)
            if report is None:
                continue
            if report.failed is not None:
                outcome.failures[job.key] = report.failed.failure
                continue
            outcome.timings[job.key] = report.timings
            outcome.statuses[job.key] = report.status
            outcome.persisted[job.key] = report.footprint
            if self._whole(job):
                outcome.artifacts[job.key] = report.artifact
        record_not_needed(outcome, self.jobs)
        return outcome

"""The embedding cache inside a run: reuse a stage's artifact from a store, or compute and store it.

Every runner executes a job through :func:`execute_job`, so local and distributed runs
reuse artifacts the same way.  A stage is cacheable when its declaration has a
codec with ``cached=True`` (its artifact has a storable form the cache reuses); that is the
extractor calls, the expensive part of every benchmark.  A job is looked up only
when its key is trustworthy across runs (``job.cache_eligible``); otherwise it runs and is
marked ``bypassed_unsafe_identity``.  Runtimes never enter the store: a hit reports its
inference as ``not_measured_cache_hit``.

Execution is pull-based (:func:`pull`): before a runner computes anything it walks the plan back
from what the run must return (the final artifacts, the kept ones, and any a job of the run
reads from nobody), and a job whose artifact the cache already holds is read, not computed, so
nothing upstream of it runs for it.  A job that no needed job reads is not run at all and is
reported as ``not_needed``.  The check is a manifest lookup (``Store.has``); the read that
follows still verifies every checksum, and a predicted hit that turns out corrupt or gone is
computed after all, its upstream jobs with it (``compute`` of :func:`execute_job`), or raises in
``read_only`` mode, as any corrupt entry does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ..artifacts.codecs import ArtifactCodec, StoredArtifact, array_nbytes, output_array
from ..artifacts.store import Store
from ..errors import (ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError, ArtifactRaceError,
                      ArtifactSignatureError, ArtifactWarning)
from .context import BYPASSED_UNSAFE_IDENTITY
from .jobs import run_job
from .plan import StageJob, version_of
from .registry import definition_of

HIT, MISS, DISABLED = "hit", "miss", "disabled"
#: A job that did not run: no job of the run needed its artifact (every reader of it was a cache hit).
NOT_NEEDED = "not_needed"
CACHE_STATUSES = (HIT, MISS, DISABLED, BYPASSED_UNSAFE_IDENTITY, NOT_NEEDED)
NOT_MEASURED_CACHE_HIT = "not_measured_cache_hit"
#: Persisted-footprint statuses: the object was stat'ed, nothing was stored, or the stat failed.
MEASURED, NOT_PERSISTED, UNAVAILABLE = "measured", "not_persisted", "unavailable"
#: How a job's artifact is made on a miss: ``compute() -> (artifact, timings)``.
Compute = Callable[[], tuple[Any, dict[str, float]]]


@dataclasses.dataclass
class JobRun:
    """A job's artifact plus how it was obtained (beside the artifact, never inside it)."""

    artifact: Any
    timings: dict[str, float]
    status: str
    #: Array name -> bytes of its stored object (``.npy``/``.npz`` file, S3 object, GCS blob).
    persisted: dict[str, int] = dataclasses.field(default_factory=dict)
    persisted_status: str = NOT_PERSISTED
    #: Why the persisted bytes are ``unavailable`` (the failed stat), recorded in the result; None otherwise.
    persisted_reason: str | None = None
    #: Array name -> logical resident bytes of a cacheable artifact's matrices (empty for other stages).
    logical: dict[str, int] = dataclasses.field(default_factory=dict)

    def footprint(self) -> dict[str, Any]:
        """What the runner records beside the artifact (``RunOutcome.persisted``)."""
        return {"status": self.persisted_status, "bytes": dict(self.persisted), "logical": dict(self.logical),
                "reason": self.persisted_reason}


class StageCache:
    """A :class:`~vertebrae.artifacts.cache.CacheConfig` in action; pickles as its config (each process opens its store)."""

    def __init__(self, config: Any, store: Store | None = None) -> None:
        self.config = config
        self._store = store

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_store": None}

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self.config.open_store()
        return self._store

    def run(self, job: StageJob, compute: Compute, context: Any, codec: ArtifactCodec, *,
            must_store: bool = False) -> JobRun:
        """The stored artifact (a hit, except in refresh mode), else ``compute()`` stored as a miss."""
        if self.config.mode != "refresh":
            found = self.lookup(job, codec)
            if found is not None:
                return found
        artifact, timings = compute()
        return self.computed(job, artifact, timings, context, codec, must_store=must_store)

    def computed(self, job: StageJob, artifact: Any, timings: dict[str, float], context: Any,
                 codec: ArtifactCodec, *, must_store: bool = False) -> JobRun:
        """A miss computed now: stored (except in read_only mode), with its persisted footprint.

        A failed write is a warning (the run still has the artifact), unless ``must_store``: a staged phase's own
        artifact, which only reaches the next phase through the store, so the failure is the job's (raised).
        """
        if self.config.mode == "read_only":
            return _with_logical(JobRun(artifact, timings, MISS), codec)
        start = time.perf_counter()
        try:
            manifest = self.store.write(job.key, codec.encode(artifact), versions=_versions(job),
                                        metadata=_listing(job, context))
            timings["cache_write"] = time.perf_counter() - start  # beside the artifact, like every runtime
        except ArtifactError as exc:
            if must_store:
                raise ArtifactError(f"could not store the {job.stage} artifact of {job.extractor!r} ({job.key}) in "
                                    f"{self.config.url}: {exc}") from None
            warnings.warn(f"cache: could not store {job.key} in {self.config.url} ({exc}); the run continues "
                          "without caching it", ArtifactWarning, stacklevel=2)
            return _with_logical(JobRun(artifact, timings, MISS), codec)
        return _with_logical(JobRun(artifact, timings, MISS, *self._footprint(job.key, manifest)), codec)

    def lookup(self, job: StageJob, codec: ArtifactCodec, *, repair: str | None = None) -> JobRun | None:
        """The stored artifact (a hit), or None: absent, or corrupt/unreachable in read_write mode (a warning; the
        caller recomputes it).  ``repair`` says how to replace such an entry where its reader cannot recompute it
        (a staged phase reading an earlier phase's artifact): the read then raises, saying why, as in read_only mode."""
        start = time.perf_counter()
        try:
            stored = self.store.read(job.key)
            if stored.kind != codec.kind:
                raise ArtifactIntegrityError(f"{job.key} holds a {stored.kind!r} artifact, not {codec.kind!r}")
            artifact = codec.decode(stored)
        except ArtifactNotFoundError:
            return None
        except ArtifactRaceError as exc:  # not corrupt: computed like a miss in every mode (read_only writes nothing)
            warnings.warn(f"cache entry {job.key} in {self.config.url} is being rewritten ({exc}); computing it",
                          ArtifactWarning, stacklevel=3)
            return None
        except ArtifactError as exc:
            what = ("is unsigned or forged" if isinstance(exc, ArtifactSignatureError)
                    else "is corrupt" if isinstance(exc, ArtifactIntegrityError) else "cannot be read")
            if self.config.mode == "read_only":
                repair = ("read_only mode never repairs entries: run `vertebrae cache verify`, or use "
                          "mode='read_write' to recompute and replace it")
            if repair is not None:
                raise type(exc)(f"cache entry {job.key} in {self.config.url} {what}: {exc}. {repair}") from None
            warnings.warn(f"cache entry {job.key} in {self.config.url} {what} ({exc}); recomputing it",
                          ArtifactWarning, stacklevel=3)
            return None
        seconds = time.perf_counter() - start
        return _with_logical(JobRun(artifact, {"seconds": seconds}, HIT,
                                    *self._footprint(job.key, self.store.manifest(job.key))), codec)

    def _footprint(self, key: str, manifest: Any) -> tuple[dict[str, int], str, str | None]:
        """Stat the stored objects; a failed stat is an ``unavailable`` status with its reason, never a failure
        (the result records the reason in its footprint and warnings; a runner's worker could not show a warning)."""
        try:
            sizes = self.store.persisted_bytes(key)
        except ArtifactError as exc:
            return {}, UNAVAILABLE, f"could not stat {key} in {self.config.url} ({exc})"
        if manifest is None or any(entry["file"] not in sizes for entry in manifest.arrays.values()):
            return {}, UNAVAILABLE, f"{key} in {self.config.url} was replaced by a concurrent writer after it was read"
        return {name: sizes[entry["file"]] for name, entry in manifest.arrays.items()}, MEASURED, None


def execute_job(job: StageJob, inputs: dict[str, Any], context: Any, compute: Compute | None = None) -> JobRun:
    """Run one job through the run's cache (``context.cache``, None without a cache): what every runner calls.

    ``compute`` stands in for the stage's function when the caller already holds what the job would make (the
    screening loop's finalists' extractions, assembled from their rungs' increments): the cache then treats
    it exactly as the stage's result, a hit read instead and a miss stored.
    """
    make = compute if compute is not None else (lambda: run_job(job, inputs, context))
    cache, codec = job_cache(job, context)
    if cache is None:
        return computed_run(job, *make())
    return cache.run(job, make, context, codec)


def job_cache(job: StageJob, context: Any) -> tuple[StageCache | None, ArtifactCodec | None]:
    """(the run's cache, the stage's codec) when this job goes through the cache, else (None, None)."""
    cache: StageCache | None = getattr(context, "cache", None)
    codec = definition_of(job).codec
    if cache is None or codec is None or not codec.cached or not job.cache_eligible:
        return None, None
    return cache, codec


def predicted_hit(job: StageJob, context: Any) -> bool:
    """Whether the run's cache would serve ``job`` (it goes through the cache, the mode is not ``refresh``, and the
    store holds its manifest): a lookup, no data read.  A store that cannot answer predicts a miss: the job then
    runs through :func:`execute_job`, whose read reports the store's failure per the cache mode."""
    cache, _ = job_cache(job, context)
    if cache is None or cache.config.mode == "refresh":
        return False
    try:
        return cache.store.has(job.key)
    except ArtifactError:
        return False


@dataclasses.dataclass(frozen=True)
class Pulled:
    """The jobs of a run that must run, in plan order, and which of them are expected cache hits."""

    jobs: list[StageJob]
    #: Keys of jobs whose artifact the store holds: read, so their inputs are computed only if the read fails.
    hits: frozenset[str]


def pull(jobs: Sequence[StageJob], context: Any, *, keep: Collection[str] = (),
         given: Collection[str] = ()) -> Pulled:
    """The jobs needed for what the run returns: final and ``keep`` artifacts, and those no job reads.

    Walks the plan backwards (plan order is a topological order): a needed job that is a cache hit is read, so
    its inputs are not needed for it; any other needed job needs its inputs, unless they are ``given``.
    """
    read = {key for job in jobs for key in job.needs.values()}
    needed = {job.key for job in jobs if definition_of(job).final or job.key in keep or job.key not in read}
    hits = set()
    for job in reversed(jobs):
        if job.key not in needed:
            continue
        if predicted_hit(job, context):
            hits.add(job.key)
        else:
            needed.update(key for key in job.needs.values() if key not in given)
    return Pulled([job for job in jobs if job.key in needed], frozenset(hits))


def record_not_needed(outcome: Any, jobs: Sequence[StageJob]) -> None:
    """Report every job that neither ran nor failed as ``not_needed`` (no timings: it ran nothing)."""
    for job in jobs:
        if job.key not in outcome.statuses and job.key not in outcome.failures:
            outcome.statuses[job.key] = NOT_NEEDED


def record_computed(job: StageJob, artifact: Any, timings: dict[str, float], context: Any) -> JobRun:
    """A job's artifact computed outside :func:`execute_job` (the dask runner's sharded extract), stored and
    reported exactly as :func:`execute_job` would have after a miss."""
    cache, codec = job_cache(job, context)
    if cache is None:
        return computed_run(job, artifact, timings)
    return cache.computed(job, artifact, timings, context, codec)


def computed_run(job: StageJob, artifact: Any, timings: dict[str, float]) -> JobRun:
    """A job computed without the cache: none configured, not cacheable, or an unsafe identity (also what the
    dask runner reports for an extract it assembled from row shards)."""
    ran = JobRun(artifact, timings, DISABLED if job.cache_eligible else BYPASSED_UNSAFE_IDENTITY)
    return _with_logical(ran, definition_of(job).codec)


def _with_logical(ran: JobRun, codec: ArtifactCodec | None) -> JobRun:
    if codec is not None and codec.cached:  # the matrices of an embedding artifact; payloads have none
        ran.logical = {name: array_nbytes(value) for name, value in codec.encode(ran.artifact).arrays.items()}
    return ran


def _versions(job: StageJob) -> dict[str, str]:
    return {package: version_of(package) for package in definition_of(job).packages}


def _listing(job: StageJob, context: Any) -> dict[str, str]:
    """What ``vertebrae cache list`` shows: a recipe summary and the dataset (labels only, never keys)."""
    recipe = dict(context.extractor(job).recipe())
    kind = recipe.get("estimator") or recipe.get("callable") or recipe.get("type", "extractor")
    identity = getattr(context.dataset, "identity", None)
    dataset = "-" if identity is None else f"{identity.dataset_id}" + (f"@{identity.revision}" if identity.revision
                                                                       else "")
    return {"extractor": f"{job.params['parent']} ({kind})", "dataset": dataset}


# ---------------------------------------------------------------- row shards of an extract job
#: Store stage of the row shards of a sharded extract (a sibling of ``extract/``: keys allow one slash).
SHARD_STAGE = "extract_shard"


def shard_key(job_key: str, start: int, stop: int) -> str:
    """The store key of rows ``start:stop`` of one extract job's outputs: the job key and the row range, hashed."""
    return f"{SHARD_STAGE}/{hashlib.sha256(f'{job_key}/rows-{start}-{stop}'.encode()).hexdigest()[:32]}"


def write_shard(cache: StageCache, job: StageJob, context: Any, start: int, stop: int,
                outputs: dict[str | None, Any]) -> str:
    """Store one shard's validated outputs (so an interrupted run can reuse it); returns its key."""
    key = shard_key(job.key, start, stop)
    names = list(outputs)
    artifact = StoredArtifact(SHARD_STAGE, {output_array(o): outputs[o] for o in names},
                              {"outputs": names, "job": job.key, "rows": [start, stop]})
    cache.store.write(key, artifact, versions=_versions(job),
                      metadata={**_listing(job, context), "rows": f"{start}:{stop}"})
    return key


def read_shard(cache: StageCache, job: StageJob, start: int, stop: int) -> dict[str | None, Any]:
    """One stored shard's outputs; ``ArtifactIntegrityError`` when it is not the shard of this job and rows."""
    key = shard_key(job.key, start, stop)
    stored = cache.store.read(key)
    document = stored.document
    if stored.kind != SHARD_STAGE or document.get("job") != job.key or document.get("rows") != [start, stop]:
        raise ArtifactIntegrityError(f"{key} in {cache.config.url} is not the shard of rows {start}:{stop} of "
                                     f"{job.key} (kind {stored.kind!r}, job {document.get('job')!r}, rows "
                                     f"{document.get('rows')!r})")
    try:
        return {o: stored.arrays[output_array(o)] for o in document["outputs"]}
    except (KeyError, TypeError) as exc:
        raise ArtifactIntegrityError(f"shard {key} in {cache.config.url} is malformed: {type(exc).__name__}: "
                                     f"{exc}") from None


# ---------------------------------------------------------------- what results record
def stage_cache(config: Any) -> StageCache | None:
    """The run's cache from a ``cache_config`` argument (None or disabled: no cache); opens the store now."""
    from ..artifacts.cache import CacheConfig
    from ..errors import ConfigTypeError

    if config is None:
        return None
    if not isinstance(config, CacheConfig):
        raise ConfigTypeError(f"cache_config must be a vertebrae.artifacts.cache.CacheConfig or None, got {type(config).__name__}")
    if not config.enabled:
        return None
    cache = StageCache(config)
    store = cache.store  # an unknown protocol or a missing s3fs/gcsfs fails here, before any extractor runs
    if config.mode != "read_only":  # so does a local folder that cannot be written
        store.check_writable()
    return cache


def cache_summary(cache: StageCache) -> dict[str, Any]:
    """What a result says about its cache: where it lives (credentials redacted) and the mode."""
    return {"store": cache.config.url, "mode": cache.config.mode}


def endpoint_footprint(evaluated_bytes: int, persisted: dict[str, Any] | None, array: str) -> dict[str, Any]:
    """Logical resident bytes and persisted object bytes of the stored array ``array``, separately for the raw
    embedding (the extractor's output as stored) and the evaluated one (what the chain scored: a compressed
    variant, or a view of the raw output, never persisted)."""
    status = NOT_PERSISTED if persisted is None else persisted["status"]
    stored = None if persisted is None else persisted["bytes"].get(array)
    raw_bytes = evaluated_bytes if persisted is None else persisted["logical"].get(array, evaluated_bytes)
    reason = None if persisted is None else persisted.get("reason")
    if status == MEASURED and stored is None:
        status, reason = UNAVAILABLE, f"the store lists no object for array {array!r}"
    raw = {"logical_bytes": int(raw_bytes), "persisted_bytes": stored, "persisted_status": status}
    if status == UNAVAILABLE:  # only then: every other footprint keeps its three fields
        raw["persisted_reason"] = reason
    return {"raw": raw, "evaluated": {"logical_bytes": int(evaluated_bytes), "persisted_bytes": None,
                                      "persisted_status": NOT_PERSISTED}}


def footprint_notes(footprint: dict[str, Any] | None) -> list[str]:
    """The result warning of a footprint whose persisted bytes are unavailable (empty otherwise)."""
    raw = (footprint or {}).get("raw", {})
    if raw.get("persisted_status") != UNAVAILABLE:
        return []
    return [f"persisted bytes of the raw embedding are unavailable: {raw.get('persisted_reason') or 'not measured'}"]

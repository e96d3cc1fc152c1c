"""Staged runs over a shared store: ``vertebrae plan``, ``embed``, ``score`` and ``collect``.

A plan file (:class:`PlanFile`) records a run configuration, the store every stage
shares and the keys of the plan's jobs.  Each later command rebuilds the same plan
from that configuration (checking the input files and keys against the plan file),
then executes one **phase** of it with a :class:`StoreRunner`:

- ``embed``: the extractor jobs (``extract``, ``encode``) and the compressed variants
  (``compress``); their artifacts go to the store, the extractions exactly as the embedding
  cache stores them (an artifact already there is reused);
- ``score``: the scoring jobs (``score``, ``stability``, ``metrics``, ``diagnose``,
  ``rank_*``), reading the embeddings back from the store and storing their payloads;
- ``collect``: the final ``assemble`` jobs, reading everything back, into the result.

Stages without a stored form (``embedding``, ``budget``, ``endpoints``) are cheap views
and checks: each process recomputes them from their stored inputs.  ``--shard i/n``
splits ``embed`` by extractor and the later phases by result (chain), so shards never
need each other's work.  What a phase measured (seconds, cache status, stored bytes, a failure)
is written beside the artifacts as a small ``job_record`` per job and plan, never
inside an artifact; ``collect`` reports it, so the collected result equals a
``vertebrae run CONFIG --cache STORE`` on a fresh store, minus ``timing``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import json_codec
from ..artifacts.codecs import StoredArtifact
from ..errors import ArtifactNotFoundError, ConfigError, PlanError, SerializationError, VertebraeError
from ..fingerprint import content_sha256, package_version
from ..progress import progress_enabled
from .caching import JobRun, StageCache, computed_run
from .jobs import JobFailure, RunOutcome, annotate, check_on_error, run_job
from .plan import StageJob, artifact_key
from .registry import COLLECT, EMBED, PHASES, definition_of

PLAN_FORMAT, PLAN_SCHEMA = "vertebrae-plan", 1
#: Largest plan file read (a plan of thousands of extractors is a few MB).
MAX_PLAN_BYTES = 64 << 20
#: The fields of a plan file: name, type, and what a message says it must be.
PLAN_FIELDS = (("config", dict, "a table (the run config)"), ("base_dir", str, "a folder path"),
               ("input_files", list, "a list of file records"), ("jobs", list, "a list of jobs"),
               ("vertebrae_version", str, "a version string"), ("plan_id", str, "a content hash"))
#: Stages whose keys change when ``vertebrae score --metric`` adds metrics (the others must match the plan file).
METRIC_DEPENDENT = frozenset({"metrics", "assemble"})


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
        if count < 1 or not 1 <= index <= count:
            raise ConfigError(f"--shard {text}: i must be between 1 and n (shards are numbered 1/{max(count, 1)} to "
                              f"{max(count, 1)}/{max(count, 1)})")
        return cls(index, count)

    def owns(self, position: int) -> bool:
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


# ----------------------------------------------------------------------------- the plan file
@dataclasses.dataclass(frozen=True)
class PlanFile:
    """What ``vertebrae plan`` writes: the config (with its store as the run's cache), file hashes and job keys."""

    config: Mapping[str, Any]
    #: The config file's folder: relative paths in ``config`` are relative to it.
    base_dir: str
    #: Provenance of every input file (path as given, size, SHA-256), checked again by every phase.
    input_files: list[dict[str, Any]]
    #: One entry per job: key, stage, extractor (result name), phase.
    jobs: list[dict[str, Any]]
    vertebrae_version: str

    @property
    def plan_id(self) -> str:
        return content_sha256({"config": self.config, "base_dir": self.base_dir, "jobs": [j["key"] for j in self.jobs]})

    @property
    def store(self) -> str:
        return self.config["cache"]["store"]

    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "schema": PLAN_SCHEMA, "plan_id": self.plan_id, "store": self.store,
                **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    def save(self, path: pathlib.Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
        temporary.replace(path)  # a reader never sees half a plan

    @classmethod
    def load(cls, path: pathlib.Path) -> PlanFile:
        if not path.is_file():
            raise PlanError(f"plan file {str(path)!r} does not exist; write one with `vertebrae plan CONFIG --store "
                            "URL --output PLAN.json`")
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise PlanError(f"{path} has {size} bytes, more than the {MAX_PLAN_BYTES} a plan file may have; it is not "
                            "a plan `vertebrae plan` wrote")
        try:
            data = json_codec.read(path)  # bounded: no RecursionError, no unbounded integer
        except ValueError as exc:
            raise SerializationError(f"{path}: not a JSON plan file ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanError(f"{path} is not a vertebrae plan file (no \"format\": \"{PLAN_FORMAT}\"); a run config "
                            "goes to `vertebrae plan CONFIG` or `vertebrae run CONFIG`")
        if data.get("schema") != PLAN_SCHEMA:
            raise PlanError(f"{path} has plan schema {data.get('schema')!r}; this vertebrae reads schema {PLAN_SCHEMA}:"
                            " write the plan again with this version")
        _check_plan_fields(path, data)
        plan = cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})
        if plan.plan_id != data.get("plan_id"):
            raise PlanError(f"{path} was edited after it was written (its plan_id no longer matches its content); "
                            "write it again with `vertebrae plan`")
        return plan


def _check_plan_fields(path: pathlib.Path, data: Mapping[str, Any]) -> None:
    """Every field a phase reads, with its type, so an edited or foreign plan is one PlanError, never a raw
    TypeError/KeyError in the middle of a phase."""
    def refuse(where: str, expected: str) -> PlanError:
        return PlanError(f"{path}: {where} must be {expected}; write the plan again with `vertebrae plan`")

    for name, kind, expected in PLAN_FIELDS:
        if name not in data:
            raise PlanError(f"{path} lacks the field {name!r}; write the plan again with `vertebrae plan`")
        if not isinstance(data[name], kind):
            raise refuse(repr(name), expected)
    cache = data["config"].get("cache")
    if not isinstance(cache, dict) or not isinstance(cache.get("store"), str):
        raise refuse("config.cache", "a table with the store URL (\"store\": \"...\")")
    for i, record in enumerate(data["input_files"]):
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("role", "path", "sha256")):
            raise refuse(f"input_files[{i}]", "a table with role, path and sha256 strings")
    for i, job in enumerate(data["jobs"]):
        if not isinstance(job, dict) or not all(isinstance(job.get(k), str) for k in ("key", "stage", "extractor")):
            raise refuse(f"jobs[{i}]", "a table with key, stage and extractor strings")
        if job.get("phase", "") not in (*PHASES, None):
            raise refuse(f"jobs[{i}].phase", f"one of {list(PHASES)} or null")
    jobs = {(job["stage"], job["extractor"]) for job in data["jobs"]}
    if len(jobs) != len(data["jobs"]):
        raise refuse("jobs", "a list with each stage of each extractor once")


def make_plan(config: Mapping[str, Any], config_path: pathlib.Path, store: str,
              storage_options: Mapping[str, Any] | None = None, progress: bool | None = None) -> PlanFile:
    """Validate ``config`` (loading every file, as ``vertebrae run`` does) and plan it over ``store``."""
    from ..run_config import benchmark_from_config, input_files

    store = store if "://" in store else str(pathlib.Path(store).expanduser().resolve())
    config = {**config, "cache": {"store": store, "storage_options": dict(storage_options or {}),
                                  "mode": "read_write", "enabled": True}}
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{config_path}: the config must hold only JSON values (strings, numbers, booleans, "
                          f"lists, tables) to go into a plan file: {exc}") from None
    base_dir = config_path.resolve().parent
    benchmark = benchmark_from_config(config, base_dir, progress=progress)
    try:
        benchmark.check_staged()
    except ConfigError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    plan = benchmark.plan()
    jobs = [{"key": job.key, "stage": job.stage, "extractor": job.extractor, "phase": phase_of(job)}
            for job in plan.jobs]
    return PlanFile(config, str(base_dir), input_files(config, config_path), jobs, package_version("vertebrae"))


def plan_benchmark(plan: PlanFile, metric_specs: Sequence[str] = (), progress: bool | None = None) -> Any:
    """The plan's Benchmark (plus ``metric_specs``), after checking that its input files are unchanged."""
    from ..io import file_record
    from ..run_config import benchmark_from_config, with_metric_options

    base_dir = pathlib.Path(plan.base_dir)
    for record in plan.input_files:
        if record["role"] == "config":
            continue  # the plan file holds the config itself
        path = pathlib.Path(record["path"])
        path = path if path.is_absolute() else base_dir / path
        now = file_record(record["role"], record["path"], path)
        if now["sha256"] != record["sha256"]:
            raise PlanError(f"the {record['role']} file {record['path']!r} changed since the plan was written "
                            f"(sha256 {record['sha256'][:12]}… is now {now['sha256'][:12]}…); write the plan again "
                            "with `vertebrae plan` (artifacts of unchanged inputs are reused from the store)")
    config = with_metric_options(plan.config, metric_specs, None)
    return benchmark_from_config(config, base_dir, progress=progress)


# ----------------------------------------------------------------------------- records beside the artifacts
def _record_key(plan_id: str, job_key: str) -> str:
    return artifact_key("job_record", [plan_id, job_key])


def metrics_record_key(plan_id: str) -> str:
    return artifact_key("staged_metrics", plan_id)


def score_metrics(plan: PlanFile, given: Sequence[str]) -> list[str]:
    """The ``--metric`` specs a plan is scored with: fixed by the first ``score --metric`` (a record in the store)."""
    from ..cache import CacheConfig

    store = CacheConfig.from_dict(plan.config["cache"]).open_store()
    key = metrics_record_key(plan.plan_id)
    try:
        recorded = list(store.read(key).document["specs"])
    except ArtifactNotFoundError:
        recorded = None
    if given and recorded is not None and list(given) != recorded:
        raise PlanError(f"this plan was scored with --metric {recorded}, not {list(given)}: pass the same --metric "
                        "to every `vertebrae score` of a plan, or write a new plan with the metrics in its config")
    if given and recorded is None:
        store.write(key, StoredArtifact("staged_metrics", {}, {"specs": list(given)}),
                    metadata={"extractor": "-", "dataset": f"plan {plan.plan_id[:12]}"})
    return list(given) if given else (recorded or [])


# ----------------------------------------------------------------------------- the runner
class _Upstream(Exception):
    """An input of a job failed (in this process or, as its record says, in an earlier phase)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class StoreRunner:
    """Runs one phase of a plan (one shard of it) against the run's store.

    The run context must carry the plan's store as its cache (``context.cache``); the jobs
    must be the plan file's (keys checked first, so changed code or package versions fail
    before any work).
    """

    def __init__(self, plan: PlanFile, phase: str, shard: Shard = Shard(), *, progress: bool | None = None,
                 extra_metrics: bool = False) -> None:
        if phase not in PHASES:
            raise ConfigError(f"StoreRunner: phase must be one of {list(PHASES)}, got {phase!r}")
        self.plan, self.phase, self.shard, self.progress = plan, phase, shard, progress
        self.extra_metrics = extra_metrics

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
        skip = METRIC_DEPENDENT if self.extra_metrics else frozenset()
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
                ran = self.cache.run(job, compute, self.context, definition_of(job).codec)
        except _Upstream as upstream:
            cause = self.outcome.failures[upstream.key]
            self._fail(job, dataclasses.replace(cause, upstream=cause.upstream or upstream.key))
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
            raise _Upstream(key)
        job = self.by_key[key]
        phase = phase_of(job)
        if phase is None:
            try:
                inputs = {stage: self._obtain(k) for stage, k in job.needs.items()}
            except _Upstream as upstream:
                cause = self.outcome.failures[upstream.key]
                self.outcome.failures[key] = dataclasses.replace(cause, upstream=cause.upstream or upstream.key)
                raise _Upstream(key) from None
            try:
                self._keep(job, computed_run(job, *run_job(job, inputs, self.context)))
            except Exception as exc:
                if self.on_error == "raise":
                    raise annotate(exc, job)
                self.outcome.failures[key] = JobFailure.of(job, exc)
                raise _Upstream(key) from None
            return self.memory[key]
        return self._read(job, phase)

    def _read(self, job: StageJob, phase: str) -> Any:
        record = self._record(job) if self.phase == COLLECT else None
        if record is not None and record["failure"] is not None:
            self.outcome.failures[job.key] = JobFailure(**record["failure"])
            raise _Upstream(job.key)
        ran = self.cache.lookup(job, definition_of(job).codec)
        if ran is None:
            record = record if record is not None else self._record(job)
            if record is not None and record["failure"] is not None:
                self.outcome.failures[job.key] = JobFailure(**record["failure"])
                raise _Upstream(job.key)
            if phase == self.phase:  # a job of this phase that another shard has not stored (yet): compute it
                self._run_own(job)
                if job.key in self.outcome.failures:
                    raise _Upstream(job.key)
                return self.memory[job.key]
            raise PlanError(f"the {job.stage} artifact of {job.extractor!r} ({job.key}) is not in the store "
                            f"{self.cache.config.url}: run `vertebrae {phase} PLAN` first (every shard of it)")
        if record is not None:  # report what the phase that made it measured, not this read
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

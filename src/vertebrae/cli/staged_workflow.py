"""The plan-file workflow of staged runs: ``vertebrae plan``, ``embed``, ``score`` and ``collect``.

A plan file (:class:`PlanFile`) records a run configuration, the store every stage
shares and the keys of the plan's jobs.  Each later command rebuilds the same plan
from that configuration (checking the input files and keys against the plan file),
then executes one phase of it with the core's
:class:`~vertebrae.execution.staged.StoreRunner` (``embed``: extractions and compressed
variants; ``score``: the scoring stages; ``collect``: the assembled results), so the
collected result equals a ``vertebrae run CONFIG --cache STORE`` on a fresh store, minus
``timing``.  With the store's secret set (``$VERTEBRAE_CACHE_SECRET``), ``plan`` signs the plan file and every
later phase refuses a plan that is unsigned or forged: a plan file is code (its config names the extractors and
modules a phase runs), so one that travels through a shared store must be one a holder of the secret wrote.
This module belongs to the command line: it builds the benchmark from a run
config (:mod:`vertebrae.cli.run_config`), which the execution core never does.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from .._base import json_codec
from ..artifacts.codecs import StoredArtifact
from ..families.labeled.benchmark import Benchmark
from ..families.labeled.stages import PIPELINE
from ..artifacts.cache import CacheConfig
from ..artifacts.signing import PLAN_DOMAIN, SECRET_ENV, check_signature, sign
from ..errors import ArtifactNotFoundError, ArtifactSignatureError, ConfigError, PlanError, SerializationError
from ..execution.plan import artifact_key
from ..execution.registry import PHASES, readers_of
from ..execution.staged import Shard, StoreRunner, phase_of
from .._base.fingerprint import content_sha256, package_version
from ..inputs.io import file_record
from .run_config import benchmark_from_config, input_files, input_paths, with_metric_options

PLAN_FORMAT, PLAN_SCHEMA = "vertebrae-plan", 1
#: Largest plan file read (a plan of thousands of extractors is a few MB).
MAX_PLAN_BYTES = 64 << 20
#: The fields of a plan file: name, type, and what a message says it must be.
PLAN_FIELDS = (("config", dict, "a table (the run config)"), ("base_dir", str, "a folder path"),
               ("input_files", list, "a list of file records"), ("jobs", list, "a list of jobs"),
               ("vertebrae_version", str, "a version string"), ("plan_id", str, "a content hash"))


def is_plan_file(path: pathlib.Path) -> bool:
    """Whether ``path`` holds a plan `vertebrae plan` wrote (a small JSON with its ``format``), to tell a user who
    hands one to ``report`` or ``compare`` what to do with it."""
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            return False
        data = json_codec.read(path)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == PLAN_FORMAT


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

    def input_paths(self) -> dict[str, pathlib.Path]:
        """Each input file the phases read (the config aside: the plan holds it), by its path as recorded."""
        return input_paths(self.input_files, self.base_dir)

    def job_counts(self) -> str:
        """``"30 jobs (6 embed, 18 score, 6 collect)"``, plus the jobs no phase stores (views each phase
        recomputes from what it reads), so the parts add up to the total."""
        counts = [f"{sum(job['phase'] == phase for job in self.jobs)} {phase}" for phase in PHASES]
        recomputed = sum(job["phase"] is None for job in self.jobs)
        if recomputed:
            counts.append(f"{recomputed} recomputed where read")
        return f"{len(self.jobs)} jobs ({', '.join(counts)})"

    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "schema": PLAN_SCHEMA, "plan_id": self.plan_id, "store": self.store,
                **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    def save(self, path: pathlib.Path, secret: str | None = None) -> None:
        """Write the plan atomically; with ``secret``, signed (every field, under the plan-file domain)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        content = self.to_dict()
        if secret is not None:
            content["signature"] = sign(content, secret, PLAN_DOMAIN)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(content, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        temporary.replace(path)  # a reader never sees half a plan

    @classmethod
    def load(cls, path: pathlib.Path, secret: str | None = None) -> PlanFile:
        """Read and check a plan file; with ``secret`` (the store's), one that is unsigned or whose signature does
        not match is refused (:class:`~vertebrae.errors.ArtifactSignatureError`) before any field is used."""
        if not path.is_file():
            found = "is a folder, not a file" if path.is_dir() else "does not exist"
            raise PlanError(f"plan file {str(path)!r} {found}; write one with `vertebrae plan CONFIG --store "
                            "URL --output PLAN.json`")
        size = path.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise PlanError(f"{path} has {size} bytes, more than the {MAX_PLAN_BYTES} a plan file may have; it is not "
                            "a plan `vertebrae plan` wrote")
        try:
            data = json_codec.read(path)  # bounded: no RecursionError, no unbounded integer
        except ValueError as exc:
            hint = ("; a run config goes to `vertebrae plan CONFIG --store URL` (which writes the plan) or "
                    "`vertebrae run CONFIG`") if path.suffix.lower() == ".toml" else ""
            raise SerializationError(f"not a JSON plan file: {exc}{hint}") from None
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanError(f"{path} is not a vertebrae plan file (no \"format\": \"{PLAN_FORMAT}\"); a run config "
                            "goes to `vertebrae plan CONFIG` or `vertebrae run CONFIG`")
        if secret is not None:
            content = {name: value for name, value in data.items() if name != "signature"}
            try:
                check_signature(content, data.get("signature"), secret, str(path), domain=PLAN_DOMAIN,
                                what="plan file")
            except ArtifactSignatureError as exc:
                raise ArtifactSignatureError(f"{exc} (the store's secret ${SECRET_ENV} is set, so only a plan "
                                             "signed with it runs: write the plan again with `vertebrae plan` and "
                                             f"${SECRET_ENV} set)") from None
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


def plan_benchmark(plan: PlanFile, metric_specs: Sequence[str] = (), progress: bool | None = None) -> Benchmark:
    """The plan's Benchmark (plus ``metric_specs``), after checking that its input files are unchanged."""
    paths = plan.input_paths()
    for record in plan.input_files:
        if record["role"] == "config":
            continue  # the plan file holds the config itself
        now = file_record(record["role"], record["path"], paths[record["path"]])
        if now["sha256"] != record["sha256"]:
            raise PlanError(f"the {record['role']} file {record['path']!r} changed since the plan was written "
                            f"(sha256 {record['sha256'][:12]}… is now {now['sha256'][:12]}…); write the plan again "
                            "with `vertebrae plan` (artifacts of unchanged inputs are reused from the store)")
    config = with_metric_options(plan.config, metric_specs, None)
    return benchmark_from_config(config, pathlib.Path(plan.base_dir), progress=progress)


def metrics_record_key(plan_id: str) -> str:
    return artifact_key("staged_metrics", plan_id)


def _recorded_metrics(plan: PlanFile) -> list[str] | None:
    """The ``--metric`` specs recorded in the plan's store for the plan, None before the first."""
    store = CacheConfig.from_dict(plan.config["cache"]).open_store()
    try:
        return list(store.read(metrics_record_key(plan.plan_id)).document["specs"])
    except ArtifactNotFoundError:
        return None


def score_metrics(plan: PlanFile, given: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the ``--metric`` specs a plan is scored with, fixed by the first ``score --metric``; the ones still to
    record, with :func:`record_metrics` once they have loaded): one read of the record."""
    recorded = _recorded_metrics(plan)
    if recorded is None:
        return list(given), list(given)
    if given and list(given) != recorded:
        raise PlanError(f"this plan was scored with --metric {recorded}, not {list(given)}: pass the same --metric "
                        "to every `vertebrae score` of a plan, or write a new plan with the metrics in its config")
    return recorded, []


def record_metrics(plan: PlanFile, specs: Sequence[str]) -> None:
    """Fix ``specs`` for the plan (the unrecorded ones :func:`score_metrics` returned); called once they have
    loaded, so a typo in ``--metric`` is refused without binding the plan to it."""
    if specs:
        store = CacheConfig.from_dict(plan.config["cache"]).open_store()
        store.write(metrics_record_key(plan.plan_id), StoredArtifact("staged_metrics", {}, {"specs": list(specs)}),
                    metadata={"extractor": "-", "dataset": f"plan {plan.plan_id[:12]}"})


def phase_runner(plan: PlanFile, phase: str, shard: Shard = Shard(), *, metric_specs: Sequence[str] = (),
                 progress: bool | None = None) -> StoreRunner:
    """The runner of one phase of ``plan``.  With ``--metric`` specs the keys of the ``metrics`` stage and of
    every stage that reads it (directly or not) differ from the plan file's on purpose: those are not checked."""
    unchecked = readers_of(PIPELINE, "metrics") if metric_specs else frozenset()
    return StoreRunner(plan, phase, shard, progress=progress, unchecked=unchecked)

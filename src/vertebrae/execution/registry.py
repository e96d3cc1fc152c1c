"""The stage registry: every stage is a named module-level function whose declaration says what it is.

A declaration (``@stage(...)``) is the one place that says what a stage is; the plan
builder, the runners, the staged CLI and the front doors derive everything from it:

- what it reads: upstream stages of the same chain (``reads``, plus ``optional_reads``
  taken when present) and facts of the run context (``context``: ``inputs``,
  ``targets``, ``extractor``, ``name`` ...); which packages compute it (``packages``:
  their versions enter its key); its configuration fingerprint (``config``; ``None``
  leaves the stage out of the plan) and whether that configuration can be identified
  across runs (``safe``);
- its stored form (``codec``, an :class:`~vertebrae.artifacts.codecs.ArtifactCodec`;
  none: a cheap view every process recomputes) and the staged phase that computes and
  stores it (``phase``: ``embed``, ``score`` or ``collect``);
- the runtimes a result reports for it (``runtime``: its wall seconds, its named
  sub-steps ``steps``, or both);
- how a cluster may split it (``shards``: :class:`RowShards` for an extraction that fits
  once and transforms row shards; ``scoring_units``: the independent scoring calls it makes,
  which decide whether a cluster is worth starting);
- whether it is the plan's result (``final``).

A job names its stage function by import path (``module:function``), so a dask worker or
a staged phase in another process imports the stage's module itself — a user's stage
module included.  The registry names no stage module: each family's front door imports
its own stages module, and ``import vertebrae`` (which runs before any of its submodules,
this one included) imports every front door, so the built-in stages are registered before
a user's stage module can register (its ``reads`` may name them) and what the registry
holds never depends on import order.

The context facts a stage declares are not a closed list either: the chain's own facts
(``extractor``, ``output``, ``view``, ``name``) are the run context's, every other one is
answered by the run's dataset (:meth:`vertebrae.execution.context.RunContext.fact`); a fact
the dataset does not hold fails when the plan is built, naming the dataset.

A stage function has the signature ``fn(job, inputs, context, timings) -> artifact``:
``inputs`` maps each read stage name to its artifact, ``context`` resolves the dataset,
targets and extractors (:mod:`vertebrae.execution.context`) and ``timings`` is a dict the
stage may fill with sub-step seconds (runtimes live beside artifacts, never inside them).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from ..artifacts.codecs import ArtifactCodec
from ..errors import ConfigError

#: Staged phases, in order (``vertebrae embed``, ``score``, ``collect``).
EMBED, SCORE, COLLECT = "embed", "score", "collect"
PHASES = (EMBED, SCORE, COLLECT)
#: What a result's ``runtime`` reports for a stage: its wall seconds under its name, its named sub-steps, or both.
RUNTIME_REPORTS = ("seconds", "steps", "seconds_and_steps")


@dataclasses.dataclass(frozen=True)
class RowShards:
    """How a cluster splits an extraction over rows: fit once, transform row ranges, stack them.

    ``fit(job, context) -> fitted``; ``transform(job, fitted, rows) -> outputs``;
    ``stack(job, context, [outputs per shard]) -> artifact``; ``rows(context) -> the sliceable inputs``;
    ``measured(job, fitted, rows, profiling, worker) -> (outputs, WorkerMeasurement)``: ``transform`` under resource
    profiling on a worker (:mod:`vertebrae._base.profile_records` merges the shards' measurements), so the runner
    needs no extractor code; ``check(job, outputs, start, stop) -> outputs``: one shard's outputs validated (and
    converted) once, where they are made, before they are stored or sent to ``stack`` (which can trust them).
    """

    fit: Callable[..., Any]
    transform: Callable[..., Any]
    stack: Callable[..., Any]
    rows: Callable[[Any], Any]
    measured: Callable[..., Any]
    check: Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class StageDefinition:
    pipeline: str
    name: str
    version: int
    function: Callable[..., Any]
    reads: tuple[str, ...] = ()
    optional_reads: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    config: Callable[[Any, Any], Any] | None = None
    #: ``safe(settings) -> bool``: False when the configuration itself cannot be identified across runs.
    safe: Callable[[Any], bool] | None = None
    #: The plan's result: kept by the runner after the run (every other artifact is freed when unused).
    final: bool = False
    #: The artifact's stored form; None: a cheap view each process recomputes from its stored inputs.
    codec: ArtifactCodec | None = None
    #: The staged phase that computes and stores the artifact (None: recomputed wherever it is read).
    phase: str | None = None
    #: What a result's runtime reports for this stage (one of RUNTIME_REPORTS), None: nothing.
    runtime: str | None = None
    #: The named sub-steps it reports (a cache hit reports each as not measured), or ``steps(settings) -> names``
    #: when they depend on the settings (the metrics stage: one per metric).
    steps: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    #: Row sharding for a cluster (extractions only).
    shards: RowShards | None = None
    #: ``scoring_units(settings) -> int``: independent scoring calls of one job (a cluster spreads them).
    scoring_units: Callable[[Any], int] | None = None

    @property
    def path(self) -> str:
        """``module:function``: how a process that has not imported the stage finds it."""
        return f"{self.function.__module__}:{self.function.__qualname__}"

    def config_safe(self, settings: Any) -> bool:
        return True if self.safe is None else bool(self.safe(settings))

    def enabled_config(self, settings: Any, chain: Any) -> tuple[bool, Any]:
        """(is this stage in the plan for ``chain``, its config fingerprint)."""
        if self.config is None:
            return True, None
        fingerprint = self.config(settings, chain)
        return fingerprint is not None, fingerprint

    def units(self, settings: Any) -> int:
        return 0 if self.scoring_units is None else int(self.scoring_units(settings))

    def runtime_names(self, settings: Any) -> tuple[str, ...]:
        """The entries a result's ``runtime`` reports for this stage when it runs under ``settings``: its name
        (unless it reports steps only) and its declared sub-steps (``front_door.chain_runtime``)."""
        if self.runtime is None:
            return ()
        steps = tuple(self.steps(settings) if callable(self.steps) else self.steps)
        return steps if self.runtime == "steps" else (self.name, *steps)


#: pipeline name -> stage name -> definition, in registration order (a valid topological order).
_REGISTRY: dict[str, dict[str, StageDefinition]] = {}


def stage(pipeline: str, name: str, *, version: int, reads: tuple[str, ...] = (),
          optional_reads: tuple[str, ...] = (), context: tuple[str, ...] = (), packages: tuple[str, ...] = (),
          config: Callable[[Any, Any], Any] | None = None, safe: Callable[[Any], bool] | None = None,
          final: bool = False, codec: ArtifactCodec | None = None, phase: str | None = None,
          runtime: str | None = None, steps: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = (),
          shards: RowShards | None = None,
          scoring_units: Callable[[Any], int] | None = None) -> Callable[[Callable], Callable]:
    """Register the decorated module-level function as stage ``name`` of ``pipeline``."""

    def register(function: Callable) -> Callable:
        where = f"stage {pipeline}/{name}"
        stages = _REGISTRY.setdefault(pipeline, {})
        unknown = [r for r in (*reads, *optional_reads) if r not in stages]
        if unknown:
            raise ConfigError(f"{where} reads {unknown}, which are not registered before it; "
                              f"registered in {pipeline!r}: {list(stages)}")
        bad_facts = [fact for fact in context if not isinstance(fact, str) or not fact.isidentifier()]
        if bad_facts:
            raise ConfigError(f"{where} declares context facts {bad_facts}, which are not names (a fact is a name "
                              "the run's dataset answers, such as 'inputs' or 'targets')")
        if "." in function.__qualname__ or function.__name__ == "<lambda>":
            raise ConfigError(f"{where}: {function.__qualname__} is not a module-level function (a worker in "
                              "another process must find it by its import path)")
        if phase is not None and phase not in PHASES:
            raise ConfigError(f"{where}: phase must be one of {list(PHASES)} or None, got {phase!r}")
        if phase is not None and codec is None:
            raise ConfigError(f"{where}: phase {phase!r} needs a codec (a phase stores the artifact it computes)")
        if runtime is not None and runtime not in RUNTIME_REPORTS:
            raise ConfigError(f"{where}: runtime must be one of {list(RUNTIME_REPORTS)} or None, got {runtime!r}")
        if callable(steps) and runtime == "steps":
            raise ConfigError(f"{where}: a stage reporting steps only names them in a tuple (a cache hit reports each)")
        stages[name] = StageDefinition(pipeline, name, version, function, tuple(reads), tuple(optional_reads),
                                       tuple(context), tuple(packages), config, safe, final, codec, phase,
                                       runtime, steps if callable(steps) else tuple(steps), shards, scoring_units)
        return function

    return register


def pipeline_stages(pipeline: str) -> list[StageDefinition]:
    """The registered stages of ``pipeline`` in registration (dependency) order."""
    return list(_REGISTRY.get(pipeline, {}).values())


def get_stage(pipeline: str, name: str, path: str | None = None) -> StageDefinition:
    """The definition of stage ``name``; ``path`` (``module:function``) imports its module first if needed."""
    definition = _REGISTRY.get(pipeline, {}).get(name)
    if definition is None and path is not None:
        importlib.import_module(path.partition(":")[0])  # registers the stage, e.g. on a fresh worker
        definition = _REGISTRY.get(pipeline, {}).get(name)
    if definition is None:
        raise ConfigError(f"no stage {name!r} is registered for the {pipeline!r} pipeline"
                          + ("" if path is None else f" (its job names {path!r}, whose import did not register it)"))
    if path is not None and definition.path != path:
        raise ConfigError(f"stage {pipeline}/{name} is {definition.path} in this process, but the job was planned "
                          f"with {path}; two modules register the same stage name")
    return definition


def codecs_of(key: str, kind: str) -> list[ArtifactCodec]:
    """The codecs the stages named by ``key``'s prefix declare for artifacts of ``kind`` (one per pipeline with such
    a stage; every stage's for ``kind`` when none is named so): an entry is one a run could use when one of them
    decodes it (retrieval's endpoints may be one repeated row where a labeled extraction may not).

    ``vertebrae cache verify`` decodes each entry with them, so a document a run could not use is reported."""
    declared = [(definition.name, definition.codec) for stages in _REGISTRY.values() for definition in stages.values()
                if definition.codec is not None and definition.codec.kind == kind]
    stage = key.split("/", 1)[0]
    return [codec for name, codec in declared if name == stage] or [codec for _, codec in declared]


def definition_of(job: Any) -> StageDefinition:
    """The declaration of the stage a job runs (its module imported by path when this process lacks it)."""
    return get_stage(job.pipeline, job.stage, job.function)


def readers_of(pipeline: str, name: str) -> frozenset[str]:
    """Stage ``name`` of ``pipeline`` and every stage that reads it, directly or through others (required or
    optional reads): the stages whose keys move when only ``name``'s do."""
    found = {name}
    for definition in pipeline_stages(pipeline):  # registration order: a reader comes after what it reads
        if found.intersection((*definition.reads, *definition.optional_reads)):
            found.add(definition.name)
    return frozenset(found)

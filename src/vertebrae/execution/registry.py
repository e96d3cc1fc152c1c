"""The stage registry: every stage is a named module-level function that declares what it reads.

A declaration says which upstream stages of the same chain the stage reads
(``reads``, plus ``optional_reads`` taken when present), which facts of the run
context it reads (``context``: ``inputs``, ``targets``, ``groups``, ``extractor``,
``name`` ...), which packages compute it (their versions enter its key), and how to
fingerprint its configuration from the run settings (``config``; ``None`` leaves
the stage out of the plan).  The plan builder knows nothing else about stages, so a
new stage plugs in by registering itself — see docs/architecture.md.

A stage function has the signature ``fn(job, inputs, context, timings) -> artifact``:
``inputs`` maps each read stage name to its artifact, ``context`` resolves the
dataset, targets and extractors (:mod:`vertebrae.execution.context`) and
``timings`` is a dict the stage may fill with sub-step seconds (runtimes live beside
artifacts, never inside them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

#: Facts of the run context a stage may declare in ``context``.
CONTEXT_FACTS = ("inputs", "targets", "fit_targets", "groups", "extractor", "output", "view", "name", "query_inputs",
                 "gallery_inputs", "relevance", "prompts")


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

    def config_safe(self, settings: Any) -> bool:
        return True if self.safe is None else bool(self.safe(settings))

    def enabled_config(self, settings: Any, chain: Any) -> tuple[bool, Any]:
        """(is this stage in the plan for ``chain``, its config fingerprint)."""
        if self.config is None:
            return True, None
        fingerprint = self.config(settings, chain)
        return fingerprint is not None, fingerprint


#: pipeline name -> stage name -> definition, in registration order (a valid topological order).
_REGISTRY: dict[str, dict[str, StageDefinition]] = {}


def stage(pipeline: str, name: str, *, version: int, reads: tuple[str, ...] = (),
          optional_reads: tuple[str, ...] = (), context: tuple[str, ...] = (), packages: tuple[str, ...] = (),
          config: Callable[[Any, Any], Any] | None = None, safe: Callable[[Any], bool] | None = None,
          final: bool = False) -> Callable[[Callable], Callable]:
    """Register the decorated module-level function as stage ``name`` of ``pipeline``."""

    def register(function: Callable) -> Callable:
        stages = _REGISTRY.setdefault(pipeline, {})
        unknown = [r for r in (*reads, *optional_reads) if r not in stages]
        if unknown:
            raise ConfigError(f"stage {pipeline}/{name} reads {unknown}, which are not registered before it; "
                              "register upstream stages first")
        bad_facts = [fact for fact in context if fact not in CONTEXT_FACTS]
        if bad_facts:
            raise ConfigError(f"stage {pipeline}/{name} declares unknown context facts {bad_facts}; "
                              f"known: {CONTEXT_FACTS}")
        if "." in function.__qualname__:
            raise ConfigError(f"stage {pipeline}/{name}: {function.__qualname__} is not a module-level function")
        stages[name] = StageDefinition(pipeline, name, version, function, tuple(reads), tuple(optional_reads),
                                       tuple(context), tuple(packages), config, safe, final)
        return function

    return register


def pipeline_stages(pipeline: str) -> list[StageDefinition]:
    """The registered stages of ``pipeline`` in registration (dependency) order."""
    _load_builtin_stages()
    return list(_REGISTRY.get(pipeline, {}).values())


def get_stage(pipeline: str, name: str) -> StageDefinition:
    _load_builtin_stages()
    try:
        return _REGISTRY[pipeline][name]
    except KeyError:
        raise ConfigError(f"no stage {name!r} is registered for the {pipeline!r} pipeline") from None


def _load_builtin_stages() -> None:
    """Importing the stage modules registers their stages (also on a fresh worker process)."""
    from . import stages  # noqa: F401
    from ..retrieval import stages as retrieval_stages  # noqa: F401
    from ..zero_shot import stages as zero_shot_stages  # noqa: F401

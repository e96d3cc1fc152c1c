"""A run as a DAG of stage jobs whose keys hash exactly what each stage reads.

``build_plan`` walks the chains (one per result) and, for each, every registered
stage of the pipeline whose configuration is enabled and whose upstream stages are
present.  A job's key is the SHA-256 of a canonical JSON document holding the stage
name and code version, the keys of the artifacts it reads, the fingerprints of the
context facts it declares, its config fingerprint and the versions of the packages
that compute it — and nothing else.  Jobs with equal keys are the same job: they run
once and every chain that needs them shares the artifact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._base.fingerprint import identified, package_version
from .._base.json_codec import encode
from .context import Chain, RunContext
from .registry import StageDefinition, pipeline_stages


@dataclasses.dataclass(frozen=True)
class StageJob:
    """One stage applied to one chain: picklable (names, keys and small JSON-safe parameters only)."""

    stage: str
    key: str
    pipeline: str
    #: Small JSON-safe parameters: the extractor id, the output name, the result name.
    params: Mapping[str, Any]
    #: Read stage name -> key of the artifact read.
    needs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: False when any fact behind this artifact cannot be identified across runs (never reused from a cache).
    cache_eligible: bool = True
    #: ``module:function`` of the stage: a process that has not imported the stage's module imports it by this.
    function: str = ""

    @property
    def extractor(self) -> str:
        """The result name of the chain this job belongs to (for progress and error messages)."""
        return self.params["name"]


def artifact_key(stage: str, document: Any) -> str:
    """``stage/<sha256 prefix>`` of the canonical JSON of ``document``."""
    text = json.dumps(encode(document), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return f"{stage}/{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def version_of(name: str) -> str:
    """The version a key records for a package (one seam, so tests can show that versions enter keys)."""
    return package_version(name)


def key_document(definition: Any, needs: Mapping[str, str], context: RunContext, chain: Chain,
                 config: Any) -> dict[str, Any]:
    """Everything a job's key hashes (exposed so tests and docs can show it)."""
    return {"stage": definition.name, "version": definition.version, "reads": dict(sorted(needs.items())),
            "context": {fact: context.fact(fact, chain).fingerprint for fact in definition.context},
            "config": config, "packages": {p: version_of(p) for p in definition.packages}}


@dataclasses.dataclass(frozen=True)
class Plan:
    """Unique jobs in depth-first order (chain by chain), and each chain's stage -> key map."""

    jobs: list[StageJob]
    chains: list[Chain]
    chain_keys: list[dict[str, str]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {job.key: job for job in self.jobs})

    def job(self, key: str) -> StageJob:
        """The job with this key (a lookup, not a scan: a grid of candidates has thousands of jobs)."""
        return self._by_key[key]

    def __iter__(self):  # a plan reads as its jobs
        return iter(self.jobs)


def planned_stages(pipeline: str, settings: Any, chain: Chain) -> list[tuple[StageDefinition, Any]]:
    """The stages of ``chain``'s plan in order, each with its config fingerprint: every registered stage whose
    config is enabled under ``settings`` and whose required reads are planned."""
    planned: list[tuple[StageDefinition, Any]] = []
    names: set[str] = set()
    for definition in pipeline_stages(pipeline):
        enabled, config = definition.enabled_config(settings, chain)
        if enabled and names.issuperset(definition.reads):
            planned.append((definition, config))
            names.add(definition.name)
    return planned


def build_plan(pipeline: str, chains: Sequence[Chain], context: RunContext) -> Plan:
    """Jobs in a depth-first order (chain by chain), each job listed once."""
    jobs: dict[str, StageJob] = {}
    chain_keys = []
    for chain in chains:
        built: dict[str, StageJob] = {}
        for definition, config in planned_stages(pipeline, context.settings, chain):
            reads = [*definition.reads, *(r for r in definition.optional_reads if r in built)]
            needs = {r: built[r].key for r in reads}
            key = artifact_key(definition.name, key_document(definition, needs, context, chain, config))
            eligible = (definition.config_safe(context.settings) and identified(config)
                        and all(built[r].cache_eligible for r in reads)
                        and all(context.fact(fact, chain).safe for fact in definition.context))
            job = StageJob(definition.name, key, pipeline, context.params(chain), needs, eligible, definition.path)
            built[definition.name] = jobs.setdefault(key, job)
        chain_keys.append({name: job.key for name, job in built.items()})
    return Plan(list(jobs.values()), list(chains), chain_keys)

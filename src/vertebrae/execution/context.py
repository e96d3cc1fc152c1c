"""The run context: resolves the dataset, targets and extractors a job refers to, and fingerprints them.

Jobs carry only small, picklable parameters (an extractor id, an output name, a
result name); stage functions look the live objects up here.  The context also
computes the content fingerprints that keys hash, once per run, and says which
facts cannot be trusted across runs (an ephemeral dataset, an extractor without a
declared identity).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ..errors import InputTypeError
from .._base.fingerprint import content_sha256, identified

#: Status of an artifact whose inputs cannot be identified across runs.
BYPASSED_UNSAFE_IDENTITY = "bypassed_unsafe_identity"


@dataclasses.dataclass(frozen=True)
class Chain:
    """One result of a plan: an extractor (or one named output of it) followed through every stage."""

    name: str
    extractor_id: str
    parent: str
    output: str | None = None
    #: ``("target" | "level", name)``: the target view this chain scores (None: the dataset's own targets).
    view: tuple[str, str] | None = None
    #: The compression variant this chain evaluates (an EmbeddingCompressionConfig); None: the raw embedding.
    variant: Any = None
    #: The type of the targets it scores (``single_label``, ``multi_label``, ``regression``), known at plan time so
    #: a key hashes only the config that applies to them; None where a family does not say.
    target_type: str | None = None


@dataclasses.dataclass
class Fact:
    """A fingerprinted fact of the run: what enters keys, and whether it identifies the data across runs."""

    fingerprint: Any
    safe: bool = True


def extractor_identity(extractor: Any, unsafe_token: str) -> tuple[dict[str, Any], bool]:
    """(canonical identity without the name, trusted across runs?) of any extractor.

    Extractors may define ``identity()``; otherwise ``recipe()`` minus its ``name``
    is the identity.  An identity that holds something :func:`canonical` could not
    identify (a lambda, a closure, an unseeded estimator: see
    :func:`~vertebrae._base.fingerprint.identified`), or an extractor with
    ``cache_eligible = False``, cannot be trusted: such an
    extractor's identity gets ``unsafe_token`` (unique to the object within the run),
    so it never shares a key with another extractor, and the runner never reuses its
    artifacts across runs.  The token is deterministic, so result JSON stays
    byte-identical run to run.
    """
    method = "identity" if hasattr(extractor, "identity") else "recipe"
    declared = getattr(extractor, method)()
    if not isinstance(declared, Mapping):
        raise InputTypeError(f"extractor {extractor.name!r}: {method}() returned a {type(declared).__name__}, not a "
                             "mapping; return a JSON-safe dict describing what it computes, e.g. {'type': 'my-model', "
                             "'version': 1}")
    identity = {k: v for k, v in declared.items() if k != "name"}
    safe = bool(getattr(extractor, "cache_eligible", True)) and identified(identity)
    if not safe:
        identity["unsafe_identity_token"] = unsafe_token
    return identity, safe


class RunContext:
    """Live objects of one run plus their fingerprints (computed once, on first use)."""

    def __init__(self, settings: Any, extractors: Sequence[Any], dataset: Any, *, cache: Any = None) -> None:
        self.settings = settings
        #: The run's :class:`~vertebrae.execution.caching.StageCache`, or None without a cache.
        self.cache = cache
        self.dataset = dataset
        #: An ephemeral dataset identity is never reused across runs.
        self.dataset_safe = dataset.identity.cache_eligible
        self.extractors: dict[str, Any] = {}
        self._identities: dict[str, Fact] = {}
        self._facts: dict[Hashable, Fact] = {}
        self._ids: list[str] = []
        self._by_name = {getattr(e, "name", None): e for e in extractors}
        first_position: dict[int, int] = {}
        for position, extractor in enumerate(extractors):
            token = f"extractor-object-{first_position.setdefault(id(extractor), position)}"
            identity, safe = extractor_identity(extractor, token)
            try:
                extractor_id = content_sha256(identity)[:24]
            except InputTypeError as exc:  # its message ends with a fix for datasets, not for extractors
                raise InputTypeError(f"extractor {extractor.name!r}: its recipe()/identity() holds a value vertebrae "
                                     f"cannot fingerprint ({str(exc).split(';')[0]}); keep it to JSON-safe values "
                                     "(strings, numbers, lists, dicts), naming an object by its class or version"
                                     ) from None
            self.extractors.setdefault(extractor_id, extractor)
            self._identities[extractor_id] = Fact(identity, safe)
            self._ids.append(extractor_id)

    def extractor_ids(self) -> list[str]:
        """The id of each extractor, in the order given."""
        return list(self._ids)

    def extractor(self, job: Any) -> Any:
        """The extractor a job names: by its name (so a result shows its own recipe), else by identity.

        Jobs shared by extractors with one identity carry the first one's name; any of them computes
        the same artifact.
        """
        return self._by_name.get(job.params.get("parent"), self.extractors[job.params["extractor"]])

    def extractor_of(self, chain: Chain) -> Any:
        """The extractor a chain follows, found as :meth:`extractor` finds its jobs' (for the front doors' hooks)."""
        return self._by_name.get(chain.parent, self.extractors[chain.extractor_id])

    def fact(self, name: str, chain: Chain) -> Fact:
        """The fingerprint of one context fact for ``chain``.

        The chain's own facts (``extractor``, ``output``, ``view``, ``name``) are answered here; any other is the
        dataset's, so a family declares its own facts without editing the core:
        ``dataset.fact(name, view, extractor)`` returns ``(scope, compute)`` — what the fingerprint depends on (a
        run computes each scope once) and the function computing it — or None when the fact is None for this
        chain, and raises a ConfigError for a fact it does not hold."""
        if name == "extractor":
            return self._identities[chain.extractor_id]
        if name == "output":
            return Fact(chain.output)
        if name == "view":
            return Fact(None if chain.view is None else list(chain.view))
        if name == "name":
            return Fact(chain.name)
        answer = self.dataset.fact(name, chain.view, self.extractors[chain.extractor_id])
        if answer is None:
            return Fact(None)
        scope, compute = answer
        if scope not in self._facts:
            self._facts[scope] = self._computed(compute)
        return self._facts[scope]

    def targets(self, job: Any) -> Any:
        """The targets a job scores: its chain's target view, or the dataset's own targets."""
        return self.dataset.view_targets(job.params.get("view"))

    def _computed(self, compute: Callable[[], Any]) -> Fact:
        try:
            return Fact(compute(), self.dataset_safe)
        except InputTypeError:
            # Inputs that cannot be hashed by content (e.g. opaque objects): the declared identity governs.
            identity = self.dataset.identity
            return Fact({"identity": identity.fingerprint}, identity.kind == "declared" and self.dataset_safe)

    def params(self, chain: Chain) -> Mapping[str, Any]:
        return {"extractor": chain.extractor_id, "parent": chain.parent, "output": chain.output, "name": chain.name,
                "view": chain.view, "variant": None if chain.variant is None else chain.variant.to_dict()}

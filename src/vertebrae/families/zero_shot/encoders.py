"""Zero-shot encoders: anything that embeds samples and prompts into one space.

A :class:`ZeroShotEncoder` has ``name``, ``encode_samples(inputs)``,
``encode_prompts(list_of_str)`` and ``recipe()``; it may declare ``modalities``
(``{"samples": "image", "prompts": "text"}``), ``identity()`` and
``cache_eligible`` like any extractor.  An optional ``fit(sample_inputs)`` is called
once per run, by the chain's ``fit`` job, and both branches are encoded by that fitted
object (:mod:`vertebrae.families.zero_shot.stages`).  Three adapters ship:

* :class:`TextEncoder` — any model with ``encode(list[str]) -> array`` (a
  sentence-transformers model works as is) used for both branches;
* :class:`ExtractorEncoder` — one standard vertebrae extractor for both branches,
  fitted on the samples only (never on labels or prompts);
* :class:`PrecomputedZeroShotEncoder` — both embedding matrices computed elsewhere.

``ZeroShotBenchmark`` also accepts a mapping ``{name: model}``, wrapping bare
models in :class:`TextEncoder`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ...inputs.embeddings import validate_embeddings
from ...errors import InputTypeError, InputValidationError
from ...extractors.base import check_cache_identity, check_extractor_name
from ..front_door import check_unique_names
from ..._base.fingerprint import callable_name, canonical, content_sha256, declared_identity, identified

DEFAULT_MODALITIES = {"samples": "unknown", "prompts": "text"}


@runtime_checkable
class ZeroShotEncoder(Protocol):
    """What a zero-shot benchmark needs from a candidate: a sample branch and a prompt branch."""

    name: str

    def encode_samples(self, inputs: Any) -> Any: ...

    def encode_prompts(self, prompts: list[str]) -> Any: ...

    def recipe(self) -> dict[str, Any]: ...


class TextEncoder:
    """A text model used for both branches: ``model.encode(list_of_texts, **encode_kwargs)``.

    Its code and weights cannot be fingerprinted here, so without a declared
    ``cache_identity`` (a string you change with the model) or a
    ``__vertebrae_identity__()`` method on the model, its embeddings are never shared
    with another encoder nor reused across runs.
    """

    modalities = {"samples": "text", "prompts": "text"}
    version = 1

    def __init__(self, name: str, model: Any, *, encode_kwargs: Mapping[str, Any] | None = None,
                 cache_identity: str | None = None) -> None:
        self.name = check_extractor_name(name)
        if not callable(getattr(model, "encode", None)):
            raise InputTypeError(f"TextEncoder {name!r}: model must have an encode(list_of_texts) method (e.g. a "
                                 f"sentence-transformers model), got {type(model).__name__}")
        self.model = model
        self.encode_kwargs = dict(encode_kwargs or {})
        self.cache_identity = check_cache_identity(f"TextEncoder {name!r}", cache_identity)

    @property
    def cache_eligible(self) -> bool:
        return identified(self.identity())

    def encode_samples(self, inputs: Any) -> Any:
        return self.model.encode(list(inputs), **self.encode_kwargs)

    def encode_prompts(self, prompts: list[str]) -> Any:
        return self.model.encode(list(prompts), **self.encode_kwargs)

    def recipe(self) -> dict[str, Any]:
        return {"type": "text_encoder", "name": self.name, "model": callable_name(type(self.model)),
                "encode_kwargs": canonical(self.encode_kwargs)}

    def identity(self) -> dict[str, Any]:
        model = {"callable": callable_name(type(self.model))} if self.cache_identity else canonical(self.model)
        return declared_identity(self, {"type": "text_encoder", "model": model,
                                        "encode_kwargs": canonical(self.encode_kwargs),
                                        "cache_identity": self.cache_identity})


class ExtractorEncoder:
    """One standard extractor (``fit``/``transform``) for both branches, fitted on the samples only.

    The run's ``fit`` job fits it once; both encode jobs transform with that fitted copy.
    """

    modalities = {"samples": "text", "prompts": "text"}
    version = 1

    def __init__(self, extractor: Any) -> None:
        missing = [attr for attr in ("name", "fit", "transform", "recipe") if not hasattr(extractor, attr)]
        if missing:
            raise InputTypeError(f"ExtractorEncoder: {type(extractor).__name__} lacks {missing}; pass an extractor "
                                 "with name, fit, transform and recipe")
        if getattr(extractor, "supervised", False):
            raise InputValidationError(f"extractor {extractor.name!r} is supervised: fitted with the labels, it would "
                                       "learn the classes zero-shot classification is scored on; use an "
                                       "unsupervised extractor")
        self.extractor = extractor
        self.name = extractor.name

    @property
    def cache_eligible(self) -> bool:
        return bool(getattr(self.extractor, "cache_eligible", True))

    def fit(self, sample_inputs: Any) -> "ExtractorEncoder":
        self.extractor.fit(sample_inputs)
        return self

    def encode_samples(self, inputs: Any) -> Any:
        return self.extractor.transform(inputs)

    def encode_prompts(self, prompts: list[str]) -> Any:
        return self.extractor.transform(prompts)

    def recipe(self) -> dict[str, Any]:
        return {"type": "extractor_encoder", "fit_on": "samples", "extractor": self.extractor.recipe()}

    def identity(self) -> dict[str, Any]:
        inner = self.extractor.identity() if hasattr(self.extractor, "identity") else self.extractor.recipe()
        return declared_identity(self, {"type": "extractor_encoder", "fit_on": "samples",
                                        "extractor": {k: v for k, v in inner.items() if k != "name"}})


class PrecomputedZeroShotEncoder:
    """Sample and prompt embeddings computed elsewhere (rows in dataset order and declaration order)."""

    version = 1

    def __init__(self, name: str, sample_embeddings: Any, prompt_embeddings: Any, *,
                 modalities: Mapping[str, str] | None = None) -> None:
        self.name = check_extractor_name(name)
        self.sample_embeddings = validate_embeddings(sample_embeddings, argument=f"sample_embeddings of {name!r}")
        self.prompt_embeddings = validate_embeddings(prompt_embeddings, argument=f"prompt_embeddings of {name!r}")
        self.modalities = {**DEFAULT_MODALITIES, **dict(modalities or {})}

    def encode_samples(self, inputs: Any) -> Any:
        return self.sample_embeddings

    def encode_prompts(self, prompts: list[str]) -> Any:
        return self.prompt_embeddings

    def recipe(self) -> dict[str, Any]:
        return {"type": "precomputed_zero_shot", "name": self.name,
                "samples_sha256": content_sha256(self.sample_embeddings),
                "prompts_sha256": content_sha256(self.prompt_embeddings)}

    def identity(self) -> dict[str, Any]:
        """The matrices and the declared modalities (an encoding artifact records its branch's modality)."""
        return declared_identity(self, {**self.recipe(), "modalities": dict(self.modalities)})


def as_encoders(encoders: Any) -> list[Any]:
    """Validate the ``encoders`` argument: a list of encoders / extractors, or a mapping name -> model."""
    if isinstance(encoders, Mapping):
        items = list(encoders.items())
    elif isinstance(encoders, Sequence) and not isinstance(encoders, (str, bytes)):
        items = [(None, e) for e in encoders]
    else:
        raise InputTypeError("encoders must be a list of zero-shot encoders (or extractors), or a mapping of name -> "
                             f"model with encode(list_of_texts), got {type(encoders).__name__}")
    if not items:
        raise InputValidationError("encoders is empty; pass at least one encoder")
    where = [f"encoders[{position}]" if name is None else f"encoders[{name!r}]"
             for position, (name, _) in enumerate(items)]
    adapted = [_adapt(encoder, name, place) for (name, encoder), place in zip(items, where)]
    check_unique_names(adapted, where, "encoder", given=[encoder for _, encoder in items])
    return adapted


def _adapt(encoder: Any, name: str | None, where: str) -> Any:
    if isinstance(encoder, ZeroShotEncoder) or all(hasattr(encoder, a) for a in ("name", "fit", "transform",
                                                                                   "recipe")):
        adapted = encoder if isinstance(encoder, ZeroShotEncoder) else ExtractorEncoder(encoder)
        if name is not None and adapted.name != name:
            raise InputValidationError(f"{where} is named {adapted.name!r}; the mapping key must equal the encoder's "
                                       "name (or pass a list)")
        return adapted
    if callable(getattr(encoder, "encode", None)):
        if name is None:
            raise InputTypeError(f"{where} ({type(encoder).__name__}) has encode() but no name; pass a mapping "
                                 "{'name': model} or TextEncoder('name', model)")
        return TextEncoder(check_extractor_name(name, f"{where} name"), encoder)
    raise InputTypeError(f"{where} ({type(encoder).__name__}) is not an encoder: give an object with name, "
                         "encode_samples, encode_prompts and recipe; a standard extractor (name, fit, transform, "
                         "recipe); or a model with encode(list_of_texts) in a mapping {'name': model}")

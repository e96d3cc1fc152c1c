"""Which kind of raw input a collection holds, and the check that each model reads that kind.

Used by every family: labeled extractors against the dataset, retrieval extractors against each endpoint's inputs,
zero-shot encoders against the samples and the prompts.

A text model given images (or an audio model given texts) fails only when its turn to embed comes, after the
extractors before it have run; the mismatch is known when the benchmark is built, so it is refused there.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputTypeError, InputValidationError
from .audio import AudioInputs
from .images import ImageInputs

#: What each kind is called in messages, and the constructor that builds a dataset of it.
BUILDERS = {"text": "BenchmarkDataset.from_arrays(texts, labels)",
            "image": "BenchmarkDataset.from_images(...) or from_image_paths(...)",
            "audio": "BenchmarkDataset.from_audio_arrays(...)"}
#: How close a declared kind must be to a checked one (``difflib`` ratio) to read as its typo: ``txt``, ``img``,
#: ``images`` and ``Image`` do, ``video``, ``tabular`` and ``fused`` do not.
NEAR_MISS = 0.75


def inputs_modality(inputs: Any) -> str | None:
    """``"text"``, ``"image"`` or ``"audio"`` for raw inputs of one of those kinds; ``None`` for anything else
    (numeric arrays, multimodal records, embeddings), which no modality check applies to."""
    if isinstance(inputs, AudioInputs):
        return "audio"
    if isinstance(inputs, ImageInputs):
        return "image"
    if isinstance(inputs, (list, tuple, np.ndarray)) and len(inputs) and all(isinstance(x, str) for x in inputs):
        return "text"
    return None


def check_input_modality(who: str, want: str | None, have: str | None, holder: str, kind: str,
                         remedy: str | None = None) -> None:
    """Refuse a model that declares it embeds ``want`` when its inputs hold ``have`` (their
    :func:`inputs_modality`, read once per collection, not once per model), so the mismatch fails before any model
    runs; undeclared (``None``, ``"unknown"``) and other kinds are not checked."""
    if want not in BUILDERS or have is None or want == have:
        return
    alternative = f", or {remedy}" if remedy else ""
    raise InputValidationError(f"{who} embeds {want}, but {holder} holds {have}; pass an {kind} that reads "
                               f"{have}{alternative}")


def check_declared_modality(who: str, declared: Any) -> None:
    """Refuse a declared kind that is not a non-empty string, or that reads like a kind the checks know without being
    it (``"txt"``, ``"Image"``): such a typo would leave the inputs it names unchecked.  Any other kind (``tabular``,
    ``video``, ``fused``, ``unknown``) is the user's own vocabulary, as multimodal field modalities are: recorded in
    profiles, not checked."""
    if not isinstance(declared, str) or not declared.strip():
        raise InputValidationError(f"{who} is {declared!r}; declare a kind as a non-empty string, one of "
                                   f"{list(BUILDERS)} to have the inputs checked, or 'unknown'")
    if declared in BUILDERS:
        return
    close = difflib.get_close_matches(declared.lower(), BUILDERS, n=1, cutoff=NEAR_MISS)
    if close:
        raise InputValidationError(f"{who} is {declared!r}, which reads like {close[0]!r} but is not it, so the inputs "
                                   f"would go unchecked; declare {close[0]!r} (checked kinds: {list(BUILDERS)})")


def declared_modalities(who: str, model: Any, defaults: Mapping[str, str], part: str, owner: str,
                        example: str) -> dict[str, str]:
    """A model's ``modalities`` declaration over its family's ``defaults`` (one kind per endpoint or branch),
    refused where it is not a dict, names a ``part`` the family lacks, or a kind no check knows: each typo would
    otherwise leave that part unchecked."""
    declared = getattr(model, "modalities", None) or {}
    if not isinstance(declared, Mapping):
        raise InputTypeError(f"{who} modalities must be a dict such as {example}, got {type(declared).__name__}")
    for name, modality in declared.items():
        if name not in defaults:
            raise InputValidationError(f"{who} modalities names {part} {name!r}; {owner} are {list(defaults)}")
        check_declared_modality(f"{who} modalities[{name!r}]", modality)
    return model_modalities(model, defaults)


def model_modalities(model: Any, defaults: Mapping[str, str]) -> dict[str, str]:
    """The kind a model declares per endpoint or branch (its ``modalities`` dict), ``defaults`` where it declares
    none: what profiles and embedding metadata record, once :func:`declared_modalities` has checked it."""
    return {**defaults, **dict(getattr(model, "modalities", None) or {})}


def check_extractor_modalities(dataset: Any, extractors: Any) -> None:
    """Every extractor that declares an ``input_modality`` gets a dataset of that kind (checked before any model
    loads)."""
    have = inputs_modality(getattr(dataset, "inputs", None))
    for i, extractor in enumerate(extractors):
        want = getattr(extractor, "input_modality", None)
        check_input_modality(f"extractors[{i}] ({extractor.name!r}, {type(extractor).__name__})", want, have,
                             "the dataset", "extractor",
                             f"build the dataset from {want} with {BUILDERS.get(want, 'the matching constructor')}")

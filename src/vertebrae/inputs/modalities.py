"""Which kind of raw input a collection holds, and the check that each model reads that kind.

Used by every family: labeled extractors against the dataset, retrieval extractors against each endpoint's inputs,
zero-shot encoders against the samples and the prompts.

A text model given images (or an audio model given texts) fails only when its turn to embed comes, after the
extractors before it have run; the mismatch is known when the benchmark is built, so it is refused there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputValidationError
from .audio import AudioInputs
from .images import ImageInputs

#: What each kind is called in messages, and the constructor that builds a dataset of it.
BUILDERS = {"text": "BenchmarkDataset.from_arrays(texts, labels)",
            "image": "BenchmarkDataset.from_images(...) or from_image_paths(...)",
            "audio": "BenchmarkDataset.from_audio_arrays(...)"}
#: What a model may declare it embeds: a kind the check knows, or one it records but does not check: ``tabular``
#: (numeric columns, ``BenchmarkDataset.from_dataframe``'s name for them) and ``unknown``.
DECLARABLE = (*BUILDERS, "tabular", "unknown")


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
    """Refuse a declared kind outside :data:`DECLARABLE`: a typo such as ``"txt"`` would otherwise leave the
    inputs it names unchecked."""
    if not isinstance(declared, str) or declared not in DECLARABLE:
        raise InputValidationError(f"{who} is {declared!r}, not a modality vertebrae knows; declare one of "
                                   f"{list(DECLARABLE)}")


def check_extractor_modalities(dataset: Any, extractors: Any) -> None:
    """Every extractor that declares an ``input_modality`` gets a dataset of that kind (checked before any model
    loads)."""
    have = inputs_modality(getattr(dataset, "inputs", None))
    for i, extractor in enumerate(extractors):
        want = getattr(extractor, "input_modality", None)
        check_input_modality(f"extractors[{i}] ({extractor.name!r}, {type(extractor).__name__})", want, have,
                             "the dataset", "extractor",
                             f"build the dataset from {want} with {BUILDERS.get(want, 'the matching constructor')}")

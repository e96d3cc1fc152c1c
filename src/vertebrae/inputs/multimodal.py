"""Multi-modal datasets: several aligned input fields per sample, extractors that declare what they read.

``BenchmarkDataset.from_multimodal(inputs={field: values}, labels, modalities={field: modality})``
validates that every field has a value for every sample and keeps the fields as a
:class:`MultiModalInputs`.  An extractor reads fields through :class:`FieldExtractor`,
which passes one field's values (or ``{field: values}`` for several) to the wrapped
extractor; the benchmark rejects an extractor that declares no fields, or an unknown
one, before anything runs.  Each result's embedding metadata records ``input_fields``
and ``source``: the field's modality (e.g. ``image`` or ``text``), or ``fused`` when
the extractor reads several fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import InputTypeError, InputValidationError
from .._base.fingerprint import declared_identity

FUSED = "fused"


class MultiModalInputs:
    """The aligned fields of a multi-modal dataset (what ``dataset.inputs`` holds)."""

    def __init__(self, fields: Mapping[str, Any], modalities: Mapping[str, str]) -> None:
        self.fields = dict(fields)
        self.modalities = dict(modalities)

    @property
    def n_samples(self) -> int:
        return _length(next(iter(self.fields.values())), next(iter(self.fields)))

    def __len__(self) -> int:
        return self.n_samples

    def __getitem__(self, field: str) -> Any:
        return self.fields[field]

    def __iter__(self) -> Iterator[tuple[str, str, Any]]:
        """``(field, modality, values)`` in declaration order: what the dataset's content hash reads."""
        return iter((field, self.modalities[field], values) for field, values in self.fields.items())

    def select(self, fields: Sequence[str]) -> Any:
        """One field's values, or ``{field: values}`` for several."""
        return self.fields[fields[0]] if len(fields) == 1 else {field: self.fields[field] for field in fields}

    def source(self, fields: Sequence[str]) -> str:
        """The modality an output built from ``fields`` comes from: the field's own, or ``fused``."""
        return self.modalities[fields[0]] if len(fields) == 1 else FUSED


def _length(values: Any, field: str) -> int:
    if isinstance(values, (str, bytes)) or not (hasattr(values, "shape") or hasattr(values, "__len__")):
        raise InputTypeError(f"inputs[{field!r}] must be a sequence or array with one value per sample, got "
                             f"{type(values).__name__}")
    return int(values.shape[0]) if hasattr(values, "shape") else len(values)


def build_multimodal_inputs(inputs: Any, modalities: Any) -> MultiModalInputs:
    """Validate fields and modalities: names, one modality per field, one present value per sample."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise InputTypeError("inputs must be a non-empty mapping {field name: values}, got "
                             f"{type(inputs).__name__}")
    if not isinstance(modalities, Mapping):
        raise InputTypeError(f"modalities must be a mapping {{field name: modality}}, got {type(modalities).__name__}")
    for field in inputs:
        if not isinstance(field, str) or not field.strip():
            raise InputValidationError(f"inputs field names must be non-empty strings, got {field!r}")
        modality = modalities.get(field)
        if not isinstance(modality, str) or not modality.strip():
            raise InputValidationError(f"modalities has no modality for field {field!r} (got {modality!r}); give "
                                       "every field one, e.g. modalities={'image': 'image', 'caption': 'text'}")
    extra = sorted(set(modalities) - set(inputs))
    if extra:
        raise InputValidationError(f"modalities names fields {extra} that inputs lacks; inputs has {list(inputs)}")
    lengths = {field: _length(values, field) for field, values in inputs.items()}
    if len(set(lengths.values())) > 1:
        raise InputValidationError(f"every field needs one value per sample, but the fields have {lengths} values")
    if not next(iter(lengths.values())):
        raise InputValidationError("inputs has no samples; a benchmark needs at least two classes with two rows each")
    for field, values in inputs.items():
        # a numeric array holds no None; a list or a NumPy object array may (rows of texts, images, ...)
        if not hasattr(values, "shape") or getattr(values, "dtype", None) == object:
            missing = [i for i, value in enumerate(values) if value is None]
            if missing:
                raise InputValidationError(f"inputs[{field!r}] has no value (None) for samples {missing[:5]}; every "
                                           "field must be present for every sample (drop those samples first)")
    return MultiModalInputs(inputs, {field: modalities[field] for field in inputs})


class FieldExtractor:
    """An extractor that reads declared fields of a multi-modal dataset.

    ``fields=("image",)`` passes ``dataset.inputs["image"]`` to ``extractor``; several
    fields pass ``{field: values}`` (a fusion extractor).  Called directly, ``transform`` also takes
    ``{field: values}``.  Everything else — name,
    recipe, identity, named outputs, supervision — is the wrapped extractor's, with
    ``input_fields`` added to the recipe and identity.
    """

    version = 1

    def __init__(self, extractor: Any, fields: str | Sequence[str]) -> None:
        if not isinstance(fields, (str, Sequence)):
            raise InputTypeError(f"FieldExtractor: fields must be a field name or a sequence of field names, got "
                                 f"{type(fields).__name__} ({fields!r}); e.g. fields='image' or ('image', 'caption')")
        names = (fields,) if isinstance(fields, str) else tuple(fields)
        if not names or any(not isinstance(f, str) or not f.strip() for f in names) or len(set(names)) != len(names):
            raise InputValidationError(f"FieldExtractor: fields must be distinct non-empty field names, got {fields!r}")
        for attribute in ("name", "fit", "transform", "recipe"):
            if not hasattr(extractor, attribute):
                raise InputTypeError(f"FieldExtractor: {type(extractor).__name__} lacks {attribute}; wrap an extractor")
        self.extractor = extractor
        self.input_fields = names
        self.name = extractor.name
        self.supervised = bool(getattr(extractor, "supervised", False))
        self.cache_eligible = bool(getattr(extractor, "cache_eligible", True))

    def _select(self, X: Any) -> Any:
        """The fields' values from a multi-modal dataset's inputs, or from ``{field: values}`` passed directly."""
        if isinstance(X, Mapping):
            X = MultiModalInputs(X, {})
        if not isinstance(X, MultiModalInputs):
            raise InputTypeError(f"extractor {self.name!r} reads fields {list(self.input_fields)}, so it needs a "
                                 "dataset built with BenchmarkDataset.from_multimodal (or X={field: values}), got "
                                 f"{type(X).__name__}")
        missing = [field for field in self.input_fields if field not in X.fields]
        if missing:
            raise InputValidationError(f"extractor {self.name!r} reads fields {missing} that X lacks; it has "
                                       f"{list(X.fields)}: name those in FieldExtractor(..., fields=...)")
        return X.select(self.input_fields)

    def fit(self, X: Any, y: Any = None) -> "FieldExtractor":
        self.extractor.fit(self._select(X), y)
        return self

    def transform(self, X: Any) -> Any:
        return self.extractor.transform(self._select(X))

    def recipe(self) -> dict[str, Any]:
        return {**self.extractor.recipe(), "input_fields": list(self.input_fields)}

    def identity(self) -> dict[str, Any]:
        inner = self.extractor.identity() if hasattr(self.extractor, "identity") else dict(self.extractor.recipe())
        return declared_identity(self, {"type": "fields", "extractor": {k: v for k, v in inner.items() if k != "name"},
                                        "input_fields": list(self.input_fields)})

    def __getattr__(self, attribute: str) -> Any:
        """Named outputs pass through (``hasattr`` stays False for a single-output wrapped extractor)."""
        if attribute in ("output_names", "output_metadata") and "extractor" in self.__dict__:
            return getattr(self.extractor, attribute)
        if attribute == "transform_many" and "extractor" in self.__dict__:
            many = self.extractor.transform_many
            return lambda X: many(self._select(X))
        raise AttributeError(attribute)


def check_extractor_fields(dataset: Any, extractors: Sequence[Any]) -> None:
    """Every extractor of a multi-modal dataset declares known fields; no other dataset gets field readers."""
    inputs = dataset.inputs
    for i, extractor in enumerate(extractors):
        fields = getattr(extractor, "input_fields", None)
        if isinstance(inputs, MultiModalInputs):
            if fields is None:
                raise InputValidationError(
                    f"extractors[{i}] ({extractor.name!r}) declares no input fields, but the dataset has fields "
                    f"{list(inputs.fields)}; wrap it: FieldExtractor(extractor, fields=({next(iter(inputs.fields))!r},))")
            unknown = [f for f in fields if f not in inputs.fields]
            if unknown:
                raise InputValidationError(f"extractors[{i}] ({extractor.name!r}) reads fields {unknown} that the "
                                           f"dataset lacks; it has {list(inputs.fields)}")
        elif fields is not None:
            raise InputValidationError(f"extractors[{i}] ({extractor.name!r}) reads fields {list(fields)}, but the "
                                       "dataset has no fields; build it with BenchmarkDataset.from_multimodal")


def input_source(extractor: Any, dataset: Any) -> dict[str, Any]:
    """``input_fields`` and ``source`` (modality or ``fused``) of a field reader's output; the ``source`` of a
    single-modality raw dataset (``from_image_paths``, ``from_audio_arrays``, ...); ``{}`` otherwise."""
    fields = getattr(extractor, "input_fields", None)
    if fields is None or not isinstance(getattr(dataset, "inputs", None), MultiModalInputs):
        modality = (getattr(dataset, "structure", None) or {}).get("modality")  # one raw modality: images, audio
        return {"source": modality} if fields is None and modality is not None else {}
    return {"input_fields": list(fields), "source": dataset.inputs.source(fields),
            "modalities": {field: dataset.inputs.modalities[field] for field in fields}}


def multimodal_structure(inputs: MultiModalInputs, aligned_field: str | None) -> dict[str, Any]:
    if aligned_field is None:
        aligned_field = next(iter(inputs.fields))
    if aligned_field not in inputs.fields:
        raise InputValidationError(f"aligned_field {aligned_field!r} is not a field; the fields are "
                                   f"{list(inputs.fields)}")
    return {"family": "multimodal", "fields": list(inputs.fields), "modalities": dict(inputs.modalities),
            "aligned_field": aligned_field}


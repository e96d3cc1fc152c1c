"""BenchmarkDataset: validated targets, optional embeddings or raw inputs, identity, groups.

Everything is validated when the dataset is built, so a bad row is reported before
any extractor runs.  Datasets are immutable; ``with_groups`` returns a new one.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from .._base.config import FrozenDict
from .embeddings import validate_embeddings
from ..errors import ConfigError, InputTypeError, InputValidationError
from .._base.fingerprint import content_sha256
from .identity import DatasetIdentity, require_identity
from .labels import LabelCatalog, semantic_key
from .targets import MultiLabelTargets, RegressionTargets, SingleLabelTargets, Targets, build_targets
from .views import LEVEL, TARGET, TargetView, build_label_levels, build_target_views

#: How a dataset answers a context fact (``RunContext.fact``): (what it depends on, how to compute it), or None.
FactAnswer = tuple[Hashable, Callable[[], Any]] | None


@dataclasses.dataclass(frozen=True)
class Groups:
    """Independence groups (e.g. patient, session, source image): one semantic key per row."""

    keys: np.ndarray
    catalog: LabelCatalog

    def subset(self, rows: np.ndarray) -> "Groups":
        return Groups(self.keys[rows], self.catalog)

    def summary(self) -> dict[str, Any]:
        _, counts = np.unique(self.keys, return_counts=True)
        return {"n_groups": len(self.catalog), "group_size_min": int(counts.min()),
                "group_size_median": float(np.median(counts)), "group_size_max": int(counts.max())}


def _dataset_name(name: Any, identity: DatasetIdentity, *, where: str) -> str:
    """The report title: ``name`` when given, else the identity's dataset id; checked before any work."""
    if name is None or name == "":
        return identity.dataset_id
    if not isinstance(name, str):
        raise InputTypeError(f"{where}: name must be a string (the dataset's title in reports) or None, got {name!r}")
    return name


def count_rows(argument: str, value: Any, *, what: str) -> int:
    """How many rows ``value`` holds, refusing what has no rows in order: one text (its characters are not rows),
    a set or a mapping (no row order to line up with the labels), a scalar or a 0-d array."""
    if isinstance(value, (str, bytes)):
        raise InputTypeError(f"{argument} must be a sized collection of {what}, got one {type(value).__name__}; "
                             "wrap a single text in a list")
    if isinstance(value, (AbstractSet, Mapping)):
        raise InputTypeError(f"{argument} must be an ordered collection of {what} (list, array, Series), got a "
                             f"{type(value).__name__}, which has no row order to line up with the labels; pass a list")
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 0:
        raise InputValidationError(f"{argument} is a 0-d array (a single value); give one entry per row")
    try:
        return int(shape[0]) if shape is not None else len(value)
    except TypeError:
        raise InputTypeError(f"{argument} must be a sized collection of {what} (list, array, Series), "
                             f"got {type(value).__name__}") from None


def build_groups(groups: Any, n_samples: int) -> Groups:
    count_rows("groups", groups, what="group ids")
    values = list(groups.tolist() if isinstance(groups, np.ndarray) else groups)
    if isinstance(groups, np.ndarray) and groups.ndim != 1:
        raise InputValidationError(f"groups must be 1-D (one group id per row), got shape {groups.shape}")
    if len(values) != n_samples:
        raise InputValidationError(f"groups has {len(values)} entries but the dataset has {n_samples} rows; "
                                   "give one group id per row")
    keys = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        try:
            keys[i] = semantic_key(value)
        except (ValueError, TypeError) as exc:
            raise (InputTypeError if isinstance(exc, TypeError) else InputValidationError)(f"groups[{i}]: {exc}") from None
    first = dict(zip(keys.tolist(), values))
    return Groups(keys, LabelCatalog(first.values()))


@dataclasses.dataclass(frozen=True)
class BenchmarkDataset:
    """A labeled dataset to benchmark extractors on.

    Build it with :meth:`from_embeddings` (precomputed embedding matrix), :meth:`from_arrays` (raw inputs that
    extractors embed), or a raw-input constructor: :meth:`from_image_paths`, :meth:`from_images`,
    :meth:`from_audio_arrays`, :meth:`from_dataframe`, :meth:`from_multimodal`.
    """

    identity: DatasetIdentity
    targets: Targets
    embeddings: Any = None
    inputs: Any = None
    groups: Groups | None = None
    name: str = ""
    #: Named alternative targets on the same rows (see :mod:`vertebrae.inputs.views`).
    target_views: Mapping[str, Targets] = dataclasses.field(default_factory=FrozenDict)
    #: Label-hierarchy levels, top first: level name -> single-label targets.
    label_levels: Mapping[str, Targets] = dataclasses.field(default_factory=FrozenDict)
    #: How the rows were materialized (relational units, segmentation tokens, multi-modal fields): JSON-safe
    #: report fields copied into :meth:`summary` under ``"structure"`` (see docs/datasets.md).
    structure: Mapping[str, Any] = dataclasses.field(default_factory=FrozenDict)

    @property
    def n_samples(self) -> int:
        return self.targets.n_samples

    @property
    def target_type(self) -> str:
        return self.targets.target_type

    @classmethod
    def from_embeddings(cls, embeddings: Any, y: Any, *, identity: DatasetIdentity | None = None,
                        target_type: str | None = None, label_names: Sequence[Any] | None = None,
                        target_names: Sequence[str] | None = None, groups: Any = None,
                        name: str | None = None) -> "BenchmarkDataset":
        """Dataset over a precomputed (dense or SciPy sparse) embedding matrix."""
        identity = require_identity(identity, where="BenchmarkDataset.from_embeddings")
        name = _dataset_name(name, identity, where="BenchmarkDataset.from_embeddings")
        matrix = validate_embeddings(embeddings)
        targets = build_targets(y, target_type=target_type, label_names=label_names, target_names=target_names,
                                n_samples=matrix.shape[0])
        if identity.kind == "content":
            identity = identity.with_content(_content_hash(content_sha256(matrix), targets))
        dataset = cls(identity, targets, embeddings=matrix, name=name)
        return dataset.with_groups(groups) if groups is not None else dataset

    @classmethod
    def from_arrays(cls, X: Any, y: Any, *, identity: DatasetIdentity | None = None,
                    target_type: str | None = None, label_names: Sequence[Any] | None = None,
                    target_names: Sequence[str] | None = None, groups: Any = None,
                    name: str | None = None) -> "BenchmarkDataset":
        """Dataset over raw inputs (arrays, texts, images...) that each extractor embeds."""
        identity = require_identity(identity, where="BenchmarkDataset.from_arrays")
        name = _dataset_name(name, identity, where="BenchmarkDataset.from_arrays")
        n = count_rows("X", X, what="inputs")
        if n == 0:
            raise InputValidationError("X is empty; a benchmark needs at least two classes with two rows each")
        targets = build_targets(y, target_type=target_type, label_names=label_names, target_names=target_names,
                                n_samples=n)
        if identity.kind == "content":
            identity = identity.with_content(_content_hash(inputs_sha256(X), targets))
        dataset = cls(identity, targets, inputs=X, name=name)
        return dataset.with_groups(groups) if groups is not None else dataset

    @classmethod
    def from_multimodal(cls, inputs: Mapping[str, Any], labels: Any, *, modalities: Mapping[str, str],
                        identity: DatasetIdentity | None = None, aligned_field: str | None = None,
                        target_type: str | None = None, label_names: Sequence[Any] | None = None,
                        target_names: Sequence[str] | None = None, groups: Any = None,
                        name: str | None = None) -> "BenchmarkDataset":
        """Dataset over several aligned input fields per sample (see :mod:`vertebrae.inputs.multimodal`)."""
        from .multimodal import build_multimodal_inputs, multimodal_structure

        identity = require_identity(identity, where="BenchmarkDataset.from_multimodal")
        fields = build_multimodal_inputs(inputs, modalities)
        structure = multimodal_structure(fields, aligned_field)
        dataset = cls.from_arrays(fields, labels, identity=identity, target_type=target_type,
                                  label_names=label_names, target_names=target_names, groups=groups, name=name)
        return dataclasses.replace(dataset, structure=FrozenDict(structure))

    @classmethod
    def from_image_paths(cls, paths: Any, labels: Any, *, identity: DatasetIdentity | None = None,
                         target_type: str | None = None, label_names: Sequence[Any] | None = None,
                         target_names: Sequence[str] | None = None, groups: Any = None,
                         name: str | None = None, max_image_pixels: int | None = None) -> "BenchmarkDataset":
        """Dataset over image files, loaded lazily as RGB Pillow images (see :mod:`vertebrae.inputs.images`).

        ``max_image_pixels`` bounds what one file may decode to (default ``images.DEFAULT_MAX_IMAGE_PIXELS``)."""
        from .images import DEFAULT_MAX_IMAGE_PIXELS, image_files

        identity = require_identity(identity, where="BenchmarkDataset.from_image_paths")
        budget = DEFAULT_MAX_IMAGE_PIXELS if max_image_pixels is None else max_image_pixels
        return cls._from_raw(image_files(paths, budget), labels, identity, target_type, label_names, target_names, groups,
                             name)

    @classmethod
    def from_images(cls, images: Any, labels: Any, *, identity: DatasetIdentity | None = None,
                    target_type: str | None = None, label_names: Sequence[Any] | None = None,
                    target_names: Sequence[str] | None = None, groups: Any = None,
                    name: str | None = None) -> "BenchmarkDataset":
        """Dataset over in-memory images (uint8 arrays or PIL images), handed to extractors as RGB Pillow images."""
        from .images import in_memory_images

        identity = require_identity(identity, where="BenchmarkDataset.from_images")
        return cls._from_raw(in_memory_images(images), labels, identity, target_type, label_names, target_names,
                             groups, name)

    @classmethod
    def from_audio_arrays(cls, waveforms: Any, labels: Any, *, sampling_rate: int,
                          identity: DatasetIdentity | None = None, target_type: str | None = None,
                          label_names: Sequence[Any] | None = None, target_names: Sequence[str] | None = None,
                          groups: Any = None, name: str | None = None) -> "BenchmarkDataset":
        """Dataset over float waveforms of varying length recorded at ``sampling_rate`` (see
        :mod:`vertebrae.inputs.audio`)."""
        from .audio import audio_arrays

        identity = require_identity(identity, where="BenchmarkDataset.from_audio_arrays")
        return cls._from_raw(audio_arrays(waveforms, sampling_rate), labels, identity, target_type, label_names,
                             target_names, groups, name)

    @classmethod
    def from_dataframe(cls, df: Any, *, input_col: str | Sequence[str], label_col: str | Sequence[str],
                       identity: DatasetIdentity | None = None, modality: str | None = None,
                       target_type: str | None = None, groups: Any = None,
                       name: str | None = None) -> "BenchmarkDataset":
        """Dataset over named columns of a DataFrame (see :mod:`vertebrae.inputs.dataframes`)."""
        from .dataframes import read_columns

        identity = require_identity(identity, where="BenchmarkDataset.from_dataframe")
        columns = read_columns(df, input_col, label_col, modality)
        build = cls.from_image_paths if columns.modality == "image" else cls.from_arrays
        dataset = build(columns.inputs, columns.labels, identity=identity, groups=groups, name=name,
                        target_type="multi_label" if columns.label_names else target_type,
                        label_names=columns.label_names)
        return dataclasses.replace(dataset, structure=FrozenDict({**dataset.structure, **columns.structure}))

    @classmethod
    def _from_raw(cls, inputs: Any, labels: Any, identity: DatasetIdentity, target_type: str | None,
                  label_names: Sequence[Any] | None, target_names: Sequence[str] | None, groups: Any,
                  name: str | None) -> "BenchmarkDataset":
        """``from_arrays`` over validated raw inputs, keeping their modality and provenance facts."""
        dataset = cls.from_arrays(inputs, labels, identity=identity, target_type=target_type, label_names=label_names,
                                  target_names=target_names, groups=groups, name=name)
        return dataclasses.replace(dataset, structure=FrozenDict(inputs.structure()))

    def with_groups(self, groups: Any) -> "BenchmarkDataset":
        """Attach independence groups (forwarded to group-aware diagnostics and metrics)."""
        return dataclasses.replace(self, groups=build_groups(groups, self.n_samples))

    # -- views ---------------------------------------------------------------------------
    def with_target_views(self, views: Sequence[TargetView]) -> "BenchmarkDataset":
        """Attach named alternative targets; each is validated like the dataset's own targets."""
        return dataclasses.replace(self, target_views=FrozenDict(build_target_views(views, self.n_samples,
                                                                                    self.target_views)))

    def with_label_hierarchy(self, label_paths: Sequence[Sequence[Any]], level_names: Sequence[str]) -> "BenchmarkDataset":
        """Attach one label path per row (top level first); each level becomes a label view."""
        levels = build_label_levels(label_paths, level_names, self.n_samples, self.target_type)
        return dataclasses.replace(self, label_levels=FrozenDict(levels))

    def target_view(self, name: str) -> "BenchmarkDataset":
        """This dataset with view ``name``'s targets as its own (and no views)."""
        return self._as_plain(self.view_targets((TARGET, name)))

    def label_view(self, level: str) -> "BenchmarkDataset":
        """This dataset with hierarchy level ``level`` as its own targets (and no views)."""
        return self._as_plain(self.view_targets((LEVEL, level)))

    def view_targets(self, view: tuple[str, str] | None) -> Targets:
        """The targets a view scores: ``None`` is the dataset's own, else ``("target"|"level", name)``."""
        if view is None:
            return self.targets
        kind, name = view
        available = self.target_views if kind == TARGET else self.label_levels
        if name not in available:
            raise InputValidationError(f"the dataset has no {kind} view {name!r}; it has {sorted(available)}")
        return available[name]

    def _as_plain(self, targets: Targets) -> "BenchmarkDataset":
        return dataclasses.replace(self, targets=targets, target_views=FrozenDict(), label_levels=FrozenDict())

    # -- facts that artifact keys hash (see vertebrae.execution.context) --------------------
    def fact(self, name: str, view: tuple[str, str] | None, extractor: Any) -> FactAnswer:
        """Context fact ``name`` for a chain scoring ``view`` with ``extractor`` (``RunContext.fact``): the targets
        depend on the view; a supervised extractor fits on the dataset's own targets whatever view is scored."""
        if name == "targets":
            return ("targets", view), functools.partial(self.targets_fingerprint, view)
        if name == "fit_targets":
            return self.fact("targets", None, extractor) if getattr(extractor, "supervised", False) else None
        return dataset_fact(self, name, ("inputs", "targets", "fit_targets", "groups"))

    def inputs_fingerprint(self) -> str:
        """Content hash of what extractors read (raw inputs, or the embedding matrix)."""
        return inputs_sha256(self.extractor_input)

    def targets_fingerprint(self, view: tuple[str, str] | None = None) -> str:
        """Content hash of the targets being scored (type, values, label catalog, names) of ``view``."""
        return targets_sha256(self.view_targets(view))

    def groups_fingerprint(self) -> str | None:
        return None if self.groups is None else content_sha256(self.groups.keys)

    @property
    def extractor_input(self) -> Any:
        """What extractors receive: raw inputs if given, else the embedding matrix."""
        return self.inputs if self.inputs is not None else self.embeddings

    def __repr__(self) -> str:
        """A few facts, never the rows (the default dataclass repr printed every embedding row)."""
        summary = self.targets.summary()
        size = {"single_label": "n_classes", "multi_label": "n_labels"}.get(self.target_type)
        targets = (f"{summary[size]} {size[2:]}" if size else f"targets {', '.join(summary['target_names'])}")
        data = self.extractor_input
        shape = getattr(data, "shape", None)
        kind = "embeddings" if self.inputs is None else "inputs"
        described = (f"{kind} {type(data).__name__}{tuple(shape)}" if shape is not None
                     else f"{kind} {type(data).__name__} of {len(data)}")
        groups = "" if self.groups is None else f", {len(self.groups.catalog)} groups"
        return (f"BenchmarkDataset(name={self.name!r}, {self.n_samples} samples, {self.target_type}: {targets}, "
                f"{described}{groups}, identity={self.identity.kind}:{self.identity.dataset_id})")

    def summary(self) -> dict[str, Any]:
        summary = {"name": self.name, "identity": self.identity.to_dict(), **self.targets.summary()}
        summary["input_kind"] = "raw_inputs" if self.inputs is not None else "embeddings"
        if self.groups is not None:
            summary["groups"] = self.groups.summary()
        if self.target_views:
            summary["target_views"] = {name: _view_summary(t) for name, t in self.target_views.items()}
        if self.label_levels:
            summary["label_levels"] = {name: _view_summary(t) for name, t in self.label_levels.items()}
        if self.structure:
            summary["structure"] = copy.deepcopy(dict(self.structure))
        return summary


def _view_summary(targets: Targets) -> dict[str, Any]:
    """A view's or hierarchy level's summary plus its label catalog (typed keys and displays), as the main
    targets keep theirs in ``metadata["label_catalog"]``."""
    summary = targets.summary()
    if not isinstance(targets, RegressionTargets):
        summary["label_catalog"] = targets.catalog.to_dict()
    return summary


def dataset_fact(dataset: Any, name: str, facts: Sequence[str]) -> FactAnswer:
    """Fact ``name`` of ``dataset`` that depends on the dataset alone: its ``<name>_fingerprint()``.  ``facts``
    are the ones the dataset holds, named when a stage declares another."""
    if name not in facts:
        raise ConfigError(f"the dataset ({type(dataset).__name__}) has no {name!r} fact for the stages that declare "
                          f"it: it holds {list(facts)}, and every chain holds extractor, output, view and name")
    return name, getattr(dataset, f"{name}_fingerprint")


def inputs_sha256(X: Any) -> str:
    """Content hash of dataset inputs: arrays by bytes, sequences item by item (never by ``repr``)."""
    if hasattr(type(X), "__vertebrae_content__"):  # lazily loaded inputs (images, audio) declare their content
        return content_sha256(X)
    return content_sha256(X if hasattr(X, "shape") and hasattr(X, "dtype") else list(X))


def targets_sha256(targets: Targets) -> str:
    if isinstance(targets, SingleLabelTargets):  # codes into the catalog say exactly which label each row has
        return content_sha256(["single_label", targets.codes, list(targets.catalog.keys)])
    if isinstance(targets, MultiLabelTargets):
        return content_sha256(["multi_label", targets.indicator, list(targets.catalog.keys)])
    return content_sha256(["regression", targets.values, list(targets.target_names)])


def _content_hash(data_sha: str, targets: Targets) -> str:
    return content_sha256([data_sha, targets_sha256(targets)])

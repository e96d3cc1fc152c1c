"""Dense segmentation: the cells of a spatial feature map as labelled embedding rows ("tokens").

A feature map ``(N, C, h, w)`` over images whose semantic masks are ``(N, H, W)``
splits each mask into an ``h x w`` grid of cells of ``(H / h) x (W / w)`` pixels (the
grid must divide the mask exactly).  **Purity rule:** a cell's dominant class is the
class covering most of its pixels, and its purity is that class's pixel fraction.  A
cell is

- dropped as ``ambiguous`` when its purity is below ``min_purity`` (default 0.75; it must
  exceed 0.5, so a kept cell's dominant class is unique),
- else dropped as ``ignore_index`` when its dominant pixels are the ignore value,
- else dropped as ``background`` when its dominant class is a background class,
- else kept: one row (the cell's ``C`` features) labelled by its dominant class, grouped
  by its source image (so group-aware diagnostics treat images as independence units).

The returned dataset is an ordinary :class:`~vertebrae.inputs.datasets.BenchmarkDataset`;
its ``structure`` records the token counts, drop reasons and spatial layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._base.config import FrozenDict
from .datasets import BenchmarkDataset
from ..errors import InputTypeError, InputValidationError
from .identity import DatasetIdentity, require_identity

REASONS = ("background", "ambiguous", "ignore_index")
DEFAULT_MIN_PURITY = 0.75


@dataclasses.dataclass(frozen=True)
class CellAssignment:
    """Which cells of a grid are kept, with their labels, provenance and drop counts."""

    labels: np.ndarray          #: dominant class of each kept cell
    provenance: np.ndarray      #: (n_kept, 3): original sample index, grid row, grid column
    kept: np.ndarray            #: (N, h, w) bool
    reasons: dict[str, int]


@dataclasses.dataclass(frozen=True)
class SegmentationDataset:
    """Images with semantic (and optional instance) masks, and what each mask class is.

    Build it with :meth:`from_arrays`; :meth:`token_dataset` materializes a feature map's cells.
    """

    images: Any
    semantic_masks: np.ndarray
    instance_masks: np.ndarray | None
    class_metadata: Mapping[int, Mapping[str, bool]]
    identity: DatasetIdentity
    #: Original sample index of each image (kept through nested subsets).
    source_indices: np.ndarray
    ignore_index: int | None = None
    name: str = ""

    @classmethod
    def from_arrays(cls, *, images: Any, semantic_masks: Any, class_metadata: Mapping[Any, Mapping[str, Any]],
                    instance_masks: Any = None, identity: DatasetIdentity | None = None,
                    ignore_index: int | None = None, name: str | None = None) -> "SegmentationDataset":
        """Validate masks against the images and ``class_metadata = {class: {"background": bool, "is_thing": bool}}``."""
        identity = require_identity(identity, where="SegmentationDataset.from_arrays")
        masks = _integer_masks(semantic_masks, "semantic_masks")
        n_images = _n_images(images)
        if n_images != masks.shape[0]:
            raise InputValidationError(f"images has {n_images} images but semantic_masks has {masks.shape[0]} masks; "
                                       "give one mask per image")
        metadata = _class_metadata(class_metadata)
        if isinstance(ignore_index, np.integer):  # a NumPy integer (np.int64(255)) is an int to the user
            ignore_index = int(ignore_index)
        if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(ignore_index, int)
                                         or ignore_index in metadata):
            raise InputValidationError(f"ignore_index must be an int that is not a class in class_metadata, got "
                                       f"{ignore_index!r}")
        known = set(metadata) | ({ignore_index} if ignore_index is not None else set())
        values = np.unique(masks)
        unknown = [int(v) for v in values if int(v) not in known]
        if unknown:
            image = int(np.argwhere(np.isin(masks, unknown))[0][0])
            raise InputValidationError(f"semantic_masks has class {unknown[0]} (first in image {image}) that "
                                       f"class_metadata lacks; it describes {sorted(metadata)}; add it (or pass "
                                       "ignore_index=...)")
        instances = None
        if instance_masks is not None:
            instances = _integer_masks(instance_masks, "instance_masks")
            if instances.shape != masks.shape:
                raise InputValidationError(f"instance_masks has shape {instances.shape} but semantic_masks has "
                                           f"{masks.shape}; give one instance id per pixel")
        return cls(images, masks, instances, FrozenDict(metadata), identity, np.arange(masks.shape[0]),
                   ignore_index, name or identity.dataset_id)

    @property
    def n_images(self) -> int:
        return int(self.semantic_masks.shape[0])

    def subset(self, indices: Sequence[int]) -> "SegmentationDataset":
        """The images at ``indices`` (positions in this dataset); original sample indices are kept."""
        rows = np.asarray(indices)
        if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or not len(rows):
            raise InputValidationError(f"subset indices must be a non-empty 1-D sequence of ints, got {indices!r}")
        bad = rows[(rows < 0) | (rows >= self.n_images)]
        if len(bad):
            raise InputValidationError(f"subset index {int(bad[0])} is out of range for {self.n_images} images")
        images = self.images[rows] if hasattr(self.images, "shape") else [self.images[int(i)] for i in rows]
        return dataclasses.replace(self, images=images, semantic_masks=self.semantic_masks[rows],
                                   instance_masks=None if self.instance_masks is None else self.instance_masks[rows],
                                   source_indices=self.source_indices[rows])

    def assign_cells(self, grid: tuple[int, int], *, min_purity: float = DEFAULT_MIN_PURITY) -> CellAssignment:
        """Apply the purity rule (module docstring) to an ``h x w`` grid of cells."""
        min_purity = _check_purity(min_purity)
        h, w = grid
        n, height, width = self.semantic_masks.shape
        if height % h or width % w:
            raise InputValidationError(f"the feature grid {h}x{w} does not divide the {height}x{width} masks; each "
                                       "cell must cover a whole number of pixels (resize the masks or the features)")
        classes = sorted(set(self.class_metadata) | ({self.ignore_index} if self.ignore_index is not None else set()))
        codes = np.searchsorted(np.array(classes), self.semantic_masks)  # every mask value is a known class
        ch, cw = height // h, width // w
        cells = codes.reshape(n, h, ch, w, cw).transpose(0, 1, 3, 2, 4).reshape(n * h * w, ch * cw)
        counts = np.zeros((n * h * w, len(classes)), dtype=np.int64)
        np.add.at(counts, (np.repeat(np.arange(n * h * w), ch * cw), cells.ravel()), 1)
        dominant = counts.argmax(1)
        purity = counts.max(1) / (ch * cw)
        dominant_class = np.array(classes)[dominant]
        ambiguous = purity < min_purity
        ignored = ~ambiguous & (dominant_class == self.ignore_index)  # never true without an ignore_index
        background = ~ambiguous & ~ignored & np.array([bool(self.class_metadata.get(int(c), {}).get("background"))
                                                       for c in dominant_class])
        kept = ~(ambiguous | ignored | background)
        image, row, col = np.unravel_index(np.flatnonzero(kept), (n, h, w))
        provenance = np.stack([self.source_indices[image], row, col], axis=1)
        reasons = {"background": int(background.sum()), "ambiguous": int(ambiguous.sum()),
                   "ignore_index": int(ignored.sum())}
        return CellAssignment(dominant_class[kept], provenance, kept.reshape(n, h, w), reasons)

    def token_rows(self, feature_map: Any, *, min_purity: float = DEFAULT_MIN_PURITY) -> np.ndarray:
        """The kept cells' feature vectors, in :meth:`token_dataset` row order (for further extractors)."""
        features = self._feature_map(feature_map)
        assignment = self.assign_cells(features.shape[2:], min_purity=min_purity)
        return features.transpose(0, 2, 3, 1)[assignment.kept]

    def token_dataset(self, feature_map: Any, *, min_purity: float = DEFAULT_MIN_PURITY,
                      name: str | None = None) -> BenchmarkDataset:
        """One row per kept cell of ``feature_map`` ``(N, C, h, w)``, labelled by its dominant class,
        grouped by its source image."""
        features = self._feature_map(feature_map)
        assignment = self.assign_cells(features.shape[2:], min_purity=min_purity)
        if not len(assignment.labels):
            raise InputValidationError(f"no cell of the {features.shape[2]}x{features.shape[3]} grid is kept "
                                       f"(dropped: {assignment.reasons}); lower min_purity or use a finer grid")
        rows = features.transpose(0, 2, 3, 1)[assignment.kept]
        dataset = BenchmarkDataset.from_embeddings(rows, assignment.labels, identity=self.identity,
                                                   groups=assignment.provenance[:, 0], name=name or self.name)
        return dataclasses.replace(dataset, structure=FrozenDict(self._structure(features.shape, assignment,
                                                                                  min_purity)))

    def _feature_map(self, feature_map: Any) -> np.ndarray:
        if hasattr(feature_map, "detach"):  # a torch tensor: never import torch for an array
            from ..extractors.torch import to_numpy

            feature_map = to_numpy(feature_map)
        features = np.asarray(feature_map)
        if features.ndim != 4 or not np.issubdtype(features.dtype, np.number):
            raise InputValidationError(f"feature_map must be a numeric (N, C, H, W) array, got shape {features.shape} "
                                       f"and dtype {features.dtype}")
        if features.shape[0] != self.n_images:
            raise InputValidationError(f"feature_map has {features.shape[0]} images but the dataset has "
                                       f"{self.n_images}; compute it on dataset.images")
        if np.issubdtype(features.dtype, np.floating) and not np.isfinite(features).all():
            image = int(np.argwhere(~np.isfinite(features))[0][0])
            raise InputValidationError(f"feature_map has NaN or infinite values (first in image {image})")
        return features

    def _structure(self, shape: tuple[int, ...], assignment: CellAssignment, min_purity: float) -> dict[str, Any]:
        n, _, h, w = shape
        height, width = self.semantic_masks.shape[1:]
        classes, counts = np.unique(assignment.labels, return_counts=True)
        structure: dict[str, Any] = {
            "family": "segmentation", "n_source_images": n, "source_indices": self.source_indices.tolist(),
            "candidate_tokens": n * h * w, "retained_tokens": int(assignment.kept.sum()),
            "ignored_token_reasons": dict(assignment.reasons), "background_tokens": assignment.reasons["background"],
            "background_pixels": int(np.isin(self.semantic_masks, [c for c, m in self.class_metadata.items()
                                                                   if m["background"]]).sum()),
            "tokens_per_class": {str(int(c)): int(k) for c, k in zip(classes, counts)},
            "spatial_layout": {"feature_layout": "NCHW", "feature_grid": [h, w], "mask_shape": [height, width],
                               "cell_pixels": [height // h, width // w]},
            "purity_rule": {"min_purity": min_purity, "ignore_index": self.ignore_index,
                            "rule": "dominant class by pixel count; purity below min_purity: ambiguous; "
                                    "ignore_index or background dominant: dropped"},
            "class_metadata": {str(c): dict(m) for c, m in sorted(self.class_metadata.items())},
        }
        if self.instance_masks is not None:
            structure["instances_per_class"] = {
                str(c): int(sum(len(np.unique(self.instance_masks[i][(self.semantic_masks[i] == c)
                                                                      & (self.instance_masks[i] > 0)]))
                                for i in range(n)))
                for c, m in sorted(self.class_metadata.items()) if m["is_thing"]}
        return structure


def spatial_feature_map(model: Any, images: Any, *, batch_size: int = 32, device: str = "cpu") -> np.ndarray:
    """A frozen torch model's ``(N, C, H, W)`` output on ``images``, batch by batch, as a NumPy array."""
    from ..extractors.torch import check_device, default_collate, frozen, resolve_device, to_numpy

    where = "spatial_feature_map"
    resolved = resolve_device(check_device(device, where=where), where=where)
    parts = []
    with frozen(model, resolved):
        for start in range(0, len(images), batch_size):
            parts.append(to_numpy(model(default_collate(images[start:start + batch_size]).to(resolved))))
    return np.concatenate(parts)


def _n_images(images: Any) -> int:
    try:
        return int(images.shape[0]) if hasattr(images, "shape") else len(images)
    except TypeError:
        raise InputTypeError(f"images must be an array or sequence of images, got {type(images).__name__}") from None


def _integer_masks(masks: Any, argument: str) -> np.ndarray:
    array = np.asarray(masks)
    if array.ndim != 3 or not np.issubdtype(array.dtype, np.integer):
        raise InputValidationError(f"{argument} must be an integer (N, H, W) array (one class id per pixel), got "
                                   f"shape {array.shape} and dtype {array.dtype}")
    return array


def _class_metadata(metadata: Any) -> dict[int, dict[str, bool]]:
    if not isinstance(metadata, Mapping) or not metadata:
        raise InputTypeError("class_metadata must be a non-empty mapping {class id: {'background': bool, "
                             "'is_thing': bool}}")
    checked: dict[int, dict[str, bool]] = {}
    for key, value in metadata.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise InputTypeError(f"class_metadata key {key!r} must be an int mask class id")
        if not isinstance(value, Mapping) or set(value) - {"background", "is_thing"} or \
                any(not isinstance(value.get(flag, False), bool) for flag in ("background", "is_thing")):
            raise InputValidationError(f"class_metadata[{key!r}] must be {{'background': bool, 'is_thing': bool}}, "
                                       f"got {value!r}")
        checked[int(key)] = {"background": value.get("background", False), "is_thing": value.get("is_thing", False)}
    if all(v["background"] for v in checked.values()):
        raise InputValidationError("class_metadata marks every class as background; no cell could be kept")
    return checked


def _check_purity(min_purity: Any) -> float:
    if isinstance(min_purity, bool) or not isinstance(min_purity, (int, float)) or not 0.5 < min_purity <= 1.0:
        raise InputValidationError(f"min_purity must be a number in (0.5, 1], got {min_purity!r}; above one half, "
                                   "a kept cell's dominant class is unique")
    return float(min_purity)

"""Structured unit outputs: per-parent units (token spans, frames, regions, keypoints, depth bins,
latent slots) aligned to an extractor's structured output, then scored as ordinary rows.

A parent is one input (a sentence, a clip, an image); its structured output is
positions-first ``(n_positions, D)`` for sequences and slots (tokens, frames, latent
slots) or channels-first ``(D, H, W)`` for spatial maps.  Each unit names its location
by one key, which fixes the ``alignment_mode``:

- ``span=(start, end)``: positions ``start..end-1`` (``token``, ``frame``),
- ``chars=(start, end)``: the tokens whose character offsets overlap the range
  (``token``; needs the tokenizer ``offsets`` of each parent; special tokens never count),
- ``slot=i``: one position (``latent``),
- ``box=(row0, col0, row1, col1)``: grid cells ``row0..row1-1 x col0..col1-1`` (``region``),
- ``point=(row, col)``: one grid cell (``keypoint``),
- ``mask=(H, W) bool``: the marked grid cells (``depth`` bins, any cell set).

The ``alignment_recipe`` pools the selected vectors (``mean``, ``max``, ``first``,
``last``; one-position modes take that position).  Units of one parent are grouped
by it, and each unit's global id is ``"<parent index>:<unit id>"`` (unit ids may repeat
across parents, never within one).  The summary's ``structure`` records
``task_family``, ``alignment_mode`` and ``alignment_recipe``; :func:`save_unit_artifact`
writes them with the rows into an artifact manifest.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._base.config import FrozenDict
from .datasets import BenchmarkDataset
from ..errors import InputTypeError, InputValidationError
from .identity import DatasetIdentity

TASK_FAMILIES = ("token", "frame", "region", "keypoint", "depth", "latent")
#: Location key -> alignment mode; the spatial ones index ``(D, H, W)`` outputs.
LOCATION_KEYS = ("span", "chars", "slot", "box", "point", "mask")
SPATIAL = ("box", "point", "mask")
POOLINGS = ("mean", "max", "first", "last")


@dataclasses.dataclass(frozen=True)
class UnitAnnotations:
    """Validated units: parent, local id, location (one key of :data:`LOCATION_KEYS`) and label of each."""

    task_family: str
    mode: str
    parents: np.ndarray
    unit_ids: tuple[Any, ...]
    locations: tuple[Any, ...]
    labels: tuple[Any, ...]
    target_type: str | None = None

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], *, task_family: str,
                     target_type: str | None = None) -> "UnitAnnotations":
        """``records = [{"parent": 0, "unit_id": "w1", "span": (1, 3), "label": "CITY"}, ...]``."""
        if task_family not in TASK_FAMILIES:
            raise InputValidationError(f"task_family must be one of {list(TASK_FAMILIES)}, got {task_family!r}")
        if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Sequence) or not records:
            raise InputTypeError("records must be a non-empty list of unit dicts with parent, unit_id, a location "
                                 f"({', '.join(LOCATION_KEYS)}) and label")
        mode, parents, ids, locations, labels = None, [], [], [], []
        seen: dict[tuple[int, Any], int] = {}
        for i, record in enumerate(records):
            if not isinstance(record, Mapping):
                raise InputTypeError(f"records[{i}] must be a dict, got {type(record).__name__}")
            missing = [key for key in ("parent", "unit_id", "label") if key not in record]
            keys = [key for key in LOCATION_KEYS if key in record]
            if missing or len(keys) != 1:
                raise InputValidationError(f"records[{i}] needs parent, unit_id, label and exactly one location key "
                                           f"of {list(LOCATION_KEYS)}; it has {sorted(record)}")
            if mode is None:
                mode = keys[0]
            elif keys[0] != mode:
                raise InputValidationError(f"records[{i}] locates its unit by {keys[0]!r} but earlier units use "
                                           f"{mode!r}; one dataset has one alignment mode")
            parent = record["parent"]
            if isinstance(parent, bool) or not isinstance(parent, (int, np.integer)) or parent < 0:
                raise InputValidationError(f"records[{i}] parent must be a non-negative int index, got {parent!r}")
            key = (int(parent), record["unit_id"])
            if key in seen:
                raise InputValidationError(f"records[{i}] repeats unit_id {record['unit_id']!r} of parent {parent} "
                                           f"(first at records[{seen[key]}]); unit ids are unique within a parent")
            seen[key] = i
            parents.append(int(parent))
            ids.append(record["unit_id"])
            locations.append(record[mode])
            labels.append(record["label"])
        return cls(task_family, mode, np.array(parents), tuple(ids), tuple(locations), tuple(labels), target_type)

    @property
    def global_ids(self) -> list[str]:
        """``"<parent>:<unit id>"`` per unit: deterministic, unique even when unit ids repeat across parents."""
        return [f"{p}:{u}" for p, u in zip(self.parents.tolist(), self.unit_ids)]

    def materialize(self, outputs: Sequence[Any], *, recipe: str = "mean", offsets: Sequence[Any] | None = None,
                    identity: DatasetIdentity | None = None, name: str | None = None) -> BenchmarkDataset:
        """One row per unit: its location's vectors in its parent's output, pooled by ``recipe``."""
        if recipe not in POOLINGS:
            raise InputValidationError(f"recipe must be one of {list(POOLINGS)}, got {recipe!r}")
        arrays = _outputs(outputs, spatial=self.mode in SPATIAL)
        if self.parents.max() >= len(arrays):
            unit = int(np.argmax(self.parents >= len(arrays)))
            raise InputValidationError(f"unit {self.global_ids[unit]!r} names parent {self.parents[unit]} but there "
                                       f"are {len(arrays)} parent outputs")
        if self.mode == "chars" and (offsets is None or len(offsets) != len(arrays)):
            raise InputValidationError("units located by chars=(start, end) need offsets=... (the tokenizer's "
                                       "character offsets of every parent, e.g. from HFTextExtractor.token_states)")
        rows = np.stack([self._pool(arrays[p], None if offsets is None else np.asarray(offsets[p]), location,
                                    recipe, u) for u, (p, location) in enumerate(zip(self.parents, self.locations))])
        dataset = BenchmarkDataset.from_embeddings(rows, list(self.labels), identity=identity,
                                                   target_type=self.target_type, groups=self.parents, name=name)
        return dataclasses.replace(dataset, structure=FrozenDict(self.structure(recipe, len(arrays))))

    def structure(self, recipe: str, n_parents: int) -> dict[str, Any]:
        per_parent = np.bincount(self.parents, minlength=n_parents)
        single = self.mode in ("slot", "point")
        return {"family": "structured_units", "task_family": self.task_family, "alignment_mode": self.mode,
                "alignment_recipe": "select" if single else recipe, "n_parents": n_parents,
                "n_units": len(self.parents), "units_per_parent": {"min": int(per_parent.min()),
                                                                  "max": int(per_parent.max())},
                "global_id_rule": "<parent index>:<unit id>"}

    def _pool(self, output: np.ndarray, offsets: np.ndarray | None, location: Any, recipe: str, unit: int) -> np.ndarray:
        where = f"unit {self.global_ids[unit]!r}"
        vectors = _select(output, offsets, self.mode, location, where)
        if recipe == "mean":
            return vectors.mean(axis=0)
        if recipe == "max":
            return vectors.max(axis=0)
        return vectors[0] if recipe == "first" else vectors[-1]


def _select(output: np.ndarray, offsets: np.ndarray | None, mode: str, location: Any, where: str) -> np.ndarray:
    """The ``(k, D)`` vectors a location selects, bounds-checked."""
    if mode in SPATIAL:
        _, height, width = output.shape
        cells = output.transpose(1, 2, 0)
        if mode == "mask":
            mask = np.asarray(location, dtype=bool)
            if mask.shape != (height, width) or not mask.any():
                raise InputValidationError(f"{where}: mask must be a non-empty ({height}, {width}) boolean grid, got "
                                           f"shape {mask.shape}")
            return cells[mask]
        if mode == "point":
            row, col = _ints(location, 2, where, "point")
            if not (0 <= row < height and 0 <= col < width):
                raise InputValidationError(f"{where}: point {(row, col)} is outside the {height}x{width} grid")
            return cells[row, col][None]
        r0, c0, r1, c1 = _ints(location, 4, where, "box")
        if not (0 <= r0 < r1 <= height and 0 <= c0 < c1 <= width):
            raise InputValidationError(f"{where}: box {(r0, c0, r1, c1)} is empty or outside the {height}x{width} "
                                       "grid (row0, col0, row1, col1 are half-open)")
        return cells[r0:r1, c0:c1].reshape(-1, output.shape[0])
    n_positions = output.shape[0]
    if mode == "slot":
        (slot,) = _ints([location], 1, where, "slot")
        if not 0 <= slot < n_positions:
            raise InputValidationError(f"{where}: slot {slot} is outside the {n_positions} slots")
        return output[slot][None]
    start, end = _ints(location, 2, where, mode)
    if mode == "chars":
        real = offsets[:, 1] > offsets[:, 0]  # special and padding tokens have empty offsets
        chosen = np.flatnonzero(real & (offsets[:, 0] < end) & (offsets[:, 1] > start))
        if not len(chosen):
            raise InputValidationError(f"{where}: characters {start}..{end} cover no token")
        return output[chosen]
    if not 0 <= start < end <= n_positions:
        raise InputValidationError(f"{where}: span {(start, end)} is empty or outside the {n_positions} positions "
                                   "(start, end are half-open)")
    return output[start:end]


def _ints(location: Any, n: int, where: str, key: str) -> list[int]:
    values = list(location) if isinstance(location, (list, tuple, np.ndarray)) else None
    if values is None or len(values) != n or any(isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                                 for v in values):
        raise InputValidationError(f"{where}: {key} must be {n} int(s), got {location!r}")
    return [int(v) for v in values]


def _outputs(outputs: Any, *, spatial: bool) -> list[np.ndarray]:
    if isinstance(outputs, (str, bytes)) or not isinstance(outputs, (Sequence, np.ndarray)):
        raise InputTypeError(f"outputs must be one structured output per parent, got {type(outputs).__name__}")
    arrays = []
    for i, output in enumerate(outputs):
        array = np.asarray(output, dtype=np.float64)
        if array.ndim != (3 if spatial else 2) or not np.isfinite(array).all():
            raise InputValidationError(f"outputs[{i}] must be a finite {'(D, H, W)' if spatial else '(n_positions, D)'}"
                                       f" array for these units, got shape {array.shape}")
        arrays.append(array)
    return arrays


def save_unit_artifact(dataset: BenchmarkDataset, directory: str | os.PathLike[str]) -> Path:
    """Write the materialized unit rows (``rows.npy``) and ``manifest.json`` (structure, identity, targets)."""
    if not dataset.structure or dataset.structure.get("family") != "structured_units":
        raise InputValidationError("save_unit_artifact needs a dataset from UnitAnnotations.materialize")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "rows.npy", np.asarray(dataset.embeddings))
    summary = dataset.summary()
    manifest = {"rows": "rows.npy", "n_rows": dataset.n_samples, "identity": summary["identity"],
                "target_type": summary["target_type"], **{k: summary["structure"][k] for k in
                                                          ("task_family", "alignment_mode", "alignment_recipe")},
                "structure": summary["structure"]}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    return folder / "manifest.json"

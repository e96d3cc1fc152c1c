"""BenchmarkDataset: validated targets, optional embeddings or raw inputs, identity, groups.

Everything is validated when the dataset is built, so a bad row is reported before
any extractor runs.  Datasets are immutable; ``with_groups`` returns a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .embeddings import validate_embeddings
from .errors import InputValidationError
from .fingerprint import content_sha256
from .identity import DatasetIdentity, require_identity
from .labels import LabelCatalog, semantic_key
from .targets import MultiLabelTargets, SingleLabelTargets, Targets, build_targets


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


def build_groups(groups: Any, n_samples: int) -> Groups:
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
            raise InputValidationError(f"groups[{i}]: {exc}") from None
    first = dict(zip(keys.tolist(), values))
    return Groups(keys, LabelCatalog(first.values()))


@dataclasses.dataclass(frozen=True)
class BenchmarkDataset:
    """A labeled dataset to benchmark extractors on.

    Build it with :meth:`from_embeddings` (precomputed embedding matrix) or
    :meth:`from_arrays` (raw inputs that extractors embed).
    """

    identity: DatasetIdentity
    targets: Targets
    embeddings: Any = None
    inputs: Any = None
    groups: Groups | None = None
    name: str = ""

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
        matrix = validate_embeddings(embeddings)
        targets = build_targets(y, target_type=target_type, label_names=label_names, target_names=target_names,
                                n_samples=matrix.shape[0])
        if identity.kind == "content":
            identity = identity.with_content(_content_hash(content_sha256(matrix), targets))
        dataset = cls(identity, targets, embeddings=matrix, name=name or identity.dataset_id)
        return dataset.with_groups(groups) if groups is not None else dataset

    @classmethod
    def from_arrays(cls, X: Any, y: Any, *, identity: DatasetIdentity | None = None,
                    target_type: str | None = None, label_names: Sequence[Any] | None = None,
                    target_names: Sequence[str] | None = None, groups: Any = None,
                    name: str | None = None) -> "BenchmarkDataset":
        """Dataset over raw inputs (arrays, texts, images...) that each extractor embeds."""
        identity = require_identity(identity, where="BenchmarkDataset.from_arrays")
        try:
            n = len(X) if not hasattr(X, "shape") else X.shape[0]
        except TypeError:
            raise InputValidationError("X must be a sized collection of inputs (array, list of texts, ...)") from None
        if n == 0:
            raise InputValidationError("X is empty; a benchmark needs at least two classes with two rows each")
        targets = build_targets(y, target_type=target_type, label_names=label_names, target_names=target_names,
                                n_samples=n)
        if identity.kind == "content":
            identity = identity.with_content(_content_hash(inputs_sha256(X), targets))
        dataset = cls(identity, targets, inputs=X, name=name or identity.dataset_id)
        return dataset.with_groups(groups) if groups is not None else dataset

    def with_groups(self, groups: Any) -> "BenchmarkDataset":
        """Attach independence groups (forwarded to group-aware diagnostics and metrics)."""
        return dataclasses.replace(self, groups=build_groups(groups, self.n_samples))

    @property
    def fingerprint(self) -> str:
        """Identity plus groups: group-aware stages must not reuse artifacts across groupings."""
        if self.groups is None:
            return self.identity.fingerprint
        digest = hashlib.sha256(self.identity.fingerprint.encode())
        digest.update("\x00".join(self.groups.keys.tolist()).encode())
        return digest.hexdigest()[:16]

    # -- facts that artifact keys hash (see vertebrae.execution.context) --------------------
    def inputs_fingerprint(self) -> str:
        """Content hash of what extractors read (raw inputs, or the embedding matrix)."""
        return inputs_sha256(self.extractor_input)

    def targets_fingerprint(self) -> str:
        """Content hash of the targets being scored (type, values, label catalog, names)."""
        return targets_sha256(self.targets)

    def groups_fingerprint(self) -> str | None:
        return None if self.groups is None else content_sha256(self.groups.keys)

    @property
    def extractor_input(self) -> Any:
        """What extractors receive: raw inputs if given, else the embedding matrix."""
        return self.inputs if self.inputs is not None else self.embeddings

    def summary(self) -> dict[str, Any]:
        summary = {"name": self.name, "identity": self.identity.to_dict(), **self.targets.summary()}
        summary["input_kind"] = "raw_inputs" if self.inputs is not None else "embeddings"
        if self.groups is not None:
            summary["groups"] = self.groups.summary()
        return summary


def inputs_sha256(X: Any) -> str:
    """Content hash of dataset inputs: arrays by bytes, sequences item by item (never by ``repr``)."""
    return content_sha256(X if hasattr(X, "shape") and hasattr(X, "dtype") else list(X))


def targets_sha256(targets: Targets) -> str:
    if isinstance(targets, SingleLabelTargets):
        return content_sha256(["single_label", targets.keys])
    if isinstance(targets, MultiLabelTargets):
        return content_sha256(["multi_label", targets.indicator, list(targets.catalog.keys)])
    return content_sha256(["regression", targets.values, list(targets.target_names)])


def _content_hash(data_sha: str, targets: Targets) -> str:
    return content_sha256([data_sha, targets_sha256(targets)])

"""Dataset identity: what makes two runs comparable and artifacts reusable.

Three forms: *declared* (the user names the dataset and a revision — cheapest and
the recommended form), *content* (a SHA-256 over the data, computed when the
dataset is built), and *ephemeral* (a one-off run; never eligible for cache reuse).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InputTypeError, InputValidationError

IdentityKind = Literal["declared", "content", "ephemeral"]


@dataclass(frozen=True)
class DatasetIdentity:
    kind: IdentityKind
    dataset_id: str
    revision: str | None = None
    content_sha256: str | None = None

    @classmethod
    def declared(cls, dataset_id: str, revision: str) -> "DatasetIdentity":
        """The user vouches that (dataset_id, revision) names exactly this data."""
        for name, value in (("dataset_id", dataset_id), ("revision", revision)):
            if not isinstance(value, str):
                raise InputTypeError(f"DatasetIdentity.declared: {name} must be a non-empty string, got {value!r}")
            if not value.strip():
                raise InputValidationError(f"DatasetIdentity.declared: {name} must be a non-empty string, got {value!r}")
        return cls("declared", dataset_id, revision)

    @classmethod
    def content_hash(cls, dataset_id: str = "dataset") -> "DatasetIdentity":
        """Identity derived from the data itself; the hash is filled in by the dataset constructor."""
        if not isinstance(dataset_id, str):
            raise InputTypeError(f"DatasetIdentity.content_hash: dataset_id must be a non-empty string, got {dataset_id!r}")
        if not dataset_id.strip():
            raise InputValidationError(f"DatasetIdentity.content_hash: dataset_id must be a non-empty string, got {dataset_id!r}")
        return cls("content", dataset_id)

    @classmethod
    def ephemeral(cls, dataset_id: str = "ephemeral") -> "DatasetIdentity":
        """A one-off identity: results are still reproducible, but nothing is reused across runs."""
        return cls("ephemeral", dataset_id, revision=uuid.uuid4().hex)

    @property
    def cache_eligible(self) -> bool:
        return self.kind != "ephemeral"

    @property
    def fingerprint(self) -> str:
        """Stable short hash used in artifact keys."""
        if self.kind == "content" and self.content_sha256 is None:
            raise InputValidationError("content identity has no hash yet; build the dataset with it first")
        text = f"{self.kind}|{self.dataset_id}|{self.revision}|{self.content_sha256}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def with_content(self, sha256: str) -> "DatasetIdentity":
        return DatasetIdentity(self.kind, self.dataset_id, self.revision, sha256)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dataset_id": self.dataset_id, "revision": self.revision,
                "content_sha256": self.content_sha256}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DatasetIdentity":
        return cls(data["kind"], data["dataset_id"], data.get("revision"), data.get("content_sha256"))


def require_identity(identity: Any, *, where: str) -> DatasetIdentity:
    if identity is None:
        raise InputValidationError(
            f"{where}: identity is required so results stay comparable and caches safe; pass "
            "identity=DatasetIdentity.declared('my-dataset', 'v1'), DatasetIdentity.content_hash('my-dataset') "
            "or DatasetIdentity.ephemeral()"
        )
    if not isinstance(identity, DatasetIdentity):
        raise InputTypeError(f"{where}: identity must be a DatasetIdentity, got {type(identity).__name__}")
    return identity

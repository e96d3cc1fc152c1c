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
KINDS: tuple[str, ...] = ("declared", "content", "ephemeral")
#: The factory that builds each kind, named in error messages.
_FACTORY = {"declared": "declared", "content": "content_hash", "ephemeral": "ephemeral"}


def _check_text(where: str, name: str, value: Any) -> None:
    """Identity fields are non-empty strings: they are hashed into cache keys and written to reports as text."""
    if not isinstance(value, str):
        raise InputTypeError(f"{where}: {name} must be a non-empty string, got {value!r}")
    if not value.strip():
        raise InputValidationError(f"{where}: {name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True)
class DatasetIdentity:
    kind: IdentityKind
    dataset_id: str
    revision: str | None = None
    content_sha256: str | None = None

    def __post_init__(self) -> None:
        """Validate every construction, not only the factories': the identity keys caches and is written to reports."""
        if self.kind not in KINDS:
            raise InputValidationError(f"DatasetIdentity: kind must be one of {list(KINDS)}, got {self.kind!r}; "
                                       "build it with DatasetIdentity.declared, .content_hash or .ephemeral")
        where = f"DatasetIdentity.{_FACTORY[self.kind]}"
        _check_text(where, "dataset_id", self.dataset_id)
        if self.kind != "content" or self.revision is not None:
            _check_text(where, "revision", self.revision)
        if self.content_sha256 is not None:
            _check_text(where, "content_sha256", self.content_sha256)

    @classmethod
    def declared(cls, dataset_id: str, revision: str) -> "DatasetIdentity":
        """The user vouches that (dataset_id, revision) names exactly this data."""
        return cls("declared", dataset_id, revision)

    @classmethod
    def content_hash(cls, dataset_id: str = "dataset") -> "DatasetIdentity":
        """Identity derived from the data itself; the hash is filled in by the dataset constructor."""
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

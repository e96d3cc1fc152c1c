"""One manifest per artifact: what it is, which files hold it, and how to check them.

A reader trusts an artifact only through its manifest (written last, after every data file), so the
manifest is validated as strictly as the data: a key that could escape the store root, a file name
with a path in it, or a malformed checksum makes it unusable.  Runtimes are never recorded here.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import ArtifactError, ArtifactIntegrityError
from .._base import json_codec
from .codecs import ARRAY_NAME, DOCUMENT_FILE, check_kind, check_no_runtimes, strict_loads
from .signing import SIGNATURE, check_signature, sign

SCHEMA_VERSION = 1
MANIFEST_FILE = "manifest.json"
KEY = re.compile(r"(?P<stage>[a-z_]+)/(?P<digest>[0-9a-f]{16,64})")
#: A stored data file: ``<name>.<first 16 hex digits of its sha256>.<npy|npz|json>`` (content-addressed,
#: so two writers racing on one key never mix their files; see ``store.py``).
STORED_FILE = re.compile(r"(?P<name>[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})\.(?P<digest>[0-9a-f]{16})\.(?P<ext>npy|npz|json)")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_key(key: Any) -> str:
    """Keys are ``<stage>/<hex>``; anything else could name a path outside the store, so it is refused."""
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise ArtifactError(f"artifact key {key!r} is invalid: expected '<stage>/<hex>' with a stage of lowercase "
                            "letters and '_' and 16-64 lowercase hex digits (e.g. 'extract/0123456789abcdef'); "
                            "'..', absolute paths and extra slashes are rejected")
    return key


def stored_name(filename: str, sha256: str) -> str:
    """``embedding.npy`` with digest ``ab12…`` -> ``embedding.ab12….npy``."""
    stem, _, extension = filename.rpartition(".")
    return f"{stem}.{sha256[:16]}.{extension}"


def logical_name(stored: str) -> str:
    """Inverse of :func:`stored_name` (the name the codec decodes)."""
    match = STORED_FILE.fullmatch(stored)
    return f"{match['name']}.{match['ext']}"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The published description of one artifact (see the module docstring)."""

    key: str
    kind: str
    created_at: str
    #: stored file name -> {"bytes": int, "sha256": hex}
    files: Mapping[str, Mapping[str, Any]]
    #: array name -> {"shape", "dtype", "sparse", "nnz", "nbytes", "file"}
    arrays: Mapping[str, Mapping[str, Any]]
    versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    #: ``hmac-sha256:<hex>`` over everything else (see ``signing.py``); None when written without a secret.
    signature: str | None = None

    def __post_init__(self) -> None:
        try:
            self._validate()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ArtifactError(f"manifest for {self.key!r} is malformed: {type(exc).__name__}: {exc}") from None

    def _validate(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise ArtifactError(f"manifest for {self.key!r} has schema_version {self.schema_version!r}; this "
                                f"vertebrae reads version {SCHEMA_VERSION}")
        check_key(self.key)
        check_kind(self.kind)
        parse_time(self.created_at)
        for package, version in self.versions.items():
            if not isinstance(package, str) or not isinstance(version, str):
                raise ArtifactError(f"manifest versions must map package names to version strings, "
                                    f"got {package!r}: {version!r}")
        if self.signature is not None and (not isinstance(self.signature, str)
                                           or not SIGNATURE.fullmatch(self.signature)):
            raise ArtifactError(f"manifest for {self.key!r} has a malformed signature; expected 'hmac-sha256:' "
                                "and 64 lowercase hex digits")
        check_no_runtimes("manifest metadata", self.metadata)
        json_codec.encode(dict(self.metadata), "$.metadata")  # SerializationError (a ValueError) if not JSON-safe
        self._validate_files()

    def _validate_files(self) -> None:
        for name, entry in self.files.items():
            match = STORED_FILE.fullmatch(name) if isinstance(name, str) else None
            if match is None:
                raise ArtifactError(f"manifest for {self.key!r} lists file {name!r}: only '<name>.<16 hex>.npy|npz|"
                                    "json' inside the artifact's folder are allowed (no paths)")
            size, sha = entry["bytes"], entry["sha256"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ArtifactError(f"manifest for {self.key!r}: file {name!r} has invalid byte size {size!r}")
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha) or sha[:16] != match["digest"]:
                raise ArtifactError(f"manifest for {self.key!r}: file {name!r} has an invalid sha256 {sha!r}")
        for name, entry in self.arrays.items():
            _check_array_entry(self.key, name, entry)
        if not self.files:  # an in-memory artifact: described, not persisted
            if any(entry["file"] is not None for entry in self.arrays.values()):
                raise ArtifactError(f"manifest for {self.key!r} lists no files but its arrays point to files")
            return
        logical = [logical_name(name) for name in self.files]
        if len(set(logical)) != len(logical) or logical.count(DOCUMENT_FILE) != 1:
            raise ArtifactError(f"manifest for {self.key!r} must list one {DOCUMENT_FILE} and one file per array, "
                                f"got {sorted(self.files)}")
        for name, entry in self.arrays.items():
            if not ARRAY_NAME.fullmatch(name):
                raise ArtifactError(f"manifest for {self.key!r} has invalid array name {name!r}")
            extension = "npz" if entry["sparse"] else "npy"
            file = entry["file"]
            if file not in self.files or logical_name(file) != f"{name}.{extension}":
                raise ArtifactError(f"manifest for {self.key!r}: array {name!r} points to {file!r}, which is not "
                                    f"its listed {name}.{extension} file")
        if len(self.arrays) + 1 != len(self.files):
            raise ArtifactError(f"manifest for {self.key!r} lists files that belong to no array: {sorted(self.files)}")

    @property
    def stage(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def document_file(self) -> str:
        return next(name for name in self.files if logical_name(name) == DOCUMENT_FILE)

    @property
    def persisted_bytes(self) -> int:
        """Bytes of the data files as written (manifest excluded)."""
        return sum(int(entry["bytes"]) for entry in self.files.values())

    def to_dict(self) -> dict[str, Any]:
        """The stored form; ``signature`` only when signed, so unsigned manifests read as before."""
        signature = {} if self.signature is None else {"signature": self.signature}
        return {**self._content(), **signature}

    def _content(self) -> dict[str, Any]:
        """Everything but the signature: what the signature covers."""
        return {"schema_version": self.schema_version, "key": self.key, "kind": self.kind,
                "created_at": self.created_at, "files": _plain(self.files), "arrays": _plain(self.arrays),
                "versions": dict(self.versions), "metadata": json_codec.encode(dict(self.metadata), "$.metadata")}

    def signed(self, secret: str) -> "Manifest":
        """This manifest with its HMAC under ``secret``."""
        return dataclasses.replace(self, signature=sign(self._content(), secret))

    def check_signature(self, secret: str, where: str) -> None:
        """:class:`~vertebrae.errors.ArtifactSignatureError` unless signed with ``secret`` over this very content."""
        check_signature(self._content(), self.signature, secret, where)

    @classmethod
    def from_dict(cls, data: Any) -> "Manifest":
        if not isinstance(data, Mapping):
            raise ArtifactError(f"a manifest must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(names - set(data) - {"signature"})
        if unknown or missing:
            raise ArtifactError(f"manifest fields do not match schema {SCHEMA_VERSION}: unknown {unknown}, "
                                f"missing {missing}")
        fields = dict(data)
        fields["metadata"] = json_codec.decode(fields["metadata"])
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        """Parse manifest text; anything malformed raises :class:`ArtifactIntegrityError`."""
        try:
            return cls.from_dict(strict_loads(text))
        except (ValueError, ArtifactError) as exc:  # json errors are ValueError; ArtifactError from validation
            raise ArtifactIntegrityError(f"unreadable manifest: {exc}") from None


def _check_array_entry(key: str, name: str, entry: Mapping[str, Any]) -> None:
    """Every number a reader compares against (shape, nnz, nbytes) is a non-negative int, so a hostile
    manifest fails here with a named error rather than deep inside a read."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    shape, nnz = entry["shape"], entry["nnz"]
    if (not isinstance(shape, (list, tuple)) or not all(count(n) for n in shape) or not isinstance(entry["dtype"], str)
            or not isinstance(entry["sparse"], bool) or not count(entry["nbytes"])
            or not (count(nnz) if entry["sparse"] else nnz is None)):
        raise ArtifactError(f"manifest for {key!r}: array {name!r} has a malformed description {dict(entry)!r}; "
                            "expected shape (non-negative integers), dtype (string), sparse (bool), nnz (integer "
                            "for sparse, null for dense) and nbytes (non-negative integer)")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value

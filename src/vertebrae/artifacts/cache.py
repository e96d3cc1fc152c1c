"""The embedding cache: where reusable artifacts live across runs, and how to inspect and trim them.

A benchmark uses no cache unless it is given a :class:`CacheConfig` (``Benchmark(...,
cache_config=...)``, a ``[cache]`` config section or ``--cache URL``): nothing is written anywhere by
default, and never into the current directory unless that is the store asked for.  ``CacheConfig()``
itself means "cache in the user cache folder" (``$VERTEBRAE_CACHE_DIR``, else
``$XDG_CACHE_HOME/vertebrae``, else ``~/.cache/vertebrae``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from .._base.config import Config, FrozenDict, check_bool, check_choice, check_str_mapping
from .manifest import parse_time
from .signing import SECRET_ENV, check_secret, secret_from_env
from .store import (DEFAULT_MAX_ARTIFACT_BYTES, SECRET_OPTION, Store, check_max_artifact_bytes,
                    check_store_location, open_store, redact_url)
from ..errors import ArtifactError, ArtifactIntegrityError, ArtifactRaceError, ConfigError
from .._base.extras import install_hint

CACHE_MODES = ("read_write", "read_only", "refresh")


#: The environment variable naming the user cache folder.
CACHE_DIR_ENV = "VERTEBRAE_CACHE_DIR"


def default_cache_dir() -> str:
    """The folder ``CacheConfig()`` uses when no store is named.  ``$VERTEBRAE_CACHE_DIR`` set but empty (a script's
    unset variable) or a URL is refused (``ConfigError``): it was taken as another folder, or under the current one."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit is not None:
        fix = "set it to a folder path or unset it (an s3:// or gs:// cache is --cache URL or CacheConfig(store=URL))"
        check_store_location(explicit, f"${CACHE_DIR_ENV}", ConfigError, fix)
        if "://" in explicit:
            raise ConfigError(f"${CACHE_DIR_ENV} {redact_url(explicit)!r} is a URL, but it names a folder: {fix}")
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "vertebrae")


@dataclasses.dataclass(frozen=True)
class CacheConfig(Config):
    """Where and how embeddings are reused across runs.

    ``mode``: ``read_write`` reuses valid entries and stores new ones (a corrupt entry is recomputed
    with a warning); ``read_only`` reuses but never writes (a corrupt entry is an error); ``refresh``
    never reuses and overwrites.  ``storage_options`` go to fsspec unchanged (endpoints, credentials;
    they are never shown: reprs and ``to_dict`` replace secret values with ``***``).

    ``secret`` (else ``$VERTEBRAE_CACHE_SECRET``, read when the config is made): sign every manifest
    written and never read an entry whose signature is missing or wrong (see docs/cache.md); shown as
    ``***``, never stored, never part of a key.  ``max_artifact_bytes``: the most bytes one artifact's
    data files may take; a larger (or larger-claiming) entry is never read.
    """

    enabled: bool = True
    store: str | None = None
    storage_options: Mapping[str, Any] = dataclasses.field(default_factory=FrozenDict)
    mode: str = "read_write"
    secret: str | None = dataclasses.field(default=None, repr=False)
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES

    def _validate(self) -> None:
        owner = "CacheConfig"
        check_bool(owner, "enabled", self.enabled)
        check_choice(owner, "mode", self.mode, CACHE_MODES)
        if self.secret is None and os.environ.get(SECRET_ENV):
            self._set("secret", secret_from_env())
        check_secret(f"{owner}.secret", self.secret)
        try:
            check_max_artifact_bytes(f"{owner}.max_artifact_bytes", self.max_artifact_bytes)
        except ArtifactError as exc:
            raise ConfigError(str(exc)) from None
        self._set("storage_options", check_str_mapping(owner, "storage_options", self.storage_options))
        if self.store is not None:
            if not isinstance(self.store, str):
                raise ConfigError(f"CacheConfig.store must be a folder path or a URL such as 's3://bucket/prefix', "
                                  f"got {self.store!r}")
            check_store_location(self.store, "CacheConfig.store", ConfigError)
            _check_protocol(self.store)

    @property
    def url(self) -> str:
        """The store location, credentials redacted (what reports and logs show)."""
        location = self.store if self.store is not None else default_cache_dir()
        return redact_url(location)

    def open_store(self) -> Store:
        """The configured store (``ArtifactError`` if it cannot be opened)."""
        if not self.enabled:
            raise ArtifactError("CacheConfig.enabled is False: there is no cache store to open")
        return open_store(self.store if self.store is not None else default_cache_dir(), dict(self.storage_options),
                          secret=self.secret, max_artifact_bytes=self.max_artifact_bytes)

    def _encode_field(self, name: str, value: Any) -> Any:
        if name == "storage_options":
            return redact_options(value)
        if name == "secret":
            return None if value is None else "***"
        if name == "store" and value is not None:
            return redact_url(value)
        return super()._encode_field(name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.to_dict().items())
        return f"CacheConfig({fields})"


def _check_protocol(store: str) -> None:
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", store)
    if match is None:
        return  # a local path
    protocol = match.group(1).lower()
    if protocol == "memory":
        raise ConfigError("CacheConfig.store 'memory://' would forget everything at exit; leave cache_config unset "
                          "for an in-memory run")
    import fsspec

    if protocol not in fsspec.available_protocols():
        raise ConfigError(f"CacheConfig.store {redact_url(store)!r} uses unknown protocol {protocol!r}; use a folder "
                          f"path, file://, s3:// ({install_hint('s3')}) or gs:// ({install_hint('gcs')})")


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of fsspec options with every secret-like value replaced by ``***``."""
    shown: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, Mapping):
            shown[name] = redact_options(value)
        elif SECRET_OPTION.search(str(name)) and value is not None:
            shown[name] = "***"
        else:
            shown[name] = value
    return shown


# ---------------------------------------------------------------- inspecting and trimming a store
@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One artifact as ``vertebrae cache list`` shows it; ``problem`` is why its manifest cannot be used."""

    key: str
    kind: str
    extractor: str
    dataset: str
    bytes: int
    created_at: str
    problem: ArtifactError | None = None


def list_entries(store: Store) -> Iterator[CacheEntry]:
    """Every entry of the store; one whose manifest cannot be read is listed with its ``problem``, never skipped
    silently and never the end of the listing, and so is a stage folder the store refuses to list (a link out of it,
    named ``<stage>/*``)."""
    for folder, problem in store.refused():
        yield CacheEntry(key=folder, kind="-", extractor="-", dataset="-", bytes=0, created_at="-", problem=problem)
    for key in store.keys():
        try:
            manifest = store.manifest(key)
        except ArtifactError as exc:
            yield CacheEntry(key=key, kind="-", extractor="-", dataset="-", bytes=0, created_at="-", problem=exc)
            continue
        if manifest is None:
            continue  # deleted since the store was listed
        metadata = manifest.metadata
        yield CacheEntry(key=manifest.key, kind=manifest.kind, extractor=str(metadata.get("extractor", "-")),
                         dataset=str(metadata.get("dataset", "-")), bytes=manifest.persisted_bytes,
                         created_at=manifest.created_at)


def verify_store(store: Store) -> Iterator[tuple[str, ArtifactError | None]]:
    """``(key, None)`` for every valid artifact, ``(key, why)`` for every other, one bad entry never stopping the
    rest: every file is re-read against its checksums and the artifact decoded as its stage declares (a document a
    run could not use is corrupt, not valid).  A stage folder the store refuses to list (a link out of it) is
    ``("<stage>/*", why)``."""
    from ..execution.registry import codecs_of

    yield from store.refused()
    for key in store.keys():
        try:
            stored = store.read(key)
            _decodes(stored, codecs_of(key, stored.kind))
        except ArtifactError as exc:
            yield key, exc
        else:
            yield key, None


def _decodes(stored: Any, codecs: list[Any]) -> None:
    """Decode ``stored`` with the first of ``codecs`` that accepts it; the first one's error when none does."""
    first: ArtifactError | None = None
    for codec in codecs:
        try:
            codec.decode(stored)
            return
        except ArtifactError as exc:
            first = first or exc
    if first is not None:
        raise first


def problem_label(problem: ArtifactError) -> str:
    """How ``vertebrae cache`` names a bad entry: ``CORRUPT`` (its data or manifest is wrong), ``UNREADABLE``
    (the store refused it: a folder where a file belongs, a link out of the store, no permission) or ``REWRITTEN``
    (concurrent writers replaced it throughout the check; nothing is wrong with it)."""
    if isinstance(problem, ArtifactRaceError):
        return "REWRITTEN"
    return "CORRUPT" if isinstance(problem, ArtifactIntegrityError) else "UNREADABLE"


#: Unreferenced files younger than this may belong to a writer still at work, so prune leaves them (the default
#: of ``vertebrae cache prune --leftover-age``).
LEFTOVER_MIN_AGE = datetime.timedelta(hours=1)


def prune_store(store: Store, *, older_than: datetime.timedelta | None = None, max_bytes: int | None = None,
                dry_run: bool = False, now: datetime.datetime | None = None,
                entries: list[CacheEntry] | None = None) -> list[CacheEntry]:
    """Delete entries created before ``now - older_than``, then the oldest until at most ``max_bytes`` remain.

    ``entries`` is the listing to prune (default: :func:`list_entries` now); an entry with a ``problem`` has
    no trustworthy age or size and is left alone.  Returns the deleted (or, with ``dry_run``, the would-be
    deleted) entries, oldest first.  Leftover files of killed writers are swept separately
    (:meth:`Store.sweep`, ``vertebrae cache prune``).
    """
    if older_than is None and max_bytes is None:
        raise ConfigError("prune needs older_than and/or max_bytes; nothing would be deleted otherwise")
    if max_bytes is not None and max_bytes < 0:
        raise ConfigError(f"max_bytes must be >= 0, got {max_bytes}")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    listed = list_entries(store) if entries is None else entries
    entries = sorted((entry for entry in listed if entry.problem is None), key=lambda entry: entry.created_at)
    doomed = [e for e in entries if older_than is not None and parse_time(e.created_at) < now - older_than]
    if max_bytes is not None:
        kept = [e for e in entries if e not in doomed]
        total = sum(e.bytes for e in kept)
        for entry in kept:
            if total <= max_bytes:
                break
            doomed.append(entry)
            total -= entry.bytes
    doomed.sort(key=lambda entry: entry.created_at)
    if not dry_run:
        for entry in doomed:
            store.delete(entry.key)
    return doomed


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_duration(text: str, option: str = "--older-than") -> datetime.timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` (``option`` names the flag in the error)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ConfigError(f"{option} {text!r} is not a duration; use a number and a unit: 30d, 12h, 90m, 45s, 2w")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[match.group(2)]
    return datetime.timedelta(**{unit: float(match.group(1))})


def parse_size(text: str) -> int:
    """``500MB``, ``2GiB``, ``1000000`` (bytes)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(f"--max-bytes {text!r} is not a size; use e.g. 500MB, 2GiB or a byte count")
    unit = match.group(2).lower() if match.group(2) else None
    return int(float(match.group(1)) * _SIZE_UNITS[unit])

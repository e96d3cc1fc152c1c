"""Artifact stores: where stage outputs live between stages and between runs.

Layout of a persistent store: ``<root>/<stage>/<hex>/manifest.json`` plus the data files, each
named ``<name>.<16 hex of its sha256>.<ext>``.  Publishing is atomic: data files are written first
(on local disks to unique temporary names, then renamed; an object store shows an object only once
its upload completes), the manifest last the same way.  Content-addressed file names mean that two
processes writing one key at once never overwrite each other's data: whichever manifest lands last
wins and points only at its own, complete files.  A reader trusts nothing but a manifest whose every
file has the recorded size and sha256 (and, with a secret, whose signature is right: ``signing.py``),
and sizes no allocation by a number the manifest claims (see ``FsspecStore._read_verified``).  On a local disk,
a symbolic link that leads out of the store root is never followed (reads, writes and deletes are refused).
"""

from __future__ import annotations

import datetime
import functools
import io
import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from .._base.files import NotRegularFileError, open_regular
from ..errors import (ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError, ArtifactRaceError, ArtifactWarning,
                      VertebraeError)
from .codecs import (HashingSink, StoredArtifact, array_summary, check_npy_size, decode_artifact, file_writers,
                     npy_layout)
from .manifest import KEY, MANIFEST_FILE, Manifest, check_key, logical_name, stored_name, utc_now
from .signing import check_secret

MEMORY_URL = "memory://"
_OBJECT_STORE_PROTOCOLS = ("s3", "s3a", "gs", "gcs")
#: storage_options names whose values are secrets; they are scrubbed from every error message.
SECRET_OPTION = re.compile(r"key|secret|token|password|credential|session", re.IGNORECASE)
#: How many manifests a reader tries while concurrent writers keep replacing the one it read (then: a race).
READ_ATTEMPTS = 8
#: How long a reader waits, in turn, for a file its unchanged manifest lists (a writer of equal content moved it
#: aside and is restoring it; on a loaded machine that can take a while): 0.75 s in all, then it is corruption.
_RESTORE_WAITS_S = (0.05, 0.1, 0.2, 0.4)
#: The most bytes one artifact's data files may take together unless configured otherwise
#: (``CacheConfig.max_artifact_bytes``): a manifest claiming more is refused before anything is read.
DEFAULT_MAX_ARTIFACT_BYTES = 64 * 2**30


@runtime_checkable
class Store(Protocol):
    """What a runner needs from a store (see :class:`MemoryStore` and :class:`FsspecStore`)."""

    url: str

    def has(self, key: str) -> bool: ...

    def read(self, key: str) -> StoredArtifact: ...

    def write(self, key: str, artifact: StoredArtifact, *, versions: Mapping[str, str] | None = None,
              metadata: Mapping[str, Any] | None = None) -> Manifest: ...

    def manifest(self, key: str) -> Manifest | None: ...

    def delete(self, key: str) -> None: ...

    def keys(self) -> Iterator[str]: ...

    def refused(self) -> Iterator[tuple[str, ArtifactError]]: ...

    def manifests(self) -> Iterator[Manifest]: ...

    def persisted_bytes(self, key: str) -> dict[str, int]: ...

    def sweep(self, min_age: datetime.timedelta, *, dry_run: bool = False) -> list[str]: ...

    def check_writable(self) -> None: ...


def build_manifest(key: str, artifact: StoredArtifact, files: Mapping[str, Mapping[str, Any]],
                   versions: Mapping[str, str] | None, metadata: Mapping[str, Any] | None) -> Manifest:
    """The manifest for ``artifact`` whose logical files were stored as ``files`` (stored name -> entry)."""
    from .._version import __version__
    import numpy

    by_logical = {logical_name(name): name for name in files}
    arrays = {}
    for name, value in artifact.arrays.items():
        summary = array_summary(value)
        summary["file"] = by_logical.get(f"{name}.{'npz' if summary['sparse'] else 'npy'}")
        arrays[name] = summary
    return Manifest(key=key, kind=artifact.kind, created_at=utc_now(), files=dict(files), arrays=arrays,
                    versions={"vertebrae": __version__, "numpy": numpy.__version__, **(versions or {})},
                    metadata=dict(metadata or {}))


class MemoryStore:
    """In-process store: the default for a run without a cache.  Nothing is serialized or copied."""

    def __init__(self) -> None:
        self.url = MEMORY_URL
        self._entries: dict[str, tuple[StoredArtifact, Manifest]] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._entries)} artifacts)"

    def has(self, key: str) -> bool:
        return check_key(key) in self._entries

    def read(self, key: str) -> StoredArtifact:
        if not self.has(key):
            raise ArtifactNotFoundError(f"no artifact {key!r} in {self.url}")
        return self._entries[key][0]

    def write(self, key: str, artifact: StoredArtifact, *, versions: Mapping[str, str] | None = None,
              metadata: Mapping[str, Any] | None = None) -> Manifest:
        check_key(key)
        if not isinstance(artifact, StoredArtifact):
            raise ArtifactError(f"Store.write expects a StoredArtifact, got {type(artifact).__name__}")
        # Memory keeps no files, but the manifest still describes the arrays (its files map is empty).
        manifest = build_manifest(key, artifact, {}, versions, metadata)
        self._entries[key] = (artifact, manifest)
        return manifest

    def manifest(self, key: str) -> Manifest | None:
        entry = self._entries.get(check_key(key))
        return None if entry is None else entry[1]

    def delete(self, key: str) -> None:
        self._entries.pop(check_key(key), None)

    def keys(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def refused(self) -> Iterator[tuple[str, ArtifactError]]:
        """Memory has no folders to refuse."""
        return iter(())

    def manifests(self) -> Iterator[Manifest]:
        return (self._entries[key][1] for key in self.keys())

    def persisted_bytes(self, key: str) -> dict[str, int]:
        """Nothing is persisted in memory."""
        if not self.has(key):
            raise ArtifactNotFoundError(f"no artifact {key!r} in {self.url}")
        return {}

    def sweep(self, min_age: datetime.timedelta, *, dry_run: bool = False) -> list[str]:
        """Memory leaves no files behind."""
        return []

    def check_writable(self) -> None:
        """Memory can always be written."""


class FsspecStore:
    """A store on any fsspec filesystem: local paths and ``file://`` (``s3://`` / ``gs://`` with the extras).

    ``secret``: sign every manifest written and read only manifests signed with it (``signing.py``).
    ``max_artifact_bytes``: the most bytes one artifact's data files may take; larger ones are never read.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *, secret: str | None = None,
                 max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> None:
        if not isinstance(url, str):
            raise ArtifactError(f"store URL must be a string, got {type(url).__name__} {url!r}: {STORE_FIX}")
        check_store_location(url, "store URL")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ArtifactError(f"storage_options must be a mapping of fsspec options, "
                                f"got {type(storage_options).__name__}")
        self._secret = check_secret("the store's secret", secret)
        self.max_artifact_bytes = check_max_artifact_bytes("max_artifact_bytes", max_artifact_bytes)
        self._raw_url, self._options = url, dict(storage_options or {})
        self.protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
        self.url = redact_url(url)
        self.fs, self.root = _filesystem(url, self.protocol, dict(self._options), self.url)
        self._local = self.protocol in ("file", "local")
        self._real_root = os.path.realpath(self.root) if self._local else self.root
        if "://" not in url:
            self.url = self.root  # the absolute folder, so a report says exactly where the store lives

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r})"

    def check_writable(self) -> None:
        """Create a local store's folder now, or say in one ``ArtifactError`` why it cannot be written: a run
        that cannot store would otherwise finish, store nothing, and look cached.  An object store gets one
        request, to see that its endpoint answers: unreachable, every job's lookup and write would fail in turn,
        each after the client's own retries (measured against a closed port: 98 s for five small candidates on
        S3, 34 s per request on GCS).  A refusal (its permissions may allow writes only) counts as an answer."""
        if not self._local:
            self._check_reachable()
            return
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            problem = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
            raise ArtifactError(f"the cache store {self.url} cannot be created ({problem}); give a folder that can be "
                                "written, or mode = \"read_only\" to only read an existing cache") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ArtifactError(f"the cache store {self.url} is not writable; give a folder that can be written, or "
                                "mode = \"read_only\" to only read an existing cache")

    def _check_reachable(self) -> None:
        """One lookup of the root: a failure to connect is an ``ArtifactError``.  Not a bucket check: s3fs reads
        a missing, a forbidden and an unreachable bucket alike as absent, so a user allowed only a prefix would be
        refused."""
        try:
            self.fs.exists(self.root)
        except PermissionError:
            return
        except Exception as exc:  # any backend's failure: botocore, aiohttp, google-auth...
            raise ArtifactError(self._scrub(
                f"the cache store {self.url} cannot be reached ({type(exc).__name__}: {exc}); check its endpoint and "
                "credentials (storage_options) and the network, or run without a cache")) from None

    def __reduce__(self):
        reopen = functools.partial(FsspecStore, secret=self._secret, max_artifact_bytes=self.max_artifact_bytes)
        return (reopen, (self._raw_url, self._options))

    @property
    def signed(self) -> bool:
        """Whether manifests are signed on write and their signatures checked on read."""
        return self._secret is not None

    # ------------------------------------------------------------ paths
    def _folder(self, key: str) -> str:
        return self._inside(f"{self.root}/{check_key(key)}")

    def _path(self, key: str, name: str) -> str:
        return self._inside(f"{self._folder(key)}/{name}")

    def _inside(self, path: str) -> str:
        """``path``, unless a symbolic link in a local store leads it out of the store root.

        Following such a link would read, write or delete files that are not the store's (a planted link
        in a shared cache folder), so it is refused; links that stay inside the root are fine.
        """
        if self._local and self._leaves_root(path):
            raise ArtifactError(f"a symbolic link leads {path} outside the store {self.url} (to "
                                f"{os.path.realpath(path)}); vertebrae does not follow it: remove the link")
        return path

    def _leaves_root(self, path: str) -> bool:
        return not os.path.realpath(path).startswith(self._real_root + os.sep)

    def _open(self, path: str, key: str) -> Any:
        """``path`` opened for binary reading; on a local disk only a regular file, opened without blocking (a FIFO
        planted there would hang a plain open, a device never end): anything else is corrupt, never read."""
        if not self._local:
            return self.fs.open(path, "rb")
        try:
            return open_regular(path)
        except NotRegularFileError as exc:
            raise ArtifactIntegrityError(f"{self.url}/{key}: {path.rsplit('/', 1)[-1]} is {exc.kind}, not a regular "
                                         "file the store wrote; it is not read") from None

    def _error(self, action: str, key: str, exc: BaseException) -> ArtifactError:
        return ArtifactError(self._scrub(f"cannot {action} {key!r} in {self.url}: {type(exc).__name__}: {exc}"))

    def _scrub(self, text: str) -> str:
        for secret in _secret_values(self._options):
            text = text.replace(secret, "***")
        return text

    # ------------------------------------------------------------ reading
    def has(self, key: str) -> bool:
        path = self._path(key, MANIFEST_FILE)
        try:
            return self.fs.exists(path)
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("look up", key, exc) from None

    def manifest(self, key: str) -> Manifest | None:
        """The published manifest, ``None`` when absent; a malformed one raises ArtifactIntegrityError."""
        path = self._path(key, MANIFEST_FILE)
        try:
            if self._local:
                with self._open(path, key) as fileobj:
                    text = fileobj.read()
            else:  # one request; an open object store file may expire when a concurrent writer replaces it
                text = self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        except ArtifactError:
            raise
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("read the manifest of", key, exc) from None
        manifest = Manifest.from_json(text)
        if manifest.key != key:
            raise ArtifactIntegrityError(f"manifest in {self.url}/{key} describes key {manifest.key!r}; "
                                         "it was copied or tampered with")
        return manifest

    def read(self, key: str) -> StoredArtifact:
        """Read and verify every file.

        A file missing under a manifest that has since been replaced was removed by a concurrent writer
        (content-addressed files of the replaced version go): the newer manifest is read instead, up to
        :data:`READ_ATTEMPTS` manifests, and a key rewritten throughout is an :class:`ArtifactRaceError`.
        A file still missing under the published manifest is corruption (ArtifactIntegrityError).
        """
        manifest, waits = self._trusted(key), iter(_RESTORE_WAITS_S)
        for _ in range(READ_ATTEMPTS):
            try:
                return self._read_files(key, manifest)
            except FileNotFoundError as exc:
                missing = exc
            latest = self._trusted(key)
            if latest == manifest:
                wait = next(waits, None)
                if wait is None:
                    raise self._missing(key, missing) from None
                time.sleep(wait)
            manifest = latest
        raise ArtifactRaceError(f"{self.url}/{key} was replaced by concurrent writers {READ_ATTEMPTS} times while it "
                                "was read, so nothing was read (several processes storing different content under "
                                "one key: an extractor whose output varies under one cache identity?)")

    def _missing(self, key: str, exc: FileNotFoundError) -> ArtifactIntegrityError:
        return ArtifactIntegrityError(f"{self.url}/{key}: file {exc.args[0]!r} listed in the manifest is missing")

    def _require(self, key: str) -> Manifest:
        manifest = self.manifest(key)
        if manifest is None:
            raise ArtifactNotFoundError(f"no artifact {key!r} in {self.url} (no manifest)")
        return manifest

    def _trusted(self, key: str) -> Manifest:
        """The manifest a read may follow: signed with this store's secret (if it has one) and within the size
        limit, both checked before any data file is opened."""
        manifest = self._require(key)
        if self._secret is not None:
            manifest.check_signature(self._secret, f"{self.url}/{key}")
        declared = max([manifest.persisted_bytes, *(int(entry["nbytes"]) for entry in manifest.arrays.values())])
        if declared > self.max_artifact_bytes:
            raise ArtifactIntegrityError(f"{self.url}/{key}: the manifest declares {declared} bytes, over the limit "
                                         f"of {self.max_artifact_bytes} (CacheConfig.max_artifact_bytes); it is not "
                                         "read")
        return manifest

    def _read_files(self, key: str, manifest: Manifest) -> StoredArtifact:
        dense = {entry["file"]: entry for entry in manifest.arrays.values() if not entry["sparse"]}
        contents = {}
        for name, entry in manifest.files.items():
            contents[logical_name(name)] = self._read_verified(key, name, entry, dense.get(name))
        artifact = decode_artifact(manifest.kind, contents)
        for name, expected in manifest.arrays.items():
            value = artifact.arrays.get(name)
            actual = None if value is None else {**array_summary(value), "file": expected["file"]}
            if actual != dict(expected):
                raise ArtifactIntegrityError(f"{self.url}/{key}: array {name!r} is {actual} but the manifest "
                                             f"records {dict(expected)}")
        return artifact

    def _read_verified(self, key: str, name: str, entry: Mapping[str, Any],
                       array: Mapping[str, Any] | None) -> bytearray:
        """The file's bytes, read into one buffer while hashing; never returned unless size and sha256 match.

        The buffer is allocated only once the object's real size equals the manifest's (a manifest number
        alone never sizes an allocation), and a dense array's ``.npy`` header must match the manifest's
        shape and dtype and account for exactly that size before its data is read.
        """
        size = int(entry["bytes"])
        sink, path = HashingSink(), self._path(key, name)
        try:
            with self._open(path, key) as fileobj:
                actual = fileobj.seek(0, io.SEEK_END)
                if actual != size:
                    raise ArtifactIntegrityError(f"{self.url}/{key}: {name} has {actual} bytes, the manifest records "
                                                 f"{size} (truncated or replaced); it is not read")
                fileobj.seek(0)
                if array is not None:
                    self._check_header(key, name, fileobj, array, size)
                    fileobj.seek(0)
                # Exactly that size, never resized: a backend's readinto may still hold a view of it (s3fs was seen
                # to, now and then), and a bytearray with live views cannot shrink.  One more read reveals a longer
                # file (one that grew since it was measured).
                buffer = bytearray(size)
                view, filled = memoryview(buffer), 0
                while filled < size:
                    count = fileobj.readinto(view[filled:])
                    if not count:
                        break
                    filled += count
                if filled == size and fileobj.read(1):
                    filled += 1
        except FileNotFoundError:
            raise FileNotFoundError(name) from None
        except ArtifactError:
            raise
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("read", key, exc) from None
        if filled != size:
            raise ArtifactIntegrityError(f"{self.url}/{key}: {name} has {'more than ' if filled > size else ''}"
                                         f"{filled} bytes, the manifest records {size} (truncated or replaced)")
        sink.write(buffer)
        if sink.sha256 != entry["sha256"]:
            raise ArtifactIntegrityError(f"{self.url}/{key}: {name} fails its sha256 check (corrupted); "
                                         "it is not read")
        return buffer

    def _check_header(self, key: str, name: str, fileobj: Any, array: Mapping[str, Any], size: int) -> None:
        where = f"{self.url}/{key}: {name}"
        shape, _, dtype, offset = npy_layout(fileobj, where)
        if [*shape] != list(array["shape"]) or dtype.str != array["dtype"]:
            raise ArtifactIntegrityError(f"{where} holds {[*shape]} {dtype.str} but the manifest records "
                                         f"{list(array['shape'])} {array['dtype']}; it is not read")
        check_npy_size(where, shape, dtype, offset, size)

    def persisted_bytes(self, key: str) -> dict[str, int]:
        """``{stored file: bytes}`` from a stat of each data file (the manifest itself excluded)."""
        manifest = self._require(key)
        paths = {name: self._path(key, name) for name in manifest.files}
        try:
            return {name: int(self.fs.info(path)["size"]) for name, path in paths.items()}
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("stat the files of", key, exc) from None

    def keys(self) -> Iterator[str]:
        """Keys with a manifest file, sorted (the manifest's content is not checked here).  In a local store an
        entry folder that is a link out of the store is listed too (reading it is refused: ``UNREADABLE``)."""
        if self._local:
            return iter(sorted(self._local_listing()[0]))
        try:
            paths = self.fs.glob(f"{self.root}/*/*/{MANIFEST_FILE}")
        except FileNotFoundError:
            return iter(())
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("list", "*", exc) from None
        keys = []
        for path in paths:
            key = "/".join(self.fs._strip_protocol(path).rstrip("/").split("/")[-3:-1])
            try:
                keys.append(check_key(key))
            except ArtifactError:
                continue  # a foreign folder in the store root is not ours to interpret
        return iter(sorted(keys))

    def refused(self) -> Iterator[tuple[str, ArtifactError]]:
        """Stage folders of a local store that are links out of it, as ``(\"<stage>/*\", why)``: their entries cannot
        be listed without following the link, so ``vertebrae cache verify`` and ``list`` report the folder itself."""
        return iter(self._local_listing()[1] if self._local else ())

    def _local_listing(self) -> tuple[list[str], list[tuple[str, ArtifactError]]]:
        """(keys, refused stage folders) of a local store, walked without following a link out of the root."""
        keys: list[str] = []
        refused: list[tuple[str, ArtifactError]] = []
        try:
            stages = sorted(os.scandir(self.root), key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return keys, refused
        except OSError as exc:
            raise self._error("list", "*", exc) from None
        for stage in stages:
            if not KEY.fullmatch(f"{stage.name}/{'0' * 16}"):
                continue  # a foreign file or folder in the store root is not ours to interpret
            if not stage.is_dir():
                refused.append((f"{stage.name}/*", self._blocked(stage.path, "the stage folder")))
                continue
            try:
                self._inside(stage.path)
            except ArtifactError as exc:
                refused.append((f"{stage.name}/*", exc))
                continue
            try:
                entries = sorted(os.scandir(stage.path), key=lambda entry: entry.name)
            except OSError as exc:
                refused.append((f"{stage.name}/*", self._error("list", f"{stage.name}/*", exc)))
                continue
            for entry in entries:
                key = f"{stage.name}/{entry.name}"
                if not KEY.fullmatch(key):
                    continue
                leaves = self._leaves_root(entry.path)
                if not leaves and not entry.is_dir():
                    refused.append((key, self._blocked(entry.path, "the entry's folder")))
                elif leaves or os.path.lexists(os.path.join(entry.path, MANIFEST_FILE)):
                    keys.append(key)
        return keys, refused

    def _blocked(self, path: str, what: str) -> ArtifactIntegrityError:
        return ArtifactIntegrityError(f"{path} is a file where {what} belongs: nothing can be stored under it; a "
                                      "read_write run replaces it (or remove it)")

    def _unblock(self, folder: str) -> None:
        """Clear a local entry's path of what no write can get past and the store never wrote: a file where the
        stage's or the entry's folder belongs, a folder where its manifest belongs (links are left alone)."""
        for path in (os.path.dirname(folder), folder):
            if os.path.lexists(path) and not os.path.islink(path) and not os.path.isdir(path):
                os.remove(path)
        manifest = os.path.join(folder, MANIFEST_FILE)
        if os.path.isdir(manifest) and not os.path.islink(manifest):
            shutil.rmtree(manifest)

    def manifests(self) -> Iterator[Manifest]:
        """Every readable manifest; an unreadable one is skipped with an :class:`ArtifactWarning`."""
        for key in self.keys():
            try:
                manifest = self.manifest(key)
            except ArtifactError as exc:
                warnings.warn(f"skipping {self.url}/{key}: {exc}", ArtifactWarning, stacklevel=2)
                continue
            if manifest is not None:
                yield manifest

    # ------------------------------------------------------------ writing
    def write(self, key: str, artifact: StoredArtifact, *, versions: Mapping[str, str] | None = None,
              metadata: Mapping[str, Any] | None = None) -> Manifest:
        if not isinstance(artifact, StoredArtifact):
            raise ArtifactError(f"Store.write expects a StoredArtifact, got {type(artifact).__name__}")
        folder = self._folder(key)
        # Validate versions and metadata (and that they are strict JSON) before writing any data.
        build_manifest(key, artifact, {}, versions, metadata).to_json()
        if self._local:
            self._unblock(folder)
        try:
            previous = self.manifest(key)
        except ArtifactIntegrityError:
            previous = None  # a corrupt manifest is simply replaced
        try:
            if self._local:  # object stores have no folders (and s3fs would try to create the bucket)
                self.fs.makedirs(folder, exist_ok=True)
            files, writers = {}, {}
            for filename, write in file_writers(artifact).items():
                name, entry = self._publish_data(folder, filename, write)
                files[name], writers[name] = entry, (filename, write)
            manifest = build_manifest(key, artifact, files, versions, metadata)
            if self._secret is not None:
                manifest = manifest.signed(self._secret)
            self._put(f"{folder}/{MANIFEST_FILE}", manifest.to_json().encode("utf-8"))
            self._collect_garbage(key, manifest, previous)
            self._restore_missing(key, folder, writers)
        except ArtifactError:
            raise
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("write", key, exc) from None
        return manifest

    def _publish_data(self, folder: str, filename: str, write) -> tuple[str, dict[str, Any]]:
        if self._local:
            temporary = f"{folder}/.{uuid.uuid4().hex}.{filename}.tmp"
            try:
                with self.fs.open(temporary, "wb") as fileobj:
                    sink = HashingSink(fileobj)
                    write(sink)
                name = stored_name(filename, sink.sha256)
                os.replace(temporary, f"{folder}/{name}")
            finally:
                if os.path.exists(temporary):  # an exception mid-write: no half file stays behind
                    os.remove(temporary)
        else:
            # An object appears only once its upload completes, so the final name is written directly;
            # the hashing pass first names it by content (no server-side copy of a big matrix).
            sink = HashingSink()
            write(sink)
            name = stored_name(filename, sink.sha256)
            with self.fs.open(f"{folder}/{name}", "wb") as fileobj:
                write(fileobj)
        return name, {"bytes": sink.size, "sha256": sink.sha256}

    def _put(self, path: str, data: bytes) -> None:
        if self._local:
            temporary = f"{path}.{uuid.uuid4().hex}.tmp"
            self.fs.pipe_file(temporary, data)
            os.replace(temporary, path)
        else:
            self.fs.pipe_file(path, data)

    def _collect_garbage(self, key: str, mine: Manifest, previous: Manifest | None) -> None:
        """Delete files no published manifest needs: the replaced version's, or ours if another writer won.

        Only files this writer knows about are touched, so a concurrent writer's unpublished files survive.
        """
        current = self.manifest(key)
        keep = set(current.files) if current is not None else set(mine.files)
        candidates = set(mine.files) | (set(previous.files) if previous is not None else set())
        for name in sorted(candidates - keep):
            if not self._listed(key, name):  # a concurrent writer may have just published this very file
                self._remove_unlisted(key, name)

    def _listed(self, key: str, name: str) -> bool:
        latest = self.manifest(key)
        return latest is not None and name in latest.files

    def _remove_unlisted(self, key: str, name: str) -> None:
        """Remove a data file no manifest lists, unless a writer of equal content publishes it meanwhile.

        On a local disk the file is first moved aside and put back if the manifest lists it by then: a
        writer that re-published it before the move published its manifest either before the second look
        (the file is put back) or after it (its own check then finds the file gone and restores it), so a
        published manifest never keeps pointing at a removed file.  Object stores have no atomic move;
        there the writer's own restore is what closes the gap.
        """
        path = self._path(key, name)
        if not self._local:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
            return
        aside = f"{self._folder(key)}/.{uuid.uuid4().hex}.{name}.removed.tmp"  # a crash here leaves a sweepable temp
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        if self._listed(key, name):
            os.replace(aside, path)
        else:
            os.remove(aside)

    def _restore_missing(self, key: str, folder: str, writers: Mapping[str, tuple[str, Any]]) -> None:
        """Re-publish our data files that the published manifest lists but a concurrent writer's cleanup removed.

        Content-addressed names mean two writers of equal content share files, so one writer's cleanup
        of a version it replaced can remove a file the other has just re-published.
        """
        current = self.manifest(key)
        for name in [] if current is None else sorted(set(current.files) & set(writers)):
            if not self.fs.exists(self._path(key, name)):
                filename, write = writers[name]
                self._publish_data(folder, filename, write)

    def sweep(self, min_age: datetime.timedelta, *, dry_run: bool = False) -> list[str]:
        """Delete files no manifest references and older than ``min_age``; return their paths.

        These are what a killed writer (temporary files, data without a manifest) or a lost race
        leaves behind.  ``min_age`` protects writers still in progress.  A folder whose manifest is
        unreadable is left alone (``vertebrae cache verify`` reports it).
        """
        now = datetime.datetime.now(datetime.timezone.utc)
        try:
            paths = [self.fs._strip_protocol(p) for p in self.fs.glob(f"{self.root}/*/*/*")]
        except FileNotFoundError:
            return []
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("list", "*", exc) from None
        folders: dict[str, list[str]] = {}
        for path in paths:
            stage, digest, name = path.rstrip("/").split("/")[-3:]
            folders.setdefault(f"{stage}/{digest}", []).append(path)
        swept = []
        for key, files in sorted(folders.items()):
            try:
                manifest = self.manifest(key)
            except ArtifactError:
                continue  # not our folder, or a corrupt manifest: leave it for verify
            keep = {MANIFEST_FILE, *(manifest.files if manifest is not None else ())}
            for path in sorted(files):
                if path.rsplit("/", 1)[-1] in keep:
                    continue
                try:
                    modified = self.fs.modified(path)
                    modified = modified if modified.tzinfo else modified.replace(tzinfo=datetime.timezone.utc)
                    if now - modified >= min_age:
                        if not dry_run:
                            self.fs.rm_file(path)
                        swept.append(path)
                except OSError:
                    continue  # gone meanwhile, or a folder: not a writer's leftover file, and not ours to remove
        return swept

    def delete(self, key: str) -> None:
        """Remove the manifest first (unpublish), then the folder."""
        folder = self._folder(key)
        try:
            if self.fs.exists(f"{folder}/{MANIFEST_FILE}"):
                self.fs.rm_file(f"{folder}/{MANIFEST_FILE}")
            if self.fs.exists(folder):
                self.fs.rm(folder, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:  # any backend's failure: OSError, botocore, google-auth, aiohttp...
            raise self._error("delete", key, exc) from None


def _filesystem(url: str, protocol: str, options: dict[str, Any], shown: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is a core dependency
        from ..errors import DependencyError
        raise DependencyError("artifact stores need fsspec: pip install fsspec") from None
    extra = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}.get(protocol)
    if protocol in _OBJECT_STORE_PROTOCOLS:
        options.setdefault("use_listings_cache", False)  # stale listings would hide new artifacts
    try:
        fs, root = fsspec.core.url_to_fs(os.path.expanduser(url) if protocol == "file" else url, **options)
    except ImportError:
        from ..errors import DependencyError
        from .._base.extras import install_hint
        raise DependencyError(f"store {shown} needs the {protocol}:// filesystem: "
                              f"{install_hint(extra) if extra else 'install the fsspec package for it'}") from None
    except (ValueError, TypeError, OSError) as exc:
        message = f"cannot open store {shown}: {type(exc).__name__}: {exc}"
        for secret in _secret_values(options):
            message = message.replace(secret, "***")
        raise ArtifactError(message) from None
    root = root.rstrip("/")
    if protocol == "file":
        root = os.path.abspath(root)
    return fs, root


#: Object stores whose URL starts with a bucket (``s3://bucket/prefix``), with fsspec's aliases.
BUCKET_PROTOCOLS = ("s3", "s3a", "gs", "gcs")
#: What a refused store location should be instead.
STORE_FIX = "give a folder path or a URL such as s3://bucket/prefix"


def store_location_problem(url: str) -> str | None:
    """What makes ``url`` name no store, or None: blank, or ``file://`` with nothing after it (an unset variable, e.g.
    ``--cache "$CACHE"``), which a local filesystem would take as the current folder; or ``s3://``/``gs://`` without
    a bucket (``s3://$BUCKET/x`` unset), which fsspec takes as the account's root or fails on obscurely."""
    scheme, separator, rest = url.partition("://")
    scheme = scheme.lower() if separator else ""
    if not (rest if scheme in ("file", "local") else url).strip():
        return "is an empty path, which names no folder (an unset variable?)"
    if scheme in BUCKET_PROTOCOLS and not rest.split("/", 1)[0].rpartition("@")[2].strip():
        return f"names no bucket after {scheme}:// (an unset variable?)"
    return None


def check_store_location(url: str, what: str, error: type[VertebraeError] = ArtifactError,
                         fix: str = STORE_FIX) -> str:
    """``url`` unless :func:`store_location_problem` finds one, raised as ``error`` naming ``what`` (the option,
    field or variable it came from) and the ``fix``, before anything opens it."""
    problem = store_location_problem(url)
    if problem is not None:
        raise error(f"{what} {redact_url(url)!r} {problem}: {fix}")
    return url


def _secret_values(options: Mapping[str, Any]) -> list[str]:
    found = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found.extend(_secret_values(value))
        elif isinstance(value, str) and value and SECRET_OPTION.search(str(name)):
            found.append(value)
    return found


def redact_url(url: str) -> str:
    """``s3://user:secret@bucket/x`` -> ``s3://***@bucket/x``: credentials never reach reprs or errors."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1***@", url)


def check_max_artifact_bytes(owner: str, value: Any) -> int:
    """A positive integer byte count (what bounds every read from a store)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArtifactError(f"{owner} must be a positive number of bytes, e.g. {DEFAULT_MAX_ARTIFACT_BYTES} "
                            f"(64 GiB, the default), got {value!r}")
    return value


def open_store(url: str | None, storage_options: Mapping[str, Any] | None = None, *, secret: str | None = None,
               max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> Store:
    """``None`` or ``memory://`` -> a fresh :class:`MemoryStore` (in-process: nothing to sign or bound);
    anything else -> :class:`FsspecStore`."""
    if url is None or url == MEMORY_URL:
        return MemoryStore()
    return FsspecStore(url, storage_options, secret=secret, max_artifact_bytes=max_artifact_bytes)

"""The serialized form of an artifact: ``.npy`` / ``.npz`` matrices plus one strict-JSON document.

Only these three formats exist so that reading an artifact from an untrusted store can never run
code: arrays are read with ``allow_pickle=False`` (object dtypes are refused on write and on read) and
the document goes through the result JSON codec, which rejects NaN and unknown types.  Big matrices
are streamed to the destination file object instead of being copied into a bytes buffer first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np

from .._base.sparse import is_sparse, sparse_module
from ..errors import ArtifactError, ArtifactIntegrityError, SerializationError
from .._base import json_codec

#: Array names become file names, so they are restricted to a portable, path-free alphabet.
ARRAY_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
DOCUMENT_FILE = "document.json"
#: dtype kinds that ``np.save`` writes without pickle: bool, integers, floats, complex, fixed strings.
_SAFE_DTYPE_KINDS = frozenset("biufcUS")
_CSR_FIELDS = ("data", "indices", "indptr", "shape")
#: Top-level document keys refused because runtimes are recorded beside artifacts, never inside them.
_RUNTIME_WORDS = ("timing", "runtime")


@dataclasses.dataclass(frozen=True)
class StoredArtifact:
    """What a stage produces, in storable form: named matrices plus a JSON-safe document.

    The arrays are kept as given (no copy); callers must not mutate them after storing.
    """

    kind: str
    arrays: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    document: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_kind(self.kind)
        if not isinstance(self.arrays, Mapping):
            raise ArtifactError(f"StoredArtifact.arrays must be a mapping of name -> array, "
                                f"got {type(self.arrays).__name__}")
        if not isinstance(self.document, Mapping):
            raise ArtifactError(f"StoredArtifact.document must be a mapping, got {type(self.document).__name__}")
        for name, value in self.arrays.items():
            _check_array(name, value)
        check_no_runtimes("StoredArtifact.document", self.document)

    @property
    def nbytes(self) -> int:
        """Logical resident bytes of every array (data, plus indices and indptr for CSR)."""
        return sum(array_nbytes(value) for value in self.arrays.values())


def check_kind(kind: Any) -> str:
    if not isinstance(kind, str) or not KIND.fullmatch(kind):
        raise ArtifactError(f"artifact kind must be lowercase letters, digits and '_' starting with a letter "
                            f"(e.g. 'embedding'), got {kind!r}")
    return kind


def check_no_runtimes(owner: str, mapping: Mapping[str, Any]) -> None:
    """Reject timing keys: a reused artifact must never replay the timings of the run that made it."""
    for key in mapping:
        if isinstance(key, str) and any(word in key.lower() for word in _RUNTIME_WORDS):
            raise ArtifactError(f"{owner} has key {key!r}: runtimes are recorded beside artifacts, never inside "
                                "them (a reused artifact would replay old timings); drop the key")


def _check_array(name: Any, value: Any) -> None:
    if not isinstance(name, str) or not ARRAY_NAME.fullmatch(name):
        raise ArtifactError(f"array name {name!r} is not allowed: use 1-128 characters from [A-Za-z0-9_.-], "
                            "not starting with '.' (names become file names)")
    if is_sparse(value):
        if value.format != "csr":
            raise ArtifactError(f"array {name!r} is a {value.format.upper()} sparse matrix; only CSR is stored "
                                "(convert with .tocsr())")
        dtype = value.dtype
    elif isinstance(value, np.ndarray):
        dtype = value.dtype
    else:
        raise ArtifactError(f"array {name!r} must be a numpy.ndarray or a scipy CSR matrix, "
                            f"got {type(value).__name__}")
    if dtype.hasobject or dtype.kind not in _SAFE_DTYPE_KINDS or dtype.names is not None:
        raise ArtifactError(f"array {name!r} has dtype {dtype}; only bool, integer, float, complex and fixed-width "
                            "string dtypes are stored (object arrays would need pickle)")


def array_nbytes(value: Any) -> int:
    if is_sparse(value):
        return int(value.data.nbytes + value.indices.nbytes + value.indptr.nbytes)
    return int(value.nbytes)


def array_summary(value: Any) -> dict[str, Any]:
    """What a manifest records about one array (and what a read checks the decoded array against)."""
    sparse = is_sparse(value)
    return {"shape": [int(n) for n in value.shape], "dtype": value.dtype.str, "sparse": sparse,
            "nnz": int(value.nnz) if sparse else None, "nbytes": array_nbytes(value)}


# ---------------------------------------------------------------- writing
def file_writers(artifact: StoredArtifact) -> dict[str, Callable[[BinaryIO], None]]:
    """``{filename: write(fileobj)}``: each writer streams one file's bytes into a binary file object."""
    writers: dict[str, Callable[[BinaryIO], None]] = {}
    for name, value in artifact.arrays.items():
        if is_sparse(value):
            writers[f"{name}.npz"] = _csr_writer(value)
        else:
            writers[f"{name}.npy"] = _npy_writer(value)
    document = _document_bytes(artifact.document)
    writers[DOCUMENT_FILE] = lambda fileobj: fileobj.write(document)
    return writers


def _npy_writer(array: np.ndarray) -> Callable[[BinaryIO], None]:
    return lambda fileobj: np.lib.format.write_array(fileobj, array, allow_pickle=False)


def _csr_writer(matrix: Any) -> Callable[[BinaryIO], None]:
    def write(fileobj: BinaryIO) -> None:
        import zipfile  # here, not at import: `import vertebrae` stays light

        parts = {"data": matrix.data, "indices": matrix.indices, "indptr": matrix.indptr,
                 "shape": np.asarray(matrix.shape, dtype=np.int64)}
        # ZIP_STORED and fixed entry order: the same matrix always gives the same bytes (and checksum).
        with zipfile.ZipFile(fileobj, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for field in _CSR_FIELDS:
                info = zipfile.ZipInfo(f"{field}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                with archive.open(info, mode="w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, np.ascontiguousarray(parts[field]), allow_pickle=False)
    return write


def _document_bytes(document: Mapping[str, Any]) -> bytes:
    try:
        return json_codec.dumps(dict(document)).encode("utf-8")
    except SerializationError as exc:
        raise ArtifactError(f"artifact document is not strict JSON: {exc}") from exc


class HashingSink:
    """A write-only, non-seekable file wrapper that counts and hashes what passes through.

    Always writing through it keeps the bytes identical whatever the destination (zipfile writes
    differently to seekable and non-seekable files) and yields the manifest's size and sha256 in
    the same pass that writes the data.  ``target=None`` only hashes.
    """

    def __init__(self, target: BinaryIO | None = None) -> None:
        self.target, self.size, self._hash = target, 0, hashlib.sha256()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        if self.target is not None:
            self.target.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        if self.target is not None:
            self.target.flush()

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def encode_artifact(artifact: StoredArtifact) -> dict[str, bytes]:
    """Every file of the artifact as bytes (convenient for small artifacts; stores stream instead)."""
    files = {}
    for filename, write in file_writers(artifact).items():
        buffer = io.BytesIO()
        write(HashingSink(buffer))
        files[filename] = buffer.getvalue()
    return files


# ---------------------------------------------------------------- reading
def decode_artifact(kind: str, files: Mapping[str, bytes | bytearray]) -> StoredArtifact:
    """Inverse of :func:`encode_artifact`; anything malformed raises :class:`ArtifactIntegrityError`."""
    if DOCUMENT_FILE not in files:
        raise ArtifactIntegrityError(f"artifact files lack {DOCUMENT_FILE!r}")
    arrays: dict[str, Any] = {}
    for filename, data in files.items():
        if filename == DOCUMENT_FILE:
            continue
        name, _, extension = filename.rpartition(".")
        if not ARRAY_NAME.fullmatch(name) or extension not in ("npy", "npz"):
            raise ArtifactIntegrityError(f"unexpected artifact file {filename!r} (only <name>.npy, <name>.npz and "
                                         f"{DOCUMENT_FILE} are read)")
        arrays[name] = _load_npy(data, filename) if extension == "npy" else _load_csr(data, filename)
    return StoredArtifact(kind=kind, arrays=arrays, document=_load_document(files[DOCUMENT_FILE]))


class _ViewReader:
    """A read-only, seekable file over a memoryview: parsing an ``.npy`` header or a zip directory copies
    only what is parsed, never the data."""

    def __init__(self, view: memoryview) -> None:
        self.view, self.position = view, 0

    def read(self, size: int = -1) -> bytes:
        stop = len(self.view) if size is None or size < 0 else self.position + size
        chunk = bytes(self.view[self.position:stop])
        self.position += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: len(self.view)}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def seekable(self) -> bool:
        return True


def npy_layout(fileobj: Any, filename: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data_offset)`` from an ``.npy`` header alone, read from ``fileobj``'s
    current position (at 0): what a reader checks before it reads, let alone allocates, any data.
    Unsafe dtypes (objects need pickle) are refused here."""
    try:
        version = np.lib.format.read_magic(fileobj)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fileobj)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fileobj)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except ValueError as exc:
        raise ArtifactIntegrityError(f"{filename} is not a valid .npy file: {exc}") from None
    if dtype.hasobject or dtype.kind not in _SAFE_DTYPE_KINDS or dtype.names is not None:
        raise ArtifactIntegrityError(f"{filename} holds dtype {dtype}; refusing it (object arrays need pickle, "
                                     "which vertebrae never loads)")
    return tuple(shape), bool(fortran), dtype, fileobj.tell()


def check_npy_size(filename: str, shape: tuple[int, ...], dtype: np.dtype, offset: int, size: int) -> None:
    """The file's size must be exactly its header plus ``shape`` × itemsize (Python ints: no overflow)."""
    expected = offset + math.prod(shape) * dtype.itemsize
    if size != expected:
        raise ArtifactIntegrityError(f"{filename} has {size} bytes but its header {shape} {dtype} implies "
                                     f"{expected} (truncated, padded or forged)")


def _load_npy(data: bytes | bytearray | memoryview, filename: str) -> np.ndarray:
    """Parse an ``.npy`` in place (no second copy of a big matrix); a ``bytearray`` gives a writable array."""
    shape, fortran, dtype, offset = npy_layout(_ViewReader(memoryview(data)), filename)
    check_npy_size(filename, shape, dtype, offset, len(data))
    array = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=offset)
    return array.reshape(shape, order="F" if fortran else "C")


#: Where a zip local file header keeps the lengths of the name and extra field that precede the data.
_LOCAL_NAME_LENGTH, _LOCAL_EXTRA_LENGTH = 10, 11


def _stored_members(data: bytes | bytearray) -> dict[str, memoryview]:
    """The members of an ``.npz`` as views of its bytes, read from the zip headers alone.

    vertebrae writes ``.npz`` uncompressed, and only uncompressed members are read: nothing is ever
    decompressed, so no member can be larger than the (size-checked) file.  A compressed member, which
    could expand far beyond its stored size, is refused before a byte of it is inflated.
    """
    import zipfile

    view = memoryview(data).cast("B")
    members = {}
    with zipfile.ZipFile(_ViewReader(view)) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                raise ValueError(f"member {info.filename!r} is compressed or encrypted ({info.file_size} bytes "
                                 f"uncompressed from {info.compress_size}); vertebrae writes and reads only "
                                 "uncompressed .npz members, so it is not inflated")
            header = bytes(view[info.header_offset:info.header_offset + zipfile.sizeFileHeader])
            if len(header) != zipfile.sizeFileHeader:
                raise ValueError(f"member {info.filename!r} lies outside the file")
            fields = struct.unpack(zipfile.structFileHeader, header)
            if fields[0] != zipfile.stringFileHeader:
                raise ValueError(f"member {info.filename!r} has a bad local header")
            start = (info.header_offset + zipfile.sizeFileHeader + fields[_LOCAL_NAME_LENGTH]
                     + fields[_LOCAL_EXTRA_LENGTH])
            stop = start + info.file_size
            if info.compress_size != info.file_size or stop > len(view) or info.filename in members:
                raise ValueError(f"member {info.filename!r} claims {info.file_size} bytes at offset {start}, "
                                 f"outside the {len(view)}-byte file or listed twice")
            members[info.filename] = view[start:stop]
    return members


def _load_csr(data: bytes | bytearray, filename: str) -> Any:
    import zipfile

    try:
        members = _stored_members(data)
        expected = sorted(f"{field}.npy" for field in _CSR_FIELDS)
        if sorted(members) != expected:
            raise ValueError(f"expected entries {expected}, found {sorted(members)}")
        parts = {field: _load_npy(members[f"{field}.npy"], f"member {field}.npy") for field in _CSR_FIELDS}
        shape = parts["shape"]
        if shape.shape != (2,) or shape.dtype.kind not in "iu":
            raise ValueError(f"shape entry must be two integers, got {shape!r}")
        matrix = sparse_module().csr_matrix((parts["data"], parts["indices"], parts["indptr"]),
                                            shape=(int(shape[0]), int(shape[1])), copy=False)
        matrix.check_format(full_check=True)
    except (ArtifactIntegrityError, ValueError, OSError, zipfile.BadZipFile, EOFError, struct.error) as exc:
        raise ArtifactIntegrityError(f"{filename} is not a valid CSR .npz file: {exc}") from None
    return matrix


def strict_loads(data: str | bytes | bytearray) -> Any:
    """Strict JSON (:func:`vertebrae._base.json_codec.strict_json`): NaN, Infinity, overflowing numbers and nesting
    too deep to parse are a ValueError, which the readers turn into a corrupt entry."""
    return json_codec.strict_json(data)


def _load_document(data: bytes | bytearray) -> dict[str, Any]:
    try:
        document = json_codec.decode(strict_loads(bytes(data).decode("utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactIntegrityError(f"{DOCUMENT_FILE} is not strict JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ArtifactIntegrityError(f"{DOCUMENT_FILE} must hold a JSON object, got {type(document).__name__}")
    return document


def output_array(output: str | None) -> str:
    """The array name of one extractor output (``embedding`` for the sole output): file-safe and unique."""
    if output is None:
        return "embedding"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", output)[:64]
    return f"output-{safe}-{hashlib.sha256(output.encode()).hexdigest()[:8]}"


# ----------------------------------------------------------------------------- stage artifacts <-> stored form
@dataclasses.dataclass(frozen=True)
class ArtifactCodec:
    """How one stage's artifact becomes a :class:`StoredArtifact` and back (declared by the stage).

    ``cached=False``: the artifact has a serialized form (for stores shared by staged and
    distributed runs) but the embedding cache does not reuse it (scores are cheap next to
    extraction, and their runtimes should be measured).
    """

    kind: str
    encode: Callable[[Any], StoredArtifact]
    decode: Callable[[StoredArtifact], Any]
    cached: bool = True


def document_codec(kind: str, to_document: Callable[[Any], Mapping[str, Any]],
                   from_document: Callable[[Mapping[str, Any]], Any]) -> ArtifactCodec:
    """A codec for an artifact that is one strict-JSON document (a score payload, a result): never cache-reused."""
    def encode(artifact: Any) -> StoredArtifact:
        return StoredArtifact(kind, {}, dict(to_document(artifact)))

    def decode(stored: StoredArtifact) -> Any:
        try:
            return from_document(stored.document)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactIntegrityError(f"{kind} artifact is malformed: {type(exc).__name__}: {exc}") from None

    return ArtifactCodec(kind, encode, decode, cached=False)

"""Cache-identity helpers shared by the model extractors (standard library only).

A model extractor's ``recipe()`` is the key of its embedding artifact, so it must
change whenever the computation changes: checkpoint *file contents* for models
given as a path (hashed without importing any framework, so a cache hit never
loads one), and the *identity of user functions* (collate/output hooks).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputTypeError, InputValidationError
from .._base.fingerprint import function_document, identified, source_identity

_CHUNK = 1 << 20
#: A file modified this recently may change again within the timestamp resolution: never memoized (git's rule).
_RACY_NS = 2_000_000_000
#: (path, inode, size, mtime_ns, ctime_ns) -> sha256, so repeated recipe() calls hash a model file once.
_FILE_HASHES: dict[tuple[Any, ...], str] = {}


def file_sha256(path: Path) -> str:
    stat = path.stat()
    memo = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if memo in _FILE_HASHES:
        return _FILE_HASHES[memo]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) > _RACY_NS:
        _FILE_HASHES[memo] = digest.hexdigest()
    return digest.hexdigest()


def files_sha256(paths: Sequence[Path]) -> str:
    """One hash over files and directories (every regular file below them, by relative path)."""
    digest = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for file in files:
            relative = file.relative_to(root).as_posix() if root.is_dir() else file.name
            digest.update(f"{relative}\x00{file_sha256(file)}\x00".encode())
    return digest.hexdigest()


#: How an ONNX tensor names its external-data file in the protobuf: a StringStringEntryProto with key "location"
#: (field 1, 8 bytes) followed by its value (field 2, length-prefixed).
_ONNX_LOCATION = re.compile(rb"\x0a\x08location\x12")


def onnx_model_files(model_path: Path, *, where: str) -> tuple[Path, ...]:
    """The ``.onnx`` file and the external-data files its tensors name (relative to its folder), which hold the
    weights of models over 2 GB and of many exports: the identity hashes them all, or new weights would be a cache
    hit.  Read from the protobuf's bytes (memory-mapped), without importing onnx."""
    locations: set[str] = set()
    if not model_path.is_file() or model_path.stat().st_size == 0:  # onnxruntime names what is wrong on load
        return (model_path,)
    with open(model_path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for match in _ONNX_LOCATION.finditer(data):
            length, position, shift = 0, match.end(), 0
            while position < len(data) and shift < 35:  # the value's length, a varint
                byte = data[position]
                length |= (byte & 0x7F) << shift
                position, shift = position + 1, shift + 7
                if byte < 0x80:
                    break
            locations.add(data[position:position + length].decode("utf-8", errors="replace"))
    files = []
    for location in sorted(locations):
        path = model_path.parent / location
        if not path.is_file():
            raise InputValidationError(f"{where}: {str(model_path)!r} keeps weights in the external-data file "
                                       f"{location!r}, which is not beside it ({str(path)!r}); copy it there")
        files.append(path)
    return (model_path, *files)


def check_paths(argument: str, paths: Any, *, where: str) -> tuple[Path, ...]:
    """``paths`` (one path or a sequence) as existing Paths, or a clear error naming the missing one."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise InputValidationError(f"{where}: {argument} is empty; pass the checkpoint file(s) the model is built from")
    result = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise InputTypeError(f"{where}: {argument} must hold paths, got {type(item).__name__}")
        path = Path(item)
        if not path.exists():
            raise InputValidationError(f"{where}: {argument} {str(path)!r} does not exist; pass an existing file or folder")
        result.append(path)
    return tuple(result)


def function_identity(fn: Callable[..., Any] | None) -> dict[str, Any] | None:
    """Qualified name, source hash, defaults and the globals a function reads (``None`` stays ``None``; a function
    without source hashes its source as "")."""
    if fn is None:
        return None
    return function_document(fn) or source_identity(fn, "")


def trusted_function(fn: Callable[..., Any] | None) -> bool:
    """True for ``None`` and functions :func:`~vertebrae._base.fingerprint.canonical` identifies by name, source and
    the globals they read.

    Lambdas, closures, nested functions, partials, callable objects and functions reading a global that
    cannot be hashed can carry state a recipe cannot see, so an extractor using one is not cache-eligible unless the
    user declares a ``cache_identity``.
    """
    if fn is None:
        return True
    document = function_document(fn)
    return document is not None and identified(document)

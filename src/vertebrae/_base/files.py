"""Opening files that must be regular files, without ever blocking.

A FIFO (named pipe) planted where a stored payload or a dataset file belongs makes a plain ``open`` wait
forever for a writer, and a character device (``/dev/zero``) never ends.  :func:`open_regular` opens without
blocking (``O_NONBLOCK``) and checks the type of what it opened (``fstat`` of the open descriptor, so a file
swapped between a check and the open is still caught); anything but a regular file is refused.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from typing import Any, BinaryIO

from ..errors import InputTypeError, InputValidationError, SerializationError

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class NotRegularFileError(OSError):
    """What stands at a path is not a regular file (a FIFO, socket or device): it is never read."""

    def __init__(self, path: str | os.PathLike, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


def file_kind(mode: int) -> str:
    """How a message names a file of ``mode`` that is not regular."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file; :class:`NotRegularFileError` for a FIFO, socket
    or device, ``IsADirectoryError`` for a folder, ``FileNotFoundError`` when absent (links are followed)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, file_kind(mode))
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb")


def check_regular(path: str | os.PathLike) -> None:
    """Raise :class:`NotRegularFileError` when ``path`` exists but is a FIFO, socket or device (a stat, no open)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent or unreachable: the caller's own check names it
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise NotRegularFileError(path, file_kind(mode))


def read_regular(path: str | os.PathLike) -> bytes:
    """Every byte of the regular file at ``path`` (see :func:`open_regular`)."""
    with open_regular(path) as handle:
        return handle.read()


def write_text_atomic(path: Any, text: str) -> pathlib.Path:
    """Replace the file at ``path`` with ``text`` all at once, so a failed write never loses the old file.

    The target is checked before the temporary ``<name>.tmp`` beside it is created (a folder, a missing folder:
    :class:`InputValidationError` naming the path); an OS error while writing removes the temporary file and is
    a :class:`SerializationError` naming the path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
    path = pathlib.Path(path)
    if path.is_dir():
        raise InputValidationError(f"{path} is a folder; give the path of a file inside it")
    if not path.parent.is_dir():
        raise InputValidationError(f"{path}: the folder {path.parent} does not exist; create it first")
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SerializationError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path

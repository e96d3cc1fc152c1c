"""Strict, deterministic JSON for results.

Encodes ordinary JSON values plus dataclasses, paths, enums, NumPy scalars/arrays,
SciPy sparse matrices, tuples and sets (in a stable order).  Mappings with
non-string keys — or string keys that could be mistaken for a marker — become a
tagged list of pairs, so no two keys can collide.  Anything else, recursion, and
non-finite floats raise :class:`SerializationError` naming the path in the object.

Reading is bounded (a file may come from anywhere): :func:`loads` refuses NaN, unbounded integers
and nesting the parser cannot follow, and :func:`decode` builds an array only after its dtype, shape
and data agree and fit :data:`MAX_ARRAY_BYTES` (docs/results.md, "JSON").
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .files import read_regular, write_text_atomic
from .names import json_escaped
from .sparse import is_sparse, sparse_module
from ..errors import SerializationError

_MARKERS = ("__ndarray__", "__sparse__", "__mapping__", "__set__")


def encode(obj: Any, path: str = "$", _active: set[int] | None = None) -> Any:
    """Convert ``obj`` into plain JSON values, or raise naming the failing path."""
    active = set() if _active is None else _active
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        if not math.isfinite(value):
            raise SerializationError(f"{path}: non-finite float {value!r} cannot be written as strict JSON")
        return value
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, enum.Enum):
        return encode(obj.value, path, active)
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    container = isinstance(obj, (Mapping, list, tuple, set, frozenset, np.ndarray)) or dataclasses.is_dataclass(obj)
    if container:
        if id(obj) in active:
            raise SerializationError(f"{path}: recursive container (the object contains itself)")
        active.add(id(obj))
    try:
        if hasattr(obj, "to_dict") and callable(obj.to_dict) and not isinstance(obj, Mapping):
            return encode(obj.to_dict(), path, active)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: encode(getattr(obj, f.name), f"{path}.{f.name}", active) for f in dataclasses.fields(obj)}
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise SerializationError(f"{path}: object arrays are not supported; convert to a list")
            data = obj.tolist()
            return {"__ndarray__": {"dtype": str(obj.dtype), "shape": list(obj.shape),
                                    "data": encode(data, f"{path}.data", active)}}
        if is_sparse(obj):
            csr = obj.tocsr()
            return {"__sparse__": {"format": "csr", "shape": list(csr.shape), "dtype": str(csr.dtype),
                                   "data": encode(csr.data.tolist(), f"{path}.data", active),
                                   "indices": csr.indices.tolist(), "indptr": csr.indptr.tolist()}}
        if isinstance(obj, Mapping):
            plain = all(isinstance(k, str) and k not in _MARKERS for k in obj)
            if plain:
                return {k: encode(v, f"{path}.{k}", active) for k, v in obj.items()}
            pairs = [[encode(k, f"{path}<key {k!r}>", active), encode(v, f"{path}[{k!r}]", active)]
                     for k, v in obj.items()]
            pairs.sort(key=lambda pair: _canonical(pair[0]))
            return {"__mapping__": pairs}
        if isinstance(obj, tuple):
            return [encode(v, f"{path}[{i}]", active) for i, v in enumerate(obj)]
        if isinstance(obj, list):
            return [encode(v, f"{path}[{i}]", active) for i, v in enumerate(obj)]
        if isinstance(obj, (set, frozenset)):
            items = [encode(v, f"{path}{{{v!r}}}", active) for v in obj]
            return {"__set__": sorted(items, key=_canonical)}
    finally:
        if container:
            active.discard(id(obj))
    raise SerializationError(f"{path}: cannot serialize object of type {type(obj).__name__} ({obj!r:.60}); "
                             "convert it to plain data before storing it in a result")


#: Deepest nesting a document may have when decoded (results nest about 15 levels; user diagnostics a few more).
MAX_DEPTH = 100
#: Most bytes one decoded array may take in memory (a dense array, or the stored values of a sparse matrix).
MAX_ARRAY_BYTES = 64 * 2**20
#: dtype kinds an encoded array may declare: what :func:`encode` writes (bool, integers, floats, strings).
ARRAY_KINDS = frozenset("biufU")


def decode(obj: Any, path: str = "$", _depth: int = 0) -> Any:
    """Inverse of :func:`encode` for the tagged forms (arrays, sparse, mappings, sets).

    The document is untrusted: nesting deeper than :data:`MAX_DEPTH` and a tagged form whose parts
    disagree (dtype, shape, data length, a size beyond :data:`MAX_ARRAY_BYTES`) raise
    :class:`SerializationError` naming the path, *before* anything is allocated.
    """
    if _depth > MAX_DEPTH:
        raise SerializationError(f"{path}: nested deeper than {MAX_DEPTH} levels; not a document vertebrae writes")
    if isinstance(obj, list):
        return [decode(v, f"{path}[{i}]", _depth + 1) for i, v in enumerate(obj)]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, payload), = obj.items()
        where = f"{path}.{tag}"
        if tag == "__ndarray__":
            return _array(payload, where)
        if tag == "__sparse__":
            return _sparse(payload, where)
        if tag == "__mapping__":
            pairs = _pairs(payload, where)
            return {_key(decode(k, f"{where}[{i}][0]", _depth + 2), f"{where}[{i}][0]"):
                    decode(v, f"{where}[{i}][1]", _depth + 2) for i, (k, v) in enumerate(pairs)}
        if tag == "__set__":
            if not isinstance(payload, list):
                raise SerializationError(f"{where}: must be a list, got {type(payload).__name__}")
            return {_key(decode(v, f"{where}[{i}]", _depth + 1), f"{where}[{i}]") for i, v in enumerate(payload)}
    return {k: decode(v, f"{path}.{k}", _depth + 1) for k, v in obj.items()}


def _fields(payload: Any, names: tuple[str, ...], path: str) -> dict[str, Any]:
    if not isinstance(payload, dict) or set(payload) != set(names):
        got = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise SerializationError(f"{path}: must be an object with exactly the fields {list(names)}, got {got}")
    return payload


def _dtype(value: Any, kinds: frozenset[str], path: str) -> np.dtype:
    """A declared dtype of an allowed kind (never object, void, datetime: nothing encode writes)."""
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in kinds:
        raise SerializationError(f"{path}.dtype: {value!r} is not an array dtype vertebrae writes (kinds "
                                 f"{''.join(sorted(kinds))}: bool, integer, float, string)")
    return dtype


def _shape(value: Any, path: str, ndim: int | None = None) -> list[int]:
    if (not isinstance(value, list) or len(value) > 32 or (ndim is not None and len(value) != ndim)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)):
        raise SerializationError(f"{path}.shape: {str(value)[:60]} is not a list of "
                                 f"{ndim or 'at most 32'} non-negative integers")
    return value


def _within_limit(count: int, dtype: np.dtype, path: str) -> None:
    if count * dtype.itemsize > MAX_ARRAY_BYTES:
        raise SerializationError(f"{path}: {count} values of dtype {dtype} would take {count * dtype.itemsize} bytes, "
                                 f"more than the {MAX_ARRAY_BYTES} bytes an array in a result may take")


def _nested_shape(data: Any, shape: list[int], path: str) -> None:
    """``data`` is a nested list of exactly ``shape`` with scalar leaves (checked without building anything)."""
    if not shape:
        if isinstance(data, (list, dict)):
            raise SerializationError(f"{path}: a value of the array is a {type(data).__name__}, not a scalar")
        return
    if not isinstance(data, list) or len(data) != shape[0]:
        found = f"{len(data)} items" if isinstance(data, list) else type(data).__name__
        raise SerializationError(f"{path}: the declared shape needs {shape[0]} items here, found {found}")
    for i, item in enumerate(data):
        _nested_shape(item, shape[1:], f"{path}[{i}]")


def _build(make: Any, path: str) -> Any:
    try:
        return make()
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(f"{path}: malformed array ({type(exc).__name__}: {exc})") from None


def _array(payload: Any, path: str) -> np.ndarray:
    fields = _fields(payload, ("data", "dtype", "shape"), path)
    dtype = _dtype(fields["dtype"], ARRAY_KINDS, path)
    shape = _shape(fields["shape"], path)
    _within_limit(math.prod(shape), dtype, path)
    _nested_shape(fields["data"], shape, f"{path}.data")
    return _build(lambda: np.array(fields["data"], dtype=dtype).reshape(shape), path)


def _sparse(payload: Any, path: str) -> Any:
    fields = _fields(payload, ("data", "dtype", "format", "indices", "indptr", "shape"), path)
    if fields["format"] != "csr":
        raise SerializationError(f"{path}.format: {fields['format']!r} is not 'csr'")
    dtype = _dtype(fields["dtype"], ARRAY_KINDS - {"U"}, path)
    rows, _ = _shape(fields["shape"], path, ndim=2)
    data, indices, indptr = fields["data"], fields["indices"], fields["indptr"]
    if not all(isinstance(part, list) for part in (data, indices, indptr)):
        raise SerializationError(f"{path}: data, indices and indptr must be lists")
    if len(indices) != len(data) or len(indptr) != rows + 1:
        raise SerializationError(f"{path}: {len(data)} values, {len(indices)} indices and {len(indptr)} row pointers "
                                 f"do not fit each other and {rows} rows")
    _within_limit(len(data), dtype, path)
    matrix = _build(lambda: sparse_module().csr_matrix(
        (np.array(data, dtype=dtype), np.array(indices, dtype=np.int64), np.array(indptr, dtype=np.int64)),
        shape=tuple(fields["shape"])), path)
    _build(lambda: matrix.check_format(full_check=True), path)  # indices in range, row pointers in order
    return matrix


def _pairs(payload: Any, path: str) -> list[Any]:
    if not isinstance(payload, list) or not all(isinstance(p, list) and len(p) == 2 for p in payload):
        raise SerializationError(f"{path}: must be a list of [key, value] pairs")
    return payload


def _key(value: Any, path: str) -> Any:
    key = _hashable(value)
    try:
        hash(key)
    except TypeError:
        raise SerializationError(f"{path}: a {type(value).__name__} cannot be a key or a set member") from None
    return key


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)


def dumps(obj: Any) -> str:
    """Deterministic text: sorted keys, two-space indent, no NaN; a name that is not valid Unicode (a file name's
    undecodable bytes) is kept as its ``\\uXXXX`` escape, so the text always encodes as UTF-8."""
    return json_escaped(json.dumps(encode(obj), sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False)) + "\n"


def write(obj: Any, path: str | pathlib.Path) -> pathlib.Path:
    """Serialize fully *before* touching the file, then replace it atomically."""
    return write_text_atomic(path, dumps(obj))


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite constant {name} (strict JSON has none)")


def _finite_float(text: str) -> float:
    """A JSON number as a float, refused when it overflows to infinity (``1e999``: NaN's back door)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} overflows to infinity (strict JSON has no non-finite value)")
    return value


def strict_json(text: str | bytes | bytearray) -> Any:
    """``json.loads`` refusing what the writer never writes: NaN, Infinity and numbers that overflow to infinity
    (a ValueError, as for malformed JSON); nesting the parser cannot follow is a ValueError too, not a
    RecursionError."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nests too deeply to be read; not a document vertebrae writes") from None


def loads(text: str, source: str = "the document") -> Any:
    """Strict, bounded parse: NaN/Infinity (written or overflowing), integers beyond Python's digit limit and nesting
    the parser cannot follow are a SerializationError naming ``source`` (never a RecursionError or a raw
    ValueError)."""
    try:
        return strict_json(text)
    except ValueError as exc:  # JSONDecodeError, an integer with too many digits, NaN/Infinity
        reason = (f"an integer has more than {sys.get_int_max_str_digits()} digits" if "integer string" in str(exc)
                  else str(exc))
        raise SerializationError(f"{source} is not valid JSON ({reason})") from None


def read(path: str | pathlib.Path) -> Any:
    """The parsed JSON at ``path`` (see :func:`loads`); a path that is no readable regular file, or text that is
    not UTF-8, is a SerializationError naming the path (a FIFO is never opened for a blocking read)."""
    try:
        text = read_regular(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{path} is not UTF-8 text ({exc})") from None
    except FileNotFoundError:
        raise SerializationError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise SerializationError(f"{path} is a folder, not a JSON file") from None
    except OSError as exc:  # NotRegularFileError, permissions
        raise SerializationError(f"{path} cannot be read: {exc.strerror}") from None
    return loads(text, str(path))

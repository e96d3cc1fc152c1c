"""Strict, deterministic JSON for results.

Encodes ordinary JSON values plus dataclasses, paths, enums, NumPy scalars/arrays,
SciPy sparse matrices, tuples and sets (in a stable order).  Mappings with
non-string keys — or string keys that could be mistaken for a marker — become a
tagged list of pairs, so no two keys can collide.  Anything else, recursion, and
non-finite floats raise :class:`SerializationError` naming the path in the object.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._sparse import is_sparse, sparse_module
from .errors import SerializationError

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


def decode(obj: Any) -> Any:
    """Inverse of :func:`encode` for the tagged forms (arrays, sparse, mappings, sets)."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (tag, payload), = obj.items()
        if tag == "__ndarray__":
            return np.array(payload["data"], dtype=payload["dtype"]).reshape(payload["shape"])
        if tag == "__sparse__":
            return sparse_module().csr_matrix((np.array(payload["data"], dtype=payload["dtype"]), payload["indices"],
                                      payload["indptr"]), shape=tuple(payload["shape"]))
        if tag == "__mapping__":
            return {_hashable(decode(k)): decode(v) for k, v in payload}
        if tag == "__set__":
            return {_hashable(decode(v)) for v in payload}
    return {k: decode(v) for k, v in obj.items()}


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)


def dumps(obj: Any) -> str:
    """Deterministic text: sorted keys, two-space indent, no NaN."""
    return json.dumps(encode(obj), sort_keys=True, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write(obj: Any, path: str | pathlib.Path) -> pathlib.Path:
    """Serialize fully *before* touching the file, then replace it atomically."""
    path = pathlib.Path(path)
    text = dumps(obj)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def read(path: str | pathlib.Path) -> Any:
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))

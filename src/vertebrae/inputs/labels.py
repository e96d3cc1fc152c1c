"""Semantic label catalog: typed labels <-> stable string keys <-> display text.

Python treats ``1 == True == 1.0`` and hashes them alike, and ``str()`` maps ``1`` and
``"1"`` to the same text.  Neither may decide class identity, so every label gets a
*semantic key* built from its type and a canonical text (``"int:1"``, ``"str:1"``,
``"bool:true"``).  Dependencies only ever see keys; reports translate them back.
Tuple keys hold their parts as a JSON list of part keys, so a separator inside a
string part can never be read as a part boundary: distinct labels give distinct keys.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputTypeError, InputValidationError

#: Prefix that marks a string as a semantic key when it crosses a boundary
#: (custom metrics, workers), so it can never be confused with a user's raw string.
KEY_MARKER = "vk:"
#: Version of the key encoding, written with every catalog.  Version 2 encodes tuple
#: parts as a JSON list (version 1 joined them with commas, which was not injective).
KEY_SCHEMA_VERSION = 2


def _python_scalar(value: Any) -> Any:
    """NumPy scalars become their Python equivalent (np.int64 -> int, np.str_ -> str), also inside tuples
    (hierarchy paths zipped from arrays), so displays never read ``np.str_('cat')``."""
    if isinstance(value, tuple):
        return tuple(_python_scalar(part) for part in value)
    if isinstance(value, np.generic):
        if isinstance(value, np.datetime64):
            return value  # handled by the datetime64 branch
        return value.item()
    return value


def semantic_key(value: Any) -> str:
    """Return the stable, type-tagged key of one label value.

    Raises ``InputValidationError`` for missing labels (None/NaN) and
    ``InputTypeError`` for values with no stable identity.
    """
    value = _python_scalar(value)
    if value is None:
        raise InputValidationError("label is None; every row needs a label (drop the row or give it a class)")
    if isinstance(value, bool):
        return f"bool:{'true' if value else 'false'}"
    if isinstance(value, int):
        return f"int:{value}"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputValidationError(f"label {value!r} is not a valid class (NaN/inf); drop the row or give it a class")
        return f"float:{value!r}"
    if isinstance(value, str):
        return f"str:{value}"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InputValidationError(f"label {value!r} is not a valid class (NaN/inf Decimal)")
        return f"decimal:{value}"
    if isinstance(value, uuid.UUID):
        return f"uuid:{value}"
    if isinstance(value, _dt.datetime):
        return f"datetime:{value.isoformat()}"
    if isinstance(value, _dt.date):
        return f"date:{value.isoformat()}"
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            raise InputValidationError("label is NaT; every row needs a label")
        return f"datetime64:{value}"
    if isinstance(value, bytes):
        return f"bytes:{value.hex()}"
    if isinstance(value, tuple):
        return "tuple:" + json.dumps([semantic_key(v) for v in value], ensure_ascii=False, separators=(",", ":"))
    raise InputTypeError(
        f"label {value!r} of type {type(value).__name__} has no stable identity; use int, str, bool, float, "
        "date/datetime, UUID, Decimal, bytes or tuples of those"
    )


def decode_key(key: str) -> Any:
    """Rebuild the typed value of a semantic key (inverse of :func:`semantic_key`)."""
    kind, _, text = key.partition(":")
    if kind == "bool":
        return text == "true"
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "str":
        return text
    if kind == "decimal":
        return decimal.Decimal(text)
    if kind == "uuid":
        return uuid.UUID(text)
    if kind == "datetime":
        return _dt.datetime.fromisoformat(text)
    if kind == "date":
        return _dt.date.fromisoformat(text)
    if kind == "datetime64":
        return np.datetime64(text)
    if kind == "bytes":
        return bytes.fromhex(text)
    if kind == "tuple":
        try:
            parts = json.loads(text)
        except ValueError:
            parts = None
        if not isinstance(parts, list) or not all(isinstance(part, str) for part in parts):
            raise InputValidationError(f"{key!r} is not a semantic label key of schema {KEY_SCHEMA_VERSION} (tuple "
                                       "parts must be a JSON list of keys)")
        return tuple(decode_key(part) for part in parts)
    raise InputValidationError(f"{key!r} is not a semantic label key")


def _display(value: Any) -> str:
    return value.hex() if isinstance(value, bytes) else str(value)


def _type_name(key: str) -> str:
    return key.partition(":")[0]


@dataclass(frozen=True)
class LabelEntry:
    key: str
    value: Any
    display: str


class LabelCatalog:
    """Ordered catalog of the classes (or multi-label names) of one dataset.

    Order is the sorted order of keys by (type, value), so it does not depend on row
    order.  Display texts that would collide (``1`` vs ``"1"``) carry their type.
    """

    def __init__(self, values: Iterable[Any]) -> None:
        by_key: dict[str, Any] = {}
        for value in values:
            key = semantic_key(value)
            by_key.setdefault(key, _python_scalar(value))
        keys = sorted(by_key, key=_sort_key)
        plain = {key: _display(by_key[key]) for key in keys}
        counts: dict[str, int] = {}
        for text in plain.values():
            counts[text] = counts.get(text, 0) + 1
        self._entries = tuple(
            LabelEntry(key, by_key[key], plain[key] if counts[plain[key]] == 1 else f"{plain[key]} ({_type_name(key)})")
            for key in keys
        )
        self._index = {entry.key: i for i, entry in enumerate(self._entries)}

    # -- lookups -------------------------------------------------------------
    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(e.key for e in self._entries)

    @property
    def entries(self) -> tuple[LabelEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def display(self, key: str) -> str:
        return self._entries[self._index[key]].display

    def value(self, key: str) -> Any:
        return self._entries[self._index[key]].value

    # -- serialization -------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"key_schema_version": KEY_SCHEMA_VERSION,
                "entries": [{"key": e.key, "display": e.display} for e in self._entries]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LabelCatalog":
        version = data.get("key_schema_version", 1)
        if version != KEY_SCHEMA_VERSION and any(item["key"].startswith("tuple:") for item in data["entries"]):
            # Only tuple keys changed between schema versions; any other catalog reads as it is.
            raise InputValidationError(f"label catalog of key schema {version} holds tuple keys, which schema "
                                       f"{KEY_SCHEMA_VERSION} encodes differently; re-run the benchmark to rebuild it")
        catalog = cls.__new__(cls)
        catalog._entries = tuple(
            LabelEntry(item["key"], _safe_decode(item["key"]), item["display"]) for item in data["entries"]
        )
        catalog._index = {e.key: i for i, e in enumerate(catalog._entries)}
        return catalog

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelCatalog) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"LabelCatalog({[e.display for e in self._entries]!r})"


def _safe_decode(key: str) -> Any:
    try:
        return decode_key(key)
    except (ValueError, InputValidationError):
        return key


def _sort_key(key: str) -> tuple:
    kind = _type_name(key)
    value = decode_key(key)
    if kind in {"int", "float", "decimal", "bool"}:
        return (kind, 0, value, key)
    if kind in {"date", "datetime", "datetime64"}:
        return (kind, 0, str(value), key)
    return (kind, 1, 0, key)


def mark(key: str) -> str:
    """Semantic key as it crosses the custom-metric / worker boundary."""
    return KEY_MARKER + key


def unmark(marked: str) -> str:
    if not marked.startswith(KEY_MARKER):
        raise InputValidationError(f"{marked!r} is not a marked semantic label key (expected prefix {KEY_MARKER!r})")
    return marked[len(KEY_MARKER):]


def label_value(label: Any) -> Any:
    """The user's own label behind a label a metric receives, for messages: a marked key decoded (``'vk:int:1'``
    -> ``1``), so a message names the class as the user wrote it; anything else (a raw label of a direct metric
    call, or text that only looks marked) as it is."""
    if not isinstance(label, str) or not label.startswith(KEY_MARKER):
        return label
    try:
        return decode_key(unmark(label))
    except (ValueError, ArithmeticError):  # not a key of any kind (decimal.InvalidOperation is an ArithmeticError)
        return label

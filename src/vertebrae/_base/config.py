"""One validation helper shared by every user-facing configuration.

Configs are frozen dataclasses: validated in ``__post_init__``, immutable, and
round-tripped through plain dicts (``to_dict`` / ``from_dict``) that reject unknown
fields.  Keeping this in one place means every config reports errors the same way.

Each config has one :meth:`Config.fingerprint`: its fields minus the ones it declares
``speed_only`` (a thread limit, a chunk or block size, a worker count: each proven by a test
in tests/test_key_completeness.py to leave the results bitwise identical).  Artifact keys hash
it and stored artifacts record it, so a store shared by runs with different speed settings
serves the same bytes to each.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from ..errors import ConfigError, ConfigTypeError

C = TypeVar("C", bound="Config")


class FrozenDict(Mapping):
    """A read-only, picklable, hashable mapping used for dict-valued config fields."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenDict is immutable")

    def __hash__(self) -> int:
        return hash(json.dumps(_plain(self._data), sort_keys=True, default=repr))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __reduce__(self):
        return (FrozenDict, (self._data,))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class: subclasses declare fields and implement ``_validate``."""

    #: Fields that existed once and were removed on purpose: name -> explanation.
    _removed_fields = {}
    #: Fields that change only how fast a result is computed, never its bytes: left out of the fingerprint.
    speed_only = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "Config":
        """Reject removed and unknown keywords with the same message ``from_dict`` gives."""
        cls._check_field_names(kwargs)
        return super().__new__(cls)

    @classmethod
    def _check_field_names(cls, names: Any) -> None:
        """One check for keywords and dict keys: removed fields explain why, unknown ones list the allowed."""
        allowed = [f.name for f in dataclasses.fields(cls) if f.init]
        for name in names:
            if name in cls._removed_fields:
                raise ConfigError(f"{cls.__name__} field {name!r} was removed: {cls._removed_fields[name]}")
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{cls.__name__} got unknown field {name!r}{hint}; allowed fields: {sorted(allowed)}")

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:  # pragma: no cover - overridden
        pass

    def _set(self, name: str, value: Any) -> None:
        """Normalize a field inside ``_validate`` (frozen dataclasses forbid plain assignment)."""
        object.__setattr__(self, name, value)

    def replace(self: C, **changes: Any) -> C:
        """Return a validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-safe dict of every field."""
        return {f.name: self._encode_field(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)}

    def fingerprint(self) -> dict[str, Any]:
        """What keys hash and stored artifacts record: every field of :meth:`to_dict` but the speed-only ones."""
        return {name: value for name, value in self.to_dict().items() if name not in self.speed_only}

    def _encode_field(self, name: str, value: Any) -> Any:
        return _plain(value)

    @classmethod
    def _decode_fields(cls, data: dict[str, Any]) -> dict[str, Any]:
        return data

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build a config from a plain dict, rejecting unknown and removed fields."""
        if not isinstance(data, Mapping):
            raise ConfigTypeError(f"{cls.__name__}.from_dict expects a mapping, got {type(data).__name__}")
        cls._check_field_names(data)
        return cls(**cls._decode_fields(dict(data)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls: type[C], text: str) -> C:
        return cls.from_dict(json.loads(text))


def check_config(argument: str, value: Any, kind: type, *, default: Any = None, hint: str = "") -> Any:
    """A config argument of a front door: ``value`` when it is a ``kind``, ``default`` when it is None.

    Anything else raises :class:`ConfigTypeError` naming the argument, the expected class and ``hint``.
    """
    if value is None:
        return default
    if not isinstance(value, kind):
        article = "an" if kind.__name__[0] in "AEIOU" else "a"
        raise ConfigTypeError(f"{argument} must be {article} {kind.__name__} or None, got {type(value).__name__}"
                              + (f"; {hint}" if hint else ""))
    return value


# ---------------------------------------------------------------- field checks
def _where(owner: str, field: str) -> str:
    return f"{owner}.{field}"


def check_int(owner: str, field: str, value: Any, *, minimum: int | None = None, allow_none: bool = False) -> int | None:
    """Accept real integers only (``True`` and ``5.0`` are rejected)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigTypeError(f"{_where(owner, field)} must be an integer{' or None' if allow_none else ''}, "
                              f"got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{_where(owner, field)} must be >= {minimum}, got {value}")
    return value


def check_float(owner: str, field: str, value: Any, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False, allow_none: bool = False) -> float | None:
    """Accept finite real numbers within an interval."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigTypeError(f"{_where(owner, field)} must be a finite number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ConfigError(f"{_where(owner, field)} must be a finite number, got {value!r}")
    value = float(value)
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if bad_low or bad_high:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ConfigError(
            f"{_where(owner, field)} must be in {lo}{'-inf' if low is None else low}, "
            f"{'inf' if high is None else high}{hi}, got {value}"
        )
    return value


def check_positive_floats(owner: str, field: str, value: Any) -> tuple[float, ...]:
    """A non-empty list, tuple or 1-D array of finite positive numbers (a grid), as a tuple of floats; a string, a
    mapping, a set (no order) or a 0-d or 2-D array is refused naming the field."""
    shape = getattr(value, "shape", None)
    if (isinstance(value, (str, bytes, Mapping, set, frozenset)) or not hasattr(value, "__iter__")
            or (shape is not None and len(shape) != 1)):
        raise ConfigTypeError(f"{_where(owner, field)} must be a non-empty list of positive numbers, got {value!r}")
    numbers_ = tuple(check_float(owner, f"{field}[{i}]", v, low=0.0, low_open=True) for i, v in enumerate(value))
    if not numbers_:
        raise ConfigError(f"{_where(owner, field)} must be a non-empty list of positive numbers, got []")
    return numbers_


def check_choice(owner: str, field: str, value: Any, choices: tuple) -> Any:
    if value not in choices:
        raise ConfigError(f"{_where(owner, field)} must be one of {list(choices)}, got {value!r}")
    return value


def check_bool(owner: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{_where(owner, field)} must be True or False, got {value!r}")
    return value


def check_seed(owner: str, field: str, value: Any, *, allow_none: bool = True) -> int | None:
    """Seeds are integers in [0, 2**32 - 1] (what numpy and sklearn accept everywhere)."""
    seed = check_int(owner, field, value, minimum=0, allow_none=allow_none)
    if seed is not None and seed > 2**32 - 1:
        raise ConfigError(f"{_where(owner, field)} must be <= 2**32 - 1, got {seed}")
    return seed


def check_str_mapping(owner: str, field: str, value: Any, *, forbidden: Mapping[str, str] | None = None) -> FrozenDict:
    """A mapping with string keys (e.g. keyword arguments forwarded to a dependency)."""
    if value is None:
        return FrozenDict()
    if not isinstance(value, Mapping):
        raise ConfigTypeError(f"{_where(owner, field)} must be a mapping of keyword arguments, "
                              f"got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigTypeError(f"{_where(owner, field)} keys must be strings, got {key!r}")
        if forbidden and key in forbidden:
            raise ConfigError(f"{_where(owner, field)} must not contain {key!r}: {forbidden[key]}")
    return FrozenDict(value)

"""What a result document must hold before it loads: a small declarative schema and its one checker.

Reports, DataFrames and ``vertebrae compare`` read the fields of a loaded document directly, so each
result family declares the fields they read (types, ranges, required keys) and checks a document
against that declaration in ``from_dict``: whatever loads renders, and a document that could not
render is refused on load with a :class:`SerializationError` naming the path.  Fields no renderer
reads are not declared and pass as they are (see docs/results.md, "Loading checks what renders").

A schema is plain data:

* a type (``str``, ``bool``, ``dict``, ``list``): the value is an instance (``dict`` any JSON object);
* :class:`Number` (``NUMBER``, ``INT``, ``PROBABILITY`` ...): a finite float, or an int within 64 bits, never a bool;
* ``{key: schema}``: a JSON object holding every key (``"key?"``: the key may be absent);
* ``[schema]``: a list whose every item matches;
* :func:`nullable`, :class:`MapOf`, :class:`Choice`, :class:`AnyOf`, :class:`Switch`: None allowed,
  objects keyed by any string, one of a few values, one of several schemas, a case per value of a key;
* a callable ``check(value, path)`` for the rare rule across fields; it raises :class:`SerializationError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import SerializationError

ANY = object  # every value is an object: the schema of a field renderers read without a constraint


@dataclasses.dataclass(frozen=True)
class Number:
    """A finite number (an int, or a float); ``integer`` asks for an int, ``low``/``high`` bound it."""

    integer: bool = False
    low: float | None = None
    high: float | None = None


@dataclasses.dataclass(frozen=True)
class Nullable:
    schema: Any


@dataclasses.dataclass(frozen=True)
class MapOf:
    """A JSON object with any keys, each value matching ``values``."""

    values: Any


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of a few literal values."""

    values: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class AnyOf:
    """A value matching at least one of ``schemas`` (tried in order)."""

    schemas: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Switch:
    """A JSON object checked against the case named by its ``key`` (which must be one of the cases)."""

    key: str
    cases: Mapping[Any, Any]


#: The integers a result holds fit numpy's int64 (a run writes nothing larger; 10**40 broke a figure's arithmetic).
INT64 = (-2**63, 2**63 - 1)
NUMBER = Number()
INT = Number(integer=True)
COUNT = Number(integer=True, low=0)
PROBABILITY = Number(low=0.0, high=1.0)


def nullable(schema: Any) -> Nullable:
    return Nullable(schema)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def fail(path: str, message: str) -> None:
    """Refuse a document at ``path`` (also for a family's own cross-field check that names a nested field)."""
    raise SerializationError(f"{path}: {message}; the file is incomplete, edited by hand or not written by this "
                             "version of vertebrae")


def check_number(value: Any, number: Number, path: str) -> None:
    """``value`` is a finite number of the declared kind and range."""
    kinds = (int,) if number.integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        fail(path, f"malformed value (expected {'an integer' if number.integer else 'a number'}, got {_kind(value)} "
                    f"{value!r:.40})")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        finite = False
    if not finite:
        fail(path, f"malformed value (expected a finite number, got {value!r:.40})")
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:  # numpy (and matplotlib) overflow on it
        fail(path, f"malformed value (expected an integer within 64 bits, got {value!r:.40})")
    if (number.low is not None and value < number.low) or (number.high is not None and value > number.high):
        fail(path, f"malformed value ({value!r} is outside [{number.low}, {number.high}])")


def check(value: Any, schema: Any, path: str = "$") -> None:
    """Check ``value`` against ``schema`` (see the module docstring); the first mismatch raises with its path."""
    if schema is ANY:
        return
    if isinstance(schema, Nullable):
        if value is not None:
            check(value, schema.schema, path)
    elif isinstance(schema, Number):
        check_number(value, schema, path)
    elif isinstance(schema, type):
        expected = Mapping if schema is dict else schema
        if not isinstance(value, expected) or (schema is int and isinstance(value, bool)):
            fail(path, f"malformed value (expected {'an object' if schema is dict else schema.__name__}, "
                        f"got {_kind(value)})")
    elif isinstance(schema, dict):
        check(value, dict, path)
        for key, field in schema.items():
            name = key.rstrip("?")
            if name in value:
                check(value[name], field, f"{path}.{name}")
            elif not key.endswith("?"):
                fail(path, f"missing key {name!r}")
    elif isinstance(schema, list):
        check(value, list, path)
        for i, item in enumerate(value):
            check(item, schema[0], f"{path}[{i}]")
    elif isinstance(schema, MapOf):
        check(value, dict, path)
        for key, item in value.items():
            check(item, schema.values, f"{path}.{key}")
    elif isinstance(schema, Choice):
        if not any(value == v and type(value) is type(v) for v in schema.values):
            fail(path, f"malformed value (expected one of {list(schema.values)}, got {value!r:.40})")
    elif isinstance(schema, AnyOf):
        errors = []
        for option in schema.schemas:
            try:
                return check(value, option, path)
            except SerializationError as exc:
                errors.append(str(exc).split(";")[0])
        fail(path, "malformed value (none of the allowed forms: " + " | ".join(errors) + ")")
    elif isinstance(schema, Switch):
        check(value, dict, path)
        choice = value.get(schema.key)
        check(choice, Choice(tuple(schema.cases)), f"{path}.{schema.key}")
        check(value, schema.cases[choice], path)
    elif callable(schema):
        schema(value, path)
    else:  # pragma: no cover - a schema is written by us
        raise TypeError(f"not a schema: {schema!r}")


def rule(test: Callable[[Any], bool], message: str) -> Callable[[Any, str], None]:
    """A check across fields: ``test(value)`` must hold, else ``message`` at the value's path."""
    def checked(value: Any, path: str) -> None:
        if not test(value):
            fail(path, f"malformed value ({message})")

    return checked


def both(*schemas: Any) -> Callable[[Any, str], None]:
    """Every schema in turn (a shape, then a rule across its fields)."""
    def checked(value: Any, path: str) -> None:
        for schema in schemas:
            check(value, schema, path)

    return checked

"""Strict deterministic JSON: supported types, collision-safe keys, path-aware errors."""

from __future__ import annotations

import dataclasses
import enum
import json
import pathlib

import numpy as np
import pytest
from scipy import sparse

from vertebrae import SerializationError
from vertebrae._base import json_codec


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


def test_supported_values_round_trip():
    value = {"array": np.arange(6, dtype=np.int32).reshape(2, 3), "scalar": np.float32(0.5), "flag": np.bool_(True),
             "sparse": sparse.csr_matrix(np.eye(3)), "tuple": (1, 2), "set": {3, 1, 2}, "path": pathlib.Path("/tmp/x"),
             "enum": Color.RED, "point": Point(1, 2.5), "keys": {1: "int", "1": "str", (1, 2): "tuple"}}
    encoded = json_codec.encode(value)
    text = json.dumps(encoded, allow_nan=False)
    decoded = json_codec.decode(json.loads(text))
    assert (decoded["array"] == value["array"]).all() and decoded["array"].dtype == np.int32
    assert (decoded["sparse"] != value["sparse"]).nnz == 0
    assert decoded["set"] == {1, 2, 3} and decoded["tuple"] == [1, 2]
    assert decoded["keys"] == {1: "int", "1": "str", (1, 2): "tuple"}  # 1 and "1" do not collide
    assert decoded["path"] == "/tmp/x" and decoded["enum"] == "red" and decoded["point"] == {"x": 1, "y": 2.5}
    assert encoded["set"] == {"__set__": [1, 2, 3]}


def test_sets_and_mappings_have_a_stable_order():
    a = json_codec.dumps({"s": {"b", "a", "c"}, 2: 1, 1: 2})
    b = json_codec.dumps({1: 2, 2: 1, "s": {"c", "a", "b"}})
    assert a == b


def test_marker_like_user_keys_cannot_collide():
    tricky = {"__ndarray__": {"dtype": "int64", "shape": [1], "data": [1]}}
    assert json_codec.decode(json.loads(json.dumps(json_codec.encode(tricky)))) == tricky


@pytest.mark.parametrize("value, path", [
    ({"a": [1.0, float("nan")]}, r"\$\.a\[1\]: non-finite"),
    ({"a": {"b": float("inf")}}, r"\$\.a\.b: non-finite"),
    ({"a": object()}, r"\$\.a: cannot serialize object of type object"),
    ({"m": {"k": np.array([object()])}}, r"\$\.m\.k: object arrays"),
])
def test_errors_name_the_path(value, path):
    with pytest.raises(SerializationError, match=path):
        json_codec.encode(value)


def test_recursion_is_detected():
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(SerializationError, match=r"\$\[1\]: recursive"):
        json_codec.encode(loop)


def test_write_does_not_touch_the_file_when_serialization_fails(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("previous")
    with pytest.raises(SerializationError):
        json_codec.write({"bad": float("nan")}, target)
    assert target.read_text() == "previous"

"""Label inference and the semantic key encoding (issue 11, items 1-3)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import MultiLabelBinarizer

from vertebrae import InputValidationError, LabelCatalog
from vertebrae.inputs.labels import decode_key, semantic_key
from vertebrae.inputs.targets import build_targets


# ------------------------------------------------------------------ item 1: label sets
@pytest.mark.parametrize("container", [tuple, list, set, frozenset])
def test_sequences_of_label_collections_are_multilabel(container):
    rows = [("a",), ("a", "b"), ("b",), ("c", "a"), ("c",), ("b", "c")]
    targets = build_targets([container(r) for r in rows])
    assert targets.target_type == "multi_label"
    # Independent reference: scikit-learn's MultiLabelBinarizer reads the same input as label sets.
    reference = MultiLabelBinarizer().fit(rows)
    assert [decode_key(k) for k in targets.catalog.keys] == list(reference.classes_)
    assert (targets.indicator.toarray() == reference.transform(rows)).all()


def test_object_array_and_series_of_label_sets_are_multilabel():
    y = np.empty(4, dtype=object)
    y[:] = [("a",), ("a", "b"), ("b",), ("b", "a")]
    assert build_targets(y).target_type == "multi_label"
    assert build_targets(pd.Series(list(y))).target_type == "multi_label"


def test_tuple_single_labels_need_the_explicit_target_type():
    paths = [("animal", "cat"), ("animal", "cat"), ("animal", "dog"), ("animal", "dog")]
    targets = build_targets(paths, target_type="single_label")
    assert targets.target_type == "single_label"
    assert [decode_key(k) for k in targets.catalog.keys] == [("animal", "cat"), ("animal", "dog")]
    assert targets.codes.tolist() == [0, 0, 1, 1]


# ------------------------------------------------------------------ item 2: continuous targets
@pytest.mark.parametrize("as_text", [False, True])
def test_continuous_float_target_points_to_regression(as_text):
    y = np.random.default_rng(0).normal(size=178).round(4)
    with pytest.raises(InputValidationError, match=r'looks continuous.*target_type="regression"'):
        build_targets([str(v) for v in y] if as_text else y)
    assert build_targets(y, target_type="regression").target_type == "regression"


def test_float_class_ids_keep_the_small_class_message():
    with pytest.raises(InputValidationError, match="fewer than 2 samples") as info:
        build_targets([1.0, 1.0, 2.0, 2.0, 3.0])
    assert "continuous" not in str(info.value)


# ------------------------------------------------------------------ item 3: injective keys
def test_separator_inside_a_string_does_not_collide():
    assert semantic_key(("a,int:3",)) != semantic_key(("a", 3))
    assert decode_key(semantic_key(("a,int:3",))) == ("a,int:3",)
    assert decode_key(semantic_key(("a", 3))) == ("a", 3)


_TRICKY = ["", ",", ":", "(", ")", "[", "]", '"', "\\", "int:3", "a,int:3", "str:x", "tuple:[]", ")],(", '"],["',
           "é", "\n"]


def _random_value(rng: np.random.Generator, depth: int = 0):
    kind = rng.integers(0, 10 if depth < 3 else 9)
    if kind == 0:
        return int(rng.integers(-10**6, 10**6)) * int(rng.choice([1, 10**20]))
    if kind == 1:
        parts = rng.choice(_TRICKY, size=rng.integers(0, 4)).tolist()
        return "".join(parts) + str(rng.integers(0, 3))
    if kind == 2:
        return bool(rng.integers(0, 2))
    if kind == 3:
        return float(rng.choice([0.0, -0.0, 1.0, 1e-300, 3.5, -2.25])) * float(rng.integers(1, 4))
    if kind == 4:
        return dt.date(2000 + int(rng.integers(0, 30)), int(rng.integers(1, 13)), int(rng.integers(1, 28)))
    if kind == 5:
        return dt.datetime(2020, 1, int(rng.integers(1, 28)), int(rng.integers(0, 24)), microsecond=int(rng.integers(0, 3)))
    if kind == 6:
        return uuid.UUID(int=int(rng.integers(0, 2**62)))
    if kind == 7:
        return decimal.Decimal(str(rng.choice(["1", "1.0", "1.00", "-0.5", "3E+2", "2.5"])))
    if kind == 8:
        return bytes(rng.integers(0, 256, size=rng.integers(0, 3)).tolist())
    return tuple(_random_value(rng, depth + 1) for _ in range(rng.integers(0, 4)))


def _identity(value):
    """Structural identity independent of the key encoding: type plus canonical text, recursively."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_identity(v) for v in value))
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, decimal.Decimal):
        return ("decimal", str(value))
    return (type(value).__name__, value)


def test_keys_are_injective_and_decode_back_over_random_nested_values():
    rng = np.random.default_rng(11)
    values = [_random_value(rng) for _ in range(2000)]
    values += [tuple(_random_value(rng, 1) for _ in range(rng.integers(1, 4))) for _ in range(2000)] + [("a,int:3",), ("a", 3), (1,), (True,), ((1,),), ("1",)]
    key_of: dict[object, str] = {}
    for value in values:
        key = semantic_key(value)
        assert _identity(decode_key(key)) == _identity(value)  # decoding gives the value back, types included
        key_of.setdefault(_identity(value), key)
    assert len(set(key_of.values())) == len(key_of)  # distinct values, distinct keys
    assert sum(isinstance(v, tuple) and len(v) > 1 for v in values) > 1000  # the nested cases were exercised


def test_catalog_records_the_key_schema_and_rejects_old_tuple_keys():
    from vertebrae.inputs.labels import KEY_SCHEMA_VERSION

    catalog = LabelCatalog([("a", 3), ("a,int:3",)])
    data = catalog.to_dict()
    assert data["key_schema_version"] == KEY_SCHEMA_VERSION == 2
    assert LabelCatalog.from_dict(data) == catalog and len(catalog) == 2
    old = {"entries": [{"key": "tuple:(str:a,int:3)", "display": "('a', 3)"}]}  # written by schema 1
    with pytest.raises(InputValidationError, match="key schema 1"):
        LabelCatalog.from_dict(old)
    plain = {"entries": [{"key": "int:1", "display": "1"}]}  # non-tuple keys did not change
    assert LabelCatalog.from_dict(plain).keys == ("int:1",)

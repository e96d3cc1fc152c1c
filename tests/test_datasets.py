"""BenchmarkDataset, targets, groups, identity and the label catalog: every rejection is tested."""

from __future__ import annotations

import datetime
import decimal
import uuid
import warnings

import numpy as np
import pytest
from scipy import sparse

from vertebrae import (BenchmarkDataset, DataWarning, DatasetIdentity, InputTypeError, InputValidationError,
                       LabelCatalog)
from vertebrae.inputs.labels import decode_key, semantic_key


def test_label_catalog_keeps_typed_values_distinct_and_disambiguates_display():
    values = [1, "1", True, 1.5, datetime.date(2024, 1, 1), uuid.UUID(int=7), decimal.Decimal("1.50"), np.int64(2)]
    catalog = LabelCatalog(values)
    assert len(catalog) == 8
    assert catalog.display("int:1") == "1 (int)" and catalog.display("str:1") == "1 (str)"
    assert catalog.display("bool:true") == "True" and catalog.display("int:2") == "2"
    for entry in catalog.entries:
        assert semantic_key(decode_key(entry.key)) == entry.key
    assert LabelCatalog.from_dict(catalog.to_dict()) == catalog
    assert semantic_key(np.int64(1)) == semantic_key(1) != semantic_key(True) != semantic_key(1.0)


def test_single_label_dataset_summary(identity):
    X = np.random.default_rng(0).normal(size=(6, 3))
    ds = BenchmarkDataset.from_embeddings(X, ["b", "a", "b", "a", "c", "c"], identity=identity)
    s = ds.summary()
    assert s["target_type"] == "single_label" and s["n_classes"] == 3
    assert s["class_names"] == ["a", "b", "c"] and s["class_counts"] == {"str:a": 2, "str:b": 2, "str:c": 2}


def test_multilabel_forms_agree(identity):
    X = np.random.default_rng(0).normal(size=(6, 3))
    sets = [{"x"}, {"x", "y"}, {"y"}, {"z", "x"}, {"z"}, {"y", "z"}]
    names = ["x", "y", "z"]
    dense = np.array([[n in s for n in names] for s in sets], dtype=int)
    a = BenchmarkDataset.from_embeddings(X, sets, identity=identity)
    b = BenchmarkDataset.from_embeddings(X, dense, label_names=names, identity=identity)
    c = BenchmarkDataset.from_embeddings(X, sparse.csr_matrix(dense), label_names=names, identity=identity)
    for ds in (a, b, c):
        s = ds.summary()
        assert s["target_type"] == "multi_label" and s["label_names"] == names
        assert s["class_counts"] == {"str:x": 3, "str:y": 3, "str:z": 3}
        assert s["label_cardinality"] == pytest.approx(1.5) and s["label_density"] == pytest.approx(0.5)
        assert (ds.targets.indicator.toarray() == dense).all()


def test_regression_summary_and_constant_targets(identity):
    X = np.random.default_rng(0).normal(size=(5, 2))
    y = np.array([[1.0, 3.0], [2.0, 3.0], [3.0, 3.0], [4.0, 3.0], [5.0, 3.0]])
    ds = BenchmarkDataset.from_embeddings(X, y, target_type="regression", target_names=["price", "const"],
                                          identity=identity)
    s = ds.summary()
    assert s["target_names"] == ["price", "const"] and s["constant_targets"] == ["const"]
    assert s["target_statistics"]["price"] == {"mean": 3.0, "std": pytest.approx(np.std([1, 2, 3, 4, 5])),
                                               "min": 1.0, "max": 5.0}


def test_identity_forms(identity):
    X = np.arange(12.0).reshape(6, 2)
    y = [0, 1] * 3
    a = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.content_hash("d"))
    b = BenchmarkDataset.from_embeddings(X.copy(), list(y), identity=DatasetIdentity.content_hash("d"))
    c = BenchmarkDataset.from_embeddings(X + 1, y, identity=DatasetIdentity.content_hash("d"))
    assert a.identity.fingerprint == b.identity.fingerprint != c.identity.fingerprint
    e = DatasetIdentity.ephemeral()
    assert not e.cache_eligible and e.fingerprint != DatasetIdentity.ephemeral().fingerprint
    assert identity.fingerprint == DatasetIdentity.declared("test-data", "1").fingerprint
    with pytest.raises(InputValidationError, match="identity is required"):
        BenchmarkDataset.from_embeddings(X, y)
    with pytest.raises(InputValidationError, match="revision"):
        DatasetIdentity.declared("d", "")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"kind": "declared", "dataset_id": 5, "revision": "1"}, InputTypeError, "dataset_id must be a non-empty string"),
    ({"kind": "bogus", "dataset_id": "d", "revision": "1"}, InputValidationError, "kind must be one of"),
    ({"kind": "declared", "dataset_id": "d"}, InputTypeError, r"DatasetIdentity.declared: revision .* got None"),
    ({"kind": "content", "dataset_id": "d", "content_sha256": 7}, InputTypeError, "content_sha256"),
])
def test_a_directly_built_identity_is_validated_like_the_factories(kwargs, error, match):
    """The identity keys caches and is written into reports: one that JSON cannot read back is refused."""
    with pytest.raises(error, match=match):
        DatasetIdentity(**kwargs)


def test_the_dataset_name_must_be_a_string(identity):
    with pytest.raises(InputTypeError, match=r"from_embeddings: name must be a string .* got \['a'\]"):
        BenchmarkDataset.from_embeddings(np.eye(6, 2), [0, 1] * 3, identity=identity, name=["a"])
    assert BenchmarkDataset.from_arrays(["t"] * 6, [0, 1] * 3, identity=identity, name="n").name == "n"


@pytest.mark.parametrize("argument, value, error, match", [
    ("X", set(range(6)), InputTypeError, "X must be an ordered collection of inputs .* got a set, which has no row order"),
    ("X", {"a": 1}, InputTypeError, "X must be an ordered collection .* got a dict"),
    ("X", np.array(5), InputValidationError, "X is a 0-d array"),
    ("groups", 5, InputTypeError, "groups must be a sized collection of group ids .* got int"),
    ("groups", "abcdef", InputTypeError, "groups must be a sized collection of group ids, got one str"),
    ("groups", set(range(6)), InputTypeError, "groups must be an ordered collection of group ids"),
])
def test_rows_without_an_order_or_a_length_are_refused(identity, argument, value, error, match):
    """A set or a dict has no row order to line up with the labels; a scalar has no rows."""
    kwargs = {"X": ["t"] * 6, "groups": None, argument: value}
    with pytest.raises(error, match=match):
        BenchmarkDataset.from_arrays(kwargs["X"], [0, 1] * 3, identity=identity, groups=kwargs["groups"])


def test_groups(identity):
    X = np.arange(12.0).reshape(6, 2)
    ds = BenchmarkDataset.from_embeddings(X, [0, 1] * 3, identity=identity).with_groups([1, 1, "1", "1", 2, 2])
    assert ds.summary()["groups"]["n_groups"] == 3  # 1 and "1" are different groups
    other = ds.with_groups([1, 1, 1, 1, 2, 2])
    assert ds.groups_fingerprint() != other.groups_fingerprint() is not None
    with pytest.raises(InputValidationError, match="groups has 2 entries"):
        ds.with_groups([1, 2])
    with pytest.raises(InputValidationError, match=r"groups\[1\]"):
        ds.with_groups([1, None, 1, 1, 1, 1])


X6 = np.random.default_rng(1).normal(size=(6, 3))


@pytest.mark.parametrize("embeddings, y, kwargs, error, match", [
    (np.array([[1.0, np.nan, 0]] * 6), [0, 1] * 3, {}, InputValidationError, "NaN or infinite values in rows 0"),
    ([[1.0, 2.0], [1.0]] * 3, [0, 1] * 3, {}, InputValidationError, "ragged"),
    (np.arange(6.0), [0, 1] * 3, {}, InputValidationError, "2-D"),
    (np.zeros((6, 0)), [0, 1] * 3, {}, InputValidationError, "zero width"),
    (np.array([["a"]] * 6), [0, 1] * 3, {}, InputTypeError, "numeric"),
    (X6, [0, 1] * 2, {}, InputValidationError, "has 4 rows but the embeddings/inputs have 6"),
    # the count first: a short file of one-sample classes is the wrong file, not a file of too-small classes
    (X6, [0, 1, 2, 3], {}, InputValidationError, "has 4 rows but the embeddings/inputs have 6"),
    (X6, [1.0, 2.0, 3.0], {"target_type": "regression"}, InputValidationError, "has 3 rows but the"),
    (np.zeros((0, 3)), [], {}, InputValidationError, "empty"),
    (X6, [7] * 6, {}, InputValidationError, "single class"),
    (X6, [0, 0, 0, 1, 1, 2], {}, InputValidationError, r"class\(es\) '2' \(1 sample\)"),
    (X6, [0, 1, None, 1, 0, 1], {}, InputValidationError, r"rows 2 \(0-based; 1 row"),
    (X6, [0.0, 1.0, np.nan, 1.0, 0.0, 1.0], {}, InputValidationError, "missing labels"),
    (X6, [{0}, {1}, set(), {0}, {1}, {0, 1}], {}, InputValidationError, "rows 2 .* have no label"),
    (X6, [1.0, 2.0, np.inf, 1.0, 2.0, 3.0], {"target_type": "regression"}, InputValidationError, "NaN/inf regression"),
    (X6, [3.0] * 6, {"target_type": "regression"}, InputValidationError, "every regression target is constant"),
    (X6, np.eye(6, 3, dtype=int), {"label_names": ["a", "b"]}, InputValidationError, "label_names has 2 names"),
    (X6, [0, 1] * 3, {"target_type": "ordinal"}, InputValidationError, "target_type must be one of"),
    # fractions with a few repeats (rounded measurements) are a regression target, not classes of one row
    (np.eye(60, 3), np.round(np.random.default_rng(0).normal(size=60), 1), {}, InputValidationError,
     r"y looks continuous \(27 distinct numbers in 60 rows, 11 of them in a single row\).*target_type=\"regression"),
    (X6, np.array([[0], [1], [2]] * 2), {}, InputValidationError, r"found \[2\]; it has a single column: .* 1-D"),
    # target_names names regression columns only: elsewhere it would be dropped silently
    (X6, [0, 1] * 3, {"target_names": ["a"]}, InputValidationError, "target_names names the columns of a regression"),
    (X6, np.eye(6, 3, dtype=int), {"target_names": ["a", "b", "c"]}, InputValidationError, "drop target_names"),
])
def test_bad_input_is_rejected_with_a_clear_message(identity, embeddings, y, kwargs, error, match):
    with pytest.raises(error, match=match):
        BenchmarkDataset.from_embeddings(embeddings, y, identity=identity, **kwargs)


@pytest.mark.parametrize("y, message", [
    (np.array([0, 1] * 3).reshape(-1, 1), "have no label"),  # 0/1 class ids as a column
    (np.array([[True], [False]] * 3), "have no label"),
    (sparse.csr_matrix(np.array([0, 1] * 3).reshape(-1, 1)), "have no label"),
    (np.ones((6, 1), dtype=int), "has a single label"),
])
def test_a_column_of_0_1_class_ids_is_told_to_pass_it_flat(identity, y, message):
    """An (n, 1) 0/1 matrix is read as a one-label indicator; its refusal gave the multi-label rule without saying
    that a 1-D y (y.ravel()) is what one class label per row needs."""
    hint = r"; it has a single column: for one class label per row pass it 1-D \(y\.ravel\(\)\)$"
    with pytest.raises(InputValidationError, match=f"{message}.*{hint}"):
        BenchmarkDataset.from_embeddings(X6, y, identity=identity)


@pytest.mark.parametrize("y", [{"a": 1, "b": 2}, {"a", "b"}], ids=["dict", "set"])
def test_a_mapping_or_a_set_as_y_is_refused_before_its_length_is_read_as_rows(identity, y):
    """A dict's length was read as a row count ("y has 2 rows but the embeddings/inputs have 6"): not the problem."""
    with pytest.raises(InputTypeError, match=rf"^y must hold one target per row, in row order \(a list, an array or a "
                                              rf"Series\), got {type(y).__name__}; e\.g\. \[labels\[row_id\]"):
        BenchmarkDataset.from_embeddings(X6, y, identity=identity)


@pytest.mark.parametrize("y, shown", [
    (np.array(["cat", "dog"] * 3).reshape(-1, 1), r"string values such as 'cat'.*; it has a single column: for one "
                                                  r"class label per row pass it 1-D \(y\.ravel\(\)\)$"),
    (np.array(["cat", "dog"] * 3, dtype=object).reshape(-1, 1), r"object values such as 'cat'.*y\.ravel"),
    (np.array([["1", "0"], ["0", "1"]] * 3), r"string values such as '1'; 2-D targets are read as a multi-label "
                                             r"indicator matrix of 0/1 numbers, one column per label \(or pass one "
                                             r"collection of labels per row, e.g\. \[\{'a', 'b'\}, \{'c'\}\]\)$"),
])
def test_a_2d_y_of_labels_that_are_not_numbers_is_refused_naming_y_and_the_fix(identity, y, shown):
    """A 2-D y is read as a 0/1 indicator matrix; a column of class names failed inside scipy.sparse ("does not
    support dtype <U3"), naming neither y nor the fix.  An object array of 0/1 numbers is still an indicator."""
    with pytest.raises(InputValidationError, match=r"^y is a 2-D array of " + shown):
        BenchmarkDataset.from_embeddings(X6, y, identity=identity)
    numbers = np.array([[0, 1], [1, 1], [1, 0]] * 2, dtype=object)
    assert BenchmarkDataset.from_embeddings(X6, numbers, identity=identity).summary()["target_type"] == "multi_label"


@pytest.mark.parametrize("y", [np.array([[0, 1], [1, 1], [0, 0]] * 2), [{"a"}] * 6])
def test_no_flatten_hint_where_flattening_is_not_the_fix(identity, y):
    """Two indicator columns, or label sets that name one label, are multi-label data: no y.ravel() hint."""
    with pytest.raises(InputValidationError) as caught:
        BenchmarkDataset.from_embeddings(X6, y, identity=identity)
    assert "ravel" not in str(caught.value)


def test_non_integer_class_labels_warn_unless_declared(identity):
    """Fractions are rarely class ids: inferred, they are read as classes with a warning naming both choices."""
    y = np.repeat(np.linspace(0.1, 3.0, 30), 2)
    with pytest.warns(DataWarning, match='non-integer numbers, read as 30 class labels; .*target_type="regression"'):
        assert BenchmarkDataset.from_embeddings(np.eye(60, 3), y, identity=identity).summary()["n_classes"] == 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BenchmarkDataset.from_embeddings(np.eye(60, 3), y, identity=identity, target_type="single_label")
        BenchmarkDataset.from_embeddings(np.eye(60, 3), np.repeat([0.0, 1.0, 2.0], 20), identity=identity)


def test_multilabel_rare_and_unused_labels(identity):
    Y = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0]])
    with pytest.raises(InputValidationError, match="never occur"):
        BenchmarkDataset.from_embeddings(X6, Y, label_names=["a", "b", "c"], identity=identity)
    Y[0, 2] = 1
    with pytest.raises(InputValidationError, match="'c' \\(1\\)"):
        BenchmarkDataset.from_embeddings(X6, Y, label_names=["a", "b", "c"], identity=identity)


def test_a_shard_of_rows_names_the_dataset_rows_dense_and_sparse():
    """``validate_embeddings(first_row=...)``: a shard starting at dataset row 150 reports row 153, not 3."""
    from vertebrae.inputs.embeddings import validate_embeddings

    rows = np.ones((30, 4))
    rows[3, 1] = np.nan
    for matrix in (rows, sparse.csr_matrix(rows)):
        with pytest.raises(InputValidationError, match=r"output shard 150:180 has NaN or infinite (stored )?values "
                                                        r"in rows 153 \(0-based; 1 row"):
            validate_embeddings(matrix, argument="output shard 150:180", first_row=150)

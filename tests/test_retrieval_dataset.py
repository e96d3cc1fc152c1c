"""RetrievalDataset: every accepted relevance form and every rejection."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from vertebrae import DatasetIdentity
from vertebrae.errors import InputTypeError, InputValidationError
from vertebrae.families.retrieval import RetrievalDataset

IDENTITY = DatasetIdentity.declared("retrieval-dataset", "1")
QIDS = ["q0", "q1", "q2"]
GIDS = ["d0", "d1", "d2", "d3"]
GRADES = np.array([[2, 0, 0, 1], [0, 3, 0, 0], [0, 0, 1, 0]], dtype=float)
RECORDS = [("q0", "d0", 2), ("q0", "d3", 1), ("q1", "d1", 3), ("q2", "d2", 1.0), ("q2", "d0", 0)]


def embeddings(rows: int, width: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, width))


def build(relevance=GRADES, **kwargs) -> RetrievalDataset:
    args = {"query_ids": QIDS, "gallery_ids": GIDS, "identity": IDENTITY, **kwargs}
    return RetrievalDataset.from_embeddings(embeddings(3), embeddings(4, seed=1), relevance=relevance, **args)


# ----------------------------------------------------------------------------- accepted forms
def test_records_numpy_scipy_and_explicit_nested_list_give_the_same_protocol():
    forms = [build(RECORDS), build(GRADES), build(sparse.csr_matrix(GRADES)), build(sparse.coo_matrix(GRADES))]
    nested = RetrievalDataset.from_relevance_matrix(GRADES.tolist(), query_embeddings=embeddings(3),
                                                    gallery_embeddings=embeddings(4, seed=1), query_ids=QIDS,
                                                    gallery_ids=GIDS, identity=IDENTITY)
    for dataset in forms + [nested]:
        assert dataset.fingerprint == forms[0].fingerprint
        assert np.array_equal(dataset.relevance.toarray(), GRADES)


def test_spec_example_builds():
    dataset = RetrievalDataset.from_embeddings(embeddings(1), embeddings(1), relevance=[("query-1", "document-9", 2.0)],
                                               query_ids=["query-1"], gallery_ids=["document-9"],
                                               identity=DatasetIdentity.declared("example-dataset", "1"))
    assert dataset.relevance[0, 0] == 2.0 and dataset.n_queries == dataset.n_gallery == 1


def test_ids_default_to_row_positions():
    records = [(0, 3, 1), (1, 0, 1), (2, 2, 5)]
    dataset = RetrievalDataset.from_embeddings(embeddings(3), embeddings(4), relevance=records, identity=IDENTITY)
    assert dataset.query_ids == (0, 1, 2) and dataset.gallery_ids == (0, 1, 2, 3)
    assert dataset.relevance[2, 2] == 5


def test_sparse_relevance_is_never_densified():
    class NoDense(sparse.csr_matrix):
        def toarray(self, *args, **kwargs):
            raise AssertionError("densified")

        todense = toarray

        def __array__(self, *args, **kwargs):
            raise AssertionError("densified")

    n_queries, n_gallery = 2_000, 500_000  # dense float64 would be 8 GB
    rows = np.arange(n_queries)
    matrix = NoDense((np.ones(n_queries), (rows, rows * 7)), shape=(n_queries, n_gallery))
    dataset = RetrievalDataset.from_inputs(range(n_queries), range(n_gallery), relevance=matrix, identity=IDENTITY)
    assert dataset.relevance.nnz == n_queries


def test_sparse_explicit_zeros_are_not_relevant():
    matrix = sparse.csr_matrix(GRADES)
    matrix.data[matrix.data == 1] = 0  # q2's only positive becomes an explicit zero
    with pytest.raises(InputValidationError, match="'q2'"):
        build(matrix)


def test_exclusions_in_every_form_remove_pairs_and_relevant_pairs_with_a_warning():
    pairs = build(exclusions=[("q0", "d3"), ("q1", "d0")])
    matrix = build(exclusions=sparse.csr_matrix(([1, 1], ([0, 1], [3, 0])), shape=(3, 4)))
    dense = build(exclusions=np.array([[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=bool))
    for dataset in (pairs, matrix, dense):
        assert dataset.exclusions.nnz == 2 and dataset.relevance[0, 3] == 0 and dataset.relevance.nnz == 3
        assert dataset.fingerprint == pairs.fingerprint
        assert any("also excluded" in note for note in dataset.warnings)
    assert build().fingerprint != pairs.fingerprint


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_np_matrix_relevance_and_exclusions_read_like_arrays():
    """SciPy's .todense() returns np.matrix, whose row indexing stays 2-D."""
    excluded = np.array([[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    expected = build(GRADES, exclusions=excluded)
    dense = sparse.csr_matrix(GRADES).todense()
    assert build(dense, exclusions=np.asmatrix(excluded)).fingerprint == expected.fingerprint
    explicit = RetrievalDataset.from_relevance_matrix(dense, query_embeddings=embeddings(3),
                                                      gallery_embeddings=embeddings(4, seed=1), query_ids=QIDS,
                                                      gallery_ids=GIDS, identity=IDENTITY, exclusions=excluded)
    assert explicit.fingerprint == expected.fingerprint


def test_same_id_exclusion_drops_each_querys_own_item():
    shared = ["a", "b", "c"]
    dataset = RetrievalDataset.from_embeddings(embeddings(3), embeddings(3), relevance=[("a", "b", 1), ("b", "c", 1),
                                                                                        ("c", "a", 1)],
                                               query_ids=shared, gallery_ids=shared, identity=IDENTITY,
                                               exclusions="same_id")
    assert sorted(zip(*dataset.exclusions.nonzero())) == [(0, 0), (1, 1), (2, 2)]


def test_raw_inputs_dataset_keeps_inputs_for_extractors():
    texts_q, texts_g = ["a cat", "a dog", "a bird"], ["cat", "dog", "bird", "fish"]
    dataset = RetrievalDataset.from_inputs(texts_q, texts_g, relevance=GRADES, query_ids=QIDS, gallery_ids=GIDS,
                                           identity=IDENTITY)
    assert dataset.endpoint_data() == (texts_q, texts_g) and not dataset.has_embeddings


def test_content_identity_hashes_protocol_and_data():
    first = build(identity=DatasetIdentity.content_hash("data"))
    regraded = build(GRADES * 2, identity=DatasetIdentity.content_hash("data"))
    assert first.identity.content_sha256 and first.identity.content_sha256 != regraded.identity.content_sha256
    assert first.identity.content_sha256 == build(identity=DatasetIdentity.content_hash("data")).identity.content_sha256


def test_fingerprint_is_type_aware_for_ids():
    as_int = RetrievalDataset.from_embeddings(embeddings(1), embeddings(1), relevance=[(1, 1, 1)], query_ids=[1],
                                              gallery_ids=[1], identity=IDENTITY)
    as_str = RetrievalDataset.from_embeddings(embeddings(1), embeddings(1), relevance=[("1", "1", 1)],
                                              query_ids=["1"], gallery_ids=["1"], identity=IDENTITY)
    assert as_int.fingerprint != as_str.fingerprint


def test_summary_describes_the_protocol():
    summary = build(exclusions=[("q1", "d0")]).summary()
    assert summary["n_relevant_pairs"] == 4 and summary["n_excluded_pairs"] == 1
    assert summary["relevant_per_query"] == {"min": 1, "mean": 4 / 3, "max": 2}
    assert summary["grades"] == {"min": 1.0, "max": 3.0, "distinct": 3}


# ----------------------------------------------------------------------------- rejections
def test_identity_is_required_with_the_shared_message():
    with pytest.raises(InputValidationError, match=r"RetrievalDataset.from_embeddings: identity is required.*declared"):
        build(identity=None)
    with pytest.raises(InputValidationError, match=r"RetrievalDataset.from_inputs: identity is required"):
        RetrievalDataset.from_inputs([1], [2], relevance=[(0, 0, 1)])


@pytest.mark.parametrize("records, message", [
    ([("q9", "d0", 1)], r"relevance\[0\] names query id 'q9', which is not in query_ids"),
    ([("q0", "d0", 1), ("q1", "zz", 1)], r"relevance\[1\] names gallery id 'zz', which is not in gallery_ids"),
    ([("q0", "d0", 1), ("q1", "d1", 1), ("q2", "d2", 1), ("q0", "d0", 2)],
     r"relevance\[3\] \(query 'q0', gallery 'd0'\) repeats relevance\[0\]"),
    ([("q0", "d0", -1), ("q1", "d1", 1), ("q2", "d2", 1)], r"relevance\[0\] \(query 'q0', gallery 'd0'\) has grade -1"),
    ([("q0", "d0", float("nan")), ("q1", "d1", 1), ("q2", "d2", 1)], r"has grade nan; grades must be finite"),
    ([("q0", "d0", float("inf")), ("q1", "d1", 1), ("q2", "d2", 1)], r"has grade inf"),
    ([("q0", "d0", 1), ("q1", "d1", 1)], r"queries 'q2' \(1 in total\) have no relevant gallery item"),
    ([("q0", "d0", 1), ("q1", "d1", 1), ("q2", "d2", 0)], r"queries 'q2'"),
    ([("q0", "d0")], r"relevance\[0\] is \('q0', 'd0'\); each record must be a \(query_id, gallery_id, grade\)"),
])
def test_bad_records_are_rejected_naming_the_record(records, message):
    with pytest.raises(InputValidationError, match=message):
        build(records)


@pytest.mark.parametrize("records, message", [
    ([(0, 0, 1), (True, 1, 1), (2, 2, 1)], r"relevance\[1\]'s query id is True of type bool"),
    ([(0, 0, 1), (1.0, 1, 1), (2, 2, 1)], r"relevance\[1\]'s query id is 1.0 of type float"),
    ([(0, 0, 1), (1, np.float64(3.0), 1), (2, 2, 1)], r"relevance\[1\]'s gallery id is 3.0 of type float"),
])
def test_record_ids_must_be_str_or_int_like_the_ids(records, message):
    """True == 1 == 1.0, so a loose lookup would silently read them as int id 1."""
    with pytest.raises(InputTypeError, match=message):
        build(records, query_ids=None, gallery_ids=None)
    with pytest.raises(InputTypeError, match=r"exclusions\[0\]'s query id is True"):
        build(np.eye(3, 4), query_ids=None, gallery_ids=None, exclusions=[(True, 3), (2.0, 3)])


def test_non_numeric_grade_is_a_type_error():
    with pytest.raises(InputTypeError, match=r"relevance\[0\] has grade 'high'"):
        build([("q0", "d0", "high")])


def test_nested_list_is_read_as_records_with_a_hint():
    with pytest.raises(InputValidationError, match="from_relevance_matrix"):
        build(GRADES.tolist())


def test_a_dataframe_is_refused_with_how_to_pass_it():
    """Before: a DataFrame iterated over its column labels and read as records ("relevance[0] is 0; each record
    must be a ... tuple"); both conversions the message names are accepted."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(RECORDS, columns=["query", "gallery", "grade"])
    with pytest.raises(InputTypeError, match=r"relevance is a pandas DataFrame.*df\.itertuples\(index=False, "
                                             r"name=None\).*df\.to_numpy\(\)"):
        build(frame)
    with pytest.raises(InputTypeError, match=r"exclusions is a pandas DataFrame.*\(query_id, gallery_id\)"):
        build(exclusions=frame[["query", "gallery"]])
    expected = build(RECORDS).fingerprint
    assert build(list(frame.itertuples(index=False, name=None))).fingerprint == expected
    assert build(pd.DataFrame(GRADES).to_numpy()).fingerprint == build(GRADES).fingerprint


@pytest.mark.parametrize("relevance, error, message", [
    ({"q0": {"d0": 1}}, InputTypeError, "mapping into records"),
    ("q0 d0 1", InputTypeError, "must be a NumPy/SciPy"),
    (np.ones((3, 5)), InputValidationError, r"shape \(3, 5\) but there are 3 queries and 4 gallery items"),
    (np.ones(4), InputValidationError, r"shape \(4,\)"),
    (np.array([["a"] * 4] * 3), InputTypeError, "must hold real numbers"),
    (np.where(GRADES == 3, -3, GRADES), InputValidationError, r"relevance\[1, 1\] \(query 'q1', gallery 'd1'\) has "
                                                              "grade -3"),
    (sparse.csr_matrix(np.where(GRADES == 3, np.nan, GRADES)), InputValidationError, r"relevance\[1, 1\].*grade nan"),
])
def test_bad_matrices_are_rejected(relevance, error, message):
    with pytest.raises(error, match=message):
        build(relevance)


@pytest.mark.parametrize("field, ids, error, message", [
    ("query_ids", ["q0", "q1", "q0"], InputValidationError, "query_ids has duplicate id 'q0' at positions 0 and 2"),
    ("gallery_ids", ["d0", "d1", "d2"], InputValidationError, "gallery_ids has 3 ids but there are 4 rows"),
    ("gallery_ids", ["d0", 1.5, "d2", "d3"], InputTypeError, r"gallery_ids\[1\] is 1.5 of type float"),
    ("query_ids", "q0q1q2", InputTypeError, "query_ids must be a sequence"),
])
def test_bad_ids_are_rejected(field, ids, error, message):
    with pytest.raises(error, match=message):
        build(**{field: ids})


def test_query_left_without_positive_by_exclusions_is_rejected():
    with pytest.raises(InputValidationError, match=r"queries 'q1' .* after exclusions"):
        build(exclusions=[("q1", "d1")])


@pytest.mark.parametrize("exclusions, error, message", [
    ([("q0", "nope")], InputValidationError, r"exclusions\[0\] names gallery id 'nope'"),
    ([("q0", "d1"), ("q0", "d1")], InputValidationError, r"exclusions\[1\] .* repeats exclusions\[0\]"),
    ("everything", InputTypeError, "exclusions must be None, 'same_id'"),
    (np.full((3, 4), np.nan), InputValidationError, r"exclusions\[0, 0\] .* has exclusion value nan"),
])
def test_bad_exclusions_are_rejected(exclusions, error, message):
    with pytest.raises(error, match=message):
        build(exclusions=exclusions)


def test_mismatched_embedding_widths_are_rejected():
    with pytest.raises(InputValidationError, match="query_embeddings have 3 columns but gallery_embeddings have 5"):
        RetrievalDataset.from_embeddings(embeddings(3), embeddings(4, width=5), relevance=GRADES, identity=IDENTITY)


def test_embedding_rows_must_match_the_ids():
    with pytest.raises(InputValidationError, match="query_ids has 2 ids but there are 3 rows"):
        build(query_ids=["q0", "q1"])


def test_from_relevance_matrix_needs_exactly_one_endpoint_form():
    with pytest.raises(InputValidationError, match="exactly one of the two forms"):
        RetrievalDataset.from_relevance_matrix(GRADES.tolist(), identity=IDENTITY)
    with pytest.raises(InputValidationError, match="exactly one of the two forms"):
        RetrievalDataset.from_relevance_matrix(GRADES.tolist(), query_embeddings=embeddings(3),
                                               gallery_inputs=["a"] * 4, identity=IDENTITY)


def test_from_relevance_matrix_rejects_a_ragged_nested_list():
    with pytest.raises(InputValidationError, match="relevance_matrix is ragged"):
        RetrievalDataset.from_relevance_matrix([[1, 0], [1]], query_inputs=["a", "b"], gallery_inputs=["x", "y"],
                                               identity=IDENTITY)


def test_inputs_must_be_sized_and_non_empty():
    with pytest.raises(InputTypeError, match="query_inputs must be a sized collection"):
        RetrievalDataset.from_inputs(iter([1, 2]), [1], relevance=[(0, 0, 1)], identity=IDENTITY)
    with pytest.raises(InputValidationError, match="gallery_inputs is empty"):
        RetrievalDataset.from_inputs([1], [], relevance=[(0, 0, 1)], identity=IDENTITY)

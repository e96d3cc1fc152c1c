"""LabelRetrievalMetric against a brute-force reference (a full sort per query, written plainly)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from vertebrae import (Benchmark, BenchmarkDataset, ConfigError, DatasetIdentity, LabelRetrievalMetric,
                           MetricError, OverlapScoringConfig)
from vertebrae.errors import ScoringWarning
from vertebrae.extractors import PrecomputedExtractor

from .conftest import gaussian_classes

CUTOFFS = (1, 3, 10, 200)


def reference(X: np.ndarray, labels: np.ndarray, similarity: str, cutoffs=CUTOFFS) -> dict[str, float]:
    """Each row queries all other rows; relevant = same label; at equal similarity other-label rows
    rank first (pessimistic), then the lower row index."""
    X = np.asarray(X, dtype=np.float64)
    if similarity == "cosine":
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = len(X)
    sums = {name: 0.0 for name in ["map", "mrr", *(f"{m}@{k}" for m in ("precision", "recall") for k in cutoffs)]}
    queries = 0
    for q in range(n):
        gallery = [j for j in range(n) if j != q]
        sims = {j: float(X[q] @ X[j]) for j in gallery}
        ranking = sorted(gallery, key=lambda j: (-sims[j], labels[j] == labels[q], j))
        relevant = [labels[j] == labels[q] for j in ranking]
        total = sum(relevant)
        if total == 0:
            continue
        queries += 1
        hits, precisions = 0, []
        for position, is_relevant in enumerate(relevant, start=1):
            if is_relevant:
                hits += 1
                precisions.append(hits / position)
        sums["map"] += sum(precisions) / total
        sums["mrr"] += 1.0 / (relevant.index(True) + 1)
        for k in cutoffs:
            sums[f"precision@{k}"] += sum(relevant[:k]) / k
            sums[f"recall@{k}"] += sum(relevant[:k]) / total
    return {name: value / queries for name, value in sums.items()}


def _labels(y) -> np.ndarray:
    return np.array([f"vk:int:{c}" for c in y])


@pytest.fixture(scope="module")
def blobs():
    X, y = gaussian_classes(n_per_class=25, n_classes=4, dim=6, spread=1.0, seed=3)
    y[::7] = 0  # uneven classes
    return X, _labels(y)


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("block_size", [1, 7, 256])
def test_matches_the_brute_force_reference(blobs, similarity, block_size):
    X, labels = blobs
    metric = LabelRetrievalMetric(cutoffs=CUTOFFS, similarity=similarity, block_size=block_size)
    out = metric(X, labels)
    expected = reference(X, labels, similarity)
    for name, value in expected.items():
        assert out["diagnostics"][name] == pytest.approx(value, abs=1e-9), name
    assert out["score"] == out["diagnostics"]["map"]
    assert out["diagnostics"]["n_queries"] == len(X) and out["warnings"] == []


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_sparse_input_matches_the_dense_reference(similarity):
    rng = np.random.default_rng(0)
    dense = rng.random((70, 40)) * (rng.random((70, 40)) < 0.3)
    dense[:, 0] += 0.01  # no all-zero rows (cosine needs a norm)
    y = _labels(rng.integers(0, 3, size=70))
    csr = sparse.csr_matrix(dense)
    out = LabelRetrievalMetric(cutoffs=CUTOFFS, similarity=similarity, block_size=16, primary="recall@10")(csr, y)
    expected = reference(dense, y, similarity)
    for name, value in expected.items():
        assert out["diagnostics"][name] == pytest.approx(value, abs=1e-9), name
    assert out["score"] == out["diagnostics"]["recall@10"]


def test_ties_are_broken_pessimistically():
    # Integer embeddings: every dot product is exact in float32, so the ties are real.
    X = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    labels = _labels([0, 1, 0, 1, 1, 0])
    out = LabelRetrievalMetric(cutoffs=(1, 2), similarity="dot", block_size=2)(X, labels)
    expected = reference(X, labels, "dot", cutoffs=(1, 2))
    for name, value in expected.items():
        assert out["diagnostics"][name] == pytest.approx(value, abs=1e-12), name
    # query 0's gallery 1, 2 ties: the other-label row 1 ranks first, its relevant row 2 second (AP 1/2);
    # query 2's gallery 0, 1 ties: row 1 first again, relevant row 0 second (AP 1/2)
    single = LabelRetrievalMetric(cutoffs=(1,), similarity="dot")(X[[0, 1, 2]], labels[[0, 1, 2]])
    assert single["diagnostics"]["per_class_map"]["vk:int:0"] == pytest.approx(0.5)


def test_collapsed_embeddings_earn_no_credit_from_row_order():
    X = np.ones((12, 3), dtype=np.float32)
    sorted_labels = _labels([0] * 6 + [1] * 6)
    alternating = _labels([0, 1] * 6)
    metric = LabelRetrievalMetric(cutoffs=(1,))
    by_sorted, by_alternating = metric(X, sorted_labels), metric(X, alternating)
    assert by_sorted["score"] == pytest.approx(by_alternating["score"], abs=1e-12)
    # pessimistic ranks: the 6 other-label rows come first, the 5 relevant rows at ranks 7..11
    expected = np.mean([k / (6 + k) for k in range(1, 6)])
    assert by_sorted["score"] == pytest.approx(expected, abs=1e-12)


def test_diagnostics_and_defensive_singleton_class(blobs):
    X, labels = blobs
    labels = labels.copy()
    labels[0] = "vk:int:99"  # a class of one row (a dataset forbids it; the metric copes)
    out = LabelRetrievalMetric(primary="mrr")(X, labels)
    assert out["diagnostics"]["n_queries"] == len(X) - 1 and out["diagnostics"]["n_queries_without_relevant"] == 1
    assert out["warnings"] == ["1 query row(s) have no other row with their label and were left out"]
    assert "vk:int:99" not in out["diagnostics"]["per_class_map"]
    assert out["score"] == out["diagnostics"]["mrr"]
    assert out["metadata"]["tie_rule"].startswith("similarity descending; at equal similarity other-label rows")
    with pytest.raises(MetricError, match="no query has another row with its label"):
        LabelRetrievalMetric()(X[:3], _labels([0, 1, 2]))


def test_zero_norm_rows_fail_cosine_but_not_dot(blobs):
    X, labels = blobs
    X = X.copy()
    X[[4, 9]] = 0.0
    with pytest.raises(MetricError, match=r"row\(s\) 4, 9 have zero norm"):
        LabelRetrievalMetric()(X, labels)
    assert np.isfinite(LabelRetrievalMetric(similarity="dot")(X, labels)["score"])


@pytest.mark.filterwarnings("ignore:1 all-zero embedding row")
def test_in_a_benchmark_a_zero_norm_row_is_a_recorded_failure(blobs):
    X, labels = blobs
    y = [int(label.rsplit(":", 1)[1]) for label in labels]
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("lr", "1"))
    broken = X.copy()
    broken[3] = 0.0
    with pytest.warns(ScoringWarning, match="zero norm"):
        result = Benchmark(dataset, [PrecomputedExtractor("ok", X), PrecomputedExtractor("broken", broken)],
                           scoring_config=OverlapScoringConfig(min_k=2, max_k=3),
                           metrics=[LabelRetrievalMetric(cutoffs=(1, 5), primary="precision@5")],
                           primary_metric="label_retrieval", progress=False).run()
    assert result["ok"].metrics["label_retrieval"].score == pytest.approx(
        reference(X, labels, "cosine", cutoffs=(5,))["precision@5"], abs=1e-9)
    failed = result["broken"].metrics["label_retrieval"]
    assert failed.score is None and "row(s) 3 have zero norm" in failed.error
    assert [r.name for r in result.ranked_results()] == ["ok"]


def test_refuses_other_target_types_when_called_directly(blobs):
    X, labels = blobs
    with pytest.raises(MetricError, match="only defined for single-label targets"):
        LabelRetrievalMetric()(X, labels, target_metadata={"target_type": "multi_label"})


@pytest.mark.parametrize("kwargs, match", [
    ({"cutoffs": ()}, "cutoffs"),
    ({"cutoffs": (0,)}, "cutoffs"),
    ({"cutoffs": "5"}, "cutoffs"),
    ({"similarity": "l2"}, "similarity"),
    ({"primary": "precision@7"}, "primary"),
    ({"primary": "ndcg"}, "primary"),
    ({"block_size": 0}, "block_size"),
    ({"name": "overlap"}, "reserved"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        LabelRetrievalMetric(**kwargs)


def test_config_normalizes_and_round_trips():
    metric = LabelRetrievalMetric(cutoffs=[10, 1, 10], primary="precision@10")
    assert metric.cutoffs == (1, 10)
    assert LabelRetrievalMetric.from_dict(metric.to_dict()) == metric
    assert metric.identity() == {"type": "label_retrieval", "cutoffs": [1, 10], "similarity": "cosine",
                                 "primary": "precision@10", "block_size": 256, "name": "label_retrieval"}


def test_fast_ranking_equals_a_lexsort():
    from vertebrae.scoring.label_retrieval import _ranked_columns

    rng = np.random.default_rng(4)
    sims = rng.integers(-3, 4, size=(40, 300)).astype(np.float32)  # many exact ties
    sims[sims == 0] = np.where(rng.random(int((sims == 0).sum())) < 0.5, -0.0, 0.0)  # -0.0 ties with 0.0
    sims[:, :5] = rng.normal(size=(40, 5))
    sims[0], sims[1, :7] = np.float32(3e38), np.float32(-3e38)
    relevant = rng.random(sims.shape) < 0.3
    expected = np.array([np.lexsort((np.arange(sims.shape[1]), relevant[i], -sims[i])) for i in range(len(sims))])
    assert np.array_equal(_ranked_columns(sims, relevant), expected)

"""Retrieval metrics against pytrec_eval and scikit-learn, ties against the documented rule.

pytrec_eval (trec_eval) sorts by score descending and breaks ties by docid
*descending*; it drops queries missing from the run.  Every comparison here feeds it
the full eligible ranking of every query, so ``recip_rank`` and ``map`` are
full-ranking values like ours; ``mrr@k`` is compared with ``recip_rank`` on runs cut
to the top k.
"""

from __future__ import annotations

import math
import tracemalloc
import warnings

import numpy as np
import pytest
import pytrec_eval
from scipy import sparse
from sklearn.metrics import ndcg_score

from vertebrae import DatasetIdentity
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.families.retrieval import RetrievalBenchmark, RetrievalConfig, RetrievalDataset
from vertebrae.families.retrieval.ranking import SORT_THRESHOLD, plan_blocks, prepare_endpoints, rank_relevant

CUTOFFS = (1, 5, 10)  # trec_eval's success measure exists for exactly these cutoffs
IDENTITY = DatasetIdentity.declared("retrieval-metrics", "1")
TREC = {"ndcg": "ndcg_cut", "precision": "P", "recall": "recall", "map": "map_cut", "hit_rate": "success"}


# ----------------------------------------------------------------------------- data
def tie_free_integers(seed: int, n_queries: int = 25, n_gallery: int = 60, relevant_share: float = 0.1,
                      max_grade: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer embeddings whose dot products are exact in float32 and distinct in every row and column.

    Query rows are ``[m * a, 1, s]`` and gallery rows ``[b, p, n_gallery]`` with ``p`` and
    ``s`` permutations and ``m = n_queries * n_gallery``, so
    ``q.g = m * a.b + p + n_gallery * s`` never ties, in either direction.
    """
    rng = np.random.default_rng(seed)
    a = rng.integers(-9, 10, (n_queries, 4))
    b = rng.integers(-9, 10, (n_gallery, 4))
    queries = np.hstack([a * n_queries * n_gallery, np.ones((n_queries, 1)), rng.permutation(n_queries)[:, None]])
    gallery = np.hstack([b, rng.permutation(n_gallery)[:, None], np.full((n_gallery, 1), n_gallery)])
    assert np.abs(queries @ gallery.T).max() < 2**24  # exact in float32
    return queries.astype(np.float32), gallery.astype(np.float32), random_grades(rng, n_queries, n_gallery,
                                                                                  relevant_share, max_grade)


def random_grades(rng: np.random.Generator, n_queries: int, n_gallery: int, share: float, max_grade: int) -> np.ndarray:
    grades = rng.integers(1, max_grade + 1, (n_queries, n_gallery)) * (rng.random((n_queries, n_gallery)) < share)
    empty = np.flatnonzero(grades.sum(axis=1) == 0)
    grades[empty, rng.integers(0, n_gallery, empty.size)] = 1
    return grades


def dataset_of(queries, gallery, grades, exclusions=None) -> RetrievalDataset:
    return RetrievalDataset.from_embeddings(queries, gallery, relevance=grades, identity=IDENTITY,
                                            exclusions=exclusions)


def evaluate(dataset: RetrievalDataset, **config) -> dict:
    """Forward and (when bidirectional) reverse mean metrics of the dataset's own embeddings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = RetrievalBenchmark(dataset, [PrecomputedExtractor("candidate")],
                                    retrieval_config=RetrievalConfig(cutoffs=CUTOFFS, **config), progress=False).run()
    return result.extractor_results[0]


def trec(scores: np.ndarray, grades: np.ndarray, eligible: np.ndarray | None = None,
         docid=lambda i, j: f"d{j:04d}") -> dict[str, float]:
    """Mean pytrec_eval metrics over the full eligible ranking of every query (ours' names as keys)."""
    eligible = np.ones(scores.shape, dtype=bool) if eligible is None else eligible
    rows = [i for i in range(scores.shape[0]) if (grades[i] * eligible[i]).any()]  # no-positive queries misbehave
    qrels = {f"q{i}": {docid(i, j): int(grades[i, j]) for j in np.flatnonzero(eligible[i] & (grades[i] > 0))}
             for i in rows}
    run = {f"q{i}": {docid(i, j): float(scores[i, j]) for j in np.flatnonzero(eligible[i])} for i in rows}
    cut = ",".join(map(str, CUTOFFS))
    measures = {f"ndcg_cut.{cut}", f"P.{cut}", f"recall.{cut}", f"map_cut.{cut}", f"success.{cut}", "recip_rank",
                "map"}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    assert len(per_query) == len(rows)

    def mean(key: str) -> float:
        return float(np.mean([per_query[f"q{i}"][key] for i in rows]))

    out = {f"{ours}@{k}": mean(f"{theirs}_{k}") for ours, theirs in TREC.items() for k in CUTOFFS}
    out.update(map=mean("map"), mrr=mean("recip_rank"))
    for k in CUTOFFS:  # mrr@k is recip_rank of the run cut to the top k (tie-free data only)
        cut_run = {q: dict(sorted(docs.items(), key=lambda kv: -kv[1])[:k]) for q, docs in run.items()}
        cut_eval = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
        out[f"mrr@{k}"] = float(np.mean([cut_eval[q]["recip_rank"] for q in cut_run]))
    return out


def assert_metrics_match(ours: dict[str, float], expected: dict[str, float]) -> None:
    assert set(expected) <= set(ours)
    for name, value in expected.items():
        assert ours[name] == pytest.approx(value, abs=1e-9), name


def min_gap(scores: np.ndarray) -> float:
    ordered = np.sort(scores, axis=1)
    return float(np.diff(ordered, axis=1).min())


# ----------------------------------------------------------------------------- pytrec_eval
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dot_metrics_match_pytrec_eval(seed):
    queries, gallery, grades = tie_free_integers(seed)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    assert min_gap(scores) >= 1 and min_gap(scores.T) >= 1  # precondition: no ties at all
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="dot")
    assert_metrics_match(entry.forward.metrics, trec(scores, grades))


def test_cosine_metrics_match_pytrec_eval_and_sklearn():
    rng = np.random.default_rng(7)
    queries, gallery = rng.normal(size=(30, 16)), rng.normal(size=(50, 16))
    grades = random_grades(rng, 30, 50, 0.15, 4)
    scores = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ \
        (gallery / np.linalg.norm(gallery, axis=1, keepdims=True)).T
    assert min_gap(scores) > 1e-6  # precondition: float32 rounding (~1e-7) cannot reorder
    entry = evaluate(dataset_of(queries, gallery, grades))
    assert_metrics_match(entry.forward.metrics, trec(scores, grades))
    for k in CUTOFFS:
        assert entry.forward.metrics[f"ndcg@{k}"] == pytest.approx(ndcg_score(grades, scores, k=k), abs=1e-9)


def test_squared_l2_metrics_match_pytrec_eval():
    rng = np.random.default_rng(11)
    queries, gallery = rng.normal(size=(20, 8)), rng.normal(size=(40, 8))
    grades = random_grades(rng, 20, 40, 0.2, 2)
    scores = -((queries[:, None, :] - gallery[None, :, :]) ** 2).sum(axis=2)
    assert min_gap(scores) > 1e-4
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="squared_l2")
    assert_metrics_match(entry.forward.metrics, trec(scores, grades))


def test_rows_with_many_relevant_items_use_the_sort_path_and_still_match():
    queries, gallery, grades = tie_free_integers(3, n_queries=12, n_gallery=130, relevant_share=0.6)
    assert (np.count_nonzero(grades, axis=1) > SORT_THRESHOLD).all()  # precondition: every row is sorted
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="dot")
    assert_metrics_match(entry.forward.metrics, trec(scores, grades))


def test_exclusions_are_removed_from_the_ranking():
    queries, gallery, grades = tie_free_integers(4)
    rng = np.random.default_rng(4)
    excluded = (rng.random(grades.shape) < 0.2) & (grades == 0)
    excluded[0, np.flatnonzero(grades[0])[0]] = True  # one relevant pair excluded: removed from judgments too
    if not (grades[0] * ~excluded[0]).any():
        excluded[0, np.flatnonzero(grades[0])[0]] = False
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    entry = evaluate(dataset_of(queries, gallery, grades, exclusions=excluded), similarity="dot")
    assert_metrics_match(entry.forward.metrics, trec(scores, grades, eligible=~excluded))


def test_reverse_direction_matches_pytrec_eval_on_the_transposed_problem():
    queries, gallery, grades = tie_free_integers(5, n_queries=40, n_gallery=30, relevant_share=0.05)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    skipped = int((grades.sum(axis=0) == 0).sum())
    assert skipped > 0 and min_gap(scores.T) >= 1  # preconditions: items without positives; no ties
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="dot", bidirectional=True)
    assert entry.reverse.n_queries == 30 - skipped
    reverse = trec(scores.T, grades.T)  # trec() itself leaves out the items without positives
    assert_metrics_match(entry.reverse.metrics, reverse)
    assert entry.primary_score == pytest.approx((entry.forward.metrics["ndcg@10"] + reverse["ndcg@10"]) / 2)


def test_small_memory_budget_and_block_size_give_the_same_metrics():
    queries, gallery, grades = tie_free_integers(6, n_queries=30, n_gallery=60, relevant_share=0.3)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    budget = 2 * 5 * 60 * 3  # three counting rows: many blocks and chunks
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="dot", memory_budget_bytes=budget, block_size=4)
    assert_metrics_match(entry.forward.metrics, trec(scores, grades))


def test_ranking_never_holds_more_than_the_memory_budget():
    rng = np.random.default_rng(8)
    queries, gallery = rng.normal(size=(400, 16)).astype(np.float32), rng.normal(size=(8000, 16)).astype(np.float32)
    grades = random_grades(rng, 400, 8000, 0.002, 3)
    dataset = dataset_of(queries, gallery, grades)
    endpoints = prepare_endpoints(queries, gallery, "cosine", query_ids=dataset.query_ids,
                                  gallery_ids=dataset.gallery_ids, source="test")
    budget = 4 * 2**20  # the full 400 x 8000 float32 matrix would take 12.8 MB
    plan = plan_blocks(400, 8000, budget, None)
    assert plan.peak_bytes <= budget and plan.rows_per_block < 400
    tracemalloc.start()
    rank_relevant(endpoints, dataset.relevance, dataset.exclusions, plan)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak <= budget + 2**20  # budget plus per-pair bookkeeping


def test_sparse_endpoints_get_smaller_blocks_for_the_product_built_first():
    dense, sparse_plan = plan_blocks(400, 8000, 4 * 2**20, None), plan_blocks(400, 8000, 4 * 2**20, None, sparse=True)
    assert sparse_plan.rows_per_block * 3 == pytest.approx(dense.rows_per_block, abs=3)
    assert sparse_plan.peak_bytes <= 4 * 2**20


# ----------------------------------------------------------------------------- ties
def test_ties_follow_the_pessimistic_rule_like_pytrec_eval_with_ordered_docids():
    """With docid = (max grade - grade, index), trec_eval's docid-descending tie break *is* our rule."""
    rng = np.random.default_rng(9)
    queries = rng.integers(-1, 2, (30, 2)).astype(np.float32)
    gallery = rng.integers(-1, 2, (140, 2)).astype(np.float32)
    share = np.where(np.arange(30) % 2 == 0, 0.5, 0.05)[:, None]  # alternate heavy and light rows
    grades = rng.integers(1, 4, (30, 140)) * (rng.random((30, 140)) < share)
    grades[:, 0] = np.maximum(grades[:, 0], 1)
    per_row = np.count_nonzero(grades, axis=1)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    assert min_gap(scores) == 0  # precondition: heavy ties...
    assert per_row.min() <= SORT_THRESHOLD < per_row.max()  # ...on the counted and on the sorted path
    entry = evaluate(dataset_of(queries, gallery, grades), similarity="dot")
    expected = trec(scores, grades, docid=lambda i, j: f"{3 - grades[i, j]}_{j:04d}")
    assert_metrics_match(entry.forward.metrics, {k: v for k, v in expected.items() if not k.startswith("mrr@")})


def test_all_tied_gallery_puts_the_relevant_item_last():
    queries = np.ones((1, 2))
    gallery = np.ones((4, 2))
    metrics = evaluate(dataset_of(queries, gallery, [(0, 0, 1)]), similarity="dot").forward.metrics
    assert metrics["precision@1"] == 0.0 and metrics["hit_rate@1"] == 0.0 and metrics["recall@1"] == 0.0
    assert metrics["hit_rate@5"] == 1.0 and metrics["recall@5"] == 1.0 and metrics["precision@5"] == 0.2
    assert metrics["mrr"] == 0.25 and metrics["map"] == 0.25 and metrics["mrr@1"] == 0.0
    assert metrics["ndcg@10"] == pytest.approx(1 / math.log2(5))


def test_tied_relevant_items_rank_after_tied_negatives_by_ascending_grade():
    # similarities: item 0 -> 2, items 1, 2, 3 -> 1 (tied), item 4 -> 0
    queries = np.array([[1.0, 0.0]])
    gallery = np.array([[2.0, 0.0], [1.0, 0.0], [1.0, 5.0], [1.0, -5.0], [0.0, 1.0]])
    relevance = [(0, 1, 2), (0, 3, 1)]  # tied relevant items with grades 2 and 1; item 2 is a tied negative
    metrics = evaluate(dataset_of(queries, gallery, relevance), similarity="dot").forward.metrics
    # order: item 0 (non-rel), item 2 (tied non-rel), item 3 (grade 1), item 1 (grade 2)
    assert metrics["mrr"] == pytest.approx(1 / 3)
    assert metrics["map"] == pytest.approx((1 / 3 + 2 / 4) / 2)
    dcg = 1 / math.log2(4) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert metrics["ndcg@10"] == pytest.approx(dcg / idcg)
    assert metrics["precision@5"] == pytest.approx(2 / 5)
    assert metrics["map@1"] == 0.0 and metrics["hit_rate@1"] == 0.0


# ----------------------------------------------------------------------------- definitions
def test_huge_grades_do_not_overflow_ndcg():
    queries, gallery, grades = tie_free_integers(10)
    small = evaluate(dataset_of(queries, gallery, grades), similarity="dot").forward.metrics
    huge = evaluate(dataset_of(queries, gallery, grades * 1e307), similarity="dot").forward.metrics
    for k in CUTOFFS:
        assert math.isfinite(huge[f"ndcg@{k}"])
        assert huge[f"ndcg@{k}"] == pytest.approx(small[f"ndcg@{k}"], abs=1e-12)


def test_fractional_grades_are_relevant_and_weighted_linearly():
    queries = np.array([[1.0, 0.0]])
    gallery = np.array([[3.0, 0.0], [2.0, 0.0], [1.0, 0.0]])
    relevance = [(0, 1, 0.5), (0, 2, 2.5), (0, 0, 0.0)]  # grade 0: judged non-relevant
    metrics = evaluate(dataset_of(queries, gallery, relevance), similarity="dot").forward.metrics
    assert metrics["precision@5"] == pytest.approx(2 / 5)
    assert metrics["mrr"] == pytest.approx(1 / 2)
    dcg = 0.5 / math.log2(3) + 2.5 / math.log2(4)
    idcg = 2.5 / math.log2(2) + 0.5 / math.log2(3)
    assert metrics["ndcg@5"] == pytest.approx(dcg / idcg)


def test_similarity_diagnostics_match_a_direct_computation():
    rng = np.random.default_rng(12)
    queries, gallery = rng.normal(size=(15, 6)), rng.normal(size=(25, 6))
    grades = random_grades(rng, 15, 25, 0.2, 2)
    excluded = (rng.random(grades.shape) < 0.1) & (grades == 0)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    g = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    sims = q @ g.T
    positive = np.array([sims[i, grades[i] > 0].mean() for i in range(15)])
    negative = np.array([sims[i, (grades[i] == 0) & ~excluded[i]].mean() for i in range(15)])
    diagnostics = evaluate(dataset_of(queries, gallery, grades, exclusions=excluded)).forward.diagnostics
    assert diagnostics["mean_positive_similarity"] == pytest.approx(positive.mean(), abs=1e-6)
    assert diagnostics["mean_negative_similarity"] == pytest.approx(negative.mean(), abs=1e-6)
    assert diagnostics["similarity_margin"] == pytest.approx((positive - negative).mean(), abs=1e-6)
    assert diagnostics["queries_without_negatives"] == 0


def test_queries_whose_every_item_is_relevant_have_no_negatives():
    diagnostics = evaluate(dataset_of(np.eye(2), np.eye(2), np.ones((2, 2)))).forward.diagnostics
    assert diagnostics["mean_negative_similarity"] is None and diagnostics["similarity_margin"] is None
    assert diagnostics["queries_without_negatives"] == 2
    assert diagnostics["mean_positive_similarity"] == pytest.approx(0.5)


def test_sparse_embeddings_rank_like_their_dense_form():
    queries, gallery, grades = tie_free_integers(13)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    dataset = dataset_of(sparse.csr_matrix(queries), sparse.csr_matrix(gallery), grades)
    assert_metrics_match(evaluate(dataset, similarity="dot").forward.metrics, trec(scores, grades))


def test_mixed_dense_queries_and_sparse_gallery_rank_like_dense():
    queries, gallery, grades = tie_free_integers(14)
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    dataset = dataset_of(queries, sparse.csr_matrix(gallery), grades)
    assert_metrics_match(evaluate(dataset, similarity="dot").forward.metrics,
                         trec(scores, grades))

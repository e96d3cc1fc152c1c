"""Retrieval metrics as pure functions of the relevant items' ranks and grades.

Inputs are CSR-aligned arrays: ``indptr`` delimits each query's relevant items,
``grades`` (> 0) and ``ranks`` (1-based, distinct within a query) describe them.
Every query has at least one relevant item.  Definitions follow trec_eval
(``docs/retrieval.md``): linear gains, ``1 / log2(rank + 1)`` discounts, precision
divided by k even when fewer items exist, and average precision divided by the
number of relevant items.  All values are per query; callers average them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ranking_metrics(indptr: np.ndarray, grades: np.ndarray, ranks: np.ndarray,
                    cutoffs: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-query ``ndcg/precision/recall/hit_rate/map/mrr@k`` for each cutoff, then full-ranking ``map``, ``mrr``."""
    n_queries = indptr.size - 1
    n_relevant = np.diff(indptr)
    query = np.repeat(np.arange(n_queries), n_relevant)
    starts = indptr[:-1]
    # Both orders keep each query's items in its own CSR segment, so `query` and `starts` still apply.
    by_rank = np.argsort(query * (int(ranks.max()) + 1) + ranks)  # ranks ascending within each query
    by_grade = np.lexsort((-grades, query))  # grades descending within each query: the ideal ranking
    rank = ranks[by_rank].astype(np.float64)
    found = np.arange(query.size) - starts[query] + 1  # relevant items ranked at or above this one
    ideal_rank = found.astype(np.float64)
    ideal_grades = grades[by_grade]
    # NDCG is invariant to scaling a query's gains; dividing by its largest grade keeps huge grades finite.
    top_grade = ideal_grades[starts][query]
    gain = grades[by_rank] / top_grade / np.log2(rank + 1)
    ideal_gain = ideal_grades / top_grade / np.log2(ideal_rank + 1)
    first = rank[starts]

    def per_query(weights: np.ndarray) -> np.ndarray:
        return np.bincount(query, weights=weights, minlength=n_queries)

    values: dict[str, np.ndarray] = {}
    for k in cutoffs:
        within = rank <= k
        hits = per_query(within)
        values[f"ndcg@{k}"] = per_query(gain * within) / per_query(ideal_gain * (ideal_rank <= k))
        values[f"precision@{k}"] = hits / k
        values[f"recall@{k}"] = hits / n_relevant
        values[f"hit_rate@{k}"] = (hits > 0).astype(np.float64)
        values[f"map@{k}"] = per_query(within * found / rank) / n_relevant
        values[f"mrr@{k}"] = np.where(first <= k, 1.0 / first, 0.0)
    values["map"] = per_query(found / rank) / n_relevant
    values["mrr"] = 1.0 / first
    return values


def similarity_diagnostics(indptr: np.ndarray, similarities: np.ndarray, eligible_sums: np.ndarray,
                           n_eligible: np.ndarray) -> dict[str, float | int | None]:
    """Mean positive and negative similarity per query, averaged over queries, and their margin.

    Negatives are the eligible non-relevant gallery items.  Queries whose every
    eligible item is relevant have no negatives and are left out of the negative
    mean and the margin (``None`` when no query has negatives).
    """
    n_relevant = np.diff(indptr)
    positive_sums = np.add.reduceat(similarities, indptr[:-1])
    positive = positive_sums / n_relevant
    n_negative = n_eligible - n_relevant
    has_negatives = n_negative > 0
    negative = (eligible_sums - positive_sums)[has_negatives] / n_negative[has_negatives]
    any_negatives = bool(has_negatives.any())
    return {
        "mean_positive_similarity": float(positive.mean()),
        "mean_negative_similarity": float(negative.mean()) if any_negatives else None,
        "similarity_margin": float((positive[has_negatives] - negative).mean()) if any_negatives else None,
        "queries_without_negatives": int((~has_negatives).sum()),
    }

"""Retrieval benchmark: exact blocked ranking against a bare blocked matmul + argpartition.

Full size: 10,000 queries x 100,000 gallery items x 384 float32 dimensions, 1-5
relevant gallery items per query with grades 1-3 (relevant items are noisy copies of
their query, so their ranks spread from 1 to deep in the gallery).  ``--small`` (or
``VERTEBRAE_BENCH_SMALL=1``) runs 1,000 x 10,000 x 64 for a quick check.

Printed:
* wall time of ``RetrievalBenchmark.run()`` (cosine, forward, default memory budget)
  relative to a bare loop over the same query blocks doing only the float32 matmul and
  ``argpartition`` for the top 100 (target <= 1.3x); best of ``--repeats`` each,
  interleaved, because the machine may be shared;
* peak RSS of the process after data generation and after the run (``ru_maxrss`` is
  per process, so it includes the input arrays), and the tracemalloc peak of one run;
* metric computation time (from the ranks) relative to pytrec_eval evaluating the
  top-100 run of the same scores (target >= 10x faster), plus the largest difference
  between the two on the cutoff metrics, which must agree.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tracemalloc
import warnings

import numpy as np
from scipy import sparse

from vertebrae import DatasetIdentity
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.families.retrieval import RetrievalBenchmark, RetrievalConfig, RetrievalDataset
from vertebrae.families.retrieval.metrics import ranking_metrics, similarity_diagnostics
from vertebrae.families.retrieval.ranking import plan_blocks, prepare_endpoints, rank_relevant

FULL = (10_000, 100_000, 384)
SMALL = (1_000, 10_000, 64)
TOP = 100
CUTOFFS = (1, 5, 10, 100)


def make_data(n_queries: int, n_gallery: int, dim: int, seed: int = 0):
    """Queries, a gallery whose relevant items are noisy copies of their query, and sparse graded relevance."""
    rng = np.random.default_rng(seed)
    queries = rng.standard_normal((n_queries, dim), dtype=np.float32)
    gallery = rng.standard_normal((n_gallery, dim), dtype=np.float32)
    per_query = rng.integers(1, 6, n_queries)
    rows = np.repeat(np.arange(n_queries), per_query)
    cols = rng.permutation(n_gallery)[: rows.size]  # each gallery item is relevant to at most one query
    noise = rng.uniform(0.3, 6.0, rows.size).astype(np.float32)[:, None]
    gallery[cols] = queries[rows] + noise * rng.standard_normal((rows.size, dim), dtype=np.float32)
    grades = rng.integers(1, 4, rows.size).astype(np.float64)
    relevance = sparse.csr_matrix((grades, (rows, cols)), shape=(n_queries, n_gallery))
    return queries, gallery, relevance


def baseline(queries: np.ndarray, gallery: np.ndarray, rows_per_block: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Bare blocked float32 matmul + argpartition (top 100, then sorted): the floor any exact method pays."""
    started = time.perf_counter()
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    g = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    buffer = np.empty((rows_per_block, g.shape[0]), dtype=np.float32)
    top_ids = np.empty((q.shape[0], TOP), dtype=np.int64)
    top_scores = np.empty((q.shape[0], TOP), dtype=np.float32)
    for start in range(0, q.shape[0], rows_per_block):
        stop = min(start + rows_per_block, q.shape[0])
        block = np.matmul(q[start:stop], g.T, out=buffer[: stop - start])
        ids = np.argpartition(block, -TOP, axis=1)[:, -TOP:]
        scores = np.take_along_axis(block, ids, axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")
        top_ids[start:stop] = np.take_along_axis(ids, order, axis=1)
        top_scores[start:stop] = np.take_along_axis(scores, order, axis=1)
    return time.perf_counter() - started, top_ids, top_scores


def ours(dataset: RetrievalDataset) -> float:
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RetrievalBenchmark(dataset, [PrecomputedExtractor("candidate")],
                           retrieval_config=RetrievalConfig(cutoffs=CUTOFFS), progress=False).run()
    return time.perf_counter() - started


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def pytrec_comparison(dataset: RetrievalDataset, top_ids: np.ndarray, top_scores: np.ndarray) -> None:
    import pytrec_eval

    config = RetrievalConfig(cutoffs=CUTOFFS)
    endpoints = prepare_endpoints(dataset.query_embeddings, dataset.gallery_embeddings, "cosine",
                                  query_ids=dataset.query_ids, gallery_ids=dataset.gallery_ids, source="bench")
    plan = plan_blocks(dataset.n_queries, dataset.n_gallery, config.memory_budget_bytes, None)
    ranked = rank_relevant(endpoints, dataset.relevance, dataset.exclusions, plan)
    relevance = dataset.relevance
    ranking_metrics(relevance.indptr, relevance.data, ranked.ranks, config.cutoffs)  # warm-up (pytrec: evaluator)
    started = time.perf_counter()
    per_query = ranking_metrics(relevance.indptr, relevance.data, ranked.ranks, config.cutoffs)
    ours_metrics = {name: float(v.mean()) for name, v in per_query.items()}
    similarity_diagnostics(relevance.indptr, ranked.similarities, ranked.eligible_similarity_sums, ranked.n_eligible)
    ours_seconds = time.perf_counter() - started

    qrels = {str(q): {str(g): int(grade) for g, grade in zip(relevance[q].indices, relevance[q].data)}
             for q in range(dataset.n_queries)}
    run = {str(q): {str(int(g)): float(s) for g, s in zip(top_ids[q], top_scores[q])} for q in range(dataset.n_queries)}
    cut = ",".join(str(k) for k in CUTOFFS)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{cut}", f"P.{cut}", f"recall.{cut}",
                                                       f"map_cut.{cut}", "recip_rank", "map"})
    started = time.perf_counter()
    trec = evaluator.evaluate(run)
    trec_seconds = time.perf_counter() - started
    pairs = {"ndcg": "ndcg_cut", "precision": "P", "recall": "recall", "map": "map_cut"}
    worst = max(abs(ours_metrics[f"{m}@{k}"] - np.mean([v[f"{t}_{k}"] for v in trec.values()]))
                for m, t in pairs.items() for k in CUTOFFS)
    print(f"metric computation: ours {ours_seconds * 1e3:.1f} ms, pytrec_eval {trec_seconds * 1e3:.1f} ms "
          f"(evaluate() only, {dataset.n_queries} queries x top {TOP}) -> {trec_seconds / ours_seconds:.0f}x faster "
          "(target >= 10x)")
    print(f"largest difference to pytrec_eval on ndcg/P/recall/map_cut at {CUTOFFS}: {worst:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", default=os.environ.get("VERTEBRAE_BENCH_SMALL") == "1")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    n_queries, n_gallery, dim = SMALL if args.small else FULL
    from threadpoolctl import threadpool_info

    threads = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    print(f"retrieval benchmark: {n_queries} queries x {n_gallery} gallery x {dim} float32; BLAS threads {threads}; "
          f"{os.cpu_count()} CPUs")
    queries, gallery, relevance = make_data(n_queries, n_gallery, dim)
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance,
                                               identity=DatasetIdentity.declared("bench-retrieval", "1"))
    print(f"relevant pairs: {relevance.nnz}; peak RSS after data generation: {rss_mib():.0f} MiB")

    tracemalloc.start()
    ours(dataset)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak RSS after RetrievalBenchmark.run(): {rss_mib():.0f} MiB; tracemalloc peak of the run: "
          f"{traced_peak / 2**20:.0f} MiB (memory budget {RetrievalConfig().memory_budget_bytes / 2**20:.0f} MiB "
          "plus float32 copies of the normalized embeddings)")

    rows_per_block = plan_blocks(n_queries, n_gallery, RetrievalConfig().memory_budget_bytes, None).rows_per_block
    base_times, our_times = [], []
    for _ in range(args.repeats):
        seconds, top_ids, top_scores = baseline(queries, gallery, rows_per_block)
        base_times.append(seconds)
        our_times.append(ours(dataset))
    print(f"wall time: RetrievalBenchmark.run() {min(our_times):.2f} s, bare matmul + argpartition "
          f"{min(base_times):.2f} s -> ratio {min(our_times) / min(base_times):.2f}x (target <= 1.3x); "
          f"all runs: ours {[round(t, 2) for t in our_times]}, baseline {[round(t, 2) for t in base_times]}")
    pytrec_comparison(dataset, top_ids, top_scores)


if __name__ == "__main__":
    main()

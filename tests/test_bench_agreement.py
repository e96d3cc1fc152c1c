"""The scoring helpers of benchmarks/bench_agreement.py (the figures in docs/validity.md come from them).

Regret, top-1 and the pick on hand-made cases; rank agreement against scipy called directly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_agreement as bench  # noqa: E402

PROBE = {"a": 0.90, "b": 0.95, "c": 0.80, "d": 0.95}


def test_pick_takes_the_highest_score_and_breaks_ties_by_order():
    assert bench.pick({"x": 0.1, "y": 0.7, "z": 0.3}) == "y"
    assert bench.pick({"x": 0.7, "y": 0.7, "z": 0.3}) == "x"
    assert bench.pick({"y": 0.7, "x": 0.7}) == "y"


def test_regret_and_top1_on_a_hand_made_case():
    assert bench.regret("a", PROBE) == pytest.approx(0.05)
    assert bench.regret("c", PROBE) == pytest.approx(0.15)
    assert bench.regret("b", PROBE) == 0.0 and bench.regret("d", PROBE) == 0.0
    assert [bench.top1_same(name, PROBE) for name in "abcd"] == [False, True, False, True]


def test_agreement_uses_the_pick_of_the_scores_and_scipy_rank_correlations():
    scores = {"c": 3.0, "a": 2.0, "b": 1.0, "d": 0.5}  # picks c, the probe's worst
    result = bench.agreement(scores, PROBE)
    x, y = [scores[n] for n in PROBE], list(PROBE.values())
    assert result["weighted_tau"] == pytest.approx(stats.weightedtau(x, y, weigher=lambda r: 1 / (r + 1)).statistic)
    assert result["weighted_tau"] == stats.weightedtau(x, y).statistic
    assert result["tau_b"] == stats.kendalltau(x, y).statistic
    assert result["top1"] is False and result["regret"] == pytest.approx(0.15)


def test_agreement_of_a_ranking_with_itself_is_perfect_and_the_ties_follow_the_scores_order():
    assert bench.agreement(PROBE, PROBE) == {"weighted_tau": pytest.approx(1.0), "tau_b": pytest.approx(1.0),
                                            "top1": True, "regret": 0.0}
    widths = {"c": 64.0, "a": 64.0, "b": 8.0, "d": 8.0}  # a static baseline with ties: c comes first
    assert bench.agreement(widths, PROBE)["regret"] == pytest.approx(0.15)


def test_spread_reports_mean_min_and_max_of_the_finite_values():
    assert bench.spread([0.5, None, 0.25, float("nan"), 1.0]) == "0.58 [0.25–1.00]"
    assert bench.spread([None]) == "—"


def test_size_prior_ranks_by_parameters_then_width_and_equal_sizes_tie():
    sizes = {"small": (22_000_000, 384), "base_narrow": (110_000_000, 256), "base": (110_000_000, 768),
             "base_twin": (110_000_000, 768), "tiny": (4_000_000, 1024)}
    scores = bench.size_prior(sizes)
    assert scores == {"small": 1.0, "base_narrow": 2.0, "base": 3.0, "base_twin": 3.0, "tiny": 0.0}
    assert bench.pick(scores) == "base"  # the first of the two largest, in candidate order
    probe = {"small": 0.7, "base_narrow": 0.8, "base": 0.75, "base_twin": 0.9, "tiny": 0.6}
    assert bench.agreement(scores, probe)["regret"] == pytest.approx(0.15)
    ordered = sorted(sizes, key=lambda n: sizes[n])
    assert [scores[n] for n in ordered] == sorted(scores.values())


def test_value_counts_orders_by_frequency_then_value():
    assert bench.value_counts([0.1, 0.01, 0.1, 10.0, 0.01, 0.1]) == "0.1 x 3, 0.01 x 2, 10 x 1"
    assert bench.value_counts([]) == ""


def test_patience_line_reads_the_choices_off_the_whole_grid_curves():
    # one draw, two candidates: the first's folds peak early (patience 1 stops after one decline, same choice; the
    # second fold declines once then rises above its best, which patience 1 misses and patience 2 sees)
    draw = [[[0.1, 0.5, 0.4, 0.3], [0.1, 0.5, 0.4, 0.6]], [[0.2, 0.3, 0.3, 0.1]]]
    assert bench.patience_line([draw], 1) == ("C_patience=1 (simulated): the same chosen C in 2/3 folds, "
                                              "1/2 candidates unchanged; 17% of the grid's values left unsearched")
    assert bench.patience_line([draw], 2) == ("C_patience=2 (simulated): the same chosen C in 3/3 folds, "
                                              "2/2 candidates unchanged; 0% of the grid's values left unsearched")
    assert bench.patience_line([[]], 1) == "C_patience=1: no inner scores recorded"


def test_ratio_is_the_spread_of_per_draw_ratios_and_skips_zero_denominators():
    assert bench.ratio([2.0, 6.0, 1.0], [1.0, 2.0, 0.0]) == bench.spread([2.0, 3.0]) == "2.50 [2.00–3.00]"
    assert bench.ratio([1.0], [4.0], 100) == "25.00 [25.00–25.00]"
    assert bench.ratio([1.0], [0.0]) == "—"


def test_probe_splits_are_scikit_learns_seeded_folds_and_bare_probe_is_cross_val_score_on_them():
    from sklearn.datasets import load_wine
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    labels = np.array(["cls" + str(v) for v in y])  # the bench's string labels
    splits = bench.probe_splits(labels, "single_label", 0)
    expected = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    assert len(splits) == 5
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(splits, expected))
    direct = cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)), X, y,
                             cv=StratifiedKFold(5, shuffle=True, random_state=0), scoring="balanced_accuracy").mean()
    assert bench.bare_probe(X, labels, "single_label", splits) == pytest.approx(direct, abs=1e-12)
    target = X[:, 0]
    reg = bench.probe_splits(target, "regression", 3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(reg, KFold(5, shuffle=True, random_state=3).split(X)))
    direct = cross_val_score(make_pipeline(StandardScaler(), Ridge()), X[:, 1:], target,
                             cv=KFold(5, shuffle=True, random_state=3), scoring="r2").mean()
    assert bench.bare_probe(X[:, 1:], target, "regression", reg) == pytest.approx(direct, abs=1e-12)


def test_policy_decisions_replay_the_recorded_referee_and_judge_everyone_under_all():
    from sklearn.datasets import load_wine

    from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, LinearProbeMetric, PrecomputedExtractor,
                           SeparatixConfig)

    X, y = load_wine(return_X_y=True)
    labels = np.array([str(v) for v in y])
    candidates = bench.tabular_variants(X, (2, 4), (1.0,), 0, {})
    dataset = BenchmarkDataset.from_embeddings(X, labels, identity=DatasetIdentity.ephemeral())
    result = Benchmark(dataset, [PrecomputedExtractor(name, matrix) for name, matrix in candidates.items()],
                       metrics=[LinearProbeMetric()], separatix_config=SeparatixConfig(enabled=False),
                       referee=LinearProbeMetric(), progress=False).run()
    probe = {r.name: r.metrics["linear_probe"].score for r in result.ranked_results()}
    decisions = bench.policy_decisions(result, probe)
    (recorded,) = result.referee_decisions()
    assert decisions["overlap"]["pick"] == recorded.pick
    assert decisions["overlap"]["finalists"] == len(recorded.finalists) < len(probe)
    assert decisions["all"]["pick"] == bench.pick(probe)  # probe is in ranking order: pick breaks ties alike
    assert decisions["all"]["finalists"] == len(probe) and decisions["all"]["judged"] == "all"
    seconds = {r.name: r.runtime["metric.linear_probe"] for r in result.ranked_results()}
    assert decisions["all"]["seconds"] == pytest.approx(sum(seconds.values()))
    assert decisions["auto"]["judged"] in ("all", "widened")
    assert decisions["overlap"]["finalists"] <= decisions["auto"]["finalists"] <= len(probe)


def test_evaluate_draw_without_the_bare_call_prints_its_time_and_gap_as_missing(capsys):
    rng = np.random.default_rng(0)
    y = np.repeat(np.array(["a", "b", "c"]), 20)
    signal = np.eye(3)[np.searchsorted(["a", "b", "c"], y)] * 3
    draw = bench.Draw(y, {"signal": signal + rng.normal(size=(60, 3)), "noise": rng.normal(size=(60, 4))})
    stability = bench.StabilityConfig(repeats=2)
    outcome = bench.evaluate_draw("tiny", 0, draw, stability, auto_C=False, bare=False)
    assert np.isnan(outcome.seconds["bare"]) and np.isnan(outcome.bare_gap)
    assert outcome.seconds["probe"] > 0 and outcome.agreements["overlap"]["top1"]
    bench.print_task("tiny", [outcome], stability)
    printed = capsys.readouterr().out
    assert "bare cross_val_score — s (bare / fast —x)" in printed
    assert "largest |score difference| — points" in printed

"""Probe verdicts: every candidate against the probe's best on the same folds, Nadeau and Bengio's corrected t."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from scipy import stats

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, ConfigError, DatasetIdentity, KNNMetric,
                       LinearProbeMetric, OverlapScoringConfig, PrecomputedExtractor)
from vertebrae.scoring.metric_result import MetricResult
from vertebrae.scoring.probe_verdicts import probe_verdicts

# two close spaces, a noisy one and a random one: the probe ties some and rules others out
from .test_referee import SPACES, X, Y


def run(spaces=SPACES, **kwargs) -> BenchmarkResult:
    dataset = BenchmarkDataset.from_arrays(X, Y, identity=DatasetIdentity.declared("probe-verdicts", "1"))
    kwargs.setdefault("metrics", [LinearProbeMetric(), KNNMetric()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Benchmark(dataset, [PrecomputedExtractor(name, matrix) for name, matrix in spaces.items()],
                         scoring_config=OverlapScoringConfig(k=3), progress=False, **kwargs).run()


@pytest.fixture(scope="module")
def probed() -> BenchmarkResult:
    return run()


def hand_verdicts() -> dict[str, tuple[float, float, float]]:
    """(mean, low, high) per candidate against the probe's best, from direct probe calls, numpy and scipy.stats.t."""
    folds = {name: np.asarray(LinearProbeMetric()(matrix, Y, seed=0)["diagnostics"]["fold_scores"])
             for name, matrix in SPACES.items()}
    best = max(folds, key=lambda name: folds[name].mean())
    J = folds[best].size
    n_test = len(Y) / 5  # 90 rows in 5 stratified folds: 18 test, 72 training rows per fold
    ratio = n_test / (len(Y) - n_test)
    out = {}
    for name, scores in folds.items():
        d = scores - folds[best]
        half = stats.t.ppf(0.975, J - 1) * d.std(ddof=1) * np.sqrt(1 / J + ratio)
        out[name] = (d.mean(), d.mean() - half, d.mean() + half)
    return out


def test_the_interval_is_the_corrected_resampled_t_computed_by_hand(probed):
    verdicts = probed.paired_verdicts(metric="linear_probe")
    expected = hand_verdicts()
    assert verdicts.available and verdicts.n_repeats == 5 and verdicts.interval_level == 0.95
    best = verdicts.against_best[0]
    assert best.verdict == "best" and expected[best.candidate][0] == 0.0
    for c in verdicts.against_best[1:]:
        mean, low, high = expected[c.candidate]
        assert (c.mean_difference, c.difference_low, c.difference_high) == pytest.approx((mean, low, high), abs=1e-12)
        assert c.verdict == ("worse" if high < 0 else "tied")
    # the scenario: the probe's best ties at least one candidate and rules the random space out
    assert {c.verdict for c in verdicts.against_best} == {"best", "tied", "worse"}
    order = sorted(expected, key=lambda n: -probed[n].metrics["linear_probe"].score)
    assert [c.candidate for c in verdicts.against_best] == order  # in the probe's order, not overlap's


def test_tied_with_best_by_the_probe_and_the_report_sentence(probed):
    expected = hand_verdicts()
    tied = [name for name, (_, _, high) in expected.items() if high >= 0]
    names = [r.name for r in probed.tied_with_best(metric="linear_probe")]
    best = names[0]
    assert set(names) == set(tied) and expected[best][0] == 0.0
    others = names[1:]
    sentence = (f"it cannot tell {best} from {others[0]} on these folds" if len(others) == 1 else
                f"it cannot tell {best} from {', '.join(others[:-1])} and {others[-1]} on these folds")
    line = f"The linear probe picks {best}; {sentence}"
    assert any(note.startswith(line) for note in probed.recommendations)
    assert f"the linear probe picks {best}; {sentence}" in probed.to_markdown()
    assert f"the linear probe picks {best}; {sentence}" in probed.to_html()
    order = [c.candidate for c in probed.paired_verdicts(metric="linear_probe").against_best]
    adjacent = probed.rank_verdicts(metric="linear_probe")  # each probe rank against the one above it
    assert [(c.candidate, c.reference) for c in adjacent] == list(zip(order[1:], order))


def test_verdicts_are_derived_on_load_and_nothing_new_is_stored(probed, tmp_path):
    loaded = BenchmarkResult.load(probed.save_json(tmp_path / "r.json"))
    assert loaded.paired_verdicts(metric="linear_probe") == probed.paired_verdicts(metric="linear_probe")
    assert "verdict" not in str(probed.serialized()["extractor_results"][0]["metrics"]["linear_probe"])


def test_a_metric_without_fold_scores_or_unknown_is_a_clear_config_error(probed):
    with pytest.raises(ConfigError, match=r"metric 'knn'.*knn of \w+ carries no per-fold scores"):
        probed.tied_with_best(metric="knn")
    assert not probed.paired_verdicts(metric="knn").available
    with pytest.raises(ConfigError, match=r"no metric 'tree' in this result.*'linear_probe'"):
        probed.tied_with_best(metric="tree")
    # the default stays the overlap score's paired verdicts (which need stability repeats here)
    with pytest.raises(ConfigError, match="paired verdicts need stability repeats"):
        probed.tied_with_best()


def test_folds_of_another_seed_are_not_paired(probed):
    data = copy.deepcopy(probed.serialized())
    data["extractor_results"][1]["metrics"]["linear_probe"]["metadata"]["seed"] = 7
    verdicts = BenchmarkResult.from_dict(data).paired_verdicts(metric="linear_probe")
    assert not verdicts.available and "used other folds" in verdicts.reason


def fold_result(scores: list[float], n_splits: int, n_repeats: int, sizes: tuple[list[int], list[int]]) -> MetricResult:
    return MetricResult(name="p", score=float(np.mean(scores)), diagnostics={"fold_scores": scores},
                        metadata={"n_splits": n_splits, "n_repeats": n_repeats, "seed": 0,
                                  "fold_test_sizes": sizes[0], "fold_train_sizes": sizes[1]})


def test_repeated_folds_use_the_recorded_fold_sizes():
    """3 splits x 2 repeats of 10 rows (test folds 4, 3, 3): J = 6 and n_test/n_train = mean(test)/mean(train)."""
    sizes = ([4, 3, 3, 4, 3, 3], [6, 7, 7, 6, 7, 7])
    a = [0.9, 0.8, 0.85, 0.95, 0.7, 0.8]
    b = [0.7, 0.8, 0.6, 0.9, 0.65, 0.75]
    verdicts = probe_verdicts(None, [("b", fold_result(b, 3, 2, sizes)), ("a", fold_result(a, 3, 2, sizes))], "p")
    assert [c.candidate for c in verdicts.against_best] == ["a", "b"] and verdicts.n_repeats == 6
    d = np.asarray(b) - np.asarray(a)
    half = stats.t.ppf(0.975, 5) * d.std(ddof=1) * np.sqrt(1 / 6 + np.mean(sizes[0]) / np.mean(sizes[1]))
    c = verdicts.against_best[1]
    assert (c.difference_low, c.difference_high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-12)
    assert c.verdict == ("worse" if d.mean() + half < 0 else "tied")
    plain = stats.t.ppf(0.975, 5) * d.std(ddof=1) / np.sqrt(6)
    assert half > plain  # the correction widens the plain paired t interval
    short = fold_result(a[:5], 3, 2, sizes)
    assert "has 5 fold scores for n_splits=3 x n_repeats=2" in probe_verdicts(
        None, [("a", short), ("b", fold_result(b, 3, 2, sizes))], "p").reason

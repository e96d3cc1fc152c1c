"""Paired verdicts (issue 30, item 1): each candidate against the best of its view on the same stability repeats."""

from __future__ import annotations

import copy

import numpy as np
from scipy.stats import ttest_rel
import pandas as pd
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CallableMetric, ConfigError,
                           DatasetIdentity, OverlapScoringConfig, PrecomputedExtractor, StabilityConfig, TargetView,
                           TargetViewConfig)
from vertebrae.reports.html import render_html
from vertebrae.reports.markdown import render_benchmark
from vertebrae.scoring.paired_verdicts import NEEDS_STABILITY, compare_paired

from .conftest import gaussian_classes

IDENTITY = DatasetIdentity.declared("verdicts", "1")
FAST = OverlapScoringConfig(k=3)


@pytest.fixture(scope="module")
def data():
    X, y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, spread=1.5, seed=1)
    noisy = X + np.random.default_rng(0).normal(0, 2.0, X.shape).astype(np.float32)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY), X, noisy


@pytest.fixture(scope="module")
def run(data):
    """One clearly better candidate listed between two identical copies of a worse one, and a copy of the best."""
    dataset, X, noisy = data
    extractors = [PrecomputedExtractor("noisy_a", noisy), PrecomputedExtractor("clean", X),
                  PrecomputedExtractor("noisy_b", noisy), PrecomputedExtractor("clean_copy", X)]
    return Benchmark(dataset, extractors, scoring_config=FAST, stability_config=StabilityConfig(repeats=6)).run()


def test_identical_copies_are_tied_with_a_zero_interval_and_the_worse_ones_are_worse(run):
    verdicts = run.paired_verdicts()
    assert verdicts.available and verdicts.n_repeats == 6 and verdicts.interval_level == 0.95
    by_name = {c.candidate: c for c in verdicts.against_best}
    assert [c.candidate for c in verdicts.against_best] == ["clean", "clean_copy", "noisy_a", "noisy_b"]
    assert by_name["clean"].verdict == "best"
    copy_of_best = by_name["clean_copy"]
    assert (copy_of_best.verdict, copy_of_best.difference_low, copy_of_best.difference_high,
            copy_of_best.share_better) == ("tied", 0.0, 0.0, 0.5)
    clean = np.array(run["clean"].stability.repeat_scores["score"])
    noisy = np.array(run["noisy_a"].stability.repeat_scores["score"])
    d = noisy - clean  # higher is better: negative = worse than the best
    for name in ("noisy_a", "noisy_b"):
        c = by_name[name]
        assert c.verdict == "worse" and c.difference_high < 0
        assert c.mean_difference == pytest.approx(d.mean())
        # the paired t-test's 95% interval of the mean difference, from scipy's own paired test
        reference = ttest_rel(noisy, clean).confidence_interval(confidence_level=0.95)
        assert (c.difference_low, c.difference_high) == pytest.approx((reference.low, reference.high))
        assert c.share_better == ((d > 0).sum() + 0.5 * (d == 0).sum()) / d.size
    assert [r.name for r in run.tied_with_best()] == ["clean", "clean_copy"]
    pairs = [(c.reference, c.candidate, c.verdict) for c in run.rank_verdicts()]
    assert pairs == [("clean", "clean_copy", "tied"), ("clean_copy", "noisy_a", "worse"),
                     ("noisy_a", "noisy_b", "tied")]
    tied_copies = run.rank_verdicts()[2]
    assert (tied_copies.difference_low, tied_copies.difference_high) == (0.0, 0.0)


def _hand_made(run, scores: dict[str, list[float]], level: float = 0.5) -> BenchmarkResult:
    """``run`` with its repeat scores replaced (and the primary scores set to the first repeat, as in prototype
    mode), rebuilt from JSON: the verdicts are derived from the stored repeats alone."""
    data = copy.deepcopy(run.serialized())
    data["extractor_results"] = [r for r in data["extractor_results"] if r["name"] in scores]
    for r in data["extractor_results"]:
        n = len(scores[r["name"]])  # a consistent document: one value per repeat everywhere (the loader checks it)
        r["stability"]["repeat_scores"] = {name: (values * n)[:n] for name, values in
                                           r["stability"]["repeat_scores"].items()}
        r["stability"]["repeat_scores"]["score"] = scores[r["name"]]
        r["stability"]["effective_subsample_fractions"] = (r["stability"]["effective_subsample_fractions"] * n)[:n]
        r["stability"]["config"]["repeats"] = n
        r["stability"]["config"]["interval_level"] = level
        r["overlap"]["score"] = r["primary_score"] = r["metrics"]["overlap"]["score"] = scores[r["name"]][0]
    return BenchmarkResult.from_dict(data)


def test_hand_derived_interval_share_and_verdicts(run):
    # d(noisy_a - clean) = [-0.04, -0.03, -0.02, -0.01, 0.00, 0.00]: the 50% t-interval of its mean, by hand.
    scores = {"clean": [0.90, 0.80, 0.70, 0.60, 0.50, 0.40],
              "noisy_a": [0.86, 0.77, 0.68, 0.59, 0.50, 0.40],   # d = -.04 -.03 -.02 -.01 0 0
              "noisy_b": [0.89, 0.82, 0.69, 0.61, 0.50, 0.39]}   # d = -.01 +.02 -.01 +.01 0 -.01
    result = _hand_made(run, {k: [*v] for k, v in scores.items()})
    by_name = {c.candidate: c for c in result.paired_verdicts().against_best}
    a, b = by_name["noisy_a"], by_name["noisy_b"]
    # mean -1/60; squared deviations sum to 0.0013333 -> sd = sqrt(0.0013333 / 5) = 0.016330, se = sd / sqrt(6)
    # = 0.0066667; t(0.75, 5 df) = 0.72669 -> half-width 0.0048446: [-0.0215113, -0.0118221]
    assert (a.difference_low, a.difference_high) == pytest.approx((-0.0215113, -0.0118221), abs=1e-6)
    assert a.mean_difference == pytest.approx(-0.1 / 6) and a.share_better == pytest.approx(1 / 6)  # two ties
    assert a.verdict == "worse"  # although it never beats the best and ties it twice
    # d_b = -.01 .02 -.01 .01 0 -.01: mean 0, sd = sqrt(0.0008 / 5) = 0.012649, se = 0.0051640 -> +-0.0037526
    assert (b.difference_low, b.difference_high) == pytest.approx((-0.0037526, 0.0037526), abs=1e-6)
    assert b.share_better == pytest.approx((2 + 0.5) / 6) and b.verdict == "tied"
    assert [r.name for r in result.tied_with_best()] == ["clean", "noisy_b"]
    # noisy_b ranks above noisy_a (0.89 > 0.86): their adjacent difference is d = a - b
    adjacent = result.rank_verdicts()[1]
    assert (adjacent.reference, adjacent.candidate) == ("noisy_b", "noisy_a")
    assert adjacent.mean_difference == pytest.approx(np.mean(np.subtract(scores["noisy_a"], scores["noisy_b"])))


def test_repeats_that_contradict_the_ranking_are_flagged_never_silent(run):
    scores = {"clean": [0.90, 0.50, 0.50, 0.50], "noisy_a": [0.80, 0.60, 0.60, 0.60]}
    result = _hand_made(run, scores)
    c = result.paired_verdicts().against_best[1]
    assert (c.candidate, c.verdict, c.contradicts_ranking) == ("noisy_a", "tied", True)
    assert c.difference_low > 0
    assert [r.name for r in result.tied_with_best()] == ["clean", "noisy_a"]
    md = result.to_markdown()
    assert "**The repeats contradict the ranking** for noisy\\_a" in md or \
        "**The repeats contradict the ranking** for noisy_a" in md
    assert "tied (repeats favour it)" in md


def test_direction_lower_is_better():
    # A loss: the candidate's repeats are lower (better) in every repeat than the reference's.
    better = compare_paired("c", "ref", [0.1, 0.2, 0.3], [0.5, 0.5, 0.5], higher_is_better=False, interval_level=0.9)
    assert better.mean_difference == pytest.approx(0.3) and better.share_better == 1.0
    assert better.contradicts_ranking and better.verdict == "tied"
    worse = compare_paired("c", "ref", [0.9, 0.8, 0.7], [0.5, 0.5, 0.5], higher_is_better=False, interval_level=0.9)
    assert worse.mean_difference == pytest.approx(-0.3) and worse.share_better == 0.0 and worse.verdict == "worse"
    up = compare_paired("c", "ref", [0.9, 0.8, 0.7], [0.5, 0.5, 0.5], higher_is_better=True, interval_level=0.9)
    assert up.mean_difference == pytest.approx(0.3) and up.contradicts_ranking


def test_a_custom_primary_metric_is_not_judged_by_overlap_repeats(data):
    dataset, X, noisy = data

    def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
        return {"score": float(np.asarray(embeddings).std())}

    result = Benchmark(dataset, [PrecomputedExtractor("clean", X), PrecomputedExtractor("noisy", noisy)],
                       scoring_config=FAST, stability_config=StabilityConfig(repeats=3),
                       metrics=[CallableMetric("spread", spread, higher_is_better=False)],
                       primary_metric="spread").run()
    verdicts = result.paired_verdicts()
    assert not verdicts.available and "ranking is by 'spread'" in verdicts.reason
    with pytest.raises(ConfigError, match="re-score the overlap metric"):
        result.tied_with_best()
    assert result.to_dataframe()["verdict"].isna().all()


def test_without_stability_the_result_says_how_to_turn_it_on(data):
    dataset, X, noisy = data
    result = Benchmark(dataset, [PrecomputedExtractor("clean", X), PrecomputedExtractor("noisy", noisy)],
                       scoring_config=FAST).run()
    verdicts = result.paired_verdicts()
    assert not verdicts.available and verdicts.reason == NEEDS_STABILITY
    assert "StabilityConfig(mode='prototype', repeats=20)" in verdicts.reason
    for call in (result.tied_with_best, result.rank_verdicts):
        with pytest.raises(ConfigError, match="paired verdicts need stability"):
            call()
    md, page = result.to_markdown(), result.to_html()
    assert "**Which differences are real:** unavailable; paired verdicts need stability" in md
    for text in ("Which differences are real?", "Paired verdicts unavailable:", "repeats=20", "Quality cohort"):
        assert text in md and text in page, text
    frame = result.to_dataframe()
    assert {"verdict", "paired_difference_low", "paired_difference_high"} <= set(frame.columns)
    assert frame["verdict"].isna().all()


def test_invalid_results_are_left_out(run):
    data = copy.deepcopy(run.serialized())
    broken = next(r for r in data["extractor_results"] if r["name"] == "clean_copy")
    broken["metrics"]["overlap"].update(aggregate_valid=False, score=None)
    broken["primary_score"] = None
    result = BenchmarkResult.from_dict(data)
    names = [c.candidate for c in result.paired_verdicts().against_best]
    assert names == ["clean", "noisy_a", "noisy_b"]
    assert [r.name for r in result.tied_with_best()] == ["clean"]
    frame = result.to_dataframe(include_invalid=True).set_index("extractor")
    assert pd.isna(frame.loc["clean_copy", "verdict"]) and frame.loc["noisy_a", "verdict"] == "worse"


def test_unpaired_repeats_are_refused(run):
    data = copy.deepcopy(run.serialized())
    other = next(r for r in data["extractor_results"] if r["name"] == "noisy_b")
    other["stability"]["scoring_seeds"][1] += 1
    verdicts = BenchmarkResult.from_dict(data).paired_verdicts()
    assert not verdicts.available and "noisy_b was repeated with other seeds" in verdicts.reason


def test_per_view(data):
    dataset, X, noisy = data
    y = np.asarray(dataset.targets.keys)
    coarse = np.where(y == y[0], "first", "rest")
    viewed = dataset.with_target_views([TargetView("coarse", coarse), TargetView("fine", y)])
    result = Benchmark(viewed, [PrecomputedExtractor("clean", X), PrecomputedExtractor("noisy", noisy)],
                       scoring_config=FAST, stability_config=StabilityConfig(repeats=4),
                       target_view_config=TargetViewConfig(views=("coarse", "fine"))).run()
    assert result.views() == ["target=coarse", "target=fine"]
    with pytest.raises(ConfigError, match="pass view="):
        result.paired_verdicts()
    for view in result.views():
        verdicts = result.paired_verdicts(view)
        assert verdicts.view == view and verdicts.available
        ranked = result.ranked_results(view)
        assert [c.candidate for c in verdicts.against_best] == [r.name for r in ranked]
        assert all(r.view == view for r in result.tied_with_best(view))
    md = result.to_markdown()
    assert md.count("Adjacent ranks, each against the one above it") == len(result.views())


def test_the_report_renders_from_the_archived_json(run, tmp_path):
    path = run.save_json(tmp_path / "run.json")
    data = BenchmarkResult.load(path).serialized()
    md, page = render_benchmark(data), render_html(data)
    section = md[md.index("## Which differences are real?"):]
    section = section[:section.index("\n## ")]
    score = f"{run['clean'].primary_score:.4f}"
    assert f"| 1 | clean_copy | {score} | 0.0000 | [0.0000, 0.0000] | 0.5000 | tied |" in section
    assert "**Tied with the best:** clean, clean_copy." in section
    # the interval the table prints is the paired t interval the verdicts use, and the text says so
    assert "95% confidence interval of the mean d_r (Student's t over the repeats" in section
    assert "percentile range" not in section
    assert "Which differences are real?" in page and "Adjacent ranks" in page
    answer = md[:md.index("## Ranking")]
    assert ("**Tied with the best** (paired verdicts over 6 repeats, 95% interval): clean, clean_copy; worse: "
            "noisy_a, noisy_b.") in answer
    assert "\"verdict\"" not in run.to_json()  # derived from the repeat scores, never stored twice


def test_verdict_numbers_are_plain_floats_in_their_repr(run):
    """Issue 37 item 25: every number of a comparison is a plain float, so its repr never shows np.float64(...)."""
    scores = {"clean": [0.90, 0.80, 0.70, 0.60, 0.50, 0.40],
              "noisy_a": [0.86, 0.77, 0.68, 0.59, 0.50, 0.40],
              "noisy_b": [0.89, 0.82, 0.69, 0.61, 0.50, 0.39]}
    result = _hand_made(run, scores)
    comparisons = [*result.rank_verdicts(), *result.paired_verdicts().against_best]
    assert any(c.difference_low != c.difference_high for c in comparisons)  # a real interval, not a point
    for c in comparisons:
        for field in ("mean_difference", "difference_low", "difference_high", "share_better"):
            assert type(getattr(c, field)) is float, (c.candidate, field)
        assert "np.float64" not in repr(c)

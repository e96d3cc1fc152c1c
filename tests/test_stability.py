"""Stability analysis: config validation, target-aware subsampling, seeds, formats, summaries, ranking."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import sparse
from scipy.stats import kendalltau

from vertebrae.errors import ConfigError, ConfigTypeError, InputValidationError
from vertebrae.scoring.overlap import ContinuousOverlapScoringConfig, OverlapIndexScorer, OverlapScoringConfig
from vertebrae.scoring.stability import (StabilityConfig, StabilityResult, StabilitySummary, ranking_stability,
                                             run_stability_analysis, subsample_size)
from vertebrae.inputs.targets import build_targets

from .references import direct_oi, label_codes, per_class_rows


class RecordingScorer(OverlapIndexScorer):
    """A real scorer that remembers what reached it (not a mock: it still calls OverlapIndex)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[type, object]] = []

    def score(self, embeddings, targets, **kwargs):
        self.calls.append((type(embeddings), targets))
        return super().score(embeddings, targets, **kwargs)


def _scorer() -> RecordingScorer:
    return RecordingScorer(OverlapScoringConfig(k=3),
                           ContinuousOverlapScoringConfig(k=2, n_null_permutations=2))


@pytest.fixture(scope="module")
def three_blobs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(i, 1.0, (30, 6)) for i in range(3)]).astype(np.float32)
    return X, np.repeat(np.array(["a", "b", "c"]), 30)


def _small_classes(class_size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3 * class_size + 20, 4))
    return X, np.array(["big"] * 20 + ["x"] * class_size + ["y"] * class_size + ["z"] * class_size)


# ----------------------------------------------------------------------- config
def test_config_defaults_round_trip_and_immutability() -> None:
    config = StabilityConfig()
    assert (config.mode, config.repeats, config.interval_level, config.subsample_fraction, config.random_state,
            config.n_jobs) == ("prototype", 20, 0.95, 0.8, 0, 1)
    assert StabilityConfig.from_json(config.replace(mode="subsample").to_json()) == config.replace(mode="subsample")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.repeats = 3  # type: ignore[misc]


def test_removed_stratified_field_is_rejected_with_reason() -> None:
    with pytest.raises(ConfigError, match="'stratified' was removed: categorical subsampling cannot opt out of "
                                          "target preservation"):
        StabilityConfig.from_dict({"mode": "subsample", "stratified": False})
    with pytest.raises(ConfigError, match="'stratified' was removed: categorical subsampling"):
        StabilityConfig(mode="subsample", stratified=True)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="unknown field 'bootstrap'"):
        StabilityConfig.from_dict({"bootstrap": True})


@pytest.mark.parametrize("changes, message", [
    ({"repeats": 1}, "repeats must be >= 2"),
    ({"repeats": 2.0}, "repeats must be an integer"),
    ({"interval_level": 0.0}, r"interval_level must be in \(0.0, 1.0\)"),
    ({"interval_level": 1.0}, r"interval_level must be in \(0.0, 1.0\)"),
    ({"subsample_fraction": 0.0}, r"subsample_fraction must be in \(0.0, 1.0\]"),
    ({"subsample_fraction": 1.01}, r"subsample_fraction must be in \(0.0, 1.0\]"),
    ({"mode": "bootstrap"}, r"mode must be one of \['prototype', 'subsample'\]"),
    ({"n_jobs": 0}, "n_jobs must be >= 1"),
    ({"random_state": -1}, "random_state must be >= 0"),
])
def test_bad_config_fails_before_any_work(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StabilityConfig(**changes)


def test_full_fraction_is_allowed() -> None:
    assert StabilityConfig(subsample_fraction=1).subsample_fraction == 1.0


def test_subsample_size_floors_the_decimal_fraction() -> None:
    assert subsample_size(5, 0.4) == 2
    assert subsample_size(5, 0.39) == 1
    assert subsample_size(100, 0.57) == 57  # binary floating point alone would give 56


@pytest.mark.parametrize("window, error, match", [
    ("all", ConfigTypeError, "window must be a pair \\(start, stop\\) of repeat indices, got 'all'"),
    ((0, 1.5), ConfigTypeError, r"window\[1\] must be an integer"),
    ((0, 100), ConfigError, r"0 <= start < stop <= 3 \(StabilityConfig.repeats=3\), got \(0, 100\)"),
    ((2, 2), ConfigError, "start < stop"),
])
def test_a_bad_window_is_refused_before_any_scoring(three_blobs, window, error, match) -> None:
    """A window of a fixed count stays within its repeats: (0, 100) of repeats=3 scored 3 repeats as if asked."""
    scorer = _scorer()
    with pytest.raises(error, match=match):
        run_stability_analysis(*three_blobs, config=StabilityConfig(repeats=3), scorer=scorer, window=window)
    assert scorer.calls == []


# ----------------------------------------------------------------------- prototype mode
def test_prototype_mode_varies_only_the_seed(three_blobs) -> None:
    X, y = three_blobs
    scorer = _scorer()
    result = run_stability_analysis(X, y, config=StabilityConfig(repeats=4), scorer=scorer)
    assert result.sampling_seeds == [] and result.repeat_class_counts == []
    assert result.effective_sample_counts == [90] * 4 and result.effective_subsample_fractions == [1.0] * 4
    assert len(set(result.scoring_seeds)) == 4
    assert len(scorer.calls) == 4 and all(targets is scorer.calls[0][1] for _, targets in scorer.calls)
    # Every repeat equals OverlapIndex called directly with its recorded seed on all rows, and the seed matters.
    direct = [direct_oi(X, label_codes(y), 3, seed=s).index for s in result.scoring_seeds]
    assert result.repeat_scores["score"] == direct
    assert len(set(direct)) > 1


def test_seed_streams_are_documented_and_deterministic(three_blobs) -> None:
    X, y = three_blobs
    config = StabilityConfig(mode="subsample", repeats=3, random_state=7)
    first = run_stability_analysis(X, y, config=config, scorer=_scorer())
    assert first.to_dict() == run_stability_analysis(X, y, config=config, scorer=_scorer()).to_dict()
    scoring, sampling = np.random.SeedSequence(7).spawn(2)
    # Repeat 0 uses the scorer's own seed (random_state 0, the primary draw), then the stream's first seeds.
    assert first.scoring_seeds == [0, *scoring.generate_state(3).tolist()[:2]]
    assert first.sampling_seeds == sampling.generate_state(3).tolist()
    prototype = run_stability_analysis(X, y, config=config.replace(mode="prototype"), scorer=_scorer())
    assert prototype.scoring_seeds == first.scoring_seeds  # the sampling stream never shifts the scoring seeds
    other = run_stability_analysis(X, y, config=config.replace(random_state=8), scorer=_scorer())
    assert other.scoring_seeds != first.scoring_seeds


# ----------------------------------------------------------------------- matrix formats
@pytest.mark.parametrize("mode", ["prototype", "subsample"])
def test_sparse_stays_csr_and_dense_stays_dense(three_blobs, mode: str) -> None:
    X, y = three_blobs
    config = StabilityConfig(mode=mode, repeats=3)
    sparse_scorer, dense_scorer = _scorer(), _scorer()
    sparse_result = run_stability_analysis(sparse.csc_matrix(X), y, config=config, scorer=sparse_scorer)
    dense_result = run_stability_analysis(X, y, config=config, scorer=dense_scorer)
    assert [kind for kind, _ in sparse_scorer.calls] == [sparse.csr_matrix] * 3
    assert [kind for kind, _ in dense_scorer.calls] == [np.ndarray] * 3
    np.testing.assert_allclose(sparse_result.repeat_scores["score"], dense_result.repeat_scores["score"])


# ----------------------------------------------------------------------- subsample rules
def test_single_label_samples_floor_per_class(three_blobs) -> None:
    X, y = three_blobs
    y = y.copy()
    y[:7] = "d"  # classes of 7, 23, 30, 30
    result = run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=3, subsample_fraction=0.5),
                                    scorer=_scorer())
    expected = {"str:a": 11, "str:b": 15, "str:c": 15, "str:d": 3}
    assert result.repeat_class_counts == [expected] * 3
    assert result.effective_sample_counts == [44] * 3
    assert result.effective_subsample_fractions == [44 / 90] * 3


def test_subsample_repeats_score_the_documented_rows_with_a_direct_overlapindex_call(three_blobs) -> None:
    """Each subsample repeat equals OverlapIndex called directly on rows derived here from the documented rule
    (docs/stability.md): sampling seed i is ``SeedSequence(random_state).spawn(2)[1].generate_state(repeats)[i]``,
    and ``default_rng(seed)`` draws floor(n_c x fraction) rows of each class in sorted class order without
    replacement; scoring seeds are the scorer's own (0), then ``spawn(2)[0]``'s first ones."""
    X, y = three_blobs
    y = y.copy()
    y[:7] = "d"  # classes a, b, c, d of 23, 30, 30, 7 rows: 11, 15, 15, 3 are kept
    result = run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=4, subsample_fraction=0.5,
                                                                 random_state=5), scorer=_scorer())
    scoring, sampling = np.random.SeedSequence(5).spawn(2)
    scoring_seeds, sampling_seeds = [0, *scoring.generate_state(3).tolist()], sampling.generate_state(4).tolist()
    rows = [per_class_rows(y, [11, 15, 15, 3], seed) for seed in sampling_seeds]
    assert all(not np.array_equal(rows[0], r) for r in rows[1:])  # every repeat draws other rows
    codes = label_codes(y)
    k = {0: 2, 1: 3, 2: 3, 3: 2}  # k=3 capped at each kept class's capacity max(2, n_c // 5): 2, 3, 3, 2
    expected = [direct_oi(X[r], codes[r], k, seed=s).index for r, s in zip(rows, scoring_seeds)]
    assert (result.scoring_seeds, result.sampling_seeds) == (scoring_seeds, sampling_seeds)
    assert result.repeat_scores["score"] == expected and all(0 < v < 1 for v in expected)


def test_single_label_boundary() -> None:
    X, y = _small_classes(5)
    ok = run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=2, subsample_fraction=0.4),
                                scorer=_scorer())
    assert all(counts["str:x"] == 2 for counts in ok.repeat_class_counts)
    scorer = _scorer()
    with pytest.raises(ConfigError, match=r"'x': floor\(5 x 0.39\) = 1.*at least 2 rows.*>= 0.4.*mode='prototype'"):
        run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=2, subsample_fraction=0.39),
                               scorer=scorer)
    assert scorer.calls == []  # failed before any repeat was scored


def _disjoint_labels() -> tuple[np.ndarray, np.ndarray]:
    """20 rows: labels 0-3 have exactly 2 positive rows each (rows 0-7); label 4 is on every row."""
    Y = np.zeros((20, 5), dtype=np.int8)
    Y[np.arange(8), np.repeat(np.arange(4), 2)] = 1
    Y[:, 4] = 1
    return np.random.default_rng(2).normal(size=(20, 4)), Y


def test_multi_label_keeps_two_positives_of_every_label() -> None:
    X, Y = _disjoint_labels()
    result = run_stability_analysis(X, Y, config=StabilityConfig(mode="subsample", repeats=3, subsample_fraction=0.5),
                                    scorer=_scorer())
    assert result.effective_sample_counts == [10] * 3
    for counts in result.repeat_class_counts:
        assert [counts[f"int:{j}"] for j in range(4)] == [2, 2, 2, 2] and counts["int:4"] == 10


def test_multi_label_boundary() -> None:
    X, Y = _disjoint_labels()  # rows 0-7 are required in every draw
    ok = run_stability_analysis(X, Y, config=StabilityConfig(mode="subsample", repeats=2, subsample_fraction=0.4),
                                scorer=_scorer())
    assert ok.effective_sample_counts == [8, 8]
    scorer = _scorer()
    with pytest.raises(ConfigError, match=r"needs 8 rows in this draw, but floor\(20 x 0.35\) = 7.*mode='prototype'"):
        run_stability_analysis(X, Y, config=StabilityConfig(mode="subsample", repeats=2, subsample_fraction=0.35),
                               scorer=scorer)
    assert scorer.calls == []


def test_regression_boundary_and_non_constant_target() -> None:
    X = np.random.default_rng(3).normal(size=(10, 4))
    y = np.zeros(10)
    y[9] = 1.0  # most draws of 3 rows would be constant
    scorer = _scorer()
    result = run_stability_analysis(X, y, target_type="regression", scorer=scorer,
                                    config=StabilityConfig(mode="subsample", repeats=4, subsample_fraction=0.3))
    assert result.effective_sample_counts == [3] * 4 and result.repeat_class_counts == []
    assert all(np.ptp(targets.values) > 0 for _, targets in scorer.calls)
    scorer = _scorer()
    with pytest.raises(ConfigError, match=r"floor\(10 x 0.29\) = 2 rows; regression repeats need at least 3"):
        run_stability_analysis(X, y, target_type="regression", scorer=scorer,
                               config=StabilityConfig(mode="subsample", repeats=4, subsample_fraction=0.29))
    assert scorer.calls == []


# ----------------------------------------------------------------------- summaries and serialization
def test_summary_definition() -> None:
    summary = StabilitySummary.of([0.0, 1.0, 2.0, 3.0, 4.0], 0.5)
    assert summary == StabilitySummary(mean=2.0, std=np.sqrt(2.5), min=0.0, max=4.0, interval_low=1.0,
                                       interval_high=3.0)
    assert summary.interval_width == 2.0


def test_result_summaries_and_exact_round_trip(three_blobs) -> None:
    X, y = three_blobs
    result = run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=5, interval_level=0.8),
                                    scorer=_scorer())
    assert set(result.summaries) == set(result.repeat_scores) == {"score", "macro", "weighted"}
    for name, values in result.repeat_scores.items():
        assert len(values) == 5 and result.summaries[name] == StabilitySummary.of(values, 0.8)
    low, high = np.percentile(result.repeat_scores["score"], [10, 90])
    assert (result.summary.interval_low, result.summary.interval_high) == pytest.approx((low, high))
    text = json.dumps(result.to_dict())
    assert "confidence" not in text
    assert StabilityResult.from_dict(json.loads(text)) == result


# ----------------------------------------------------------------------- parallel
def test_parallel_repeats_match_sequential(three_blobs) -> None:
    X, y = three_blobs
    config = StabilityConfig(mode="subsample", repeats=4)
    sequential = run_stability_analysis(sparse.csr_matrix(X), y, config=config)
    parallel = run_stability_analysis(sparse.csr_matrix(X), y, config=config.replace(n_jobs=2))
    assert parallel.to_dict() == sequential.to_dict()  # n_jobs is speed-only: not even the stored config differs


# ----------------------------------------------------------------------- input errors
def test_input_errors(three_blobs) -> None:
    X, y = three_blobs
    with pytest.raises(InputValidationError, match="90 rows"):
        run_stability_analysis(X[:10], build_targets(y))
    with pytest.raises(ConfigError, match="scorer must be an OverlapIndexScorer"):
        run_stability_analysis(X, y, scorer=OverlapScoringConfig())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config must be a StabilityConfig"):
        run_stability_analysis(X, y, config={"repeats": 3})  # type: ignore[arg-type]


# ----------------------------------------------------------------------- ranking stability
def test_ranking_stability_hand_case() -> None:
    scores = {"a": [0.9, 0.9, 0.9], "b": [0.5, 0.6, 0.3], "c": [0.4, 0.2, 0.4]}
    out = ranking_stability(scores)
    # Repeat rankings: (a, b, c), (a, b, c), (a, c, b) -> taus 1, 1/3, 1/3.
    assert out["reference_ranks"] == {"a": 1, "b": 2, "c": 3}
    assert out["rank_retention"] == pytest.approx({"a": 1.0, "b": 2 / 3, "c": 2 / 3})
    assert out["mean_ranks"] == pytest.approx({"a": 1.0, "b": 7 / 3, "c": 8 / 3})
    assert (out["top_extractor"], out["top_retention"]) == ("a", 1.0)
    columns = np.array(list(scores.values())).T
    scipy_mean = np.mean([kendalltau(columns[r], columns[s]).statistic for r, s in itertools.combinations(range(3), 2)])
    assert out["mean_kendall_tau"] == pytest.approx(5 / 9) == pytest.approx(scipy_mean)
    assert out["kendall_tau_pairs"] == 3
    json.dumps(out)


def test_ranking_stability_lower_is_better_and_ties() -> None:
    out = ranking_stability({"a": [1.0, 3.0, 1.0], "b": [2.0, 3.0, 2.0]}, higher_is_better=False)
    assert out["reference_ranks"] == {"a": 1, "b": 2}
    assert out["rank_retention"] == pytest.approx({"a": 1.0, "b": 2 / 3})  # repeat 2 is a tie: both rank 1
    # Tau is undefined against the all-tied repeat 2, so only the pair (1, 3) counts.
    assert out["mean_kendall_tau"] == 1.0 and out["kendall_tau_pairs"] == 1


@pytest.mark.parametrize("scores, message", [
    ({"a": [1.0, 2.0]}, "at least 2 extractors"),
    ({"a": [1.0, 2.0], "b": [1.0]}, "same number of stability repeats"),
    ({"a": [1.0], "b": [2.0]}, "at least 2 finite repeat scores"),
    ({"a": [1.0, float("nan")], "b": [2.0, 1.0]}, "NaN"),
])
def test_ranking_stability_rejects_bad_input(scores: dict, message: str) -> None:
    with pytest.raises(InputValidationError, match=message):
        ranking_stability(scores)


@pytest.mark.parametrize("target_type, n, keep", [("single_label", 7, 2), ("regression", 11, 3)])
def test_the_suggested_subsample_fraction_is_enough(target_type, n, keep) -> None:
    """The hint printed 2/7 as 0.2857, which keeps floor(7 x 0.2857) = 1 row: it must name a fraction that works."""
    import re

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2 * n, 3))
    y = np.repeat([0, 1], n) if target_type == "single_label" else rng.normal(size=2 * n)
    count = n if target_type == "single_label" else 2 * n
    config = StabilityConfig(mode="subsample", repeats=4, subsample_fraction=0.1)
    with pytest.raises(ConfigError, match="would do") as refused:
        run_stability_analysis(X, y, target_type=target_type, scorer=_scorer(), config=config)
    suggested = float(re.search(r"subsample_fraction >= ([0-9.]+) would do", str(refused.value)).group(1))
    assert math.floor(count * Fraction(str(suggested))) >= keep > math.floor(count * Fraction(str(suggested - 1e-4)))
    run_stability_analysis(X, y, target_type=target_type, scorer=_scorer(),
                           config=StabilityConfig(mode="subsample", repeats=4, subsample_fraction=suggested))

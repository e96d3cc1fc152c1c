"""MemoryConfig: the scoring-memory estimate, the target-preserving subsample over budget, and the fail policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import gaussian_classes
from tests.references import direct_oi, per_class_rows
from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, ContinuousOverlapScoringConfig,
                       DatasetIdentity, MemoryConfig, OverlapScoringConfig, PrecomputedExtractor, SeparatixConfig,
                       StabilityConfig)
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.errors import ConfigError, MemoryBudgetError
from vertebrae.scoring.memory import estimate_scoring_bytes, smallest_scoring_bytes
from vertebrae.inputs.targets import build_targets

IDENTITY = DatasetIdentity.declared("memory", "1")
NO_SEPARATIX = SeparatixConfig(enabled=False)


def blobs(n_per_class=60, spread=3.0):
    X, y = gaussian_classes(n_per_class=n_per_class, n_classes=3, dim=8, spread=spread)
    return X, y, BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)


def test_estimate_adds_the_float64_copy_the_class_slices_the_tiles_and_row_bookkeeping():
    X, y, _ = blobs()  # 180 x 8, 3 classes of 60
    # auto k: capacity max(2, 60 // 5) = 12, clipped to [10, 50] -> 12 per class, 36 prototypes
    copy = 8 * 180 * 8
    expected = copy + copy + 8 * 180 * 36 + 64 * 180
    assert estimate_scoring_bytes(X, build_targets(y), OverlapScoringConfig()) == expected == 86_400
    multi = build_targets([{0, 1} if i % 2 else {0} for i in range(180)])  # labels on 180 + 90 rows
    k = {"label0": 10, "label1": 10}  # auto: capacities 36 and 18 -> clip to [10, 50] -> 36 and 18
    assert estimate_scoring_bytes(X, multi, OverlapScoringConfig(k=10)) == copy + copy * 270 // 180 + \
        8 * 180 * sum(k.values()) + 64 * 180


def test_under_budget_nothing_changes_but_the_record():
    X, y, data = blobs()
    plain = Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX).run()
    budgeted = Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                         memory_config=MemoryConfig(max_scoring_bytes=10**9)).run()
    assert budgeted["raw"].overlap.to_dict() == plain["raw"].overlap.to_dict()
    record = budgeted["raw"].embedding["memory_budget"]
    assert record["subsampled"] is False and record["n_rows_scored"] == 180 and record["estimated_bytes"] == 86_400
    assert budgeted.metadata["settings"]["memory_config"]["max_scoring_bytes"] == 10**9


def test_over_budget_scores_a_target_preserving_subsample_and_records_it():
    X, y, data = blobs(spread=0.3)  # overlapping classes: a score strictly between 0 and 1
    config = MemoryConfig(max_scoring_bytes=60_000, random_state=3)
    with pytest.warns(UserWarning, match="memory budget"):
        result = Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                           stability_config=StabilityConfig(repeats=3), memory_config=config).run()
    record = result["raw"].embedding["memory_budget"]
    # Hand-computed: 36 prototypes x 180 rows x 8 = 51,840 tile bytes stay; 192 bytes per row remain for the rest.
    fit_rows = (60_000 - 51_840) // 192
    assert record["subsampled"] is True and record["subsample_fraction"] == fit_rows / 180
    per_class = math.floor(60 * fit_rows / 180)
    assert record["class_counts"] == {key: per_class for key in record["class_counts"]} and per_class >= 2
    assert record["n_rows_scored"] == 3 * per_class
    assert result["raw"].overlap.class_counts == record["class_counts"]
    assert result["raw"].stability.n_samples == 3 * per_class
    assert any("memory budget" in w for w in result["raw"].warnings)
    # The score is OverlapIndex called directly on those rows: per_class rows of each class drawn with
    # default_rng(random_state=3), scored with seed 0 and the auto k of a 14-row class (capacity max(2, 14 // 5) = 2,
    # below min_k, so 2).
    assert per_class == 14
    rows = per_class_rows(y, [per_class] * 3, seed=3)
    assert result["raw"].overlap.k_per_class == {key: 2 for key in record["class_counts"]}
    direct = direct_oi(X[rows], y[rows], 2, seed=0).index
    assert result["raw"].overlap.score == direct and 0 < direct < 1


def test_regression_and_multi_label_subsamples_keep_their_minimum_rows():
    X, _ = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=4)
    regression = BenchmarkDataset.from_embeddings(X, X[:, 0], target_type="regression", identity=IDENTITY)
    result = Benchmark(regression, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                       continuous_config=ContinuousOverlapScoringConfig(k=3, n_null_permutations=2),
                       memory_config=MemoryConfig(max_scoring_bytes=20_000)).run()
    record = result["raw"].embedding["memory_budget"]
    assert record["subsampled"] and 3 <= record["n_rows_scored"] < 120
    sets = [{int(c), "all"} if i % 2 else {int(c)} for i, c in enumerate(np.repeat(np.arange(3), 40))]
    multi = BenchmarkDataset.from_embeddings(X, sets, identity=IDENTITY)
    result = Benchmark(multi, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                       scoring_config=OverlapScoringConfig(k=2), memory_config=MemoryConfig(max_scoring_bytes=12_000)).run()
    record = result["raw"].embedding["memory_budget"]
    assert record["subsampled"] and min(record["class_counts"].values()) >= 2


def test_fail_policy_raises_before_scoring_with_the_estimate_and_the_fix():
    _, _, data = blobs()
    # 70,000 bytes would do for a 1-column embedding (66,240, see below), not for these 8 columns
    benchmark = Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                          memory_config=MemoryConfig(max_scoring_bytes=70_000, policy="fail"))
    with pytest.raises(MemoryBudgetError, match=r"extractor 'raw': scoring 180 rows x 8 dimensions needs about "
                                                r"0.1 MiB.*raise max_scoring_bytes to at least 86,400"):
        benchmark.run()
    recorded = Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX, on_error="record",
                         memory_config=MemoryConfig(max_scoring_bytes=70_000, policy="fail")).run()
    assert recorded["raw"].error["stage"] == "budget" and recorded["raw"].error["type"] == "MemoryBudgetError"


def test_a_budget_no_subsample_fits_is_an_error():
    _, _, data = blobs()
    with pytest.raises(MemoryBudgetError, match="no target-preserving subsample fits"):
        Benchmark(data, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                  memory_config=MemoryConfig(max_scoring_bytes=52_000)).run()


def _never_called(X):
    raise AssertionError("the extractor ran although the budget was infeasible")


@pytest.mark.parametrize("policy, smallest, what", [
    # every row at one column: copy 8 x 180, class slices 8 x 180, tiles 8 x 180 x 36 prototypes, 64 x 180 bookkeeping
    ("fail", 1_440 + 1_440 + 51_840 + 11_520, "all 180 rows"),
    # 2 rows per class at one column: k = 2 per class (capacity of 2 rows), 6 prototypes
    ("subsample", 48 + 48 + 8 * 6 * 6 + 64 * 6, "6 rows, 2 per class"),
])
def test_a_budget_no_embedding_can_meet_is_refused_before_any_extraction(policy, smallest, what):
    _, _, data = blobs()
    extractor = CallableExtractor("never", _never_called)
    with pytest.raises(MemoryBudgetError, match=rf"max_scoring_bytes={smallest - 1:,} cannot be met by any embedding: "
                                                rf"scoring {what}.* needs about {smallest:,} bytes"):
        Benchmark(data, [extractor], memory_config=MemoryConfig(max_scoring_bytes=smallest - 1, policy=policy))
    with pytest.raises(MemoryBudgetError, match="max_scoring_bytes=1 cannot be met"):
        Benchmark(data, [extractor], memory_config=MemoryConfig(max_scoring_bytes=1, policy=policy))
    Benchmark(data, [extractor], memory_config=MemoryConfig(max_scoring_bytes=smallest, policy=policy))  # accepted


def test_the_smallest_footprint_is_a_lower_bound_of_every_estimate():
    X, y, _ = blobs()
    targets = build_targets(y)
    for policy in ("fail", "subsample"):
        smallest, _ = smallest_scoring_bytes(targets, MemoryConfig(1, policy=policy), OverlapScoringConfig())
        for width in (1, 8):
            assert smallest <= estimate_scoring_bytes(X[:, :width], targets, OverlapScoringConfig())
    regression = build_targets(X[:, 0], target_type="regression")
    config = ContinuousOverlapScoringConfig()
    smallest, what = smallest_scoring_bytes(regression, MemoryConfig(1), OverlapScoringConfig(), config)
    assert what.startswith("3 rows") and smallest == 2 * 24 + 16 * 3 * (config.k + 1) + 64 * 3
    multi = build_targets([{0, 1} if i % 2 else {0} for i in range(180)])
    smallest, what = smallest_scoring_bytes(multi, MemoryConfig(1), OverlapScoringConfig())
    assert "2 positive rows for each of 2 labels" in what
    assert smallest <= estimate_scoring_bytes(X[:, :1], multi, OverlapScoringConfig())


@pytest.mark.parametrize("kwargs, match", [
    ({"max_scoring_bytes": 0}, "max_scoring_bytes"),
    ({"max_scoring_bytes": 2.5}, "max_scoring_bytes"),
    ({"max_scoring_bytes": 10, "policy": "drop"}, "policy"),
])
def test_memory_config_is_validated(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        MemoryConfig(**kwargs)


def test_memory_config_round_trips_and_benchmark_checks_its_type():
    config = MemoryConfig(max_scoring_bytes=2**30, policy="fail")
    assert MemoryConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="unknown field 'budget'"):
        MemoryConfig.from_dict({"max_scoring_bytes": 1, "budget": 2})
    _, _, data = blobs()
    with pytest.raises(ConfigError, match="memory_config must be a MemoryConfig"):
        Benchmark(data, [PrecomputedExtractor("raw")], memory_config={"max_scoring_bytes": 1})

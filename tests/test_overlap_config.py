"""OverlapScoringConfig / ContinuousOverlapScoringConfig: defaults, validation, immutability, round-trips."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vertebrae import ConfigError, ContinuousOverlapScoringConfig, OverlapScoringConfig


def test_defaults_match_the_spec():
    c = OverlapScoringConfig()
    assert (c.k, c.min_k, c.max_k, c.min_samples_per_cluster) == ("auto", 10, 50, 5)
    assert dict(c.kmeans_kwargs) == {} and c.offline_chunk_size == 10_000 and c.normalize_embeddings is True
    assert c.max_dense_bytes is None and c.exclude_classes == () and c.random_state == 0 and c.thread_limit == 1
    r = ContinuousOverlapScoringConfig()
    assert (r.k, r.target_cover, r.target_distance, r.n_null_permutations, r.aggregation) == (
        8, "auto", "auto", 20, "support_weighted")
    assert r.null_mode == "refit_permutation" and r.random_state == 0


@pytest.mark.parametrize("kwargs, field", [
    ({"k": 0}, "k"), ({"k": "many"}, "k"), ({"k": 2.5}, "k"), ({"k": True}, "k"), ({"k": {"a": 0}}, "k"),
    ({"min_k": 0}, "min_k"), ({"max_k": 5}, "max_k"), ({"min_samples_per_cluster": 0}, "min_samples_per_cluster"),
    ({"offline_chunk_size": 0}, "offline_chunk_size"), ({"normalize_embeddings": "yes"}, "normalize_embeddings"),
    ({"max_dense_bytes": -1}, "max_dense_bytes"), ({"kmeans_kwargs": {"n_clusters": 3}}, "kmeans_kwargs"),
    ({"kmeans_kwargs": {"random_state": 3}}, "kmeans_kwargs"), ({"kmeans_kwargs": {"bogus": 1}}, "kmeans_kwargs"),
    ({"kmeans_kwargs": {"batch_size": -1}}, "kmeans_kwargs has an invalid value.*batch_size"),
    ({"random_state": -1}, "random_state"), ({"thread_limit": 0}, "thread_limit"),
    ({"exclude_classes": [None]}, "exclude_classes"), ({"k": [(1, 2), (1, 3)]}, "twice"),
])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        OverlapScoringConfig(**kwargs)


@pytest.mark.parametrize("kwargs, allowed", [
    ({"target_cover": "grid"}, "quantile"), ({"target_distance": "l1"}, "wasserstein"),
    ({"aggregation": "mean"}, "support_weighted"), ({"null_mode": "none"}, "refit_permutation"),
    ({"n_null_permutations": 0}, ">= 1"), ({"k": 0}, ">= 1"),
])
def test_continuous_bad_values_list_allowed_values(kwargs, allowed):
    with pytest.raises(ConfigError, match=allowed):
        ContinuousOverlapScoringConfig(**kwargs)


def test_configs_are_immutable():
    c = OverlapScoringConfig(kmeans_kwargs={"batch_size": 512})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.min_k = 3
    with pytest.raises(TypeError):
        c.kmeans_kwargs["batch_size"] = 1


def test_round_trip_through_json_keeps_typed_labels_distinct():
    # A Python dict merges 1 and True, so typed k values are given as (label, k) pairs here.
    c = OverlapScoringConfig(k=[(1, 5), ("1", 7), (True, 3)], exclude_classes=[True], kmeans_kwargs={"batch_size": 512},
                             max_dense_bytes=2**20)
    restored = OverlapScoringConfig.from_dict(json.loads(json.dumps(c.to_dict())))
    assert restored == c
    assert dict(restored.k) == {"bool:true": 3, "int:1": 5, "str:1": 7}
    assert restored.exclude_classes == ("bool:true",)
    r = ContinuousOverlapScoringConfig(k=4, n_null_permutations=5, target_cover="quantile")
    assert ContinuousOverlapScoringConfig.from_json(r.to_json()) == r


def test_unknown_fields_and_backend_choice_are_rejected():
    with pytest.raises(ConfigError, match="unknown field 'model_type'"):
        OverlapScoringConfig.from_dict({"model_type": "KMeans"})
    with pytest.raises(ConfigError, match="unknown field .model_type."):
        OverlapScoringConfig(model_type="KMeans")  # the backend is fixed, not an option
    with pytest.raises(ConfigError, match="unknown field"):
        ContinuousOverlapScoringConfig.from_dict({"kmeans_k": 3})


def test_a_dict_k_that_merged_equal_keys_of_other_types_is_warned_and_pairs_keep_them_apart():
    """Issue 26 item 12: {1: 3, "1": 4, True: 2} reaches vertebrae as {1: 2, "1": 4}; say so, naming both classes."""
    import numpy as np

    from vertebrae import ScoringWarning
    from vertebrae.scoring import OverlapIndexScorer

    y = np.array([1] * 30 + ["1"] * 30 + [True] * 30, dtype=object)
    X = np.random.default_rng(0).normal(size=(90, 4))
    merged = OverlapScoringConfig(k={1: 3, "1": 4, True: 2}, min_k=2)
    assert dict(merged.k) == {"int:1": 2, "str:1": 4}  # Python merged True into 1 before the config saw it
    with pytest.warns(ScoringWarning, match=r"k names class 1 \(int\) but not class True \(bool\).*\(label, k\) pairs"):
        result = OverlapIndexScorer(merged).score(X, y)
    assert sum("an equal value of another type" in w for w in result.warnings) == 1
    pairs = OverlapScoringConfig(k=[(1, 3), ("1", 4), (True, 2)], min_k=2)
    result = OverlapIndexScorer(pairs).score(X, y, warn=False)
    assert result.k_per_class == {"int:1": 3, "str:1": 4, "bool:true": 2}
    assert not any("equal value" in w for w in result.warnings)

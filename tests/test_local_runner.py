"""The local runner: dependency order, artifacts freed when unused, identical jobs once, failures recorded."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from sklearn.decomposition import PCA

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, ExtractorError,
                           SeparatixConfig, SklearnExtractor)
from vertebrae.errors import ConfigError
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalConfig,
                                              RetrievalDataset, TwoBranchExtractor)

IDENTITY = DatasetIdentity.declared("runner", "1")
NO_SEPARATIX = SeparatixConfig(enabled=False)


class Embedding(np.ndarray):
    """An ndarray subclass, so the test can hold weak references to the matrices extractors return."""


def dataset():
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)


def test_each_embedding_is_freed_before_the_next_extractor_runs():
    alive: list[weakref.ref] = []

    def make(shift: float):
        def embed(X):
            gc.collect()
            still_alive = [ref for ref in alive if ref() is not None]
            assert still_alive == [], "an earlier extractor's embedding is still held by the runner"
            out = Embedding(np.shape(X), dtype=np.float64)  # owns its buffer, so views keep it alive
            out[...] = np.asarray(X) + shift
            alive.append(weakref.ref(out))
            return out
        return embed

    extractors = [CallableExtractor(f"e{i}", make(float(i)), cache_identity=f"shift-{i}") for i in range(4)]
    result = Benchmark(dataset(), extractors, separatix_config=NO_SEPARATIX).run()
    assert len(alive) == 4 and [r.name for r in result.extractor_results] == ["e0", "e1", "e2", "e3"]


def test_identical_recipes_embed_once_and_agree():
    calls = []

    def embed(X):
        calls.append(1)
        return np.asarray(X)[:, :4]

    a = CallableExtractor("a", embed, cache_identity="first4-v1")
    b = CallableExtractor("b", embed, cache_identity="first4-v1")
    pca_a, pca_b = SklearnExtractor("pca_a", PCA(3, random_state=0)), SklearnExtractor("pca_b", PCA(3, random_state=0))
    benchmark = Benchmark(dataset(), [a, b, pca_a, pca_b], separatix_config=NO_SEPARATIX)
    assert sum(job.stage == "extract" for job in benchmark.plan().jobs) == 2
    result = benchmark.run()
    assert calls == [1]
    assert result["a"].overlap.to_dict() == result["b"].overlap.to_dict()
    assert result["pca_a"].overlap.to_dict() == result["pca_b"].overlap.to_dict()
    assert result["a"].artifact_keys["score"] == result["b"].artifact_keys["score"]
    assert result["a"].artifact_keys["assemble"] != result["b"].artifact_keys["assemble"]


def test_on_error_record_keeps_the_other_extractors_and_marks_the_failure():
    """The issue's case: PCA(32) cannot fit 6 features; the working extractor's result survives."""
    good = SklearnExtractor("pca3", PCA(3, random_state=0))
    bad = SklearnExtractor("pca32", PCA(32, random_state=0))
    result = Benchmark(dataset(), [bad, good], separatix_config=NO_SEPARATIX, on_error="record").run()
    failed = result["pca32"]
    assert failed.error["stage"] == "extract" and failed.error["type"] == "UserCodeError"
    assert "n_components=32" in failed.error["message"] and not failed.aggregate_valid
    assert [r.name for r in result.ranked_results()] == ["pca3"]
    reloaded = type(result).from_dict(result.to_dict())
    assert reloaded["pca32"].error == failed.error
    assert "Failed in the `extract` stage" in result.to_markdown()
    with pytest.raises(ExtractorError, match="pca32") as raised:
        Benchmark(dataset(), [bad, good], separatix_config=NO_SEPARATIX).run()
    assert "extract stage of 'pca32'" in raised.value.__notes__[0]


def test_on_error_is_validated():
    with pytest.raises(ConfigError, match="on_error must be one of"):
        Benchmark(dataset(), [SklearnExtractor("p", PCA(2))], on_error="ignore")


def test_retrieval_runs_on_the_same_runner_with_keys_and_recorded_failures():
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(6, 4)), rng.normal(size=(15, 4))
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(6)],
                                            identity=IDENTITY)
    broken = TwoBranchExtractor("broken", lambda q: q, lambda g: 1 / 0)
    result = RetrievalBenchmark(data, [PrecomputedPairExtractor("pair", queries, gallery), broken],
                                retrieval_config=RetrievalConfig(cutoffs=[1, 5]), on_error="record").run()
    entry = result["pair"]
    assert set(entry.artifact_keys) == {"encode", "endpoints", "rank_forward", "assemble"}
    assert result["broken"].error["stage"] == "encode" and "ZeroDivisionError" in result["broken"].error["message"]
    assert [e.name for e in result.ranked_results()] == ["pair"]
    assert set(entry.runtime) == {"fit", "encode_queries", "encode_gallery", "rank_forward"}


def test_extractors_sharing_an_identity_keep_their_own_names_and_recipes():
    a, b = SklearnExtractor("a", PCA(3, random_state=0)), SklearnExtractor("b", PCA(3, random_state=0))
    result = Benchmark(dataset(), [a, b], separatix_config=NO_SEPARATIX).run()
    assert result["a"].recipe["name"] == "a" and result["b"].recipe["name"] == "b"
    assert result["b"].embedding["parent_extractor_name"] == "b"

"""One result family: shared vocabulary, deprecated aliases, path-aware load errors, compact reprs."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, DatasetIdentity, OverlapScoringConfig,
                       RetrievalBenchmark, RetrievalBenchmarkResult, RetrievalConfig, RetrievalDataset,
                       SerializationError, StabilityConfig)
from vertebrae.errors import DataWarning
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.results import load_result, result_from_dict
from vertebrae.retrieval import PrecomputedPairExtractor

from .conftest import gaussian_classes

IDENTITY = DatasetIdentity.declared("family", "1")


def noisy(name: str, X: np.ndarray, scale: float, seed: int) -> PrecomputedExtractor:
    rng = np.random.default_rng(seed)
    return PrecomputedExtractor(name, (X + rng.normal(0, scale, X.shape)).astype(np.float32))


@pytest.fixture(scope="module")
def benchmark_result() -> BenchmarkResult:
    X, y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=3)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY, name="family data")
    extractors = [PrecomputedExtractor("clean", X), noisy("noisy", X, 3.0, 1), noisy("noisier", X, 8.0, 2)]
    return Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=3),
                     stability_config=StabilityConfig(repeats=3), quality_tolerance=0.5, progress=False).run()


@pytest.fixture(scope="module")
def retrieval_result() -> RetrievalBenchmarkResult:
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(8, 5)), rng.normal(size=(20, 5))
    gallery[:8] = queries + 0.3 * rng.normal(size=(8, 5))
    ds = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(8)],
                                          identity=IDENTITY)
    other = PrecomputedPairExtractor("noise", rng.normal(size=(8, 5)), rng.normal(size=(20, 5)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        return RetrievalBenchmark(ds, [PrecomputedExtractor("own"), other], retrieval_config=RetrievalConfig(
            cutoffs=[1, 5]), progress=False).run()


@pytest.fixture(params=["benchmark", "retrieval"])
def any_result(request, benchmark_result, retrieval_result):
    return benchmark_result if request.param == "benchmark" else retrieval_result


def test_every_result_type_shares_the_vocabulary(any_result, tmp_path):
    for r in any_result.extractor_results:
        assert isinstance(r.name, str) and isinstance(r.primary_metric_name, str) and r.primary_metric_name
        assert isinstance(r.primary_score, float) and isinstance(r.artifact_keys, dict)
    ranked = any_result.ranked_results()
    assert [r.primary_score for r in ranked] == sorted((r.primary_score for r in ranked), reverse=True)
    assert any_result[ranked[0].name] is ranked[0]
    frame = any_result.to_dataframe(include_invalid=True)
    assert list(frame["extractor"]) == [r.name for r in ranked]
    loaded = type(any_result).load(any_result.save_json(tmp_path / "r.json"))
    assert loaded.to_json() == any_result.to_json()
    assert load_result(tmp_path / "r.json").to_json() == any_result.to_json()
    assert any_result.save_markdown(tmp_path / "r.md").read_text() == loaded.to_markdown()
    assert any_result.save_html(tmp_path / "r.html").read_text() == loaded.to_html()


def test_quality_cohort_is_within_the_tolerance_of_the_best(any_result):
    scores = sorted((r.primary_score for r in any_result.extractor_results), reverse=True)
    gap = scores[0] - scores[1]
    assert [r.name for r in any_result.quality_cohort(gap / 2)] == [any_result.ranked_results()[0].name]
    assert len(any_result.quality_cohort(gap + 1e-9)) >= 2
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        any_result.quality_cohort(-1)


def test_old_names_are_deprecated_aliases(retrieval_result):
    with pytest.warns(DeprecationWarning, match="RetrievalBenchmarkResult.entries is deprecated; use .extractor_results"):
        assert retrieval_result.entries is retrieval_result.extractor_results
    entry = retrieval_result.extractor_results[0]
    with pytest.warns(DeprecationWarning, match="RetrievalEntry.extractor is deprecated; use .name"):
        assert entry.extractor == entry.name


def test_retrieval_entries_carry_primary_metric_and_artifact_keys(retrieval_result):
    primary = RetrievalConfig().primary_metric
    assert [e.primary_metric_name for e in retrieval_result.extractor_results] == [primary, primary]
    edited = copy.deepcopy(retrieval_result)
    edited.extractor_results[0].artifact_keys = {"encode": "encode/abc123"}
    data = json.loads(edited.to_json())
    assert data["extractor_results"][0]["artifact_keys"] == {"encode": "encode/abc123"}
    assert RetrievalBenchmarkResult.from_json(edited.to_json()).extractor_results[0].artifact_keys == {
        "encode": "encode/abc123"}


def test_retrieval_schema_1_files_still_load(retrieval_result):
    data = json.loads(retrieval_result.to_json())
    data["schema_version"] = 1
    data["entries"] = data.pop("extractor_results")
    for entry in data["entries"]:
        entry["extractor"] = entry.pop("name")
        entry.pop("artifact_keys")
    loaded = RetrievalBenchmarkResult.from_dict(data)
    assert [e.name for e in loaded.extractor_results] == [e.name for e in retrieval_result.extractor_results]
    assert [e.primary_score for e in loaded.extractor_results] == [
        e.primary_score for e in retrieval_result.extractor_results]


def _benchmark_json(result: BenchmarkResult) -> dict:
    return json.loads(result.to_json())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["extractor_results"][1]["overlap"].pop("score"), r"\$\.extractor_results\[1\]\.overlap: malformed value .*'score'"),
    (lambda d: d["extractor_results"][0].pop("overlap"), r"\$\.extractor_results\[0\]: missing key 'overlap'"),
    (lambda d: d["extractor_results"][2]["metrics"]["overlap"].update(extra=1),
     r"\$\.extractor_results\[2\]\.metrics\.overlap: malformed value"),
    (lambda d: d["extractor_results"][0].update(surprise=True), r"\$\.extractor_results\[0\]: malformed value"),
    (lambda d: d.pop("dataset_summary"), r"\$: missing key 'dataset_summary'"),
    (lambda d: d.update(extractor_results=7), r"\$: malformed value"),
])
def test_malformed_benchmark_json_names_the_path(benchmark_result, edit, message):
    data = _benchmark_json(benchmark_result)
    edit(data)
    with pytest.raises(SerializationError, match=message):
        BenchmarkResult.from_dict(data)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["extractor_results"][1].update(forward=3), r"\$\.extractor_results\[1\]\.forward: malformed value"),
    (lambda d: d["extractor_results"][0].pop("recipe"), r"\$\.extractor_results\[0\]: malformed value"),
    (lambda d: d["timing"].pop("runtime"), r"\$\.timing: missing key 'runtime'"),
])
def test_malformed_retrieval_json_names_the_path(retrieval_result, edit, message):
    data = json.loads(retrieval_result.to_json())
    edit(data)
    with pytest.raises(SerializationError, match=message):
        RetrievalBenchmarkResult.from_dict(data)


def test_foreign_documents_are_one_serialization_error(tmp_path):
    with pytest.raises(SerializationError, match=r"\$.result_type: 'zebra' is not a vertebrae result type"):
        result_from_dict({"result_type": "zebra"})
    with pytest.raises(SerializationError, match="not a vertebrae benchmark result"):
        BenchmarkResult.from_dict([1, 2])
    with pytest.raises(SerializationError, match="not a vertebrae benchmark result"):
        BenchmarkResult.from_dict({"result_type": "retrieval", "schema_version": 2})
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SerializationError, match="is not valid JSON"):
        BenchmarkResult.load(tmp_path / "broken.json")
    with pytest.raises(SerializationError, match="is not valid JSON"):
        load_result(tmp_path / "broken.json")


def test_dataframe_shows_output_and_variant_provenance(benchmark_result):
    data = _benchmark_json(benchmark_result)
    data["extractor_results"][0]["embedding"].update(parent_extractor_name="model", output_name="layer_6",
                                                     hidden_layer=6, pooling="mean")
    frame = BenchmarkResult.from_dict(data).to_dataframe(include_invalid=True).set_index("extractor")
    assert frame.loc["clean", ["parent_extractor", "output_name", "hidden_layer", "pooling"]].tolist() == [
        "model", "layer_6", 6, "mean"]
    assert frame[["hidden_layer", "pooling"]].loc[["noisy", "noisier"]].isna().all().all()  # absent: null


def test_reprs_are_a_few_lines(benchmark_result, retrieval_result):
    X = np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64)
    dataset = BenchmarkDataset.from_embeddings(X, np.arange(1000) % 4, identity=IDENTITY)
    text = repr(dataset)
    assert "1000 samples" in text and "4 classes" in text and "(1000, 64)" in text
    assert len(text) < 250 and "63999" not in text  # no embedding rows
    for obj in (benchmark_result, retrieval_result, benchmark_result.extractor_results[0],
                retrieval_result.extractor_results[0]):
        assert len(repr(obj)) < 800 and repr(obj).count("\n") <= 7
    lines = repr(benchmark_result).splitlines()
    assert lines[1].startswith("  1. clean: ")  # ranked, best first
    queries = np.eye(4)
    retrieval_dataset = RetrievalDataset.from_embeddings(queries, queries, relevance=np.eye(4), identity=IDENTITY)
    assert repr(retrieval_dataset).startswith("RetrievalDataset(4 queries x 4 gallery items, 4 relevant pairs")

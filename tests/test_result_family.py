"""One result family: the shared protocol of all three families (vocabulary, validity, embedding, compression,
runtime, artifact keys, error), the one tie rule, deprecated aliases, path-aware load errors, compact reprs."""

from __future__ import annotations

import copy
import datetime
import json
import pathlib
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CacheConfig, DatasetIdentity,
                           EmbeddingCompressionConfig, ExtractorResult, OverlapScoringConfig,
                           PrecomputedZeroShotEncoder, RetrievalBenchmark, RetrievalBenchmarkResult, RetrievalConfig,
                           RetrievalDataset, SerializationError, StabilityConfig, ZeroShotBenchmark,
                           ZeroShotBenchmarkResult, ZeroShotConfig, ZeroShotDataset)
from vertebrae.cli.main import main
from vertebrae.reports.compare import compare_results
from vertebrae.execution.plan import artifact_key
from vertebrae._base.fingerprint import package_version
from vertebrae.families.front_door import RUN_PACKAGES
from vertebrae.errors import ConfigError, ConfigTypeError, DataWarning, InputTypeError, InputValidationError
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.reports.reading import benchmark_answer, benchmark_ranking
from vertebrae.families.result_protocol import PROTOCOL_COLUMNS, PROTOCOL_FIELDS, ChainResult
from vertebrae.families.labeled.results import load_result, result_from_dict
from vertebrae.families.retrieval import PrecomputedPairExtractor, RetrievalEntry
from vertebrae.families.zero_shot import ZeroShotExtractorResult

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


def zero_shot_dataset() -> tuple[ZeroShotDataset, np.ndarray, np.ndarray]:
    """Gaussian classes with one prompt per class; the class means are the right prompt embeddings."""
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=3)
    source = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    prototypes = np.stack([X[y == c].mean(axis=0) for c in range(3)])
    return ZeroShotDataset.from_prompts(source, {0: "zero", 1: "one", 2: "two"}), X, prototypes


def run_zero_shot(encoders, **kwargs) -> ZeroShotBenchmarkResult:
    dataset = zero_shot_dataset()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ZeroShotBenchmark(dataset, encoders, config=ZeroShotConfig(top_k=(1,)), progress=False,
                                 **kwargs).run()


@pytest.fixture(scope="module")
def zero_shot_result() -> ZeroShotBenchmarkResult:
    _, X, prototypes = zero_shot_dataset()
    rng = np.random.default_rng(4)
    return run_zero_shot([PrecomputedZeroShotEncoder("clean", X, prototypes),
                          PrecomputedZeroShotEncoder("noisy", X + rng.normal(0, 3, X.shape), prototypes),
                          PrecomputedZeroShotEncoder("noisier", X + rng.normal(0, 8, X.shape), prototypes)])


FAMILIES = ["benchmark", "retrieval", "zero_shot"]


@pytest.fixture(params=FAMILIES)
def any_result(request, benchmark_result, retrieval_result, zero_shot_result):
    return {"benchmark": benchmark_result, "retrieval": retrieval_result, "zero_shot": zero_shot_result}[request.param]


def test_every_result_type_shares_the_vocabulary(any_result, tmp_path):
    data = json.loads(any_result.to_json())
    for r, serialized in zip(any_result.extractor_results, data["extractor_results"]):
        assert isinstance(r, ChainResult) and all(hasattr(r, field) for field in PROTOCOL_FIELDS)
        assert isinstance(r.name, str) and isinstance(r.primary_metric_name, str) and r.primary_metric_name
        assert isinstance(r.primary_score, float) and isinstance(r.artifact_keys, dict) and r.artifact_keys
        assert r.aggregate_valid is True and r.higher_is_better is True and r.error is None
        assert r.compression is None  # no compression variants in these runs
        assert r.runtime and data["timing"]["runtime"][r.name] == r.runtime  # runtime lives in the timing section
        assert serialized["embedding"] == r.embedding and r.embedding  # one key for the embedding metadata
        assert {"name", "primary_score", "artifact_keys", "embedding"} <= set(serialized)
        assert not {"embeddings", "runtime", "error", "compression", "valid"} & set(serialized)  # unset: not written
    ranked = any_result.ranked_results()
    assert [r.primary_score for r in ranked] == sorted((r.primary_score for r in ranked), reverse=True)
    assert any_result[ranked[0].name] is ranked[0]
    frame = any_result.to_dataframe(include_invalid=True)
    assert list(frame["extractor"]) == [r.name for r in ranked]
    assert set(PROTOCOL_COLUMNS) <= set(frame.columns) and frame["aggregate_valid"].all()
    assert any(column.startswith("runtime.") for column in frame.columns)
    assert frame["compression_method"].isna().all()
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
    for bad, error, match in [(-1, ConfigError, r"tolerance must be in \[0.0, inf\], got -1"),
                              (float("nan"), ConfigError, "tolerance must be a finite number, got nan"),
                              ("0.1", ConfigTypeError, "tolerance must be a finite number, got '0.1'")]:
        with pytest.raises(error, match=match):
            any_result.quality_cohort(bad)
    with pytest.raises(ConfigTypeError, match="include_invalid must be True or False, got 'no'"):
        any_result.to_dataframe(include_invalid="no")


@pytest.mark.parametrize("save", ["save_json", "save_markdown", "save_html"])
def test_saving_to_a_folder_or_a_missing_folder_names_the_path_and_leaves_nothing(benchmark_result, tmp_path, save):
    """The target is checked before the temporary file is written: no stray ``<name>.tmp``, the old file kept."""
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(InputValidationError, match=f"{folder} is a folder; give the path of a file inside it"):
        getattr(benchmark_result, save)(folder)
    with pytest.raises(InputValidationError, match="the folder .*missing does not exist; create it first"):
        getattr(benchmark_result, save)(tmp_path / "missing" / "r.txt")
    with pytest.raises(InputTypeError, match="path must be a file path"):
        getattr(benchmark_result, save)(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(folder.iterdir())


def test_an_unknown_view_is_a_config_error_naming_the_views(benchmark_result):
    for call in (benchmark_result.ranking, benchmark_result.ranked_results, benchmark_result.agreement,
                 benchmark_result.tied_with_best, benchmark_result.rank_verdicts):
        with pytest.raises(ConfigError, match=r"view='zzz' names no view of this result; its views: \[None\]"):
            call(view="zzz")


def failed_like(result, name: str):
    """A failed per-chain result of ``result``'s family (each front door builds one with ``failed``)."""
    error = {"stage": "extract", "type": "RuntimeError", "message": "boom", "extractor": name}
    if isinstance(result, BenchmarkResult):
        return ExtractorResult.failed(name, "overlap", error, artifact_keys={"extract": "extract/x"})
    if isinstance(result, RetrievalBenchmarkResult):
        entry = RetrievalEntry.failed(name, {"type": "precomputed"}, error)
        entry.artifact_keys = {"encode": "encode/x"}
        return entry
    return ZeroShotExtractorResult.failed(name, {"type": "precomputed"}, result.primary_metric_name, error,
                                          artifact_keys={"encode_samples": "encode_samples/x"})


def test_a_failed_chain_is_invalid_unranked_and_keeps_its_error_in_every_family(any_result):
    edited = copy.deepcopy(any_result)
    edited.extractor_results.append(failed_like(any_result, "broken"))
    loaded = type(any_result).from_json(edited.to_json())
    broken = loaded["broken"]
    assert broken.aggregate_valid is False and broken.primary_score is None
    assert broken.error["message"] == "boom" and broken.artifact_keys == edited["broken"].artifact_keys
    assert "broken" not in [r.name for r in loaded.ranked_results()]
    assert json.loads(edited.to_json())["extractor_results"][-1]["error"]["type"] == "RuntimeError"
    frame = loaded.to_dataframe(include_invalid=True).set_index("extractor")
    assert frame.loc["broken", "aggregate_valid"] == False  # noqa: E712 (a NumPy bool)
    assert frame["rank"].isna().tolist() == [False] * (len(frame) - 1) + [True]
    assert "broken" not in set(loaded.to_dataframe()["extractor"])


def compressed(family: str):
    """A run of ``family`` with a raw and a PCA variant of one embedding."""
    variants = [EmbeddingCompressionConfig(), EmbeddingCompressionConfig(method="pca", n_components=2)]
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "benchmark":
            dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
            return Benchmark(dataset, [PrecomputedExtractor("e", X)], compression=variants, progress=False).run()
        if family == "retrieval":
            ds = RetrievalDataset.from_embeddings(X[:10], X, relevance=[(i, i, 1) for i in range(10)],
                                                  identity=IDENTITY)
            return RetrievalBenchmark(ds, [PrecomputedExtractor("e")], retrieval_config=RetrievalConfig(
                cutoffs=[1]), compression=variants, progress=False).run()
    _, X, prototypes = zero_shot_dataset()
    return run_zero_shot([PrecomputedZeroShotEncoder("e", X, prototypes)], compression=variants)


#: The endpoint / branch whose footprint a family's DataFrame shows (the side a variant is fitted on).
FITTED_SIDE = {"benchmark": None, "retrieval": "gallery", "zero_shot": "samples"}


@pytest.mark.parametrize("family", FAMILIES)
def test_compression_metadata_has_one_key_and_the_same_columns_in_every_family(family):
    result = compressed(family)
    data = json.loads(result.to_json())
    frame = result.to_dataframe().set_index("extractor")
    assert len(frame) == 2 and "e+pca2" in frame.index
    for r, serialized in zip(result.extractor_results, data["extractor_results"]):
        assert serialized["compression"] == r.compression and r.compression["method"] in ("none", "pca")
        assert "compression" not in r.embedding  # compression facts are never inside the embedding metadata
        footprint = r.compression["footprint"]
        footprint = footprint if FITTED_SIDE[family] is None else footprint[FITTED_SIDE[family]]
        assert frame.loc[r.name, "compression_method"] == r.compression["method"]
        assert frame.loc[r.name, "evaluated_bytes_per_row"] == footprint["evaluated_bytes_per_row"]
    assert frame.loc["e+pca2", "compression_output_dim"] == 2
    assert type(result).from_json(result.to_json()).to_json() == result.to_json()


def cached(family: str, store: pathlib.Path | None):
    """A run of ``family`` with two candidates, with a cache in ``store`` (None: without a cache)."""
    cache = None if store is None else CacheConfig(store=str(store))
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if family == "benchmark":
            dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
            return Benchmark(dataset, [PrecomputedExtractor("e", X), noisy("n", X, 3.0, 1)], cache_config=cache,
                             progress=False).run()
        if family == "retrieval":
            ds = RetrievalDataset.from_embeddings(X[:10], X, relevance=[(i, i, 1) for i in range(10)],
                                                  identity=IDENTITY)
            shifted = PrecomputedPairExtractor("n", X[:10] + 3.0, X)
            return RetrievalBenchmark(ds, [PrecomputedExtractor("e"), shifted],
                                      retrieval_config=RetrievalConfig(cutoffs=[1], bidirectional=True),
                                      cache_config=cache, progress=False).run()
    _, X, prototypes = zero_shot_dataset()
    return run_zero_shot([PrecomputedZeroShotEncoder("e", X, prototypes),
                          PrecomputedZeroShotEncoder("n", X + 3.0, prototypes)], cache_config=cache)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_carries_one_run_envelope_in_the_same_places(family, tmp_path):
    """Issue 35, item 6: run key, versions, plan and cache record in ``metadata``, start and host in ``timing``,
    with the same shapes in every family, and nowhere else."""
    result = cached(family, tmp_path / "cache")
    data = json.loads(result.to_json())
    metadata, timing = data["metadata"], data["timing"]
    jobs = metadata["plan"]
    assert jobs and all(set(job) == {"stage", "extractor", "key"} for job in jobs)
    assert {job["key"] for job in jobs} == {key for r in result.extractor_results for key in r.artifact_keys.values()}
    assert {job["extractor"] for job in jobs} == {r.name for r in result.extractor_results}
    assert metadata["run_key"] == artifact_key("run", [job["key"] for job in jobs])
    assert metadata["versions"] == {name: package_version(name) for name in RUN_PACKAGES}
    assert metadata["cache"] == {"store": str(tmp_path / "cache"), "mode": "read_write"}
    assert {"started_at", "host", "runtime"} <= set(timing) and "runs" not in timing
    assert datetime.datetime.fromisoformat(timing["started_at"]).tzinfo is not None
    assert set(timing["host"]) == {"python", "platform", "machine", "numpy", "blas_threads"}
    assert not {"run_key", "versions", "plan", "cache"} & set(data.get("protocol", {}))  # in one place only
    assert type(result).from_json(result.to_json()).metadata == result.metadata
    without = json.loads(cached(family, None).to_json())["metadata"]
    assert "cache" not in without and without["run_key"] == metadata["run_key"]  # a cache changes no key


#: Result files written by main's code before the envelope (commit 20d0b0f): a cached labeled run, a cached
#: bidirectional retrieval run and a cached zero-shot run.
BEFORE_ENVELOPE = pathlib.Path(__file__).parent / "data" / "results_before_envelope"
RESULT_CLASSES = {"benchmark": BenchmarkResult, "retrieval": RetrievalBenchmarkResult,
                  "zero_shot": ZeroShotBenchmarkResult}


@pytest.mark.parametrize("family", FAMILIES)
def test_result_files_written_before_the_envelope_load_into_it(family, tmp_path, capsys):
    path = BEFORE_ENVELOPE / f"{family}.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    result = RESULT_CLASSES[family].load(path)
    assert load_result(path).to_json() == result.to_json()
    facts = old.get("metadata") or old["protocol"]  # the labeled family's places, or retrieval's and zero-shot's
    assert result.metadata["cache"] == facts["cache"] and result.metadata.get("run_key") == facts.get("run_key")
    run = old["timing"]["runs"][0] if family == "retrieval" else old["timing"]
    assert (result.timing["started_at"], result.timing["host"]) == (run["started_at"], run["host"])
    saved = json.loads(result.to_json())
    assert not {"run_key", "cache"} & set(saved.get("protocol", {})) and "runs" not in saved["timing"]
    assert type(result).from_json(result.to_json()).to_json() == result.to_json()
    if family == "benchmark":  # the labeled family's JSON did not change
        assert result.to_json() == path.read_text(encoding="utf-8")
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().out.startswith("# vertebrae")


def test_retrieval_schema_2_files_with_embeddings_still_load():
    result = compressed("retrieval")
    data = json.loads(result.to_json())
    data["schema_version"] = 2
    for entry in data["extractor_results"]:
        entry["embeddings"] = {**entry.pop("embedding"), "compression": entry.pop("compression")}
    loaded = RetrievalBenchmarkResult.from_dict(data)
    assert loaded.to_json() == result.to_json()
    assert loaded.to_markdown() == result.to_markdown()


def test_one_validity_spelling(zero_shot_result, retrieval_result):
    r = zero_shot_result.extractor_results[0]
    with pytest.warns(DeprecationWarning, match="ZeroShotExtractorResult.valid is deprecated; use .aggregate_valid"):
        assert r.valid is r.aggregate_valid is True
    entry = retrieval_result.extractor_results[0]
    with pytest.warns(DeprecationWarning, match="RetrievalEntry.embeddings is deprecated; use .embedding"):
        assert entry.embeddings is entry.embedding


def tied(family: str):
    """Two candidates with exactly equal primary scores, declared as "b" before "a" (name order is the reverse)."""
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=3)
    if family == "benchmark":
        dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
        return Benchmark(dataset, [PrecomputedExtractor("b", X), PrecomputedExtractor("a", X.copy()),
                                   noisy("c", X, 8.0, 1)], scoring_config=OverlapScoringConfig(k=3),
                         progress=False).run()
    if family == "retrieval":
        rng = np.random.default_rng(0)
        queries, gallery = rng.normal(size=(8, 5)), rng.normal(size=(20, 5))
        gallery[:8] = queries + 0.3 * rng.normal(size=(8, 5))
        ds = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(8)],
                                              identity=IDENTITY)
        extractors = [PrecomputedPairExtractor("b", queries, gallery), PrecomputedPairExtractor("a", queries, gallery),
                      PrecomputedPairExtractor("c", rng.normal(size=(8, 5)), rng.normal(size=(20, 5)))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return RetrievalBenchmark(ds, extractors, retrieval_config=RetrievalConfig(cutoffs=[1]),
                                      progress=False).run()
    _, X, prototypes = zero_shot_dataset()
    return run_zero_shot([PrecomputedZeroShotEncoder("b", X, prototypes),
                          PrecomputedZeroShotEncoder("a", X, prototypes),
                          PrecomputedZeroShotEncoder("c", X, prototypes[::-1].copy())])


@pytest.mark.parametrize("family", FAMILIES)
def test_ties_share_the_better_rank_in_input_order_everywhere(family):
    result = tied(family)
    assert result["a"].primary_score == result["b"].primary_score > result["c"].primary_score
    assert [(r.rank, r.result.name) for r in result.ranking()] == [(1, "b"), (1, "a"), (3, "c")]
    assert [r.name for r in result.ranked_results()] == ["b", "a", "c"]
    assert result.to_dataframe()[["rank", "extractor"]].values.tolist() == [[1, "b"], [1, "a"], [3, "c"]]
    assert repr(result).splitlines()[1:4] == [
        f"  {rank}. {name}: {result[name].primary_score:.4f}" + ("" if family != "benchmark" else
                                                                  f" ({result[name].recommendation})")
        for rank, name in [(1, "b"), (1, "a"), (3, "c")]]
    markdown = result.to_markdown()
    assert markdown.index("| 1 | b |") < markdown.index("| 1 | a |") < markdown.index("| 3 | c |")
    comparison = compare_results(result.serialized(), result.serialized())
    assert [(c["extractor"], c["rank_a"], c["rank_b"]) for c in comparison["candidates"]] == [
        ("b", 1, 1), ("a", 1, 1), ("c", 3, 3)]
    assert comparison["top_a"] == comparison["top_b"] == "b"  # the first of the tie, not the first by name


def test_benchmark_report_tables_use_the_shared_ranks():
    data = tied("benchmark").serialized()
    assert [row[:2] for row in benchmark_answer(data)["rows"]] == [[1, "b"], [1, "a"], [3, "c"]]
    assert [row[:2] for row in benchmark_ranking(data)["rows"]] == [[1, "b"], [1, "a"], [3, "c"]]


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
    (lambda d: d["extractor_results"][1]["overlap"].pop("score"), r"\$\.extractor_results\[1\]\.overlap: missing key 'score'"),
    (lambda d: d["extractor_results"][0].pop("overlap"), r"\$\.extractor_results\[0\]: missing key 'overlap'"),
    (lambda d: d["extractor_results"][2]["metrics"]["overlap"].update(extra=1),
     r"\$\.extractor_results\[2\]\.metrics\.overlap: malformed value"),
    (lambda d: d["extractor_results"][0].update(surprise=True), r"\$\.extractor_results\[0\]: malformed value"),
    (lambda d: d.pop("dataset_summary"), r"\$: missing key 'dataset_summary'"),
    (lambda d: d.update(extractor_results=7), r"\$\.extractor_results: malformed value \(expected list"),
])
def test_malformed_benchmark_json_names_the_path(benchmark_result, edit, message):
    data = _benchmark_json(benchmark_result)
    edit(data)
    with pytest.raises(SerializationError, match=message):
        BenchmarkResult.from_dict(data)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["extractor_results"][1].update(forward=3), r"\$\.extractor_results\[1\]\.forward: malformed value"),
    (lambda d: d["extractor_results"][0].pop("recipe"), r"\$\.extractor_results\[0\]: missing key 'recipe'"),
    (lambda d: d["timing"].pop("runtime"), r"\$\.timing: missing key 'runtime'"),
])
def test_malformed_retrieval_json_names_the_path(retrieval_result, edit, message):
    data = json.loads(retrieval_result.to_json())
    edit(data)
    with pytest.raises(SerializationError, match=message):
        RetrievalBenchmarkResult.from_dict(data)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["extractor_results"][0].update(confusion_matrix=[[1]]),
     r"\$\.extractor_results\[0\]\.confusion_matrix: malformed value \(expected 3 x 3 counts"),
    (lambda d: d["extractor_results"][0]["confusion_matrix"][2].pop(),
     r"\$\.extractor_results\[0\]\.confusion_matrix: .* got 3 row\(s\) of width \[2, 3\]"),
    (lambda d: d["extractor_results"][0]["confusion_matrix"][0].__setitem__(0, -1),
     r"\$\.extractor_results\[0\]\.confusion_matrix\[0\]\[0\]: malformed value"),
])
def test_malformed_zero_shot_json_names_the_path(zero_shot_result, edit, message):
    """Before: a confusion matrix of the wrong shape loaded and rendered a broken table."""
    data = json.loads(zero_shot_result.to_json())
    edit(data)
    with pytest.raises(SerializationError, match=message):
        ZeroShotBenchmarkResult.from_dict(data)


def test_zero_shot_results_of_different_primary_metrics_do_not_compare(zero_shot_result):
    edited = zero_shot_result.serialized()
    edited["protocol"]["config"]["metric"] = "macro_f1"
    with pytest.raises(InputValidationError, match="primary metric 'top1_accuracy' vs 'macro_f1'; compare results "
                                                   "ranked by the same metric"):
        compare_results(zero_shot_result.serialized(), edited)


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

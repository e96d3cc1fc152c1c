"""Benchmark.run end to end: ranking views, extractor validation, strict JSON, Markdown, DataFrame."""

from __future__ import annotations

import re

import json

import numpy as np
import pytest
from overlapindex import OverlapIndex
from sklearn.decomposition import PCA
from sklearn.preprocessing import normalize

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CallableExtractor, ConfigError,
                           ExtractorError, InputTypeError, InputValidationError, OverlapScoringConfig,
                           PrecomputedExtractor, SklearnExtractor)
from vertebrae._base import json_codec

from .conftest import gaussian_classes


def noise(X):
    return X + np.random.default_rng(0).normal(0, 4.0, X.shape)


@pytest.fixture
def four_way(identity):
    X, y = gaussian_classes(n_per_class=60, n_classes=4, dim=10, seed=3)
    ds = BenchmarkDataset.from_arrays(X, y, identity=identity)
    extractors = [PrecomputedExtractor("raw", X), SklearnExtractor("pca4", PCA(4, random_state=0)),
                  CallableExtractor("noisy", noise), CallableExtractor("first_dim", lambda A: A[:, :1])]
    return ds, extractors, X, y


def test_run_ranks_by_overlap_and_matches_direct_scores(four_way):
    ds, extractors, X, y = four_way
    result = Benchmark(ds, extractors, scoring_config=OverlapScoringConfig(k=6)).run()
    scores = {r.name: r.primary_score for r in result.extractor_results}
    ranked = [r.name for r in result.ranked_results()]
    assert ranked == sorted(scores, key=lambda n: -scores[n])
    oi = OverlapIndex(kmeans_k=6, kmeans_kwargs={"random_state": 0}).fit(normalize(X.astype(np.float64)), y)
    assert scores["raw"] == oi.index
    raw = result["raw"]
    assert raw.metrics["overlap"].score == raw.overlap.score == raw.primary_score
    assert raw.embedding == {"n_samples": 240, "embedding_dim": 10, "dtype": "float32", "sparse": False,
                             "nnz": 2400, "logical_bytes": 9600, "parent_extractor_name": "raw",
                             "cache_eligible": True, "cache_status": "disabled"}
    assert set(raw.runtime) == {"extract", "score", "separatix"}  # Separatix runs by default (gated)
    assert raw.weakest_class["score"] == min(raw.overlap.per_class_scores.values())
    assert result.dataset_summary["class_counts"] == {f"int:{c}": 60 for c in range(4)}


def test_quality_cohort_is_tolerance_based_and_keeps_ranking_order(four_way):
    ds, extractors, *_ = four_way
    result = Benchmark(ds, extractors, scoring_config=OverlapScoringConfig(k=6)).run()
    ranked = result.ranked_results()
    best = ranked[0].primary_score
    for tol in (0.0, 0.05, 1.0):
        cohort = result.quality_cohort(tol)
        assert [r.name for r in cohort] == [r.name for r in ranked if best - r.primary_score <= tol + 1e-12]
    assert result.ranked_results() == ranked


def test_dataframe_columns_and_include_invalid(four_way):
    ds, extractors, *_ = four_way
    result = Benchmark(ds, extractors[:2]).run()
    frame = result.to_dataframe()
    for column in ("rank", "extractor", "primary_metric", "primary_score", "overlap_score", "overlap_macro",
                   "overlap_weighted", "weakest_class", "recommendation", "embedding_dim", "warnings",
                   "metric.overlap", "runtime.extract", "runtime.score"):
        assert column in frame.columns
    # raw and pca4 both separate these classes perfectly: a tie shares the rank (docs/results.md, the tie rule)
    assert list(frame["primary_score"]) == [1.0, 1.0] and list(frame["rank"]) == [1, 1]
    # mark one aggregate invalid: it leaves the default view and gets a null rank when kept
    result.extractor_results[0].metrics["overlap"].aggregate_valid = False
    assert len(result.to_dataframe()) == 1
    full = result.to_dataframe(include_invalid=True)
    assert len(full) == 2 and full["rank"].isna().sum() == 1 and full["rank"].dropna().tolist() == [1]


def test_json_is_deterministic_and_round_trips(four_way, tmp_path):
    ds, extractors, *_ = four_way
    first = Benchmark(ds, extractors[:3]).run()
    second = Benchmark(ds, extractors[:3]).run()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    first.save_json(a)
    second.save_json(b)
    data_a, data_b = json.loads(a.read_text()), json.loads(b.read_text())
    assert data_a["timing"]["runtime"].keys() == {"raw", "pca4", "noisy"}
    del data_a["timing"], data_b["timing"]
    assert json.dumps(data_a, sort_keys=True) == json.dumps(data_b, sort_keys=True)
    loaded = BenchmarkResult.load(a)
    assert loaded.to_dict() == first.to_dict()
    assert loaded.to_markdown() == first.to_markdown()
    assert [r.name for r in loaded.ranked_results()] == [r.name for r in first.ranked_results()]


def test_markdown_has_the_sections_and_escapes_cells(identity):
    X, y = gaussian_classes(n_per_class=30, n_classes=2, dim=4, seed=1)
    labels = np.where(y == 0, "cat|dog", "line\nbreak\\x")
    ds = BenchmarkDataset.from_embeddings(X, labels, identity=identity)
    result = Benchmark(ds, [PrecomputedExtractor("a|b\nc")], scoring_config=OverlapScoringConfig(k=3)).run()
    md = result.to_markdown()
    headings = ("## Answer", "## Ranking", "## How to read these numbers", "## Dataset summary", "## Target summary",
                "## Extractors", "## Overlap configuration", "## Per-extractor details", "## Reproducibility")
    positions = [md.index(heading) for heading in headings]  # present, and the answer leads
    assert positions == sorted(positions)
    table_lines = [line for line in md.splitlines() if line.startswith("|")]
    for line in table_lines:  # every row of a table has as many unescaped pipes as its header
        assert "a\\|b<br>c" in line or "a|b" not in line
    ranking = md[md.index("## Ranking"):md.index("## How to read")]
    rows = [line for line in ranking.splitlines() if line.startswith("|")]
    header_cells = rows[0].count(" | ")
    assert all(row.replace("\\|", "").count(" | ") == header_cells for row in rows if row != rows[1])
    assert "cat\\|dog" in md and "line<br>break\\\\x" in md
    pairwise = md[md.index("Pairwise overlap (row vs column)"):]
    a_vs_b = result["a|b\nc"].overlap.pairwise_scores["str:cat|dog"]["str:line\nbreak\\x"]
    assert f"| cat\\|dog | – | {a_vs_b:.4f} |" in pairwise


def test_excluded_classes_appear_in_reports(identity):
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=4, seed=2)
    ds = BenchmarkDataset.from_embeddings(X, y, identity=identity)
    result = Benchmark(ds, [PrecomputedExtractor("a")], scoring_config=OverlapScoringConfig(k=3, exclude_classes=[2])).run()
    assert result["a"].overlap.metadata["excluded_classes"] == ["int:2"]
    assert "Excluded from aggregation: 2" in result.to_markdown()


def test_multilabel_and_regression_benchmarks_run(identity):
    X, y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=4)
    sets = [{int(c), "all"} if i % 2 else {int(c)} for i, c in enumerate(y)]
    ml = Benchmark(BenchmarkDataset.from_embeddings(X, sets, identity=identity), [PrecomputedExtractor("a")],
                   scoring_config=OverlapScoringConfig(k=3)).run()
    assert ml.dataset_summary["target_type"] == "multi_label" and ml["a"].overlap.target_type == "multi_label"
    assert "label cardinality" in ml.to_markdown()
    from vertebrae import ContinuousOverlapScoringConfig

    reg = Benchmark(BenchmarkDataset.from_embeddings(X, X[:, 0] * 3.0, target_type="regression", identity=identity),
                    [PrecomputedExtractor("a")],
                    continuous_config=ContinuousOverlapScoringConfig(k=3, n_null_permutations=2)).run()
    assert reg["a"].overlap.loss_ratio is not None and "Loss ratio" in reg.to_markdown()
    assert BenchmarkResult.from_dict(json_codec.decode(json_codec.encode(reg.to_dict()))).to_dict() == reg.to_dict()


@pytest.mark.parametrize("extractor, match", [
    (CallableExtractor("short", lambda X: X[:5]), "has 5 rows but the dataset has"),
    (CallableExtractor("nan", lambda X: np.full_like(X, np.nan)), "NaN or infinite"),
    (CallableExtractor("boom", lambda X: 1 / 0), "'boom' failed during fit/transform: ZeroDivisionError"),
    (CallableExtractor("const", lambda X: np.ones_like(X)), "'const' returned the same embedding for every row"),
])
def test_bad_extractor_output_is_reported_before_it_is_scored(identity, extractor, match):
    """Output is validated in the extract stage: the bad extractor never reaches scoring, and the run stops."""
    X, y = gaussian_classes(n_per_class=20, n_classes=2, dim=3)
    ds = BenchmarkDataset.from_arrays(X, y, identity=identity)
    with pytest.raises((ExtractorError, InputValidationError), match=match) as raised:
        Benchmark(ds, [CallableExtractor("good", lambda A: A), extractor]).run()
    assert any(f"extract stage of {extractor.name!r}" in note for note in raised.value.__notes__)
    recorded = Benchmark(ds, [CallableExtractor("good", lambda A: A), extractor], on_error="record").run()
    assert recorded[extractor.name].error["stage"] == "extract" and recorded[extractor.name].overlap is None
    assert re.search(match, recorded[extractor.name].error["message"])
    assert [r.name for r in recorded.ranked_results()] == ["good"]


def test_benchmark_argument_validation(blob_dataset):
    with pytest.raises(InputValidationError, match="both named 'a'"):
        Benchmark(blob_dataset, [PrecomputedExtractor("a"), PrecomputedExtractor("a")])
    with pytest.raises(InputValidationError, match="extractors is empty"):
        Benchmark(blob_dataset, [])
    with pytest.raises(InputTypeError, match="lacks"):
        Benchmark(blob_dataset, [object()])
    with pytest.raises(InputTypeError, match="BenchmarkDataset"):
        Benchmark("data.npy", [PrecomputedExtractor("a")])
    with pytest.raises(ConfigError, match="primary_metric"):
        Benchmark(blob_dataset, [PrecomputedExtractor("a")], primary_metric="accuracy")
    with pytest.raises(InputValidationError, match="not a class"):
        Benchmark(blob_dataset, [PrecomputedExtractor("a")], scoring_config=OverlapScoringConfig(exclude_classes=["0"]))
    with pytest.raises(ConfigError, match="quality_tolerance"):
        Benchmark(blob_dataset, [PrecomputedExtractor("a")], quality_tolerance=-1)


def test_json_is_byte_identical_with_separatix_and_stability(identity, tmp_path):
    from vertebrae import SeparatixConfig, StabilityConfig

    X, y = gaussian_classes(n_per_class=50, n_classes=3, dim=6, seed=5)
    ds = BenchmarkDataset.from_embeddings(X, y, identity=identity)
    texts, results = [], []
    for i in range(2):
        result = Benchmark(ds, [PrecomputedExtractor("a")], scoring_config=OverlapScoringConfig(k=4),
                           separatix_config=SeparatixConfig(), stability_config=StabilityConfig(repeats=3)).run()
        assert result["a"].separatix.status == "completed" and result["a"].stability is not None
        path = tmp_path / f"{i}.json"
        result.save_json(path)
        data = json.loads(path.read_text())
        assert data["timing"]["separatix"]["a"]  # the diagnostic's wall-clock fields live here
        del data["timing"]
        texts.append(json.dumps(data, sort_keys=True))
        results.append(result)
    assert texts[0] == texts[1]
    loaded = BenchmarkResult.load(tmp_path / "0.json")
    assert loaded.to_dict() == results[0].to_dict()
    assert loaded["a"].separatix.report == results[0]["a"].separatix.report  # the full report, timings restored


def test_sklearn_pipeline_with_nan_parameters_runs(identity):
    """SimpleImputer's default missing_values is NaN: the recipe must still key the artifact."""
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline

    X, y = gaussian_classes(n_per_class=30, n_classes=2, dim=4, seed=6)
    ds = BenchmarkDataset.from_arrays(X, y, identity=identity)
    extractor = SklearnExtractor("imputed_pca", make_pipeline(SimpleImputer(), PCA(2, random_state=0)))
    result = Benchmark(ds, [extractor], scoring_config=OverlapScoringConfig(k=3)).run()
    assert result["imputed_pca"].recipe["params"]["simpleimputer__missing_values"] == "nan"
    assert result["imputed_pca"].embedding["embedding_dim"] == 2


def test_markdown_shows_typed_settings_by_display_label_and_escapes_html(identity):
    X, _ = gaussian_classes(n_per_class=30, n_classes=3, dim=4, seed=7)
    y = [1] * 30 + ["1"] * 30 + ["<b>x</b>"] * 30
    ds = BenchmarkDataset.from_embeddings(X, y, identity=identity)
    config = OverlapScoringConfig(k=[(1, 3), ("1", 4)], exclude_classes=["<b>x</b>"])
    md = Benchmark(ds, [PrecomputedExtractor("a`b")], scoring_config=config).run().to_markdown()
    section = md[md.index("## Overlap configuration"):md.index("## Per-extractor details")]
    assert '{"1 (int)": 3, "1 (str)": 4}' in section
    assert "Excluded from macro/weighted aggregation (still fitted and shown per class): &lt;b&gt;x&lt;/b&gt;" in section
    assert "<b>" not in md and "a\\`b" in md

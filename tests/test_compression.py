"""Compression variants: configs, transforms (dense and CSR) against sklearn / hand-computed references,
the compress stage in the plan, fidelity to a direct sklearn PCA + bare OverlapIndex call, footprints,
the frontier, retrieval paired compression and the run-config section."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from overlapindex import OverlapIndex
from sklearn.decomposition import PCA, TruncatedSVD
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, CallableMetric, ConfigError,
                           DatasetIdentity, EmbeddingCompressionConfig, OverlapScoringConfig, PrecomputedExtractor,
                           SeparatixConfig, StabilityConfig)
from vertebrae.extractors.compression import Compressor, pareto_frontier
from vertebrae.errors import CompressionWarning, ExtractorError, InputValidationError
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalConfig,
                                              RetrievalDataset, TwoBranchExtractor)
from vertebrae.cli.run_config import benchmark_kwargs

C = EmbeddingCompressionConfig
IDENTITY = DatasetIdentity.declared("compression", "1")
NO_SEPARATIX = SeparatixConfig(enabled=False)


def blobs(dim: int = 12, n_per_class: int = 40, spread: float = 0.8):
    return gaussian_classes(n_per_class=n_per_class, n_classes=3, dim=dim, spread=spread, seed=3)


def run(X, y, variants, extractors=None, quiet=True, **options):
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    options.setdefault("separatix_config", NO_SEPARATIX)
    options.setdefault("scoring_config", OverlapScoringConfig(k=4))
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", CompressionWarning)
        return Benchmark(dataset, extractors or [PrecomputedExtractor("raw")], compression=variants, progress=False,
                         **options).run()


def direct_overlap(Z, y, k=4, seed=0) -> float:
    """Reference: a bare OverlapIndex call with the settings vertebrae uses (L2 rows, MiniBatchKMeans, seed)."""
    oi = OverlapIndex(model_type="MiniBatchKMeans", kmeans_k=k, kmeans_kwargs={"random_state": seed},
                      offline_chunk_size=10_000, feature_normalization="l2")
    oi.fit_offline(Z, y)
    return oi.index


# ----------------------------------------------------------------------------- configuration
@pytest.mark.parametrize("fields, needle", [
    ({"method": "zip"}, "method"),
    ({"method": "pca"}, "n_components"),
    ({"method": "pca", "n_components": 0}, "n_components"),
    ({"method": "pca", "n_components": True}, "n_components"),
    ({"method": "pca", "n_components": 1.5}, "variance fraction"),
    ({"method": "truncated_svd", "n_components": 0.5}, "positive integer"),
    ({"method": "quantize"}, "dtype is required"),
    ({"method": "quantize", "dtype": "int4"}, "dtype"),
    ({"method": "quantize", "dtype": "int8", "n_components": 4}, "does not apply"),
    ({"method": "pca", "n_components": 4, "dtype": "int8"}, "dtype applies"),
    ({"method": "truncated_svd", "n_components": 4, "whiten": True}, "whiten applies"),
    ({"method": "pca", "n_components": 4, "whiten": 1}, "whiten"),
    ({"method": "pca", "n_components": 4, "random_state": -1}, "random_state"),
    ({"method": "pca", "n_components": 4, "name": "a+b"}, "name"),
])
def test_invalid_configs_are_rejected_naming_the_field(fields, needle):
    with pytest.raises(ConfigError, match=needle):
        C(**fields)


def test_configs_are_immutable_round_trip_and_reject_unknown_fields():
    config = C(method="pca", n_components=0.9, whiten=True, random_state=7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_components = 3
    assert C.from_dict(config.to_dict()) == config and pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(ConfigError, match="unknown field 'components'"):
        C.from_dict({"method": "pca", "components": 4})


def test_labels_name_the_variant():
    assert [C(**f).label for f in ({}, {"method": "pca", "n_components": 64}, {"method": "pca", "n_components": 0.95},
                                    {"method": "pca", "n_components": 8, "whiten": True},
                                    {"method": "truncated_svd", "n_components": 8},
                                    {"method": "gaussian_random_projection", "n_components": 8},
                                    {"method": "sparse_random_projection", "n_components": 8},
                                    {"method": "prefix_truncate", "n_components": 8},
                                    {"method": "quantize", "dtype": "int8"},
                                    {"method": "pca", "n_components": 8, "name": "small"})] == [
        "none", "pca64", "pca0.95", "pca8-whiten", "svd8", "grp8", "srp8", "prefix8", "int8", "small"]


def test_benchmark_rejects_duplicate_variants_and_non_lists():
    X, y = blobs()
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    with pytest.raises(ConfigError, match=r"compression\[1\] and compression\[0\] both make variant 'pca4'"):
        Benchmark(dataset, [PrecomputedExtractor("raw")], compression=[C(method="pca", n_components=4)] * 2)
    with pytest.raises(ConfigError, match="wrap a single config in a list"):
        Benchmark(dataset, [PrecomputedExtractor("raw")], compression=C(method="pca", n_components=4))
    with pytest.raises(ConfigError, match=r"compression\[0\] must be an EmbeddingCompressionConfig"):
        Benchmark(dataset, [PrecomputedExtractor("raw")], compression=[{"method": "pca"}])


def test_run_config_section_builds_the_variants_and_names_a_bad_entry():
    kwargs = benchmark_kwargs({"compression": [{"method": "none"}, {"method": "pca", "n_components": 8}]})
    assert kwargs["compression"] == [C(), C(method="pca", n_components=8)]
    with pytest.raises(ConfigError, match=r"\[\[compression\]\] #2: .*unknown field 'bits'"):
        benchmark_kwargs({"compression": [{"method": "none"}, {"method": "quantize", "bits": 8}]})


# ----------------------------------------------------------------------------- transforms, dense and CSR
def sparse_data(seed: int = 0):
    X = sp.random(80, 30, density=0.25, format="csr", random_state=seed, dtype=np.float64)
    X.data -= 0.5  # signed values
    return X


def fitted(config, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressionWarning)
        compressor = Compressor(config)
        return compressor, compressor.fit_transform(X)


@pytest.mark.parametrize("config, reference", [
    (C(method="pca", n_components=5, random_state=2), lambda X: PCA(5, random_state=2).fit_transform(X)),
    (C(method="pca", n_components=0.8, whiten=True), lambda X: PCA(0.8, whiten=True, random_state=0).fit_transform(X)),
    (C(method="truncated_svd", n_components=5, random_state=2),
     lambda X: TruncatedSVD(5, random_state=2).fit_transform(X)),
    (C(method="gaussian_random_projection", n_components=5, random_state=2),
     lambda X: X @ GaussianRandomProjection(5, random_state=2).fit(X).components_.T),
    (C(method="sparse_random_projection", n_components=5, random_state=2),
     lambda X: X @ SparseRandomProjection(5, random_state=2).fit(X).components_.T.toarray()),
    (C(method="prefix_truncate", n_components=5), lambda X: X[:, :5]),
    (C(method="quantize", dtype="float16"), lambda X: X.astype(np.float16).astype(np.float32)),
    (C(method="quantize", dtype="binary"), lambda X: np.where(X > 0, 1.0, np.where(X < 0, -1.0, 0.0))),
])
def test_dense_transform_matches_the_reference_and_csr_agrees(config, reference):
    Xs = sparse_data()
    X = Xs.toarray()
    _, Z = fitted(config, X)
    np.testing.assert_allclose(Z, reference(X), rtol=1e-6, atol=1e-7)
    compressor, Zs = fitted(config, Xs)
    dense_out = compressor.transform(Xs)
    if config.method in ("sparse_random_projection", "prefix_truncate", "quantize"):
        assert sp.issparse(Zs) and Zs.format == "csr"  # sparse stays sparse
    Zs = Zs.toarray() if sp.issparse(Zs) else Zs
    if config.method == "pca":  # the CSR solver (arpack / covariance) may flip component signs
        np.testing.assert_allclose(np.abs(Zs), np.abs(Z), rtol=1e-4, atol=1e-6)
    else:
        np.testing.assert_allclose(Zs, Z, rtol=1e-5, atol=1e-6)
    assert (dense_out.toarray() if sp.issparse(dense_out) else dense_out).shape == Z.shape


def test_int8_is_a_per_dimension_symmetric_code_on_dense_and_csr():
    Xs = sparse_data(1)
    X = Xs.toarray()
    scale = np.abs(X).max(axis=0) / 127
    expected = np.clip(np.rint(X / scale), -127, 127) * scale  # hand-computed codes, decoded
    for matrix in (X, Xs):
        compressor, Z = fitted(C(method="quantize", dtype="int8"), matrix)
        Z = Z.toarray() if sp.issparse(Z) else Z
        np.testing.assert_allclose(Z, expected, rtol=1e-6, atol=1e-7)
    dense, _ = fitted(C(method="quantize", dtype="int8"), X)
    assert dense.evaluated_bytes(dense.transform(X)) == 80 * 30 + 4 * 30  # 1 byte per value plus float32 scales


def test_quantized_footprints_report_stored_bytes():
    X = np.random.default_rng(0).normal(size=(50, 20)).astype(np.float32)
    sizes = {}
    for dtype in ("float16", "int8", "binary"):
        compressor, Z = fitted(C(method="quantize", dtype=dtype), X)
        sizes[dtype] = compressor.metadata(X, Z)["footprint"]
    assert sizes["float16"]["evaluated_bytes"] == 50 * 20 * 2
    assert sizes["int8"]["evaluated_bytes"] == 50 * 20 + 4 * 20
    assert sizes["binary"]["evaluated_bytes"] == 50 * math.ceil(20 / 8)
    assert all(s["raw_bytes"] == 50 * 20 * 4 and s["raw_bytes_per_row"] == 80.0 for s in sizes.values())
    assert sizes["int8"]["evaluated_bytes_per_row"] == (50 * 20 + 80) / 50


# ----------------------------------------------------------------------------- the plan
class CountingEmbedder:
    """A real function extractor that counts its calls."""

    def __init__(self, X):
        self.X, self.calls = X, 0

    def __call__(self, inputs):
        self.calls += 1
        return self.X


def test_the_source_is_extracted_once_for_all_its_variants():
    X, y = blobs()
    variants = [C(), C(method="pca", n_components=4), C(method="quantize", dtype="int8"),
                C(method="prefix_truncate", n_components=6)]
    embedders = [CountingEmbedder(X), CountingEmbedder(X[:, ::-1].copy())]
    extractors = [CallableExtractor(f"m{i}", e, cache_identity=f"m{i}-v1") for i, e in enumerate(embedders)]
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)
    benchmark = Benchmark(dataset, extractors, compression=variants, separatix_config=NO_SEPARATIX, progress=False,
                          scoring_config=OverlapScoringConfig(k=4))
    plan = benchmark.plan()
    stages = [job.stage for job in plan.jobs]
    assert stages.count("extract") == 2 and stages.count("embedding") == 2 and stages.count("compress") == 6
    assert [c.name for c in plan.chains] == ["m0", "m0+pca4", "m0+int8", "m0+prefix6",
                                            "m1", "m1+pca4", "m1+int8", "m1+prefix6"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompressionWarning)
        result = benchmark.run()
    assert [e.calls for e in embedders] == [1, 1]
    keys = [r.artifact_keys for r in result.extractor_results[:4]]
    assert len({k["extract"] for k in keys}) == 1 and "compress" not in keys[0]
    # the `none` variant is the raw embedding: the same score job as a benchmark without variants
    plain = Benchmark(dataset, extractors[:1], separatix_config=NO_SEPARATIX,
                      scoring_config=OverlapScoringConfig(k=4)).plan()
    assert plain.chain_keys[0]["score"] == keys[0]["score"]


class TwoLayers:
    """A minimal multi-output extractor (two named outputs)."""

    name, matryoshka = "net", False

    def __init__(self, X):
        self.X = X

    def fit(self, X, y=None):
        return self

    def output_names(self):
        return ["a", "b"]

    def transform_many(self, X):
        return {"a": self.X, "b": self.X * 2.0}

    def transform(self, X):
        return self.X

    def recipe(self):
        return {"type": "two-layers", "name": self.name}

    def output_metadata(self):
        return {"a": {"hidden_layer": 1}, "b": {"hidden_layer": 2, "matryoshka": True}}


def test_variant_names_compose_with_named_outputs_and_matryoshka_is_read_per_output():
    X, y = blobs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(X, y, [C(), C(method="prefix_truncate", n_components=4)], extractors=[TwoLayers(X)], quiet=False)
    assert [r.name for r in result.extractor_results] == ["net:a", "net:a+prefix4", "net:b", "net:b+prefix4"]
    matryoshka = [str(w.message) for w in caught if issubclass(w.category, CompressionWarning)]
    assert len(matryoshka) == 1 and "'net:a+prefix4'" in matryoshka[0] and "Matryoshka" in matryoshka[0]
    assert result["net:b+prefix4"].compression["source"] == "net:b"
    assert result["net:a+prefix4"].embedding["output_name"] == "a"


def test_analyses_run_on_the_compressed_variant():
    """Every analysis of `raw+pca4` equals the same analysis of sklearn's PCA output given as a raw embedding."""
    X, y = blobs()
    seen_widths = []

    def width(embeddings, labels, **kwargs):
        seen_widths.append(embeddings.shape[1])
        return {"score": float(embeddings.shape[1])}

    options = dict(stability_config=StabilityConfig(repeats=3), separatix_config=SeparatixConfig(overlap_threshold=1.0),
                   metrics=[CallableMetric("width", width, cache_identity="width-v1")])
    compressed = run(X, y, [C(method="pca", n_components=4)], **options)["raw+pca4"]
    Z = PCA(4, random_state=0).fit_transform(X)
    reference = run(X, y, None, extractors=[PrecomputedExtractor("raw", Z)], **options)["raw"]
    assert seen_widths == [4, 4]
    assert compressed.overlap.to_dict() == reference.overlap.to_dict()
    assert compressed.stability.to_dict() == reference.stability.to_dict()
    assert compressed.metrics["width"].score == 4.0
    assert compressed.separatix.status == reference.separatix.status
    assert compressed.separatix.probe_summary == reference.separatix.probe_summary
    assert compressed.embedding["embedding_dim"] == 4


# ----------------------------------------------------------------------------- fidelity
def test_pca_score_equals_direct_sklearn_pca_and_a_bare_overlapindex_call_exactly():
    X, y = blobs(dim=16)
    result = run(X, y, [C(method="pca", n_components=5, random_state=4)])["raw+pca5"]
    Z = PCA(n_components=5, random_state=4).fit_transform(X)
    assert result.overlap.score == direct_overlap(Z, y)
    facts = result.compression
    assert facts["applied"] and facts["requested_dim"] == 5 and facts["output_dim"] == 5 and facts["input_dim"] == 16
    assert facts["explained_variance_ratio"] == float(np.sum(PCA(5, random_state=4).fit(X).explained_variance_ratio_))


@pytest.mark.parametrize("config", [C(method="truncated_svd", n_components=5), C(method="quantize", dtype="int8"),
                                    C(method="sparse_random_projection", n_components=6)])
def test_other_methods_score_their_transform_on_csr_input(config):
    X, y = blobs(dim=16)
    Xs = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    result = run(Xs, y, [config])[f"raw+{config.label}"]
    assert result.overlap.score == direct_overlap(fitted(config, Xs)[1], y)


def test_quantized_results_are_reproducible_run_to_run(tmp_path):
    X, y = blobs()
    variants = [C(method="quantize", dtype=d) for d in ("float16", "int8", "binary")]
    first, second = run(X, y, variants), run(X, y, variants)
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k != "timing"}  # noqa: E731
    assert json.dumps(strip(first), sort_keys=True) == json.dumps(strip(second), sort_keys=True)


def test_a_request_wider_than_the_embedding_is_recorded_as_not_applied():
    X, y = blobs(dim=12)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    with pytest.warns(CompressionWarning, match="pca64 not applied: requested 64 dimensions but the embedding has "
                                                "only 12"):
        result = Benchmark(dataset, [PrecomputedExtractor("raw")], compression=[C(), C(method="pca", n_components=64)],
                           separatix_config=NO_SEPARATIX, scoring_config=OverlapScoringConfig(k=4)).run()
    skipped = result["raw+pca64"]
    assert skipped.compression["applied"] is False and skipped.compression["requested_dim"] == 64
    assert skipped.compression["output_dim"] == 12
    assert skipped.overlap.score == result["raw"].overlap.score == direct_overlap(X, y)
    assert any("not applied" in w for w in skipped.warnings)


def test_pca_of_as_many_components_as_sparse_rows_is_not_applied_rather_than_a_crash():
    """scikit-learn's PCA of CSR rows (ARPACK) needs fewer components than min(rows, width): 30 of 30 rows aborted
    the run with scikit-learn's ValueError; 29 fit."""
    X, y = blobs(dim=100, n_per_class=10)
    Xs = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    with pytest.warns(CompressionWarning, match="pca30 not applied: requested 30 dimensions but pca can keep at most "
                                                "29 components of 30 sparse rows"):
        result = run(Xs, y, [C(method="pca", n_components=30), C(method="pca", n_components=29)], quiet=False)
    assert result["raw+pca30"].compression["applied"] is False
    assert result["raw+pca29"].compression["applied"] is True and result["raw+pca29"].compression["output_dim"] == 29


def test_float16_beyond_its_range_is_not_applied_rather_than_infinity():
    """Values above 65504 became infinity and aborted the run naming no variant."""
    X, y = blobs(dim=8)
    large = X * 1e5
    with pytest.warns(CompressionWarning, match=r"float16 not applied: values reach .* beyond float16's largest "
                                                "finite value 65504"):
        result = run(large, y, [C(), C(method="quantize", dtype="float16")], quiet=False)
    variant = result["raw+float16"]
    assert variant.compression["applied"] is False and variant.overlap.score == result["raw"].overlap.score
    compressor = Compressor(C(method="quantize", dtype="float16"))
    compressor.fit(X)  # in range: applied; rows transformed later (queries) beyond it are refused by name
    with pytest.raises(ExtractorError, match="float16 quantization: a value of magnitude 1e\\+05"):
        compressor.transform(np.full((2, 8), 1e5, dtype=np.float32))


def test_footprints_keep_raw_and_evaluated_bytes_apart():
    X, y = blobs(dim=16)
    result = run(X, y, [C(), C(method="pca", n_components=4)])
    raw, pca = result["raw"].compression["footprint"], result["raw+pca4"].compression["footprint"]
    assert raw == {"n_rows": 120, "raw_bytes": 120 * 16 * 4, "raw_bytes_per_row": 64.0,
                   "evaluated_bytes": 120 * 16 * 4, "evaluated_bytes_per_row": 64.0}
    assert pca["raw_bytes_per_row"] == 64.0 and pca["evaluated_bytes_per_row"] == 16.0
    row = next(r for r in result.rows() if r["extractor"] == "raw+pca4")
    assert (row["compression_method"], row["compression_output_dim"], row["evaluated_bytes_per_row"]) == \
        ("pca", 4, 16.0)


def test_variants_keep_the_source_cache_eligibility_and_status():
    X, y = blobs()
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)
    for identity, eligible, status in ((None, False, "bypassed_unsafe_identity"), ("f-v1", True, "disabled")):
        extractor = CallableExtractor("f", CountingEmbedder(X), cache_identity=identity)
        benchmark = Benchmark(dataset, [extractor], compression=[C(method="pca", n_components=4)],
                              separatix_config=NO_SEPARATIX, scoring_config=OverlapScoringConfig(k=4), progress=False)
        compress_job = next(j for j in benchmark.plan().jobs if j.stage == "compress")
        assert compress_job.cache_eligible is eligible
        result = benchmark.run()["f+pca4"]
        assert (result.compression["cache_eligible"], result.compression["cache_status"]) == (eligible, status)
        assert (result.embedding["cache_eligible"], result.embedding["cache_status"]) == (eligible, status)


# ----------------------------------------------------------------------------- the frontier
def test_pareto_frontier_by_hand():
    points = [(0.9, 64.0), (0.85, 16.0), (0.85, 20.0), (0.5, 2.0), (None, 1.0), (0.9, 64.0)]
    assert pareto_frontier(points) == [True, True, False, True, False, True]
    # lower is better: (0.5, 2) dominates everything else that is larger and worse
    assert pareto_frontier([(0.9, 64.0), (0.5, 2.0), (0.4, 8.0)], higher_is_better=False) == [False, True, True]


def test_markdown_frontier_renders_from_the_archived_json(tmp_path):
    X, y = blobs()
    result = run(X, y, [C(), C(method="pca", n_components=4), C(method="quantize", dtype="binary")])
    text = result.to_markdown()
    section = text[text.index("## Compression frontier"):]
    assert "| raw | pca4 | pca | 4 | 4 | yes | float32 |" in section
    assert "1-bit sign" in section
    path = result.save_json(tmp_path / "r.json")
    assert type(result).load(path).to_markdown() == text
    assert "## Compression frontier" not in run(X, y, None).to_markdown()


def test_the_markdown_ranking_says_what_each_row_was_compressed_to():
    """The ranking had no compression column: a not-applied pca64 read like a plain copy of the raw row."""
    X, y = blobs(dim=12)
    with pytest.warns(CompressionWarning, match="pca64 not applied"):
        result = run(X, y, [C(), C(method="pca", n_components=4), C(method="pca", n_components=64),
                            C(method="quantize", dtype="int8")], quiet=False)
    ranking = result.to_markdown().split("## Ranking")[1].split("\n## ")[0]
    header = next(line for line in ranking.splitlines() if line.startswith("| rank"))
    assert "| embedding_dim | compression | recipe |" in header
    column = header.split(" | ").index("compression")
    rows = [line.split(" | ") for line in ranking.splitlines() if line.split(" | ")[0][2:].isdigit()]
    cells = {row[1]: row[column] for row in rows}
    assert cells == {"raw": "–", "raw+pca4": "pca 4", "raw+int8": "quantize int8",
                     "raw+pca64": "pca 64 (not applied: requested 64 dimensions but the embedding has only 12 "
                                  "dimensions; scored uncompressed)"}
    assert "compression |" not in run(X, y, None).to_markdown()


def test_every_report_says_why_a_variant_was_not_applied(tmp_path):
    """The ranking's compression cell said "not applied" without the reason, the DataFrame had only
    compression_applied, and the frontier note gave every skip the width reason (wrong for float16)."""
    X, y = blobs(dim=12)
    large = X * 1e5
    with pytest.warns(CompressionWarning):
        result = run(large, y, [C(), C(method="pca", n_components=4), C(method="pca", n_components=64),
                                C(method="quantize", dtype="float16")], quiet=False)
    width = f"requested 64 dimensions but the embedding has only {X.shape[1]} dimensions"
    peak = f"values reach {float(np.abs(large).max()):.4g}, beyond float16's largest finite value " \
           f"{float(np.finfo(np.float16).max):g}, which would store them as infinity"
    columns = list(result.to_dataframe().columns)
    assert columns.index("compression_not_applied_reason") == columns.index("compression_applied") + 1
    assert {row["extractor"]: row["compression_not_applied_reason"] for row in result.rows()} == {
        "raw": None, "raw+pca4": None, "raw+pca64": width, "raw+float16": peak}
    markdown = type(result).load(result.save_json(tmp_path / "r.json")).to_markdown()  # from the archived JSON
    for reason in (width, peak):
        assert f"(not applied: {reason}; scored uncompressed)" in markdown.split("## Ranking")[1].split("\n## ")[0]
    frontier = markdown.split("## Compression frontier")[1].split("\n## ")[0]
    assert f"Not applied (scored uncompressed): raw+pca64 ({width}); raw+float16 ({peak})" in frontier
    page = result.to_html()
    assert html.escape(f"quantize float16 (not applied: {peak}; scored uncompressed)") in page.replace("<wbr>", "")


# ----------------------------------------------------------------------------- retrieval
def test_retrieval_fits_on_the_gallery_and_applies_to_the_queries():
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(10, 8)), rng.normal(size=(40, 8))
    gallery[:10] = queries + 0.3 * rng.normal(size=(10, 8))
    relevance = [(i, i, 1) for i in range(10)]
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)
    config = RetrievalConfig(cutoffs=[1, 5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = RetrievalBenchmark(dataset, [PrecomputedExtractor("raw")], retrieval_config=config,
                                    compression=[C(), C(method="pca", n_components=3)], progress=False).run()
        pca = PCA(3, random_state=0).fit(gallery)
        reference = RetrievalBenchmark(dataset, [PrecomputedPairExtractor("ref", pca.transform(queries),
                                                                          pca.transform(gallery))],
                                       retrieval_config=config, progress=False).run()
    entry = result["raw+pca3"]
    assert entry.forward.metrics == reference["ref"].forward.metrics
    facts = entry.compression
    assert facts["fitted_on"] == "gallery" and facts["output_dim"] == 3
    assert facts["footprint"]["gallery"]["evaluated_bytes"] == 40 * 3 * 8
    assert facts["footprint"]["query"]["raw_bytes"] == 10 * 8 * 8
    assert entry.recipe == result["raw"].recipe
    assert result["raw"].compression["method"] == "none"


def test_retrieval_paired_compression_rejects_endpoints_of_different_widths_before_fitting():
    rng = np.random.default_rng(1)
    queries, gallery = rng.normal(size=(4, 6)), rng.normal(size=(10, 6))
    dataset = RetrievalDataset.from_inputs(queries, gallery, relevance=[(i, i, 1) for i in range(4)],
                                           identity=IDENTITY)
    mismatched = TwoBranchExtractor("dual", lambda X: X[:, :5], lambda X: X)
    benchmark = RetrievalBenchmark(dataset, [mismatched], retrieval_config=RetrievalConfig(cutoffs=[1]),
                                   compression=[C(method="pca", n_components=2)], progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputValidationError, match="5 columns but gallery embeddings have 6; .* compressed"):
            benchmark.run()


class MatryoshkaPrecomputed(PrecomputedExtractor):
    """A precomputed embedding whose model was Matryoshka-trained (declared by the attribute)."""

    matryoshka = True


def test_prefix_truncation_warns_only_for_extractors_not_declared_matryoshka():
    X, y = blobs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # distinct content, so the two are distinct jobs (identical identities would share every job)
        result = run(X, y, [C(method="prefix_truncate", n_components=4)], quiet=False,
                     extractors=[MatryoshkaPrecomputed("mrl"), PrecomputedExtractor("plain", X[:, ::-1].copy())])
    messages = [str(w.message) for w in caught if issubclass(w.category, CompressionWarning)]
    assert len(messages) == 1 and "'plain+prefix4'" in messages[0]
    assert result["mrl+prefix4"].warnings == [] and result["mrl+prefix4"].compression["output_dim"] == 4
    np.testing.assert_array_equal(result["mrl+prefix4"].overlap.score, direct_overlap(X[:, :4], y))
    # retrieval adapters wrap the extractor: the declaration is read through them
    rng = np.random.default_rng(2)
    queries, gallery = rng.normal(size=(5, 8)), rng.normal(size=(12, 8))
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(5)],
                                               identity=IDENTITY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = PrecomputedPairExtractor("plain", queries[:, ::-1].copy(), gallery[:, ::-1].copy())
        entries = RetrievalBenchmark(dataset, [MatryoshkaPrecomputed("mrl"), plain],
                                     retrieval_config=RetrievalConfig(cutoffs=[1]), progress=False,
                                     compression=[C(method="prefix_truncate", n_components=4)]).run()
    assert entries["mrl+prefix4"].warnings == []
    assert any("Matryoshka" in w for w in entries["plain+prefix4"].warnings)


def test_the_cli_runs_the_compression_section_end_to_end(tmp_path):
    from vertebrae.cli.main import main

    X, y = blobs()
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", y)
    config = """
[dataset]
id = "blobs"
revision = "1"
labels = "y.npy"

[[extractors]]
name = "raw"
embeddings = "x.npy"

[scoring]
k = 4

[separatix]
enabled = false

[[compression]]
method = "none"

[[compression]]
method = "pca"
n_components = 3
"""
    (tmp_path / "run.toml").write_text(config)
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [r["name"] for r in data["extractor_results"]] == ["raw", "raw+pca3"]
    reference = direct_overlap(PCA(3, random_state=0).fit_transform(X), y)
    assert data["extractor_results"][1]["overlap"]["score"] == reference
    assert "## Compression frontier" in (tmp_path / "out" / "report.md").read_text()
    (tmp_path / "run.toml").write_text(config + "whiten = 1\n")
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "bad"), "-q"]) == 2


def test_plans_with_variants_pickle():
    X, y = blobs()
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    plan = Benchmark(dataset, [PrecomputedExtractor("raw")], compression=[C(), C(method="quantize", dtype="int8")],
                     separatix_config=NO_SEPARATIX).plan()
    assert pickle.loads(pickle.dumps(plan.jobs)) == plan.jobs
    assert pickle.loads(pickle.dumps(plan.chains)) == plan.chains

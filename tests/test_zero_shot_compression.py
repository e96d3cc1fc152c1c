"""Zero-shot compression variants and the encode cache: names, fidelity against scikit-learn, reports, reuse."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.metrics import accuracy_score, balanced_accuracy_score, confusion_matrix, f1_score, top_k_accuracy_score

from vertebrae import (EmbeddingCompressionConfig, OverlapScoringConfig, PrecomputedZeroShotEncoder, TextEncoder,
                       ZeroShotBenchmark, ZeroShotBenchmarkResult, ZeroShotConfig)
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.errors import (CompressionWarning, ConfigError, ConfigTypeError, DataWarning, ExtractorError,
                                  ScoringWarning)

from .references import direct_oi
from .test_zero_shot_benchmark import WordCounter, text_dataset
from .test_zero_shot_scoring import problem, reference_similarities, zero_shot_dataset

N_CLASSES, PROMPTS_PER_CLASS = 12, 3
NONE = EmbeddingCompressionConfig()
PCA5 = EmbeddingCompressionConfig(method="pca", n_components=5, random_state=0)
PCA64 = EmbeddingCompressionConfig(method="pca", n_components=64, random_state=0)


def run(data, encoders, **kwargs) -> ZeroShotBenchmarkResult:
    config = kwargs.pop("config", ZeroShotConfig(top_k=(1, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning, CompressionWarning))
        return ZeroShotBenchmark(data, encoders, config=config, progress=False, **kwargs).run()


@pytest.fixture(scope="module")
def numeric():
    samples, y, prompts = problem(n_classes=N_CLASSES, prompts_per_class=PROMPTS_PER_CLASS)
    prompts = prompts + 4.0  # prompts off the samples' distribution: a PCA fitted on both would differ
    return samples, y, prompts, zero_shot_dataset(y, PROMPTS_PER_CLASS)


@pytest.fixture(scope="module")
def variants_result(numeric):
    samples, y, prompts, data = numeric
    return run(data, [PrecomputedZeroShotEncoder("e", samples, prompts)], compression=[NONE, PCA5, PCA64])


def test_variant_names_keep_the_requested_dimension_even_when_skipped(variants_result, numeric):
    result = variants_result
    assert [r.name for r in result.extractor_results] == ["e", "e+pca5", "e+pca64"]
    skipped = result["e+pca64"]
    assert skipped.compression["applied"] is False and skipped.compression["requested_dim"] == 64
    assert skipped.compression["output_dim"] == 16 and skipped.embedding["samples"]["embedding_dim"] == 16
    assert any("pca64 not applied: requested 64 dimensions but the embedding has only 16" in w
               for w in skipped.warnings)
    assert skipped.scores == result["e"].scores  # scored uncompressed, under its requested name
    raw = result["e"]
    assert raw.compression["method"] == "none" and raw.compression["applied"] is False
    applied = result["e+pca5"]
    assert applied.compression["applied"] is True and applied.compression["fitted_on"] == "samples"
    assert applied.compression["source"] == "e" and applied.embedding["samples"]["embedding_dim"] == 5
    assert applied.embedding["prompts"]["embedding_dim"] == 5 and applied.prototypes["embedding_dim"] == 5
    assert applied.embedding["prompts"]["branch"] == "prompts"
    footprint = applied.compression["footprint"]
    assert footprint["samples"]["raw_bytes_per_row"] == 16 * 4 and footprint["samples"]["evaluated_bytes_per_row"] == 5 * 4
    assert footprint["prompts"]["n_rows"] == N_CLASSES * PROMPTS_PER_CLASS
    with pytest.warns(CompressionWarning, match="pca64 not applied"), warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning))
        ZeroShotBenchmark(numeric[3], [PrecomputedZeroShotEncoder("e", numeric[0], numeric[2])],
                          compression=[PCA64], progress=False).run()


def test_compressed_scores_equal_sklearn_pca_fitted_on_the_samples(variants_result, numeric):
    samples, y, prompts, data = numeric
    pca = PCA(n_components=5, random_state=0)
    reduced_samples = pca.fit_transform(samples)
    reduced_prompts = pca.transform(prompts)
    scores = reference_similarities(reduced_samples, reduced_prompts, N_CLASSES, PROMPTS_PER_CLASS, "cosine")
    ordered = np.sort(scores, axis=1)
    assert (ordered[:, -1] - ordered[:, -2]).min() > 1e-4  # no near-ties: float32 and float64 agree on the argmax
    predicted = scores.argmax(axis=1)
    labels = list(range(N_CLASSES))
    result = variants_result["e+pca5"]
    assert 0.1 < accuracy_score(y, predicted) < 0.9  # informative, and different from the raw embedding's
    assert result.scores["top1_accuracy"] != variants_result["e"].scores["top1_accuracy"]
    assert result.scores["top1_accuracy"] == pytest.approx(accuracy_score(y, predicted), abs=1e-12)
    assert result.scores["macro_f1"] == pytest.approx(f1_score(y, predicted, average="macro"), abs=1e-12)
    assert result.scores["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, predicted), abs=1e-12)
    assert result.confusion_matrix == confusion_matrix(y, predicted, labels=labels).tolist()
    assert result.top_k_accuracies["top3_accuracy"] == pytest.approx(
        top_k_accuracy_score(y, scores, k=3, labels=labels), abs=1e-12)
    assert result.compression["explained_variance_ratio"] == pytest.approx(pca.explained_variance_ratio_.sum())
    # The overlap context is OverlapIndex called directly on the compressed samples, seed 0, with the documented
    # auto k per class: capacity = min(n_c, max(2, n_c // 5)); k = min(clip(capacity, 10, 50), capacity).
    counts = np.bincount(y)
    capacity = np.minimum(counts, np.maximum(2, counts // 5))
    k = {c: int(min(np.clip(capacity[c], 10, 50), capacity[c])) for c in range(N_CLASSES)}
    direct = direct_oi(reduced_samples, y, k, seed=0).index
    assert result.overlap.score == direct and 0 < direct < 1  # the context is scored on the compressed samples too

    # A PCA fitted on samples and prompts together gives other scores: the fit really is on the samples only.
    joint = PCA(n_components=5, random_state=0).fit(np.vstack([samples, prompts]))
    other = reference_similarities(joint.transform(samples), joint.transform(prompts), N_CLASSES,
                                   PROMPTS_PER_CLASS, "cosine").argmax(axis=1)
    assert accuracy_score(y, other) != result.scores["top1_accuracy"]


def test_quantized_prompts_use_the_scales_fitted_on_the_samples(numeric):
    samples, y, prompts, data = numeric
    result = run(data, [PrecomputedZeroShotEncoder("e", samples, prompts)],
                 compression=[EmbeddingCompressionConfig(method="quantize", dtype="int8")])["e+int8"]
    scales = np.abs(samples).max(axis=0).astype(np.float64) / 127
    scales = scales.astype(np.float32)
    decode = lambda X: (np.clip(np.rint(X / scales), -127, 127).astype(np.int8) * scales).astype(np.float32)  # noqa: E731
    scores = reference_similarities(decode(samples), decode(prompts), N_CLASSES, PROMPTS_PER_CLASS, "cosine")
    assert result.scores["top1_accuracy"] == pytest.approx(accuracy_score(y, scores.argmax(axis=1)), abs=1e-12)
    assert result.compression["footprint"]["samples"]["evaluated_bytes_per_row"] == pytest.approx(16 + 16 * 4 / 400)


def test_json_markdown_and_dataframe_show_the_variant(variants_result, tmp_path):
    result = variants_result
    loaded = ZeroShotBenchmarkResult.load(result.save_json(tmp_path / "zs.json"))
    assert loaded.to_dict() == result.to_dict() and loaded["e+pca5"].compression == result["e+pca5"].compression
    data = json.loads(result.to_json())
    assert data["protocol"]["compression"] == [NONE.to_dict(), PCA5.to_dict(), PCA64.to_dict()]
    frame = result.to_dataframe().set_index("extractor")
    assert frame.loc["e+pca5", "compression_variant"] == "pca5" and frame.loc["e+pca5", "embedding_dim"] == 5
    assert frame.loc["e+pca64", "compression_requested_dim"] == 64
    assert not frame.loc["e+pca64", "compression_applied"]
    assert frame.loc["e+pca5", "evaluated_bytes_per_row"] == 20
    markdown = result.to_markdown()
    assert "## Compression variants" in markdown and "fitted on the encoder's sample embeddings" in markdown
    assert "| e+pca5 | e | pca5 | pca | 5 | 5 | yes |" in markdown and "| e+pca64 | e | pca64 | pca | 64 | 16 | no |" \
        in markdown
    width = "requested 64 dimensions but the embedding has only 16 dimensions"  # the samples' 16 columns
    assert f"Not applied (scored uncompressed, the name keeps the requested variant): e+pca64 ({width})" in markdown
    assert frame.loc["e+pca64", "compression_not_applied_reason"] == width
    plain = run(text_dataset(), {"counts": WordCounter()})
    assert "## Compression variants" not in plain.to_markdown()
    assert "compression" not in plain.to_dict()["extractor_results"][0]
    assert plain.to_dataframe()["compression_variant"].isna().all()


def test_variants_share_the_encodings_and_the_none_variant_keeps_the_raw_keys():
    data = text_dataset()
    encoder = TextEncoder("counts", WordCounter(), cache_identity="counts-v1")
    base = ZeroShotBenchmark(data, [encoder]).plan().chain_keys[0]
    plan = ZeroShotBenchmark(data, [encoder], compression=[NONE, PCA5]).plan()
    raw, pca = plan.chain_keys
    assert [c.name for c in plan.chains] == ["counts", "counts+pca5"]
    assert "compress" not in raw and {s: k for s, k in raw.items() if s != "assemble"} == \
        {s: k for s, k in base.items() if s != "assemble"}
    assert raw["assemble"] != base["assemble"]  # the none variant's result records its variant
    assert pca["encode_samples"] == raw["encode_samples"] and pca["encode_prompts"] == raw["encode_prompts"]
    assert all(pca[s] != raw[s] for s in ("prototypes", "classify", "overlap", "assemble"))
    assert sum(job.stage == "encode_samples" for job in plan.jobs) == 1
    other = ZeroShotBenchmark(data, [encoder], compression=[EmbeddingCompressionConfig(
        method="pca", n_components=5, random_state=1)]).plan().chain_keys[0]
    assert other["compress"] != pca["compress"] and other["encode_prompts"] == pca["encode_prompts"]


def test_bad_compression_and_cache_arguments_are_rejected_before_any_work():
    data = text_dataset()
    with pytest.raises(ConfigError, match="ZeroShotBenchmark: compression must be a list"):
        ZeroShotBenchmark(data, {"counts": WordCounter()}, compression=PCA5)
    with pytest.raises(ConfigError, match="compression\\[1\\] and compression\\[0\\] both make variant 'pca5'"):
        ZeroShotBenchmark(data, {"counts": WordCounter()}, compression=[PCA5, PCA5])
    with pytest.raises(ConfigTypeError, match="cache_config must be a vertebrae.artifacts.cache.CacheConfig"):
        ZeroShotBenchmark(data, {"counts": WordCounter()}, cache_config={"store": "x"})


def test_a_width_mismatch_fails_in_compress_naming_the_encoder():
    class Wider:
        name = "wide"

        def encode_samples(self, inputs):
            return WordCounter().encode(inputs)

        def encode_prompts(self, prompts):
            return np.hstack([WordCounter().encode(prompts)] * 2)

        def recipe(self):
            return {"type": "wider_test", "name": self.name}

    with pytest.raises(Exception, match="encoder 'wide': sample embeddings have 15 columns but prompt embeddings "
                                        "have 30"):
        run(text_dataset(), [Wider()], compression=[PCA5])


# ----------------------------------------------------------------------------- the encode cache
class CountingModel(WordCounter):
    """The bag-of-words model, counting its calls; ``refuse`` proves a warm run never calls it."""

    def __init__(self):
        self.calls, self.refuse = 0, False

    def encode(self, texts):
        if self.refuse:
            raise RuntimeError("must not run: the cache should serve it")
        self.calls += 1
        return super().encode(texts)


def _stable(result: ZeroShotBenchmarkResult) -> dict:
    """The result JSON minus what differs between a cold and a warm run: timing and cache status."""
    data = json.loads(result.to_json())
    data.pop("timing")
    for item in data["extractor_results"]:
        for branch in ("samples", "prompts"):
            item["embedding"][branch].pop("cache_status")
        if item["compression"] is not None:  # a variant reports its source encoding's status
            item["compression"].pop("cache_status")
    return data


def test_encodings_are_reused_from_a_local_store(tmp_path):
    data, model = text_dataset(), CountingModel()
    config = CacheConfig(store=str(tmp_path / "cache"))

    def bench():
        return run(data, [TextEncoder("counts", model, cache_identity="counts-v1")], cache_config=config,
                   compression=[NONE, PCA5])

    cold = bench()
    assert model.calls == 2  # samples and prompts, once for both variants
    model.refuse = True
    warm = bench()
    for name in ("counts", "counts+pca5"):
        for branch in ("samples", "prompts"):
            assert cold[name].embedding[branch]["cache_status"] == "miss"
            assert warm[name].embedding[branch]["cache_status"] == "hit"
            assert warm[name].embedding[branch]["footprint"] == cold[name].embedding[branch]["footprint"]
        assert warm[name].runtime["encode_samples"] == "not_measured_cache_hit"
        assert isinstance(warm[name].runtime["encode_samples_cache_read"], float)
    assert _stable(warm) == _stable(cold)
    raw = cold["counts"].embedding["samples"]["footprint"]["raw"]
    assert raw["logical_bytes"] == 36 * 15 * 4 and raw["persisted_status"] == "measured"
    assert raw["persisted_bytes"] == 36 * 15 * 4 + 128  # the .npy file: its 128-byte header plus the float32 data
    evaluated = cold["counts+pca5"].embedding["samples"]["footprint"]["evaluated"]
    assert evaluated == {"logical_bytes": 36 * 5 * 4, "persisted_bytes": None, "persisted_status": "not_persisted"}
    assert cold.metadata["cache"] == {"store": str(tmp_path / "cache"), "mode": "read_write"}

    read_only = run(text_dataset(), [TextEncoder("counts", CountingModel(), cache_identity="counts-v1")],
                 cache_config=CacheConfig(store=str(tmp_path / "cache"), mode="read_only"))
    assert read_only["counts"].embedding["samples"]["cache_status"] == "hit"
    unsafe = run(data, [TextEncoder("counts", CountingModel())], cache_config=config)
    assert unsafe["counts"].embedding["samples"]["cache_status"] == "bypassed_unsafe_identity"


def test_a_cached_encoding_that_fails_validation_is_never_stored(tmp_path):
    class Collapsed(WordCounter):
        def encode(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32)

    config = CacheConfig(store=str(tmp_path / "cache"))
    with pytest.raises(ExtractorError, match="returned the same sample embedding"):
        run(text_dataset(), [TextEncoder("flat", Collapsed(), cache_identity="flat-v1")], cache_config=config)
    assert not list((tmp_path / "cache").rglob("*.npy"))


def test_variants_and_the_cache_run_on_dask_workers_with_identical_results(dask_client, tmp_path):
    """Compressed branches travel between workers and the encode codec works there: same JSON as a local run."""
    from vertebrae.execution.dask import DaskRunner

    def bench(store):
        return ZeroShotBenchmark(text_dataset(), [TextEncoder("counts", WordCounter(), cache_identity="counts-v1")],
                                 config=ZeroShotConfig(top_k=(1, 2)), compression=[NONE, PCA5], progress=False,
                                 cache_config=CacheConfig(store=str(store)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = bench(tmp_path / "local").run()
        remote = bench(tmp_path / "remote").run(runner=DaskRunner(dask_client))
        warm = bench(tmp_path / "remote").run(runner=DaskRunner(dask_client))
    assert remote.metadata["cache"]["store"] != local.metadata["cache"]["store"]  # only the store differs
    assert {**local.metadata, "cache": remote.metadata["cache"]} == remote.metadata
    assert remote.protocol == local.protocol
    assert remote.to_dict()["extractor_results"] == local.to_dict()["extractor_results"]
    assert warm["counts+pca5"].embedding["samples"]["cache_status"] == "hit"
    assert _stable(warm) == _stable(remote)


def test_prompts_that_embed_to_one_row_are_cached_and_read_back(numeric, tmp_path):
    """A cold run scores prompts that all embed alike; a read used to call that entry corrupt (recomputed every run,
    refused by read_only runs and by `cache verify`)."""
    from vertebrae.artifacts.cache import verify_store

    samples, _, prompts, data = numeric
    flat = np.ones_like(prompts)
    config = CacheConfig(store=str(tmp_path / "cache"))
    statuses = []
    for mode in ("read_write", "read_write", "read_only"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("e", samples, flat)],
                                       config=ZeroShotConfig(top_k=(1, 3)), cache_config=config.replace(mode=mode),
                                       progress=False).run()
        assert not [w for w in caught if "corrupt" in str(w.message)]
        statuses.append(result["e"].embedding["prompts"]["cache_status"])
    assert statuses == ["miss", "hit", "hit"]
    assert all(problem is None for _, problem in verify_store(config.open_store()))

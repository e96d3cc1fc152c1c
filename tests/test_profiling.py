"""Resource profiles on real extractors: MiniLM (sentence-transformers and Hugging Face), ONNX, a plain callable.

Every number is checked against an independent reference: the model's own
parameters, the files' sizes on disk, the stage's wall time, the matrix shapes.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CallableExtractor, DatasetIdentity,
                           EmbeddingCompressionConfig, HFTextExtractor, ONNXExtractor, ResourceProfilingConfig,
                           SentenceTransformerExtractor, SeparatixConfig)
from vertebrae.errors import ConfigError, ConfigTypeError
from vertebrae.extractors.profiling import chain_profile, latency_mismatches
from vertebrae._base.profile_records import CACHE_HIT

NO_SEPARATIX = SeparatixConfig(enabled=False)


def _directory_bytes(path) -> tuple[int, int]:
    sizes = [os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files]
    return len(sizes), sum(sizes)


@pytest.fixture(scope="module")
def minilm_run(minilm_path, tweets):
    """One profiled benchmark of MiniLM through sentence-transformers (batch 8) and Hugging Face (batch 16)."""
    dataset = BenchmarkDataset.from_arrays(tweets.texts, tweets.labels,
                                           identity=DatasetIdentity.declared("tweets-36", "1"))
    extractors = [SentenceTransformerExtractor("st", minilm_path, batch_size=8, device="cpu", progress=False),
                  HFTextExtractor("hf", minilm_path, batch_size=16, device="cpu", progress=False)]
    result = Benchmark(dataset, extractors, resource_profiling=ResourceProfilingConfig(),
                       separatix_config=NO_SEPARATIX, progress=False).run()
    return result, extractors


def test_config_is_validated():
    assert ResourceProfilingConfig().to_dict() == {"enabled": True, "rss_interval_seconds": 0.01,
                                                   "synchronize": True}
    with pytest.raises(ConfigError, match="rss_interval_seconds"):
        ResourceProfilingConfig(rss_interval_seconds=0)
    with pytest.raises(ConfigError, match="enabled"):
        ResourceProfilingConfig(enabled="yes")
    with pytest.raises(ConfigError, match="did you mean 'synchronize'"):
        ResourceProfilingConfig(synchronise=False)


def test_benchmark_rejects_a_non_config(blob_dataset):
    with pytest.raises(ConfigTypeError, match="resource_profiling must be a ResourceProfilingConfig"):
        Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X)], resource_profiling={"enabled": True})


def test_model_footprint_is_the_models_own_parameters_and_files(minilm_run, minilm, minilm_path):
    result, _ = minilm_run
    n_files, n_bytes = _directory_bytes(minilm_path)
    reference = list(minilm.parameters())  # an independently loaded copy of the same model
    for name in ("st", "hf:layer6_mean"):
        model = result[name].resource_profile["model"]
        assert model["status"] == "measured"
        assert model["parameter_count"] == sum(p.numel() for p in reference) == 22_713_216
        assert model["parameter_bytes"] == 4 * model["parameter_count"]  # float32 weights
        assert model["trainable_parameter_count"] == model["parameter_count"]  # nothing frozen by requires_grad
        assert model["in_memory_bytes"] == model["parameter_bytes"] + model["buffer_bytes"]
        assert model["checkpoint_files"] == n_files and model["checkpoint_bytes"] == n_bytes
        assert "float32" in model["weight_dtypes"] and "not the execution" in model["weight_dtypes_note"]


def test_latency_and_throughput_agree_with_the_measured_wall_time(minilm_run, tweets):
    result, _ = minilm_run
    for name, batch in (("st", 8), ("hf:layer6_mean", 16)):
        profile = result[name].resource_profile
        latency, throughput = profile["latency"], profile["throughput"]
        assert latency["calls"] == math.ceil(36 / batch) and latency["warm_count"] == latency["calls"] - 1
        assert latency["first_call_rows"] == batch and latency["warm_status"] == "measured"
        assert latency["warm_median_seconds"] <= latency["warm_p90_seconds"] <= latency["warm_max_seconds"]
        assert latency["clock"] == "host_observed"
        # The first call plus the warm calls fit inside the transform's wall time, which fits in the stage's.
        assert latency["first_call_seconds"] + latency["warm_mean_seconds"] * latency["warm_count"] \
            <= throughput["wall_seconds"] + 1e-6
        assert throughput["wall_seconds"] <= result[name].runtime["extract"]
        assert throughput["samples"] == 36
        assert throughput["samples_per_second"] == pytest.approx(36 / throughput["wall_seconds"])
        context = profile["context"]
        assert context["batch_size"] == batch and context["device"] == "cpu" and context["torch_threads"] == 1
        assert context["workload"] == {"rows": 36, "kind": "text",
                                       "total_characters": sum(len(t) for t in tweets.texts)}
        assert context["synchronization"] == "not_required_cpu" and context["precision"] == "float32"
        assert set(context["framework_versions"]) >= {"torch", "transformers"}


def test_memory_fields_on_cpu(minilm_run):
    result, _ = minilm_run
    profile = result["st"].resource_profile
    host = profile["host_memory"]
    assert host["status"] == "measured" and host["samples"] >= 2
    assert 0 < host["baseline_rss_bytes"] <= host["peak_rss_bytes"]
    assert host["peak_increase_bytes"] == host["peak_rss_bytes"] - host["baseline_rss_bytes"]
    device = profile["device_memory"]
    assert device["status"] == "not_applicable" and "RSS" in device["reason"]
    assert device["peak_allocated_bytes"] is None and device["measurement_scope"] is None
    embedding = profile["embedding_bytes"]
    assert embedding["raw_logical_bytes"] == embedding["evaluated_logical_bytes"] == 36 * 384 * 4
    assert embedding["persisted_status"] == "unavailable" and embedding["persisted_bytes"] is None


def test_profile_reaches_json_markdown_and_dataframe(minilm_run):
    result, _ = minilm_run
    loaded = BenchmarkResult.from_json(result.to_json())
    for r in result.extractor_results:
        assert loaded[r.name].resource_profile == r.resource_profile
    assert [r.name for r in loaded.ranked_results()] == [r.name for r in result.ranked_results()]
    frame = result.to_dataframe().set_index("extractor")
    profile = result["st"].resource_profile
    assert frame.loc["st", "resource.parameter_count"] == profile["model"]["parameter_count"]
    assert frame.loc["st", "resource.warm_median_seconds"] == profile["latency"]["warm_median_seconds"]
    assert frame.loc["st", "resource.samples_per_second"] == profile["throughput"]["samples_per_second"]
    markdown = loaded.to_markdown()
    section = markdown.split("## Quality cohort resources")[1]
    assert "| st |" in section and "22713216" in section
    # Different batch sizes: the report says the latencies are not comparable, and why.
    assert "not comparable" in section and "batch_size" in section
    assert "## Quality cohort resources" not in markdown.split("## Quality cohort resources")[0]
    from vertebrae.reports import figures

    # the HTML figure reads it too
    assert "warm median latency" in figures.svg_or_none(figures.cohort_resources_figure(result.serialized()))


def test_single_call_extractor_has_no_warm_distribution(blob_dataset):
    result = Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X * 2.0), CallableExtractor("g", lambda X: X)],
                       resource_profiling=ResourceProfilingConfig(), separatix_config=NO_SEPARATIX,
                       progress=False).run()
    profile = result["f"].resource_profile
    latency = profile["latency"]
    assert latency["calls"] == 1 and latency["warm_status"] == "single_call" and latency["warm_count"] == 0
    assert latency["warm_median_seconds"] is None and latency["warm_reason"]
    assert latency["first_call_seconds"] == profile["throughput"]["wall_seconds"]
    assert profile["model"]["status"] == "unavailable"
    assert profile["device_memory"]["status"] == "not_applicable"
    assert profile["context"]["workload"] == {"rows": 180, "kind": "ndarray", "row_shape": [8]}
    assert "Latencies were measured under the same" in result.to_markdown()


def test_compressed_variant_keeps_raw_and_evaluated_bytes_apart(blob_dataset):
    variant = EmbeddingCompressionConfig(method="pca", n_components=2)
    result = Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X.astype(np.float64))],
                       compression=[variant], resource_profiling=ResourceProfilingConfig(),
                       separatix_config=NO_SEPARATIX, progress=False).run()
    (compressed,) = result.extractor_results
    embedding = compressed.resource_profile["embedding_bytes"]
    assert embedding["raw_logical_bytes"] == 180 * 8 * 8
    assert embedding["evaluated_logical_bytes"] == 180 * 2 * np.dtype(compressed.embedding["dtype"]).itemsize


def test_onnx_checkpoint_is_the_file_size_and_parameters_are_unavailable(tmp_path, blobs, identity):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "scale",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])],
                              [numpy_helper.from_array(np.arange(1, 9, dtype=np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "scale.onnx"
    path.write_bytes(model.SerializeToString())
    X, y = blobs
    dataset = BenchmarkDataset.from_arrays(X, y, identity=identity)
    result = Benchmark(dataset, [ONNXExtractor("onnx", path, batch_size=50, progress=False)],
                       resource_profiling=ResourceProfilingConfig(), separatix_config=NO_SEPARATIX,
                       progress=False).run()
    profile = result["onnx"].resource_profile
    model_facts = profile["model"]
    assert model_facts["status"] == "partial" and model_facts["parameter_status"] == "unavailable"
    assert model_facts["checkpoint_bytes"] == os.path.getsize(path) and model_facts["checkpoint_files"] == 1
    assert profile["latency"]["calls"] == 4 and profile["context"]["batch_size"] == 50
    assert "onnxruntime" in profile["context"]["framework_versions"]


def test_profiling_off_writes_no_profile(blob_dataset):
    result = Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X)], separatix_config=NO_SEPARATIX,
                       progress=False).run()
    assert result["f"].resource_profile is None
    assert "resource_profile" not in result.to_json()
    assert not any(column.startswith("resource.") for column in result.to_dataframe().columns)
    assert "Quality cohort resources" not in result.to_markdown()
    disabled = Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X)], separatix_config=NO_SEPARATIX,
                         resource_profiling=ResourceProfilingConfig(enabled=False), progress=False).run()
    assert disabled["f"].resource_profile is None


def test_a_cache_hit_is_not_measured():
    measured = {"schema": 1, "status": "measured", "latency": {"first_call_seconds": 1.0}}
    profile = chain_profile(measured, "hit", 400, 100)
    assert profile["status"] == CACHE_HIT and profile["latency"]["status"] == CACHE_HIT
    assert profile["embedding_bytes"]["raw_logical_bytes"] == 400
    assert chain_profile(measured, "miss", 400, 100)["latency"] == {"first_call_seconds": 1.0}


def test_latency_comparability_names_the_differing_context():
    def profile(**context):
        return {"status": "measured", "context": {"batch_size": 8, "workload": {"rows": 3}, "device": "cpu",
                                                  "precision": "float32", "synchronization": "not_required_cpu",
                                                  **context}}

    assert latency_mismatches([profile(), profile()]) == []
    assert latency_mismatches([profile(), profile(device="cuda:0", batch_size=16)]) == ["batch_size", "device"]
    assert latency_mismatches([profile(), {"status": CACHE_HIT}]) == []


def test_rss_reading_matches_the_kernels_vmrss():
    from vertebrae.extractors.profiling import _rss_reader

    source, read = _rss_reader()
    vmrss = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))
    assert source in ("psutil", "proc_statm")
    assert read() == pytest.approx(vmrss, rel=0.05)


def test_retrieval_keeps_query_and_gallery_profiles_apart(minilm, tweets):
    from vertebrae import RetrievalBenchmark, RetrievalBenchmarkResult, RetrievalConfig, RetrievalDataset

    gallery = list(tweets.texts[:20])
    queries = [text.upper() for text in gallery[:6]]
    dataset = RetrievalDataset.from_inputs(queries, gallery, relevance=[(i, i, 1) for i in range(6)],
                                           identity=DatasetIdentity.declared("tweet-retrieval", "1"))
    extractor = SentenceTransformerExtractor("st", minilm, batch_size=4, device="cpu", progress=False)
    result = RetrievalBenchmark(dataset, [extractor], retrieval_config=RetrievalConfig(cutoffs=[1, 5]),
                                resource_profiling=ResourceProfilingConfig(), progress=False).run()
    profile = result["st"].resource_profile
    assert profile["query"]["latency"]["calls"] == 2 and profile["gallery"]["latency"]["calls"] == 5
    assert profile["query"]["throughput"]["samples"] == 6 and profile["gallery"]["throughput"]["samples"] == 20
    assert profile["query"]["context"]["workload"]["total_characters"] == sum(len(q) for q in queries)
    assert profile["gallery"]["embedding_bytes"]["evaluated_logical_bytes"] == 20 * 384 * 4
    assert profile["query"]["model"]["parameter_count"] == sum(p.numel() for p in minilm.parameters())
    assert profile["query"]["model"]["checkpoint_status"] == "unavailable"  # an in-memory model declares no files
    assert RetrievalBenchmarkResult.from_json(result.to_json())["st"].resource_profile == profile
    row = result.to_dataframe().iloc[0]
    assert row["query.resource.samples_per_second"] == profile["query"]["throughput"]["samples_per_second"]
    assert row["gallery.resource.warm_count"] == 4
    with pytest.raises(ConfigTypeError, match="RetrievalBenchmark: resource_profiling"):
        RetrievalBenchmark(dataset, [extractor], resource_profiling=True)
    markdown = result.to_markdown().split("## Quality cohort resources")[1]
    assert "| st | query |" in markdown and "| st | gallery |" in markdown


def test_a_failing_extractor_stops_the_sampler_and_is_named(blob_dataset):
    import threading

    from vertebrae.errors import ExtractorError

    def broken(X):
        raise RuntimeError("boom")

    with pytest.raises(ExtractorError, match="'bad' failed during fit/transform: RuntimeError: boom"):
        Benchmark(blob_dataset, [CallableExtractor("bad", broken)], resource_profiling=ResourceProfilingConfig(),
                  separatix_config=NO_SEPARATIX, progress=False).run()
    assert not any(t.name == "vertebrae-rss" for t in threading.enumerate())


def test_torch_footprint_counts_frozen_parameters_and_checkpoint_files(blob_dataset, tmp_path):
    import torch

    from vertebrae import TorchExtractor

    model = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.BatchNorm1d(5))
    model[0].bias.requires_grad_(False)  # frozen: still a parameter
    checkpoint = tmp_path / "weights.pt"
    torch.save(model.state_dict(), checkpoint)
    extractor = TorchExtractor("lin", model, device="cpu", batch_size=64, checkpoint_paths=[checkpoint],
                               progress=False)
    result = Benchmark(blob_dataset, [extractor], resource_profiling=ResourceProfilingConfig(),
                       separatix_config=NO_SEPARATIX, progress=False).run()
    facts = result["lin"].resource_profile["model"]
    assert facts["parameter_count"] == 8 * 5 + 5 + 2 * 5  # linear weight + bias, batch-norm weight + bias
    assert facts["trainable_parameter_count"] == facts["parameter_count"] - 5
    assert facts["parameter_bytes"] == 4 * facts["parameter_count"]
    assert facts["trainable_parameter_bytes"] == 4 * facts["trainable_parameter_count"]
    assert facts["buffer_bytes"] == 4 * 5 + 4 * 5 + 8  # running mean, running var, num_batches_tracked (int64)
    assert facts["checkpoint_bytes"] == os.path.getsize(checkpoint) and facts["status"] == "measured"
    assert result["lin"].resource_profile["latency"]["calls"] == math.ceil(180 / 64)


def test_a_model_without_parameters_runs_on_its_declared_device(blob_dataset):
    """nn.Tanh() holds no tensor to read a device from: it was reported as spanning several devices ([])."""
    import torch

    from vertebrae import TorchExtractor

    extractor = TorchExtractor("tanh", torch.nn.Tanh(), device="cpu", batch_size=64, progress=False)
    result = Benchmark(blob_dataset, [extractor], resource_profiling=ResourceProfilingConfig(),
                       separatix_config=NO_SEPARATIX, progress=False).run()
    profile = result["tanh"].resource_profile
    assert profile["context"]["device"] == "cpu"
    assert "several devices" not in str(profile)


def test_a_real_cache_hit_reports_no_inference_and_the_persisted_bytes(minilm_path, tweets, tmp_path):
    """Cold run measures and stores; the warm run serves the embedding from the store: nothing to measure."""
    from vertebrae.artifacts.cache import CacheConfig

    dataset = BenchmarkDataset.from_arrays(tweets.texts, tweets.labels,
                                           identity=DatasetIdentity.declared("tweets-36", "1"))
    cache = CacheConfig(store=str(tmp_path / "cache"))

    def run():
        extractor = SentenceTransformerExtractor("st", minilm_path, batch_size=8, device="cpu", progress=False)
        return Benchmark(dataset, [extractor], resource_profiling=ResourceProfilingConfig(), cache_config=cache,
                         separatix_config=NO_SEPARATIX, progress=False).run()["st"]

    cold, warm = run(), run()
    assert cold.embedding["cache_status"] == "miss" and cold.resource_profile["status"] == "measured"
    assert warm.embedding["cache_status"] == "hit" and warm.resource_profile["status"] == CACHE_HIT
    stored = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("embedding.*.npy"))
    for result in (cold, warm):
        persisted = result.resource_profile["embedding_bytes"]
        assert persisted["persisted_status"] == "measured" and persisted["persisted_bytes"] == stored
    assert warm.overlap.to_dict() == cold.overlap.to_dict()


def test_reloaded_profiles_are_typed_local_or_distributed_and_unknown_fields_are_rejected(blob_dataset):
    """Issue 26 item 20: load rebuilds LocalResourceProfile / DistributedResourceProfile; the JSON is unchanged."""
    import json

    from vertebrae import DistributedResourceProfile, LocalResourceProfile
    from vertebrae.errors import SerializationError
    from vertebrae._base.profile_records import WorkerMeasurement, distributed_profile

    result = Benchmark(blob_dataset, [CallableExtractor("f", lambda X: X * 2.0)],
                       resource_profiling=ResourceProfilingConfig(), separatix_config=NO_SEPARATIX,
                       progress=False).run()
    profile = result["f"].resource_profile
    assert type(profile) is LocalResourceProfile
    text = result.to_json()
    result["f"].resource_profile = dict(profile)
    assert result.to_json() == text  # typed, yet byte-identical to the plain dict's JSON
    loaded = BenchmarkResult.from_json(text)
    assert type(loaded["f"].resource_profile) is LocalResourceProfile and loaded["f"].resource_profile == profile
    assert loaded.to_json() == text

    worker = {"latency": {"first_call_seconds": 0.5, "first_call_rows": 90, "clock": "host_observed"},
              "throughput": {"samples": 90, "wall_seconds": 0.5, "samples_per_second": 180.0},
              "host_memory": {"status": "measured", "peak_rss_bytes": 700, "baseline_rss_bytes": 100},
              "device_memory": {"status": "not_applicable", "peak_allocated_bytes": None},
              "model": {"status": "unavailable"}, "context": {"workload": {"rows": 90, "kind": "ndarray"}}}
    merged = distributed_profile([WorkerMeasurement("a", 1.0, worker, [(0.5, 90)]),
                                  WorkerMeasurement("b", 2.0, worker, [(0.5, 90)])])
    data = json.loads(text)
    data["extractor_results"][0]["resource_profile"] = json.loads(json.dumps(chain_profile(merged, "miss", 10, 10)))
    distributed = BenchmarkResult.from_dict(data)["f"].resource_profile
    assert type(distributed) is DistributedResourceProfile and distributed["distributed"]["workers"] == 2

    data["extractor_results"][0]["resource_profile"]["latency"]["warm_mode"] = "fast"
    with pytest.raises(SerializationError, match=r"\$\.extractor_results\[0\]\.resource_profile\.latency: unknown "
                                                 r"field\(s\) \['warm_mode'\] in a DistributedResourceProfile"):
        BenchmarkResult.from_dict(data)
    data = json.loads(text)
    data["extractor_results"][0]["resource_profile"]["gpu_hours"] = 1
    with pytest.raises(SerializationError, match=r"resource_profile: unknown field\(s\) \['gpu_hours'\]"):
        BenchmarkResult.from_dict(data)

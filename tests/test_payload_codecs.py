"""Every artifact of a plan has a serialized form that round-trips through a real store."""

from __future__ import annotations

import numpy as np
from sklearn.decomposition import PCA

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableMetric, DatasetIdentity, EmbeddingCompressionConfig,
                           PrecomputedPairExtractor, RetrievalBenchmark, RetrievalConfig, RetrievalDataset,
                           SklearnExtractor, StabilityConfig)
from vertebrae.artifacts import FsspecStore
from vertebrae.execution.jobs import run_job
from vertebrae.execution.registry import definition_of, get_stage
from vertebrae.families.labeled.results import TIMING_KEYS, pop_timings

IDENTITY = DatasetIdentity.declared("codecs", "1")


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    return {"score": float(np.asarray(embeddings).std())}


def all_artifacts(benchmark):
    """Run a plan job by job, keeping every artifact (the local runner frees them)."""
    context = benchmark._context()
    artifacts = {}
    for job in benchmark.plan(context).jobs:
        artifacts[job.key] = (job, run_job(job, {s: artifacts[k][1] for s, k in job.needs.items()}, context)[0])
    return artifacts


def comparable(artifact):
    """A plain form of an artifact for equality: its serialized document, timings removed."""
    data = artifact.to_dict() if hasattr(artifact, "to_dict") else {
        k: (v.to_dict() if hasattr(v, "to_dict") else [x.to_dict() for x in v] if isinstance(v, list) else v)
        for k, v in vars(artifact).items()}
    pop_timings(data)
    return _drop_unmeasured(data)


def _drop_unmeasured(data):
    """Timing fields read back as None ("not measured by this run") compare like removed ones."""
    if isinstance(data, dict):
        return {k: _drop_unmeasured(v) for k, v in data.items() if not (k in TIMING_KEYS and v is None)}
    if isinstance(data, list):
        return [_drop_unmeasured(v) for v in data]
    return data


def check_round_trips(artifacts, store):
    stages = set()
    for job, artifact in artifacts.values():
        codec = definition_of(job).codec
        if codec is None:
            continue
        store.write(job.key, codec.encode(artifact))
        restored = codec.decode(store.read(job.key))
        stored = codec.encode(artifact)
        if stored.arrays:
            back = codec.encode(restored)
            for name, matrix in stored.arrays.items():
                assert np.array_equal(np.asarray(back.arrays[name]), np.asarray(matrix))
                assert back.arrays[name].dtype == matrix.dtype
            assert back.document == stored.document, job.stage
        else:
            assert comparable(restored) == comparable(artifact), job.stage
        stages.add(job.stage)
    return stages


def test_every_benchmark_artifact_round_trips_through_a_local_store(tmp_path):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY, groups=np.arange(60) % 6)
    benchmark = Benchmark(dataset, [SklearnExtractor("pca", PCA(3, random_state=0))],
                          stability_config=StabilityConfig(repeats=3),
                          metrics=[CallableMetric("spread", spread, cache_identity="spread-v1")],
                          compression=[EmbeddingCompressionConfig(), EmbeddingCompressionConfig("pca", n_components=2),
                                       EmbeddingCompressionConfig("quantize", dtype="int8")])
    stages = check_round_trips(all_artifacts(benchmark), FsspecStore(str(tmp_path / "store")))
    assert stages == {"extract", "compress", "score", "stability", "metrics", "diagnose", "assemble"}


def test_separatix_runtimes_are_not_stored(tmp_path):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)
    artifacts = all_artifacts(Benchmark(dataset, [SklearnExtractor("pca", PCA(3, random_state=0))]))
    job, diagnosis = next(v for v in artifacts.values() if v[0].stage == "diagnose")
    codec = get_stage("benchmark", "diagnose").codec
    assert "runtime_seconds" not in str(codec.encode(diagnosis).document)
    assert codec.decode(codec.encode(diagnosis)).runtime_seconds is None


def test_every_retrieval_artifact_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(6, 4)), rng.normal(size=(15, 4))
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(6)],
                                            identity=IDENTITY)
    benchmark = RetrievalBenchmark(data, [PrecomputedPairExtractor("pair", queries, gallery)],
                                   retrieval_config=RetrievalConfig(cutoffs=[1, 5], bidirectional=True),
                                   compression=[EmbeddingCompressionConfig("pca", n_components=2)])
    stages = check_round_trips(all_artifacts(benchmark), FsspecStore(str(tmp_path / "store")))
    assert stages == {"encode", "compress", "rank_forward", "rank_reverse", "assemble"}

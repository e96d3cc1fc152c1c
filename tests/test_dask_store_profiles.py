"""Sharded extraction on dask through the run's store, and distributed resource profiles.

Cluster tests share the session ``dask_client`` (conftest.py: a real LocalCluster of 2 single-threaded
worker processes on 127.0.0.1, no dashboard); the stores are a real folder and moto's S3 server.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from sklearn.decomposition import PCA

from tests.store_servers import moto_endpoint, s3_bucket, s3_options  # noqa: F401 (fixtures)
from tests.test_dask_runner import NO_SEPARATIX, classes, run_locally, without_timing
from vertebrae import (Benchmark, CallableExtractor, PrecomputedExtractor, ResourceProfilingConfig,
                           SklearnExtractor)
from vertebrae.artifacts.store import open_store
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.execution import DaskRunner
from vertebrae.execution.caching import SHARD_STAGE, shard_key
from vertebrae._base.profile_records import AGGREGATE_WORKER_COMPUTE, WorkerMeasurement, distributed_profile
from vertebrae._base import json_codec

ROWS = 180  # classes(): 3 classes x 60 rows, 8 dimensions


class RecordingEmbed:
    """Doubles the first 4 columns; appends each call's row count to ``path`` (worker processes share the file).

    ``sleep`` holds each call long enough for the scheduler to spread shards over both workers;
    ``scratch_bytes`` touches a temporary buffer (above glibc's 32 MiB mmap ceiling, so every call maps
    and unmaps fresh pages) that the workers' RSS sampling must see.
    """

    def __init__(self, path, sleep: float = 0.0, scratch_bytes: int = 0) -> None:
        self.path, self.sleep, self.scratch_bytes = str(path), sleep, scratch_bytes

    def __call__(self, X):
        with open(self.path, "a") as log:
            log.write(f"{len(X)}\n")
        scratch = np.ones(self.scratch_bytes, dtype=np.uint8) if self.scratch_bytes else None
        time.sleep(self.sleep)
        del scratch
        return np.asarray(X)[:, :4] * 2.0


def recorded(path) -> list[int]:
    return sorted(int(line) for line in path.read_text().split()) if path.exists() else []


def expected_rows(start: int, stop: int) -> np.ndarray:
    X = np.asarray(classes().extractor_input)
    return X[start:stop, :4] * 2.0


def shard_ranges(rows: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, rows)) for start in range(0, rows, size)]


def stored_benchmark(calls, url, options=None, **kwargs):
    return Benchmark(classes(), [CallableExtractor("rec", RecordingEmbed(calls), cache_identity="rec-v1"),
                                 SklearnExtractor("pca3", PCA(3, random_state=0))],
                     separatix_config=NO_SEPARATIX, cache_config=CacheConfig(store=url, storage_options=options or {}),
                     **kwargs)


def empty(store) -> None:
    for key in list(store.keys()):
        store.delete(key)


def check_stored_run(make, store, calls, client) -> tuple:
    """Local run, then a sharded dask run from the same empty store: identical; then a rerun: a hit."""
    local = run_locally(make())
    empty(store)
    calls.unlink()
    first = make().run(runner=DaskRunner(client, shard_rows=50))  # 180 rows -> 4 shards per extractor
    assert without_timing(local) == without_timing(first)
    assert [r.embedding["cache_status"] for r in first.extractor_results] == ["miss", "miss"]
    assert first["rec"].runtime["shards"] == 4.0 and "shard_write" in first["rec"].runtime
    assert recorded(calls) == [30, 50, 50, 50]  # each shard transformed once, on a worker
    job = first["rec"].artifact_keys["extract"]
    stored = store.read(job).arrays["embedding"]
    for start, stop in shard_ranges(ROWS, 50):
        assert store.has(shard_key(job, start, stop))
        shard = store.read(shard_key(job, start, stop)).arrays["embedding"]
        np.testing.assert_array_equal(shard, expected_rows(start, stop))
        np.testing.assert_array_equal(stored[start:stop], shard)
    assert sum(key.startswith(f"{SHARD_STAGE}/") for key in store.keys()) == 8  # 4 shards x 2 extractors
    again = make().run(runner=DaskRunner(client, shard_rows=50))
    assert [r.embedding["cache_status"] for r in again.extractor_results] == ["hit", "hit"]
    assert recorded(calls) == [30, 50, 50, 50]  # a hit never calls the extractor
    assert [r.overlap.to_dict() for r in again.extractor_results] == [r.overlap.to_dict()
                                                                     for r in first.extractor_results]
    return first, job


# ----------------------------------------------------------------------------- shards through the store
def test_sharded_extract_through_a_folder_store_then_a_hit_then_stored_shards_are_reused(dask_client, tmp_path):
    calls, url = tmp_path / "calls.txt", str(tmp_path / "cache")
    store = open_store(url)
    first, job = check_stored_run(lambda: stored_benchmark(calls, url), store, calls, dask_client)

    # An interrupted run: the job's artifact was never written, one shard is missing, another is corrupt.
    store.delete(job)
    store.delete(shard_key(job, 50, 100))
    corrupt = shard_key(job, 100, 150)
    data_file = next(p for p in (tmp_path / "cache" / corrupt).iterdir() if p.suffix == ".npy")
    data_file.write_bytes(data_file.read_bytes()[:-8] + b"\x00" * 8)
    calls.unlink()
    profiled = stored_benchmark(calls, url, resource_profiling=ResourceProfilingConfig())
    resumed = profiled.run(runner=DaskRunner(dask_client, shard_rows=50))
    assert recorded(calls) == [50, 50]  # only the missing and the corrupt shard ran again
    assert resumed["rec"].embedding["cache_status"] == "miss" and resumed["pca3"].embedding["cache_status"] == "hit"
    assert resumed["rec"].overlap.to_dict() == first["rec"].overlap.to_dict()
    assert resumed["rec"].runtime["shards_reused"] == 2.0
    np.testing.assert_array_equal(store.read(corrupt).arrays["embedding"], expected_rows(100, 150))  # rewritten
    assert store.has(job)
    distributed = resumed["rec"].resource_profile["distributed"]
    assert (distributed["shards"], distributed["shards_reused"], distributed["samples"]) == (4, 2, 100)

    store.delete(job)  # every shard stored, the job's artifact not: stacked from the store, nothing transformed
    calls.unlink()
    stacked = profiled.run(runner=DaskRunner(dask_client, shard_rows=50))
    assert recorded(calls) == [] and stacked["rec"].runtime["shards_reused"] == 4.0
    assert stacked["rec"].embedding["cache_status"] == "miss" and store.has(job)
    assert stacked["rec"].overlap.to_dict() == first["rec"].overlap.to_dict()
    assert stacked["rec"].resource_profile["status"] == "not_measured_cache_hit"


def test_sharded_extract_through_moto_s3_is_identical_then_a_hit(dask_client, tmp_path, s3_bucket, moto_endpoint):  # noqa: F811
    calls, url, options = tmp_path / "calls.txt", f"s3://{s3_bucket}/cache", s3_options(moto_endpoint)
    check_stored_run(lambda: stored_benchmark(calls, url, options), open_store(url, options), calls, dask_client)


# ----------------------------------------------------------------------------- distributed profiles
def test_a_sharded_profiled_extract_merges_its_worker_measurements(dask_client, tmp_path):
    calls, scratch = tmp_path / "calls.txt", 48 * 2**20

    def make():
        return Benchmark(classes(), [CallableExtractor("rec", RecordingEmbed(calls, 0.25, scratch),
                                                       cache_identity="rec-v1"), PrecomputedExtractor("raw")],
                         separatix_config=NO_SEPARATIX, resource_profiling=ResourceProfilingConfig())

    local = run_locally(make())
    calls.unlink()
    result = make().run(runner=DaskRunner(dask_client, shard_rows=20))  # 180 rows -> 9 shards
    assert recorded(calls) == [20] * 9
    assert local["rec"].overlap.to_dict() == result["rec"].overlap.to_dict()

    local_profile = local["rec"].resource_profile  # a local run's profile is unchanged: no cluster fields
    assert set(local_profile) == {"schema", "status", "latency", "throughput", "host_memory", "device_memory",
                                  "model", "context", "embedding_bytes"}
    assert set(local_profile["throughput"]) == {"samples", "wall_seconds", "samples_per_second"}

    profile = result["rec"].resource_profile
    cluster = profile["distributed"]
    workers = cluster["per_worker"]
    assert profile["scope"] == "distributed" and profile["status"] == "measured"
    assert len(workers) == cluster["workers"] == 2  # 9 shards of 0.25 s spread over both workers
    assert {w["worker"] for w in workers} == set(dask_client.scheduler_info()["workers"])
    assert sum(w["shards"] for w in workers) == cluster["shards"] == cluster["shards_measured"] == 9
    assert sum(w["samples"] for w in workers) == cluster["samples"] == profile["throughput"]["samples"] == ROWS
    compute = sum(w["compute_seconds"] for w in workers)
    assert compute >= 9 * 0.25  # every shard slept 0.25 s inside its measured call
    assert cluster["compute_seconds"] == pytest.approx(compute, rel=1e-12)
    assert profile["throughput"]["samples_per_second"] == cluster["aggregate_compute_throughput"] \
        == pytest.approx(ROWS / compute, rel=1e-12)
    assert profile["throughput"]["throughput_kind"] == cluster["throughput_kind"] == AGGREGATE_WORKER_COMPUTE
    assert "NOT cluster wall-clock throughput" in profile["throughput"]["note"]
    assert "wall_seconds" not in profile["throughput"]
    # One call per shard: each worker's first is its cold start, the other 7 are warm.
    assert profile["latency"]["calls"] == 9 and profile["latency"]["warm_count"] == 7
    assert cluster["worker_first_latency_seconds"] == max(w["first_call_seconds"] for w in workers) >= 0.25
    # Peak RSS is sampled on the workers: each call mapped 48 MiB, which the peak must contain.
    assert cluster["max_worker_memory_bytes"] == max(w["peak_rss_bytes"] for w in workers)
    assert profile["host_memory"]["peak_increase_bytes"] >= 0.9 * scratch
    assert profile["host_memory"]["worker"] in {w["worker"] for w in workers}
    assert profile["context"]["workload"]["rows"] == ROWS

    raw = result["raw"].resource_profile["distributed"]  # never sharded: one task on one worker
    assert (raw["workers"], raw["shards"], raw["samples"]) == (1, 1, ROWS)

    data = json.loads(json_codec.dumps(result.to_dict()))
    assert data["extractor_results"][0]["resource_profile"]["distributed"]["per_worker"] == workers
    markdown = result.to_markdown()
    assert "worker-first latency s" in markdown and AGGREGATE_WORKER_COMPUTE in markdown
    assert "not cluster wall-clock throughput" in markdown
    assert "worker-first" not in local.to_markdown()
    row = result.to_dataframe().set_index("extractor").loc["rec"]
    assert row["resource.throughput_kind"] == AGGREGATE_WORKER_COMPUTE and row["resource.workers"] == 2
    assert "resource.throughput_kind" not in local.to_dataframe().columns


def test_retrieval_endpoints_get_one_distributed_profile_each(dask_client):
    from vertebrae import DatasetIdentity
    from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalConfig,
                                                  RetrievalDataset)

    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(12, 5)), rng.normal(size=(40, 5))
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(12)],
                                            identity=DatasetIdentity.declared("dask-profiles", "1"))
    result = RetrievalBenchmark(data, [PrecomputedPairExtractor("pair", queries, gallery)],
                                retrieval_config=RetrievalConfig(cutoffs=[1, 5]),
                                resource_profiling=ResourceProfilingConfig()).run(runner=DaskRunner(dask_client))
    profiles = result["pair"].resource_profile
    assert {side: (p["scope"], p["distributed"]["workers"], p["throughput"]["samples"])
            for side, p in profiles.items()} == {"query": ("distributed", 1, 12), "gallery": ("distributed", 1, 40)}
    assert "not cluster wall-clock throughput" in result.to_markdown()


def measurement(worker, started, calls, peak, baseline=100):
    """A hand-made worker measurement of a non-batched call list (what a shard task records)."""
    wall = sum(seconds for seconds, _ in calls)
    rows = sum(n for _, n in calls)
    profile = {"latency": {"first_call_seconds": calls[0][0], "first_call_rows": calls[0][1],
                           "clock": "host_observed"},
               "throughput": {"samples": rows, "wall_seconds": wall, "samples_per_second": rows / wall},
               "host_memory": {"status": "measured", "peak_rss_bytes": peak, "baseline_rss_bytes": baseline},
               "device_memory": {"status": "not_applicable", "peak_allocated_bytes": None},
               "model": {"status": "unavailable"}, "context": {"workload": {"rows": rows, "kind": "ndarray"}}}
    return WorkerMeasurement(worker, started, profile, calls)


def test_distributed_profile_pools_calls_by_hand():
    parts = [measurement("b", 3.0, [(0.2, 10), (0.1, 10)], 500),  # b's second task: both calls warm
             measurement("a", 1.0, [(0.9, 10), (0.3, 10)], 700),  # a's first task: 0.9 is a's cold start
             measurement("b", 2.0, [(0.6, 10)], 650)]             # b's first task: 0.6 is b's cold start
    profile = distributed_profile(parts, shards=4, shards_reused=1)
    latency, cluster = profile["latency"], profile["distributed"]
    assert (latency["first_call_seconds"], latency["calls"], latency["warm_count"]) == (0.9, 5, 3)
    assert latency["warm_median_seconds"] == pytest.approx(0.2)
    assert latency["warm_mean_seconds"] == pytest.approx((0.3 + 0.2 + 0.1) / 3)
    assert cluster["samples"] == 50 and cluster["compute_seconds"] == pytest.approx(2.1)
    assert cluster["aggregate_compute_throughput"] == pytest.approx(50 / 2.1)
    assert cluster["max_worker_memory_bytes"] == 700 and profile["host_memory"]["worker"] == "a"
    assert [(w["worker"], w["shards"], w["first_call_seconds"], w["peak_rss_bytes"]) for w in cluster["per_worker"]] \
        == [("a", 1, 0.9, 700), ("b", 2, 0.6, 650)]
    assert (cluster["shards"], cluster["shards_measured"], cluster["shards_reused"]) == (4, 3, 1)
    assert profile["context"]["workload"]["rows"] == 50
    assert distributed_profile([])["status"] == "not_measured_cache_hit"


class NaNInLastShard:
    """Doubles the first 4 columns, but returns NaN for the 30-row call: the last shard (150:180) of 50-row shards."""

    def __call__(self, X):
        out = np.asarray(X, dtype=np.float64)[:, :4] * 2.0
        if len(X) == 30:
            out[3, 1] = np.nan
        return out


def test_an_invalid_shard_is_refused_where_it_is_made_and_never_stored(dask_client, tmp_path):
    """The stage's ``RowShards.check`` runs on the worker before the write: the error names the shard's rows and the
    value, the valid shards are stored (a rerun reuses them) and the invalid one is not."""
    url = str(tmp_path / "cache")
    store = open_store(url)
    result = Benchmark(classes(), [CallableExtractor("nan", NaNInLastShard(), cache_identity="nan-v1")],
                       separatix_config=NO_SEPARATIX, cache_config=CacheConfig(store=url), on_error="record",
                       ).run(runner=DaskRunner(dask_client, shard_rows=50))
    error = result["nan"].error
    assert error["stage"] == "extract" and error["type"] == "InputValidationError", error
    assert "output shard 150:180 from extractor 'nan'" in error["message"] and "NaN" in error["message"]
    assert "in rows 153 (0-based; 1 row(s))" in error["message"]  # the dataset's row, not the shard's
    job = result["nan"].artifact_keys["extract"]
    stored = {key for key in store.keys() if key.startswith(f"{SHARD_STAGE}/")}
    assert stored == {shard_key(job, start, stop) for start, stop in shard_ranges(ROWS, 50)[:3]}

"""The dask runner: same stage code as the local runner, byte-identical results, real worker faults.

Every test runs on a real ``LocalCluster`` (2 worker processes, one thread each, on
127.0.0.1, no dashboard); the session fixture lives in conftest.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.random_projection import GaussianRandomProjection

from tests.conftest import gaussian_classes
from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, ContinuousOverlapScoringConfig,
                           DatasetIdentity, ExtractorError, OverlapScoringConfig, PrecomputedExtractor,
                           SeparatixConfig, SklearnExtractor, StabilityConfig)
from vertebrae.errors import ConfigError
from vertebrae.execution import DaskRunner
from vertebrae._base import json_codec
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalConfig,
                                              RetrievalDataset)

IDENTITY = DatasetIdentity.declared("dask-runner", "1")
NO_SEPARATIX = SeparatixConfig(enabled=False)


def without_timing(result) -> str:
    """The result JSON text as written to disk, minus the top-level ``timing`` section."""
    data = result.to_dict()
    data.pop("timing")
    return json_codec.dumps(data)


def classes(n_per_class=60, n_classes=3, dim=8, seed=0):
    X, y = gaussian_classes(n_per_class=n_per_class, n_classes=n_classes, dim=dim, seed=seed)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)


def three_extractors():
    return [SklearnExtractor("pca3", PCA(3, random_state=0)), SklearnExtractor("pca5", PCA(5, random_state=0)),
            SklearnExtractor("proj4", GaussianRandomProjection(4, random_state=0))]


def one_thread():
    """The local side runs with one BLAS/OpenMP thread, as dask's nanny starts its workers (OMP_NUM_THREADS=1):
    BLAS-based extractors and compressions round differently with more threads (docs/distributed.md)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def run_locally(benchmark):
    with one_thread():
        return benchmark.run()


def both(make, client, **runner):
    """(local result, dask result) of two identically built benchmarks."""
    return run_locally(make()), make().run(runner=DaskRunner(client, **runner))


# ----------------------------------------------------------------------------- identical results
def test_single_label_three_extractors_sharded_is_byte_identical(dask_client):
    make = lambda: Benchmark(classes(), three_extractors(), separatix_config=SeparatixConfig())  # noqa: E731
    runner = DaskRunner(dask_client, shard_rows=50)  # 180 rows -> 4 shards per extractor
    local, remote = run_locally(make()), make().run(runner=runner)
    assert without_timing(local) == without_timing(remote)
    assert runner.last_path == "dask"
    runtime = remote["pca3"].runtime
    assert runtime["shards"] == 4.0 and {"fit", "transform", "stack"} <= set(runtime)
    assert remote["pca3"].embedding["cache_status"] == "disabled"


def sparse_features(X):
    import scipy.sparse as sp

    X = np.asarray(X)
    return sp.csr_matrix(np.where(X > 0.5, X, 0.0))


def test_sparse_output_is_stacked_from_shards_as_csr_and_byte_identical(dask_client):
    make = lambda: Benchmark(classes(), [CallableExtractor("sparse", sparse_features, cache_identity="sparse-v1")],  # noqa: E731
                             separatix_config=NO_SEPARATIX)
    local, remote = both(make, dask_client, shard_rows=70)  # 180 rows -> 3 shards
    assert remote["sparse"].embedding["sparse"] is True and remote["sparse"].runtime["shards"] == 3.0
    assert without_timing(local) == without_timing(remote)


def test_multi_label_is_byte_identical(dask_client):
    X, y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=4)
    sets = [{int(c), "all"} if i % 2 else {int(c)} for i, c in enumerate(y)]
    data = BenchmarkDataset.from_embeddings(X, sets, identity=IDENTITY)
    local, remote = both(lambda: Benchmark(data, [PrecomputedExtractor("raw"), SklearnExtractor("pca", PCA(3))],
                                           scoring_config=OverlapScoringConfig(k=3), separatix_config=NO_SEPARATIX),
                         dask_client)
    assert local.dataset_summary["target_type"] == "multi_label"
    assert without_timing(local) == without_timing(remote)


def test_regression_is_byte_identical(dask_client):
    X, _ = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=4)
    data = BenchmarkDataset.from_embeddings(X, X[:, 0] * 3.0, target_type="regression", identity=IDENTITY)
    local, remote = both(lambda: Benchmark(data, [PrecomputedExtractor("raw"), SklearnExtractor("pca", PCA(2))],
                                           continuous_config=ContinuousOverlapScoringConfig(k=3, n_null_permutations=2),
                                           separatix_config=NO_SEPARATIX), dask_client)
    assert local["raw"].overlap.target_type == "regression"
    assert without_timing(local) == without_timing(remote)


def test_five_stability_repeats_fan_out_to_both_workers_and_are_byte_identical(dask_client):
    from distributed import get_task_stream

    make = lambda: Benchmark(classes(), three_extractors()[:2], stability_config=StabilityConfig(repeats=5),  # noqa: E731
                             separatix_config=NO_SEPARATIX)
    local = run_locally(make())
    with get_task_stream(dask_client) as stream:
        remote = make().run(runner=DaskRunner(dask_client))
    assert without_timing(local) == without_timing(remote)
    assert len(remote["pca3"].stability.repeat_scores["score"]) == 5
    repeats = [task for task in stream.data if task["key"].startswith("vertebrae-fanout-")]
    assert len(repeats) == 10  # 5 repeats x 2 extractors, each its own task
    assert len({task["worker"] for task in repeats}) == 2


def test_subsample_stability_is_byte_identical(dask_client):
    make = lambda: Benchmark(classes(), [SklearnExtractor("pca3", PCA(3, random_state=0))],  # noqa: E731
                             stability_config=StabilityConfig(mode="subsample", repeats=3, subsample_fraction=0.7),
                             separatix_config=NO_SEPARATIX)
    local, remote = both(make, dask_client)
    assert without_timing(local) == without_timing(remote)


def test_compression_variants_under_a_memory_budget_are_byte_identical(dask_client):
    import warnings

    from vertebrae import EmbeddingCompressionConfig, MemoryConfig

    def make():
        return Benchmark(classes(), [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX,
                         # Elementwise variants: PCA's explained variance can move by one float32 ulp between
                         # processes (BLAS), which docs/distributed.md lists among the thread/BLAS caveats.
                         compression=[EmbeddingCompressionConfig(method="prefix_truncate", n_components=4),
                                      EmbeddingCompressionConfig(method="quantize", dtype="int8")],
                         memory_config=MemoryConfig(max_scoring_bytes=60_000), progress=False)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local, remote = both(make, dask_client)
    assert any(r.embedding.get("memory_budget", {}).get("subsampled") for r in local.extractor_results)
    assert without_timing(local) == without_timing(remote)


def test_retrieval_is_byte_identical(dask_client):
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(12, 5)), rng.normal(size=(40, 5))
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1 + i % 2) for i in range(12)],
                                            identity=IDENTITY)
    make = lambda: RetrievalBenchmark(data, [PrecomputedPairExtractor("pair", queries, gallery),  # noqa: E731
                                             PrecomputedPairExtractor("noisy", queries + 0.5, gallery)],
                                      retrieval_config=RetrievalConfig(cutoffs=[1, 5], bidirectional=True))
    local, remote = both(make, dask_client)
    assert remote["noisy"].primary_score == local["noisy"].primary_score is not None
    local_data, remote_data = local.to_dict(), remote.to_dict()
    local_data.pop("timing"), remote_data.pop("timing")
    assert json_codec.dumps(local_data) == json_codec.dumps(remote_data)


def test_zero_shot_is_byte_identical(dask_client):
    import warnings

    from tests.test_zero_shot_benchmark import Shuffled, WordCounter, text_dataset
    from vertebrae import ZeroShotBenchmark, ZeroShotConfig

    data = text_dataset()
    make = lambda: ZeroShotBenchmark(data, {"counts": WordCounter(), "bad": Shuffled()},  # noqa: E731
                                     config=ZeroShotConfig(top_k=(1, 2)), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local, remote = both(make, dask_client)
    local_data, remote_data = local.to_dict(), remote.to_dict()
    local_data.pop("timing"), remote_data.pop("timing")
    assert json_codec.dumps(local_data) == json_codec.dumps(remote_data)


def test_the_cache_works_on_workers_miss_then_hit_with_identical_scores(dask_client, tmp_path):
    from vertebrae.artifacts.cache import CacheConfig

    def make(store):
        return Benchmark(classes(), three_extractors()[:2], separatix_config=NO_SEPARATIX,
                         cache_config=CacheConfig(store=str(store)))

    import shutil

    store = tmp_path / "cache"
    local = run_locally(make(store))
    shutil.rmtree(store)  # the dask run starts from an empty store too (the location is part of the result)
    first = make(store).run(runner=DaskRunner(dask_client))
    assert without_timing(local) == without_timing(first)  # both misses
    again = make(store).run(runner=DaskRunner(dask_client))
    assert [r.embedding["cache_status"] for r in first.extractor_results] == ["miss", "miss"]
    assert [r.embedding["cache_status"] for r in again.extractor_results] == ["hit", "hit"]
    assert [r.overlap.to_dict() for r in again.extractor_results] == [r.overlap.to_dict()
                                                                     for r in first.extractor_results]


# ----------------------------------------------------------------------------- user errors
def failing(X):
    raise KeyError("column 'age' is missing")


def test_user_extractor_exception_surfaces_with_type_message_and_name(dask_client):
    benchmark = Benchmark(classes(), [CallableExtractor("broken", failing), PrecomputedExtractor("raw")],
                          separatix_config=NO_SEPARATIX)
    with pytest.raises(ExtractorError, match=r"'broken' failed during fit/transform: KeyError: .column 'age'") as raised:
        benchmark.run(runner=DaskRunner(dask_client))
    assert "extract stage of 'broken'" in raised.value.__notes__[0]
    assert "on a dask worker" in raised.value.__notes__[1] and "failing" in raised.value.__notes__[1]


def test_on_error_record_matches_the_local_runner(dask_client):
    make = lambda: Benchmark(classes(), [CallableExtractor("broken", failing), PrecomputedExtractor("raw")],  # noqa: E731
                             separatix_config=NO_SEPARATIX, on_error="record")
    local, remote = both(make, dask_client)
    assert remote["broken"].error == local["broken"].error and remote["broken"].error["stage"] == "extract"
    assert without_timing(local) == without_timing(remote)


# ----------------------------------------------------------------------------- worker faults
def slow_embed(X):
    time.sleep(2.0)
    return np.asarray(X)[:, :4] * 2.0


def _kill_worker_running(client, prefix: str, timeout: float = 30.0) -> None:
    """SIGKILL the worker process that is running a task whose key starts with ``prefix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for address, keys in client.processing().items():
            if any(str(key).startswith(prefix) for key in keys):
                pid = client.run(os.getpid, workers=[address])[address]
                time.sleep(0.3)  # let the task start computing
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.05)
    raise AssertionError(f"no task {prefix}* was ever processing")


def _run_in_thread(run):
    box = {}

    def target():
        try:
            box["result"] = run()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


def test_a_worker_killed_mid_task_is_retried_and_the_result_is_identical(dask_client):
    make = lambda: Benchmark(classes(), [CallableExtractor("slow", slow_embed, cache_identity="slow-v1"),  # noqa: E731
                                         PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX)
    local = run_locally(make())
    thread, box = _run_in_thread(lambda: make().run(runner=DaskRunner(dask_client)))
    _kill_worker_running(dask_client, "vertebrae-extract")
    thread.join(120)
    assert "error" not in box, box.get("error")
    assert without_timing(box["result"]) == without_timing(local)
    dask_client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker for the next tests


def test_with_no_allowed_failures_a_killed_worker_is_a_recorded_failure_naming_job_and_extractor():
    import dask
    from distributed import Client

    from vertebrae.execution.dask import local_cluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with local_cluster(2) as cluster, Client(cluster) as client:
            client.wait_for_workers(2)
            # The private cluster's workers keep glibc's allocator defaults (dask's nanny would set this variable,
            # which made scoring calls cost 1.55x the CPU: docs/distributed.md).
            environments = client.run(lambda: dict(__import__("os").environ))
            assert [env.get("MALLOC_TRIM_THRESHOLD_") for env in environments.values()] == [None, None]
            assert all(env.get("OMP_NUM_THREADS") == "1" for env in environments.values())
            benchmark = Benchmark(classes(), [CallableExtractor("slow", slow_embed, cache_identity="slow-v1")],
                                  separatix_config=NO_SEPARATIX, on_error="record")
            thread, box = _run_in_thread(lambda: benchmark.run(runner=DaskRunner(client)))
            _kill_worker_running(client, "vertebrae-extract")
            thread.join(120)
    assert "error" not in box, box  # on_error="record": the chain's failure is recorded, not raised
    error = box["result"]["slow"].error
    assert (error["stage"], error["type"]) == ("extract", "ExecutionError")
    assert "extract stage of 'slow'" in error["message"] and "KilledWorker" in error["message"]
    assert benchmark.plan().chain_keys[0]["extract"] in error["message"]


# ----------------------------------------------------------------------------- small runs, config
def test_a_private_cluster_is_not_started_for_a_small_run():
    runner = DaskRunner(n_workers=2)
    started = time.perf_counter()
    result = Benchmark(classes(), [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX).run(runner=runner)
    assert runner.last_path == "sequential" and time.perf_counter() - started < 30
    assert result["raw"].aggregate_valid


def test_a_private_cluster_runs_a_large_enough_plan_with_identical_results():
    make = lambda: Benchmark(classes(), three_extractors(), separatix_config=NO_SEPARATIX)  # noqa: E731
    runner = DaskRunner(n_workers=2, sequential_below=0)
    local, remote = run_locally(make()), make().run(runner=runner)
    assert runner.last_path == "dask" and without_timing(local) == without_timing(remote)


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one of client=, address= or n_workers="),
    ({"address": "tcp://x:1", "n_workers": 2}, r"got \['address', 'n_workers'\]"),
    ({"address": " "}, "address must be a scheduler address"),
    ({"n_workers": 2, "shard_rows": 0}, "shard_rows"),
    ({"n_workers": 0}, "n_workers"),
    ({"n_workers": 2, "sequential_below": -1}, "sequential_below"),
])
def test_runner_arguments_are_validated(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        DaskRunner(**kwargs)


def test_on_error_is_validated_by_the_runner(dask_client):
    with pytest.raises(ConfigError, match="on_error must be one of"):
        DaskRunner(dask_client).run([], None, on_error="ignore")


def test_a_missing_dask_names_the_extra(monkeypatch):
    # Uninstalling dask inside the test session is not possible; a None entry makes `import distributed` fail.
    monkeypatch.setitem(sys.modules, "distributed", None)
    from vertebrae.errors import DependencyError

    hint = r'pip install "dask\[distributed\]>=2024.1" \(in a vertebrae checkout: pip install "\.\[dask\]"\)'
    with pytest.raises(DependencyError, match=hint):
        Benchmark(classes(), [PrecomputedExtractor("raw")]).run(runner=DaskRunner(address="tcp://127.0.0.1:1"))


def test_import_vertebrae_imports_no_dask():
    code = ("import sys, vertebrae, vertebrae.execution; "
            "print([m for m in ('dask', 'distributed') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# ----------------------------------------------------------------------------- CLI
def test_cli_run_with_a_dask_address_writes_the_same_report(dask_client, tmp_path):
    from vertebrae.cli.main import main

    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=5, seed=9)
    np.save(tmp_path / "a.npy", X)
    np.save(tmp_path / "b.npy", X[:, :3])
    (tmp_path / "labels.txt").write_text("".join(f"class-{c}\n" for c in y))
    (tmp_path / "run.toml").write_text('[dataset]\nid = "blobs"\nrevision = "1"\nlabels = "labels.txt"\n\n'
                                       '[[extractors]]\nname = "a"\nembeddings = "a.npy"\n'
                                       '[[extractors]]\nname = "b"\nembeddings = "b.npy"\n\n'
                                       '[stability]\nrepeats = 3\n\n[separatix]\nenabled = false\n')
    config = str(tmp_path / "run.toml")
    with one_thread():
        assert main(["run", config, "-o", str(tmp_path / "local"), "-q"]) == 0
    address = dask_client.scheduler.address
    assert main(["run", config, "--dask-address", address, "-o", str(tmp_path / "dask"), "-q"]) == 0
    local, remote = ((tmp_path / run / "report.json").read_text() for run in ("local", "dask"))
    local_data, remote_data = json.loads(local), json.loads(remote)
    local_data.pop("timing"), remote_data.pop("timing")
    assert local_data == remote_data and len(local_data["extractor_results"]) == 2


def test_a_referee_round_runs_on_the_cluster_reading_the_first_rounds_embeddings(dask_client):
    """The referee round sends the first round's kept artifacts to the workers (no second extraction) and gives
    the local run's result."""
    from vertebrae import LinearProbeMetric, StabilityConfig

    def make():
        return Benchmark(classes(), three_extractors(), scoring_config=OverlapScoringConfig(k=3), progress=False,
                         stability_config=StabilityConfig(repeats=5), quality_tolerance=1.0,
                         referee=LinearProbeMetric())

    local, remote = both(make, dask_client)
    [decision] = remote.referee_decisions()
    assert decision.needed and len(decision.finalists) == 3  # tolerance 1.0: every candidate is a finalist
    assert without_timing(remote) == without_timing(local)

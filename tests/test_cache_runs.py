"""The cache inside real runs: statuses, reuse that never serves the wrong embeddings, integrity per mode,
persisted footprints, the CLI, and retrieval on the same mechanism."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, RetrievalBenchmark,
                           RetrievalDataset, SklearnExtractor, TwoBranchExtractor)
from vertebrae.artifacts import FsspecStore
from vertebrae.artifacts.cache import CacheConfig, verify_store
from vertebrae.cli.main import main
from vertebrae.errors import ArtifactError, ArtifactIntegrityError, ArtifactWarning, ConfigError
from vertebrae.execution.caching import StageCache

from .conftest import gaussian_classes
from .store_servers import (S3_SECRET, gcs_bucket, gcs_endpoint, moto_endpoint, s3_bucket, s3_options,  # noqa: F401
                            store_location)

IDENTITY = DatasetIdentity.declared("blobs", "1")


class CountingExtractor:
    """An extractor with a declared identity that counts its calls (and can refuse to be called)."""

    def __init__(self, name: str = "proj", seed: int = 0, dim: int = 6, refuse: bool = False) -> None:
        self.name, self.seed, self.dim, self.refuse, self.calls = name, seed, dim, refuse, 0

    def fit(self, X, y=None):
        if self.refuse:
            raise RuntimeError("this extractor must not run: the cache should have served it")
        return self

    def transform(self, X):
        if self.refuse:
            raise RuntimeError("this extractor must not run: the cache should have served it")
        self.calls += 1
        weights = np.random.default_rng(self.seed).normal(size=(X.shape[1], self.dim))
        return (np.asarray(X) @ weights).astype(np.float32)

    def recipe(self):
        return {"type": "counting", "name": self.name, "seed": self.seed, "dim": self.dim}

    def identity(self):
        return {"type": "counting", "seed": self.seed, "dim": self.dim}


@pytest.fixture
def data() -> BenchmarkDataset:
    X, y = gaussian_classes(n_per_class=40, dim=10)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)


def _run(data, extractors, cache_config=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Benchmark(data, extractors, cache_config=cache_config, progress=False,
                         separatix_config=None, **kwargs).run()


def _stable(result) -> dict:
    """The result JSON minus what legitimately differs between a cold and a warm run."""
    data = json.loads(result.to_json()) if hasattr(result, "to_json") else result.to_dict()
    data.pop("timing", None)
    for item in data["extractor_results"]:
        item["embedding"].pop("cache_status")
    return data


# ---------------------------------------------------------------- statuses and reuse
def test_cold_then_warm_run_reuses_embeddings_and_changes_no_number(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    cold_extractor = CountingExtractor()
    cold = _run(data, [cold_extractor], config)
    assert cold_extractor.calls == 1
    entry = cold.extractor_results[0]
    assert (entry.embedding["cache_eligible"], entry.embedding["cache_status"]) == (True, "miss")
    assert isinstance(entry.runtime["extract"], float)
    assert cold.metadata["cache"] == {"store": str(tmp_path / "cache"), "mode": "read_write"}

    warm = _run(data, [CountingExtractor(refuse=True)], config)  # raises if called: served from a full hit
    entry = warm.extractor_results[0]
    assert entry.embedding["cache_status"] == "hit"
    assert entry.runtime["extract"] == "not_measured_cache_hit" and entry.runtime["extract_cache_read"] >= 0
    assert warm.extractor_results[0].overlap.score == cold.extractor_results[0].overlap.score
    assert _stable(warm) == _stable(cold)


def test_without_a_cache_the_status_is_disabled_and_nothing_is_written(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run(data, [CountingExtractor()])
    embedding = result.extractor_results[0].embedding
    assert embedding["cache_status"] == "disabled" and "footprint" not in embedding
    assert "cache" not in result.metadata and list(tmp_path.iterdir()) == []
    assert _run(data, [CountingExtractor()], CacheConfig(enabled=False)).extractor_results[0].embedding[
        "cache_status"] == "disabled"


def test_unsafe_identities_are_bypassed_and_never_stored(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    calls = []

    def embed(X):
        calls.append(1)
        return np.asarray(X) * 2.0

    for _ in range(2):
        result = _run(data, [CallableExtractor("fn", embed)], config)
        assert result.extractor_results[0].embedding["cache_status"] == "bypassed_unsafe_identity"
        assert result.extractor_results[0].embedding["cache_eligible"] is False
    assert len(calls) == 2 and list(FsspecStore(str(tmp_path / "cache")).keys()) == []
    # A declared cache_identity makes the same callable reusable.
    declared = [CallableExtractor("fn", embed, cache_identity="v1")]
    assert _run(data, declared, config).extractor_results[0].embedding["cache_status"] == "miss"
    assert _run(data, declared, config).extractor_results[0].embedding["cache_status"] == "hit"
    assert len(calls) == 3


def test_an_ephemeral_dataset_is_never_reused(tmp_path):
    X, y = gaussian_classes(n_per_class=30, dim=6)
    config = CacheConfig(store=str(tmp_path / "cache"))
    for _ in range(2):
        data = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.ephemeral())
        status = _run(data, [CountingExtractor()], config).extractor_results[0].embedding["cache_status"]
        assert status == "bypassed_unsafe_identity"


def test_identical_recipes_share_one_entry_and_names_do_not_matter(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    _run(data, [CountingExtractor("a")], config)
    renamed = _run(data, [CountingExtractor("b", refuse=True)], config)  # the name is a label, not identity
    assert renamed.extractor_results[0].embedding["cache_status"] == "hit"
    assert len(list(FsspecStore(str(tmp_path / "cache")).keys())) == 1


# ---------------------------------------------------------------- never a wrong hit
def test_changed_inputs_recipes_or_supervised_targets_never_hit(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    X, y = gaussian_classes(n_per_class=40, dim=10)
    _run(data, [CountingExtractor(), SklearnExtractor("pca", PCA(n_components=3, random_state=0)),
                SklearnExtractor("lda", LinearDiscriminantAnalysis(n_components=2), supervised=True)], config)

    def statuses(dataset, extractors):
        return {r.name: r.embedding["cache_status"] for r in _run(dataset, extractors, config).extractor_results}

    changed_x = X.copy()
    changed_x[7, 3] += 1e-3  # one element of one row
    assert statuses(BenchmarkDataset.from_arrays(changed_x, y, identity=IDENTITY), [CountingExtractor()]) == {
        "proj": "miss"}
    assert statuses(data, [CountingExtractor(seed=1)]) == {"proj": "miss"}  # other weights
    assert statuses(data, [SklearnExtractor("pca", PCA(n_components=4, random_state=0))]) == {"pca": "miss"}
    # New labels: an unsupervised extractor reads no targets (hit), a supervised one does (miss).
    relabeled = BenchmarkDataset.from_arrays(X, np.roll(y, 1), identity=IDENTITY)
    result = _run(relabeled, [CountingExtractor(refuse=True),
                              SklearnExtractor("lda", LinearDiscriminantAnalysis(n_components=2), supervised=True)],
                  config)
    assert {r.name: r.embedding["cache_status"] for r in result.extractor_results} == {"proj": "hit", "lda": "miss"}
    # The reused embedding is scored against the new labels, exactly as a fresh embedding would be.
    fresh = _run(relabeled, [CountingExtractor()])
    assert result.extractor_results[0].overlap.score == fresh.extractor_results[0].overlap.score


def test_a_changed_dependency_version_changes_the_key(data, tmp_path):
    """Package versions are part of the extract key; a different numpy version is a different entry."""
    from vertebrae.execution import plan as plan_module

    benchmark = Benchmark(data, [CountingExtractor()], separatix_config=None,
                          cache_config=CacheConfig(store=str(tmp_path)))
    before = benchmark.plan().chain_keys[0]["extract"]
    saved = plan_module.version_of
    real = saved("numpy")
    try:
        # Swapping the version lookup is the only way to "install" another numpy inside one test process.
        plan_module.version_of = lambda name: "0.0-other" if name == "numpy" else saved(name)
        after = benchmark.plan().chain_keys[0]["extract"]
    finally:
        plan_module.version_of = saved
    assert before != after and real != "0.0-other"


# ---------------------------------------------------------------- integrity per mode
def _corrupt_embedding(store_dir) -> None:
    store = FsspecStore(str(store_dir))
    (key,) = list(store.keys())
    manifest = store.manifest(key)
    path = store_dir / key / manifest.arrays["embedding"]["file"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))


def test_corrupt_entry_is_recomputed_with_a_warning_in_read_write(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    _run(data, [CountingExtractor()], config)
    _corrupt_embedding(tmp_path / "cache")
    extractor = CountingExtractor()
    with pytest.warns(ArtifactWarning, match="is corrupt .*sha256.*recomputing"):
        result = Benchmark(data, [extractor], cache_config=config, progress=False, separatix_config=None).run()
    assert extractor.calls == 1 and result.extractor_results[0].embedding["cache_status"] == "miss"
    assert all(problem is None for _, problem in verify_store(FsspecStore(str(tmp_path / "cache"))))  # repaired
    assert _run(data, [CountingExtractor(refuse=True)], config).extractor_results[0].embedding["cache_status"] == "hit"


def test_corrupt_entry_is_an_error_in_read_only(data, tmp_path):
    _run(data, [CountingExtractor()], CacheConfig(store=str(tmp_path / "cache")))
    _corrupt_embedding(tmp_path / "cache")
    with pytest.raises(ArtifactIntegrityError, match="read_only mode never repairs"):
        _run(data, [CountingExtractor()], CacheConfig(store=str(tmp_path / "cache"), mode="read_only"))


def test_read_only_miss_computes_without_writing(data, tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"), mode="read_only")
    result = _run(data, [CountingExtractor()], config)
    assert result.extractor_results[0].embedding["cache_status"] == "miss"
    assert result.extractor_results[0].embedding["footprint"]["raw"]["persisted_status"] == "not_persisted"
    assert list(FsspecStore(str(tmp_path / "cache")).keys()) == []


def test_refresh_recomputes_and_overwrites(data, tmp_path):
    _run(data, [CountingExtractor()], CacheConfig(store=str(tmp_path / "cache")))
    old = FsspecStore(str(tmp_path / "cache")).manifest(next(FsspecStore(str(tmp_path / "cache")).keys()))
    extractor = CountingExtractor()
    result = _run(data, [extractor], CacheConfig(store=str(tmp_path / "cache"), mode="refresh"))
    assert extractor.calls == 1 and result.extractor_results[0].embedding["cache_status"] == "miss"
    new = FsspecStore(str(tmp_path / "cache")).manifest(old.key)
    assert new.created_at > old.created_at and new.files == old.files  # same bytes, rewritten


# ---------------------------------------------------------------- persisted footprints
def test_footprints_are_the_real_object_sizes_on_each_backend(data, store_location):
    url, options = store_location
    config = CacheConfig(store=url, storage_options=options)
    result = _run(data, [CountingExtractor(dim=6)], config)
    footprint = result.extractor_results[0].embedding["footprint"]
    store = FsspecStore(url, options)
    (key,) = list(store.keys())
    stored = store.manifest(key).arrays["embedding"]["file"]
    size = store.fs.info(f"{store.root}/{key}/{stored}")["size"]  # the backend's own stat
    assert footprint["raw"] == {"logical_bytes": 120 * 6 * 4, "persisted_bytes": size, "persisted_status": "measured"}
    assert size == 120 * 6 * 4 + 128  # the .npy header of a 2-D float32 array is 128 bytes
    assert footprint["evaluated"] == {"logical_bytes": 120 * 6 * 4, "persisted_bytes": None,
                                      "persisted_status": "not_persisted"}
    warm = _run(data, [CountingExtractor(dim=6, refuse=True)], config).extractor_results[0].embedding
    assert warm["cache_status"] == "hit" and warm["footprint"] == footprint


class _StatFailingStore(FsspecStore):
    """A stat that fails right after a successful write or read cannot be caused for real without racing the
    backend, so this one store method raises (everything else is the real local store)."""

    def persisted_bytes(self, key):
        raise ArtifactError("stat refused by the object store")


def test_a_failed_stat_is_unavailable_and_explained_in_the_result_not_a_failure(data, tmp_path):
    """Issue 26 item 19: the reason is in the result's warnings, its JSON footprint and profile, and the Markdown."""
    from vertebrae import ResourceProfilingConfig

    config = CacheConfig(store=str(tmp_path / "cache"))
    benchmark = Benchmark(data, [CountingExtractor()], cache_config=config, progress=False, separatix_config=None,
                          resource_profiling=ResourceProfilingConfig())
    benchmark.cache = StageCache(config, _StatFailingStore(str(tmp_path / "cache")))
    with pytest.warns(UserWarning, match="persisted bytes of the raw embedding are unavailable: could not stat") as caught:
        result = benchmark.run()
    [named] = [str(w.message) for w in caught if "could not stat" in str(w.message)]  # once, named by extractor
    counting = result.extractor_results[0]
    assert named.startswith(f"{counting.name}: ")
    assert counting.overlap.score is not None
    reason = "stat refused by the object store"
    assert any(reason in w for w in counting.warnings)
    raw = json.loads(result.to_json())["extractor_results"][0]["embedding"]["footprint"]["raw"]
    assert raw["persisted_status"] == "unavailable" and raw["persisted_bytes"] is None and reason in raw["persisted_reason"]
    assert reason in counting.resource_profile["embedding_bytes"]["persisted_reason"]
    assert reason in result.to_markdown()


def test_a_store_that_cannot_be_created_is_refused_before_any_work(data, tmp_path):
    """Once a warning per entry after the whole run (issue 37 item 14): a file in the store's place is refused when
    the benchmark is built, before anything is embedded."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    extractor = CountingExtractor()
    with pytest.raises(ArtifactError, match="cannot be created \\(a file is in the way\\)"):
        Benchmark(data, [extractor], cache_config=CacheConfig(store=str(blocker)), progress=False,
                  separatix_config=None).run()
    assert blocker.read_text() == "not a folder" and extractor.calls == 0


def test_an_object_store_that_cannot_be_reached_is_refused_before_any_work(data):
    """Unreachable, every job's lookup and write failed in turn after botocore's retries (98 s and 17 warnings for
    five wine candidates against a closed port); now one lookup when the run starts refuses it.  The closed port is
    real: a socket bound, then closed (no mock)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    options = {**s3_options(closed), "config_kwargs": {"retries": {"max_attempts": 1}}}  # one refused request
    extractor = CountingExtractor()
    with pytest.raises(ArtifactError, match="cannot be reached \\(EndpointConnectionError") as refused:
        Benchmark(data, [extractor], cache_config=CacheConfig(store="s3://bucket/cache", storage_options=options),
                  progress=False, separatix_config=None).run()
    assert S3_SECRET not in str(refused.value) and extractor.calls == 0


# ---------------------------------------------------------------- configuration and safety
def test_cache_config_type_is_checked_before_any_work(data):
    with pytest.raises(ConfigError, match="cache_config must be a vertebrae.artifacts.cache.CacheConfig"):
        Benchmark(data, [CountingExtractor()], cache_config={"store": "/tmp/x"})


def test_the_stage_cache_pickles_without_its_store(tmp_path):
    cache = StageCache(CacheConfig(store=str(tmp_path)))
    cache.store  # noqa: B018
    again = pickle.loads(pickle.dumps(cache))
    assert again._store is None and again.config == cache.config and again.store.root == str(tmp_path)


def test_credentials_never_reach_the_result(data, s3_bucket, moto_endpoint):
    config = CacheConfig(store=f"s3://{s3_bucket}/cache", storage_options=s3_options(moto_endpoint))
    result = _run(data, [CountingExtractor()], config)
    assert result.extractor_results[0].embedding["cache_status"] == "miss"
    text = result.to_json() if hasattr(result, "to_json") else json.dumps(result.to_dict())
    assert S3_SECRET not in text and S3_SECRET not in result.to_markdown()
    assert _run(data, [CountingExtractor(refuse=True)], config).extractor_results[0].embedding["cache_status"] == "hit"


def test_a_hit_does_not_import_the_extractor_framework(tmp_path):
    """The extractor imports its "framework" (here the stdlib's tomllib stand-in) only when it embeds."""
    script = textwrap.dedent(f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        import numpy as np
        from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity
        from vertebrae.artifacts.cache import CacheConfig

        class Framework:
            name = "framework"
            def fit(self, X, y=None):
                return self
            def transform(self, X):
                import xml.dom.minidom  # the heavy framework this extractor needs
                return np.asarray(X)[:, :4] * 2.0
            def recipe(self):
                return {{"type": "framework", "name": self.name}}
            def identity(self):
                return {{"type": "framework", "version": "1"}}

        rng = np.random.default_rng(0)
        X = rng.normal(size=(60, 6)); y = np.repeat([0, 1], 30); X[y == 1] += 3
        data = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("t", "1"))
        result = Benchmark(data, [Framework()], cache_config=CacheConfig(store={str(tmp_path)!r}),
                           separatix_config=None, progress=False).run()
        print(result.extractor_results[0].embedding["cache_status"], "xml.dom.minidom" in sys.modules)
    """)
    outputs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
               for _ in range(2)]
    assert outputs == [["miss", "True"], ["hit", "False"]]


# ---------------------------------------------------------------- the CLI
def test_cli_run_with_cache_flag_and_section(tmp_path, capsys):
    X, y = gaussian_classes(n_per_class=30, dim=6)
    np.save(tmp_path / "emb.npy", X)
    np.savetxt(tmp_path / "labels.txt", y, fmt="%d")
    (tmp_path / "run.toml").write_text(textwrap.dedent("""
        [dataset]
        id = "blobs"
        revision = "1"
        labels = "labels.txt"

        [[extractors]]
        name = "raw"
        embeddings = "emb.npy"

        [separatix]
        enabled = false

        [cache]
        store = "relative-cache"
    """))
    statuses = []
    for _ in range(2):
        assert main(["run", str(tmp_path / "run.toml"), "--output", str(tmp_path / "out"), "--quiet"]) == 0
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        statuses.append(report["extractor_results"][0]["embedding"]["cache_status"])
        assert report["metadata"]["cache"]["store"] == str(tmp_path / "relative-cache")
    assert statuses == ["miss", "hit"]
    assert "cache store" in (tmp_path / "out" / "report.md").read_text()
    assert main(["run", str(tmp_path / "run.toml"), "--output", str(tmp_path / "out2"), "--cache",
                 str(tmp_path / "other")]) == 0
    out = capsys.readouterr().out
    assert f"cache: 0 of 1 extraction(s) reused; computed: raw (store {tmp_path / 'other'}, read_write)" in out
    assert main(["cache", "list", "--store", str(tmp_path / "other")]) == 0
    assert "raw (precomputed)" in capsys.readouterr().out


def test_cli_cache_section_rejects_unknown_keys(tmp_path, capsys):
    (tmp_path / "run.toml").write_text('[dataset]\nid = "x"\nrevision = "1"\nlabels = "y.txt"\n'
                                       '[[extractors]]\nname = "a"\nembeddings = "a.npy"\n[cache]\nstor = "x"\n')
    assert main(["run", str(tmp_path / "run.toml")]) == 2
    assert "unknown key(s) ['stor']" in capsys.readouterr().err


# ---------------------------------------------------------------- retrieval on the same mechanism
def test_retrieval_reuses_encodings(tmp_path):
    rng = np.random.default_rng(3)
    gallery = rng.normal(size=(40, 8))
    queries = gallery[:10] + rng.normal(scale=0.1, size=(10, 8))
    relevance = np.zeros((10, 40))
    relevance[np.arange(10), np.arange(10)] = 1
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    calls, refuse = [], []

    def encode(x):
        if refuse:
            raise RuntimeError("must not run: the cache should serve it")
        calls.append(1)
        return np.asarray(x) * 3.0

    config = CacheConfig(store=str(tmp_path / "cache"))

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return RetrievalBenchmark(data, [TwoBranchExtractor("dual", encode, encode, cache_identity="v1")],
                                      cache_config=config, progress=False).run()

    cold = run()
    refuse.append(True)
    warm = run()
    refuse.clear()
    assert len(calls) == 2  # queries and gallery, once
    for side in ("query", "gallery"):
        assert cold.entries[0].embedding[side]["cache_status"] == "miss"
        assert warm.entries[0].embedding[side]["cache_status"] == "hit"
        assert warm.entries[0].embedding[side]["footprint"] == cold.entries[0].embedding[side]["footprint"]
    assert cold.entries[0].embedding["query"]["footprint"]["raw"]["persisted_bytes"] == 10 * 8 * 8 + 128
    assert warm.entries[0].runtime["encode_queries"] == "not_measured_cache_hit"
    assert warm.entries[0].primary_score == cold.entries[0].primary_score
    assert warm.entries[0].forward == cold.entries[0].forward
    assert warm.metadata["cache"]["mode"] == "read_write"
    unsafe = RetrievalBenchmark(data, [TwoBranchExtractor("dual", encode, encode)], cache_config=config,
                                progress=False).run()
    assert unsafe.entries[0].embedding["query"]["cache_status"] == "bypassed_unsafe_identity"


def test_compressed_variants_reuse_the_cached_raw_embedding_and_keep_its_status(data, tmp_path):
    """Raw and evaluated footprints stay separate through compression; the variant keeps the source's status."""
    from vertebrae import EmbeddingCompressionConfig

    config = CacheConfig(store=str(tmp_path / "cache"))
    variants = [EmbeddingCompressionConfig(), EmbeddingCompressionConfig(method="pca", n_components=3, random_state=0)]
    cold = _run(data, [CountingExtractor(dim=6)], config, compression=variants)
    warm = _run(data, [CountingExtractor(dim=6, refuse=True)], config, compression=variants)
    for result, status in ((cold, "miss"), (warm, "hit")):
        by_name = {r.name: r for r in result.extractor_results}
        raw, pca = by_name["proj"], by_name["proj+pca3"]
        assert raw.embedding["cache_status"] == pca.embedding["cache_status"] == status
        assert pca.compression["cache_status"] == status and pca.compression["cache_eligible"] is True
        assert pca.embedding["footprint"]["raw"] == raw.embedding["footprint"]["raw"]
        assert pca.embedding["footprint"]["raw"]["logical_bytes"] == 120 * 6 * 4
        assert pca.embedding["footprint"]["raw"]["persisted_bytes"] == 120 * 6 * 4 + 128
        assert pca.embedding["footprint"]["evaluated"] == {"logical_bytes": 120 * 3 * 4, "persisted_bytes": None,
                                                           "persisted_status": "not_persisted"}  # float32 PCA output
    assert len(list(FsspecStore(str(tmp_path / "cache")).keys())) == 1  # one extraction behind both variants
    assert [r.overlap.score for r in warm.extractor_results] == [r.overlap.score for r in cold.extractor_results]

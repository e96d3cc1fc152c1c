"""A store written by someone else: forged entries (signed manifests) and entries built to exhaust memory
(bounded reads).  Every hostile artifact here is built by hand, the way an attacker with write access would."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import pickle
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity
from vertebrae.artifacts import FsspecStore, StoredArtifact
from vertebrae.artifacts.manifest import MANIFEST_FILE
from vertebrae.artifacts.cache import CacheConfig, verify_store
from vertebrae.cli.main import main
from vertebrae.errors import (ArtifactError, ArtifactIntegrityError, ArtifactSignatureError, ArtifactWarning,
                                  ConfigError)
from vertebrae.execution.caching import StageCache
from vertebrae.cli.run_config import cache_config_from_section

from .conftest import gaussian_classes
from .store_servers import gcs_bucket, gcs_endpoint, moto_endpoint, s3_bucket, store_location  # noqa: F401

SECRET = "correct horse battery staple 42"
OTHER_SECRET = "another secret of enough length"
KEY = "extract/0123456789abcdef"


def project(X):
    """A deterministic projection (module level: identified by its source, so it is cache-eligible)."""
    return np.asarray(X, dtype=np.float32) @ np.random.default_rng(0).normal(size=(np.shape(X)[1], 6))


@pytest.fixture
def data() -> BenchmarkDataset:
    X, y = gaussian_classes(n_per_class=40, dim=10)
    return BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("blobs", "1"))


def _run(data, config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Benchmark(data, [CallableExtractor("proj", project)], cache_config=config, progress=False,
                           separatix_config=None).run()
    return result, [str(w.message) for w in caught if issubclass(w.category, ArtifactWarning)]


def _score(result) -> float:
    return result.extractor_results[0].overlap.score


def _status(result) -> str:
    return result.extractor_results[0].embedding["cache_status"]


def _manifest_path(store: FsspecStore, key: str) -> pathlib.Path:
    return pathlib.Path(store.root) / key / MANIFEST_FILE


def _forge(store: FsspecStore, key: str, *, keep_signature: bool) -> None:
    """The forgery of issue 28: the cached matrix with its rows shuffled, saved under its new sha256 name, and
    the manifest's ``files`` entry updated, so every checksum is consistent."""
    path = _manifest_path(store, key)
    manifest = json.loads(path.read_text())
    old = manifest["arrays"]["embedding"]["file"]
    matrix = np.load(pathlib.Path(store.root) / key / old)
    buffer = io.BytesIO()
    np.save(buffer, matrix[np.roll(np.random.default_rng(1).permutation(len(matrix)), 1)])  # never the identity
    payload = buffer.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    name = f"embedding.{sha[:16]}.npy"
    (pathlib.Path(store.root) / key / name).write_bytes(payload)
    del manifest["files"][old]
    manifest["files"][name] = {"bytes": len(payload), "sha256": sha}
    manifest["arrays"]["embedding"]["file"] = name
    if not keep_signature:
        manifest.pop("signature", None)
    path.write_text(json.dumps(manifest))


# ---------------------------------------------------------------- item 3: forged entries and signed manifests
def test_a_forged_entry_fools_checksums_but_not_a_signature(data, tmp_path):
    """Without a secret the forgery is a valid entry (what the docs say a checksum cannot stop); with one it is
    never read: read_write recomputes it with a warning, read_only refuses it, verify reports it."""
    plain = CacheConfig(store=str(tmp_path / "plain"))
    honest, _ = _run(data, plain)
    store = plain.open_store()
    key = next(iter(store.keys()))
    _forge(store, key, keep_signature=False)
    assert dict(verify_store(store)) == {key: None}  # consistent checksums: nothing to see without a secret
    forged, _ = _run(data, plain)
    assert _status(forged) == "hit" and _score(forged) != pytest.approx(_score(honest))  # the wrong score, served

    for keep_signature, problem in ((True, "does not match"), (False, "unsigned")):
        signed = CacheConfig(store=str(tmp_path / f"signed-{keep_signature}"), secret=SECRET)
        cold, _ = _run(data, signed)
        assert _status(cold) == "miss" and _score(cold) == pytest.approx(_score(honest))
        store = signed.open_store()
        _forge(store, key, keep_signature=keep_signature)
        assert str(dict(verify_store(store))[key]).count(problem) == 1

        with pytest.raises(ArtifactSignatureError, match=problem):
            _run(data, signed.replace(mode="read_only"))
        rerun, caught = _run(data, signed)
        assert _status(rerun) == "miss" and _score(rerun) == pytest.approx(_score(honest))
        assert any("unsigned or forged" in message and problem in message for message in caught)
        assert dict(verify_store(store)) == {key: None}  # replaced by a signed, honest entry
        warm, _ = _run(data, signed.replace(mode="read_only"))
        assert _status(warm) == "hit" and _score(warm) == pytest.approx(_score(honest))


def test_signatures_cover_metadata_and_reject_another_secret(tmp_path):
    store = FsspecStore(str(tmp_path), secret=SECRET)
    store.write(KEY, StoredArtifact("embedding", {"m": np.arange(6.0).reshape(2, 3)}, {"v": 1}),
                metadata={"extractor": "pca", "dataset": "blobs"})
    text = _manifest_path(store, KEY).read_text()
    assert json.loads(text)["signature"].startswith("hmac-sha256:") and SECRET not in text
    np.testing.assert_array_equal(store.read(KEY).arrays["m"], np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(FsspecStore(str(tmp_path)).read(KEY).arrays["m"], np.arange(6.0).reshape(2, 3))
    with pytest.raises(ArtifactSignatureError, match="does not match"):
        FsspecStore(str(tmp_path), secret=OTHER_SECRET).read(KEY)
    edited = json.loads(text)
    edited["metadata"]["dataset"] = "other"  # no data file touched: the signature still covers it
    _manifest_path(store, KEY).write_text(json.dumps(edited))
    with pytest.raises(ArtifactSignatureError, match="does not match"):
        store.read(KEY)


def test_the_secret_is_never_shown_stored_or_hashed(data, tmp_path, monkeypatch):
    config = CacheConfig(store=str(tmp_path / "c"), secret=SECRET)
    assert SECRET not in repr(config) and config.to_dict()["secret"] == "***"
    assert SECRET not in repr(config.open_store())
    result, _ = _run(data, config)
    assert SECRET not in result.to_json() and result.metadata["cache"] == {"store": str(tmp_path / "c"),
                                                                           "mode": "read_write"}
    for path in (tmp_path / "c").rglob("*"):
        assert path.is_dir() or SECRET.encode() not in path.read_bytes()
    keys = [job.key for job in Benchmark(data, [CallableExtractor("proj", project)], cache_config=config,
                                         progress=False, separatix_config=None).plan().jobs]
    unsigned = [job.key for job in Benchmark(data, [CallableExtractor("proj", project)], progress=False,
                                             separatix_config=None).plan().jobs]
    assert keys == unsigned
    monkeypatch.setenv("VERTEBRAE_CACHE_SECRET", OTHER_SECRET)
    from_env = CacheConfig(store=str(tmp_path / "c"))
    assert from_env.secret == OTHER_SECRET and OTHER_SECRET not in repr(from_env)
    with pytest.raises(ArtifactSignatureError):  # the entries were signed with SECRET
        from_env.open_store().read(next(iter(from_env.open_store().keys())))


def test_bad_secrets_are_refused_without_echoing_them(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="at least 16 characters") as caught:
        CacheConfig(secret="hunter2")
    assert "hunter2" not in str(caught.value)
    monkeypatch.setenv("VERTEBRAE_CACHE_SECRET", "short1")
    with pytest.raises(ConfigError, match="VERTEBRAE_CACHE_SECRET") as caught:
        CacheConfig()
    assert "short1" not in str(caught.value)
    monkeypatch.delenv("VERTEBRAE_CACHE_SECRET")
    with pytest.raises(ConfigError, match="VERTEBRAE_CACHE_SECRET"):
        cache_config_from_section({"store": "c", "secret": SECRET}, tmp_path)


def test_cli_verify_checks_signatures_with_the_secret_from_the_environment(tmp_path, capsys, monkeypatch):
    store = FsspecStore(str(tmp_path / "c"), secret=SECRET)
    store.write(KEY, StoredArtifact("embedding", {"embedding": np.arange(12, dtype=np.float32).reshape(4, 3)}))
    _forge(store, KEY, keep_signature=True)
    args = ["cache", "verify", "--store", str(tmp_path / "c")]
    assert main(args) == 0  # no secret: checksums only, and it says so
    assert "signatures not checked" in capsys.readouterr().out
    monkeypatch.setenv("MY_CACHE_KEY", SECRET)
    assert main([*args, "--secret-env", "MY_CACHE_KEY"]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT {KEY}" in out and "signature does not match" in out and SECRET not in out
    monkeypatch.setenv("VERTEBRAE_CACHE_SECRET", SECRET)
    assert main(args) == 1
    assert main([*args, "--secret-env", "UNSET_VARIABLE_X"]) == 2
    assert "UNSET_VARIABLE_X is not set" in capsys.readouterr().err


# ---------------------------------------------------------------- item 4: bounded reads
def _edit(store: FsspecStore, key: str, change) -> None:
    path = _manifest_path(store, key)
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _bomb_npz(rows: int, nnz: int) -> bytes:
    """A CSR ``.npz`` whose members are deflated: ``nnz`` zeros (float64 data, int32 indices) that expand from a
    few hundred KB to ``12 * nnz`` bytes.  Written in chunks, so building it needs no big buffer."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for field, dtype, count in (("data", "<f8", nnz), ("indices", "<i4", nnz)):
            with archive.open(f"{field}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, {"descr": dtype, "fortran_order": False,
                                                              "shape": (count,)})
                chunk = bytes(2**20)
                for start in range(0, count * np.dtype(dtype).itemsize, len(chunk)):
                    member.write(chunk[:count * np.dtype(dtype).itemsize - start])
        for field, array in (("indptr", np.array([0] + [nnz] * rows, np.int32)), ("shape", np.array([rows, 1]))):
            member = io.BytesIO()
            np.save(member, array)
            archive.writestr(f"{field}.npy", member.getvalue())
    return buffer.getvalue()


def _plant_bomb(store: FsspecStore, key: str, rows: int, nnz: int) -> int:
    """Replace the entry's CSR with the bomb, the manifest consistent with it (checksum, size, shape, nnz)."""
    payload = _bomb_npz(rows, nnz)
    sha = hashlib.sha256(payload).hexdigest()
    name = f"m.{sha[:16]}.npz"
    (pathlib.Path(store.root) / key / name).write_bytes(payload)

    def swap(manifest):
        old = manifest["arrays"]["m"]["file"]
        del manifest["files"][old]
        manifest["files"][name] = {"bytes": len(payload), "sha256": sha}
        manifest["arrays"]["m"].update(file=name, shape=[rows, 1], dtype="<f8", nnz=nnz,
                                       nbytes=nnz * 12 + (rows + 1) * 4)
    _edit(store, key, swap)
    return len(payload)


def _read_measured(store: FsspecStore, key: str) -> tuple[str, int]:
    """(what reading ``key`` raised, the peak bytes it allocated): tracemalloc sees every buffer Python and NumPy
    allocate, touched or not, so the measure does not depend on the kernel's page accounting."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        store.read(key)
        outcome = "read"
    except ArtifactError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
        if started:
            tracemalloc.stop()
    return outcome, peak


def _hostile_store(tmp_path) -> tuple[FsspecStore, str]:
    store = FsspecStore(str(tmp_path / "c"))
    honest = "extract/" + "a" * 16
    for key in (KEY, honest):
        store.write(key, StoredArtifact("embedding", {"m": sp.random(30, 1, density=0.5, format="csr",
                                                                     random_state=0),
                                                      "dense": np.ones((30, 4), np.float32)}))
    return store, honest


def test_a_deflated_npz_bomb_is_refused_from_its_headers_without_inflating(tmp_path):
    """Issue 28: a small deflated CSR with a consistent manifest was inflated in full before anything was checked
    (3.9 MB -> 3.98 GB).  Here 96 MB of zeros in ~100 KB must be refused with no measurable allocation."""
    store, honest = _hostile_store(tmp_path)
    nnz = 8 * 2**20
    size = _plant_bomb(store, KEY, rows=1, nnz=nnz)
    assert size < 2**20  # the file itself is tiny: its checksum and size are consistent
    outcome, peak = _read_measured(store, KEY)
    assert outcome.startswith("ArtifactIntegrityError") and "compressed" in outcome, outcome
    assert peak < 4 * 2**20, peak  # inflating it would take 96 MiB
    problems = dict(verify_store(store))
    assert "not inflated" in str(problems[KEY]) and problems[honest] is None


@pytest.mark.parametrize("claimed", [10_000_000_000_000, 200_000_000])
def test_a_manifest_byte_count_never_sizes_an_allocation(tmp_path, claimed):
    """``"bytes": 10 TB`` raised a bare MemoryError (also from `cache verify`); ``3 GB`` allocated 3 GB before the
    size check.  The real object size (and the limit) are checked first."""
    store, _ = _hostile_store(tmp_path)
    _edit(store, KEY, lambda m: next(e for n, e in m["files"].items() if n.startswith("dense.")).update(
        bytes=claimed))
    outcome, peak = _read_measured(store, KEY)
    assert outcome.startswith("ArtifactIntegrityError"), outcome
    assert peak < 4 * 2**20, peak
    assert ("over the limit" if claimed > 64 * 2**30 else "the manifest records") in outcome


def test_cache_verify_reports_a_huge_claim_in_one_line(tmp_path, capsys):
    store, _ = _hostile_store(tmp_path)
    _edit(store, KEY, lambda m: next(e for n, e in m["files"].items() if n.startswith("dense.")).update(
        bytes=10_000_000_000_000))
    assert main(["cache", "verify", "--store", store.root]) == 1
    captured = capsys.readouterr()
    corrupt = [line for line in captured.out.splitlines() if line.startswith("CORRUPT")]
    assert len(corrupt) == 1 and KEY in corrupt[0] and "over the limit" in corrupt[0]
    assert "Traceback" not in captured.out + captured.err and "MemoryError" not in captured.out + captured.err


def test_max_artifact_bytes_is_configurable(tmp_path):
    store, _ = _hostile_store(tmp_path)
    assert store.max_artifact_bytes == 64 * 2**30
    small = CacheConfig(store=store.root, max_artifact_bytes=100).open_store()
    with pytest.raises(ArtifactIntegrityError, match=r"over the limit of 100 \(CacheConfig.max_artifact_bytes\)"):
        small.read(KEY)
    assert small.max_artifact_bytes == 100 and CacheConfig(store=store.root).max_artifact_bytes == 64 * 2**30
    for bad in (0, -5, 1.5, True, "1GB"):
        with pytest.raises(ConfigError, match="max_artifact_bytes"):
            CacheConfig(max_artifact_bytes=bad)


def test_an_npy_header_is_checked_against_the_manifest_before_its_data(tmp_path):
    """A consistent checksum, but the .npy header's shape disagrees with the manifest's: refused from the header."""
    store, _ = _hostile_store(tmp_path)
    payload = io.BytesIO()
    np.save(payload, np.ones((4, 30), np.float32))  # same byte count, transposed shape
    payload = payload.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    name = f"dense.{sha[:16]}.npy"
    (pathlib.Path(store.root) / KEY / name).write_bytes(payload)

    def swap(manifest):
        old = manifest["arrays"]["dense"]["file"]
        del manifest["files"][old]
        manifest["files"][name] = {"bytes": len(payload), "sha256": sha}
        manifest["arrays"]["dense"]["file"] = name
    _edit(store, KEY, swap)
    with pytest.raises(ArtifactIntegrityError, match=r"holds \[4, 30\] <f4 but the manifest records \[30, 4\]"):
        store.read(KEY)


@pytest.mark.parametrize("change", [
    lambda a: a.update(nbytes="many"), lambda a: a.update(shape=[-1, 4]), lambda a: a.update(nnz=3),
    lambda a: a.update(shape="30x4"), lambda a: a.update(dtype=4),
], ids=["nbytes", "negative-shape", "dense-nnz", "shape-string", "dtype"])
def test_a_malformed_array_description_is_an_integrity_error(tmp_path, change):
    store, _ = _hostile_store(tmp_path)
    _edit(store, KEY, lambda m: change(m["arrays"]["dense"]))
    with pytest.raises(ArtifactIntegrityError, match="malformed description"):
        store.read(KEY)


# ---------------------------------------------------------------- on every backend, and across processes
def test_signing_and_size_checks_on_each_backend(store_location):
    url, options = store_location
    signed, plain = FsspecStore(url, options, secret=SECRET), FsspecStore(url, options)
    artifact = StoredArtifact("embedding", {"m": np.arange(12.0).reshape(4, 3)}, {"v": 1})
    signed.write(KEY, artifact)
    for store in (signed, plain, pickle.loads(pickle.dumps(signed))):
        np.testing.assert_array_equal(store.read(KEY).arrays["m"], artifact.arrays["m"])
    path = f"{signed.root}/{KEY}/{MANIFEST_FILE}"
    manifest = json.loads(signed.fs.cat_file(path))
    manifest["files"][manifest["arrays"]["m"]["file"]]["bytes"] = 200_000_000
    signed.fs.pipe_file(path, json.dumps(manifest).encode())
    with pytest.raises(ArtifactSignatureError, match="does not match"):
        pickle.loads(pickle.dumps(signed)).read(KEY)  # a store sent to a worker keeps its secret
    with pytest.raises(ArtifactIntegrityError, match="has 224 bytes, the manifest records 200000000"):
        plain.read(KEY)


def test_a_cache_sent_to_another_process_keeps_signing(tmp_path):
    cache = StageCache(CacheConfig(store=str(tmp_path), secret=SECRET, max_artifact_bytes=10**6))
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.store.signed and copy.store.max_artifact_bytes == 10**6

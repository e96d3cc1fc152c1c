"""Artifact stores on real backends: round trips, integrity, atomic publishing under SIGKILL and races."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import scipy.sparse as sp

from vertebrae.artifacts import FsspecStore, MemoryStore, Store, StoredArtifact, open_store
from vertebrae.artifacts.manifest import MANIFEST_FILE
from vertebrae.errors import ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError

from .store_servers import gcs_bucket, gcs_endpoint, moto_endpoint, s3_bucket, store_location  # noqa: F401

KEY = "extract/0123456789abcdef"


def _artifact(seed: int = 0, rows: int = 500) -> StoredArtifact:
    rng = np.random.default_rng(seed)
    return StoredArtifact("embedding",
                          {"matrix": rng.normal(size=(rows, 24)).astype(np.float32),
                           "sparse": sp.random(rows, 40, density=0.05, format="csr", random_state=seed),
                           "ids": np.arange(rows, dtype=np.int64)},
                          {"extractor": "pca", "labels": {1: "a", 2: "b"}, "seed": seed})


def _assert_same(left: StoredArtifact, right: StoredArtifact) -> None:
    assert left.kind == right.kind and sorted(left.arrays) == sorted(right.arrays)
    for name, value in left.arrays.items():
        other = right.arrays[name]
        assert sp.issparse(other) == sp.issparse(value) and other.dtype == value.dtype and other.shape == value.shape
        if sp.issparse(value):
            assert (other != value).nnz == 0
        else:
            np.testing.assert_array_equal(other, value)
    assert dict(left.document) == dict(right.document)


@pytest.fixture
def store(store_location) -> FsspecStore:
    url, options = store_location
    return FsspecStore(url, options)


def _file(store: FsspecStore, key: str, suffix: str) -> str:
    manifest = store.manifest(key)
    name = next(name for name in manifest.files if name.endswith(suffix))
    return f"{store.root}/{key}/{name}"


# ---------------------------------------------------------------- round trips and the API
def test_round_trip_and_manifest(store):
    artifact = _artifact()
    assert not store.has(KEY) and store.manifest(KEY) is None
    manifest = store.write(KEY, artifact, versions={"overlapindex": "0.1.5"}, metadata={"dataset": "blobs"})
    assert store.has(KEY)
    _assert_same(store.read(KEY), artifact)
    assert store.manifest(KEY) == manifest
    assert manifest.versions["overlapindex"] == "0.1.5" and manifest.metadata == {"dataset": "blobs"}
    assert manifest.arrays["matrix"] == {"shape": [500, 24], "dtype": "<f4", "sparse": False, "nnz": None,
                                         "nbytes": 500 * 24 * 4, "file": manifest.arrays["matrix"]["file"]}
    assert manifest.arrays["sparse"]["sparse"] is True
    assert manifest.arrays["sparse"]["nnz"] == artifact.arrays["sparse"].nnz
    assert "seconds" not in manifest.to_json() and "timing" not in manifest.to_json()


def test_persisted_bytes_are_the_stat_of_the_data_files(store):
    manifest = store.write(KEY, _artifact())
    sizes = store.persisted_bytes(KEY)
    assert set(sizes) == set(manifest.files) and MANIFEST_FILE not in sizes
    for name, size in sizes.items():
        assert size == len(store.fs.cat_file(f"{store.root}/{KEY}/{name}")) == manifest.files[name]["bytes"]
    # The dense .npy holds the matrix plus a small header.
    npy = next(size for name, size in sizes.items() if name.startswith("matrix."))
    assert 500 * 24 * 4 < npy < 500 * 24 * 4 + 256


def test_keys_manifests_and_delete(store):
    other = "score/" + "f" * 32
    store.write(KEY, _artifact(0))
    store.write(other, StoredArtifact("score", {}, {"value": 0.5}))
    assert list(store.keys()) == sorted([KEY, other])
    assert sorted(m.key for m in store.manifests()) == sorted([KEY, other])
    store.delete(KEY)
    assert not store.has(KEY) and list(store.keys()) == [other]
    with pytest.raises(ArtifactNotFoundError, match=KEY):
        store.read(KEY)
    store.delete(KEY)  # deleting twice is harmless


def test_overwrite_replaces_and_removes_the_old_files(store):
    store.write(KEY, _artifact(0))
    old = set(store.manifest(KEY).files)
    store.write(KEY, _artifact(1))
    _assert_same(store.read(KEY), _artifact(1))
    left = set(store.fs.ls(f"{store.root}/{KEY}", detail=False))
    left = {path.rsplit("/", 1)[-1] for path in left}
    new = set(store.manifest(KEY).files)
    assert left == new | {MANIFEST_FILE}
    replaced = old - new
    assert len(replaced) == 3 and not replaced & left  # matrix, sparse, document replaced; ids identical, kept


def test_memory_store_has_the_same_api_without_serialization():
    store = MemoryStore()
    artifact = _artifact()
    assert isinstance(store, Store) and not store.has(KEY)
    manifest = store.write(KEY, artifact, versions={"x": "1"})
    assert store.read(KEY) is artifact  # no copy, no serialization
    assert store.manifest(KEY) == manifest and manifest.files == {} and store.persisted_bytes(KEY) == {}
    assert manifest.arrays["matrix"]["file"] is None and manifest.arrays["matrix"]["shape"] == [500, 24]
    assert list(store.keys()) == [KEY] and [m.key for m in store.manifests()] == [KEY]
    store.delete(KEY)
    with pytest.raises(ArtifactNotFoundError):
        store.read(KEY)
    with pytest.raises(ArtifactError, match="artifact key"):
        store.write("../escape", artifact)


def test_open_store_picks_the_implementation(tmp_path):
    assert isinstance(open_store(None), MemoryStore) and isinstance(open_store("memory://"), MemoryStore)
    local = open_store(str(tmp_path / "a"))
    assert isinstance(local, FsspecStore) and local.url == str(tmp_path / "a")
    uri = open_store(f"file://{tmp_path}/b")
    uri.write(KEY, _artifact())
    assert (tmp_path / "b" / "extract" / "0123456789abcdef" / MANIFEST_FILE).exists()


def test_store_pickles_for_other_processes(store):
    store.write(KEY, _artifact())
    again = pickle.loads(pickle.dumps(store))
    _assert_same(again.read(KEY), _artifact())


def test_escaping_keys_are_rejected_before_touching_the_store(store, tmp_path):
    for key in ("../../outside/0123456789abcdef", "/tmp/0123456789abcdef", "extract/../../0123456789abcdef"):
        for call in (store.has, store.read, store.manifest, store.delete, store.persisted_bytes):
            with pytest.raises(ArtifactError, match="artifact key"):
                call(key)
        with pytest.raises(ArtifactError, match="artifact key"):
            store.write(key, _artifact())
    assert not (tmp_path / "outside").exists()


# ---------------------------------------------------------------- integrity
def _rewrite(store: FsspecStore, path: str, data: bytes) -> None:
    store.fs.pipe_file(path, data)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".json"])
def test_flipped_byte_is_detected(store, suffix):
    store.write(KEY, _artifact())
    path = _file(store, KEY, suffix)
    data = bytearray(store.fs.cat_file(path))
    data[len(data) // 2] ^= 0x01
    _rewrite(store, path, bytes(data))
    with pytest.raises(ArtifactIntegrityError, match="sha256"):
        store.read(KEY)


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_truncated_or_extended_file_is_detected(store, suffix):
    store.write(KEY, _artifact())
    path = _file(store, KEY, suffix)
    data = store.fs.cat_file(path)
    for changed in (data[: len(data) // 2], data + b"\0"):
        _rewrite(store, path, changed)
        with pytest.raises(ArtifactIntegrityError, match="bytes"):
            store.read(KEY)


def test_missing_data_file_is_detected(store):
    store.write(KEY, _artifact())
    store.fs.rm_file(_file(store, KEY, ".npy"))
    with pytest.raises(ArtifactIntegrityError, match="missing"):
        store.read(KEY)


def _edit_manifest(store: FsspecStore, key: str, change) -> None:
    path = f"{store.root}/{key}/{MANIFEST_FILE}"
    data = json.loads(store.fs.cat_file(path))
    change(data)
    _rewrite(store, path, json.dumps(data).encode())


@pytest.mark.parametrize("change", [
    lambda d: d["arrays"]["matrix"].update(shape=[24, 500]),
    lambda d: d["arrays"]["matrix"].update(dtype="<f8"),
    lambda d: d["arrays"]["sparse"].update(nnz=1),
    lambda d: d["arrays"]["sparse"].update(sparse=False),
    lambda d: next(v for k, v in d["files"].items() if k.startswith("matrix.")).update(bytes=12),
    lambda d: d["arrays"].pop("ids"),
], ids=["shape", "dtype", "nnz", "sparse-flag", "size", "dropped-array"])
def test_manifest_disagreeing_with_its_data_is_detected(store, change):
    store.write(KEY, _artifact())
    _edit_manifest(store, KEY, change)
    with pytest.raises(ArtifactIntegrityError):
        store.read(KEY)


def test_manifest_copied_from_another_key_is_detected(store):
    store.write(KEY, _artifact())
    other = "extract/" + "e" * 16
    if store.protocol == "file":
        store.fs.makedirs(f"{store.root}/{other}", exist_ok=True)
    for name in store.manifest(KEY).files | {MANIFEST_FILE: None}:
        store.fs.pipe_file(f"{store.root}/{other}/{name}", store.fs.cat_file(f"{store.root}/{KEY}/{name}"))
    with pytest.raises(ArtifactIntegrityError, match="copied or tampered"):
        store.read(other)


def test_garbage_manifest_is_an_integrity_error_and_skipped_when_listing(store):
    store.write(KEY, _artifact())
    good = "score/" + "b" * 16
    store.write(good, StoredArtifact("score", {}, {"v": 1}))
    _rewrite(store, f"{store.root}/{KEY}/{MANIFEST_FILE}", b"{not json")
    with pytest.raises(ArtifactIntegrityError, match="unreadable manifest"):
        store.read(KEY)
    with pytest.warns(UserWarning, match="skipping"):
        assert [m.key for m in store.manifests()] == [good]
    store.write(KEY, _artifact(2))  # a corrupt artifact is simply replaced by the next write
    _assert_same(store.read(KEY), _artifact(2))


@pytest.mark.parametrize("text, says", [(b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
                                        (b'{"created_at": 1e999}', "the number 1e999 overflows to infinity")])
def test_a_manifest_too_deep_to_parse_or_overflowing_is_corrupt_not_a_crash(store, text, says):
    """A RecursionError escaped the reader (and `cache verify`), and 1e999 read as infinity past the NaN check."""
    from vertebrae.artifacts.cache import verify_store

    store.write(KEY, _artifact())
    _rewrite(store, f"{store.root}/{KEY}/{MANIFEST_FILE}", text)
    with pytest.raises(ArtifactIntegrityError, match=f"unreadable manifest: {says}"):
        store.read(KEY)
    [(key, problem)] = list(verify_store(store))
    assert key == KEY and isinstance(problem, ArtifactIntegrityError)


def test_strict_json_refuses_what_the_writer_never_writes():
    from vertebrae._base.json_codec import strict_json

    assert strict_json('{"a": 1e300, "b": [1, 2.5]}') == {"a": 1e300, "b": [1, 2.5]}
    for text, says in (('{"a": 1e999}', "overflows to infinity"), ('{"a": -1e999}', "overflows"),
                       ('{"a": NaN}', "non-finite constant NaN"), ("[" * 100_000, "nests too deeply")):
        with pytest.raises(ValueError, match=says):
            strict_json(text)


def test_manifest_pointing_outside_the_folder_is_rejected(store, tmp_path):
    store.write(KEY, _artifact())
    secret = tmp_path / "secret.npy"
    np.save(secret, np.arange(3.0))

    def point_outside(d):
        name = next(k for k in d["files"] if k.startswith("matrix."))
        d["files"]["../../../secret.npy"] = d["files"].pop(name)
        d["arrays"]["matrix"]["file"] = "../../../secret.npy"
    _edit_manifest(store, KEY, point_outside)
    with pytest.raises(ArtifactIntegrityError, match="no paths"):
        store.read(KEY)


def test_pickled_object_npy_with_matching_checksum_is_refused(store):
    """An attacker who rewrites data *and* manifest consistently still cannot make vertebrae unpickle."""
    import hashlib
    import io

    store.write(KEY, StoredArtifact("embedding", {"m": np.ones(3)}))
    buffer = io.BytesIO()
    np.save(buffer, np.array([print], dtype=object), allow_pickle=True)
    payload = buffer.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    name = f"m.{sha[:16]}.npy"
    store.fs.pipe_file(f"{store.root}/{KEY}/{name}", payload)

    def swap(d):
        old = next(k for k in d["files"] if k.startswith("m."))
        del d["files"][old]
        d["files"][name] = {"bytes": len(payload), "sha256": sha}
        d["arrays"]["m"].update(file=name, dtype="|O")
    _edit_manifest(store, KEY, swap)
    with pytest.raises(ArtifactIntegrityError, match="pickle"):
        store.read(KEY)


# ---------------------------------------------------------------- atomic publishing with real processes
_WRITER = textwrap.dedent("""
    import json, os, sys, time, pathlib, numpy as np
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    from vertebrae.artifacts import FsspecStore, StoredArtifact
    url, key, seed, rows, repeats, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    store = FsspecStore(url, json.loads(sys.argv[7]))
    matrix = np.random.default_rng(seed).normal(size=(rows, 384)).astype(np.float32)
    artifact = StoredArtifact("embedding", {"matrix": matrix}, {"seed": seed})
    while go != "-" and not pathlib.Path(go).exists():
        time.sleep(0.001)
    print("writing", flush=True)
    for _ in range(repeats):
        store.write(key, artifact)
""")


def _writer(url: str, key: str, seed: int, rows: int, repeats: int = 1, go: str = "-",
            options: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, url, key, str(seed), str(rows), str(repeats), go,
                             json.dumps(options or {})],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _expected(seed: int, rows: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 384)).astype(np.float32)


def test_sigkill_mid_write_never_leaves_a_corrupt_artifact(tmp_path):
    """Kill a real writer while it streams a 60 MB matrix, at several moments: readers see nothing or the old one."""
    url = str(tmp_path / "cache")
    store = FsspecStore(url)
    rows = 40_000  # 40,000 x 384 float32 = 61 MB
    folder = tmp_path / "cache" / "extract" / "0123456789abcdef"
    killed_mid_data = 0
    for attempt, delay in enumerate((0.0, 0.05, 0.15, 0.3)):
        writer = _writer(url, KEY, seed=attempt, rows=rows, repeats=1)
        assert writer.stdout.readline().strip() == "writing", writer.stderr.read()
        time.sleep(delay)
        temporaries = [p for p in folder.glob(".*.tmp")] if folder.exists() else []
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        killed_mid_data += bool(temporaries) and writer.returncode == -signal.SIGKILL
        if attempt == 0:
            assert not store.has(KEY) or store.read(KEY).document["seed"] == 0
        if store.has(KEY):
            artifact = store.read(KEY)  # never raises: the manifest only ever points at complete files
            np.testing.assert_array_equal(artifact.arrays["matrix"], _expected(artifact.document["seed"], rows))
        else:
            with pytest.raises(ArtifactNotFoundError):
                store.read(KEY)
    assert killed_mid_data >= 1  # precondition: at least one kill landed while a data file was half written


def test_sigkill_during_a_refresh_keeps_the_previous_artifact(tmp_path):
    url = str(tmp_path / "cache")
    store = FsspecStore(url)
    store.write(KEY, StoredArtifact("embedding", {"matrix": _expected(7, 1000)}, {"seed": 7}))
    folder = tmp_path / "cache" / "extract" / "0123456789abcdef"
    writer = _writer(url, KEY, seed=8, rows=60_000)
    assert writer.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + 30
    while not list(folder.glob(".*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.002)
    assert list(folder.glob(".*.tmp")), "precondition: the writer started its data file"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    artifact = store.read(KEY)
    assert artifact.document["seed"] == 7
    np.testing.assert_array_equal(artifact.arrays["matrix"], _expected(7, 1000))


def test_two_processes_writing_one_key_leave_one_valid_artifact(store_location, tmp_path):
    url, options = store_location
    rows = 5_000
    go = tmp_path / "go"
    writers = [_writer(url, KEY, seed=seed, rows=rows, repeats=10, go=str(go), options=options) for seed in (1, 2)]
    go.touch()  # both wait for this file, so their writes overlap
    store = FsspecStore(url, options)
    while any(writer.poll() is None for writer in writers):
        # A concurrent reader gets a complete artifact or an error, never a mix of the two writers' data.
        try:
            artifact = store.read(KEY)
        except (ArtifactNotFoundError, ArtifactIntegrityError):
            continue
        np.testing.assert_array_equal(artifact.arrays["matrix"], _expected(artifact.document["seed"], rows))
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    artifact = store.read(KEY)
    np.testing.assert_array_equal(artifact.arrays["matrix"], _expected(artifact.document["seed"], rows))
    names = {path.rsplit("/", 1)[-1] for path in store.fs.ls(f"{store.root}/{KEY}", detail=False)}
    assert not [n for n in names if n.endswith(".tmp")]
    # Every file left is the winner's or an orphan of the loser; the winner's are all there.
    assert set(store.manifest(KEY).files) <= names


def test_sweep_removes_only_old_unreferenced_files(tmp_path):
    """What a killed writer leaves (a temporary, data without a manifest) goes; live files and young ones stay."""
    import datetime

    store = FsspecStore(str(tmp_path / "cache"))
    store.write(KEY, _artifact())
    folder = tmp_path / "cache" / KEY
    orphan_key = "extract/" + "c" * 16
    (tmp_path / "cache" / orphan_key).mkdir(parents=True)
    old = [folder / ".0123.matrix.npy.tmp", tmp_path / "cache" / orphan_key / "matrix.0123456789abcdef.npy"]
    young = folder / ".4567.matrix.npy.tmp"
    for path in (*old, young):
        path.write_bytes(b"partial")
    for path in old:
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert sorted(store.sweep(datetime.timedelta(hours=1), dry_run=True)) == sorted(map(str, old))
    assert all(path.exists() for path in old)
    assert sorted(store.sweep(datetime.timedelta(hours=1))) == sorted(map(str, old))
    assert not any(path.exists() for path in old) and young.exists()
    _assert_same(store.read(KEY), _artifact())
    assert MemoryStore().sweep(datetime.timedelta(0)) == []


def test_sweep_on_each_backend(store):
    import datetime

    store.write(KEY, _artifact())
    orphan = f"{store.root}/{KEY}/matrix.0123456789abcdef.npy"
    store.fs.pipe_file(orphan, b"lost race")
    assert store.sweep(datetime.timedelta(days=1)) == []  # too young: maybe a writer at work
    assert [p.rsplit("/", 1)[-1] for p in store.sweep(datetime.timedelta(0))] == ["matrix.0123456789abcdef.npy"]
    assert not store.fs.exists(orphan)
    _assert_same(store.read(KEY), _artifact())


def test_a_refresh_between_manifest_and_data_reads_is_retried_once(tmp_path):
    """A reader that got the old manifest just before a refresh deleted its files re-reads the new one."""
    url = str(tmp_path / "cache")

    class RefreshedDuringRead(FsspecStore):
        refreshed = False

        def _read_files(self, key, manifest):
            if not self.refreshed:  # another writer publishes v2 (and removes v1's files) at this moment
                RefreshedDuringRead.refreshed = True
                FsspecStore(url).write(key, _artifact(2))
            return super()._read_files(key, manifest)

    FsspecStore(url).write(KEY, _artifact(1))
    _assert_same(RefreshedDuringRead(url).read(KEY), _artifact(2))

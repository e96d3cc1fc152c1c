"""Cache maintenance sees every entry, links out of the store are refused, and concurrent writers of different
content look like a race (never like corruption) and leave nothing `cache prune` cannot reclaim (issue 28, items 10
and 11). Real processes and a real folder store throughout."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
import uuid
import warnings

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity
from vertebrae.artifacts import FsspecStore, StoredArtifact
from vertebrae.artifacts.manifest import MANIFEST_FILE
from vertebrae.artifacts.cache import CacheConfig, verify_store
from vertebrae.cli.main import main
from vertebrae.errors import (ArtifactError, ArtifactIntegrityError, ArtifactNotFoundError, ArtifactRaceError,
                                  ArtifactWarning)

from .conftest import gaussian_classes

KEY = "extract/0123456789abcdef"


def _key(i: int) -> str:
    return f"extract/{i:016x}"


def _fill(store: FsspecStore, count: int) -> None:
    for i in range(count):
        store.write(_key(i), StoredArtifact("embedding", {"matrix": np.full((50, 4), i, dtype=np.float32)}, {"i": i}),
                    metadata={"extractor": f"e{i}", "dataset": "d"})


def _age(path, seconds: float = 7200) -> None:
    os.utime(path, (time.time() - seconds, time.time() - seconds))


# ---------------------------------------------------------------- item 10: every entry is seen
def test_verify_list_and_prune_report_each_bad_entry_and_go_on(tmp_path, capsys):
    """A manifest that is a folder no longer aborts the scan at that entry and hides a corrupt one after it."""
    root = tmp_path / "c"
    store = FsspecStore(str(root))
    _fill(store, 4)
    (root / _key(1) / MANIFEST_FILE).unlink()
    (root / _key(1) / MANIFEST_FILE).mkdir()  # a manifest that is a directory
    matrix = next((root / _key(2)).glob("matrix.*.npy"))
    data = bytearray(matrix.read_bytes())
    data[-1] ^= 0xFF
    matrix.write_bytes(bytes(data))  # really corrupt, after the bad entry

    assert main(["cache", "verify", "--store", str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:-2]] == [f"UNREADABLE {_key(1)}", f"CORRUPT {_key(2)}"]
    assert "IsADirectoryError" in out[0] and "sha256" in out[1]
    assert out[-2].startswith("4 artifact(s) checked") and "2 valid, 1 corrupt, 1 unreadable" in out[-2]
    assert out[-1].startswith("signatures not checked")  # no secret here

    assert main(["cache", "list", "--store", str(root)]) == 1  # an unreadable entry: listed, and a non-zero exit
    out = capsys.readouterr().out
    assert all(_key(i) in out for i in (0, 2, 3))
    assert f"UNREADABLE {_key(1)}:" in out and "3 artifact(s)" in out and "1 unreadable" in out

    assert main(["cache", "prune", "--store", str(root), "--older-than", "0s"]) == 0
    out = capsys.readouterr().out
    assert "deleted 3 artifact(s)" in out and f"UNREADABLE {_key(1)}:" in out
    assert list(store.keys()) == [_key(1)]  # left for a person to look at: its age is unknown


def test_files_that_block_entries_are_reported_then_replaced_by_a_write(tmp_path, capsys):
    """A file where an entry's folder (or a stage's) belongs, or a folder where a manifest belongs, blocked every
    write of that key for ever ("could not store" on each run) while `cache verify` said the store was healthy (the
    listing skipped what had no manifest).  Now verify names them, and the next write clears them."""
    root = tmp_path / "c"
    store = FsspecStore(str(root))
    _fill(store, 2)
    (root / "score").write_text("not a stage folder")
    for i, block in ((0, "file"), (1, "manifest folder")):
        folder = root / _key(i)
        for child in folder.iterdir():
            child.unlink()
        if block == "file":
            folder.rmdir()
            folder.write_text("not an entry folder")
        else:
            (folder / MANIFEST_FILE).mkdir()
    assert main(["cache", "verify", "--store", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT {_key(0)}: {root / _key(0)} is a file where the entry's folder belongs" in out
    assert f"CORRUPT score/*: {root / 'score'} is a file where the stage folder belongs" in out
    assert f"UNREADABLE {_key(1)}" in out
    artifact = StoredArtifact(kind="embedding", arrays={"matrix": np.ones((2, 2))}, document={})
    for key in (_key(0), _key(1), "score/0123456789abcdef"):
        store.write(key, artifact)
        assert store.read(key).arrays["matrix"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert main(["cache", "verify", "--store", str(root)]) == 0


def _rewrite_document(store_dir, change) -> str:
    """Edit the stored JSON document of the only entry, and save it consistently (new content name, manifest)."""
    store = FsspecStore(str(store_dir))
    (key,) = list(store.keys())
    folder = store_dir / key
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    old = next(name for name in manifest["files"] if name.startswith("document."))
    document = json.loads((folder / old).read_text())
    change(document)
    payload = json.dumps(document, sort_keys=True).encode()
    sha = hashlib.sha256(payload).hexdigest()
    new = f"document.{sha[:16]}.json"
    (folder / old).unlink()
    (folder / new).write_bytes(payload)
    del manifest["files"][old]
    manifest["files"][new] = {"bytes": len(payload), "sha256": sha}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    return key


class Counting:
    """A seeded projection with a declared identity that counts its calls."""

    name = "proj"

    def __init__(self) -> None:
        self.calls = 0

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        self.calls += 1
        return (np.asarray(X) @ np.random.default_rng(0).normal(size=(X.shape[1], 5))).astype(np.float32)

    def recipe(self):
        return {"type": "counting"}

    def identity(self):
        return {"type": "counting", "v": 1}


def _benchmark(extractor, config):
    X, y = gaussian_classes(n_per_class=60, dim=8)
    data = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("blobs", "1"))
    return Benchmark(data, [extractor], cache_config=config, progress=False, separatix_config=None)


def _drop_logical_bytes(document) -> None:
    document["metadata"][0].pop("logical_bytes")


def test_a_document_missing_metadata_fields_is_corrupt_in_every_mode(tmp_path):
    """Was a raw ``KeyError: 'logical_bytes'`` in both modes, never recomputed, and valid for ``verify``."""
    config = CacheConfig(store=str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _benchmark(Counting(), config).run()
    key = _rewrite_document(tmp_path / "cache", _drop_logical_bytes)
    store = FsspecStore(str(tmp_path / "cache"))
    ((listed, problem),) = list(verify_store(store))
    assert listed == key and isinstance(problem, ArtifactIntegrityError) and "logical_bytes" in str(problem)
    with pytest.raises(ArtifactIntegrityError, match="is corrupt.*logical_bytes is missing.*read_only mode never repairs"):
        _benchmark(Counting(), CacheConfig(store=str(tmp_path / "cache"), mode="read_only")).run()
    extractor = Counting()
    with pytest.warns(ArtifactWarning, match="is corrupt .*logical_bytes.*recomputing"):
        result = _benchmark(extractor, config).run()
    assert extractor.calls == 1 and result.extractor_results[0].embedding["cache_status"] == "miss"
    assert result.extractor_results[0].embedding["logical_bytes"] == 180 * 5 * 4
    assert [problem for _, problem in verify_store(store)] == [None]  # replaced by the recomputed entry


@pytest.mark.parametrize("change, message", [
    (lambda d: d["metadata"][0].update(logical_bytes=7), "logical_bytes"),
    (lambda d: d.update(metadata=["not a mapping"]), "metadata"),
    (lambda d: d.pop("outputs"), "outputs"),
], ids=["wrong-logical-bytes", "metadata-not-a-mapping", "no-outputs"])
def test_structurally_bad_documents_are_reported_by_verify(tmp_path, change, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _benchmark(Counting(), CacheConfig(store=str(tmp_path / "cache"))).run()
    _rewrite_document(tmp_path / "cache", change)
    ((_, problem),) = list(verify_store(FsspecStore(str(tmp_path / "cache"))))
    assert isinstance(problem, ArtifactIntegrityError) and message in str(problem)


def test_links_that_leave_the_store_are_never_followed(tmp_path, capsys):
    """Planted links were followed: a write landed outside the store and a delete removed files outside it."""
    outside = tmp_path / "outside"
    (outside / "0123456789abcdef").mkdir(parents=True)
    (outside / "0123456789abcdef" / "precious.txt").write_text("not the cache's")
    root = tmp_path / "c"
    root.mkdir()
    (root / "extract").symlink_to(outside, target_is_directory=True)  # a stage folder that leads out
    store = FsspecStore(str(root))
    artifact = StoredArtifact("embedding", {"matrix": np.ones((3, 2))}, {})
    for action in (lambda: store.write(KEY, artifact), lambda: store.delete(KEY), lambda: store.read(KEY),
                   lambda: store.has(KEY)):
        with pytest.raises(ArtifactError, match="symbolic link.*outside the store"):
            action()
    assert sorted(p.name for p in (outside / "0123456789abcdef").iterdir()) == ["precious.txt"]

    # An entry folder inside the store whose manifest is a link to a file outside: not read, not listed as valid.
    (root / "extract").unlink()
    store.write(KEY, artifact)
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    (root / KEY / MANIFEST_FILE).unlink()
    (root / KEY / MANIFEST_FILE).symlink_to(secret)
    with pytest.raises(ArtifactError, match="symbolic link.*outside the store"):
        store.read(KEY)
    assert main(["cache", "verify", "--store", str(root)]) == 1
    assert f"UNREADABLE {KEY}:" in capsys.readouterr().out
    assert secret.read_text() == "{}"

    # A link that stays inside the store (here: the store opened through a link to its folder) is fine.
    (root / KEY / MANIFEST_FILE).unlink()
    store.write(KEY, artifact)
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    assert FsspecStore(str(tmp_path / "alias")).read(KEY).arrays["matrix"].shape == (3, 2)


# ---------------------------------------------------------------- item 11: concurrent writers of different content
ROWS, WIDTH = 300, 64


def _matrix(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(ROWS, WIDTH)).astype(np.float32)


def _write_until(url: str, seed: int, deadline: float, fresh: bool) -> None:
    """A nondeterministic extractor under one identity: each process stores its own content under one key, the
    same each time or (``fresh``) new content on every write."""
    store = FsspecStore(url)
    writes = 0
    while time.time() < deadline:
        content = seed * 1000 + writes if fresh else seed
        store.write(KEY, StoredArtifact("embedding", {"matrix": _matrix(content)}, {"seed": content}))
        writes += 1


def _read_until(url: str, deadline: float, results) -> None:
    store = FsspecStore(url)
    counts = {"ok": 0, "absent": 0, "race": 0, "wrong": 0}
    errors: list[str] = []
    while time.time() < deadline:
        try:
            artifact = store.read(KEY)
        except ArtifactNotFoundError:
            counts["absent"] += 1
            continue
        except ArtifactRaceError:
            counts["race"] += 1
            continue
        except ArtifactError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        same = np.array_equal(artifact.arrays["matrix"], _matrix(artifact.document["seed"]))
        counts["ok" if same else "wrong"] += 1
    results.put((counts, errors[:5], len(errors)))


def test_concurrent_writers_of_different_content_are_a_race_never_corruption(tmp_path):
    """Four processes keep storing different content under one key while two read it (about 3 s in all): two
    repeat their own content (equal-content writers share files), two write new content every time.

    Readers get a complete artifact of one writer (or, rarely, a named race), never a "missing file" integrity
    error; what the losers leave behind is reclaimed by ``cache prune``.
    """
    url = str(tmp_path / "cache")
    FsspecStore(url).write(KEY, StoredArtifact("embedding", {"matrix": _matrix(0)}, {"seed": 0}))
    context = multiprocessing.get_context("fork")
    deadline = time.time() + 2.5
    results = context.Queue()
    processes = [context.Process(target=_write_until, args=(url, seed, deadline, seed > 2)) for seed in (1, 2, 3, 4)]
    processes += [context.Process(target=_read_until, args=(url, deadline, results)) for _ in range(2)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _ in range(2)]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    total = {name: sum(counts[name] for counts, _, _ in outcomes) for name in outcomes[0][0]}
    errors = [error for _, first, _ in outcomes for error in first]
    assert sum(count for _, _, count in outcomes) == 0, (total, errors)
    assert total["wrong"] == 0 and total["absent"] == 0
    assert total["ok"] > 20 and total["race"] <= total["ok"], total

    store = FsspecStore(url)
    artifact = store.read(KEY)
    np.testing.assert_array_equal(artifact.arrays["matrix"], _matrix(artifact.document["seed"]))
    assert main(["cache", "prune", "--store", url, "--leftover-age", "0s"]) == 0
    left = sorted(path.name for path in (tmp_path / "cache" / KEY).iterdir())
    assert left == sorted([MANIFEST_FILE, *store.manifest(KEY).files])  # every orphan reclaimed


def test_a_manifest_replaced_on_every_read_is_a_race_not_corruption(tmp_path):
    """Readers retry a bounded number of times; a key rewritten throughout is an ArtifactRaceError."""
    url = str(tmp_path / "cache")

    class RewrittenOnEveryRead(FsspecStore):
        writes = 0

        def _read_files(self, key, manifest):
            RewrittenOnEveryRead.writes += 1  # another writer publishes new content and removes the old files
            FsspecStore(url).write(key, StoredArtifact("embedding", {"matrix": _matrix(self.writes)}, {}))
            return super()._read_files(key, manifest)

    FsspecStore(url).write(KEY, StoredArtifact("embedding", {"matrix": _matrix(0)}, {}))
    with pytest.raises(ArtifactRaceError, match="concurrent writers"):
        RewrittenOnEveryRead(url).read(KEY)
    assert 2 < RewrittenOnEveryRead.writes <= 10


def test_prune_reclaims_orphans_and_temporary_files_by_default(tmp_path, capsys):
    """`cache prune` with no entry criteria removes only what killed writers and lost races left, older than 1 h."""
    root = tmp_path / "c"
    store = FsspecStore(str(root))
    _fill(store, 2)
    folder = root / _key(0)
    killed = root / "extract" / ("f" * 32)  # a writer killed before its first manifest
    killed.mkdir(parents=True)
    old = [folder / f".{uuid.uuid4().hex}.matrix.npy.tmp", folder / f"{MANIFEST_FILE}.{uuid.uuid4().hex}.tmp",
           folder / "matrix.0123456789abcdef.npy", killed / f".{uuid.uuid4().hex}.matrix.npy.tmp",
           killed / "document.0123456789abcdef.json"]
    young = folder / f".{uuid.uuid4().hex}.matrix.npy.tmp"
    for path in (*old, young):
        path.write_bytes(b"partial")
    for path in old:
        _age(path)

    assert main(["cache", "prune", "--store", str(root)]) == 0
    assert "deleted 0 artifact(s), 0 bytes, and 5 leftover file(s)" in capsys.readouterr().out
    assert not any(path.exists() for path in old) and young.exists()
    assert [problem for _, problem in verify_store(store)] == [None, None]
    assert main(["cache", "prune", "--store", str(root), "--leftover-age", "0s", "--dry-run"]) == 0
    assert "would delete 0 artifact(s), 0 bytes, and 1 leftover file(s)" in capsys.readouterr().out
    assert young.exists()
    assert main(["cache", "prune", "--store", str(root), "--leftover-age", "soon"]) == 2
    assert "--leftover-age 'soon'" in capsys.readouterr().err

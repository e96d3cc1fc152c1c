"""CacheConfig, the `vertebrae cache` command and credential hygiene, against real stores."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import numpy as np
import pytest

from vertebrae.artifacts import FsspecStore, StoredArtifact
from vertebrae.artifacts.manifest import MANIFEST_FILE
from vertebrae.artifacts.cache import (CacheConfig, default_cache_dir, list_entries, parse_duration, parse_size,
                                           prune_store, verify_store)
from vertebrae.cli.main import main
from vertebrae.errors import ArtifactError, ConfigError

from .store_servers import (S3_KEY, S3_SECRET, gcs_bucket, gcs_endpoint, moto_endpoint, s3_bucket,  # noqa: F401
                            s3_options, store_location)


def _key(i: int) -> str:
    return f"extract/{i:016x}"


def _fill(store, count: int = 3) -> list:
    manifests = []
    for i in range(count):
        artifact = StoredArtifact("embedding", {"matrix": np.full((100, 8), i, dtype=np.float32)}, {"i": i})
        manifests.append(store.write(_key(i), artifact, metadata={"extractor": f"pca(n={i})", "dataset": "blobs"}))
    return manifests


# ---------------------------------------------------------------- CacheConfig
def test_cache_config_defaults_and_validation(monkeypatch, tmp_path):
    monkeypatch.delenv("VERTEBRAE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = CacheConfig()
    assert (config.enabled, config.store, config.mode, dict(config.storage_options)) == (True, None, "read_write", {})
    assert config.url == default_cache_dir() == str(tmp_path / "xdg" / "vertebrae")
    monkeypatch.setenv("VERTEBRAE_CACHE_DIR", str(tmp_path / "explicit"))
    assert CacheConfig().url == str(tmp_path / "explicit")
    store = CacheConfig().open_store()
    assert isinstance(store, FsspecStore) and store.root == str(tmp_path / "explicit")
    assert CacheConfig.from_dict({"store": str(tmp_path), "mode": "refresh"}).mode == "refresh"


@pytest.mark.parametrize("fields, message", [
    ({"mode": "write"}, "CacheConfig.mode"),
    ({"enabled": 1}, "CacheConfig.enabled"),
    ({"store": ""}, "CacheConfig.store"),
    ({"store": 3}, "CacheConfig.store"),
    ({"store": "nosuchproto://bucket/x"}, "unknown protocol 'nosuchproto'"),
    ({"store": "memory://"}, "forget everything"),
    ({"storage_options": ["key"]}, "CacheConfig.storage_options"),
    ({"storage_options": {1: "x"}}, "keys must be strings"),
])
def test_cache_config_rejects_bad_fields(fields, message):
    with pytest.raises(ConfigError, match=message):
        CacheConfig(**fields)


@pytest.mark.parametrize("value, says", [
    ("", "is an empty path"), (" ", "is an empty path"), ("file://", "is an empty path"),
    ("s3://bucket/x", "is a URL, but it names a folder"),
])
def test_a_cache_dir_variable_that_names_no_folder_is_refused(monkeypatch, tmp_path, value, says):
    """``VERTEBRAE_CACHE_DIR=""`` (a script's unset variable) silently became the user cache folder, and a blank or
    URL value a folder under the current one; each is a ConfigError naming the variable, and nothing is created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VERTEBRAE_CACHE_DIR", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for call in (default_cache_dir, lambda: CacheConfig().open_store()):
        with pytest.raises(ConfigError, match=rf"^\$VERTEBRAE_CACHE_DIR '{value}' {says}.*: set it to a folder path"):
            call()
    assert list(tmp_path.iterdir()) == []


def test_a_cache_dir_variable_that_names_no_folder_is_one_line_in_the_cli(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VERTEBRAE_CACHE_DIR", "")
    assert main(["cache", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vertebrae cache: error: $VERTEBRAE_CACHE_DIR '' is an empty path") and err.count("\n") == 1


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "gs://", "gs:///prefix", "s3:// /x", "S3://key:secret@/x",
                                 "gcs:///x"])
def test_an_object_store_url_without_a_bucket_is_refused(url):
    """fsspec took ``s3://`` as the account's root (and "wrote" there) or failed in a client error; the store is
    refused before it opens, naming the URL (credentials hidden) and the fix."""
    with pytest.raises(ConfigError, match=r"CacheConfig.store '.*' names no bucket after .*: give a folder") as info:
        CacheConfig(store=url)
    assert "secret" not in str(info.value)
    with pytest.raises(ArtifactError, match="names no bucket"):
        FsspecStore(url)


def test_cache_config_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="unknown field 'stor'"):
        CacheConfig.from_dict({"stor": "/tmp/x"})


def test_disabled_cache_has_no_store():
    with pytest.raises(ArtifactError, match="enabled is False"):
        CacheConfig(enabled=False).open_store()


# ---------------------------------------------------------------- credentials never shown
def test_credentials_never_appear_in_reprs_dicts_manifests_or_errors(s3_bucket, moto_endpoint):
    options = s3_options(moto_endpoint)
    config = CacheConfig(store=f"s3://{s3_bucket}/cache", storage_options=options)
    shown = [repr(config), json.dumps(config.to_dict()), config.url]
    store = config.open_store()
    manifest = store.write(_key(1), StoredArtifact("score", {}, {"v": 1}))
    shown += [repr(store), store.url, manifest.to_json(), store.fs.cat_file(f"{store.root}/{_key(1)}/{MANIFEST_FILE}")
              .decode()]
    # An error from the backend: wrong secret makes moto refuse the signature... moto accepts any secret, so
    # use an unreachable endpoint instead (a real failure, nothing mocked).
    broken = CacheConfig(store=f"s3://{s3_bucket}/cache", storage_options={
        **options, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}, "config_kwargs": {"retries": {"max_attempts": 1}}})
    with pytest.raises(ArtifactError) as caught:
        broken.open_store().has(_key(1))
    shown.append(str(caught.value))
    url_with_secret = f"s3://{S3_KEY}:{S3_SECRET}@{s3_bucket}/cache"
    shown += [repr(CacheConfig(store=url_with_secret)), CacheConfig(store=url_with_secret).url,
              repr(FsspecStore(url_with_secret, options))]
    for text in shown:
        assert S3_SECRET not in text and S3_KEY not in text, text
    assert "***" in repr(config)


def test_credentials_from_the_environment(monkeypatch, s3_bucket, moto_endpoint):
    """The usual AWS environment variables work without storage_options."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = FsspecStore(f"s3://{s3_bucket}/env", {"skip_instance_cache": True})
    store.write(_key(2), StoredArtifact("score", {}, {"v": 2}))
    assert store.read(_key(2)).document == {"v": 2}


# ---------------------------------------------------------------- list / verify / prune (library)
def test_list_verify_and_prune_on_each_backend(store_location):
    url, options = store_location
    store = FsspecStore(url, options)
    manifests = _fill(store)
    entries = list(list_entries(store))
    assert [e.key for e in entries] == [_key(i) for i in range(3)]
    assert entries[1].extractor == "pca(n=1)" and entries[1].dataset == "blobs"
    assert entries[1].bytes == sum(store.persisted_bytes(_key(1)).values()) == manifests[1].persisted_bytes
    assert dict(verify_store(store)) == {_key(i): None for i in range(3)}
    path = f"{store.root}/{_key(1)}/{next(n for n in manifests[1].files if n.startswith('matrix.'))}"
    data = bytearray(store.fs.cat_file(path))
    data[-1] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))
    problems = dict(verify_store(store))
    assert problems[_key(0)] is None and problems[_key(2)] is None and "sha256" in str(problems[_key(1)])
    # Prune by size: the oldest go first until the rest fit.
    one = manifests[0].persisted_bytes
    deleted = prune_store(store, max_bytes=one + 1)
    assert [e.key for e in deleted] == [_key(0), _key(1)] and list(store.keys()) == [_key(2)]


def test_prune_by_age_uses_created_at(tmp_path):
    store = FsspecStore(str(tmp_path))
    manifests = _fill(store, 2)
    created = datetime.datetime.strptime(manifests[1].created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)
    later = created + datetime.timedelta(days=31)
    assert prune_store(store, older_than=datetime.timedelta(days=32), now=later) == []
    preview = prune_store(store, older_than=datetime.timedelta(days=30), now=later, dry_run=True)
    assert [e.key for e in preview] == [_key(0), _key(1)] and len(list(store.keys())) == 2
    prune_store(store, older_than=datetime.timedelta(days=30), now=later)
    assert list(store.keys()) == []
    with pytest.raises(ConfigError, match="older_than and/or max_bytes"):
        prune_store(store)


@pytest.mark.parametrize("text, expected", [("30d", datetime.timedelta(days=30)), ("12h", datetime.timedelta(hours=12)),
                                            ("1.5m", datetime.timedelta(seconds=90)), ("2w", datetime.timedelta(weeks=2))])
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text, expected", [("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1000", 1000), ("1.5kb", 1500)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["30", "d30", "-1d", "1y"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ConfigError, match="--older-than"):
        parse_duration(bad)


@pytest.mark.parametrize("bad", ["", "MB", "1PB", "-5"])
def test_parse_size_rejects(bad):
    with pytest.raises(ConfigError, match="--max-bytes"):
        parse_size(bad)


# ---------------------------------------------------------------- the CLI
def test_cli_list_verify_prune(tmp_path, capsys):
    store = FsspecStore(str(tmp_path / "c"))
    manifests = _fill(store)
    assert main(["cache", "list", "--store", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["key", "kind", "extractor", "dataset", "bytes", "created"]
    assert _key(2) in out and "pca(n=2)" in out and str(manifests[2].persisted_bytes) in out
    assert "3 artifact(s)" in out
    assert main(["cache", "verify", "--store", str(tmp_path / "c")]) == 0
    assert "3 valid, 0 corrupt" in capsys.readouterr().out
    name = next(n for n in manifests[0].files if n.startswith("matrix."))
    path = tmp_path / "c" / _key(0) / name
    path.write_bytes(path.read_bytes()[:-4])  # truncate
    assert main(["cache", "verify", "--store", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert f"CORRUPT {_key(0)}" in out and "2 valid, 1 corrupt" in out
    assert main(["cache", "prune", "--store", str(tmp_path / "c"), "--max-bytes", "0", "--dry-run"]) == 0
    assert "would delete 3 artifact(s)" in capsys.readouterr().out and len(list(store.keys())) == 3
    assert main(["cache", "prune", "--store", str(tmp_path / "c"), "--older-than", "0s"]) == 0
    assert "deleted 3 artifact(s)" in capsys.readouterr().out and list(store.keys()) == []


def test_cli_cache_on_s3_with_storage_options(s3_bucket, moto_endpoint, capsys):
    options = s3_options(moto_endpoint)
    _fill(FsspecStore(f"s3://{s3_bucket}/c", options), 2)
    args = ["--store", f"s3://{s3_bucket}/c", "--storage-options", json.dumps(options)]
    assert main(["cache", "list", *args]) == 0
    out = capsys.readouterr().out
    assert "2 artifact(s)" in out and S3_SECRET not in out
    assert main(["cache", "verify", *args]) == 0


def test_cli_cache_bad_input_exits_2(tmp_path, capsys):
    assert main(["cache", "prune", "--store", str(tmp_path), "--older-than", "soon"]) == 2
    assert "--older-than 'soon'" in capsys.readouterr().err
    assert main(["cache", "list", "--store", str(tmp_path), "--storage-options", "{bad"]) == 2
    assert "--storage-options" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["list", "verify", "prune"])
def test_cli_cache_help(action):
    result = subprocess.run([sys.executable, "-m", "vertebrae.cli.main", "cache", action, "--help"], capture_output=True,
                            text=True, check=True)
    assert "--store" in result.stdout and result.stdout.startswith("usage: ")

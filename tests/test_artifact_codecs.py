"""Artifact codecs and manifests: exact round trips, strict formats, nothing that needs pickle."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from vertebrae.artifacts import Manifest, StoredArtifact, decode_artifact, encode_artifact
from vertebrae.artifacts.manifest import check_key
from vertebrae.errors import ArtifactError, ArtifactIntegrityError


def _csr(seed: int = 0, dtype=np.float32) -> sp.csr_matrix:
    return sp.random(300, 120, density=0.05, format="csr", random_state=seed, dtype=dtype)


@pytest.mark.parametrize("array", [
    np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32),
    np.random.default_rng(1).normal(size=(7, 3, 2)),
    np.arange(-50, 50, dtype=np.int64).reshape(10, 10),
    np.arange(12, dtype=np.uint8),
    np.asfortranarray(np.random.default_rng(2).normal(size=(9, 4))),
    np.array([[True, False], [False, True]]),
    np.zeros((0, 384), dtype=np.float32),
], ids=["float32", "float64-3d", "int64", "uint8", "fortran", "bool", "empty"])
def test_dense_round_trip_keeps_values_dtype_and_shape(array):
    files = encode_artifact(StoredArtifact("embedding", {"matrix": array}))
    assert sorted(files) == ["document.json", "matrix.npy"]
    # The file is a standard .npy: numpy itself reads it back identically.
    np.testing.assert_array_equal(np.load(io.BytesIO(files["matrix.npy"]), allow_pickle=False), array)
    back = decode_artifact("embedding", {name: bytearray(data) for name, data in files.items()})
    assert back.arrays["matrix"].dtype == array.dtype and back.arrays["matrix"].shape == array.shape
    np.testing.assert_array_equal(back.arrays["matrix"], array)
    assert back.arrays["matrix"].flags.writeable  # decoded from a bytearray: usable like any array


@pytest.mark.parametrize("matrix", [_csr(), _csr(3, np.float64), sp.csr_array(_csr(4)),
                                    sp.csr_matrix((5, 7), dtype=np.int32)], ids=["f32", "f64", "csr_array", "empty"])
def test_csr_round_trip_stays_sparse_with_equal_data(matrix):
    files = encode_artifact(StoredArtifact("embedding", {"matrix": matrix}))
    assert sorted(files) == ["document.json", "matrix.npz"]
    back = decode_artifact("embedding", files).arrays["matrix"]
    assert sp.issparse(back) and back.format == "csr" and back.dtype == matrix.dtype and back.shape == matrix.shape
    np.testing.assert_array_equal(back.data, matrix.data)
    np.testing.assert_array_equal(back.indices, matrix.indices)
    np.testing.assert_array_equal(back.indptr, matrix.indptr)
    # The .npz is a plain numpy archive of the CSR parts.
    with np.load(io.BytesIO(files["matrix.npz"]), allow_pickle=False) as archive:
        assert sorted(archive.files) == ["data", "indices", "indptr", "shape"]
        assert archive["shape"].tolist() == list(matrix.shape)


def test_encoding_is_deterministic():
    artifact = StoredArtifact("embedding", {"a": _csr(), "b": np.ones((3, 3))}, {"z": 1, "a": [1, 2]})
    assert encode_artifact(artifact) == encode_artifact(artifact)


def test_document_round_trips_the_codec_typed_values():
    document = {"int_keys": {1: "one", 2: "two"}, "set": {3, 1, 2}, "array": np.arange(6, dtype=np.int16).reshape(2, 3),
                "sparse": _csr(5), "nested": {"float": 0.125, "none": None, "bool": True, "text": "é"}}
    back = decode_artifact("score", encode_artifact(StoredArtifact("score", {}, document))).document
    assert back["int_keys"] == {1: "one", 2: "two"} and back["set"] == {1, 2, 3}
    assert back["array"].dtype == np.int16
    np.testing.assert_array_equal(back["array"], document["array"])
    assert (back["sparse"] != document["sparse"]).nnz == 0
    assert back["nested"] == document["nested"]


def test_non_finite_document_values_are_rejected_both_ways():
    with pytest.raises(ArtifactError, match="non-finite"):
        encode_artifact(StoredArtifact("score", {}, {"value": float("nan")}))
    files = encode_artifact(StoredArtifact("score", {}, {"value": 1.0}))
    files["document.json"] = b'{"value": NaN}'
    with pytest.raises(ArtifactIntegrityError, match="strict JSON"):
        decode_artifact("score", files)


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", "x" * 129, "a b", 3])
def test_array_names_that_are_not_plain_file_names_are_rejected(name):
    with pytest.raises(ArtifactError, match="array name"):
        StoredArtifact("embedding", {name: np.ones(2)})


def test_unsafe_or_unsupported_arrays_are_rejected_on_write():
    with pytest.raises(ArtifactError, match="pickle"):
        StoredArtifact("embedding", {"m": np.array([{"a": 1}, None], dtype=object)})
    with pytest.raises(ArtifactError, match="only CSR"):
        StoredArtifact("embedding", {"m": _csr().tocoo()})
    with pytest.raises(ArtifactError, match="numpy.ndarray"):
        StoredArtifact("embedding", {"m": [[1.0, 2.0]]})
    with pytest.raises(ArtifactError, match="kind"):
        StoredArtifact("Embedding/../x", {})


def test_runtimes_are_refused_inside_artifacts():
    with pytest.raises(ArtifactError, match="runtimes are recorded beside artifacts"):
        StoredArtifact("embedding", {}, {"timing": {"seconds": 1.0}})


class _Exploit:
    """Unpickling this would create ``marker``: proof that code ran."""

    marker: list = []

    def __reduce__(self):
        return (_Exploit.marker.append, ("executed",))


def test_pickled_npy_is_never_unpickled():
    buffer = io.BytesIO()
    np.save(buffer, np.array([_Exploit()], dtype=object), allow_pickle=True)
    files = encode_artifact(StoredArtifact("embedding", {"m": np.ones(2)}))
    files["m.npy"] = buffer.getvalue()
    with pytest.raises(ArtifactIntegrityError, match="pickle"):
        decode_artifact("embedding", files)
    assert _Exploit.marker == []


def test_pickled_npz_member_is_never_unpickled():
    files = encode_artifact(StoredArtifact("embedding", {"m": _csr()}))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for field in ("indices", "indptr", "shape"):
            archive.writestr(f"{field}.npy", zipfile.ZipFile(io.BytesIO(files["m.npz"])).read(f"{field}.npy"))
        member = io.BytesIO()
        np.save(member, np.array([_Exploit()], dtype=object), allow_pickle=True)
        archive.writestr("data.npy", member.getvalue())
    files["m.npz"] = buffer.getvalue()
    with pytest.raises(ArtifactIntegrityError, match="CSR"):
        decode_artifact("embedding", files)
    assert _Exploit.marker == []


def test_truncated_and_padded_npy_are_rejected():
    files = encode_artifact(StoredArtifact("embedding", {"m": np.arange(100.0)}))
    for data in (files["m.npy"][:-8], files["m.npy"] + b"\0" * 8, files["m.npy"][:20]):
        with pytest.raises(ArtifactIntegrityError, match="m.npy"):
            decode_artifact("embedding", {**files, "m.npy": data})


def test_invalid_csr_structure_is_rejected():
    matrix = _csr()
    files = encode_artifact(StoredArtifact("embedding", {"m": matrix}))
    broken = sp.csr_matrix(matrix, copy=True)
    broken.indices[0] = 10_000  # a column outside the shape
    bad = encode_artifact(StoredArtifact("embedding", {"m": broken}))["m.npz"]
    with pytest.raises(ArtifactIntegrityError, match="CSR"):
        decode_artifact("embedding", {**files, "m.npz": bad})


@pytest.mark.parametrize("key", ["extract/0123456789abcdef", "score_x/" + "a" * 64])
def test_valid_keys(key):
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["../0123456789abcdef", "/extract/0123456789abcdef", "extract/../0123456789abcdef",
                                 "extract/0123456789abcdef/..", "extract/0123456789ABCDEF", "extract/0123",
                                 "extract/" + "a" * 65, "Extract/0123456789abcdef", "extract\\0123456789abcdef",
                                 "extract/0123456789abcdef/x", "extract", None])
def test_keys_that_could_escape_the_store_are_rejected(key):
    with pytest.raises(ArtifactError, match="artifact key"):
        check_key(key)


def _manifest_dict() -> dict:
    sha = "ab" * 32
    return {"schema_version": 1, "key": "extract/0123456789abcdef", "kind": "embedding",
            "created_at": "2026-12-01T00:00:00.000000Z",
            "files": {f"m.{sha[:16]}.npy": {"bytes": 10, "sha256": sha},
                      f"document.{'cd' * 8}.json": {"bytes": 3, "sha256": "cd" * 32}},
            "arrays": {"m": {"shape": [2], "dtype": "<f8", "sparse": False, "nnz": None, "nbytes": 16,
                             "file": f"m.{sha[:16]}.npy"}},
            "versions": {"vertebrae": "0.1.0"}, "metadata": {"labels": {1: "a"}}}


def test_manifest_json_round_trip():
    manifest = Manifest.from_dict(_manifest_dict())
    again = Manifest.from_json(manifest.to_json())
    assert again == manifest and again.metadata == {"labels": {1: "a"}}
    assert json.loads(manifest.to_json())["files"] == _manifest_dict()["files"]


@pytest.mark.parametrize("change", [
    lambda d: d["files"].update({"../../evil.ab" + "ab" * 7 + ".npy": {"bytes": 1, "sha256": "ab" * 32}}),
    lambda d: d["files"].update({"/etc/passwd": {"bytes": 1, "sha256": "ab" * 32}}),
    lambda d: d["files"].update({"sub/m.abababababababab.npy": {"bytes": 1, "sha256": "ab" * 32}}),
    lambda d: d["arrays"]["m"].update(file="../m.abababababababab.npy"),
    lambda d: d.update(key="extract/../../../etc"),
    lambda d: d["files"][next(iter(d["files"]))].update(sha256="00" * 32),
    lambda d: d["files"][next(iter(d["files"]))].update(bytes=-1),
    lambda d: d.update(schema_version=99),
    lambda d: d.update(extra=1),
    lambda d: d.pop("files"),
    lambda d: d["metadata"].update(runtime_seconds=3.0),
], ids=["dotdot", "absolute", "subfolder", "array-file", "key", "sha-vs-name", "size", "schema", "unknown",
        "missing", "runtime"])
def test_malicious_or_malformed_manifests_are_rejected(change):
    data = _manifest_dict()
    change(data)
    with pytest.raises(ArtifactIntegrityError):
        Manifest.from_json(json.dumps(data))

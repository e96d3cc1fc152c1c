"""The screening rung loop's increment store (vertebrae.selection.screening_spill): increments on disk, read back bit for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy import sparse

from vertebrae.families.embedding_set import Embedding, EmbeddingSet
from vertebrae.selection.screening_spill import IncrementStore


def _set(**parts) -> EmbeddingSet:
    return EmbeddingSet({None if name == "none" else name: Embedding(matrix, {}) for name, matrix in parts.items()})


@pytest.fixture
def store():
    held = IncrementStore()
    yield held
    held.close()


def test_increments_are_files_and_read_back_bit_for_bit_in_rung_order(store):
    rng = np.random.default_rng(0)
    first, second = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    store.add("x", _set(a=first, b=first[:, :1].astype(np.float64)))
    store.add("x", _set(a=second, b=second[:, :1].astype(np.float64)))
    assert len(os.listdir(store.folder)) == 4  # one file per output per increment: nothing kept in memory
    a = store.rows("x", "a")
    assert type(a) is np.ndarray and a.dtype == np.float32  # a plain array, not a view of the memory-mapped file
    assert a.tobytes() == np.concatenate([first, second]).tobytes()
    b = store.rows("x", "b")
    assert b.dtype == np.float64 and b.tobytes() == np.concatenate([first[:, :1], second[:, :1]]).astype(np.float64).tobytes()
    assert store.outputs("x") == ["a", "b"]


def test_a_single_output_and_sparse_increments_round_trip(store):
    dense = np.arange(12, dtype=np.float32).reshape(4, 3)
    store.add("plain", _set(none=dense))
    store.add("plain", _set(none=dense + 1))
    assert store.outputs("plain") == [None]
    assert np.array_equal(store.rows("plain", None), np.concatenate([dense, dense + 1]))
    one, two = sparse.random(4, 6, density=0.5, format="csr", random_state=1), sparse.random(2, 6, density=0.5,
                                                                                           format="csr", random_state=2)
    store.add("tfidf", _set(none=one))
    store.add("tfidf", _set(none=two))
    rows = store.rows("tfidf", None)
    assert sparse.issparse(rows) and (rows != sparse.vstack([one, two])).nnz == 0


def test_dropped_extractors_lose_their_files_and_close_removes_the_folder():
    store = IncrementStore()
    for name in ("kept", "dropped"):
        store.add(name, _set(a=np.ones((3, 2), dtype=np.float32)))
    store.keep_only({"kept"})
    assert len(os.listdir(store.folder)) == 1 and store.outputs("kept") == ["a"]
    with pytest.raises(KeyError):
        store.outputs("dropped")
    store.close()
    assert not os.path.exists(store.folder)

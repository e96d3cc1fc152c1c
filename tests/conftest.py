"""Shared fixtures: small, seeded data sets; real dependencies everywhere."""

from __future__ import annotations

import numpy as np
import pytest

from vertebrae import BenchmarkDataset, DatasetIdentity


def gaussian_classes(n_per_class: int = 60, n_classes: int = 3, dim: int = 8, spread: float = 3.0,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs, one per class, float32; class c has label c (int)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, spread, size=(n_classes, dim))
    X = np.vstack([rng.normal(centers[c], 1.0, size=(n_per_class, dim)) for c in range(n_classes)])
    y = np.repeat(np.arange(n_classes), n_per_class)
    return X.astype(np.float32), y


@pytest.fixture
def blobs() -> tuple[np.ndarray, np.ndarray]:
    return gaussian_classes()


@pytest.fixture
def identity() -> DatasetIdentity:
    return DatasetIdentity.declared("test-data", "1")


@pytest.fixture
def blob_dataset(blobs, identity) -> BenchmarkDataset:
    X, y = blobs
    return BenchmarkDataset.from_embeddings(X, y, identity=identity)


@pytest.fixture(scope="session")
def dask_client():
    """One LocalCluster for the session (components.md section 5): 2 single-threaded worker processes."""
    import logging

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        yield client

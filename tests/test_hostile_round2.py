"""Hostile input, round two (issue 38, items 1, 2, 3, 5, 6 and 10): signed plan files, special files that never hang
a reader, file names that are not UTF-8, links out of a store seen by `cache verify`/`list`, distinct rows at extreme
scales, and the small ones.  Real FIFOs (os.mkfifo), real links, real undecodable names (bytes paths) and real
`vertebrae` processes under a timeout, so a hang fails the test instead of blocking it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity
from vertebrae.inputs.embeddings import distinct_rows

from .conftest import gaussian_classes

SRC = str(pathlib.Path(__file__).resolve().parents[1] / "src")
#: A hang fails here instead of blocking the suite.
TIMEOUT_S = 60


def vertebrae_cli(*args: str, cwd: pathlib.Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``vertebrae ARGS`` as its own process, this checkout's code, under a timeout."""
    environment = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run([sys.executable, "-m", "vertebrae.cli.main", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


# ---------------------------------------------------------------- item 6: distinct rows at extreme scales
@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e-310])  # 1e-310 is subnormal
@pytest.mark.parametrize("sparse", [False, True])
def test_distinct_rows_are_counted_at_any_scale(scale, sparse):
    """60 distinct directions, each also as its double: 60 points after normalization, 120 without (hand-derived).
    Squaring before scaling saw 1 point at 1e+-300 and in subnormals."""
    X = np.random.default_rng(3).normal(size=(60, 8))
    M = np.vstack([X, 2 * X]) * scale
    M = sp.csr_matrix(M) if sparse else M
    assert distinct_rows(M, normalize=True) == 60
    assert distinct_rows(M) == 120


def identity_map(X):
    """The inputs as they are (module level, so its identity is its source)."""
    return np.asarray(X)


def test_no_collapse_warning_for_a_well_spread_space_at_1e300():
    X, y = gaussian_classes(n_per_class=30, dim=6)
    data = BenchmarkDataset.from_arrays(X.astype(np.float64) * 1e300, y, identity=DatasetIdentity.declared("huge", "1"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Benchmark(data, [CallableExtractor("same", identity_map)], progress=False,
                           separatix_config=None).run()
    assert not [w for w in caught if "distinct" in str(w.message)]
    assert result.extractor_results[0].overlap.metadata["distinct_rows"] == 90

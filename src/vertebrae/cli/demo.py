"""The bundled demo: five extractors on scikit-learn's digits (no download needed).

Raw pixels, PCA-16, a Gaussian random projection to 16 dimensions, pixels with
heavy seeded noise, and PCA-2 — a spread from strong to weak representations, so
the ranking shows what vertebrae reports.
"""

from __future__ import annotations

import numpy as np

from ..artifacts.cache import CacheConfig
from ..families.labeled.benchmark import Benchmark
from ..inputs.datasets import BenchmarkDataset
from ..extractors import CallableExtractor, PrecomputedExtractor, SklearnExtractor
from ..inputs.identity import DatasetIdentity
from ..scoring.stability import StabilityConfig

NOISE_STD = 6.0


def noisy_pixels(X: np.ndarray) -> np.ndarray:
    """Pixels (0-16) plus seeded Gaussian noise: a deliberately degraded representation."""
    rng = np.random.default_rng(0)
    return (X + rng.normal(0.0, NOISE_STD, size=X.shape)).astype(np.float32)


def demo_benchmark(progress: bool | None = None, cache_config: CacheConfig | None = None) -> Benchmark:
    """The digits demo; ``cache_config`` (``vertebrae demo --cache``) reuses its embeddings across runs."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    from sklearn.random_projection import GaussianRandomProjection

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("sklearn-digits", "1797x64"),
                                           name="sklearn digits")
    extractors = [
        PrecomputedExtractor("raw_pixels", X),
        SklearnExtractor("pca_16", PCA(n_components=16, random_state=0)),
        SklearnExtractor("random_projection_16", GaussianRandomProjection(n_components=16, random_state=0)),
        CallableExtractor("noisy_pixels", noisy_pixels, params={"noise_std": NOISE_STD, "seed": 0},
                          cache_identity="vertebrae.cli.demo.noisy_pixels-v1"),
        SklearnExtractor("pca_2", PCA(n_components=2, random_state=0)),
    ]
    # adaptive stability repeats: enough paired repeats to say which differences are real, and no more
    return Benchmark(dataset, extractors, stability_config=StabilityConfig(repeats="auto"), progress=progress,
                     cache_config=cache_config)

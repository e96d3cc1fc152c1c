"""Settings and extractors that cannot work are refused when the benchmark is built, before any extractor runs
(the project's contract: a clear exception naming the argument and the fix, before expensive work starts)."""

from __future__ import annotations

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, PrecomputedExtractor
from vertebrae.errors import ConfigError, InputValidationError
from vertebrae.extractors.compression import EmbeddingCompressionConfig

X = np.random.default_rng(0).normal(size=(60, 5)) + np.repeat(np.arange(3), 20)[:, None]
y = np.repeat([0, 1, 2], 20)


def dataset() -> BenchmarkDataset:
    return BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("preflight", "1"))


class TwoOutputs:
    """A multi-output extractor: results ``<name>:a`` and ``<name>:b``."""

    def __init__(self, name: str, outputs: tuple[str, ...] = ("a", "b")) -> None:
        self.name, self.outputs = name, outputs

    def fit(self, X, y=None):
        return self

    def output_names(self):
        return list(self.outputs)

    def transform_many(self, X):
        return {output: X for output in self.outputs}

    def transform(self, X):
        return X

    def recipe(self):
        return {"type": "two-outputs", "name": self.name}


# ---------------------------------------------------------------- item 1: result names are unique
def test_an_extractor_name_with_the_variant_separator_is_refused():
    with pytest.raises(InputValidationError, match=r"'a\+pca2' contains '\+'.*rename it, e.g. 'a-pca2'"):
        PrecomputedExtractor("a+pca2", X[:, :1])


def test_an_extractor_named_like_another_ones_output_is_refused():
    with pytest.raises(ConfigError, match=r"extractors\[1\] \('net:a'\) and extractors\[0\] \('net', output 'a'\) "
                                          r"both make the result named 'net:a'; rename"):
        Benchmark(dataset(), [TwoOutputs("net"), PrecomputedExtractor("net:a")])


def test_an_output_named_like_another_outputs_variant_is_refused():
    compression = [EmbeddingCompressionConfig(), EmbeddingCompressionConfig(method="pca", n_components=2)]
    with pytest.raises(ConfigError, match=r"\('net', output 'b\+pca2'\) and extractors\[0\] \('net', output 'b', "
                                          r"compression 'pca2'\) both make the result named 'net:b\+pca2'"):
        Benchmark(dataset(), [TwoOutputs("net", ("b", "b+pca2"))], compression=compression)


def test_distinct_results_of_outputs_variants_and_extractors_pass():
    compression = [EmbeddingCompressionConfig(), EmbeddingCompressionConfig(method="pca", n_components=2)]
    bench = Benchmark(dataset(), [TwoOutputs("net"), PrecomputedExtractor("net:c")], compression=compression)
    assert [chain.name for chain in bench.chains()] == ["net:a", "net:a+pca2", "net:b", "net:b+pca2", "net:c",
                                                        "net:c+pca2"]


# ---------------------------------------------------------------- item 2: precomputed matrices fit the dataset
def slow_identity(X):
    """Stands for an expensive extractor that must not run before a later extractor's refusal."""
    raise AssertionError("an extractor ran before the benchmark was refused")


def test_a_precomputed_matrix_with_the_wrong_row_count_is_refused_before_any_extractor_runs():
    with pytest.raises(InputValidationError, match=r"extractors\[1\] PrecomputedExtractor 'w' holds 50 rows but the "
                                                   r"dataset has 60; pass one embedding row per sample"):
        Benchmark(dataset(), [CallableExtractor("slow", slow_identity), PrecomputedExtractor("w", X[:50])])


def test_a_precomputed_extractor_without_a_matrix_on_a_text_dataset_is_refused():
    texts = BenchmarkDataset.from_arrays([f"text {i}" for i in range(60)], y,
                                         identity=DatasetIdentity.declared("texts", "1"))
    with pytest.raises(InputValidationError, match=r"extractors\[0\] PrecomputedExtractor 'p' has no embeddings of its "
                                                   r"own.*not an embedding matrix.*pass embeddings=\.\.\."):
        Benchmark(texts, [PrecomputedExtractor("p")])
    numeric = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("numeric", "1"))
    assert Benchmark(numeric, [PrecomputedExtractor("p")]).extractors[0].name == "p"  # a numeric matrix passes through

"""Model extractors inside a Benchmark: named outputs become separate results, extraction runs once per parent."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, HFTextExtractor, OverlapScoringConfig,
                       SentenceTransformerExtractor, SeparatixConfig, TorchExtractor)
from vertebrae.scoring import OverlapIndexScorer

CONFIG = OverlapScoringConfig(k=2, min_samples_per_cluster=2)


class CountingHF(HFTextExtractor):
    """The real extractor; counts how often the benchmark asks it to embed."""

    passes = 0

    def _embed_all(self, X):
        type(self).passes += 1
        return super()._embed_all(X)


class Heads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(5, 4), nn.Linear(4, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        hidden = torch.tanh(self.body(x))
        return {"hidden": hidden, "logits": self.head(hidden)}


@pytest.fixture(scope="module")
def tweet_run(minilm_path, tweets):
    dataset = BenchmarkDataset.from_arrays(tweets.texts, tweets.labels,
                                           identity=DatasetIdentity.declared("tweets-36", "1"))
    extractor = CountingHF("minilm", minilm_path, hidden_layer=[3, -1], pooling=["mean", "cls"], batch_size=16,
                           device="cpu", progress=False)
    CountingHF.passes = 0
    result = Benchmark(dataset, [extractor], scoring_config=CONFIG, separatix_config=SeparatixConfig(enabled=False),
                       progress=False).run()
    return result, extractor, dataset


def test_each_named_output_is_its_own_result(tweet_run):
    result, extractor, _ = tweet_run
    assert sorted(r.name for r in result.extractor_results) == [
        "minilm:layer3_cls", "minilm:layer3_mean", "minilm:layer6_cls", "minilm:layer6_mean"]
    assert CountingHF.passes == 1  # one extraction for the four results
    embedding = result["minilm:layer3_mean"].embedding
    assert {k: embedding[k] for k in ("parent_extractor_name", "output_name", "hidden_layer", "pooling")} == {
        "parent_extractor_name": "minilm", "output_name": "layer3_mean", "hidden_layer": 3, "pooling": "mean"}
    frame = result.to_dataframe().set_index("extractor")
    assert frame.loc["minilm:layer6_cls", ["parent_extractor", "output_name", "hidden_layer", "pooling"]].tolist() == [
        "minilm", "layer6_cls", 6, "cls"]


def test_each_output_scores_like_the_scorer_on_that_matrix(tweet_run):
    result, extractor, dataset = tweet_run
    outputs = extractor.transform_many(dataset.inputs)
    scorer = OverlapIndexScorer(CONFIG)
    for name, matrix in outputs.items():
        assert result[f"minilm:{name}"].overlap.score == scorer.score(matrix, dataset.targets).score


def test_torch_outputs_come_from_one_forward_pass_per_batch():
    X = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
    y = np.repeat([0, 1], 20)
    model = Heads()
    extractor = TorchExtractor("heads", model, outputs=("hidden", "logits"), batch_size=10, device="cpu",
                               progress=False)
    result = Benchmark(BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("x", "1")), [extractor],
                       scoring_config=CONFIG, progress=False).run()
    assert model.calls == 4 and [r.name for r in result.extractor_results] == ["heads:hidden", "heads:logits"]
    assert result["heads:logits"].embedding["embedding_dim"] == 3


def test_single_output_extractors_keep_their_name(minilm, tweets):
    dataset = BenchmarkDataset.from_arrays(tweets.texts, tweets.labels, identity=DatasetIdentity.declared("t", "1"))
    result = Benchmark(dataset, [SentenceTransformerExtractor("st", minilm, batch_size=16, progress=False)],
                       scoring_config=CONFIG, progress=False).run()
    assert [r.name for r in result.extractor_results] == ["st"]
    assert "output_name" not in result["st"].embedding


def test_planning_a_benchmark_of_path_models_imports_no_framework(minilm_path):
    code = ("import sys; from vertebrae import *; "
            "ds = BenchmarkDataset.from_arrays(['a b', 'c d', 'e f', 'g h'], [0, 0, 1, 1], "
            "identity=DatasetIdentity.declared('d', '1')); "
            f"p = {str(minilm_path)!r}; "
            "plan = Benchmark(ds, [HFTextExtractor('h', p, hidden_layer=[1, 2]), SentenceTransformerExtractor('s', p)]"
            ").plan(); print(len(plan.jobs) > 0, sorted(m for m in ('torch', 'transformers', "
            "'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True []"

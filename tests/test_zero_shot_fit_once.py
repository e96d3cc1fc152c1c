"""A fitted zero-shot encoder is fitted once per run, and both branches read that one fit (issue 25, item 2).

The probe is an unseeded ``GaussianRandomProjection`` of word counts: every fit draws a new
random matrix, so two fits put the samples and the prompts in unrelated spaces (top-1 near
chance, 1/3), while any single fit keeps the classes apart.  With 15 vocabulary words
projected to 1,000 dimensions, a sample's cosine to its own class prototype is about 0.77
and to the others about 0 (noise about 1/sqrt(1000) = 0.03), so one shared fit gives top-1 =
1 whichever matrix was drawn, locally and on every runner.
"""

from __future__ import annotations

import warnings

from sklearn.exceptions import DataDimensionalityWarning
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.pipeline import make_pipeline
from sklearn.random_projection import GaussianRandomProjection

from tests.test_zero_shot_benchmark import WORDS, text_dataset
from vertebrae import SklearnExtractor, ZeroShotBenchmark, ZeroShotConfig
from vertebrae.errors import DataWarning, ScoringWarning
from vertebrae.execution import DaskRunner

VOCABULARY = sorted(w for words in WORDS.values() for w in words)


def unseeded_projections() -> list[SklearnExtractor]:
    """Three unseeded projections (three chains, so the branch jobs spread over the workers)."""
    return [SklearnExtractor(f"proj{n}", make_pipeline(CountVectorizer(vocabulary=VOCABULARY),
                                                       GaussianRandomProjection(n, random_state=None)))
            for n in (1000, 1001, 1002)]


def top1(runner=None) -> dict[str, float]:
    benchmark = ZeroShotBenchmark(text_dataset(), unseeded_projections(), config=ZeroShotConfig(top_k=(1, 2)),
                                  progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning, DataDimensionalityWarning))
        result = benchmark.run(runner)
    return {r.name: r.scores["top1_accuracy"] for r in result.extractor_results}


def test_the_unseeded_projection_is_fitted_once_locally_and_on_a_local_cluster(dask_client):
    expected = {"proj1000": 1.0, "proj1001": 1.0, "proj1002": 1.0}
    assert top1() == expected
    assert top1(DaskRunner(dask_client)) == expected


def test_one_fit_per_encoder_is_what_both_branch_jobs_read():
    fits = []

    class Recording(SklearnExtractor):
        def fit(self, X, y=None):
            fits.append(len(X))
            return super().fit(X, y)

    extractor = Recording("proj", make_pipeline(CountVectorizer(vocabulary=VOCABULARY),
                                                GaussianRandomProjection(1000, random_state=None)))
    benchmark = ZeroShotBenchmark(text_dataset(), [extractor], progress=False)
    plan = benchmark.plan()
    [fit] = [job for job in plan.jobs if job.stage == "fit"]
    assert {job.stage for job in plan.jobs if fit.key in job.needs.values()} == {"encode_samples", "encode_prompts"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning, DataDimensionalityWarning))
        result = benchmark.run()
    assert fits == [36] and result["proj"].scores["top1_accuracy"] == 1.0
    assert "fit" in result["proj"].runtime



def test_the_unseeded_projection_is_never_cache_eligible():
    benchmark = ZeroShotBenchmark(text_dataset(), unseeded_projections()[:1], config=ZeroShotConfig(top_k=(1, 2)),
                                  progress=False)
    encodes = [job for job in benchmark.plan().jobs if job.stage.startswith("encode_")]
    assert len(encodes) == 2 and not any(job.cache_eligible for job in encodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning, DataDimensionalityWarning))
        embedding = benchmark.run()["proj1000"].embedding
    assert [embedding[b]["cache_eligible"] for b in ("samples", "prompts")] == [False, False]
    assert {embedding[b]["cache_status"] for b in ("samples", "prompts")} == {"bypassed_unsafe_identity"}

"""Endpoint resource profiles (issue 26 items 17 and 18): zero-shot samples/prompts and retrieval query/gallery.

Each branch's profile is checked against what the run really did: the rows and characters it was given,
the bytes of the matrix it returned (rows x dim x itemsize), the object the store holds, the cache status
of its encode job, and the modality the encoder declares.  Real encoders (a bag-of-words text model, a
scikit-learn pipeline), a real folder store and a real 2-worker dask cluster.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline

from tests.test_zero_shot_benchmark import WordCounter, text_dataset, texts_and_labels
from vertebrae import (DatasetIdentity, DistributedResourceProfile, EmbeddingCompressionConfig,
                           LocalResourceProfile, PrecomputedZeroShotEncoder, ResourceProfilingConfig, TextEncoder,
                           ZeroShotBenchmark, ZeroShotBenchmarkResult)
from vertebrae.artifacts.codecs import output_array
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.errors import ConfigTypeError, SerializationError
from vertebrae.execution import DaskRunner
from vertebrae.extractors import SklearnExtractor
from vertebrae.extractors.profiling import ENCODE_CALL
from vertebrae.inputs.images import in_memory_images
from vertebrae._base.profile_records import CACHE_HIT
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalBenchmarkResult,
                                              RetrievalConfig, RetrievalDataset, TwoBranchExtractor)
from vertebrae.families.zero_shot import ExtractorEncoder

#: The tiny dataset reduces OverlapIndex's k and makes top-5 trivial: warned, and beside the point here.
pytestmark = [pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning"),
              pytest.mark.filterwarnings("ignore::vertebrae.errors.DataWarning")]
PROFILED = ResourceProfilingConfig()
N_SAMPLES, N_PROMPTS = 36, 3  # text_dataset(): 3 classes x 12 texts, one prompt per class
ENDPOINT_COLUMNS = ("branch", "modality", "cache_status", "measurement_scope")


def tfidf_encoder() -> ExtractorEncoder:
    pipeline = make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=4, random_state=0))
    return ExtractorEncoder(SklearnExtractor("tfidf", pipeline))


def zero_shot(encoders, **kwargs) -> ZeroShotBenchmarkResult:
    return ZeroShotBenchmark(text_dataset(), encoders, progress=False, **kwargs).run()


@pytest.fixture(scope="module")
def zero_shot_run():
    samples = np.random.default_rng(1).normal(size=(N_SAMPLES, 6))
    precomputed = PrecomputedZeroShotEncoder("pre", samples, np.eye(N_PROMPTS, 6), modalities={"samples": "image"})
    return zero_shot([TextEncoder("words", WordCounter()), tfidf_encoder(), precomputed],
                     resource_profiling=PROFILED)


def test_zero_shot_profiles_each_branch_against_its_embedding(zero_shot_run):
    texts, _ = texts_and_labels()
    prompts = text_dataset().flat_prompts
    for name, dim, itemsize in (("words", 15, 4), ("tfidf", 4, 8), ("pre", 6, 8)):
        result = zero_shot_run[name]
        assert set(result.resource_profile) == {"samples", "prompts"}
        for branch, rows in (("samples", N_SAMPLES), ("prompts", N_PROMPTS)):
            profile = result.resource_profile[branch]
            assert type(profile) is LocalResourceProfile and profile["status"] == "measured"
            facts = result.embedding[branch]
            assert (facts["n_samples"], facts["embedding_dim"], np.dtype(facts["dtype"]).itemsize) == (rows, dim,
                                                                                                     itemsize)
            assert profile["throughput"]["samples"] == rows == profile["context"]["workload"]["rows"]
            assert profile["latency"]["calls"] == 1 and profile["latency"]["first_call_rows"] == rows
            assert profile["embedding_bytes"]["raw_logical_bytes"] == rows * dim * itemsize
            assert profile["embedding_bytes"]["evaluated_logical_bytes"] == rows * dim * itemsize
            # The measured call is inside the stage's own timing of it.
            assert 0 < profile["throughput"]["wall_seconds"] <= result.runtime[f"encode_{branch}"]
            assert profile["context"]["branch"] == branch
            assert profile["context"]["measurement_scope"] == ENCODE_CALL
    words = zero_shot_run["words"].resource_profile
    assert words["samples"]["context"]["workload"]["total_characters"] == sum(len(t) for t in texts)
    assert words["prompts"]["context"]["workload"]["total_characters"] == sum(len(p) for p in prompts)
    # Modality as each encoder declares it; cache status of each branch's encode job (no cache: an encoder
    # without identity is bypassed, the others disabled).
    assert [(name, branch, zero_shot_run[name].resource_profile[branch]["context"]["modality"],
             zero_shot_run[name].resource_profile[branch]["context"]["cache_status"])
            for name in ("words", "pre") for branch in ("samples", "prompts")] == [
        ("words", "samples", "text", "bypassed_unsafe_identity"),
        ("words", "prompts", "text", "bypassed_unsafe_identity"),
        ("pre", "samples", "image", "disabled"), ("pre", "prompts", "text", "disabled")]


def test_zero_shot_profiles_reach_the_dataframe_markdown_and_reload_typed(zero_shot_run):
    row = zero_shot_run.to_dataframe().set_index("extractor").loc["pre"]
    profiles = zero_shot_run["pre"].resource_profile
    for branch in ("samples", "prompts"):
        assert row[f"{branch}.resource.samples_per_second"] == profiles[branch]["throughput"]["samples_per_second"]
        assert row[f"{branch}.resource.evaluated_logical_bytes"] == profiles[branch]["embedding_bytes"][
            "evaluated_logical_bytes"]
        for field in ENDPOINT_COLUMNS:
            assert row[f"{branch}.resource.{field}"] == profiles[branch]["context"][field]
    assert row["samples.resource.modality"] == "image" and row["samples.resource.branch"] == "samples"
    markdown = zero_shot_run.to_markdown().split("## Quality cohort resources")[1]
    assert "| modality | cache | scope |" in markdown
    assert "| words | samples |" in markdown and "| words | prompts |" in markdown

    text = zero_shot_run.to_json()
    loaded = ZeroShotBenchmarkResult.from_json(text)
    assert {branch: type(p) for branch, p in loaded["words"].resource_profile.items()} == {
        "samples": LocalResourceProfile, "prompts": LocalResourceProfile}
    assert loaded["words"].resource_profile == zero_shot_run["words"].resource_profile
    assert loaded.to_json() == text
    data = json.loads(text)
    data["extractor_results"][0]["resource_profile"]["prompts"]["latency"]["warm_mode"] = 1.0
    with pytest.raises(SerializationError, match=r"\$\.extractor_results\[0\]\.resource_profile\.prompts\.latency: "
                                                 r"unknown field\(s\) \['warm_mode'\]"):
        ZeroShotBenchmarkResult.from_dict(data)


def test_zero_shot_profiling_off_and_bad_config():
    result = zero_shot([TextEncoder("words", WordCounter())])
    assert result["words"].resource_profile is None and "resource_profile" not in result.to_json()
    assert not any(".resource." in column for column in result.to_dataframe().columns)
    assert "Quality cohort resources" not in result.to_markdown()
    with pytest.raises(ConfigTypeError, match="ZeroShotBenchmark: resource_profiling"):
        ZeroShotBenchmark(text_dataset(), [TextEncoder("words", WordCounter())], resource_profiling=True)


def test_profiling_leaves_the_zero_shot_keys_unchanged():
    encoders = [tfidf_encoder()]
    off = ZeroShotBenchmark(text_dataset(), encoders).plan()
    on = ZeroShotBenchmark(text_dataset(), encoders, resource_profiling=PROFILED).plan()
    assert [job.key for job in on.jobs] == [job.key for job in off.jobs]


def test_zero_shot_cache_hit_is_not_measured_and_keeps_the_stored_bytes(tmp_path):
    """Cold run measures and stores each branch; the warm run reads both from the store: nothing measured."""
    def run():
        encoder = TextEncoder("words", WordCounter(), cache_identity="word-counter-1")
        pca = EmbeddingCompressionConfig(method="pca", n_components=2, random_state=0)
        return zero_shot([encoder], resource_profiling=PROFILED, cache_config=CacheConfig(store=str(tmp_path)),
                         compression=[pca])["words+pca2"]

    cold, warm = run(), run()
    for branch, rows in (("samples", N_SAMPLES), ("prompts", N_PROMPTS)):
        stored = list((tmp_path / cold.artifact_keys[f"encode_{branch}"]).glob(f"{output_array(branch)}.*.npy"))
        assert len(stored) == 1
        measured, hit = cold.resource_profile[branch], warm.resource_profile[branch]
        assert measured["status"] == "measured" and measured["context"]["cache_status"] == "miss"
        assert measured["context"]["measurement_scope"] == ENCODE_CALL
        assert hit["status"] == CACHE_HIT and hit["latency"]["status"] == CACHE_HIT
        assert hit["context"]["cache_status"] == "hit" and hit["context"]["measurement_scope"] == CACHE_HIT
        assert hit["context"]["branch"] == branch and hit["context"]["modality"] == "text"
        for profile in (measured, hit):  # raw: the stored encoding; evaluated: the 2-column PCA variant
            assert profile["embedding_bytes"]["raw_logical_bytes"] == rows * 15 * 4
            assert profile["embedding_bytes"]["evaluated_logical_bytes"] == rows * 2 * 4
            assert profile["embedding_bytes"]["persisted_status"] == "measured"
            assert profile["embedding_bytes"]["persisted_bytes"] == stored[0].stat().st_size


# ----------------------------------------------------------------------------- retrieval
def _queries(texts):
    return 2.0 * WordCounter().encode(texts)


def _gallery(images):
    """Each image's pixels, one row of 15 values (5 RGB pixels) like a query's 15 word counts."""
    return np.stack([np.asarray(image, dtype=np.float32).ravel() for image in images])


def retrieval_inputs() -> RetrievalDataset:
    """Text queries against a gallery of images (1 x 5 RGB pixels each), as the declared modalities say."""
    texts, _ = texts_and_labels()
    pixels = np.random.default_rng(3).integers(1, 256, size=(N_SAMPLES, 1, 5, 3), dtype=np.uint8)
    images = in_memory_images(list(pixels))
    return RetrievalDataset.from_inputs(texts[:8], images, relevance=[(i, i, 1) for i in range(8)],
                                        identity=DatasetIdentity.declared("endpoint-profiles", "1"))


def test_retrieval_endpoint_context_columns_and_typed_reload():
    two_branch = TwoBranchExtractor("two", _queries, _gallery)
    two_branch.modalities = {"query": "text", "gallery": "image"}
    result = RetrievalBenchmark(retrieval_inputs(), [two_branch], retrieval_config=RetrievalConfig(cutoffs=[1, 5]),
                                resource_profiling=PROFILED, progress=False).run()
    profiles = result["two"].resource_profile
    assert {side: {field: p["context"][field] for field in ENDPOINT_COLUMNS} for side, p in profiles.items()} == {
        "query": {"branch": "query", "modality": "text", "cache_status": "disabled", "measurement_scope": ENCODE_CALL},
        "gallery": {"branch": "gallery", "modality": "image", "cache_status": "disabled",
                    "measurement_scope": ENCODE_CALL}}
    assert profiles["query"]["embedding_bytes"]["evaluated_logical_bytes"] == 8 * 15 * 4
    assert profiles["gallery"]["embedding_bytes"]["evaluated_logical_bytes"] == N_SAMPLES * 15 * 4
    row = result.to_dataframe().iloc[0]
    for side in ("query", "gallery"):
        for field in ENDPOINT_COLUMNS:
            assert row[f"{side}.resource.{field}"] == profiles[side]["context"][field]
    markdown = result.to_markdown().split("## Quality cohort resources")[1]
    assert "| two | gallery |" in markdown and "| image | disabled | encode_call |" in markdown

    text = result.to_json()
    loaded = RetrievalBenchmarkResult.from_json(text)
    assert {side: type(p) for side, p in loaded["two"].resource_profile.items()} == {
        "query": LocalResourceProfile, "gallery": LocalResourceProfile}
    assert loaded["two"].resource_profile == profiles and loaded.to_json() == text
    data = json.loads(text)
    data["extractor_results"][0]["resource_profile"]["gallery"]["context"]["endpoint"] = "gallery"
    with pytest.raises(SerializationError, match=r"\$\.extractor_results\[0\]\.resource_profile\.gallery\.context: "
                                                 r"unknown field\(s\) \['endpoint'\]"):
        RetrievalBenchmarkResult.from_dict(data)


def test_retrieval_undeclared_modality_is_unknown_and_a_cache_hit_is_not_measured(tmp_path):
    rng = np.random.default_rng(2)
    queries, gallery = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(9, 3)).astype(np.float32)
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(5)],
                                               identity=DatasetIdentity.declared("endpoint-cache", "1"))

    def run():
        return RetrievalBenchmark(dataset, [PrecomputedPairExtractor("pair", queries, gallery)],
                                  retrieval_config=RetrievalConfig(cutoffs=[1]), resource_profiling=PROFILED,
                                  cache_config=CacheConfig(store=str(tmp_path)), progress=False).run()["pair"]

    cold, warm = run(), run()
    stored = {path.name.split(".")[0]: path.stat().st_size
              for path in (tmp_path / cold.artifact_keys["encode"]).glob("*.npy")}
    for side, rows in (("query", 5), ("gallery", 9)):
        measured, hit = cold.resource_profile[side], warm.resource_profile[side]
        assert measured["context"]["modality"] == "unknown" == hit["context"]["modality"]
        assert measured["context"]["cache_status"] == "miss" and measured["throughput"]["samples"] == rows
        assert hit["status"] == CACHE_HIT and hit["context"]["measurement_scope"] == CACHE_HIT
        assert hit["context"]["cache_status"] == "hit"
        for profile in (measured, hit):  # the stored object's real size, now also for retrieval
            assert profile["embedding_bytes"]["raw_logical_bytes"] == rows * 3 * 4
            assert profile["embedding_bytes"]["persisted_bytes"] == stored[output_array(side)]


# ----------------------------------------------------------------------------- a dask cluster
def test_zero_shot_branches_get_one_distributed_profile_each(dask_client):
    result = ZeroShotBenchmark(text_dataset(), [TextEncoder("words", WordCounter()), tfidf_encoder()],
                               resource_profiling=PROFILED, progress=False).run(runner=DaskRunner(dask_client))
    for name in ("words", "tfidf"):
        profiles = result[name].resource_profile
        assert {branch: (type(p), p["scope"], p["distributed"]["workers"], p["distributed"]["shards"],
                         p["throughput"]["samples"], p["context"]["branch"], p["context"]["measurement_scope"])
                for branch, p in profiles.items()} == {
            "samples": (DistributedResourceProfile, "distributed", 1, 1, N_SAMPLES, "samples", ENCODE_CALL),
            "prompts": (DistributedResourceProfile, "distributed", 1, 1, N_PROMPTS, "prompts", ENCODE_CALL)}
        for p in profiles.values():  # one measured call: the aggregate compute throughput is its own
            assert p["throughput"]["samples_per_second"] == pytest.approx(
                p["throughput"]["samples"] / p["throughput"]["compute_seconds"])
    loaded = ZeroShotBenchmarkResult.from_json(result.to_json())
    assert type(loaded["tfidf"].resource_profile["prompts"]) is DistributedResourceProfile
    row = result.to_dataframe().set_index("extractor").loc["tfidf"]
    assert row["samples.resource.workers"] == 1 and row["prompts.resource.throughput_kind"] == \
        "aggregate_worker_compute"
    assert "not cluster wall-clock throughput" in result.to_markdown()

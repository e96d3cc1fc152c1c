"""RetrievalBenchmark: extractor forms, configuration, validation before work, progress."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import StandardScaler

from vertebrae import DatasetIdentity
from vertebrae.errors import (ConfigError, DataWarning, ExtractorError, InputTypeError, InputValidationError,
                                  ScoringWarning)
from vertebrae.extractors import CallableExtractor, PrecomputedExtractor, SklearnExtractor
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalBenchmarkResult,
                                              RetrievalConfig, RetrievalDataset, TwoBranchExtractor)
from vertebrae.families.retrieval.extractors import check_endpoint_modalities
from vertebrae.inputs.images import in_memory_images

IDENTITY = DatasetIdentity.declared("retrieval-benchmark", "1")


def problem(n_queries: int = 12, n_gallery: int = 30, dim: int = 6, seed: int = 0):
    """Gallery items 0..n_queries-1 are noisy copies of the queries and relevant to them."""
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(n_queries, dim))
    gallery = rng.normal(size=(n_gallery, dim))
    gallery[:n_queries] = queries + 0.3 * rng.normal(size=(n_queries, dim))
    relevance = [(i, i, 2) for i in range(n_queries)] + [(i, n_queries + i % 5, 1) for i in range(n_queries)]
    return queries, gallery, relevance


def dataset(**kwargs) -> RetrievalDataset:
    queries, gallery, relevance = problem(**kwargs)
    return RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)


def run(data, extractors, **config) -> RetrievalBenchmarkResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return RetrievalBenchmark(data, extractors, retrieval_config=RetrievalConfig(cutoffs=[1, 5, 10], **config),
                                  progress=False).run()


# ----------------------------------------------------------------------------- the spec example
def test_spec_example_runs():
    rng = np.random.default_rng(0)
    query_embeddings, gallery_embeddings = rng.normal(size=(1, 4)), rng.normal(size=(1, 4))
    dataset = RetrievalDataset.from_embeddings(query_embeddings, gallery_embeddings,
                                               relevance=[("query-1", "document-9", 2.0)], query_ids=["query-1"],
                                               gallery_ids=["document-9"],
                                               identity=DatasetIdentity.declared("example-dataset", "1"))
    with pytest.warns(DataWarning, match="exceeds the gallery size"):
        result = RetrievalBenchmark(dataset, [PrecomputedExtractor("candidate")],
                                    retrieval_config=RetrievalConfig(primary_metric="ndcg@10")).run()
    entry = result["candidate"]
    assert entry.primary_score == 1.0 and entry.forward.metrics["mrr"] == 1.0 and entry.reverse is None
    assert result.protocol["fingerprint"] == dataset.fingerprint


# ----------------------------------------------------------------------------- extractor forms
def test_precomputed_dataset_embeddings_and_pair_extractor_agree():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)
    random_queries = np.random.default_rng(5).normal(size=queries.shape)
    result = run(data, [PrecomputedExtractor("own"), PrecomputedPairExtractor("pair", queries, gallery),
                        PrecomputedPairExtractor("noise", random_queries, gallery)])
    assert result["own"].forward == result["pair"].forward
    assert result["own"].forward.metrics["mrr"] > result["noise"].forward.metrics["mrr"]
    assert result["pair"].recipe["type"] == "precomputed_pair"
    assert result["own"].recipe == {"type": "shared_space", "fit_on": "gallery",
                                    "extractor": {"type": "precomputed", "name": "own"}}


def test_standard_extractor_is_fitted_once_on_the_gallery_only():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries + 100.0, gallery, relevance=relevance, identity=IDENTITY)
    scaler = SklearnExtractor("scaled", StandardScaler())
    fits = []
    original_fit = scaler.fit
    scaler.fit = lambda X, y=None: (fits.append(np.array(X)), original_fit(X, y))[1]
    run(data, [scaler])
    assert len(fits) == 1 and np.array_equal(fits[0], gallery)
    assert np.allclose(scaler.fitted_.mean_, gallery.mean(axis=0))  # not shifted by the +100 queries


def test_two_branch_extractor_encodes_each_endpoint_with_its_own_function():
    queries, gallery, relevance = problem()
    rng = np.random.default_rng(3)
    w_query, w_gallery = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    seen = {}

    def encode_queries(X):
        seen["queries"] = X
        return X @ w_query

    def encode_gallery(X):
        seen["gallery"] = X
        return X @ w_gallery

    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    result = run(data, [TwoBranchExtractor("dual", encode_queries, encode_gallery, params={"dim": 4}),
                        PrecomputedPairExtractor("same", queries @ w_query, gallery @ w_gallery)])
    assert seen["queries"] is queries and seen["gallery"] is gallery
    assert result["dual"].forward == result["same"].forward
    assert result["dual"].recipe["query_callable"].endswith("encode_queries")
    assert result["dual"].recipe["params"] == {"dim": 4}


def test_text_retrieval_with_sparse_tfidf_and_a_callable_extractor():
    queries = ["red apple pie", "green tea", "fast red car", "blue ocean waves"]
    gallery = ["apple pie recipe with red apples", "a cup of green tea", "red sports car, very fast",
               "waves of the blue ocean", "tax forms", "garden tools"]
    relevance = [(i, i, 1) for i in range(4)]
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    tfidf = SklearnExtractor("tfidf", TfidfVectorizer())
    lsa = SklearnExtractor("lsa", _pipeline())
    lengths = CallableExtractor("length", lambda texts: np.array([[len(t), 1.0] for t in texts]))
    result = run(data, [tfidf, lsa, lengths])
    assert result["tfidf"].embedding["gallery"]["sparse"] is True
    assert result["tfidf"].forward.metrics["mrr"] == 1.0  # every query shares its words only with its document
    assert result.ranked_results()[0].name == "tfidf"
    assert result["lsa"].embedding["query"]["embedding_dim"] == 3


def _pipeline():
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=3, random_state=0))


def test_endpoint_metadata_is_recorded_separately_per_side():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)
    result = run(data, [PrecomputedPairExtractor("mixed", queries.astype(np.float32), gallery)])
    meta = result["mixed"].embedding
    assert meta["query"]["dtype"] == "float32" and meta["gallery"]["dtype"] == "float64"
    assert meta["query"]["n_samples"] == 12 and meta["gallery"]["n_samples"] == 30
    assert set(result["mixed"].runtime) == {"fit", "encode_queries", "encode_gallery", "rank_forward"}


def test_bidirectional_entries_have_reverse_and_an_averaged_primary_score():
    with pytest.warns(DataWarning, match=r"reverse direction: 13 of 30 gallery item\(s\) have no relevant query"):
        result = RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")],
                                    retrieval_config=RetrievalConfig(bidirectional=True, cutoffs=[1, 5]),
                                    progress=False).run()
    entry = result["own"]
    assert entry.reverse.n_queries == 17 and entry.forward.n_queries == 12
    forward, reverse = entry.forward.metrics["ndcg@10"], entry.reverse.metrics["ndcg@10"]
    assert entry.primary_score == pytest.approx((forward + reverse) / 2)
    assert result.protocol["reverse"] == {"n_queries": 17, "n_skipped": 13}
    assert "rank_reverse" in entry.runtime


@pytest.mark.parametrize("similarity", ["cosine", "dot", "squared_l2"])
def test_every_similarity_ranks_the_noisy_copies_first(similarity):
    entry = run(dataset(), [PrecomputedExtractor("own")], similarity=similarity)["own"]
    assert entry.forward.metrics["hit_rate@10"] == 1.0
    assert entry.forward.diagnostics["similarity_margin"] > 0


def test_a_collapsed_gallery_is_cached_and_read_back_like_any_other(tmp_path):
    """A cold run stores a constant gallery with a warning; a read used to call that entry corrupt (so it was
    recomputed every run, and read_only runs and `cache verify` failed on it)."""
    from vertebrae import CacheConfig
    from vertebrae.artifacts.cache import verify_store

    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    collapsed = TwoBranchExtractor("collapsed", lambda X: X, lambda X: np.ones_like(X), cache_identity="flat-v1")
    config = CacheConfig(store=str(tmp_path / "store"))
    statuses = []
    for mode in ("read_write", "read_write", "read_only"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = RetrievalBenchmark(data, [collapsed], retrieval_config=RetrievalConfig(cutoffs=[1, 5, 10]),
                                        cache_config=config.replace(mode=mode), progress=False).run()
        assert not [w for w in caught if "corrupt" in str(w.message)]
        statuses.append(result["collapsed"].embedding["gallery"]["cache_status"])
        assert result["collapsed"].forward.metrics["mrr"] == pytest.approx(1 / 29)
    assert statuses == ["miss", "hit", "hit"]
    assert all(problem_found is None for _, problem_found in verify_store(config.open_store()))


def test_collapsed_gallery_embeddings_are_warned_about_and_score_worst_case():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    collapsed = TwoBranchExtractor("collapsed", lambda X: X, lambda X: np.ones_like(X))
    with pytest.warns(ScoringWarning, match="collapsed: all 30 gallery embeddings are identical"):
        result = RetrievalBenchmark(data, [collapsed], retrieval_config=RetrievalConfig(cutoffs=[1, 5, 10]),
                                    progress=False).run()
    entry = result["collapsed"]
    assert entry.forward.metrics["hit_rate@10"] == 0.0  # 30 tied items, 2 relevant: ranks 29 and 30
    assert entry.forward.metrics["mrr"] == pytest.approx(1 / 29)
    assert entry.warnings and "identical" in entry.warnings[0]


# ----------------------------------------------------------------------------- rejections
def test_duplicate_extractor_names_are_rejected():
    with pytest.raises(InputValidationError, match=r"extractors\[1\] and extractors\[0\] are both named 'x'"):
        RetrievalBenchmark(dataset(), [PrecomputedExtractor("x"), SklearnExtractor("x", StandardScaler())])


class NamedPair:
    """A user's own retrieval extractor (the two-endpoint protocol) whose name the test sets."""

    def __init__(self, name):
        self.name = name

    def fit(self, gallery_inputs):
        return self

    def encode_queries(self, inputs):
        return np.asarray(inputs)

    def encode_gallery(self, inputs):
        return np.asarray(inputs)

    def recipe(self):
        return {"type": "named_pair_test"}


class NamedStandard(NamedPair):
    """A user's own standard extractor (name, fit, transform, recipe), adapted to both endpoints."""

    def transform(self, inputs):
        return np.asarray(inputs)


@pytest.mark.parametrize("kind", [NamedPair, NamedStandard])
@pytest.mark.parametrize("name, error, says", [
    ("a+b", InputValidationError, "name 'a\\+b' contains '\\+', which result names use before a compression"),
    ("", InputValidationError, "name must be a non-empty string, got ''"),
    (" ", InputValidationError, "name must be a non-empty string, got ' '"),
    (5, InputTypeError, "name must be a non-empty string, got int 5"),
])
def test_a_custom_extractor_name_is_checked_as_benchmark_checks_it(kind, name, error, says):
    """Benchmark refused these names; RetrievalBenchmark took them from a user's own extractor (a '+' name reads as
    another's compression variant); now the same check, naming the position and type."""
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    with pytest.raises(error, match=rf"^extractors\[1\] \({kind.__name__}\) {says}"):
        RetrievalBenchmark(data, [TwoBranchExtractor("ok", lambda X: X, lambda X: X), kind(name)])


def test_an_extractor_of_the_wrong_kind_is_refused_before_any_extractor_runs():
    """Before: the first extractor embedded both endpoints, then an image model failed on the texts."""
    calls = []

    def encode(texts):
        calls.append(len(texts))
        return np.ones((len(texts), 2))

    class ImageModel(CallableExtractor):
        input_modality = "image"

    texts = RetrievalDataset.from_inputs(["a red", "a green"], ["red", "green", "blue"], relevance=[(0, 0, 1), (1, 1, 1)],
                                         identity=IDENTITY)
    with pytest.raises(InputValidationError, match=r"extractors\[1\] \('vit', ImageModel\) embeds image, but "
                                                   r"query_inputs holds text; pass an extractor that reads text, or give "
                                                   r"image query_inputs to RetrievalDataset.from_inputs"):
        RetrievalBenchmark(texts, [TwoBranchExtractor("cheap", encode, encode), ImageModel("vit", encode)]).run()
    assert calls == []


#: Three color names; each names its RGB direction.
COLORS = {"red": (220, 20, 20), "green": (20, 220, 20), "blue": (20, 20, 220)}


def color_words(texts):
    """A real (tiny) text model: each color name as its RGB direction."""
    return np.array([COLORS[text] for text in texts], dtype=np.float32)


def mean_colors(images):
    """A real (tiny) image model: each image's mean RGB."""
    return np.stack([np.asarray(image, dtype=np.float32).mean(axis=(0, 1)) for image in images])


def colors_dataset() -> RetrievalDataset:
    """Text queries (color names) against a gallery of images: each query's two images of its color are relevant."""
    rng = np.random.default_rng(4)
    pixels = [np.clip(np.array(COLORS[name]) + rng.integers(-15, 16, size=(4, 4, 3)), 0, 255).astype(np.uint8)
              for name in list(COLORS) * 2]
    return RetrievalDataset.from_inputs(list(COLORS), in_memory_images(pixels),
                                        relevance=[(q, g, 1) for q in range(3) for g in (q, q + 3)],
                                        identity=IDENTITY)


class ColorMatcher:
    """A user's own cross-modal extractor (the two-endpoint protocol): color names and images in one RGB space,
    with its endpoints' ``modalities`` declared as the test says."""

    def __init__(self, name, modalities=None):
        self.name, self.calls = name, []
        if modalities is not None:
            self.modalities = modalities

    def fit(self, gallery_inputs):
        self.calls.append("fit")
        return self

    def encode_queries(self, inputs):
        self.calls.append("queries")
        return color_words(inputs)

    def encode_gallery(self, inputs):
        self.calls.append("gallery")
        return mean_colors(inputs)

    def recipe(self):
        return {"type": "color_matcher_test", "name": self.name}


@pytest.mark.parametrize("declared, says", [
    ({"query": "image", "gallery": "image"}, "query endpoint embeds image, but query_inputs holds text; pass an "
                                             "extractor that reads text, or give image query_inputs to "
                                             "RetrievalDataset.from_inputs"),
    ({"query": "text", "gallery": "text"}, "gallery endpoint embeds text, but gallery_inputs holds image; pass an "
                                           "extractor that reads image, or give text gallery_inputs to "
                                           "RetrievalDataset.from_inputs"),
    ({"query": "unknown", "gallery": "audio"}, "gallery endpoint embeds audio, but gallery_inputs holds image"),
    ({"gallery": "text"}, "gallery endpoint embeds text, but gallery_inputs holds image"),
])
def test_an_endpoint_declared_of_the_wrong_kind_is_refused_before_any_extractor_runs(declared, says):
    """Before: ``modalities`` was only written into resource profiles, so a gallery declared text ran on images.
    Now each declared endpoint is checked against its own inputs (``unknown`` or absent: not checked)."""
    first, declaring = ColorMatcher("first"), ColorMatcher("clip", declared)
    with pytest.raises(InputValidationError, match=rf"^extractors\[1\] \('clip', ColorMatcher\) {says}"):
        RetrievalBenchmark(colors_dataset(), [first, declaring]).run()
    assert first.calls == declaring.calls == []


def test_a_matching_declaration_scores_as_an_undeclared_one_and_swapped_it_is_refused():
    """Declaring what the endpoints hold changes no score; ``unknown`` is not checked; precomputed embeddings read
    no inputs, so their declaration is not checked against them; the same model declared the other way round is."""
    data = colors_dataset()
    pair = PrecomputedPairExtractor("pair", color_words(data.query_inputs), mean_colors(data.gallery_inputs))
    pair.modalities = {"query": "image", "gallery": "text"}
    result = run(data, [ColorMatcher("declared", {"query": "text", "gallery": "image"}), ColorMatcher("plain"),
                        ColorMatcher("unknown", {"query": "unknown", "gallery": "unknown"}), pair])
    assert result["declared"].forward.metrics["ndcg@5"] == 1.0
    for name in ("plain", "unknown", "pair"):
        assert result[name].forward == result["declared"].forward
    with pytest.raises(InputValidationError, match=r"^extractors\[0\] \('swapped', ColorMatcher\) query endpoint "
                                                   r"embeds image, but query_inputs holds text"):
        RetrievalBenchmark(data, [ColorMatcher("swapped", {"query": "image", "gallery": "text"})])


@pytest.mark.parametrize("declared, error, says", [
    ({"query": "txt"}, InputValidationError, r"modalities\['query'\] is 'txt', which reads like 'text' but is not it, "
                                             r"so the inputs would go unchecked; declare 'text' \(checked kinds: "
                                             r"\['text', 'image', 'audio'\]\)$"),
    ({"query": "text", "gallery": "Image"}, InputValidationError, r"modalities\['gallery'\] is 'Image', which reads "
                                                                  r"like 'image'"),
    ({"gallery": "img"}, InputValidationError, r"modalities\['gallery'\] is 'img', which reads like 'image'"),
    ({"gallery": None}, InputValidationError, r"modalities\['gallery'\] is None; declare a kind as a non-empty string"),
    ({"queries": "text"}, InputValidationError, r"modalities names endpoint 'queries'; a retrieval extractor's "
                                                r"endpoints are \['query', 'gallery'\]$"),
    ("text", InputTypeError, r"modalities must be a dict such as \{'query': 'text', 'gallery': 'image'\}, got str$"),
])
def test_a_declaration_outside_the_known_modalities_and_endpoints_is_refused(declared, error, says):
    """Before: a typo (``"txt"``, ``"queries"``) left that endpoint unchecked and was written into resource profiles
    as is; now it is refused naming the allowed values, also for precomputed embeddings (whose kind is not checked
    against the inputs, but still declared)."""
    data = colors_dataset()
    pair = PrecomputedPairExtractor("pair", color_words(data.query_inputs), mean_colors(data.gallery_inputs))
    pair.modalities = declared
    for extractor, who in ((ColorMatcher("clip", declared), r"\('clip', ColorMatcher\)"),
                           (pair, r"\('pair', PrecomputedPairExtractor\)")):
        with pytest.raises(error, match=rf"^extractors\[0\] {who} {says}"):
            RetrievalBenchmark(data, [extractor])


def test_a_kind_of_the_users_own_is_recorded_not_checked():
    """Kinds outside the checked three that are not near-misses of them (``video``, ``tabular``, ``fused``) are the
    user's vocabulary, as multimodal field modalities are: accepted, not checked against the inputs, and kept."""
    data = colors_dataset()
    for kind in ("video", "tabular", "fused"):
        extractor = ColorMatcher("own", {"query": kind, "gallery": "image"})
        RetrievalBenchmark(data, [extractor])
        assert check_endpoint_modalities("x", extractor) == {"query": kind, "gallery": "image"}


def test_single_matrix_precomputed_extractor_is_rejected():
    with pytest.raises(InputValidationError, match="use PrecomputedPairExtractor"):
        RetrievalBenchmark(dataset(), [PrecomputedExtractor("one", np.ones((12, 6)))])


def test_dataset_embeddings_extractor_needs_an_embeddings_dataset():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    with pytest.raises(InputValidationError, match="built from raw inputs"):
        RetrievalBenchmark(data, [PrecomputedExtractor("own")])


@pytest.mark.parametrize("extractors, error, message", [
    ("not a list", InputTypeError, "extractors must be a list"),
    ([], InputValidationError, "extractors is empty"),
    ([object()], InputTypeError, r"extractors\[0\] \(object\) lacks"),
])
def test_bad_extractor_lists_are_rejected(extractors, error, message):
    with pytest.raises(error, match=message):
        RetrievalBenchmark(dataset(), extractors)


def test_bad_dataset_and_config_types_are_rejected():
    with pytest.raises(InputTypeError, match="dataset must be a RetrievalDataset"):
        RetrievalBenchmark(np.ones((2, 2)), [PrecomputedExtractor("own")])
    with pytest.raises(ConfigError, match="retrieval_config must be a RetrievalConfig"):
        RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")], retrieval_config={"similarity": "dot"})


def test_zero_norm_row_under_cosine_is_rejected_before_any_work_naming_the_row():
    queries, gallery, relevance = problem()
    gallery[7] = 0.0
    ids = [f"doc-{i}" for i in range(30)]
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(q, f"doc-{g}", r) for q, g, r in relevance],
                                            gallery_ids=ids, identity=IDENTITY)
    calls = []
    never = TwoBranchExtractor("later", lambda X: calls.append(1) or X, lambda X: X)
    with pytest.raises(InputValidationError, match=r"gallery embedding row 7 \(id 'doc-7'\) has zero norm"):
        RetrievalBenchmark(data, [never, PrecomputedExtractor("own")])
    assert calls == []
    assert run(data, [PrecomputedExtractor("own")], similarity="dot")["own"].forward.n_queries == 12


def test_zero_norm_rows_from_an_extractor_are_rejected_naming_the_extractor():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    zeros = TwoBranchExtractor("collapsed", lambda X: np.zeros_like(X), lambda X: X)
    with pytest.raises(InputValidationError, match=r"extractor 'collapsed': query embedding row 0 \(id 0\) has zero"):
        run(data, [zeros])


def test_extractor_output_with_wrong_shape_is_rejected():
    queries, gallery, relevance = problem()
    data = RetrievalDataset.from_inputs(queries, gallery, relevance=relevance, identity=IDENTITY)
    short = TwoBranchExtractor("short", lambda X: X[:5], lambda X: X)
    narrow = TwoBranchExtractor("narrow", lambda X: X, lambda X: X[:, :3])
    with pytest.raises(InputValidationError, match="query embeddings from extractor 'short' has 5 rows but there are "
                                                   "12 queries; embeddings must have exactly one row per query, in "
                                                   "query_ids order"):
        run(data, [short])
    with pytest.raises(InputValidationError, match="extractor 'narrow': query embeddings have 6 columns but gallery"):
        run(data, [narrow])


def test_pair_extractor_with_wrong_rows_is_rejected_at_construction():
    queries, gallery, _ = problem()
    with pytest.raises(InputValidationError, match="gallery embeddings from extractor 'pair' has 29 rows but there "
                                                   "are 30 gallery items; embeddings must have exactly one row per "
                                                   "gallery item, in gallery_ids order"):
        RetrievalBenchmark(dataset(), [PrecomputedPairExtractor("pair", queries, gallery[:29])])


def test_failing_extractor_is_reported_with_its_stage():
    def broken(X):
        raise RuntimeError("model not loaded")

    with pytest.raises(ExtractorError, match=r"extractor 'broken' failed in encode_gallery: RuntimeError: model not"):
        run(dataset(), [TwoBranchExtractor("broken", lambda X: X, broken)])


def test_two_branch_functions_must_be_callable():
    with pytest.raises(InputTypeError, match="gallery_fn must be callable"):
        TwoBranchExtractor("x", lambda X: X, "not callable")


def test_unserializable_recipe_is_rejected_at_construction():
    from vertebrae.errors import SerializationError

    with pytest.raises(SerializationError, match="recipe of 'odd' is not JSON-serializable"):
        RetrievalBenchmark(dataset(), [TwoBranchExtractor("odd", lambda X: X, lambda X: X, params={"f": object()})])


def test_too_small_memory_budget_is_a_config_error_before_work():
    with pytest.raises(ConfigError, match="memory_budget_bytes=100 is too small to rank against 30 items"):
        RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")],
                           retrieval_config=RetrievalConfig(memory_budget_bytes=100))


# ----------------------------------------------------------------------------- config
def test_config_normalizes_cutoffs_and_adds_the_primary_cutoff():
    config = RetrievalConfig(primary_metric="recall@20", cutoffs=[10, 1, 10])
    assert config.cutoffs == (1, 10, 20)
    assert RetrievalConfig.from_dict(config.to_dict()) == config
    assert RetrievalConfig(primary_metric="map").cutoffs == (1, 5, 10, 100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.similarity = "dot"


@pytest.mark.parametrize("fields, message", [
    ({"primary_metric": "ndcg"}, "primary_metric must be one of"),
    ({"primary_metric": "mean_positive_similarity"}, "diagnostics cannot be primary"),
    ({"primary_metric": "ndcg@0"}, "primary_metric must be one of"),
    ({"cutoffs": 10}, "cutoffs must be a list of positive integers"),
    ({"cutoffs": [5, 0]}, r"cutoffs\[1\] must be >= 1"),
    ({"cutoffs": [2.5]}, r"cutoffs\[0\] must be an integer"),
    ({"cutoffs": ()}, "cutoffs is empty; give at least one cutoff"),  # not silently the primary's (10,)
    ({"similarity": "euclidean"}, "similarity must be one of"),
    ({"bidirectional": "yes"}, "bidirectional must be True or False"),
    ({"memory_budget_bytes": 0}, "memory_budget_bytes must be >= 1"),
    ({"block_size": 0}, "block_size must be >= 1"),
    ({"thread_limit": 1.5}, "thread_limit must be an integer"),
])
def test_bad_config_fields_are_rejected(fields, message):
    with pytest.raises(ConfigError, match=message):
        RetrievalConfig(**fields)


def test_config_from_dict_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="unknown field 'k'"):
        RetrievalConfig.from_dict({"k": 10})


# ----------------------------------------------------------------------------- progress
def test_progress_bar_only_when_asked(capsys):
    config = RetrievalConfig(cutoffs=[1, 5, 10])
    RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")], retrieval_config=config, progress=True).run()
    assert "vertebrae retrieval" in capsys.readouterr().err
    RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")], retrieval_config=config, progress=False).run()
    RetrievalBenchmark(dataset(), [PrecomputedExtractor("own")], retrieval_config=config).run()  # stderr: no terminal
    assert "vertebrae retrieval" not in capsys.readouterr().err


def test_the_quality_cohort_width_is_configured_and_keys_nothing():
    """Spec: the cohort is "within the configured absolute primary-score tolerance"; retrieval's was fixed at 0, so
    its reports' resource table only ever held the best result and exact ties.  The tolerance shapes no artifact:
    the plan's keys do not move with it."""
    rng = np.random.default_rng(0)
    gallery = rng.normal(size=(60, 6))
    queries = gallery[:40] + 0.9 * rng.normal(size=(40, 6))
    relevance = np.zeros((40, 60))
    relevance[np.arange(40), np.arange(40)] = 1
    data = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)
    near = queries + 0.05 * np.random.default_rng(3).normal(size=queries.shape)
    extractors = [PrecomputedPairExtractor("a", queries, gallery), PrecomputedPairExtractor("b", near, gallery)]
    result = run(data, extractors)
    best, second = (r.primary_score for r in result.ranked_results())
    assert 0 < best - second < 0.02  # the case this test is about
    assert [r.name for r in result.quality_cohort()] == ["a", "b"]  # the default, 0.02
    from vertebrae import ResourceProfilingConfig

    profiled = RetrievalBenchmark(data, extractors, resource_profiling=ResourceProfilingConfig(), progress=False).run()
    assert "Candidates within 0.02 of the best" in profiled.to_markdown()  # the report's resource cohort
    strict = run(data, extractors, quality_tolerance=0.0)
    assert [r.name for r in strict.quality_cohort()] == ["a"]
    keys = [RetrievalBenchmark(data, extractors, retrieval_config=RetrievalConfig(quality_tolerance=t)).plan().chain_keys
            for t in (0.0, 0.02)]
    assert keys[0] == keys[1]
    document = result.to_dict()
    del document["protocol"]["config"]["quality_tolerance"]  # a file written before the field existed
    assert [r.name for r in RetrievalBenchmarkResult.from_dict(document).quality_cohort()] == ["a"]
    with pytest.raises(ConfigError, match="quality_tolerance"):
        RetrievalConfig(quality_tolerance=-0.1)

"""Settings and extractors that cannot work are refused when the benchmark is built, before any extractor runs
(the project's contract: a clear exception naming the argument and the fix, before expensive work starts)."""

from __future__ import annotations

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity, KNNMetric, LDAProbeMetric,
                       LinearProbeMetric, OverlapMetric, PrecomputedExtractor, RidgeProbeMetric, SklearnExtractor)
from vertebrae.errors import ConfigError, ConfigTypeError, InputTypeError, InputValidationError, MetricError
from vertebrae.extractors.compression import EmbeddingCompressionConfig
from vertebrae.scoring.metrics import metric_inputs

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


# ---------------------------------------------------------------- item 3: metric settings that fit no embedding
@pytest.mark.parametrize("metric, message", [
    (LinearProbeMetric(n_splits=30), r"every class has fewer rows than n_splits=30 \(the largest has 20\); lower "
                                     r"n_splits to at most 20"),
    (RidgeProbeMetric(n_splits=30), r"every class has fewer rows than n_splits=30"),
    (LDAProbeMetric(n_splits=1000), r"60 rows cannot make n_splits=1000 folds; lower n_splits"),
    (KNNMetric(k=500), r"k=500 reaches every candidate neighbour of every row \(at most 59 of the 60 rows\).*lower k "
                       r"below 59"),
    (KNNMetric(k=59), r"k=59 reaches every candidate"),
])
def test_metric_settings_no_embedding_could_satisfy_are_refused_before_any_extractor_runs(metric, message):
    # named by the argument to change, as Benchmark's other checks name it; a direct call names the metric
    with pytest.raises(ConfigError, match=rf"^metrics\[0\] \({metric.name}\): {message}.*checked before any ran"):
        Benchmark(dataset(), [CallableExtractor("slow", slow_identity)], metrics=[metric])
    with pytest.raises(MetricError, match=rf"^metric '{metric.name}': {message}"):
        metric.preflight(y)


def test_group_folds_and_the_referee_are_checked_too():
    grouped = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("grouped", "1"),
                                               groups=np.tile([0, 1, 2], 20))
    with pytest.raises(ConfigError, match=r"3 groups cannot make n_splits=5 group folds"):
        Benchmark(grouped, [CallableExtractor("slow", slow_identity)], metrics=[LinearProbeMetric()])
    with pytest.raises(ConfigError, match=r"k=40 reaches every candidate neighbour of every row \(at most 40 of the "
                                          r"60 rows in other groups\)"):
        Benchmark(grouped, [CallableExtractor("slow", slow_identity)], metrics=[KNNMetric(k=40)])
    with pytest.raises(ConfigError, match=r"^referee \(linear_probe\): every class has fewer rows than n_splits=30"):
        Benchmark(dataset(), [CallableExtractor("slow", slow_identity)], referee=LinearProbeMetric(n_splits=30))


# ---------------------------------------------------------------- C="auto": the inner folds inside each training fold
def small_class(n_small: int) -> tuple[BenchmarkDataset, np.ndarray, np.ndarray]:
    labels = np.repeat([0, 1], [20, n_small])
    rows = np.random.default_rng(1).normal(size=(labels.size, 3)) + labels[:, None]
    return (BenchmarkDataset.from_embeddings(rows, labels,
                                             identity=DatasetIdentity.declared(f"small{n_small}", "1")), rows, labels)


def test_C_auto_with_a_class_too_small_for_the_inner_folds_is_refused_before_any_extractor_runs():
    # 2 rows with n_splits=5: a training fold keeps 1, so an inner fold trains on class 0 alone (it failed mid-run)
    data, rows, _ = small_class(2)
    message = (r"C='auto' chooses C by 3-fold cross-validation inside each of the n_splits=5 training folds, but class "
               r"1 has 2 row\(s\), so a training fold keeps 1 of them.*it needs 3 rows with n_splits=5.*lower "
               r"n_splits.*pass a fixed C \(e.g. C=1.0\) or add rows")
    with pytest.raises(ConfigError, match=r"^metrics\[0\] \(linear_probe\): " + message + ".*checked before"):
        Benchmark(data, [CallableExtractor("slow", slow_identity)], metrics=[LinearProbeMetric(C="auto")])
    marked, metadata, _ = metric_inputs(data.targets)
    with pytest.raises(MetricError, match=r"^metric 'linear_probe': " + message):  # a direct call: no argument to name
        LinearProbeMetric(C="auto")(rows, marked, target_metadata=metadata)
    Benchmark(data, [CallableExtractor("slow", slow_identity)], metrics=[LinearProbeMetric(C=1.0)])  # no inner folds


def test_a_preflight_error_names_the_position_the_metric_was_given_at():
    # an OverlapMetric listed before it counts (the user's list, not the custom metrics left after it); the referee
    # is named as the referee
    data, _, _ = small_class(2)
    with pytest.raises(ConfigError, match=r"^metrics\[2\] \(strict\): C='auto' chooses C by 3-fold"):
        Benchmark(data, [CallableExtractor("slow", slow_identity)],
                  metrics=[OverlapMetric(), KNNMetric(k=3), LinearProbeMetric(C="auto", name="strict")])
    with pytest.raises(ConfigError, match=r"^referee \(linear_probe\): C='auto' chooses C by 3-fold"):
        Benchmark(data, [CallableExtractor("slow", slow_identity)], referee=LinearProbeMetric(C="auto"))


@pytest.mark.parametrize("small, shown", [(1, "1"), ("dog", "'dog'"), ("1", "'1'")])
def test_probe_messages_name_classes_by_the_users_label_not_the_internal_key(small, shown):
    # a run hands metrics marked keys ('vk:int:1'); the messages show the label as the user gave it
    labels = np.array([0 if isinstance(small, int) else "cat"] * 20 + [small] * 2, dtype=object)
    rows = np.random.default_rng(1).normal(size=(22, 3)) + (labels == small)[:, None]
    data = BenchmarkDataset.from_embeddings(rows, labels, identity=DatasetIdentity.declared("pets", "1"))
    with pytest.raises(ConfigError, match=rf"but class {shown} has 2 row\(s\), so a training fold keeps 1"):
        Benchmark(data, [CallableExtractor("slow", slow_identity)], metrics=[LinearProbeMetric(C="auto")])
    marked, metadata, _ = metric_inputs(data.targets)
    assert "vk:" in marked[0]
    payload = LinearProbeMetric()(rows, marked, target_metadata=metadata, seed=0)
    assert f"class(es) [{shown}] have fewer rows than n_splits=5, so some test folds lack them" in payload["warnings"]


def test_C_auto_on_the_boundary_class_size_runs():
    data, rows, labels = small_class(3)  # every training fold keeps 2 rows of class 1: each inner fold trains on both
    Benchmark(data, [PrecomputedExtractor("p", rows)], metrics=[LinearProbeMetric(C="auto")])
    for seed in range(3):
        result = LinearProbeMetric(C="auto")(rows, labels, seed=seed)
        assert len(result["diagnostics"]["chosen_C"]) == 5


@pytest.mark.parametrize("n, refused", [(4, True), (5, False)])
def test_C_auto_needs_a_class_with_3_rows_in_every_training_fold(n, refused):
    labels = np.repeat([0, 1], n)
    rows = np.random.default_rng(2).normal(size=(2 * n, 3)) + labels[:, None]
    metric = LinearProbeMetric(n_splits=2, C="auto")
    if refused:  # 2 + 2 rows in a training fold: sklearn's inner StratifiedKFold raised a ValueError mid-run
        with pytest.raises(ConfigError, match=r"a training fold keeps at most 2 rows of any class and the inner "
                                              r"stratified folds need a class with 3"):
            Benchmark(BenchmarkDataset.from_embeddings(rows, labels, identity=DatasetIdentity.declared("b", "1")),
                      [CallableExtractor("slow", slow_identity)], metrics=[metric])
    else:  # folds of 3 + 2 and 2 + 3 rows: the class with 3 makes the inner folds
        assert len(metric(rows, labels, seed=0)["diagnostics"]["chosen_C"]) == 2


@pytest.mark.parametrize("n_groups, refused", [(5, True), (6, False)])
def test_C_auto_needs_3_groups_in_every_group_training_fold(n_groups, refused):
    groups, rows, labels = np.arange(60) % n_groups, X, y
    data = BenchmarkDataset.from_embeddings(rows, labels, groups=groups,
                                            identity=DatasetIdentity.declared(f"g{n_groups}", "1"))
    metric = LinearProbeMetric(n_splits=2, C="auto")
    if refused:
        with pytest.raises(ConfigError, match=r"a training fold keeps 2 of the 5 groups and the inner group folds "
                                              r"need 3; lower n_splits.*add groups"):
            Benchmark(data, [CallableExtractor("slow", slow_identity)], metrics=[metric])
    else:
        Benchmark(data, [CallableExtractor("slow", slow_identity)], metrics=[metric])
        assert len(metric(rows, labels, groups=groups, seed=0)["diagnostics"]["chosen_C"]) == 2

def test_a_cuda_probe_without_a_cuda_device_is_refused_before_any_extractor_runs():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ConfigError, match=r"device='cuda': torch sees no CUDA device; use device='cpu'"):
        Benchmark(dataset(), [CallableExtractor("slow", slow_identity)], metrics=[LinearProbeMetric(device="cuda")])


def test_feasible_metric_settings_pass():
    bench = Benchmark(dataset(), [PrecomputedExtractor("p")], metrics=[LinearProbeMetric(n_splits=20), KNNMetric(k=58)])
    assert [m.name for m in bench.settings.metrics] == ["linear_probe", "knn"]


# ---------------------------------------------------------------- item 4: custom extractor objects are validated
class Custom:
    """A custom extractor object (no base class), its name and recipe set per test."""

    def __init__(self, name, recipe=None):
        self.name, self._recipe = name, recipe

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return X

    def recipe(self):
        return self._recipe


@pytest.mark.parametrize("name, error, message", [
    (5, InputTypeError, r"extractors\[1\] \(Custom\) name must be a non-empty string, got int 5"),
    ("", InputValidationError, r"extractors\[1\] \(Custom\) name must be a non-empty string, got ''"),
    ("c+int8", InputValidationError, r"extractors\[1\] \(Custom\) name 'c\+int8' contains '\+'"),
])
def test_a_custom_extractors_name_is_checked_like_a_built_in_ones(name, error, message):
    with pytest.raises(error, match=message):
        Benchmark(dataset(), [PrecomputedExtractor("p"), Custom(name, {})])


@pytest.mark.parametrize("recipe, message", [
    (None, r"extractor 'c': recipe\(\) returned a NoneType, not a mapping; return a JSON-safe dict"),
    ({"model": object()}, r"extractor 'c': its recipe\(\)/identity\(\) holds a value vertebrae cannot fingerprint "
                          r"\(cannot fingerprint a object by content\); keep it to JSON-safe values"),
])
def test_a_custom_recipe_that_is_no_json_mapping_is_refused_naming_the_extractor_before_any_extractor_runs(recipe,
                                                                                                           message):
    benchmark = Benchmark(dataset(), [CallableExtractor("slow", slow_identity), Custom("c", recipe)])
    with pytest.raises(InputTypeError, match=message):
        benchmark.run()


def test_sklearn_extractor_refuses_an_estimator_class():
    from sklearn.decomposition import PCA

    with pytest.raises(InputTypeError, match=r"SklearnExtractor 's': estimator is the class PCA, not an instance; "
                                             r"give an instance: PCA\(\.\.\.\)"):
        SklearnExtractor("s", PCA)


# ---------------------------------------------------------------- item 5: settings that would be ignored or misread
@pytest.mark.parametrize("fields, message", [
    ({"C_patience": 2}, r"LinearProbeMetric.C_patience is read only with C='auto' \(C chosen per fold\), but C=1.0; "
                        r"pass C='auto' or leave C_patience out"),
    ({"C": 100.0, "C_grid": (0.1, 1.0)}, r"LinearProbeMetric.C_grid is read only with C='auto'"),
])
def test_a_fixed_c_refuses_the_fields_only_c_auto_reads(fields, message):
    with pytest.raises(ConfigError, match=message):
        LinearProbeMetric(**fields)
    assert LinearProbeMetric(C="auto", **{k: v for k, v in fields.items() if k != "C"}).C == "auto"


@pytest.mark.parametrize("progress", ["yes", 3])
def test_progress_must_be_a_bool_or_none(progress):
    with pytest.raises(ConfigTypeError, match=r"Benchmark: progress must be True, False or None"):
        Benchmark(dataset(), [PrecomputedExtractor("p")], progress=progress)
    assert Benchmark(dataset(), [PrecomputedExtractor("p")], progress=False).progress is False


def test_retrieval_and_zero_shot_benchmarks_check_progress_too():
    from vertebrae import RetrievalBenchmark, RetrievalDataset, ZeroShotBenchmark, ZeroShotDataset

    rng = np.random.default_rng(1)
    pairs = RetrievalDataset.from_embeddings(rng.normal(size=(4, 3)), rng.normal(size=(6, 3)),
                                             relevance=[(0, 0, 1.0), (1, 2, 1.0), (2, 3, 1.0), (3, 5, 1.0)],
                                             identity=DatasetIdentity.declared("pairs", "1"))
    with pytest.raises(ConfigTypeError, match=r"RetrievalBenchmark: progress must be True, False or None"):
        RetrievalBenchmark(pairs, [PrecomputedExtractor("p")], progress="yes")
    prompts = ZeroShotDataset.from_templates(dataset(), ["a {label}"])
    with pytest.raises(ConfigTypeError, match=r"ZeroShotBenchmark: progress must be True, False or None"):
        ZeroShotBenchmark(prompts, [], progress=3)

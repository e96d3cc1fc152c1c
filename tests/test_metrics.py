"""Custom embedding metrics: contract, label boundary, metrics stage, ranking and reports."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import uuid

import numpy as np
import pytest
from scipy import sparse

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CallableMetric, ConfigError,
                           ContinuousOverlapScoringConfig, DatasetIdentity, InputTypeError, LabelRetrievalMetric,
                           Metric, MetricError, OverlapMetric, OverlapScoringConfig, load_metric)
from vertebrae.errors import ScoringWarning
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.inputs.labels import decode_key, unmark
from vertebrae.scoring.metrics import metric_result, metrics_key_fingerprint

from .conftest import gaussian_classes

#: k reductions on small classes and recorded metric failures are expected here (asserted through the results).
pytestmark = pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning")

FAST = OverlapScoringConfig(min_k=2, max_k=4)


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None, scale=1.0):
    """Between-class centroid spread over within-class spread; only uses the label partition."""
    X = embeddings.toarray() if sparse.issparse(embeddings) else np.asarray(embeddings, dtype=float)
    classes = sorted(set(labels.tolist()))
    centroids = np.array([X[labels == c].mean(axis=0) for c in classes])
    within = np.mean([np.linalg.norm(X[labels == c] - centroids[i], axis=1).mean() for i, c in enumerate(classes)])
    between = np.linalg.norm(centroids - centroids.mean(axis=0), axis=1).mean()
    return {"score": scale * float(between / within), "diagnostics": {"n_classes": len(classes)}}


def first_coordinate(embeddings, labels, **_):
    X = embeddings.toarray() if sparse.issparse(embeddings) else embeddings
    return {"score": float(X[:, 0].mean())}


def _extractors(X):
    noisy = X + np.random.default_rng(1).normal(0, 4.0, X.shape).astype(np.float32)
    return [PrecomputedExtractor("clean", X), PrecomputedExtractor("noisy", noisy)]


@pytest.fixture(scope="module")
def small():
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    return X, y, BenchmarkDataset.from_embeddings(X, y, identity=_identity())


def _identity() -> DatasetIdentity:
    return DatasetIdentity.declared("metrics-test", "1")


def _run(dataset, extractors, **kwargs):
    kwargs.setdefault("scoring_config", FAST)
    return Benchmark(dataset, extractors, progress=False, **kwargs).run()


# --------------------------------------------------------------------- ranking by a custom metric
def test_primary_custom_metric_ranks_and_overlap_stays_available(small):
    X, _, dataset = small
    result = _run(dataset, _extractors(X), scoring_config=None,
                  metrics=[OverlapMetric(config=FAST), CallableMetric("spread", spread)], primary_metric="spread")
    ranked = result.ranked_results()
    assert [r.name for r in ranked] == ["clean", "noisy"]
    best = ranked[0]
    assert best.primary_metric_name == "spread" and best.primary_score == best.metrics["spread"].score
    assert best.metrics["overlap"].score == best.overlap.score and 0.0 <= best.overlap.score <= 1.0
    frame = result.to_dataframe()
    assert list(frame["primary_metric"]) == ["spread", "spread"]
    assert list(frame["primary_score"]) == [r.metrics["spread"].score for r in ranked]
    assert {"metric.overlap", "metric.spread", "runtime.metrics", "runtime.metric.spread"} <= set(frame.columns)
    markdown = result.to_markdown()
    assert "Ranked by **spread** (higher is better)" in markdown
    assert "| spread (primary) |" in markdown and "higher is better" in markdown


def test_lower_is_better_reverses_the_ranking(small):
    X, _, dataset = small
    up = _run(dataset, _extractors(X), metrics=[CallableMetric("m", spread)], primary_metric="m")
    down = _run(dataset, _extractors(X), metrics=[CallableMetric("m", spread, higher_is_better=False)],
                primary_metric="m")
    assert [r.name for r in down.ranked_results()] == [r.name for r in up.ranked_results()][::-1]
    assert "(lower is better)" in down.to_markdown()
    assert [r.name for r in down.quality_cohort(tolerance=0.0)] == [down.ranked_results()[0].name]


def test_overlap_metric_config_is_the_scoring_config(small):
    _, _, dataset = small
    config = OverlapScoringConfig(min_k=2, max_k=3, random_state=5)
    bench = Benchmark(dataset, [PrecomputedExtractor("e")], metrics=[OverlapMetric(config=config)])
    assert bench.settings.scoring_config == config
    same = Benchmark(dataset, [PrecomputedExtractor("e")], scoring_config=config, metrics=[OverlapMetric(config)])
    assert same.settings.scoring_config == config
    with pytest.raises(ConfigError, match="in one place"):
        Benchmark(dataset, [PrecomputedExtractor("e")], scoring_config=OverlapScoringConfig(),
                  metrics=[OverlapMetric(config=config)])
    with pytest.raises(ConfigError, match="second OverlapMetric"):
        Benchmark(dataset, [PrecomputedExtractor("e")], metrics=[OverlapMetric(), OverlapMetric()])


@pytest.mark.parametrize("metrics, primary, error, match", [
    ([CallableMetric("a", spread), CallableMetric("a", spread)], "overlap", ConfigError, "two metrics named 'a'"),
    ([spread], "overlap", InputTypeError, r"CallableMetric\('name', fn\)"),
    ([object()], "overlap", InputTypeError, "not a metric"),
    ("spread", "overlap", InputTypeError, "must be a list"),
    ([CallableMetric("a", spread)], "b", ConfigError, r"choose one of \['overlap', 'a'\]"),
    ([CallableMetric("a", spread, aggregate_valid=False)], "a", ConfigError, "aggregate_valid=False"),
])
def test_benchmark_rejects_bad_metric_settings(small, metrics, primary, error, match):
    with pytest.raises(error, match=match):
        Benchmark(small[2], [PrecomputedExtractor("e")], metrics=metrics, primary_metric=primary)


@pytest.mark.parametrize("name", ["overlap", "", "has space", "a:b", 3])
def test_metric_names_are_checked_and_overlap_is_reserved(name):
    with pytest.raises(ConfigError, match="reserved" if name == "overlap" else "metric name"):
        CallableMetric(name, spread)


def test_callable_metric_checks_fn_and_params():
    with pytest.raises(InputTypeError, match="must be a function"):
        CallableMetric("m", 3)
    with pytest.raises(ConfigError, match="params"):
        CallableMetric("m", spread, params={"seed": 1})
    with pytest.raises(ConfigError, match="JSON-safe"):
        CallableMetric("m", spread, params={"x": object()})
    metric = CallableMetric("m", spread, params={"scale": 2.0})
    assert isinstance(metric, Metric)
    assert metric.identity() == {"type": "callable", "name": "m", "callable": f"{__name__}:spread",
                                 "params": {"scale": 2.0}, "higher_is_better": True, "aggregate_valid": True}


# --------------------------------------------------------------------------- payload contract
class _Named:
    name, higher_is_better, aggregate_valid = "m", True, True


@pytest.mark.parametrize("payload, match", [
    (0.5, "returned float; a metric returns a mapping"),
    ({}, r"score=None"),
    ({"score": float("nan")}, "finite"),
    ({"score": float("inf")}, "finite"),
    ({"score": True}, "finite real number"),
    ({"score": "0.5"}, "finite real number"),
    ({"score": np.array([0.5])}, "finite real number"),
    ({"score": 0.5, "extra": 1}, "unknown key"),
    ({"score": 0.5, "diagnostics": {"f": lambda: 1}}, "diagnostics is not JSON-safe"),
    ({"score": 0.5, "metadata": {"x": float("nan")}}, "metadata is not JSON-safe"),
    ({"score": 0.5, "diagnostics": [1, 2]}, "must be a mapping"),
    ({"score": 0.5, "warnings": "careful"}, "list of strings"),
    ({"score": 0.5, "aggregate_valid": "no"}, "True or False"),
])
def test_payload_contract_violations_name_metric_and_extractor(payload, match):
    with pytest.raises(MetricError, match=match) as info:
        metric_result(_Named(), payload, "ext")
    assert "metric 'm' on extractor 'ext'" in str(info.value)


def test_payload_is_normalized_to_what_json_reads_back():
    result = metric_result(_Named(), {"score": np.float32(0.25), "diagnostics": {"k": np.int64(3), "t": (1, 2)},
                                      "warnings": ("w",), "aggregate_valid": np.bool_(False)}, "ext")
    assert result.score == 0.25 and type(result.score) is float
    assert result.diagnostics == {"k": 3, "t": [1, 2]} and type(result.diagnostics["k"]) is int
    assert result.warnings == ["w"] and result.aggregate_valid is False and not result.rankable


# ------------------------------------------------------------------------------ failures
def test_failing_and_contract_breaking_metrics_are_recorded_and_the_run_goes_on(small):
    X, _, dataset = small

    def fails_on_noisy(embeddings, labels, **_):
        if embeddings[0, 0] != X[0, 0]:
            raise TypeError("cannot handle this one")
        return {"score": 1.0}

    def bad_payload(embeddings, labels, **_):
        return {"score": 1.0, "surprise": True}

    with pytest.warns(ScoringWarning, match="failed on extractor 'noisy'"):
        result = _run(dataset, _extractors(X), metrics=[CallableMetric("picky", fails_on_noisy),
                                                        CallableMetric("bad", bad_payload)], primary_metric="picky")
    noisy = result["noisy"].metrics["picky"]
    assert noisy.score is None and noisy.aggregate_valid is False
    assert noisy.error == "TypeError: cannot handle this one"
    assert any("metric 'picky': failed on extractor 'noisy'" in w for w in result["noisy"].warnings)
    bad = result["clean"].metrics["bad"]
    assert bad.error.startswith("MetricError: metric 'bad' on extractor 'clean' returned unknown key(s) 'surprise'")
    assert [r.name for r in result.ranked_results()] == ["clean"]
    frame = result.to_dataframe(include_invalid=True)
    assert list(frame["extractor"]) == ["clean", "noisy"]
    assert frame["rank"].tolist()[0] == 1 and frame["rank"].isna().tolist() == [False, True]
    assert list(frame["aggregate_valid"]) == [True, False] and frame["metric.picky"].isna().tolist() == [False, True]
    assert list(result.to_dataframe()["extractor"]) == ["clean"]
    assert "no: TypeError: cannot handle this one" in result.to_markdown()


def test_every_invalid_aggregate_makes_rankings_unavailable(small):
    X, _, dataset = small

    def never_valid(embeddings, labels, **_):
        return {"score": 0.3, "aggregate_valid": False, "warnings": ["not meaningful here"]}

    result = _run(dataset, _extractors(X), metrics=[CallableMetric("m", never_valid)], primary_metric="m")
    assert result.ranked_results() == [] and not result.ranking_available
    assert result.quality_cohort() == [] and result.quality_cohort(tolerance=1.0) == []
    frame = result.to_dataframe()
    assert frame.empty and {"rank", "extractor", "primary_score", "metric.m"} <= set(frame.columns)
    everything = result.to_dataframe(include_invalid=True)
    assert everything["rank"].isna().all() and everything["primary_score"].isna().all()
    assert list(everything["metric.m"]) == [0.3, 0.3]
    assert result.recommendations == ["No extractor has a valid primary aggregate; rankings and the quality cohort "
                                      "are unavailable."]
    assert "Unavailable: no extractor has a valid primary aggregate." in result.to_markdown()
    assert any(w == "metric 'm': not meaningful here" for w in result["clean"].warnings)


def test_descriptive_metric_is_reported_but_never_ranked(small):
    X, _, dataset = small
    result = _run(dataset, _extractors(X), metrics=[CallableMetric("info", spread, aggregate_valid=False)])
    assert [r.primary_metric_name for r in result.ranked_results()] == ["overlap", "overlap"]
    info = result["clean"].metrics["info"]
    assert info.score > 0 and info.aggregate_valid is False and info.error is None


# ---------------------------------------------------------------------------- label boundary
def _seen_metric(record):
    def metric(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
        record.append({"embeddings": embeddings, "labels": labels, "target_metadata": target_metadata,
                       "groups": groups, "seed": seed})
        return spread(embeddings, labels) if target_metadata["target_type"] == "single_label" else {"score": 0.0}
    return metric


TYPED_LABELS = {
    "int": (3, 7),
    "bool": (False, True),
    "date": (dt.date(2024, 1, 2), dt.date(2023, 5, 6)),
    "uuid": (uuid.UUID(int=5), uuid.UUID(int=2)),
    "decimal": (decimal.Decimal("1.50"), decimal.Decimal("-2")),
}


def test_typed_labels_reach_metrics_as_marked_keys_and_score_identically():
    X, y01 = gaussian_classes(n_per_class=15, n_classes=2, dim=4)
    scores = {}
    for kind, values in TYPED_LABELS.items():
        y = [values[int(c)] for c in y01]
        groups = [uuid.UUID(int=int(i) % 5) for i in range(len(y))]
        dataset = BenchmarkDataset.from_embeddings(X, y, identity=_identity(), groups=groups)
        seen: list = []
        result = _run(dataset, [PrecomputedExtractor("e")], metrics=[CallableMetric("m", _seen_metric(seen)),
                                                                     LabelRetrievalMetric()])
        call = seen[0]
        labels = call["labels"]
        assert isinstance(labels, np.ndarray) and labels.dtype.kind == "U" and labels.shape == (30,)
        assert all(label.startswith("vk:") for label in labels)
        assert [decode_key(unmark(label)) for label in labels[[0, -1]]] == [values[0], values[1]]
        catalog = call["target_metadata"]["label_catalog"]
        assert catalog["display"][labels[0]] == str(values[0])
        assert {e["key"] for e in catalog["entries"]} == {unmark(label) for label in set(labels.tolist())}
        assert call["groups"].dtype.kind == "U" and call["groups"][1] == f"vk:uuid:{uuid.UUID(int=1)}"
        assert call["target_metadata"]["group_catalog"]["display"][call["groups"][1]] == str(uuid.UUID(int=1))
        scores[kind] = (result["e"].metrics["m"].score, result["e"].metrics["label_retrieval"].score)
    assert len(set(scores.values())) == 1, scores


def test_multilabel_regression_sparse_and_seed_at_the_boundary():
    X, y = gaussian_classes(n_per_class=15, n_classes=3, dim=5)
    csr = sparse.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    indicator = np.stack([y == 0, y != 0, y == 2], axis=1).astype(int)
    seen: list = []
    metric = CallableMetric("m", _seen_metric(seen))
    multi = BenchmarkDataset.from_embeddings(csr, indicator, identity=_identity(), label_names=["x", "y", 3])
    _run(multi, [PrecomputedExtractor("e")], metrics=[metric], scoring_config=FAST.replace(random_state=11))
    call = seen.pop()
    assert sparse.issparse(call["embeddings"]) and call["embeddings"].format == "csr"
    assert (call["embeddings"] != csr).nnz == 0
    assert sparse.issparse(call["labels"]) and call["labels"].dtype == np.int8
    assert (call["labels"].toarray() == indicator[:, [2, 0, 1]]).all()  # catalog order: int before str
    assert call["target_metadata"]["label_names"] == ["vk:int:3", "vk:str:x", "vk:str:y"]
    assert call["seed"] == 11 and call["groups"] is None
    for targets in (y * 0.5, np.stack([y * 0.5, -y], axis=1)):
        regression = BenchmarkDataset.from_embeddings(X, targets, identity=_identity(), target_type="regression")
        _run(regression, [PrecomputedExtractor("e")], metrics=[metric],
             continuous_config=ContinuousOverlapScoringConfig(n_null_permutations=2, random_state=4))
        call = seen.pop()
        assert call["labels"].dtype == np.float64 and np.array_equal(call["labels"], targets)
        assert call["target_metadata"]["target_type"] == "regression" and call["seed"] == 4


def test_metrics_cannot_modify_their_inputs(small):
    X, _, dataset = small

    def vandal(embeddings, labels, **_):
        embeddings[0, 0] = 99.0
        return {"score": 1.0}

    result = _run(dataset, [PrecomputedExtractor("e", X.copy())], metrics=[CallableMetric("v", vandal)])
    assert "read-only" in result["e"].metrics["v"].error


@pytest.mark.parametrize("target_type", ["multi_label", "regression"])
def test_label_retrieval_is_refused_for_non_single_label_benchmarks(target_type):
    X, y = gaussian_classes(n_per_class=10, n_classes=2, dim=3)
    y = np.stack([y == 0, y == 1], axis=1).astype(int) if target_type == "multi_label" else y * 1.0
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=_identity(), target_type=target_type)
    with pytest.raises(MetricError, match=f"'label_retrieval' supports \\['single_label'\\].*{target_type}"):
        Benchmark(dataset, [PrecomputedExtractor("e")], metrics=[LabelRetrievalMetric()])


# ------------------------------------------------------------------------- plan and persistence
def test_metrics_stage_is_fingerprinted_by_metric_identity(small):
    _, _, dataset = small

    def metrics_key(*metrics):
        plan = Benchmark(dataset, [PrecomputedExtractor("e")], metrics=list(metrics)).plan()
        return [job.key for job in plan if job.stage == "metrics"]

    assert metrics_key() == []
    base = metrics_key(CallableMetric("m", spread))
    assert len(base) == 1 and base[0].startswith("metrics/")
    assert metrics_key(CallableMetric("m", spread)) == base
    for other in (CallableMetric("n", spread), CallableMetric("m", first_coordinate),
                  CallableMetric("m", spread, params={"scale": 2.0}),
                  CallableMetric("m", spread, higher_is_better=False),
                  LabelRetrievalMetric(name="m"), LabelRetrievalMetric(name="m", cutoffs=(3,))):
        assert metrics_key(other) != base


def test_metric_payloads_round_trip_through_json(small, tmp_path):
    X, _, dataset = small

    def rich(embeddings, labels, **_):
        return {"score": 0.5, "diagnostics": {"array": np.arange(3), "nested": {"a": [1, 2.5]}},
                "metadata": {"source": "test"}, "warnings": ["be careful"]}

    result = _run(dataset, _extractors(X), metrics=[CallableMetric("rich", rich), LabelRetrievalMetric()],
                  primary_metric="label_retrieval")
    loaded = BenchmarkResult.load(result.save_json(tmp_path / "r.json"))
    for name in ("clean", "noisy"):
        before, after = result[name].metrics, loaded[name].metrics
        assert before.keys() == after.keys() == {"overlap", "rich", "label_retrieval"}
        assert after["rich"].metadata == {"source": "test"} and after["rich"].warnings == ["be careful"]
        assert np.array_equal(after["rich"].diagnostics["array"], np.arange(3))
        assert after["label_retrieval"].to_dict() == before["label_retrieval"].to_dict()
    metric_rows = [line for line in result.to_markdown().splitlines() if line.startswith(("| rich", "| label_"))]
    assert len(metric_rows) == 4 and all(line in loaded.to_markdown().splitlines() for line in metric_rows)
    assert [r.name for r in loaded.ranked_results()] == [r.name for r in result.ranked_results()]
    assert loaded.metadata["settings"]["metrics"][0]["callable"].endswith("rich")


# ------------------------------------------------------------------------------- load_metric
@pytest.fixture
def metric_module(tmp_path, monkeypatch):
    name = f"vertebrae_test_metrics_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from vertebrae import LabelRetrievalMetric\n"
        "def loss(embeddings, labels, **kwargs):\n    return {'score': 1.0}\n"
        "class Holder:\n    @staticmethod\n"
        "    def nested(embeddings, labels, **kwargs):\n        return {'score': 2.0}\n"
        "CONSTANT = 3\n"
        "retrieval = LabelRetrievalMetric(cutoffs=(1,), primary='precision@1', name='r1')\n")
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in (name, f"{name}_broken"):
        sys.modules.pop(module, None)


def test_load_metric_wraps_functions_and_returns_metric_objects(metric_module):
    metric = load_metric(f"{metric_module}:loss", higher_is_better=False)
    assert isinstance(metric, CallableMetric) and metric.name == "loss" and metric.higher_is_better is False
    assert metric.identity()["callable"] == f"{metric_module}:loss"
    assert load_metric(f"{metric_module}:Holder.nested", name="n").name == "n"
    retrieval = load_metric(f"{metric_module}:retrieval")
    assert isinstance(retrieval, LabelRetrievalMetric) and retrieval.name == "r1"
    assert load_metric(f"{metric_module}:retrieval", name="r1") is retrieval
    with pytest.raises(ConfigError, match="cannot be overridden"):
        load_metric(f"{metric_module}:retrieval", name="other")


@pytest.mark.parametrize("path, error, match", [
    ("no_colon", ConfigError, "malformed"),
    ("pkg.mod:", ConfigError, "malformed"),
    (":fn", ConfigError, "malformed"),
    ("pkg mod:fn", ConfigError, "malformed"),
    (3, ConfigError, "malformed"),
    ("vertebrae_no_such_module_xyz:fn", ConfigError, "cannot be found"),
    ("{module}_broken:fn", ConfigError, "importing .* failed: RuntimeError: broken on import"),
    ("{module}:missing", ConfigError, "has no attribute 'missing'"),
    ("{module}:CONSTANT", InputTypeError, "names a int, not a metric"),
    ("{module}:Holder", InputTypeError, "names a type"),
])
def test_load_metric_errors(metric_module, path, error, match):
    with pytest.raises(error, match=match):
        load_metric(path.format(module=metric_module) if isinstance(path, str) else path)


def test_metric_settings_pickle_for_remote_runners(small):
    import pickle

    bench = Benchmark(small[2], [PrecomputedExtractor("e")],
                      metrics=[CallableMetric("s", spread, params={"scale": 2.0}), LabelRetrievalMetric(cutoffs=(3,))])
    settings = pickle.loads(pickle.dumps(bench.settings))
    assert [m.identity() for m in settings.metrics] == [m.identity() for m in bench.settings.metrics]
    assert metrics_key_fingerprint(settings.metrics) == metrics_key_fingerprint(bench.settings.metrics)


def test_metric_object_with_the_wrong_call_signature_fails_when_the_benchmark_is_built(blob_dataset):
    """Issue 11 item 9: rejected in Benchmark(...), naming the metric and the required signature."""
    from vertebrae import Benchmark, InputTypeError, PrecomputedExtractor

    class PairMetric:
        name, higher_is_better, aggregate_valid = "pairs", True, True
        supported_target_types = ("single_label",)

        def identity(self):
            return {"type": "pairs"}

        def __call__(self, y_true, y_pred):  # a scikit-learn style score, not a vertebrae metric
            return {"score": 1.0}

    with pytest.raises(InputTypeError, match=r"metric 'pairs' .* it needs the signature fn\(embeddings, labels, \*, "
                                             r"target_metadata=None, groups=None, seed=None, \*\*params\)"):
        Benchmark(blob_dataset, [PrecomputedExtractor("raw", blob_dataset.embeddings)], metrics=[PairMetric()])

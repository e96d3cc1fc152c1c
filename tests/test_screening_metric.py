"""ScreeningConfig(metric=...): screening ranks the rungs by a metric of the metric protocol (e.g. a probe)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import RidgeClassifierCV
from sklearn.model_selection import StratifiedKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vertebrae import (Benchmark, CallableMetric, ConfigError, KNNMetric, LDAProbeMetric, MetricError,
                       RidgeProbeMetric, ScreeningConfig)
from vertebrae.cli.run_config import benchmark_kwargs
from vertebrae.inputs.targets import build_targets
from vertebrae.selection.screening import plan_rungs

from .references import per_class_rows
from .test_screening import QUIET, _candidates, _dataset, _features

PROBE = RidgeProbeMetric(n_splits=3, alphas=(0.1, 10.0, 1000.0))
SCREEN = ScreeningConfig(eta=2, seed=1, repeats=3, metric=PROBE)


@pytest.fixture(scope="module")
def screened():
    return Benchmark(_dataset(), _candidates(), **QUIET, screening=SCREEN).run()


def _direct_repeat_scores(candidate, rung) -> list[float]:
    """scikit-learn on the rung's repeats, with the repeat rows and seeds derived here (docs/stability.md rule):
    ``SeedSequence(rung seed).spawn(2)`` gives the scoring stream (repeat 0: the scorer's seed 0) and the sampling
    stream; ``default_rng(sampling seed)`` draws floor(0.8 x n_c) of each class's rung rows.  Each repeat is
    ``cross_validate(StandardScaler + RidgeClassifierCV(alphas))`` on StratifiedKFold(3, shuffled with the
    scoring seed), mean balanced accuracy.  The rung's own rows (nested draws) are taken from ``plan_rungs``."""
    X, y = _features()
    embedding = (X[:, 1:] @ candidate.weights)[rung.rows]
    labels = y[rung.rows]
    config = rung.repeats
    assert config.subsample_fraction == 0.8
    scoring, sampling = np.random.SeedSequence(config.random_state).spawn(2)
    scoring_seeds = [0, *scoring.generate_state(config.repeats - 1).tolist()]
    sizes = [int(np.floor(np.sum(labels == c) * 0.8)) for c in np.unique(labels)]
    rows = [per_class_rows(labels, sizes, seed) for seed in sampling.generate_state(config.repeats).tolist()]
    assert all(not np.array_equal(rows[0], r) for r in rows[1:])  # every repeat scores other rows
    model = make_pipeline(StandardScaler(), RidgeClassifierCV(alphas=PROBE.alphas))
    return [cross_validate(model, embedding[r], labels[r], scoring="balanced_accuracy",
                           cv=StratifiedKFold(3, shuffle=True, random_state=seed))["test_score"].mean()
            for r, seed in zip(rows, scoring_seeds)]


def test_a_screened_run_ranks_the_rungs_by_the_metric(screened):
    X, y = _features()
    rungs = plan_rungs(build_targets(y.astype(str)), SCREEN)
    candidates = {c.name: c for c in _candidates()}
    left = [r for r in screened.extractor_results if r.screened_out]
    assert left, "the noise candidate should leave at a rung"
    for table_row in screened.metadata["screening"]["rungs"][:-1]:
        entries = {name: next(e for e in r.screening["rungs"] if e["rung"] == table_row["rung"])
                   for name, r in ((r.name, r) for r in screened.extractor_results)
                   if any(e["rung"] == table_row["rung"] for e in r.screening["rungs"])}
        for name, entry in entries.items():
            direct = _direct_repeat_scores(candidates[name], rungs[table_row["rung"]])
            assert entry["repeat_scores"] == pytest.approx(direct, abs=1e-12)
            assert entry["partial_score"] == pytest.approx(np.mean(direct), abs=1e-12)
        ranked = sorted(entries, key=lambda name: -entries[name]["partial_score"])
        assert table_row["best"] == ranked[0]
        survivors = [name for name in ranked if entries[name]["continued"]]
        assert survivors == ranked[:len(survivors)]  # the survivors are the metric's best
    for result in left:
        assert set(result.artifact_keys) == {"extract_rows", "rung_metric"}
        assert result.screening["rungs"][-1]["cache_status"].keys() == {"extract_rows", "rung_metric"}
    assert screened.metadata["screening"]["config"]["metric"] == PROBE.identity()


def test_the_metric_enters_the_rung_keys_and_the_default_is_unchanged(screened):
    default = Benchmark(_dataset(), _candidates(), **QUIET,
                        screening=ScreeningConfig(eta=2, seed=1, repeats=3)).run()
    out = next(r for r in default.extractor_results if r.screened_out)
    assert "rung_score" in out.artifact_keys and "rung_metric" not in out.artifact_keys
    assert "metric" not in default.metadata["screening"]["config"]
    assert ScreeningConfig().to_dict() == {"start_fraction": 0.1, "start_rows": None, "eta": 3, "repeats": 3,
                                           "subsample_fraction": 0.8, "interval_level": 0.95, "seed": 0}
    probe_keys = {r.name: r.artifact_keys for r in screened.extractor_results if r.screened_out}
    other = Benchmark(_dataset(), _candidates(), **QUIET,
                      screening=SCREEN.replace(metric=PROBE.replace(alphas=(1.0, 100.0)))).run()
    for name, keys in probe_keys.items():
        if other[name].screened_out and other[name].screening["last_rung"] == screened[name].screening["last_rung"]:
            assert other[name].artifact_keys["extract_rows"] == keys["extract_rows"]
            assert other[name].artifact_keys["rung_metric"] != keys["rung_metric"]


def test_a_screening_metric_is_checked_before_any_extraction():
    descriptive = CallableMetric("describe", lambda e, l, **kw: {"score": 0.0}, aggregate_valid=False)
    with pytest.raises(ConfigError, match="aggregate_valid=False.*rankable"):
        ScreeningConfig(metric=descriptive)
    with pytest.raises(TypeError, match="is not a metric"):
        ScreeningConfig(metric=42)
    extractors = _candidates()
    with pytest.raises(ConfigError, match="ridge_probe repeats, but primary_metric is 'knn'"):
        Benchmark(_dataset(), extractors, **QUIET, screening=SCREEN, metrics=[KNNMetric()], primary_metric="knn")
    X, y = _features()
    from vertebrae import BenchmarkDataset, DatasetIdentity

    regression = BenchmarkDataset.from_arrays(X, y.astype(float), target_type="regression",
                                              identity=DatasetIdentity.declared("r", "1"))
    with pytest.raises(MetricError, match="lda_probe.*screen by another metric"):
        Benchmark(regression, extractors, **QUIET, screening=ScreeningConfig(metric=LDAProbeMetric()))
    assert all(e.seen == [] for e in extractors)


def test_the_primary_metric_may_be_the_screening_metric():
    result = Benchmark(_dataset(), _candidates(), **QUIET, screening=SCREEN, metrics=[PROBE],
                       primary_metric=PROBE.name).run()
    best = result.ranked_results()[0]
    assert best.primary_metric_name == PROBE.name and best.primary_score == best.metrics[PROBE.name].score
    assert any(r.screened_out for r in result.extractor_results)


def test_a_run_config_names_the_screening_metric():
    config = benchmark_kwargs({"screening": {"metric": "ridge_probe", "eta": 2}})["screening"]
    assert config.metric == RidgeProbeMetric() and config.eta == 2
    table = {"path": "vertebrae:RidgeProbeMetric", "params": {"alphas": [1, 10]}}
    assert ScreeningConfig.from_dict({"metric": table}).metric == RidgeProbeMetric(alphas=(1.0, 10.0))
    with pytest.raises(ConfigError, match="'probe' is not a built-in screening metric.*ridge_probe"):
        ScreeningConfig.from_dict({"metric": "probe"})
    with pytest.raises(TypeError, match="ScreeningConfig.metric must be"):
        ScreeningConfig.from_dict({"metric": 3})


def test_a_built_in_screening_metric_may_be_named_in_python_too():
    """The names a run config takes (`metric = "ridge_probe"`) failed in Python with a protocol error and no fix."""
    from vertebrae import RidgeProbeMetric, ScreeningConfig

    assert ScreeningConfig(metric="ridge_probe") == ScreeningConfig(metric=RidgeProbeMetric())
    with pytest.raises(ConfigError, match="'ridge' is not a built-in screening metric; use one of"):
        ScreeningConfig(metric="ridge")


def test_a_screening_metric_the_first_rung_cannot_score_is_refused_before_any_extraction():
    """Rung 0 holds 75 rows (25 a class) and its repeats 20 a class (plan_rungs): n_splits=21 fails on them only
    (it failed after the first rung's extraction), n_splits=20 is the boundary that runs."""
    screen = ScreeningConfig(eta=2, seed=1, repeats=3, metric=RidgeProbeMetric(n_splits=21))
    with pytest.raises(ConfigError, match=r"screening.metric on rung 0 \(75 of 600 rows\), repeat 0: metric "
                                          r"'ridge_probe': every class has fewer rows than n_splits=21 \(the largest "
                                          r"has 20\).*raise ScreeningConfig.start_rows"):
        Benchmark(_dataset(), _candidates(), **QUIET, screening=screen)
    Benchmark(_dataset(), _candidates(), **QUIET,
              screening=ScreeningConfig(eta=2, seed=1, repeats=3, metric=RidgeProbeMetric(n_splits=20)))

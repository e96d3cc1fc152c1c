"""Adaptive repeats (issue 30, item 2): StabilityConfig(repeats="auto") adds paired repeats in rounds until every
verdict against the best is decided or max_repeats is reached."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, CacheConfig, CallableMetric, ConfigError, DatasetIdentity,
                           OverlapScoringConfig, PrecomputedExtractor, StabilityConfig)
from vertebrae.cli.main import main
from vertebrae.errors import ConfigTypeError
from vertebrae.execution.caching import NOT_MEASURED_CACHE_HIT
from vertebrae.scoring.overlap import OverlapIndexScorer
from vertebrae.scoring.paired_verdicts import compare_paired
from vertebrae.inputs.targets import build_targets

from .conftest import gaussian_classes

IDENTITY = DatasetIdentity.declared("adaptive", "1")
FAST = OverlapScoringConfig(k=3)


@pytest.fixture(scope="module")
def data():
    X, y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, spread=1.5, seed=1)
    rng = np.random.default_rng(0)
    noisy = X + rng.normal(0, 2.0, X.shape).astype(np.float32)  # clearly worse than X
    near_a = X + rng.normal(0, 0.3, X.shape).astype(np.float32)  # two near-copies of X: tied with it
    near_b = X + rng.normal(0, 0.3, X.shape).astype(np.float32)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY), X, y, noisy, near_a, near_b


def _clear(data, config, **kwargs):
    dataset, X, _, noisy, _, _ = data
    return Benchmark(dataset, [PrecomputedExtractor("noisy", noisy), PrecomputedExtractor("clean", X)],
                     scoring_config=FAST, stability_config=config, progress=False, **kwargs)


def _tied(data, config, **kwargs):
    dataset, X, _, _, near_a, near_b = data
    return Benchmark(dataset, [PrecomputedExtractor("a", near_a), PrecomputedExtractor("b", near_b),
                               PrecomputedExtractor("clean", X)],
                     scoring_config=FAST, stability_config=config, progress=False, **kwargs)


def _without_timing(result) -> str:
    document = result.to_dict()
    document.pop("timing", None)
    return json.dumps(document, sort_keys=True)


def test_a_clear_case_stops_after_the_first_round_with_every_verdict_decided(data):
    result = _clear(data, StabilityConfig(repeats="auto", min_repeats=4, batch_repeats=3)).run()
    record = result.metadata["adaptive_repeats"]
    assert record == {"repeats": 4, "rounds": 1, "windows": [[0, 4]], "stopped": "decided", "equivalence_margin": 0.01,
                      "undecided": [], "decisions": {"noisy": {"view": None, "repeats_to_decide": 4}}}
    noisy = result["noisy"].stability.repeat_scores["score"]
    clean = result["clean"].stability.repeat_scores["score"]
    assert len(noisy) == 4 and max(np.subtract(noisy, clean)) < 0  # every paired difference says: worse
    assert [c.verdict for c in result.paired_verdicts().against_best] == ["best", "worse"]
    assert result.to_dataframe()["stability_repeats"].tolist() == [4, 4]
    markdown = result.to_markdown()
    assert "Adaptive repeats: stopped after 4 repeats (1 round); all verdicts decided." in markdown
    # the reading guide counts the repeats run (it said "over auto repeats")
    assert "range of the overlap score over 4 repeats" in markdown and "over auto repeats" not in markdown


def test_the_repeats_of_an_auto_run_are_those_of_a_fixed_run_and_of_bare_scoring_calls(data):
    """Prefix property: repeat i does not depend on how many repeats are run."""
    auto = _tied(data, StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=7)).run()
    n = auto.metadata["adaptive_repeats"]["repeats"]
    assert n == 7 and auto.metadata["adaptive_repeats"]["windows"] == [[0, 3], [3, 5], [5, 7]]
    fixed = _tied(data, StabilityConfig(repeats=n)).run()
    dataset, X, y, _, near_a, _ = data
    # The seeds by hand: the scorer's own seed, then the first n-1 words of the scoring stream of random_state 0.
    stream = np.random.SeedSequence(0).spawn(2)[0]
    seeds = [FAST.random_state, *stream.generate_state(n - 1).tolist()]
    scorer, targets = OverlapIndexScorer(FAST), build_targets(y)
    for name, matrix in (("a", near_a), ("clean", X)):
        stability = auto[name].stability
        assert stability.scoring_seeds == seeds == fixed[name].stability.scoring_seeds
        bare = [scorer.score(matrix, targets, seed=seed, warn=False).score for seed in seeds]
        assert stability.repeat_scores["score"] == bare == fixed[name].stability.repeat_scores["score"]
        assert stability.summaries == fixed[name].stability.summaries
    assert [c.to_dict() for c in auto.paired_verdicts().against_best] == \
        [c.to_dict() for c in fixed.paired_verdicts().against_best]


def test_ties_run_to_max_repeats_and_are_recorded_undecided(data):
    result = _tied(data, StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=7)).run()
    record = result.metadata["adaptive_repeats"]
    assert (record["repeats"], record["rounds"], record["stopped"]) == (7, 3, "max_repeats")
    compared = result.paired_verdicts().against_best[1:]  # in ranking order, like the record
    undecided = [c.candidate for c in compared if c.difference_low <= 0 <= c.difference_high]
    assert undecided and record["undecided"] == undecided
    for name in undecided:
        assert record["decisions"][name] == {"view": None, "repeats_to_decide": None}
    assert "max_repeats reached with these verdicts undecided" in result.to_markdown()


def test_an_equivalence_margin_decides_a_tie_that_lies_within_it(data):
    result = _tied(data, StabilityConfig(repeats="auto", min_repeats=3, equivalence_margin=0.5)).run()
    record = result.metadata["adaptive_repeats"]
    assert (record["repeats"], record["stopped"], record["undecided"]) == (3, "decided", [])
    for comparison in result.paired_verdicts().against_best[1:]:
        assert -0.5 <= comparison.difference_low and comparison.difference_high <= 0.5


def test_the_decision_rule_is_the_paired_interval_of_the_verdicts(data):
    """Checked against compare_paired on hand-made repeat scores: excludes 0, within the margin, neither."""
    from vertebrae.selection.adaptive_repeats import is_decided

    best = [0.80, 0.82, 0.81, 0.79]
    worse = compare_paired("w", "b", [0.70, 0.71, 0.69, 0.72], best, higher_is_better=True, interval_level=0.95)
    tied = compare_paired("t", "b", [0.81, 0.80, 0.80, 0.80], best, higher_is_better=True, interval_level=0.95)
    assert is_decided(worse, 0.0) and not is_decided(tied, 0.0)
    assert is_decided(tied, 0.03) and not is_decided(tied, 0.01)  # d = 0.01, -0.02, -0.01, 0.01


def test_the_result_json_is_byte_identical_run_to_run(data):
    config = StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=5)
    first, second = _tied(data, config).run(), _tied(data, config).run()
    assert _without_timing(first) == _without_timing(second)
    loaded = type(first).from_dict(json.loads(json.dumps(first.to_dict())))
    assert loaded.metadata["adaptive_repeats"] == first.metadata["adaptive_repeats"]
    assert loaded["a"].stability.config.repeats == "auto"


def test_a_rerun_with_a_cache_reads_every_round_back(data, tmp_path):
    config = StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=5)
    first = _tied(data, config, cache_config=CacheConfig(store=str(tmp_path))).run()
    again = _tied(data, config, cache_config=CacheConfig(store=str(tmp_path))).run()
    assert first["a"].runtime["stability_round"] != NOT_MEASURED_CACHE_HIT
    assert again["a"].runtime["stability_round"] == NOT_MEASURED_CACHE_HIT
    for name in ("a", "b", "clean"):
        assert again[name].stability.to_dict() == first[name].stability.to_dict()
    assert again.metadata["adaptive_repeats"] == first.metadata["adaptive_repeats"]
    # A larger max_repeats reuses the stored rounds: only the new ones are scored.
    more = _tied(data, config.replace(max_repeats=7), cache_config=CacheConfig(store=str(tmp_path))).run()
    assert more.metadata["adaptive_repeats"]["windows"][:2] == [[0, 3], [3, 5]]
    assert isinstance(more["a"].runtime["stability_round"], float)  # the new round was measured


def test_a_stored_round_holds_only_what_its_key_hashes(data, tmp_path):
    """A round's key hashes its draws, not the stopping rule, so runs with another interval level or margin reuse
    it; it stored the whole config and intervals at the storing run's level, so the same key held different bytes
    depending on which run wrote it.  Now every run stores the same bytes, and each still gets its own level."""
    stores = []
    for level, margin in ((0.95, 0.01), (0.5, 0.05)):
        store = tmp_path / f"level{level}"
        config = StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=3,
                                 interval_level=level, equivalence_margin=margin)
        result = _tied(data, config, cache_config=CacheConfig(store=str(store))).run()
        assert result["a"].stability.config.interval_level == level  # the run's own level, after the merge
        stores.append({path.relative_to(store): path.read_bytes() for path in sorted(store.rglob("*"))
                       if path.is_file() and "stability_round" in path.parts and path.name != "manifest.json"})
    assert stores[0] and stores[0] == stores[1]  # the artifacts (a manifest also records when and by whom)


def test_a_dask_run_gives_the_local_result(data, dask_client):
    from vertebrae.execution.dask import DaskRunner

    config = StabilityConfig(repeats="auto", min_repeats=3, batch_repeats=2, max_repeats=5)
    local = _tied(data, config).run()
    remote = _tied(data, config).run(runner=DaskRunner(dask_client))
    assert _without_timing(remote) == _without_timing(local)


def test_a_fixed_config_keeps_its_fields_and_json():
    assert StabilityConfig(repeats=20).to_dict() == {"mode": "prototype", "repeats": 20, "interval_level": 0.95,
                                                     "subsample_fraction": 0.8, "random_state": 0, "n_jobs": 1}
    auto = StabilityConfig(repeats="auto")
    assert (auto.min_repeats, auto.max_repeats, auto.batch_repeats, auto.equivalence_margin) == (5, 50, 5, 0.01)
    assert StabilityConfig.from_dict(auto.to_dict()) == auto


@pytest.mark.parametrize("kwargs, error, words", [
    ({"repeats": "5"}, ConfigTypeError, "repeats must be an int >= 2 or the string 'auto'"),
    ({"repeats": "AUTO"}, ConfigTypeError, "repeats must be an int >= 2 or the string 'auto'"),
    ({"repeats": "auto", "min_repeats": 1}, ConfigError, "min_repeats"),
    ({"repeats": "auto", "max_repeats": 10_001}, ConfigError, "max_repeats must be <= 10000"),
    ({"repeats": "auto", "batch_repeats": 0}, ConfigError, "batch_repeats"),
    ({"repeats": "auto", "min_repeats": 8, "max_repeats": 6}, ConfigError, "min_repeats (8) must be <= max_repeats"),
    ({"repeats": "auto", "equivalence_margin": -0.1}, ConfigError, "equivalence_margin"),
    ({"repeats": "auto", "equivalence_margin": float("nan")}, ConfigError, "equivalence_margin"),
    ({"repeats": 20, "max_repeats": 30}, ConfigError, "max_repeats is read only with repeats='auto'"),
    ({"repeats": "auto", "min_repeat": 3}, ConfigError, "did you mean 'min_repeats'"),
])
def test_each_bad_field_is_refused_by_name(kwargs, error, words):
    with pytest.raises(error) as caught:
        StabilityConfig(**kwargs)
    assert words in str(caught.value)


def test_auto_needs_the_overlap_ranking(data):
    dataset, X, _, noisy, _, _ = data
    metric = CallableMetric("width", lambda embeddings, labels, **kw: {"score": float(embeddings.shape[1])})
    with pytest.raises(ConfigError, match="primary_metric is 'width'; use a fixed count"):
        Benchmark(dataset, [PrecomputedExtractor("clean", X)], metrics=[metric], primary_metric="width",
                  stability_config=StabilityConfig(repeats="auto"))


def test_a_staged_plan_refuses_auto_in_one_line(tmp_path, monkeypatch, capsys):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=2)
    np.save(tmp_path / "full.npy", X)
    np.save(tmp_path / "labels.npy", y)
    (tmp_path / "run.toml").write_text('[dataset]\nid = "blobs"\nrevision = "1"\nlabels = "labels.npy"\n\n'
                                       '[[extractors]]\nname = "full"\nembeddings = "full.npy"\n\n'
                                       '[stability]\nrepeats = "auto"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "run.toml", "--store", "store", "-o", "plan.json", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "set [stability] repeats to a count" in err[0] and "vertebrae run" in err[0]
    assert not (tmp_path / "plan.json").exists()


class Broken:
    """An extractor whose fit always fails (a real failure of user code, caught by on_error='record')."""

    name = "broken"

    def fit(self, X, y=None):
        raise RuntimeError("no model here")

    def transform(self, X):
        return X

    def recipe(self):
        return {"type": "broken"}


def test_a_failed_chain_gets_no_rounds_and_the_others_still_decide(data):
    dataset, X, _, noisy, _, _ = data
    with pytest.warns(Warning):
        result = Benchmark(dataset, [PrecomputedExtractor("noisy", noisy), Broken(), PrecomputedExtractor("clean", X)],
                           scoring_config=FAST, stability_config=StabilityConfig(repeats="auto", min_repeats=4),
                           on_error="record", progress=False).run()
    assert result["broken"].error["stage"] == "extract" and result["broken"].stability is None
    assert result.metadata["adaptive_repeats"]["decisions"] == {"noisy": {"view": None, "repeats_to_decide": 4}}


def test_round_state_lives_in_the_rounds_settings_not_the_users(data):
    """The user's BenchmarkSettings hold no round state; a round plans under RoundSettings (the run's settings plus
    the round's window), which pickles for remote runners and reads every other setting from the run's."""
    import dataclasses
    import pickle

    from vertebrae.families.labeled.benchmark import BenchmarkSettings
    from vertebrae.families.labeled.stages import repeat_window
    from vertebrae.families.front_door import RoundSettings

    assert not {f.name for f in dataclasses.fields(BenchmarkSettings)} & {"referee_finalists", "stability_window"}
    bench = _clear(data, StabilityConfig(repeats="auto", min_repeats=4, batch_repeats=2))
    settings = bench.settings
    later = pickle.loads(pickle.dumps(RoundSettings(settings, {"stability_window": (4, 6)})))
    assert repeat_window(settings) == (0, 4) and repeat_window(later) == (4, 6)
    assert later.stability_config == settings.stability_config and later.to_dict() == settings.to_dict()
    scope = bench.scope()  # what the rounds read instead of the front door
    assert scope.settings is settings and [c.name for c in scope.chains] == [c.name for c in bench.chains()]

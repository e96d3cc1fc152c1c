"""The referee: the primary metric ranks every candidate, a reference metric judges only the finalists."""

from __future__ import annotations

import copy
import sys
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CacheConfig, CallableExtractor,
                           CallableMetric, ConfigError, DatasetIdentity, InputTypeError, LinearProbeMetric,
                           OverlapScoringConfig, PrecomputedExtractor, StabilityConfig)
from vertebrae.cli.main import main
from vertebrae.reports.compare import compare_results
from vertebrae.execution.caching import NOT_MEASURED_CACHE_HIT
from vertebrae.selection.referee import decide
from vertebrae.reports.compare_report import render_comparison_html, render_comparison_markdown
from vertebrae.scoring.metric_result import MetricResult
from vertebrae.scoring.paired_verdicts import NEEDS_STABILITY

from .conftest import gaussian_classes
from .test_cli_metrics import CONFIG, write_project

IDENTITY = DatasetIdentity.declared("referee", "1")
FAST = OverlapScoringConfig(k=3)
X, Y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, spread=1.5, seed=1)
RNG = np.random.default_rng(0)
#: The best, a slightly perturbed copy (a finalist), and two clearly worse spaces (never finalists).
SPACES = {"clean": X, "jitter": X + RNG.normal(0, 0.05, X.shape).astype(np.float32),
          "noisy": X + RNG.normal(0, 3.0, X.shape).astype(np.float32),
          "random": RNG.normal(size=X.shape).astype(np.float32)}


def benchmark(spaces=SPACES, **kwargs) -> Benchmark:
    dataset = BenchmarkDataset.from_arrays(X, Y, identity=IDENTITY)
    kwargs.setdefault("stability_config", StabilityConfig(repeats=5))
    kwargs.setdefault("referee", LinearProbeMetric())
    return Benchmark(dataset, [PrecomputedExtractor(name, matrix) for name, matrix in spaces.items()],
                     scoring_config=FAST, progress=False, **kwargs)


@pytest.fixture(scope="module")
def refereed():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return benchmark().run()


def test_the_probe_runs_on_exactly_the_finalists_and_equals_a_direct_call(refereed):
    expected = [r.name for r in refereed.ranked_results()
                if r.name in {t.name for t in refereed.tied_with_best()} | {c.name for c in refereed.quality_cohort()}]
    assert set(expected) == {"clean", "jitter"}  # the scenario: two close candidates, two clearly worse ones
    [decision] = refereed.referee_decisions()
    assert decision.finalists == expected and decision.basis == "tied_with_best_and_quality_cohort" and decision.needed
    planned = [entry["extractor"] for entry in refereed.metadata["plan"] if entry["stage"] == "referee"]
    assert sorted(planned) == sorted(expected)  # the referee jobs of the plan: the finalists' only
    assert {r.name for r in refereed.extractor_results if "referee" in r.artifact_keys} == set(expected)
    assert {r.name for r in refereed.extractor_results if "referee" in r.runtime} == set(expected)
    assert refereed.timing["referee"]["seconds"] > 0
    for name in expected:  # the seed is the score stage's (OverlapScoringConfig.random_state, 0)
        direct = LinearProbeMetric()(SPACES[name], Y, seed=0)
        assert decision.results[name].score == direct["score"]
    scores = {name: decision.results[name].score for name in expected}
    best = max(scores.values())
    assert decision.pick == next(name for name in expected if scores[name] == best)
    assert [r.name for r in refereed.ranked_results()][:2] == expected  # the ranking stays the primary metric's
    assert f"Referee: overlap finalists: 2; the linear probe picks {decision.pick}" in "\n".join(
        refereed.recommendations)


def test_json_round_trip_and_reports(refereed, tmp_path):
    path = refereed.save_json(tmp_path / "r.json")
    loaded = BenchmarkResult.load(path)
    assert loaded.to_json() == refereed.to_json()
    assert loaded.referee_decisions() == refereed.referee_decisions()
    markdown, html = loaded.to_markdown(), loaded.to_html()
    pick = refereed.referee_decisions()[0].pick
    assert "## Referee: which finalist would a linear probe pick?" in markdown
    assert f"| {pick} | {refereed.referee_decisions()[0].results[pick].score:.4f} | yes |" in markdown
    assert "Referee: which finalist would a linear probe pick?" in html
    data = copy.deepcopy(refereed.serialized())
    data["metadata"]["referee"]["views"][0]["basis"] = "gut feeling"
    with pytest.raises(Exception, match="basis"):
        BenchmarkResult.from_dict(data)


def test_a_rerun_reads_the_referee_from_the_cache(tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = benchmark(cache_config=config).run()
        second = benchmark(cache_config=config).run()
    assert first["clean"].runtime["referee"] != NOT_MEASURED_CACHE_HIT
    assert second["clean"].runtime["referee"] == NOT_MEASURED_CACHE_HIT
    assert "referee_cache_read" in second["clean"].runtime
    assert second.referee_decisions() == first.referee_decisions()


def test_a_single_finalist_needs_no_referee():
    spaces = {"clean": SPACES["clean"], "random": SPACES["random"]}
    result = benchmark(spaces).run()
    [decision] = result.referee_decisions()
    assert decision.finalists == ["clean"] and not decision.needed and decision.results == {}
    assert decision.pick == "clean" and "the linear probe referee was not needed" in decision.summary
    assert not any(entry["stage"] == "referee" for entry in result.metadata["plan"])
    assert "referee" not in result["clean"].runtime


def test_without_stability_the_finalists_are_the_quality_cohort(refereed):
    result = benchmark(stability_config=None, quality_tolerance=1.0).run()
    [decision] = result.referee_decisions()
    assert decision.basis == "quality_cohort" and decision.basis_note == NEEDS_STABILITY
    assert decision.finalists == [r.name for r in result.quality_cohort()] and len(decision.finalists) == 4
    assert "(the quality cohort; paired verdicts need stability)" in "\n".join(result.recommendations)
    assert "paired verdicts need stability repeats" in result.to_markdown()


def probe(score: float) -> MetricResult:
    return MetricResult(name="p", score=score, higher_is_better=True, aggregate_valid=True)


def test_the_pick_follows_the_referee_direction_and_keeps_ranking_order_on_ties():
    metric = LinearProbeMetric()
    decision = decide(None, ["a", "b", "c"], "quality_cohort", None, metric,
                      {"a": probe(0.7), "b": probe(0.9), "c": probe(0.9)}, "overlap")
    assert decision.pick == "b" and decision.summary == ("overlap finalists: 3; the linear probe picks b "
                                                         "(linear_probe = 0.9000), not overlap's top candidate a")
    lower = CallableMetric("loss", lambda e, l, **k: {"score": 0.0}, higher_is_better=False)
    assert decide(None, ["a", "b"], "quality_cohort", None, lower, {"a": probe(0.7), "b": probe(0.2)},
                  "overlap").pick == "b"
    invalid = MetricResult(name="p", score=None, higher_is_better=True, aggregate_valid=False, error="boom")
    none = decide(None, ["a", "b"], "quality_cohort", None, metric, {"a": invalid, "b": invalid}, "overlap")
    assert none.pick is None and "no finalist has a valid linear_probe score" in none.summary


def test_bad_referees_are_refused_before_any_work():
    with pytest.raises(InputTypeError, match=r"referee \(str\) is not a metric"):
        benchmark(referee="probe")
    descriptive = CallableMetric("spread", lambda e, l, **k: {"score": 0.0}, aggregate_valid=False)
    with pytest.raises(ConfigError, match="referee 'spread' declares aggregate_valid=False"):
        benchmark(referee=descriptive)


@pytest.fixture
def project(tmp_path, monkeypatch):
    module = write_project(tmp_path, monkeypatch, "", "vertebrae_referee")
    (tmp_path / "run.toml").write_text(CONFIG + "\n[stability]\nrepeats = 3\n")
    yield tmp_path
    sys.modules.pop(module, None)


def test_cli_referee_probe(project, capsys):
    assert main(["run", str(project / "run.toml"), "-o", str(project / "out"), "-q", "--referee", "probe"]) == 0
    result = BenchmarkResult.load(project / "out" / "report.json")
    assert result.metadata["referee"]["metric"] == "linear_probe"
    assert result.metadata["settings"]["referee"] == LinearProbeMetric().identity()
    assert result.referee_decisions()[0].finalists


@pytest.mark.parametrize("how", ["option", "config"])
def test_an_unknown_referee_is_one_line_and_exit_2(project, capsys, how):
    config = project / "run.toml"
    argv = ["run", str(config), "-o", str(project / "out"), "-q"]
    if how == "option":
        argv += ["--referee", "tree"]
    else:
        config.write_text(config.read_text().replace("[scoring]", '[benchmark]\nreferee = "tree"\n\n[scoring]'))
    try:
        code = main(argv)
    except SystemExit as exit_info:  # the option's choices are argparse's, which exits
        code = exit_info.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    says = ("argument --referee: invalid choice: 'tree' (choose from 'probe')" if how == "option" else
            "referee must be one of ['probe'], got 'tree'")
    assert len(err.splitlines()) == 1 and says in err


def test_a_staged_plan_refuses_the_referee(project, capsys):
    config = project / "run.toml"
    config.write_text(config.read_text().replace("[scoring]", '[benchmark]\nreferee = "probe"\n\n[scoring]'))
    assert main(["plan", str(config), "--store", str(project / "store"), "-o", str(project / "plan.json"),
                 "-q"]) == 2
    assert "a staged run does not plan" in capsys.readouterr().err


# ----------------------------------------------------------------------------- compare: verdict changes
def hand_made(refereed, scores: dict[str, list[float]] | None) -> dict:
    """``refereed`` as a document with the given repeat scores (None: without stability)."""
    data = copy.deepcopy(refereed.serialized())
    del data["metadata"]["referee"]
    for r in data["extractor_results"]:
        if scores is None:
            r["stability"] = None
            continue
        n = len(scores[r["name"]])
        r["stability"]["repeat_scores"] = {name: (values * n)[:n] for name, values in
                                           r["stability"]["repeat_scores"].items()}
        r["stability"]["repeat_scores"]["score"] = scores[r["name"]]
        r["stability"]["effective_subsample_fractions"] = (r["stability"]["effective_subsample_fractions"] * n)[:n]
        r["stability"]["config"]["repeats"] = n
        r["overlap"]["score"] = r["primary_score"] = r["metrics"]["overlap"]["score"] = scores[r["name"]][0]
    return BenchmarkResult.from_dict(data).serialized()


def test_compare_shows_verdict_changes(refereed):
    worst = {"noisy": [0.1, 0.1, 0.1, 0.1], "random": [0.0, 0.0, 0.0, 0.0]}
    tied = hand_made(refereed, {"clean": [0.9, 0.8, 0.9, 0.8], "jitter": [0.8, 0.9, 0.8, 0.9], **worst})
    worse = hand_made(refereed, {"clean": [0.9, 0.9, 0.9, 0.9], "jitter": [0.8, 0.8, 0.8, 0.8], **worst})
    comparison = compare_results(tied, worse)
    rows = {r["extractor"]: r for r in comparison["verdicts"]["candidates"]}
    assert (rows["jitter"]["verdict_a"], rows["jitter"]["verdict_b"], rows["jitter"]["changed"]) == (
        "tied", "worse", True)
    assert rows["clean"]["verdict_a"] == rows["clean"]["verdict_b"] == "best"
    assert comparison["verdicts"]["changed"] == ["jitter"] and comparison["verdicts"]["unavailable"] == []
    markdown = render_comparison_markdown(comparison)
    assert "Paired verdicts against the best changed for: jitter (tied → worse)." in markdown
    assert "| jitter | tied | worse | yes |" in markdown
    assert "jitter (tied → worse)" in render_comparison_html(comparison)


def test_compare_says_when_a_run_has_no_verdicts(refereed):
    without = hand_made(refereed, None)
    comparison = compare_results(without, refereed.serialized(), names=("old.json", "new.json"))
    assert comparison["verdicts"]["unavailable"] == [f"old.json: {NEEDS_STABILITY}"]
    assert all(r["verdict_a"] is None and not r["changed"] for r in comparison["verdicts"]["candidates"])
    assert f"Paired verdicts unavailable in old.json: {NEEDS_STABILITY}." in render_comparison_markdown(comparison)


def test_the_referee_round_reads_the_embeddings_the_first_round_scored_and_never_extracts_again():
    """Without a cache, a noisy extractor re-run for the referee would give another embedding than the one
    ranked; the round reads the first round's artifacts instead, so each extractor runs once."""
    calls: list[str] = []
    # seeded so the finalists are the same on every run (an unseeded draw left one finalist about once in a few
    # hundred runs); the generator still advances, so a second extraction would differ from the first
    rng = np.random.default_rng(0)

    def noisy_copy(name: str, matrix: np.ndarray):
        def embed(rows):
            calls.append(name)
            return matrix[np.asarray(rows, dtype=int).ravel()] + rng.normal(0, 0.01, (len(rows), matrix.shape[1]))
        return CallableExtractor(name, embed)  # a closure: an unsafe identity the cache can never serve

    index = np.arange(len(X))
    dataset = BenchmarkDataset.from_arrays(index.reshape(-1, 1), Y, identity=IDENTITY)
    extractors = [noisy_copy(name, matrix) for name, matrix in SPACES.items()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = Benchmark(dataset, extractors, scoring_config=FAST, progress=False,
                           stability_config=StabilityConfig(repeats=5), referee=LinearProbeMetric()).run()
    assert sorted(calls) == sorted(SPACES)  # one extraction per extractor, none in the referee round
    [decision] = result.referee_decisions()
    assert len(decision.finalists) >= 2
    for name in decision.finalists:  # the referee scored the very embedding each finalist was ranked on
        assert result[name].embedding["cache_status"] == "bypassed_unsafe_identity"
    assert {r.name for r in result.extractor_results if "referee" in r.runtime} == set(decision.finalists)


# ----------------------------------------------------------------------------- finalist policies
def judged(result: BenchmarkResult) -> list[str]:
    """The candidates the referee round scored (its jobs in the plan)."""
    return [entry["extractor"] for entry in result.metadata["plan"] if entry["stage"] == "referee"]


def test_the_default_policy_keeps_the_settings_bytes(refereed):
    assert "referee_finalists" not in refereed.metadata["settings"]
    assert "finalists_policy" not in refereed.metadata["referee"]


def test_all_judges_every_valid_candidate():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = benchmark(referee_finalists="all").run()
    [decision] = result.referee_decisions()
    ranked = [r.name for r in result.ranked_results()]
    assert decision.finalists == ranked and sorted(judged(result)) == sorted(ranked) and len(ranked) == 4
    assert decision.basis == "every_valid_candidate" and decision.summary.startswith("every valid candidate: 4;")
    policy = result.metadata["referee"]["finalists_policy"]
    assert policy["policy"] == "all" and policy["judged"] == "all" and "judges every valid candidate" in policy["why"]
    assert result.metadata["settings"]["referee_finalists"] == "all"
    # the pick and its tied set: probe verdicts over the judged candidates, equal to a direct probe of each
    for name in ranked:
        assert decision.results[name].score == LinearProbeMetric()(SPACES[name], Y, seed=0)["score"]
    verdicts = result.referee_verdicts()
    assert verdicts.tied_names[0] == decision.pick
    assert [r.name for r in result.tied_with_best(metric="linear_probe")] == verdicts.tied_names
    note = next(n for n in result.recommendations if n.startswith("Referee:"))
    others = verdicts.tied_names[1:]
    if others:
        assert f"it cannot tell {decision.pick} from " in note and all(name in note for name in others)
    assert BenchmarkResult.from_json(result.to_json()).referee_verdicts() == verdicts


def widened_by_hand(result: BenchmarkResult) -> list[str]:
    ranked = [r.name for r in result.ranked_results()]
    chosen = ({r.name for r in result.tied_with_best()} | {r.name for r in result.quality_cohort()}
              | set(ranked[:int(np.ceil(len(ranked) / 4))]))
    return [name for name in ranked if name in chosen]


@pytest.mark.parametrize("share, branch", [(1.0, "all"), (0.01, "widened")])
def test_auto_takes_each_branch_by_its_cost_model(share, branch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = benchmark(referee_finalists="auto", referee_share=share).run()
    [decision] = result.referee_decisions()
    ranked = [r.name for r in result.ranked_results()]
    widened = widened_by_hand(result)
    policy = result.metadata["referee"]["finalists_policy"]
    # the model by hand: probes of the candidates beyond the widened finalists (5 overlap scorings each, width 6)
    # against every candidate's scoring (width 6 x (1 + 5 stability repeats))
    estimate = 5.0 * 6 * (len(ranked) - len(widened)) / (6 * 6 * len(ranked))
    assert policy["estimated_share"] == pytest.approx(estimate) and policy["basis"] == "cost_model"
    assert policy["judged"] == branch and policy["share"] == share
    expected = ranked if branch == "all" else widened
    assert decision.finalists == expected and sorted(judged(result)) == sorted(expected)
    assert decision.basis == ("every_valid_candidate" if branch == "all"
                              else "tied_with_best_quality_cohort_and_top_quarter")
    assert 0 < estimate <= 1.0 and estimate > 0.01  # the two shares force the two branches
    assert f"Finalist policy 'auto': {policy['why']}." in result.to_markdown()


def test_auto_reruns_warm_from_the_cache(tmp_path):
    config = CacheConfig(store=str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = benchmark(cache_config=config, referee_finalists="auto", referee_share=1.0).run()
        second = benchmark(cache_config=config, referee_finalists="auto", referee_share=1.0).run()
    names = judged(second)
    assert sorted(names) == sorted(judged(first)) and len(names) == 4
    assert all(second[name].runtime["referee"] == NOT_MEASURED_CACHE_HIT for name in names)  # nothing computed
    assert second.metadata["referee"] == first.metadata["referee"]


def test_bad_policies_are_refused_before_any_work():
    with pytest.raises(ConfigError,
                       match=r"referee_finalists \(--finalists\) must be one of \['overlap', 'all', 'auto'\], got 'some'"):
        benchmark(referee_finalists="some")
    with pytest.raises(ConfigError, match="no referee is set"):
        benchmark(referee=None, referee_finalists="all")
    with pytest.raises(ConfigError, match="referee_share"):
        benchmark(referee_finalists="auto", referee_share=0.0)
    for kwargs in ({"referee": None}, {}, {"referee_finalists": "all"}):  # only 'auto' reads the share
        for share in (0.5, 0.25):  # the default too, when given: it would be ignored just the same
            with pytest.raises(ConfigError, match=f"referee_share={share} is the budget of the 'auto' finalist"):
                benchmark(referee_share=share, **kwargs)


# ----------------------------------------------------------------------------- the terminal says what was found
@pytest.fixture
def four_spaces(tmp_path):
    for name, matrix in SPACES.items():
        np.save(tmp_path / f"{name}.npy", matrix)
    np.save(tmp_path / "labels.npy", Y)
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "four"\nrevision = "1"\nlabels = "labels.npy"\n'
        + "".join(f'[[extractors]]\nname = "{name}"\nembeddings = "{name}.npy"\n' for name in SPACES)
        + "[scoring]\nk = 3\n[stability]\nrepeats = 5\n[separatix]\nenabled = false\n")
    return tmp_path


def cli(folder, *options) -> tuple[str, BenchmarkResult]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), *options]) == 0
    return BenchmarkResult.load(folder / "out" / "report.json")


def test_the_console_names_the_probe_pick_and_the_referee_pick(four_spaces, capsys):
    result = cli(four_spaces, "--probe", "--referee", "probe", "--finalists", "all")
    out = capsys.readouterr().out
    [agreement] = [a for a in result.agreement() if a.reference_metric == "linear_probe"]
    tied = result.paired_verdicts(metric="linear_probe").tied_names
    assert not agreement.top1_same  # the scenario: the probe picks another candidate than overlap
    line = (f"Linear probe: picks {agreement.reference_top1[0]}, not {agreement.primary_top1} (regret "
            f"{agreement.regret:.4f} in linear_probe); it cannot tell {tied[0]} from ")
    [probe_line] = [text for text in out.splitlines() if text.startswith("Linear probe:")]
    assert probe_line.startswith(line) and all(name in probe_line for name in tied)
    [decision] = result.referee_decisions()
    [referee_line] = [text for text in out.splitlines() if text.startswith("Referee:")]
    assert referee_line.startswith(f"Referee: every valid candidate: 4; the linear probe picks {decision.pick} ")
    assert result.metadata["referee"]["finalists_policy"]["policy"] == "all"


def test_without_the_options_the_console_adds_no_lines(four_spaces, capsys):
    cli(four_spaces)
    out = capsys.readouterr().out
    assert not any(text.startswith(("Linear probe:", "Referee:")) for text in out.splitlines())
    assert "screened out" not in out


def test_the_console_counts_the_screened_out_candidates(four_spaces, capsys):
    result = cli(four_spaces, "--screen")
    screened = [r.name for r in result.extractor_results if r.screened_out]
    assert screened  # the scenario: screening leaves some candidates behind
    assert (f"{len(screened)} of 4 candidates were screened out before the full evaluation"
            in capsys.readouterr().out)


@pytest.mark.parametrize("how", ["option", "config", "no-referee"])
def test_a_bad_finalist_policy_is_one_line_and_exit_2(four_spaces, capsys, how):
    config = four_spaces / "run.toml"
    argv = ["run", str(config), "-o", str(four_spaces / "out"), "-q"]
    if how == "option":
        argv += ["--referee", "probe", "--finalists", "most"]
    elif how == "config":
        config.write_text(config.read_text() + '[benchmark]\nreferee = "probe"\nreferee_finalists = "most"\n')
    else:
        argv += ["--finalists", "all"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert ("no referee is set: pass referee=LinearProbeMetric() (vertebrae run: add --referee probe)"
            if how == "no-referee" else
            "config [benchmark]: Benchmark.referee_finalists (--finalists) must be one of ['overlap', 'all', 'auto'], "
            "got 'most'") in err


def test_the_widened_finalists_add_the_top_quarter():
    """Without stability and with a tight tolerance the overlap finalists are the top candidate alone (no referee
    needed); auto's widened finalists add the top quarter of 8 candidates, so the referee judges two."""
    more = {**SPACES, **{f"random{i}": np.random.default_rng(i).normal(size=X.shape).astype(np.float32)
                         for i in range(4)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = benchmark(more, stability_config=None, quality_tolerance=0.0).run()
        widened = benchmark(more, stability_config=None, quality_tolerance=0.0, referee_finalists="auto",
                            referee_share=0.01).run()
    ranked = [r.name for r in plain.ranked_results()]
    assert plain.referee_decisions()[0].finalists == ranked[:1] and judged(plain) == []
    [decision] = widened.referee_decisions()
    assert decision.finalists == ranked[:2] and sorted(judged(widened)) == sorted(ranked[:2])
    assert decision.basis == "quality_cohort_and_top_quarter"
    assert widened.metadata["referee"]["finalists_policy"]["judged"] == "widened"
    assert "(the quality cohort and the top quarter; paired verdicts need stability)" in "\n".join(
        widened.recommendations)

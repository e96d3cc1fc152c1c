"""Stability as a benchmark stage: results, rows, JSON, Markdown and ranking stability."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import sparse

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CallableExtractor, ConfigError, DatasetIdentity,
                       OverlapScoringConfig, PrecomputedExtractor, StabilityConfig)
from vertebrae._base import json_codec
from vertebrae.scoring.stability import ranking_stability

from .conftest import gaussian_classes
from .references import direct_oi, per_class_rows

IDENTITY = DatasetIdentity.declared("stability-test", "1")
STABILITY_COLUMNS = ["stability_mode", "stability_repeats", "stability_interval_level", "stability_mean",
                     "stability_std", "stability_min", "stability_max", "stability_interval_low",
                     "stability_interval_high", "stability_interval_width"]


def half(X):
    return X[:, :3]


@pytest.fixture(scope="module")
def run():
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, seed=4)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)
    extractors = [PrecomputedExtractor("raw", X), CallableExtractor("half", half)]
    config = StabilityConfig(mode="subsample", repeats=3, interval_level=0.9)
    benchmark = Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=3), stability_config=config)
    return benchmark, benchmark.run(), X, y


def test_stage_runs_after_scoring_on_the_evaluated_embeddings(run) -> None:
    benchmark, result, X, y = run
    stages = [job.stage for job in benchmark.plan() if job.extractor == "half"]
    assert stages.index("stability") == stages.index("score") + 1 and stages[-1] == "assemble"
    half_result = result["half"]
    assert "stability" in half_result.runtime
    # Reference: the documented plan restated (SeedSequence(random_state=0).spawn(2): scoring seeds 0 then the first
    # stream's, sampling seeds the second's; floor(30 x 0.8) = 24 rows per class from default_rng(sampling seed)),
    # each repeat scored by OverlapIndex called directly on the evaluated (half) embeddings of those rows.
    scoring, sampling = np.random.SeedSequence(0).spawn(2)
    scoring_seeds, sampling_seeds = [0, *scoring.generate_state(2).tolist()], sampling.generate_state(3).tolist()
    rows = [per_class_rows(y, [24] * 3, seed) for seed in sampling_seeds]
    expected = [direct_oi(half(X)[r], y[r], 3, seed=s).index for r, s in zip(rows, scoring_seeds)]
    stability = half_result.stability
    assert (stability.scoring_seeds, stability.sampling_seeds) == (scoring_seeds, sampling_seeds)
    assert stability.repeat_scores["score"] == expected and len(set(expected)) == 3
    assert stability.effective_sample_counts == [72] * 3
    raw = result["raw"].stability
    assert (raw.scoring_seeds, raw.sampling_seeds) == (scoring_seeds, sampling_seeds)


def test_n_jobs_does_not_change_the_stability_artifact_key(run) -> None:
    benchmark, *_ = run
    config = benchmark.settings.stability_config
    faster = Benchmark(benchmark.dataset, benchmark.extractors, scoring_config=OverlapScoringConfig(k=3),
                       stability_config=config.replace(n_jobs=2))
    keys = [[job.key for job in b.plan() if job.stage == "stability"] for b in (benchmark, faster)]
    assert keys[0] == keys[1]


def test_rows_carry_the_stability_columns(run) -> None:
    _, result, *_ = run
    frame = result.to_dataframe()
    assert set(STABILITY_COLUMNS) <= set(frame.columns)
    row = frame.set_index("extractor").loc["raw"]
    summary = result["raw"].stability.summary
    assert (row["stability_mode"], row["stability_repeats"], row["stability_interval_level"]) == ("subsample", 3, 0.9)
    assert row["stability_mean"] == summary.mean and row["stability_interval_width"] == summary.interval_width
    assert "runtime.stability" in frame.columns


def test_without_stability_the_columns_are_empty(run) -> None:
    benchmark, *_ = run
    plain = Benchmark(benchmark.dataset, benchmark.extractors, scoring_config=OverlapScoringConfig(k=3)).run()
    assert all(plain.rows()[0][column] is None for column in STABILITY_COLUMNS)
    assert plain.ranking_stability is None and plain.to_dict()["ranking_stability"] is None
    assert "## Stability" not in plain.to_markdown()


def test_json_round_trip_and_ranking_stability(run) -> None:
    _, result, *_ = run
    data = json_codec.decode(json.loads(json.dumps(json_codec.encode(result.to_dict()))))
    ranked = [r.name for r in sorted((result["raw"], result["half"]), key=lambda r: -r.overlap.score)]
    assert data["ranking_stability"] == ranking_stability(
        {name: result[name].stability.repeat_scores["score"] for name in ("raw", "half")}, ranked=ranked)
    restored = BenchmarkResult.from_dict(data)
    assert restored["raw"].stability == result["raw"].stability
    assert restored.ranking_stability == result.ranking_stability


def test_markdown_interval_column_and_sections(run) -> None:
    _, result, *_ = run
    text = result.to_markdown()
    headers = [line for line in text.splitlines() if line.startswith("| rank")]
    assert "stability_interval" in headers[1]  # the ranking table; the answer table leads
    summary = result["raw"].stability.summary
    interval = f"[{summary.interval_low:.4f}, {summary.interval_high:.4f}]"
    answer = text[text.index("## Answer"):text.index("## Ranking")]
    assert f"| {result['raw'].primary_score:.4f} {interval} |" in answer  # primary score with its interval
    assert interval in text[text.index("## Ranking"):]
    assert "## Stability" in text and "### Ranking stability" in text
    assert "subsample mode" in text


def test_benchmark_rejects_a_foreign_stability_config(run) -> None:
    benchmark, *_ = run
    with pytest.raises(ConfigError, match="stability_config must be a StabilityConfig"):
        Benchmark(benchmark.dataset, benchmark.extractors, stability_config={"repeats": 3})  # type: ignore[arg-type]


def test_dense_and_sparse_extractors_share_seeds() -> None:
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=5, seed=5)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    extractors = [PrecomputedExtractor("dense", X), PrecomputedExtractor("sparse", sparse.csr_matrix(X))]
    result = Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=3),
                       stability_config=StabilityConfig(repeats=2)).run()
    dense, sparse_result = result["dense"].stability, result["sparse"].stability
    assert dense.scoring_seeds == sparse_result.scoring_seeds
    np.testing.assert_allclose(dense.repeat_scores["score"], sparse_result.repeat_scores["score"])


def test_infeasible_subsample_fails_when_the_benchmark_is_built():
    import numpy as np

    from vertebrae import (Benchmark, BenchmarkDataset, CallableExtractor, ConfigError, DatasetIdentity,
                               StabilityConfig)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    y = np.repeat([0, 1], 20)
    calls = []

    def counting(A):
        calls.append(1)
        return A

    ds = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("d", "1"))
    with pytest.raises(ConfigError, match="prototype"):
        Benchmark(ds, [CallableExtractor("a", counting)],
                  stability_config=StabilityConfig(mode="subsample", subsample_fraction=0.05))
    assert calls == []


def test_ranking_stability_says_it_follows_overlap_when_another_metric_is_primary():
    import numpy as np

    from vertebrae import (Benchmark, BenchmarkDataset, CallableMetric, DatasetIdentity, PrecomputedExtractor,
                               SeparatixConfig, StabilityConfig)

    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(0, 1, (30, 4)), rng.normal(2, 1, (30, 4))])
    y = np.repeat([0, 1], 30)

    def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
        return {"score": float(np.std(embeddings))}

    ds = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("d", "1"))
    result = Benchmark(ds, [PrecomputedExtractor("a"), PrecomputedExtractor("b", X * 2 + rng.normal(0, 1, X.shape))],
                       metrics=[CallableMetric("spread", spread)], primary_metric="spread",
                       separatix_config=SeparatixConfig(enabled=False),
                       stability_config=StabilityConfig(repeats=3)).run()
    assert "not of the **spread** ranking" in result.to_markdown()


# ------------------------------------------------------- issue 11 item 13: ranked score vs its stability set
@pytest.fixture(scope="module")
def wine_run():
    from sklearn.datasets import load_wine
    from sklearn.decomposition import PCA

    from vertebrae import SeparatixConfig, SklearnExtractor

    X, y = load_wine(return_X_y=True)
    dataset = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("wine", "sklearn"))
    extractors = [PrecomputedExtractor("raw", X), SklearnExtractor("pca_4", PCA(4, random_state=0))]
    result = Benchmark(dataset, extractors, stability_config=StabilityConfig(mode="prototype", repeats=20),
                       separatix_config=SeparatixConfig(enabled=False)).run()
    return result, X, y


def test_ranked_score_is_the_first_repeat_of_its_stability_set(wine_run) -> None:
    from scipy.stats import percentileofscore
    from sklearn.decomposition import PCA

    result, X, y = wine_run
    pca = result["pca_4"]
    repeats = pca.stability.repeat_scores["score"]
    # Independent reference for the ranked number: OverlapIndex called directly on sklearn's PCA output with the
    # default seed 0 and the documented auto k (class sizes 59, 71, 48: capacity n // 5 = 11, 14, 9; k = 11, 14, 9).
    assert np.bincount(y).tolist() == [59, 71, 48]
    reduced, k = PCA(4, random_state=0).fit_transform(X), {0: 11, 1: 14, 2: 9}
    direct = direct_oi(reduced, y, k, seed=0).index
    assert pca.overlap.score == direct == repeats[0] and pca.stability.scoring_seeds[0] == 0
    assert pca.overlap.score == pytest.approx(0.6746, abs=1e-4)  # the number the issue reported
    assert pca.stability.includes_primary_draw and min(repeats) <= pca.overlap.score <= max(repeats)
    # Repeats 1.. are the stability stream's first 19 seeds, each reproducible by a bare call.
    stream = np.random.SeedSequence(0).spawn(2)[0].generate_state(20).tolist()
    assert pca.stability.scoring_seeds[1:] == stream[:19]
    assert repeats[5] == direct_oi(reduced, y, k, seed=stream[4]).index != repeats[0]
    for name in ("raw", "pca_4"):
        r = result[name]
        values = r.stability.repeat_scores["score"]
        position = r.stability_position
        assert position["percentile"] == pytest.approx(percentileofscore(values, r.overlap.score, kind="mean") / 100)
        high = np.percentile(values, 97.5)
        low = np.percentile(values, 2.5)
        expected = "above" if r.overlap.score > high else "below" if r.overlap.score < low else "inside"
        assert position["relative_to_interval"] == expected
    assert pca.stability_position["relative_to_interval"] == "above"  # the primary draw is the luckiest repeat
    row = result.to_dataframe().set_index("extractor").loc["pca_4"]
    assert row["stability_score_position"] == "above" and row["stability_score_percentile"] == 0.975


def test_report_states_the_ranked_position_and_the_order_agreement(wine_run) -> None:
    result, *_ = wine_run
    ranking = result.ranking_stability
    pca, raw = (np.array(result[n].stability.repeat_scores["score"]) for n in ("pca_4", "raw"))
    agreement = float(np.mean(pca > raw) + 0.5 * np.mean(pca == raw))
    assert ranking["ranked_order"] == ["pca_4", "raw"]
    assert ranking["pair_agreement"] == [{"better": "pca_4", "worse": "raw", "agreement": agreement}]
    assert ranking["order_stable"] is (agreement >= 0.9)
    text = result.to_markdown().replace("\\]", "]")  # "[...]:" is escaped so Markdown reads no link reference
    s = result["pca_4"].stability.summary
    assert (f"**The ranked score lies outside its own stability interval** for pca_4 ({result['pca_4'].overlap.score:.4f}"
            f", above its stability interval [{s.interval_low:.4f}, {s.interval_high:.4f}]: this draw is repeat 0 and "
            f"the highest of its 20 repeats; repeat mean {s.mean:.4f})") in text
    assert "The first repeat (repeat 0) is the primary draw" in text


def _reason(r) -> str:
    """The words that must stand beside pca_4's draw, derived here from its repeats (numpy, not the report)."""
    values = np.array(r.stability.repeat_scores["score"])
    assert r.overlap.score == values[0] == values.max()  # repeat 0, the luckiest of the 20
    high = np.percentile(values, 97.5)
    assert r.overlap.score > high
    return (f"above its stability interval [{np.percentile(values, 2.5):.4f}, {high:.4f}]: this draw is repeat 0 and "
            "the highest of its 20 repeats")


def test_a_draw_outside_its_interval_says_why_on_every_line_that_shows_it(wine_run) -> None:
    """Issue 37 item 3: the README's pca_4 ranks at 0.6746 with the interval [0.5537, 0.6624]; the headline, the
    tables and the detail showed the draw alone.  Every Markdown and console line showing that draw now says why."""
    from vertebrae.cli.main import console_summary
    from vertebrae.families.result_protocol import result_from_dict

    result, *_ = wine_run
    pca, raw = result["pca_4"], result["raw"]
    reason, draw = _reason(pca), f"{pca.overlap.score:.4f}"
    mean = f"repeat mean {pca.stability.summary.mean:.4f}"
    assert raw.stability_position["relative_to_interval"] == "inside"
    markdown = result.to_markdown().replace("\\]", "]")  # a "[...]:" in a table cell is escaped for Markdown
    # the paired verdicts show each draw against the best's on the same repeats, not against a stability interval
    verdicts = markdown.index("## Which differences are real?")
    markdown = markdown[:verdicts] + markdown[markdown.index("\n## ", verdicts + 1):]
    console = console_summary(result)
    showing = [line for line in markdown.splitlines() + console.splitlines() if draw in line]
    assert len(showing) >= 8  # lead, note, caveat, answer table, ranking, stability table, detail, console x2
    for line in showing:
        assert reason in line, line
    assert all(mean in line or "repeat mean" in console.splitlines()[0] for line in showing)
    lead = next(line for line in markdown.splitlines() if line.startswith("**Top candidate: pca_4**"))
    assert lead.startswith(f"**Top candidate: pca_4** — overlap {draw} ({reason}; {mean})")
    # a draw inside its interval is shown with the repeat mean beside it and no reason
    s = raw.stability.summary
    raw_row = next(line for line in console.splitlines() if " raw " in line)
    assert raw_row.split() == ["2", "raw", f"{raw.overlap.score:.4f}", f"{s.mean:.4f}", raw.recommendation]
    # the repeat means can disagree with the draws' order: the "ahead" line says so in the same line
    data = result.serialized()
    swapped = json_codec.loads(json_codec.dumps(data))
    for r in swapped["extractor_results"]:
        if r["name"] == "raw":
            r["stability"]["summaries"]["score"]["mean"] = pca.stability.summary.mean + 0.01
    ahead = console_summary(result_from_dict(swapped)).splitlines()
    top = next(line for line in ahead if line.startswith("Top candidate"))
    assert (f"ahead of raw on the ranked draw, though raw's repeat mean is higher "
            f"({pca.stability.summary.mean + 0.01:.4f} vs {pca.stability.summary.mean:.4f})") in top


def test_the_reason_for_a_subsample_draw_and_a_lowest_draw_by_hand() -> None:
    """Hand-built stability records: a subsample run scores the draw on every row; a draw can be the lowest."""
    from vertebrae.reports.markdown_stability import draw_note

    def record(mode, primary, repeats=(0.45, 0.52, 0.58, 0.64)):
        return {"summaries": {"score": {"interval_low": 0.5, "interval_high": 0.6, "mean": 0.55}},
                "repeat_scores": {"score": list(repeats)}, "includes_primary_draw": primary,
                "config": {"mode": mode, "subsample_fraction": 0.8}}

    assert draw_note(0.55, record("prototype", True)) is None
    assert draw_note(0.45, record("prototype", True)) == ("below its stability interval [0.5000, 0.6000]: this draw "
                                                          "is repeat 0 and the lowest of its 4 repeats; repeat mean "
                                                          "0.5500")
    assert draw_note(0.62, record("prototype", True, (0.62, 0.52, 0.58, 0.64)), with_mean=False) == (
        "above its stability interval [0.5000, 0.6000]: this draw is repeat 0, with only 1 of its 4 repeats above it")
    assert draw_note(0.7, record("subsample", False)) == ("above its stability interval [0.5000, 0.6000]: this draw "
                                                          "scores every row, the repeats 0.8 subsamples; repeat mean "
                                                          "0.5500")


def test_tied_extractors_are_flagged_as_an_unstable_ranking() -> None:
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, seed=4)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=IDENTITY)
    # With L2 normalization (the default) a scaled copy is the same space: every repeat ties.
    result = Benchmark(dataset, [PrecomputedExtractor("raw", X), PrecomputedExtractor("scaled", 2 * X)],
                       scoring_config=OverlapScoringConfig(k=3), stability_config=StabilityConfig(repeats=4)).run()
    assert result["raw"].stability.repeat_scores == result["scaled"].stability.repeat_scores
    ranking = result.ranking_stability
    assert ranking["order_stable"] is False
    assert ranking["unstable_pairs"] == [{"better": "raw", "worse": "scaled", "agreement": 0.5}]
    assert "**Unstable ranking:** the repeats keep the overlap ranking's order below 90% of the time for raw over " \
           "scaled (50%)" in result.to_markdown()


def test_ranking_stability_order_agreement_by_hand() -> None:
    scores = {"a": [0.9, 0.5, 0.7, 0.6], "b": [0.8, 0.6, 0.7, 0.5], "c": [0.1, 0.2, 0.3, 0.4]}
    ranking = ranking_stability(scores, ranked=["a", "b", "c"])
    # a over b: repeats 0 and 3 yes, 1 no, 2 tied -> (2 + 0.5) / 4; b over c: always.
    assert ranking["pair_agreement"] == [{"better": "a", "worse": "b", "agreement": 0.625},
                                         {"better": "b", "worse": "c", "agreement": 1.0}]
    assert ranking["unstable_pairs"] == [ranking["pair_agreement"][0]] and ranking["order_stable"] is False
    assert ranking_stability(scores, higher_is_better=False, ranked=["c", "b", "a"])["pair_agreement"][0] == \
        {"better": "c", "worse": "b", "agreement": 1.0}
    with pytest.raises(Exception, match="ranked must list the analysed extractors"):
        ranking_stability(scores, ranked=["a", "b"])


def test_stability_artifact_key_covers_the_repeat_protocol() -> None:
    """Artifacts of the old protocol (repeat 0 from the stream) must not be reused for the new one."""
    from vertebrae.scoring.stability import PROTOCOL_VERSION

    from vertebrae.families.labeled.stages import _stability_config

    fields = {name: value for name, value in StabilityConfig().to_dict().items() if name != "n_jobs"}
    assert PROTOCOL_VERSION == 2
    assert StabilityConfig().fingerprint() == fields
    dataset = BenchmarkDataset.from_embeddings(*gaussian_classes(n_per_class=10),
                                               identity=DatasetIdentity.declared("g", "1"))
    settings = Benchmark(dataset, [PrecomputedExtractor("raw")], stability_config=StabilityConfig()).settings
    assert _stability_config(settings, None)["protocol_version"] == 2

"""``vertebrae compare``: deltas, intervals, per-class regressions, protocol checks and the CI exit code."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, InputValidationError, OverlapScoringConfig,
                           RetrievalBenchmark, RetrievalConfig, RetrievalDataset, StabilityConfig)
from vertebrae.cli.main import main
from vertebrae.reports.compare import compare_results
from vertebrae.errors import DataWarning
from vertebrae.extractors import PrecomputedExtractor

from .conftest import gaussian_classes
from .test_screening import CLI_CONFIG

IDENTITY = DatasetIdentity.declared("compare", "1")
X, Y = gaussian_classes(n_per_class=40, n_classes=3, dim=6, seed=7)


def degraded(noise: float, seed: int = 0, rows=slice(None)) -> np.ndarray:
    """X with Gaussian noise on the given rows (so only those classes get worse)."""
    out = X.copy()
    out[rows] += np.random.default_rng(seed).normal(0, noise, out[rows].shape).astype(np.float32)
    return out


def run(second: np.ndarray, k: int = 3):
    dataset = BenchmarkDataset.from_embeddings(X, Y, identity=IDENTITY)
    extractors = [PrecomputedExtractor("clean", X), PrecomputedExtractor("candidate", second)]
    return Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=k),
                     stability_config=StabilityConfig(repeats=3), progress=False).run()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    baseline = run(degraded(1.0))
    worse = run(degraded(6.0, rows=slice(0, 40)))  # only class 0 rows get much noisier
    paths = {"a": baseline.save_json(folder / "a.json"), "b": worse.save_json(folder / "b.json"),
             "k": run(degraded(1.0), k=4).save_json(folder / "k.json")}
    return baseline, worse, paths


def test_deltas_and_regressions_match_the_results(runs):
    baseline, worse, _ = runs
    comparison = compare_results(baseline.serialized(), worse.serialized(), tolerance=0.01)
    rows = {r["extractor"]: r for r in comparison["candidates"]}
    old, new = baseline["candidate"].primary_score, worse["candidate"].primary_score
    assert new < old - 0.01  # the scenario: the candidate really got worse
    assert rows["candidate"]["delta"] == pytest.approx(new - old)
    assert rows["candidate"]["regressed"] and not rows["clean"]["regressed"]
    assert rows["clean"]["delta"] == 0.0 and comparison["regressed"] == ["candidate"]
    interval = baseline["candidate"].stability.summary
    assert rows["candidate"]["interval_a"] == [interval.interval_low, interval.interval_high]
    new_interval = worse["candidate"].stability.summary
    assert rows["candidate"]["beyond_intervals"] == (new_interval.interval_high < interval.interval_low)
    assert comparison["protocol_match"] and comparison["top_a"] == comparison["top_b"] == "clean"
    regressed_classes = {(r["extractor"], r["class"]) for r in comparison["class_regressions"]}
    per_class_old = baseline["candidate"].overlap.per_class_scores
    per_class_new = worse["candidate"].overlap.per_class_scores
    expected = {("candidate", baseline["candidate"].overlap.display(k)) for k in per_class_old
                if per_class_old[k] - per_class_new[k] > 0.01}
    assert regressed_classes == expected and ("candidate", "0") in expected


def test_cli_exit_code_guards_ci(runs, capsys):
    _, _, paths = runs
    assert main(["compare", str(paths["a"]), str(paths["b"])]) == 1
    out = capsys.readouterr().out
    assert "Regressed (primary score worse by more than 0): candidate." in out and "## Per-class regressions" in out
    assert main(["compare", str(paths["a"]), str(paths["b"]), "--tolerance", "1"]) == 0
    assert main(["compare", str(paths["b"]), str(paths["a"])]) == 0  # an improvement is not a regression


def test_cli_formats(runs, capsys, tmp_path):
    _, _, paths = runs
    main(["compare", str(paths["a"]), str(paths["b"]), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert data["result_type"] == "comparison" and data["regressed"] == ["candidate"]
    main(["compare", str(paths["a"]), str(paths["b"]), "--format", "html", "-o", str(tmp_path / "c.html")])
    page = (tmp_path / "c.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<h2>Per-class regressions</h2>" in page


def test_protocol_mismatch_is_a_message_not_a_crash(runs, capsys):
    _, _, paths = runs
    code = main(["compare", str(paths["a"]), str(paths["k"]), "--tolerance", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "The protocols differ" in out and "scoring config" in out


def test_results_of_different_types_are_rejected(runs, tmp_path, capsys):
    _, _, paths = runs
    rng = np.random.default_rng(0)
    ds = RetrievalDataset.from_embeddings(rng.normal(size=(4, 3)), rng.normal(size=(6, 3)),
                                          relevance=[(i, i, 1) for i in range(4)], identity=IDENTITY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        retrieval = RetrievalBenchmark(ds, [PrecomputedExtractor("own")], retrieval_config=RetrievalConfig(
            cutoffs=[1]), progress=False).run()
    path = retrieval.save_json(tmp_path / "retrieval.json")
    assert main(["compare", str(paths["a"]), str(path)]) == 2
    assert "is a 'benchmark' result and" in capsys.readouterr().err
    with pytest.raises(InputValidationError, match="tolerance must be a number >= 0"):
        compare_results(retrieval.serialized(), retrieval.serialized(), tolerance=-1)
    (tmp_path / "bad.json").write_text('{"result_type": "benchmark", "schema_version": 1}')
    assert main(["compare", str(paths["a"]), str(tmp_path / "bad.json")]) == 2
    assert "missing key" in capsys.readouterr().err


def test_retrieval_results_compare():
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(8, 4))
    gallery = np.vstack([queries + 0.2 * rng.normal(size=(8, 4)), rng.normal(size=(8, 4))])
    ds = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(8)],
                                          identity=IDENTITY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
        good = RetrievalBenchmark(ds, [PrecomputedExtractor("own")], progress=False).run()
        noisy_gallery = gallery + rng.normal(0, 3, gallery.shape)
        from vertebrae.families.retrieval import PrecomputedPairExtractor
        bad = RetrievalBenchmark(ds, [PrecomputedPairExtractor("own", queries, noisy_gallery)], progress=False).run()
    comparison = compare_results(good.serialized(), bad.serialized())
    row = comparison["candidates"][0]
    assert row["delta"] == pytest.approx(bad["own"].primary_score - good["own"].primary_score)
    assert row["regressed"] == (row["delta"] < 0) and row["interval_a"] is None
    assert comparison["class_regressions"] == []


def test_results_ranked_by_different_primary_metrics_are_refused(runs, tmp_path, capsys):
    """Before: B's mrr was put under A's 'Primary score (ndcg@10)', marked regressed, exit 1."""
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(8, 4))
    ds = RetrievalDataset.from_embeddings(queries, queries + 0.2 * rng.normal(size=(8, 4)),
                                          relevance=[(i, i, 1) for i in range(8)], identity=IDENTITY)
    paths = []
    for metric in ("ndcg@10", "mrr"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DataWarning, DeprecationWarning))
            result = RetrievalBenchmark(ds, [PrecomputedExtractor("own")], progress=False,
                                        retrieval_config=RetrievalConfig(primary_metric=metric)).run()
        paths.append(str(result.save_json(tmp_path / f"{metric}.json")))
    assert main(["compare", *paths]) == 2
    err = capsys.readouterr().err
    assert "do not measure the same thing: primary metric 'ndcg@10' vs 'mrr'; compare results ranked by the same " \
           "metric" in err and len(err.strip().splitlines()) == 1
    benchmark, _, _ = runs
    edited = benchmark.serialized()
    edited["metadata"]["primary_metric"] = "knn_accuracy"
    with pytest.raises(InputValidationError, match="primary metric 'overlap' vs 'knn_accuracy'"):
        compare_results(benchmark.serialized(), edited)


def test_compare_ranks_by_the_shared_tie_rule_not_by_position():
    dataset = BenchmarkDataset.from_embeddings(X, Y, identity=IDENTITY)

    def scored(b: np.ndarray, a: np.ndarray):
        return Benchmark(dataset, [PrecomputedExtractor("b", b), PrecomputedExtractor("a", a)],
                         scoring_config=OverlapScoringConfig(k=3), progress=False).run().serialized()

    tie, split = scored(X, X.copy()), scored(degraded(6.0), X)
    comparison = compare_results(tie, split)
    rows = [(c["extractor"], c["rank_a"], c["rank_b"]) for c in comparison["candidates"]]
    assert rows == [("a", 1, 1), ("b", 1, 2)]  # in B's ranking order; the tie in A shares rank 1
    assert comparison["top_a"] == "b" and comparison["top_b"] == "a"  # a tie's top is its first in input order
    assert comparison["regressed"] == ["b"]


def test_a_candidate_missing_from_the_new_run_is_a_regression(runs, tmp_path, capsys):
    """Issue 28 item 2: dropping an extractor from the new run must not pass the CI guard."""
    baseline, _, paths = runs
    dataset = BenchmarkDataset.from_embeddings(X, Y, identity=IDENTITY)
    only_clean = Benchmark(dataset, [PrecomputedExtractor("clean", X)], scoring_config=OverlapScoringConfig(k=3),
                           stability_config=StabilityConfig(repeats=3), progress=False).run()
    path = only_clean.save_json(tmp_path / "dropped.json")
    comparison = compare_results(baseline.serialized(), only_clean.serialized())
    assert comparison["missing"] == ["candidate"] and comparison["regressed"] == ["candidate"]
    assert main(["compare", str(paths["a"]), str(path)]) == 1
    out = capsys.readouterr().out
    assert "Regressed (missing from" in out and "candidate" in out and "No candidate's primary score" in out
    allowed = compare_results(baseline.serialized(), only_clean.serialized(), allow_missing=True)
    assert allowed["missing"] == [] and allowed["regressed"] == [] and allowed["only_in_a"] == ["candidate"]
    assert main(["compare", str(paths["a"]), str(path), "--allow-missing"]) == 0
    assert "Only in" in capsys.readouterr().out
    assert main(["compare", str(path), str(paths["a"])]) == 0  # a candidate added in B is no regression


def test_a_candidate_screened_out_in_the_new_run_is_reported_as_such_not_as_a_regression(tmp_path, capsys):
    """Issue 37 item 1: the same config run in full and with --screen; the screened-out candidates have no
    full-data score, so they are listed with their last rung and partial score and the guard passes."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 100)
    f = rng.normal(size=(y.size, 6))
    f[:, 0] += 3.0 * y
    f[:, 1] += 2.5 * y
    np.save(tmp_path / "labels.npy", y)
    for name, columns in {"strong": f[:, [0, 1, 2]], "weak": 0.3 * f[:, [1, 3]] + f[:, [3, 4]],
                          "noise": f[:, [2, 3, 4]]}.items():
        np.save(tmp_path / f"{name}.npy", columns)
    (tmp_path / "run.toml").write_text(CLI_CONFIG)  # strong, noise, weak
    full, screened = tmp_path / "full", tmp_path / "screened"
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(full), "--quiet"]) == 0
    assert main(["run", str(tmp_path / "run.toml"), "--screen", "-o", str(screened), "--quiet"]) == 0
    left = {r["name"]: r["screening"] for r in json.loads((screened / "report.json").read_text())["extractor_results"]
            if r["screening"]["status"] == "screened_out"}
    assert sorted(left) == ["noise", "weak"]  # the scenario: two of three candidates screened out
    a, b = str(full / "report.json"), str(screened / "report.json")
    capsys.readouterr()
    assert main(["compare", a, b, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regressed"] == [] and data["missing"] == []
    assert data["screened_out"] == [{"extractor": name, "run": b, "last_rung": left[name]["last_rung"],
                                     "rows": left[name]["rows"], "partial_score": left[name]["partial_score"]}
                                    for name in ("noise", "weak")]  # unranked: in input order
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "No candidate's primary score got worse" in out and "Regressed" not in out
    assert "Screened out (no full-data score, so not a regression): noise in " in out
    assert (f"weak in {b} (rung {left['weak']['last_rung']}, {left['weak']['rows']} rows, partial score "
            f"{left['weak']['partial_score']:.4f}).") in out
    assert main(["compare", a, b, "--allow-missing"]) == 0
    assert main(["compare", b, a]) == 0  # scored in full where the baseline screened them out: no regression

"""Separatix adapter: compared with direct ``separatix.diagnose`` calls on real data."""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import separatix
from scipy import sparse
from sklearn.preprocessing import normalize

from vertebrae.errors import (ConfigError, DensificationBudgetError, InputValidationError, ScoringWarning,
                                  SerializationError)
from vertebrae._base import json_codec
from vertebrae.scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig
from vertebrae.scoring.separatix import (METRIC_DIRECTIONS, PROBE_FAMILIES, SeparatixConfig, SeparatixResult,
                                             SeparatixScorer, build_probe_summary)
from vertebrae.inputs.targets import build_targets

SEED = 0
MIB = 2**20


def _blobs(n_per: int = 60, d: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(shift, 1.0, (n_per, d)) for shift in (0.0, 2.0, 2.6)])
    return X, np.repeat(np.array(["a", "b", "c"]), n_per)


def _without_timings(value):
    """Drop run-time fields, which differ between two otherwise identical runs."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _direct(X, y, *, mode: str, groups=None, max_dense_mb: int = 512, densify_policy: str = "warn_and_sample") -> dict:
    """The reference: separatix called directly, with what the adapter is documented to pass."""
    rep = separatix.diagnose(X, y, groups=groups, return_report=True, target_mode=mode, budget="fast",
                             densify_policy=densify_policy, max_dense_mb=max_dense_mb, random_state=SEED,
                             mlp_probes=False)
    return json.loads(json.dumps(rep.to_dict(terse=True)))


@pytest.fixture(scope="module")
def single():
    X, y = _blobs()
    targets = build_targets(y)
    result = SeparatixScorer(SeparatixConfig(random_state=SEED)).diagnose(X, targets, overlap_score=0.9)
    return X, targets, result


# ----------------------------------------------------------------------- parity with direct calls
def test_single_label_matches_direct_call_on_normalized_keys(single):
    X, targets, result = single
    assert result.status == "completed" and result.reason is None
    keys = np.asarray(targets.keys, dtype=str)
    assert keys[0] == "str:a"
    direct = _direct(normalize(X, norm="l2"), keys, mode="singlelabel")
    assert _without_timings(result.report) == _without_timings(direct)
    assert result.recommendation == direct["recommendation"] and result.confidence == direct["confidence"]
    assert result.decision_path == direct["decision_path"] and result.scores == direct["scores"]
    assert result.preprocessing["normalize_embeddings"] is True
    assert result.runtime_seconds > 0 and result.effective_max_dense_mb == 512


def test_single_label_probe_summary_uses_balanced_accuracy_baseline(single):
    _, _, result = single
    summary, baseline = result.probe_summary, result.report["metrics"]["baseline"]
    assert summary["metric_source"] == "singlelabel_balanced_accuracy_fallback"
    assert (summary["best_probe"], summary["probe_metric"], summary["probe_score"]) == (
        baseline["best_probe"], "balanced_accuracy", baseline["best_probe_score"])
    probes = result.report["metrics"]["probes"]
    assert summary["probes"]["linear"]["metrics"]["accuracy"] == probes["linear"]["accuracy"]
    assert "runtime_seconds" not in summary["probes"]["linear"]["metrics"]
    assert summary["skip_reasons"] == {"kernel_approx": probes["kernel_approx"]["skipped_reason"]}
    assert summary["recommendation_confidence"] == result.confidence
    assert summary["evaluation"]["cv_method"] == "stratified" and summary["evaluation"]["n_splits"] == 3
    assert summary["mlp"]["status"] == "not_requested"
    comparison = summary["linear_vs_nonlinear"]["balanced_accuracy"]
    nonlinear = [n for n, f in PROBE_FAMILIES.items() if f in ("smooth_nonlinear", "local_kernel")
                 and "balanced_accuracy" in probes[n]]
    best = max(nonlinear, key=lambda n: probes[n]["balanced_accuracy"])
    assert comparison["nonlinear_probe"] == best
    assert comparison["nonlinear_improvement"] == pytest.approx(
        probes[best]["balanced_accuracy"] - probes["linear"]["balanced_accuracy"])
    assert comparison["confidence"] in ("clear", "uncertain")


def test_probe_families_match_separatix_evidence(single):
    families = single[2].report["metrics"]["recommendation_evidence"]["families"]
    declared = {probe: family for family, entry in families.items() for probe in entry["probe_names"]}
    assert declared == PROBE_FAMILIES


def test_multilabel_matches_direct_call_and_declares_primary_metric():
    X, y = _blobs(n_per=50)
    rng = np.random.default_rng(1)
    indicator = np.zeros((X.shape[0], 3), dtype=np.int8)
    indicator[np.arange(X.shape[0]), np.repeat([0, 1, 2], 50)] = 1
    indicator[rng.random(X.shape[0]) < 0.3, 2] = 1
    targets = build_targets(sparse.csr_matrix(indicator), target_type="multi_label")
    scorer = SeparatixScorer(SeparatixConfig(random_state=SEED), OverlapScoringConfig(normalize_embeddings=False))
    result = scorer.diagnose(X, targets, overlap_score=0.85)
    direct = _direct(X, targets.indicator, mode="multilabel")
    assert _without_timings(result.report) == _without_timings(direct)
    summary = result.probe_summary
    assert summary["declared_primary_metrics"] == ["micro_f1", "macro_f1", "sample_jaccard"]
    assert summary["probe_metric"] == "micro_f1" and summary["metric_source"] == "declared_primary"
    assert summary["best_probe"] == direct["metrics"]["baseline"]["best_by_metric"]["micro_f1"]["probe"]
    assert "accuracy" not in summary["probe_metric"]
    # Hamming loss is smaller-is-better: the best nonlinear probe is the one with the lowest loss.
    loss = summary["linear_vs_nonlinear"]["hamming_loss"]
    assert loss["direction"] == "lower_is_better"
    assert loss["nonlinear_improvement"] == pytest.approx(loss["linear_score"] - loss["nonlinear_score"])
    assert loss["favored_family"] == ("nonlinear" if loss["nonlinear_score"] < loss["linear_score"] else "linear")


def test_regression_matches_direct_call():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 6))
    y = 2 * X[:, 0] + X[:, 1] ** 2 + 0.1 * rng.normal(size=150)
    targets = build_targets(y, target_type="regression")
    scorer = SeparatixScorer(SeparatixConfig(random_state=SEED), continuous_config=ContinuousOverlapScoringConfig())
    result = scorer.diagnose(X, targets, overlap_score=0.3)
    direct = _direct(normalize(X, norm="l2"), targets.values, mode="regression")
    assert _without_timings(result.report) == _without_timings(direct)
    summary = result.probe_summary
    assert summary["probe_metric"] == "r2_variance_weighted" and summary["target_mode"] == "regression"
    rmse = summary["linear_vs_nonlinear"]["normalized_rmse_mean"]
    assert rmse["direction"] == "lower_is_better"
    assert rmse["nonlinear_improvement"] == pytest.approx(rmse["linear_score"] - rmse["nonlinear_score"])


def test_summary_without_declared_metric_invents_nothing(single):
    report = json.loads(json.dumps(single[2].report))
    report["metrics"]["baseline"] = {}
    summary = build_probe_summary(report, "multilabel")
    assert (summary["best_probe"], summary["probe_metric"], summary["probe_score"]) == (None, None, None)
    assert summary["best_by_metric"] == {}


def test_every_reported_probe_metric_has_a_direction(single):
    reported = {m for entry in single[2].probe_summary["probes"].values() for m in entry["metrics"]}
    assert reported and {m for m in reported if not m.startswith("stability_")} <= set(METRIC_DIRECTIONS)


def test_mlp_evidence_stays_apart_from_the_baseline_summary():
    X, y = _blobs(n_per=40)
    result = SeparatixScorer(SeparatixConfig(mlp_probes=True)).diagnose(X, y, overlap_score=0.9)
    mlp = result.report["metrics"]["mlp_probes"]
    assert result.report["config"]["mlp_probes"] is True
    assert result.probe_summary["mlp"]["status"] == mlp["status"] and mlp["status"] != "not_requested"
    assert result.probe_summary["best_probe"] == result.report["metrics"]["baseline"]["best_probe"]
    assert set(result.probe_summary["probes"]) == set(result.report["metrics"]["probes"])


# ----------------------------------------------------------------------- gate
def test_gated_run_never_calls_separatix(monkeypatch):
    # A tripwire, not a mock: it fakes no result and only fails the test if separatix is called at all.
    def forbidden(*args, **kwargs):
        raise AssertionError("separatix must not run when the gate fails")

    monkeypatch.setattr(separatix, "diagnose", forbidden)
    X, y = _blobs(n_per=10)
    result = SeparatixScorer().diagnose(X, y, overlap_score=0.5)
    assert result.status == "gated" and result.report is None
    assert "overlap_threshold=0.8" in result.reason and "run_when='always'" in result.reason
    assert result.probe_summary["available"] is False and result.probe_summary["probe_metric"] is None
    regression = SeparatixScorer().diagnose(X, X[:, 0], target_type="regression", overlap_score=0.05)
    assert regression.status == "gated"
    assert regression.gate["threshold_field"] == "SeparatixConfig.regression_overlap_threshold"
    disabled = SeparatixScorer(SeparatixConfig(enabled=False)).diagnose(X, y, overlap_score=1.0)
    assert disabled.status == "skipped" and "enabled" in disabled.reason


def test_run_when_always_ignores_the_gate():
    X, y = _blobs(n_per=20)
    result = SeparatixScorer(SeparatixConfig(run_when="always")).diagnose(X, y, overlap_score=0.1)
    assert result.status == "completed" and result.gate["passed"] is False


# ----------------------------------------------------------------------- groups
def test_class_in_single_group_keeps_report_and_surfaces_skip():
    X, y = _blobs()
    groups = np.array([f"g{i % 6}" for i in range(len(y))], dtype=object)
    groups[y == "c"] = "only"
    result = SeparatixScorer().diagnose(X, y, overlap_score=0.9, groups=groups)
    assert result.status == "completed" and result.report is not None
    skip = [s for s in result.skipped_diagnostics if s["name"] == "unsupported_group_classes"]
    assert skip and skip[0]["severity"] == "blocking" and skip[0]["classes"] == ["str:c"]
    assert "unsupported_group_classes" in result.reason
    assert result.report["grouping"]["skipped_singlelabel_classes"] == ["str:c"]
    assert result.probe_summary["grouping"]["skipped_count"] == 1
    assert result.probe_summary["grouping"]["supported_count"] == 2
    assert result.probe_summary["evaluation"]["group_aware"] is True
    # the report's context line: those counts are classes, not groups (it read "Groups: 7 (2 supported, ...)")
    from vertebrae.reports.markdown_separatix import _context

    context = _context(result.to_dict(), {"labels": {"str:c": "c"}})  # an overlap's labels name the skipped class
    assert "Groups: 7; classes the group-aware split supports 2, skipped 1: c." in context


def test_too_few_supported_classes_is_skipped_not_retried():
    X, y = _blobs()
    groups = np.array([f"g{i % 6}" for i in range(len(y))], dtype=object)
    groups[y == "b"], groups[y == "c"] = "only_b", "only_c"
    result = SeparatixScorer().diagnose(X, y, overlap_score=0.9, groups=groups)
    assert result.status == "skipped" and result.report is None
    assert "distinct groups" in result.reason and "row-level" in result.reason
    assert result.skipped_diagnostics[0]["severity"] == "blocking"


def test_targets_separatix_refuses_are_skipped_with_its_reason_with_or_without_groups():
    """Multi-label labels each missing from one row only: valid for the overlap score, but separatix's own
    validation wants two negatives per usable label.  That ValueError escaped a run as a traceback without groups,
    and with groups it was recorded as a cross-group support problem (read from the phrase "distinct groups" in the
    message); now separatix's validator is asked which it is."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    indicator = np.ones((60, 2), dtype=np.int8)
    indicator[0, 0] = indicator[1, 1] = 0
    targets = build_targets(sparse.csr_matrix(indicator), target_type="multi_label")
    with pytest.raises(ValueError, match="two negative examples"):
        separatix.diagnose(X, targets.indicator, target_mode="multilabel")  # the dependency refuses them itself
    groups = np.array([f"g{i % 6}" for i in range(60)], dtype=object)
    for given in (None, groups):
        result = SeparatixScorer(SeparatixConfig(run_when="always")).diagnose(X, targets, overlap_score=0.5,
                                                                              groups=given)
        assert result.status == "skipped" and result.report is None
        assert result.reason.startswith("separatix cannot diagnose these targets: At least one multilabel column")
        assert "cross-group" not in result.reason


def test_groups_are_validated():
    X, y = _blobs(n_per=5)
    with pytest.raises(InputValidationError, match="groups has 3 entries"):
        SeparatixScorer().diagnose(X, y, overlap_score=0.9, groups=["a", "b", "c"])


# ----------------------------------------------------------------------- sparse / memory
@pytest.fixture(scope="module")
def sparse_data():
    rng = np.random.default_rng(3)
    X = sparse.random(3000, 2000, density=0.01, format="csr", random_state=3)
    return X, np.array(["x", "y"])[rng.integers(0, 2, 3000)]


def test_warn_and_sample_stays_sparse_and_records_warnings(sparse_data):
    X, y = sparse_data
    scorer = SeparatixScorer(SeparatixConfig(max_dense_bytes=8 * MIB))
    with pytest.warns(ScoringWarning, match="DensificationWarning"):
        result = scorer.diagnose(X, y, overlap_score=0.9)
    assert result.preprocessing["input_sparse"] is True and result.preprocessing["separatix"]["is_sparse"] is True
    assert result.report["config"]["max_dense_mb"] == 8
    assert {e["status"] for e in result.densification_events} == {"performed_on_subsample"}
    densified = [w for w in result.warnings if "densified" in w]  # the report's text, once (it was also captured)
    assert densified == result.report["warnings"] == [f"Sparse input was stratified-subsampled then densified for "
                                                      f"{e['reason']}." for e in result.densification_events]


def test_markdown_context_shows_the_preprocessing_of_a_sparse_run():
    """The preprocessing record (normalization, sparse input, separatix's own scaling) was in no report."""
    from vertebrae.reports.markdown_separatix import _context

    X = sparse.random(300, 40, density=0.2, format="csr", random_state=1)
    y = np.array(["x", "y"])[np.random.default_rng(1).integers(0, 2, 300)]
    result = SeparatixScorer(SeparatixConfig(max_dense_bytes=MIB)).diagnose(X, y, overlap_score=0.9)
    context = _context(result.to_dict(), {})
    own = context[context.index("Preprocessing: "):context.index("; separatix's own: ")]
    theirs = context[context.index("; separatix's own: "):context.index(". Dense budget")]
    assert "normalize_embeddings yes" in own and "input_sparse yes" in own and "zero_rows 0" in own
    assert "is_sparse yes" in theirs and all(name in theirs for name in result.preprocessing["separatix"])


def test_skip_records_unavailable_diagnostics(sparse_data):
    X, y = sparse_data
    result = SeparatixScorer(SeparatixConfig(max_dense_bytes=8 * MIB, densify_policy="skip")).diagnose(
        X, y, overlap_score=0.9)
    names = {s["name"] for s in result.skipped_diagnostics}
    assert {"geometry_distance_concentration", "smooth_nonlinear_probe"} <= names
    assert {e["status"] for e in result.densification_events} == {"skipped"}


def test_fail_raises_vertebrae_error_naming_budget_and_fix(sparse_data):
    X, y = sparse_data
    scorer = SeparatixScorer(SeparatixConfig(densify_policy="fail"), OverlapScoringConfig(max_dense_bytes=8 * MIB))
    with pytest.raises(DensificationBudgetError, match="extractor-1.*8 MiB.*OverlapScoringConfig.max_dense_bytes.*"
                                                       "warn_and_sample") as info:
        scorer.diagnose(X, y, overlap_score=0.9, source="extractor-1")
    assert isinstance(info.value, MemoryError)


def test_dense_budget_falls_back_to_overlap_config():
    overlap = OverlapScoringConfig(max_dense_bytes=8 * MIB + 12345)
    assert SeparatixConfig().dense_budget(overlap) == (8, "OverlapScoringConfig.max_dense_bytes")
    assert SeparatixConfig(max_dense_bytes=3 * MIB).dense_budget(overlap) == (3, "SeparatixConfig.max_dense_bytes")
    assert SeparatixConfig().effective_max_dense_mb(OverlapScoringConfig()) == 512
    assert SeparatixConfig(max_dense_bytes=10).effective_max_dense_mb() == 1


def test_sub_mib_budget_is_recorded():
    X, y = _blobs(n_per=10)
    result = SeparatixScorer(SeparatixConfig(max_dense_bytes=1000)).diagnose(X, y, overlap_score=0.1)
    assert result.effective_max_dense_mb == 1 and "below 1 MiB" in result.warnings[0]


# ----------------------------------------------------------------------- validation and serialization
@pytest.mark.parametrize("field, value", [
    ("enabled", "yes"), ("run_when", "sometimes"), ("overlap_threshold", 1.5), ("overlap_threshold", float("nan")),
    ("regression_overlap_threshold", -0.1), ("budget", "huge"), ("densify_policy", "densify"),
    ("max_dense_bytes", 0), ("mlp_probes", 1), ("random_state", None), ("random_state", -1), ("thread_limit", 0),
])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ConfigError, match=f"SeparatixConfig.{field}"):
        SeparatixConfig(**{field: value})


def test_config_round_trips_and_rejects_unknown_fields():
    config = SeparatixConfig(budget="standard", max_dense_bytes=5 * MIB, run_when="always")
    assert SeparatixConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="unknown field 'gate'"):
        SeparatixConfig.from_dict({"gate": True})


@pytest.mark.parametrize("score", [float("nan"), 1.5, -0.1, True, "0.9"])
def test_overlap_score_is_validated(score):
    X, y = _blobs(n_per=5)
    with pytest.raises(InputValidationError, match="overlap_score"):
        SeparatixScorer().diagnose(X, y, overlap_score=score)


def test_scorer_rejects_wrong_config_types():
    with pytest.raises(ConfigError, match="config must be a SeparatixConfig"):
        SeparatixScorer(OverlapScoringConfig())
    with pytest.raises(ConfigError, match="overlap_config must be an? OverlapScoringConfig"):
        SeparatixScorer(SeparatixConfig(), SeparatixConfig())


def test_result_round_trips_through_json_codec(single):
    result = single[2]
    text = json_codec.dumps(result)
    restored = SeparatixResult.from_dict(json_codec.decode(json.loads(text)))
    assert restored == result and restored.to_dict() == result.to_dict()
    data = result.to_dict()
    del data["probe_summary"]
    with pytest.raises(SerializationError, match="probe_summary"):
        SeparatixResult.from_dict(data)


# ----------------------------------------------------------------------- import boundaries
def test_import_vertebrae_does_not_import_separatix():
    code = "import sys, vertebrae; print(sorted(m for m in ('separatix', 'sklearn', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _imports_separatix(path: pathlib.Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "separatix" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "separatix":
            return True
    return False


def test_public_exports():
    import vertebrae

    assert (vertebrae.SeparatixConfig, vertebrae.scoring.SeparatixScorer, vertebrae.SeparatixResult) == (
        SeparatixConfig, SeparatixScorer, SeparatixResult)


def test_only_the_adapter_imports_separatix():
    root = pathlib.Path(__file__).resolve().parents[1] / "src" / "vertebrae"
    assert [p.relative_to(root).as_posix() for p in root.rglob("*.py") if _imports_separatix(p)] == [
        "scoring/separatix.py"]


# ----------------------------------------------------------------------- Benchmark integration
def _benchmark_dataset(groups=None):
    from vertebrae import BenchmarkDataset, DatasetIdentity

    rng = np.random.default_rng(4)
    X, y = _blobs(n_per=40)
    noisy = X + rng.normal(0, 2.0, X.shape)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("separatix-test", "1"))
    return (dataset if groups is None else dataset.with_groups(groups)), noisy


def _run(dataset, noisy, separatix_config=None):
    from vertebrae import Benchmark, PrecomputedExtractor

    extractors = [PrecomputedExtractor("noisy", noisy), PrecomputedExtractor("clean")]
    return Benchmark(dataset, extractors, separatix_config=separatix_config, progress=False).run()


@pytest.fixture(scope="module")
def benchmark_pair():
    dataset, noisy = _benchmark_dataset()
    return (_run(dataset, noisy, SeparatixConfig(enabled=False)),
            _run(dataset, noisy, SeparatixConfig(run_when="always")))


def test_separatix_never_changes_the_ranking(benchmark_pair):
    plain, diagnosed = benchmark_pair
    rank = lambda result: [(r.name, r.primary_score) for r in result.ranked_results()]  # noqa: E731
    assert rank(plain) == rank(diagnosed) and [n for n, _ in rank(plain)] == ["clean", "noisy"]
    assert all(r.separatix is None and "separatix" not in r.runtime for r in plain.extractor_results)
    by_default = _run(*_benchmark_dataset())  # Separatix runs by default, gated on the overlap score
    assert all(r.separatix is not None for r in by_default.extractor_results)
    assert rank(by_default) == rank(plain)
    assert [r.name for r in diagnosed.quality_cohort()] == [r.name for r in plain.quality_cohort()] == ["clean"]


def test_benchmark_diagnoses_the_scored_embeddings(benchmark_pair):
    _, diagnosed = benchmark_pair
    for result in diagnosed.extractor_results:
        s = result.separatix
        assert s.status == "completed" and s.gate["overlap_score"] == result.overlap.score
        assert result.runtime["separatix"] == s.runtime_seconds > 0
        assert s.preprocessing["n_samples"] == 120
    clean = diagnosed["clean"]
    X, _ = _blobs(n_per=40)
    direct = SeparatixScorer(SeparatixConfig(run_when="always")).diagnose(
        X, _benchmark_dataset()[0].targets, overlap_score=clean.overlap.score)
    assert _without_timings(direct.report) == _without_timings(clean.separatix.report)
    assert diagnosed.metadata["settings"]["separatix_config"] == SeparatixConfig(run_when="always").to_dict()


def test_benchmark_json_keeps_report_and_probe_summary(benchmark_pair, tmp_path):
    from vertebrae import BenchmarkResult

    _, diagnosed = benchmark_pair
    loaded = BenchmarkResult.load(diagnosed.save_json(tmp_path / "result.json"))
    for original, restored in zip(diagnosed.extractor_results, loaded.extractor_results):
        assert restored.separatix == original.separatix
        assert restored.separatix.report["metrics"]["probes"] and restored.separatix.probe_summary["available"]


def test_dataframe_has_probe_columns_but_no_probe_accuracy(benchmark_pair):
    plain, diagnosed = benchmark_pair
    frame = diagnosed.to_dataframe()
    columns = ["best_probe", "probe_metric", "probe_score", "separatix_recommendation", "separatix_confidence"]
    assert set(columns) <= set(frame.columns) and "probe_accuracy" not in frame.columns
    clean = frame[frame["extractor"] == "clean"].iloc[0]
    assert clean["probe_metric"] == "balanced_accuracy"
    assert clean["probe_score"] == diagnosed["clean"].separatix.probe_summary["probe_score"]
    assert clean["separatix_recommendation"] == diagnosed["clean"].separatix.recommendation
    assert plain.to_dataframe()[columns].isna().all().all()


def test_dataframe_has_the_probe_context_spec_003_lists():
    """Rows had best_probe/probe_metric/probe_score but not the evaluation mode, sampling, grouping counts and skip
    reasons spec 003 lists beside them; a gated row says why it did not run."""
    _, y = _blobs(n_per=40)
    groups = np.array([f"g{i % 6}" for i in range(len(y))], dtype=object)
    groups[y == "c"] = "only"  # class c sits in one group: the group-aware split supports a and b, skips c
    dataset, noisy = _benchmark_dataset(groups)
    result = _run(dataset, noisy, SeparatixConfig(overlap_threshold=0.36))  # noisy is gated (as above)
    rows = {row["extractor"]: row for row in result.rows()}
    X, _ = _blobs(n_per=40)
    direct = _direct(normalize(X), y, mode="singlelabel", groups=groups.astype(str))
    probes = direct["metrics"]["probes"]
    clean = rows["clean"]
    assert clean["probe_evaluation_mode"] == direct["grouping"]["effective_supervised_evaluation_mode"] \
        == "group_cross_validation"
    supported_rows = int(np.sum(y != "c"))  # the probes see the supported classes' rows, none sampled away
    assert (clean["probe_sampled"], clean["probe_rows_used"]) == (False, supported_rows)
    assert direct["sampling"]["probe"]["n_used"] == supported_rows
    assert (clean["probe_group_count"], clean["probe_group_supported_count"], clean["probe_group_skipped_count"]) \
        == (len(set(groups)), 2, 1)
    assert clean["probe_skip_reasons"] == "; ".join(f"{name}: {entry['skipped_reason']}"
                                                     for name, entry in probes.items() if entry.get("skipped_reason"))
    assert clean["separatix_skip_reason"].startswith("unsupported_group_classes: ")
    gated = rows["noisy"]
    assert gated["separatix_status"] == "gated" and gated["separatix_skip_reason"].startswith(
        f"overlap score {result['noisy'].overlap.score:.4f} is below SeparatixConfig.overlap_threshold=")
    context = ["probe_evaluation_mode", "probe_sampled", "probe_rows_used", "probe_group_count",
               "probe_group_supported_count", "probe_group_skipped_count", "probe_skip_reasons"]
    assert all(gated[c] is None for c in context)
    assert set(context) <= set(result.to_dataframe().columns)


def test_separatix_and_the_probe_metrics_are_the_two_independent_paths_the_docs_describe():
    """The spec's "Separatix is the only probe-style diagnostic path" predates LinearProbeMetric & co.; the docs
    now say how the two relate: neither reads the other, probe_* columns are Separatix's, metric.<name> the
    metric's. Checked here, and that the page's section exists."""
    from vertebrae import LinearProbeMetric

    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "separatix.md").read_text(encoding="utf-8")
    assert "## Separatix and the probe metrics" in page
    dataset, noisy = _benchmark_dataset()
    always = SeparatixConfig(run_when="always")
    from vertebrae import Benchmark, PrecomputedExtractor

    both = Benchmark(dataset, [PrecomputedExtractor("clean")], separatix_config=always,
                     metrics=[LinearProbeMetric()], progress=False).run()
    alone = Benchmark(dataset, [PrecomputedExtractor("clean")], separatix_config=always, progress=False).run()
    probe_only = Benchmark(dataset, [PrecomputedExtractor("clean")], separatix_config=SeparatixConfig(enabled=False),
                           metrics=[LinearProbeMetric()], progress=False).run()
    assert _without_timings(both["clean"].separatix.to_dict()) == _without_timings(alone["clean"].separatix.to_dict())
    assert both["clean"].metrics["linear_probe"].score == probe_only["clean"].metrics["linear_probe"].score
    row = both.rows()[0]
    assert row["probe_score"] == both["clean"].separatix.probe_summary["probe_score"]
    assert row["metric.linear_probe"] == both["clean"].metrics["linear_probe"].score
    columns = page.split("* **DataFrame / rows**")[1].split("* **Markdown**")[0]
    named = set(re.findall(r"`((?:best_probe|probe|separatix)_?[a-z_]*)`", columns)) - {"probe_accuracy", "probe_summary"}
    assert len(named) >= 14 and named <= set(row), named - set(row)  # every row column the page lists exists
    assert "probe_accuracy" not in row


def test_markdown_shows_compact_separatix_details(benchmark_pair):
    _, diagnosed = benchmark_pair
    report = diagnosed.to_markdown()
    ranking = report.split("## Ranking")[1].split("\n\n")[2].splitlines()[0]
    assert "best_probe | probe_metric | probe_score" in ranking and "probe_accuracy" not in report
    detail = report.split("### clean")[1]
    for expected in ("#### Separatix diagnostic", f"`{diagnosed['clean'].separatix.recommendation}`",
                     "Decision path:", "| Separatix score | value |", "Best probe:",
                     "Linear vs nonlinear on balanced_accuracy", "Evaluation: stratified, 3 folds",
                     "probe kernel_approx: kernel probe disabled", "Dense budget 512 MiB"):
        assert expected in detail, expected


def test_benchmark_gates_and_forwards_groups():
    groups = np.arange(120) % 6  # typed int group ids
    dataset, noisy = _benchmark_dataset(groups)
    result = _run(dataset, noisy, SeparatixConfig(overlap_threshold=0.36))
    gated = [r for r in result.extractor_results if r.overlap.score < 0.36]
    assert gated and all(r.separatix.status == "gated" for r in gated)
    assert "Status `gated`" in result.to_markdown()
    ran = [r.separatix for r in result.extractor_results if r.overlap.score >= 0.36]
    assert ran and ran[0].report["grouping"]["group_count"] == 6 and ran[0].probe_summary["evaluation"]["group_aware"]


def test_benchmark_rejects_a_wrong_separatix_config(blob_dataset):
    from vertebrae import Benchmark, PrecomputedExtractor

    with pytest.raises(ConfigError, match="separatix_config must be a SeparatixConfig"):
        Benchmark(blob_dataset, [PrecomputedExtractor("x")], separatix_config={"enabled": True})


@pytest.mark.parametrize("grouping, expected", [("one_class_in_one_group", "completed"),
                                                ("too_few_supported_classes", "skipped")])
def test_benchmark_on_wine_with_group_support_gaps(grouping, expected):
    """Real data (sklearn's wine) through BenchmarkDataset.with_groups and Benchmark, never a row-level retry."""
    from sklearn.datasets import load_wine

    from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, PrecomputedExtractor

    X, y = load_wine(return_X_y=True)
    groups = np.array([f"batch-{i % 5}" for i in range(len(y))], dtype=object)
    groups[y == 2] = "batch-class-2"  # class 2 lives in one group
    if grouping == "too_few_supported_classes":
        groups[y == 1] = "batch-class-1"  # now only class 0 spans groups: separatix itself raises
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("wine", "1")).with_groups(groups)
    result = Benchmark(dataset, [PrecomputedExtractor("raw")],
                       separatix_config=SeparatixConfig(run_when="always")).run()
    diagnostic = result["raw"].separatix
    assert diagnostic.status == expected
    if expected == "completed":
        skipped = [s for s in diagnostic.skipped_diagnostics if s["name"] == "unsupported_group_classes"]
        assert skipped and skipped[0]["classes"] == ["int:2"]
        assert diagnostic.report["grouping"]["group_count"] == 6  # batch-0..4 plus the class-2 group
    else:
        assert diagnostic.report is None and "row-level" in diagnostic.reason
    assert result.ranked_results()[0].name == "raw"


def test_markdown_names_unsupported_group_classes_by_their_report_labels():
    """The grouping context showed separatix's stable key (``str:1``); it now shows the class as every report table
    does, disambiguated by type (``1 (str)`` beside ``1 (int)``)."""
    from sklearn.datasets import load_wine

    from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, PrecomputedExtractor

    X, y = load_wine(return_X_y=True)
    labels = list(np.array([1, "1", True], dtype=object)[y])
    groups = np.where(y == 1, 99, np.arange(len(y)) % 4)  # class "1" lives in one group
    dataset = BenchmarkDataset.from_embeddings(X, labels, target_type="single_label", groups=groups,
                                               identity=DatasetIdentity.declared("wine", "1"))
    result = Benchmark(dataset, [PrecomputedExtractor("raw")], separatix_config=SeparatixConfig(run_when="always"),
                       progress=False).run()
    assert result["raw"].separatix.probe_summary["grouping"]["skipped"] == ["str:1"]
    assert "classes the group-aware split supports 2, skipped 1: 1 (str)." in result.to_markdown()

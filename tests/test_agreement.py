"""Agreement of the primary ranking with reference metrics (issue 30.4) and the column-scale diagnostic (30.6).

Agreement values are checked against scipy.stats called directly on the scores the DataFrame
shows, regret and top-1 by hand; the scale diagnostic on sklearn's raw wine features, whose
proline column is hundreds of times wider than the median column.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from scipy import sparse, stats

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, DatasetIdentity, KNNMetric,
                           LinearProbeMetric, LogMEMetric, PrecomputedExtractor, SeparatixConfig)
from vertebrae.cli.main import main
from vertebrae.inputs.embeddings import SCALE_RATIO_THRESHOLD, column_scale
from vertebrae.errors import DataWarning
from vertebrae.scoring.metric_result import MetricResult

from .conftest import gaussian_classes
from .test_cli_metrics import CONFIG as METRICS_CONFIG


def _wine() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    return X, y.astype(str)


def _standardized(X: np.ndarray) -> np.ndarray:
    return (X - X.mean(0)) / X.std(0)


@pytest.fixture(scope="module")
def wine_run() -> tuple[BenchmarkResult, list[warnings.WarningMessage]]:
    from sklearn.decomposition import PCA

    X, y = _wine()
    Z = _standardized(X)
    rng = np.random.default_rng(0)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("wine", "1"))
    extractors = [PrecomputedExtractor("raw", X), PrecomputedExtractor("standardized", Z),
                  PrecomputedExtractor("pca2", PCA(2, random_state=0).fit_transform(Z)),
                  PrecomputedExtractor("noisy", Z + rng.normal(0, 2.0, Z.shape))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Benchmark(dataset, extractors, metrics=[LinearProbeMetric(), KNNMetric()],
                           separatix_config=SeparatixConfig(enabled=False)).run()
    return result, caught


@pytest.fixture
def result(wine_run) -> BenchmarkResult:
    """A private copy (tests rewrite scores to hand-derived values)."""
    return BenchmarkResult.from_json(wine_run[0].to_json())


def _set_scores(result: BenchmarkResult, primary: dict[str, float], reference: dict[str, float | None],
                metric: str = "linear_probe", higher_is_better: bool = True) -> None:
    for r in result.extractor_results:
        r.primary_score = primary[r.name]
        r.metrics["overlap"].score = primary[r.name]
        score = reference[r.name]
        r.metrics[metric] = MetricResult(metric, score, higher_is_better=higher_is_better,
                                         aggregate_valid=score is not None)


def _agreement(result: BenchmarkResult, metric: str = "linear_probe"):
    return next(a for a in result.agreement() if a.reference_metric == metric)


# ----------------------------------------------------------------------------- agreement values
def test_the_reference_metrics_declare_themselves():
    assert LinearProbeMetric.reference == "linear probe" and LinearProbeMetric().reference == "linear probe"
    assert KNNMetric.reference and LogMEMetric.reference


def test_agreement_equals_scipy_on_the_scores_the_dataframe_shows(wine_run):
    result, _ = wine_run
    assert result.reference_metrics == {"linear_probe": "linear probe", "knn": "k-nearest-neighbour model"}
    assert result.metadata["reference_metrics"][0] == {"name": "linear_probe", "label": "linear probe"}
    frame = result.to_dataframe()  # ranked by overlap, valid results only
    for metric in ("linear_probe", "knn"):
        a = _agreement(result, metric)
        primary, reference = frame["primary_score"].to_numpy(), frame[f"metric.{metric}"].to_numpy()
        assert a.candidates == list(frame["extractor"]) and a.excluded == [] and a.reason is None
        assert a.kendall_tau_b == pytest.approx(stats.kendalltau(primary, reference).statistic, abs=1e-12)
        assert a.weighted_tau == pytest.approx(stats.weightedtau(primary, reference).statistic, abs=1e-12)
        best = reference.max()
        assert a.primary_top1 == frame["extractor"][0]
        assert a.reference_top1 == [n for n, s in zip(frame["extractor"], reference) if s == best]
        assert a.regret == pytest.approx(best - reference[0], abs=1e-12)
        assert a.top1_same is bool(reference[0] == best)


def test_hand_derived_agreement_regret_and_a_different_top1(result):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6},
                {"raw": 0.80, "standardized": 0.95, "pca2": 0.85, "noisy": 0.5})
    a = _agreement(result)
    assert a.candidates == ["raw", "standardized", "pca2", "noisy"]
    assert (a.primary_top1, a.reference_top1, a.top1_same) == ("raw", ["standardized"], False)
    assert a.regret == pytest.approx(0.15)
    # pairs: raw-std D, raw-pca2 D, raw-noisy C, std-pca2 C, std-noisy C, pca2-noisy C -> (4 - 2) / 6
    assert a.kendall_tau_b == pytest.approx(1 / 3)
    assert a.weighted_tau == pytest.approx(stats.weightedtau([0.9, 0.8, 0.7, 0.6], [0.80, 0.95, 0.85, 0.5]).statistic)
    frame = result.to_dataframe().set_index("extractor")
    assert frame["agreement.linear_probe.rank"].to_dict() == {"raw": 3, "standardized": 1, "pca2": 2, "noisy": 4}
    assert frame["agreement.linear_probe.regret"]["raw"] == pytest.approx(a.regret)  # the top-1 row is the run's
    assert frame["agreement.linear_probe.regret"]["standardized"] == 0.0


def test_a_lower_is_better_reference_is_turned_around(result):
    """The same reference ranking expressed as a lower-is-better loss gives the same agreement."""
    primary = {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6}
    higher = {"raw": 0.80, "standardized": 0.95, "pca2": 0.85, "noisy": 0.5}
    _set_scores(result, primary, higher)
    expected = _agreement(result)
    _set_scores(result, primary, {n: 1.0 - s for n, s in higher.items()}, higher_is_better=False)
    turned = _agreement(result)
    assert turned.kendall_tau_b == pytest.approx(expected.kendall_tau_b)
    assert turned.weighted_tau == pytest.approx(expected.weighted_tau)
    assert (turned.reference_top1, turned.top1_same) == (["standardized"], False)
    assert turned.regret == pytest.approx(0.15)  # in the loss's own units, still >= 0
    frame = result.to_dataframe().set_index("extractor")
    assert frame["agreement.linear_probe.rank"]["standardized"] == 1


def test_tied_references_share_the_top_and_count_as_the_same_pick(result):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6},
                {"raw": 0.95, "standardized": 0.95, "pca2": 0.85, "noisy": 0.5})
    a = _agreement(result)
    assert (a.reference_top1, a.top1_same, a.regret) == (["raw", "standardized"], True, 0.0)
    assert a.kendall_tau_b == pytest.approx(stats.kendalltau([0.9, 0.8, 0.7, 0.6], [0.95, 0.95, 0.85, 0.5]).statistic)
    assert result.to_dataframe().set_index("extractor")["agreement.linear_probe.rank"].to_dict() == {
        "raw": 1, "standardized": 1, "pca2": 3, "noisy": 4}


def test_only_results_valid_on_both_metrics_are_compared(result):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6},
                {"raw": None, "standardized": 0.7, "pca2": 0.9, "noisy": 0.5})
    result["noisy"].error = {"stage": "score", "type": "X", "message": "m", "extractor": "noisy"}  # primary invalid
    a = _agreement(result)
    assert a.candidates == ["standardized", "pca2"] and a.excluded == ["raw"]
    assert (a.primary_top1, a.reference_top1, a.regret) == ("standardized", ["pca2"], pytest.approx(0.2))
    assert a.kendall_tau_b == pytest.approx(-1.0)
    frame = result.to_dataframe(include_invalid=True).set_index("extractor")
    assert np.isnan(frame["agreement.linear_probe.rank"]["raw"]) and np.isnan(frame["agreement.linear_probe.rank"]["noisy"])


@pytest.mark.parametrize("reference, reason", [
    ({"raw": 0.9, "standardized": None, "pca2": None, "noisy": None}, "at least 2 candidates"),
    ({"raw": 0.5, "standardized": 0.5, "pca2": 0.5, "noisy": 0.5}, "same score under 'linear_probe'"),
])
def test_undefined_rank_correlations_are_null_with_a_reason(result, reference, reason):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6}, reference)
    a = _agreement(result)
    assert a.kendall_tau_b is None and a.weighted_tau is None and reason in a.reason
    assert (a.primary_top1, a.top1_same, a.regret) == ("raw", True, 0.0)


def test_no_comparable_candidate_leaves_every_value_null(result):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6}, dict.fromkeys(
        ["raw", "standardized", "pca2", "noisy"]))
    a = _agreement(result)
    assert (a.primary_top1, a.top1_same, a.regret, a.reference_top1) == (None, None, None, [])
    assert "no candidate" in a.reason and a.excluded == ["raw", "standardized", "pca2", "noisy"]
    assert "not compared" in result.to_markdown()


def test_agreement_is_in_the_json_and_the_reports(result, tmp_path):
    _set_scores(result, {"raw": 0.9, "standardized": 0.8, "pca2": 0.7, "noisy": 0.6},
                {"raw": 0.80, "standardized": 0.95, "pca2": 0.85, "noisy": 0.5})
    data = result.serialized()
    assert data["agreement"] == [a.to_dict() for a in result.agreement()]
    markdown, html = result.to_markdown(), result.to_html()
    title = "Would a linear probe pick the same?"
    assert f"## {title}" in markdown and title in html
    assert "picks standardized, not raw; taking raw gives up 0.1500 of its linear_probe score" in markdown
    assert "A linear probe would pick another candidate:" in markdown  # the answer's caveat
    assert "| linear_probe | 4 | no | raw | standardized | 0.1500 | 0.3333 |" in markdown
    path = result.save_json(tmp_path / "r.json")
    assert BenchmarkResult.load(path).agreement() == result.agreement()


def test_without_reference_metrics_there_is_no_agreement(tmp_path):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=1)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.ephemeral())
    result = Benchmark(dataset, [PrecomputedExtractor("a", X), PrecomputedExtractor("b", X[:, :3])],
                       separatix_config=SeparatixConfig(enabled=False)).run()
    assert result.agreement() == [] and "agreement" not in result.to_dict()
    assert "reference_metrics" not in result.metadata and not result.to_dataframe().filter(like="agreement.").columns.size
    assert "pick the same" not in result.to_markdown()


def test_a_primary_reference_metric_is_not_compared_with_itself():
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=1)
    result = Benchmark(BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.ephemeral()), [PrecomputedExtractor("a", X),
                                                                PrecomputedExtractor("b", X[:, :3])],
                       metrics=[LinearProbeMetric(), KNNMetric()], primary_metric="linear_probe",
                       separatix_config=SeparatixConfig(enabled=False)).run()
    assert result.reference_metrics == {"knn": "k-nearest-neighbour model"}
    assert [a.reference_metric for a in result.agreement()] == ["knn"]
    assert result.agreement()[0].primary_metric == "linear_probe"


# ----------------------------------------------------------------------------- CLI and config
# The metric-option tests' run config (two extractors of one blob dataset), without Separatix.
CONFIG = METRICS_CONFIG + """
[separatix]
enabled = false
"""


@pytest.fixture
def project(tmp_path):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=2)
    np.save(tmp_path / "full.npy", X)
    np.save(tmp_path / "half.npy", X[:, :3])
    np.save(tmp_path / "labels.npy", y)
    return tmp_path


@pytest.mark.parametrize("how", ["option", "config"])
def test_probe_adds_the_two_reference_metrics_and_keeps_the_primary(project, how):
    config = CONFIG + ("\n[benchmark]\nprobe = true\n" if how == "config" else "")
    (project / "run.toml").write_text(config)
    argv = ["run", str(project / "run.toml"), "-o", str(project / "out"), "-q"] + (["--probe"] if how == "option" else [])
    assert main(argv) == 0
    result = BenchmarkResult.load(project / "out" / "report.json")
    assert result.metadata["primary_metric"] == "overlap" and result["full"].primary_metric_name == "overlap"
    assert set(result["full"].metrics) == {"overlap", "linear_probe", "knn"}
    assert [a.reference_metric for a in result.agreement()] == ["linear_probe", "knn"]
    assert "## Would a linear probe pick the same?" in (project / "out" / "report.md").read_text()


def test_probe_keeps_a_configured_probe(project):
    config = CONFIG + '\n[[metrics]]\npath = "vertebrae:KNNMetric"\nparams = {k = 3}\n'
    (project / "run.toml").write_text(config)
    assert main(["run", str(project / "run.toml"), "-o", str(project / "out"), "-q", "--probe"]) == 0
    result = BenchmarkResult.load(project / "out" / "report.json")
    assert [m["k"] for m in result.metadata["settings"]["metrics"] if m["type"] == "knn"] == [3]
    assert result.reference_metrics == {"knn": "k-nearest-neighbour model", "linear_probe": "linear probe"}


def test_a_probe_switch_that_is_not_a_boolean_exits_2_with_one_line(project, capsys):
    (project / "run.toml").write_text(CONFIG + '\n[benchmark]\nprobe = "yes"\n')
    assert main(["run", str(project / "run.toml"), "-o", str(project / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "[benchmark] probe must be true or false" in err and len(err.splitlines()) == 1


# ----------------------------------------------------------------------------- column scale
def test_raw_wine_features_warn_that_a_few_columns_decide_the_score(wine_run):
    result, caught = wine_run
    scale_warnings = [w for w in caught if "dominate the row norms" in str(w.message)]
    assert [(w.category, str(w.message).split(":")[0]) for w in scale_warnings] == [(DataWarning, "raw")]
    message = str(scale_warnings[0].message)
    assert "L2 row normalization lets those columns decide the score" in message and "StandardScaler" in message
    X, _ = _wine()
    std = X.std(0)
    record = result["raw"].embedding["column_scale"]
    assert record["std_ratio"] == pytest.approx(std.max() / np.median(std)) and record["std_ratio"] > SCALE_RATIO_THRESHOLD
    assert record["dominant_columns"] == [12]  # proline
    for name in ("standardized", "pca2", "noisy"):
        assert "column_scale" not in result[name].embedding
    markdown = result.to_markdown()
    assert "A few columns decide raw's score:" in markdown
    row = next(line for line in markdown.splitlines() if re.match(r"\| \d+ \| raw \| overlap \|", line))
    assert row.rstrip(" |").endswith("of the squared row norm)")  # the ranking table, beside the candidate


def test_breast_cancer_raw_features_warn_and_standardized_do_not():
    from sklearn.datasets import load_breast_cancer

    X, _ = load_breast_cancer(return_X_y=True)
    assert column_scale(X) is not None and column_scale(_standardized(X)) is None


def test_column_scale_of_csr_equals_dense_and_never_densifies():
    X, _ = _wine()
    dense, stored = column_scale(X), column_scale(sparse.csr_matrix(X))
    assert stored["dominant_columns"] == dense["dominant_columns"]
    assert (stored["std_ratio"], stored["norm_share"]) == pytest.approx((dense["std_ratio"], dense["norm_share"]))
    # 1,000,000 x 50,000 would be 400 GB dense: a densifying implementation cannot run this
    rng = np.random.default_rng(0)
    n, d, nnz = 1_000_000, 50_000, 500_000
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, d, nnz)
    values = rng.normal(size=nnz) * np.where(cols == 7, 1e4, 1.0)
    wide = sparse.csr_matrix((values, (rows, cols)), shape=(n, d))
    record = column_scale(wide)
    mean = np.asarray(wide.mean(axis=0)).ravel()
    std = np.sqrt(np.asarray(wide.multiply(wide).mean(axis=0)).ravel() - mean ** 2)
    assert record["dominant_columns"] == [7] and record["std_ratio"] == pytest.approx(std.max() / np.median(std))


def test_column_scale_is_not_checked_without_row_normalization():
    from vertebrae import OverlapScoringConfig

    X, y = _wine()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Benchmark(BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.ephemeral()), [PrecomputedExtractor("raw", X)],
                           scoring_config=OverlapScoringConfig(normalize_embeddings=False),
                           separatix_config=SeparatixConfig(enabled=False)).run()
    assert "column_scale" not in result["raw"].embedding
    assert not [w for w in caught if "dominate the row norms" in str(w.message)]

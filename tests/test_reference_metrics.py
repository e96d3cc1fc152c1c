"""KNNMetric, LinearProbeMetric and LogMEMetric against independent references.

kNN: scikit-learn's ``KNeighborsClassifier``/``KNeighborsRegressor`` (cosine, brute force), refitted without the
held-out row (or its group).  Linear probe: ``cross_val_score`` of the same pipeline converged to tol=1e-10.  LogME: a
closed-form case derived by hand, the Gaussian marginal likelihood maximized numerically, and its invariances.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import balanced_accuracy_score, f1_score, r2_score
from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold, cross_val_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vertebrae import (Benchmark, BenchmarkDataset, ConfigError, DatasetIdentity, KNNMetric, LinearProbeMetric,
                           LogMEMetric, MetricError, load_metric)
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.scoring.logme import _fixed_point, maximize_evidence, spectrum
from vertebrae.scoring.metrics import metrics_key_fingerprint

from .conftest import gaussian_classes

SINGLE = {"target_type": "single_label"}
MULTI = {"target_type": "multi_label"}
REGRESSION = {"target_type": "regression"}


def _labels(y) -> np.ndarray:
    return np.array([f"vk:int:{c}" for c in y])


@pytest.fixture(scope="module")
def blobs():
    X, y = gaussian_classes(n_per_class=20, n_classes=4, dim=6, spread=1.0, seed=5)
    y[::9] = 0  # uneven classes
    return X, y


def _held_out_predictions(model, X, y, groups=None) -> np.ndarray:
    """Fit on every row but one (and, with groups, on other groups only); predict that row."""
    predicted = []
    for i in range(len(X)):
        train = np.arange(len(X)) != i if groups is None else groups != groups[i]
        predicted.append(model.fit(X[train], y[train]).predict(X[i:i + 1])[0])
    return np.array(predicted)


# ------------------------------------------------------------------------------------------------------ kNN
@pytest.mark.parametrize("k", [1, 4, 5])
@pytest.mark.parametrize("block", [1, 7, 10_000])
def test_knn_single_label_matches_sklearn_leave_one_out(blobs, k, block):
    X, y = blobs
    metric = KNNMetric(k=k, max_block_bytes=block * 32 * len(X))
    assert metric.block_rows(len(X)) == min(block, len(X))
    payload = metric(X, _labels(y), target_metadata=SINGLE)
    labels = _labels(y)  # sklearn's classes_ sort the same strings: its vote ties go to the same class
    reference = _held_out_predictions(KNeighborsClassifier(k, metric="cosine", algorithm="brute"), X, labels)
    assert payload["score"] == pytest.approx(balanced_accuracy_score(labels, reference), abs=1e-12)
    assert payload["aggregate_valid"] and payload["diagnostics"]["measure"] == "balanced_accuracy"


def test_knn_groups_take_neighbours_from_other_groups_only(blobs):
    X, y = blobs
    groups = np.arange(len(X)) % 7
    X, y = X.copy(), y.copy()
    X[1::2], y[1::2] = X[::2] + 1e-3, y[::2]  # each row's near-duplicate, same label, same group
    groups[1::2] = groups[::2]
    labels = _labels(y)
    payload = KNNMetric(k=1)(X, labels, target_metadata=SINGLE, groups=_labels(groups))
    reference = _held_out_predictions(KNeighborsClassifier(1, metric="cosine", algorithm="brute"), X, labels, groups)
    assert payload["score"] == pytest.approx(balanced_accuracy_score(labels, reference), abs=1e-12)
    assert KNNMetric(k=1)(X, labels, target_metadata=SINGLE)["score"] == 1.0  # without groups: the duplicate
    assert payload["score"] < 0.9


def test_knn_multi_label_and_regression_match_sklearn(blobs):
    X, y = blobs
    rng = np.random.default_rng(1)
    indicator = np.stack([y == 0, y >= 2, (y % 2 == 1) | (rng.random(len(y)) < 0.2)], axis=1).astype(np.int8)
    payload = KNNMetric(k=4)(X, sparse.csr_matrix(indicator), target_metadata=MULTI)
    reference = _held_out_predictions(KNeighborsClassifier(4, metric="cosine", algorithm="brute"), X, indicator)
    assert payload["score"] == pytest.approx(f1_score(indicator, reference, average="macro"), abs=1e-12)

    values = np.stack([X[:, 0] * 2 + rng.normal(0, 0.3, len(X)), np.full(len(X), 3.0), X[:, 1]], axis=1)
    payload = KNNMetric(k=5)(X, values, target_metadata={**REGRESSION, "target_names": ["a", "flat", "b"]})
    kept = values[:, [0, 2]]
    reference = _held_out_predictions(KNeighborsRegressor(5, metric="cosine", algorithm="brute"), X, kept)
    assert payload["score"] == pytest.approx(r2_score(kept, reference), abs=1e-12)
    assert any("'flat'" in w for w in payload["warnings"])


def _documented_rule(X: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """The tie rules of docs/metrics.md, written plainly: neighbours by (-cosine, row index); the most votes,
    then the label that sorts first."""
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    predicted = []
    for q in range(len(X)):
        others = sorted((j for j in range(len(X)) if j != q), key=lambda j: (-round(unit[q] @ unit[j], 12), j))
        votes = {}
        for j in others[:k]:
            votes[labels[j]] = votes.get(labels[j], 0) + 1
        predicted.append(min(votes, key=lambda label: (-votes[label], label)))
    return np.array(predicted)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_knn_tie_rules_are_the_documented_ones(k):
    # Few distinct directions, many duplicates: neighbour ties at the k-th place and vote ties everywhere.
    rng = np.random.default_rng(k)
    X = rng.integers(1, 3, size=(40, 2)).astype(np.float64)
    labels = _labels(rng.integers(0, 3, size=40))
    payload = KNNMetric(k=k, max_block_bytes=5 * 32 * 40)(X, labels, target_metadata=SINGLE)
    assert payload["score"] == pytest.approx(balanced_accuracy_score(labels, _documented_rule(X, labels, k)))


def test_knn_sparse_input_equals_dense_and_collapsed_space_is_not_rankable(blobs):
    X, y = blobs
    X = np.where(np.abs(X) > 0.8, X, 0.0)
    dense = KNNMetric(k=3)(X, _labels(y), target_metadata=SINGLE)
    sparse_payload = KNNMetric(k=3, max_block_bytes=2000)(sparse.csr_matrix(X), _labels(y), target_metadata=SINGLE)
    assert sparse_payload["score"] == pytest.approx(dense["score"], abs=1e-12)
    collapsed = KNNMetric()(np.ones((len(y), 3)), _labels(y), target_metadata=SINGLE)
    assert collapsed["aggregate_valid"] is False and "not rankable" in collapsed["warnings"][-1]


# ------------------------------------------------------------------------------------------------ linear probe
# The probe is solved to its optimum (tests/test_probe_solver.py checks coefficients and every prediction); here
# the whole metric equals cross_val_score of the same pipeline converged to tol=1e-10, on float64 features
# (scikit-learn would keep float32 features in float32).
def _tight(C: float = 1.0) -> LogisticRegression:
    return LogisticRegression(C=C, tol=1e-10, max_iter=100_000)


@pytest.mark.parametrize("seed", [0, 7])
def test_probe_single_label_equals_cross_val_score_on_the_same_folds(blobs, seed):
    X, y = blobs
    X = X.astype(np.float64)
    payload = LinearProbeMetric(n_splits=4)(X, _labels(y), target_metadata=SINGLE, seed=seed)
    reference = cross_val_score(make_pipeline(StandardScaler(), _tight()), X, y,
                                cv=StratifiedKFold(4, shuffle=True, random_state=seed), scoring="balanced_accuracy")
    assert payload["score"] == pytest.approx(reference.mean(), abs=1e-9)
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(reference.tolist(), abs=1e-9)


def test_probe_groups_regression_and_multi_label_equal_cross_val_score(blobs):
    X, y = blobs
    X = X.astype(np.float64)
    groups = np.arange(len(X)) % 6
    payload = LinearProbeMetric(C=0.5)(X, _labels(y), target_metadata=SINGLE, groups=_labels(groups), seed=3)
    reference = cross_val_score(make_pipeline(StandardScaler(), _tight(0.5)), X, y,
                                groups=groups, cv=GroupKFold(5, shuffle=True, random_state=3),
                                scoring="balanced_accuracy")
    assert payload["score"] == pytest.approx(reference.mean(), abs=1e-9)
    assert payload["metadata"]["folds"] == "GroupKFold"

    values = (X[:, 0] * 3 + X[:, 2]).astype(np.float64)  # regression targets reach metrics as float64
    payload = LinearProbeMetric(alpha=2.0)(X, values, target_metadata=REGRESSION, seed=1)
    reference = cross_val_score(make_pipeline(StandardScaler(), Ridge(alpha=2.0)), X, values,
                                cv=KFold(5, shuffle=True, random_state=1), scoring="r2")
    assert payload["score"] == pytest.approx(reference.mean(), abs=1e-9)

    indicator = np.stack([y == 0, y >= 2, y % 2 == 1], axis=1).astype(np.int8)
    payload = LinearProbeMetric()(X, sparse.csr_matrix(indicator), target_metadata=MULTI, seed=2)
    reference = cross_val_score(make_pipeline(StandardScaler(), OneVsRestClassifier(_tight())),
                                X, indicator, cv=KFold(5, shuffle=True, random_state=2), scoring="f1_macro")
    assert payload["score"] == pytest.approx(reference.mean(), abs=1e-9)


def test_probe_keeps_sparse_input_sparse(blobs):
    X, y = blobs
    X = sparse.csr_matrix(np.where(X > 0.5, X, 0.0).astype(np.float64))
    payload = LinearProbeMetric()(X, _labels(y), target_metadata=SINGLE, seed=0)
    reference = cross_val_score(make_pipeline(StandardScaler(with_mean=False), _tight()),
                                X, y, cv=StratifiedKFold(5, shuffle=True, random_state=0), scoring="balanced_accuracy")
    assert payload["score"] == pytest.approx(reference.mean(), abs=1e-9)
    assert "with_mean=False" in payload["metadata"]["scaling"]


def test_probe_rejects_folds_it_cannot_make(blobs):
    X, y = blobs
    with pytest.raises(MetricError, match="3 groups cannot make n_splits=5"):
        LinearProbeMetric()(X, _labels(y), target_metadata=SINGLE, groups=_labels(np.arange(len(X)) % 3))


# ------------------------------------------------------------------------------------------------------ LogME
def _log_evidence(F: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> float:
    """log N(y; 0, I/beta + F F^T/alpha): the marginal likelihood of the Bayesian linear model, written directly."""
    cov = np.eye(len(y)) / beta + F @ F.T / alpha
    _, logdet = np.linalg.slogdet(cov)
    return -0.5 * (len(y) * math.log(2 * math.pi) + logdet + y @ np.linalg.solve(cov, y))


def _max_log_evidence(F: np.ndarray, y: np.ndarray) -> float:
    """The maximum over (alpha, beta), by Nelder-Mead on (log alpha, log beta) from a grid of starts."""
    runs = [minimize(lambda p: -_log_evidence(F, y, *np.exp(p)), [a, b], method="Nelder-Mead",
                     options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 20_000})
            for a in (-4.0, 0.0, 4.0) for b in (-4.0, 0.0, 4.0)]
    return -min(run.fun for run in runs)


def test_logme_equals_the_hand_derived_one_feature_case():
    # One feature f: the covariance has eigenvalue l1 = 1/beta + |f|^2/alpha along f and l0 = 1/beta on the other
    # n - 1 directions.  With a = (f.y)^2/|f|^2 and b = |y|^2 - a, the maximum is at l1 = a, l0 = b/(n-1) (valid when
    # a > b/(n-1)), so log evidence = -n/2 log 2pi - (log a + 1)/2 - (n-1)/2 (log(b/(n-1)) + 1).
    f = np.array([1.0, 2.0, 3.0, 4.0])
    n = len(f)
    columns = {"vk:str:a": np.array([0.0, 1.0, 1.0, 1.0]), "vk:str:b": np.array([1.0, 0.0, 0.0, 0.0])}
    expected = []
    for y in columns.values():
        a = (f @ y) ** 2 / (f @ f)
        b = y @ y - a
        if a > b / (n - 1):
            expected.append(-n / 2 * math.log(2 * math.pi) - (math.log(a) + 1) / 2
                            - (n - 1) / 2 * (math.log(b / (n - 1)) + 1))
        else:  # alpha -> infinity: pure noise, l1 = l0 = |y|^2 / n
            expected.append(-n / 2 * (math.log(2 * math.pi) + math.log(y @ y / n) + 1))
    labels = np.array(["vk:str:b", "vk:str:a", "vk:str:a", "vk:str:a"])
    payload = LogMEMetric(tol=1e-12)(f[:, None], labels, target_metadata=SINGLE)
    assert payload["diagnostics"]["per_target"]["vk:str:a"] == pytest.approx(expected[0] / n, abs=1e-9)
    assert payload["diagnostics"]["per_target"]["vk:str:b"] == pytest.approx(expected[1] / n, abs=1e-9)
    assert payload["score"] == pytest.approx(np.mean(expected) / n, abs=1e-9)


@pytest.mark.parametrize("shape", [(9, 3), (12, 2)])
def test_logme_equals_the_numerically_maximized_marginal_likelihood(shape):
    rng = np.random.default_rng(shape[0])
    F = rng.normal(size=shape)
    y = F @ rng.normal(size=shape[1]) + rng.normal(0, 0.7, shape[0])
    payload = LogMEMetric(tol=1e-12, max_iter=10_000)(F, y, target_metadata=REGRESSION)
    assert payload["score"] == pytest.approx(_max_log_evidence(F, y) / shape[0], abs=1e-7)


def test_logme_invariances_rotation_scaling_permutation_and_sparse(blobs):
    X, y = blobs
    X = X.astype(np.float64)  # float32 rounding of X * 37 would show at 1e-9
    labels = _labels(y)
    metric = LogMEMetric()
    base = metric(X, labels, target_metadata=SINGLE)["score"]
    rotation, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(X.shape[1], X.shape[1])))
    order = np.random.default_rng(1).permutation(len(X))
    assert metric(X @ rotation, labels, target_metadata=SINGLE)["score"] == pytest.approx(base, abs=1e-9)
    assert metric(X * 37.0, labels, target_metadata=SINGLE)["score"] == pytest.approx(base, abs=1e-9)
    assert metric(X[order], labels[order], target_metadata=SINGLE)["score"] == pytest.approx(base, abs=1e-9)
    assert metric(sparse.csr_matrix(X), labels, target_metadata=SINGLE)["score"] == pytest.approx(base, abs=1e-9)
    padded = np.hstack([X, np.zeros((len(X), 3))]) @ np.linalg.qr(np.random.default_rng(2).normal(size=(9, 9)))[0]
    payload = metric(padded, labels, target_metadata=SINGLE)  # rank 6 of 9: the same F F^T, so the same evidence
    assert payload["score"] == pytest.approx(base, abs=1e-9) and payload["diagnostics"]["rank"] == X.shape[1]


def test_logme_noise_features_take_the_limit_without_a_convergence_warning():
    # Features that explain y worse than noise drive alpha up without meeting the tolerance (seed 14: 100
    # iterations are not enough); the maximum is then the alpha -> infinity limit, a closed form, so the evidence
    # is exact and no "did not converge" warning is due.
    rng = np.random.default_rng(14)
    F, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    sigma, Z = spectrum(F, y[:, None])
    assert not _fixed_point(sigma, Z, np.array([y @ y]), 40, 100, 1e-8)[1][0]  # the case this test is about
    payload = LogMEMetric()(F, y, target_metadata=REGRESSION)
    assert payload["warnings"] == [] and payload["diagnostics"]["unconverged_targets"] == 0
    limit = (math.log(40 / (y @ y)) - math.log(2 * math.pi) - 1) / 2
    assert payload["score"] == pytest.approx(limit, abs=1e-12)
    assert payload["score"] == pytest.approx(_max_log_evidence(F, y) / 40, abs=1e-9)


def test_logme_fewer_rows_than_dimensions_uses_the_sample_gram():
    rng = np.random.default_rng(4)
    F = rng.normal(size=(6, 40))
    y = rng.normal(size=6)
    sigma, Z = spectrum(F, y[:, None])
    wide, _ = maximize_evidence(sigma, Z, np.array([y @ y]), 6, 50, 1e-10)
    sigma_t, Z_t = spectrum(F @ np.linalg.qr(F.T)[0], y[:, None])  # 6 x 6, the same F F^T: the feature Gram path
    square, _ = maximize_evidence(sigma_t, Z_t, np.array([y @ y]), 6, 50, 1e-10)
    assert wide == pytest.approx(square, abs=1e-9)


def test_logme_budget_and_target_types(blobs):
    X, y = blobs
    with pytest.raises(MetricError, match="over max_dense_bytes=100; raise LogMEMetric.max_dense_bytes"):
        LogMEMetric(max_dense_bytes=100)(X, _labels(y), target_metadata=SINGLE)
    with pytest.raises(MetricError, match="supports"):
        LogMEMetric()(X, sparse.csr_matrix(np.eye(len(X), 2, dtype=np.int8)), target_metadata=MULTI)
    zero = LogMEMetric()(np.zeros_like(X), _labels(y), target_metadata=SINGLE)
    counts = np.bincount(y)
    noise_only = [(math.log(len(y) / c) - math.log(2 * math.pi) - 1) / 2 for c in counts]
    assert zero["score"] == pytest.approx(np.mean(noise_only), abs=1e-12)


# ------------------------------------------------------------------------------------- protocol and run config
def test_identities_seeds_and_config_validation(blobs):
    X, y = blobs
    for metric in (KNNMetric(), LinearProbeMetric(), LogMEMetric()):
        assert metric.higher_is_better and metric.aggregate_valid
        assert type(metric).from_dict(metric.to_dict()) == metric
    assert metrics_key_fingerprint([KNNMetric(k=3)]) != metrics_key_fingerprint([KNNMetric(k=4)])
    assert metrics_key_fingerprint([LinearProbeMetric()]) != metrics_key_fingerprint([LinearProbeMetric(C=2.0)])
    probe = LinearProbeMetric()
    first = probe(X, _labels(y), target_metadata=SINGLE, seed=1)["score"]
    assert probe(X, _labels(y), target_metadata=SINGLE, seed=1)["score"] == first
    with pytest.raises(ConfigError, match="KNNMetric.k must be >= 1"):
        KNNMetric(k=0)
    with pytest.raises(ConfigError, match="n_splits must be >= 2"):
        LinearProbeMetric(n_splits=1)


def test_load_metric_builds_a_metric_class_from_params():
    metric = load_metric("vertebrae:KNNMetric", params={"k": 7})
    assert metric == KNNMetric(k=7)
    assert load_metric("vertebrae:LogMEMetric", name="evidence").name == "evidence"
    with pytest.raises(ConfigError, match="unknown field 'kk'"):
        load_metric("vertebrae:KNNMetric", params={"kk": 7})
    with pytest.raises(ConfigError, match="cannot be overridden"):
        load_metric("vertebrae:LinearProbeMetric", higher_is_better=False)


@pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning")
def test_reference_metrics_rank_in_a_benchmark():
    X, y = gaussian_classes(n_per_class=15, n_classes=3, dim=5, spread=3.0, seed=2)
    noise = np.random.default_rng(0).normal(size=X.shape)
    dataset = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("reference", "1"))
    result = Benchmark(dataset, [PrecomputedExtractor("noise", noise), PrecomputedExtractor("signal", X)],
                       metrics=[KNNMetric(), LinearProbeMetric(), LogMEMetric()], primary_metric="logme").run()
    for name in ("knn", "linear_probe", "logme"):
        scores = {e: result[e].metrics[name].score for e in ("signal", "noise")}
        assert scores["signal"] > scores["noise"], name
    assert [r.name for r in result.ranked_results()] == ["signal", "noise"]


@pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning")
def test_run_config_builds_reference_metrics_from_class_paths(tmp_path, capsys):
    from vertebrae import BenchmarkResult
    from vertebrae.cli.main import main

    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=2)
    np.save(tmp_path / "full.npy", X)
    np.save(tmp_path / "labels.npy", y)
    config = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "full"
embeddings = "full.npy"

[scoring]
k = 3

[[metrics]]
path = "vertebrae:KNNMetric"
params = {k = 3}
"""
    (tmp_path / "run.toml").write_text(config)
    argv = ["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q",
            "--metric", "vertebrae:LogMEMetric:evidence", "--primary-metric", "evidence"]
    assert main(argv) == 0
    result = BenchmarkResult.load(tmp_path / "out" / "report.json")
    assert result["full"].metrics["knn"].metadata["k"] == 3
    assert result["full"].primary_score == pytest.approx(
        LogMEMetric()(X, _labels(y), target_metadata=SINGLE)["score"], abs=1e-12)
    assert [m["type"] for m in result.metadata["settings"]["metrics"]] == ["knn", "logme"]
    (tmp_path / "run.toml").write_text(config.replace("k = 3}", "neighbours = 3}"))
    capsys.readouterr()
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out2"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "KNNMetric got unknown field 'neighbours'" in err

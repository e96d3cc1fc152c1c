"""RidgeProbeMetric and LDAProbeMetric against scikit-learn on the same folds.

Reference: ``cross_validate(make_pipeline(StandardScaler(), RidgeClassifierCV(alphas)))`` (``RidgeCV`` for
regression, ``StandardScaler(with_mean=False)`` for sparse input) and ``make_pipeline(StandardScaler(),
LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"))`` on the documented seeded folds, built here with
scikit-learn (:func:`_folds`): every fold score, every chosen alpha and (for LDA) every discriminant must agree.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy import sparse
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import RidgeClassifierCV, RidgeCV
from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vertebrae import (ConfigError, ConfigTypeError, LDAProbeMetric, LinearProbeMetric, MetricError,
                       RidgeProbeMetric, load_metric)
from vertebrae.scoring.lda_probe import fold_discriminants
from vertebrae.scoring.metrics import check_metric

SINGLE = {"target_type": "single_label"}
MULTI = {"target_type": "multi_label"}
REGRESSION = {"target_type": "regression"}
#: A short grid keeps the reference fast; the default grid is tested once.
ALPHAS = (0.01, 0.3, 3.0, 30.0, 300.0, 3000.0)


def _classes(n: int, dim: int, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping Gaussian classes with unequal column scales and a large offset (what standardization is for)."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_classes), n // n_classes)
    centers = rng.normal(0.0, 0.4, (n_classes, dim))
    return 5.0 + (centers[y] + rng.normal(size=(y.size, dim))) * rng.uniform(0.1, 4.0, dim), y


def _labels(y: np.ndarray) -> np.ndarray:
    return np.array([f"vk:int:{c}" for c in y])


def _folds(target_type: str, seed: int, grouped: bool = False):
    """The documented folds, written out with scikit-learn: 5 shuffled folds seeded with the stage seed,
    GroupKFold with groups, else StratifiedKFold for single-label and KFold for multi-label and regression."""
    if grouped:
        return GroupKFold(5, shuffle=True, random_state=seed)
    if target_type == "single_label":
        return StratifiedKFold(5, shuffle=True, random_state=seed)
    return KFold(5, shuffle=True, random_state=seed)


def _reference(model, X, y, target_type: str, seed: int, groups=None, sparse_input: bool = False) -> dict:
    """The scikit-learn pipeline on the documented folds (groups coded as the metric codes their keys)."""
    groups = None if groups is None else np.unique(_labels(groups), return_inverse=True)[1]
    folds = _folds(target_type, seed, groups is not None)
    scoring = {"single_label": "balanced_accuracy", "multi_label": "f1_macro", "regression": "r2"}[target_type]
    return cross_validate(make_pipeline(StandardScaler(with_mean=not sparse_input), model), X, y, groups=groups,
                          cv=folds, scoring=scoring, return_estimator=True)


def _check_ridge(X, y, labels, meta, target_type, seed=0, groups=None, alphas=ALPHAS):
    metric = RidgeProbeMetric(alphas=alphas)
    got = metric(X, labels, target_metadata=meta, groups=None if groups is None else _labels(groups), seed=seed)
    model = RidgeCV(alphas=alphas) if target_type == "regression" else RidgeClassifierCV(alphas=alphas)
    ref = _reference(model, X, y, target_type, seed, groups, sparse.issparse(X))
    np.testing.assert_allclose(got["diagnostics"]["fold_scores"], ref["test_score"], rtol=0, atol=1e-12)
    assert got["diagnostics"]["chosen_alphas"] == [e[-1].alpha_ for e in ref["estimator"]]
    assert got["score"] == pytest.approx(ref["test_score"].mean(), abs=1e-12)
    return got, ref


# ---------------------------------------------------------------------------------------------- ridge
@pytest.mark.parametrize("n_classes", [2, 5])
def test_ridge_classification_equals_ridge_classifier_cv(n_classes):
    X, y = _classes(400, 24, n_classes, seed=n_classes)
    got, ref = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=7)
    # the grid search is informative: sklearn and the probe pick an interior alpha (30.0 here), not a grid end
    assert all(ALPHAS[0] < a < ALPHAS[-1] for a in got["diagnostics"]["chosen_alphas"])
    assert got["metadata"]["folds"] == "StratifiedKFold"
    assert got["metadata"]["decomposition"] == "features (D x D)"


def test_ridge_default_grid_equals_ridge_classifier_cv():
    X, y = _classes(300, 16, 3, seed=11)
    got, _ = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=2, alphas=RidgeProbeMetric().alphas)
    assert got["metadata"]["alphas"] == list(RidgeProbeMetric().alphas)


def test_ridge_fewer_rows_than_dimensions_uses_the_row_side():
    X, y = _classes(90, 200, 3, seed=4)
    got, _ = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=1)
    assert got["metadata"]["decomposition"] == "rows (n x n)"


def test_ridge_with_groups_uses_group_folds():
    X, y = _classes(240, 12, 3, seed=8)
    groups = np.arange(y.size) % 12
    got, _ = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=5, groups=groups)
    assert got["metadata"]["folds"] == "GroupKFold"


def _sparse_counts(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Poisson counts (mostly zeros) in three classes, every third column raised by the class: sparse input."""
    rng = np.random.default_rng(shape[0])
    n, dim = shape
    y = rng.integers(0, 3, n)
    return rng.poisson(0.3, (n, dim)).astype(float) * (1 + y[:, None] * (np.arange(dim) % 3 == 0)), y


@pytest.mark.parametrize("shape", [(300, 40), (60, 150)])
def test_ridge_sparse_input_stays_sparse_and_equals_the_sparse_pipeline(shape):
    dense, y = _sparse_counts(shape)
    X = sparse.csr_matrix(dense)
    got, _ = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=3)
    assert "sparse input stays sparse" in got["metadata"]["scaling"]
    # centering implicitly equals the dense pipeline, which centers
    dense_got = RidgeProbeMetric(alphas=ALPHAS)(dense, _labels(y), target_metadata=SINGLE, seed=3)
    np.testing.assert_allclose(got["diagnostics"]["fold_scores"], dense_got["diagnostics"]["fold_scores"], atol=1e-12)


def test_ridge_sparse_folds_on_both_sides_of_the_width_record_each_side():
    """101 rows in 5 folds train on 80 or 81 rows of 80 columns: each sparse fold decomposes its smaller side."""
    rng = np.random.default_rng(4)
    y = np.arange(101) % 3
    X = sparse.csr_matrix(rng.poisson(0.4, (101, 80)).astype(float) * (1 + y[:, None] * (np.arange(80) % 4 == 0)))
    got, ref = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=1)
    sizes = [train.size for train, _ in _folds("single_label", 1).split(X, y)]
    assert sorted(set(sizes)) == [80, 81]
    assert got["metadata"]["decomposition"] == ["features (D x D)" if n > 80 else "rows (n x n)" for n in sizes]


def test_ridge_multi_label_equals_ridge_classifier_cv():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 15))
    indicator = (X[:, :4] + rng.normal(0, 1.0, (300, 4)) > 0.3).astype(int)
    meta = {**MULTI, "label_names": ["a", "b", "c", "d"]}
    got, _ = _check_ridge(X, indicator, sparse.csr_matrix(indicator), meta, "multi_label", seed=4)
    assert got["diagnostics"]["measure"] == "f1_macro" and got["metadata"]["folds"] == "KFold"


@pytest.mark.parametrize("n_targets", [1, 3])
def test_ridge_regression_equals_ridge_cv(n_targets):
    rng = np.random.default_rng(n_targets)
    X = rng.normal(size=(250, 10)) * rng.uniform(0.5, 5, 10)
    values = X @ rng.normal(size=(10, n_targets)) + rng.normal(0, 3.0, (250, n_targets))
    values = values[:, 0] if n_targets == 1 else values
    got, _ = _check_ridge(X, values, values, REGRESSION, "regression", seed=9)
    assert got["diagnostics"]["measure"] == "r2"


def test_ridge_notes_a_choice_at_the_end_of_the_grid():
    X, y = _classes(200, 8, 2, seed=1)
    got = RidgeProbeMetric(alphas=(1e6, 1e7))(X, _labels(y), target_metadata=SINGLE, seed=0)
    assert any("end of the grid" in note for note in got["warnings"])


# ----------------------------------------------------------------------------------------- ridge, GCV
def _gcv_reference(X, y, target_type: str, seed: int, alphas=ALPHAS, groups=None):
    """GCV from its definition, per fold of the documented folds: scikit-learn's ``Ridge`` fitted on the scaled
    training rows for each alpha gives the residuals; the hat matrix ``1/n + Xc (Xc^T Xc + alpha I)^-1 Xc^T`` is
    built explicitly for its trace; the alpha of least ``|Y - fitted|^2 / (n k (1 - tr/n)^2)`` is refitted as
    ``RidgeClassifier`` (``Ridge`` for regression) and scores the test fold."""
    from sklearn.linear_model import Ridge, RidgeClassifier
    from sklearn.metrics import balanced_accuracy_score, f1_score, r2_score
    from sklearn.preprocessing import LabelBinarizer

    sparse_input = sparse.issparse(X)
    codes = None if groups is None else np.unique(_labels(groups), return_inverse=True)[1]
    chosen, scores = [], []
    for train, test in _folds(target_type, seed, groups is not None).split(X, y, codes):
        scaler = StandardScaler(with_mean=not sparse_input).fit(X[train])
        Xs, Ts = scaler.transform(X[train]), scaler.transform(X[test])
        dense = Xs.toarray() if sparse_input else Xs
        centered = dense - dense.mean(axis=0)
        n = centered.shape[0]
        if target_type == "single_label":
            Y = LabelBinarizer(neg_label=-1).fit_transform(y[train]).astype(float)
        else:
            Y = (2.0 * y[train] - 1.0) if target_type == "multi_label" else y[train].astype(float)
        Y = Y.reshape(n, -1)
        criteria = []
        for alpha in alphas:
            fitted = Ridge(alpha=alpha, solver="svd" if not sparse_input else "auto", tol=1e-12).fit(Xs, Y).predict(Xs)
            hat = centered @ np.linalg.solve(centered.T @ centered + alpha * np.eye(centered.shape[1]), centered.T)
            slack = 1.0 - (1.0 + np.trace(hat)) / n
            rss = np.square(Y - fitted.reshape(n, -1)).sum()
            criteria.append(rss / (n * Y.shape[1] * slack**2) if slack > 0 else np.inf)
        best = alphas[int(np.argmin(criteria))]
        chosen.append(best)
        if target_type == "regression":
            scores.append(r2_score(y[test], Ridge(alpha=best, solver="svd").fit(Xs, y[train]).predict(Ts)))
            continue
        predicted = RidgeClassifier(alpha=best, solver="svd" if not sparse_input else "auto", tol=1e-12).fit(
            Xs, y[train]).predict(Ts)
        scores.append(balanced_accuracy_score(y[test], predicted) if target_type == "single_label"
                      else f1_score(y[test], predicted, average="macro", zero_division=0))
    return chosen, scores


def _check_gcv(X, y, labels, meta, target_type, seed=0, alphas=ALPHAS, groups=None):
    got = RidgeProbeMetric(alphas=alphas, selection="gcv")(
        X, labels, target_metadata=meta, seed=seed, groups=None if groups is None else _labels(groups))
    chosen, scores = _gcv_reference(X, y, target_type, seed, alphas, groups)
    assert got["diagnostics"]["chosen_alphas"] == chosen
    np.testing.assert_allclose(got["diagnostics"]["fold_scores"], scores, rtol=0, atol=1e-9)
    assert got["metadata"]["selection"].startswith("generalized cross-validation")
    return got


@pytest.mark.parametrize("n_classes", [2, 5])
def test_ridge_gcv_equals_gcv_from_its_definition(n_classes):
    X, y = _classes(400, 24, n_classes, seed=n_classes)
    got = _check_gcv(X, y, _labels(y), SINGLE, "single_label", seed=7)
    assert all(ALPHAS[0] < a < ALPHAS[-1] for a in got["diagnostics"]["chosen_alphas"])  # an informative choice
    assert got["metadata"]["decomposition"] == "features (D x D)"


def test_ridge_gcv_near_interpolation_on_the_row_side():
    """90 rows of 200 columns: as alpha -> 0 the fit interpolates the training rows and GCV's numerator and
    denominator both vanish; its limit is finite, and the residual must be computed without cancellation (|Y|^2
    less the explained part was all rounding at alpha = 1e-9 and picked it in 4 of 5 folds)."""
    X, y = _classes(90, 200, 3, seed=4)
    got = _check_gcv(X, y, _labels(y), SINGLE, "single_label", seed=1, alphas=(1e-9, 1e-3, *ALPHAS))
    assert got["metadata"]["decomposition"] == "rows (n x n)"


@pytest.mark.parametrize("shape", [(300, 40), (60, 150)])
def test_ridge_gcv_sparse_input(shape):
    dense, y = _sparse_counts(shape)
    _check_gcv(sparse.csr_matrix(dense), y, _labels(y), SINGLE, "single_label", seed=3)


def test_ridge_gcv_groups_multi_label_and_regression():
    X, y = _classes(240, 12, 3, seed=8)
    got = _check_gcv(X, y, _labels(y), SINGLE, "single_label", seed=5, groups=np.arange(y.size) % 12)
    assert got["metadata"]["folds"] == "GroupKFold"
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 15))
    indicator = (X[:, :4] + rng.normal(0, 1.0, (300, 4)) > 0.3).astype(int)
    _check_gcv(X, indicator, sparse.csr_matrix(indicator), {**MULTI, "label_names": list("abcd")}, "multi_label", 4)
    X = rng.normal(size=(250, 10)) * rng.uniform(0.5, 5, 10)
    values = X @ rng.normal(size=(10, 3)) + rng.normal(0, 3.0, (250, 3))
    _check_gcv(X, values, values, REGRESSION, "regression", seed=9)


def test_ridge_gcv_and_leave_one_out_differ_only_in_the_choice():
    """Given the same alpha (a one-value grid) both selections fit the same ridge: identical fold scores."""
    X, y = _classes(300, 20, 4, seed=3)
    loo, gcv = (RidgeProbeMetric(alphas=(30.0,), selection=s)(X, _labels(y), target_metadata=SINGLE, seed=1)
                for s in ("loo", "gcv"))
    assert loo["diagnostics"]["fold_scores"] == gcv["diagnostics"]["fold_scores"]
    with pytest.raises(ConfigError, match=r"RidgeProbeMetric.selection must be one of \['loo', 'gcv'\], got 'cv'"):
        RidgeProbeMetric(selection="cv")


@pytest.mark.parametrize("cells", [5, 30])
def test_ridge_gram_cells_smaller_than_a_test_fold_change_no_result(monkeypatch, cells):
    """Dense folds sum their Gram matrices from ``CELLS_PER_FOLD`` cells of each test fold's rows (a fixed cut, so
    the thread count moves no byte); with 5 cells of about 5 rows, or 30 cells of one row or none (a test fold
    holds about 25 rows), both selections still equal their references and 1 or 3 workers give the same bytes."""
    import json

    from vertebrae.scoring import ridge_probe

    monkeypatch.setattr(ridge_probe, "CELLS_PER_FOLD", cells)
    X, y = _classes(123, 10, 3, seed=12)
    _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=4)
    _check_gcv(X, y, _labels(y), SINGLE, "single_label", seed=4)
    for selection in ("loo", "gcv"):
        assert len({json.dumps(RidgeProbeMetric(selection=selection, n_jobs=jobs)(X, _labels(y), seed=4),
                               sort_keys=True) for jobs in (1, 3)}) == 1


# ------------------------------------------------------------------------------------------------ LDA
def _check_lda(X, y, seed=0, groups=None):
    got = LDAProbeMetric()(X, _labels(y), target_metadata=SINGLE, seed=seed,
                           groups=None if groups is None else _labels(groups))
    ref = _reference(LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"), X, y, "single_label", seed, groups)
    np.testing.assert_allclose(got["diagnostics"]["fold_scores"], ref["test_score"], rtol=0, atol=1e-12)
    return got, ref


@pytest.mark.parametrize("shape", [(400, 20, 2), (400, 20, 6), (80, 150, 4)])
def test_lda_equals_shrinkage_lda(shape):
    n, dim, n_classes = shape
    X, y = _classes(n, dim, n_classes, seed=dim + n_classes)
    got, ref = _check_lda(X, y, seed=6)
    assert all(0 < s <= 1 for fold in got["diagnostics"]["shrinkage"] for s in fold)
    # the discriminants themselves, on the first training fold
    splits = list(_folds("single_label", 6).split(X, y))
    fit = fold_discriminants(X, y, splits, 1)[0]
    classes, coef, intercept = fit.classes, fit.coef, fit.intercept
    expected_coef, expected_intercept = ref["estimator"][0][-1].coef_, ref["estimator"][0][-1].intercept_
    if n_classes == 2:  # scikit-learn keeps the difference of the two discriminants
        coef, intercept = coef[1:] - coef[:1], intercept[1:] - intercept[:1]
    np.testing.assert_allclose(coef, expected_coef, rtol=1e-9, atol=1e-9 * np.abs(expected_coef).max())
    np.testing.assert_allclose(intercept, expected_intercept, rtol=1e-9, atol=1e-9)
    assert classes.tolist() == list(range(n_classes))


def test_lda_with_a_singular_covariance_takes_the_least_squares_solution():
    X, y = _classes(90, 1, 3, seed=2)
    X[:] = 4.0  # one constant column: no shrinkage, a zero covariance
    got, _ = _check_lda(X, y, seed=0)
    assert got["diagnostics"]["shrinkage"][0] == [0.0, 0.0, 0.0]


def test_lda_with_groups_uses_group_folds():
    X, y = _classes(240, 12, 3, seed=3)
    got, _ = _check_lda(X, y, seed=1, groups=np.arange(y.size) % 10)
    assert got["metadata"]["folds"] == "GroupKFold"
    groups = np.arange(y.size) % 6
    groups[y == 2] = 0  # class 2 in one group: the fold testing it trains on two classes and still predicts its rows
    got, _ = _check_lda(X, y, seed=1, groups=groups)
    assert sorted(len(shrinkages) for shrinkages in got["diagnostics"]["shrinkage"]) == [2, 3, 3, 3, 3]


# ------------------------------------------------------------------------------------- a class of one row
def test_a_class_of_one_row_is_scored_or_refused_as_the_linear_probe_does():
    """The closed-form probes share LinearProbeMetric's fold checks: a class of one row beside two other classes is
    scored (equal to scikit-learn on the same folds) with the same note; beside one class it is refused up front."""
    y = np.repeat([0, 1, 2], [20, 20, 1])
    X, _ = _classes(41, 4, 1, seed=5)
    X += y[:, None]
    note = ("class(es) [2] have one row each, so the probe tested on such a row was trained without its class and "
            "cannot predict it")
    got, _ = _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=1)
    assert note in got["warnings"]
    got, _ = _check_lda(X, y, seed=1)
    assert note in got["warnings"]
    for metric in (RidgeProbeMetric(), LDAProbeMetric()):
        with pytest.raises(MetricError, match=rf"^metric '{metric.name}': class\(es\) 1 \(1 row\(s\)\) sit in one "
                                              r"test fold, so its training fold holds class 0 alone"):
            metric(X[:21], _labels(y[:21]), target_metadata=SINGLE, seed=0)


# ------------------------------------------------------------------------------------------ rejections
def test_lda_rejects_other_target_types_and_sparse_input_naming_the_fix():
    X, y = _classes(60, 5, 2, seed=0)
    with pytest.raises(MetricError, match="single-label targets only.*RidgeProbeMetric"):
        LDAProbeMetric()(X, y.astype(float), target_metadata=REGRESSION)
    with pytest.raises(MetricError, match="supports \\['single_label'\\] targets.*remove it"):
        check_metric(LDAProbeMetric(), "metrics[0]", "multi_label")
    with pytest.raises(MetricError, match="dense embeddings.*RidgeProbeMetric"):
        LDAProbeMetric()(sparse.csr_matrix(X), _labels(y), target_metadata=SINGLE)


# ------------------------------------------------------------------------------- StandardScaler's constant rule
def _near_constant_columns(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns StandardScaler keeps at scale 1: a constant that no float sum hits exactly (0.1) and a large offset
    whose rows differ by one rounding step; a probe that judged them on centered rows alone scaled them by 1e8."""
    X, y = _classes(300, 8, 3, seed=seed)
    rng = np.random.default_rng(seed)
    X[:, 0] = 0.1
    X[:, 1] = np.where(rng.random(y.size) < 0.5, 1e8, np.nextafter(1e8, np.inf))
    return X, y


def test_closed_form_probes_keep_standard_scalers_constant_columns():
    X, y = _near_constant_columns(seed=3)
    _check_ridge(X, y, _labels(y), SINGLE, "single_label", seed=0)
    X[:, 1] = X[:, 2]  # LDA: only the exact constant (a rounding-level spread amplified by 1e8 is noise on both sides)
    got, ref = _check_lda(X, y, seed=0)
    splits = list(_folds("single_label", 0).split(X, y))
    for fit, estimator in zip(fold_discriminants(X, y, splits, 1), ref["estimator"]):
        np.testing.assert_allclose(fit.coef[:, 1:], estimator[-1].coef_[:, 1:], rtol=1e-9)


def test_sparse_column_statistics_are_standard_scalers():
    """The corrected two-pass variance: ``E[x^2] - E[x]^2`` left rounding noise in a dense constant column of a CSR
    matrix (scale 6.3 for a column of 1e8 and its next float, where StandardScaler keeps 1)."""
    from vertebrae.scoring.standard_scaling import column_statistics

    X, _ = _near_constant_columns(seed=5)
    X[:, 3:] = np.where(np.random.default_rng(5).random((X.shape[0], X.shape[1] - 3)) < 0.6, 0.0, X[:, 3:])
    matrix = sparse.csr_matrix(X)
    reference = StandardScaler(with_mean=False).fit(matrix)
    mean, scale, var = column_statistics(matrix, sparse_input=True)
    np.testing.assert_allclose(mean, reference.mean_, rtol=1e-15)
    np.testing.assert_allclose(var, reference.var_, rtol=1e-12, atol=1e-30)
    np.testing.assert_array_equal(scale[:2], [1.0, 1.0])
    np.testing.assert_allclose(scale, reference.scale_, rtol=1e-12)


@pytest.mark.parametrize("alphas, error, match", [
    ((), ConfigError, "non-empty"), ((1.0, 1.0), ConfigError, "distinct"), ((1.0, -2.0), ConfigError, "alphas\\[1\\]"),
    ("1.0", ConfigTypeError, "non-empty list of positive numbers, got '1.0'"), ((1.0, float("nan")), ConfigError, "finite"),
    # a 0-d array failed in Python's iteration ("iteration over a 0-d array"), a 2-D one named a row as a number
    (np.array(10.0), ConfigTypeError, r"alphas must be a non-empty list of positive numbers, got array\(10\.\)"),
    (np.ones((2, 2)), ConfigTypeError, "alphas must be a non-empty list"), ({1.0: 2}, ConfigTypeError, "got \\{1.0: 2\\}")])
def test_ridge_rejects_bad_alphas(alphas, error, match):
    with pytest.raises(error, match=match):
        RidgeProbeMetric(alphas=alphas)
    assert RidgeProbeMetric(alphas=np.array([1, 10])).alphas == (1.0, 10.0)  # a 1-D array is a grid


def test_probes_reject_what_their_folds_cannot_hold_before_fitting():
    X, y = _classes(40, 6, 2, seed=0)
    with pytest.raises(MetricError, match="3 groups cannot make n_splits=5"):
        RidgeProbeMetric()(X, _labels(y), target_metadata=SINGLE, groups=_labels(np.arange(40) % 3))
    with pytest.raises(MetricError, match="max_dense_bytes"):
        RidgeProbeMetric(max_dense_bytes=100)(X, _labels(y), target_metadata=SINGLE)
    with pytest.raises(MetricError, match="LDAProbeMetric.max_dense_bytes"):
        LDAProbeMetric(max_dense_bytes=100)(X, _labels(y), target_metadata=SINGLE)
    with pytest.raises(ConfigError, match="n_splits"):
        LDAProbeMetric(n_splits=1)
    for metric in (RidgeProbeMetric(n_splits=2), LDAProbeMetric(n_splits=2)):  # each group is one class
        with pytest.raises(MetricError, match="training fold holds the single class.*drop the groups"):
            metric(X, _labels(y), target_metadata=SINGLE, groups=_labels(y))


# ------------------------------------------------------------------------------------------- protocol
def test_probes_plug_into_the_metric_protocol():
    ridge = load_metric("vertebrae:RidgeProbeMetric", params={"alphas": [1, 10]})
    assert ridge == RidgeProbeMetric(alphas=(1.0, 10.0)) and ridge.alphas == (1.0, 10.0)
    for metric, target_types in ((ridge, ("single_label", "multi_label", "regression")),
                                 (LDAProbeMetric(), ("single_label",))):
        assert metric.higher_is_better and metric.aggregate_valid and metric.supported_target_types == target_types
        for target_type in target_types:
            check_metric(metric, "metrics[0]", target_type)
    assert ridge.identity() == {"type": "ridge_probe", "version": 4, "n_splits": 5, "alphas": [1.0, 10.0],
                                "selection": "loo", "max_dense_bytes": 2**30, "name": "ridge_probe"}
    assert LDAProbeMetric().identity()["type"] == "lda_probe"
    assert RidgeProbeMetric().reference == "ridge classifier probe"
    assert LDAProbeMetric().reference == "shrinkage LDA probe"


def test_fold_workers_give_identical_bytes_and_move_no_key():
    """``n_jobs`` is speed-only: each fold runs on one BLAS thread (the shared Gram matrix and scatters too), so 1, 2
    or 5 workers give the same bytes; the dense budget counts every fold in flight."""
    import json

    X, y = _classes(300, 40, 4, seed=8)
    labels = np.array([f"vk:int:{c:02d}" for c in y])
    wide = _classes(60, 90, 3, seed=9)  # fewer rows than columns: the ridge's row-space path
    sparse_rows = sparse.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    gcv = functools.partial(RidgeProbeMetric, selection="gcv")
    gcv.__name__ = "RidgeProbeMetric(selection='gcv')"
    cases = [(RidgeProbeMetric, X), (RidgeProbeMetric, sparse_rows), (gcv, X), (gcv, sparse_rows), (LDAProbeMetric, X)]
    for metric, data in cases:
        payloads = {json.dumps(metric(n_jobs=jobs)(data, labels, target_metadata={"target_type": "single_label"},
                                                   seed=2), sort_keys=True) for jobs in (1, 2, 5)}
        assert len(payloads) == 1, (metric.__name__, type(data).__name__)
        assert metric(n_jobs=3).identity() == metric().identity()
        with pytest.raises(ConfigError, match="n_jobs must be >= 1"):
            metric(n_jobs=0)
    wide_labels = np.array([f"vk:int:{c:02d}" for c in wide[1]])
    assert len({json.dumps(RidgeProbeMetric(n_jobs=jobs)(wide[0], wide_labels, seed=1), sort_keys=True)
                for jobs in (1, 3)}) == 1
    with pytest.raises(MetricError, match="max_dense_bytes"):  # 2 folds in flight need twice one fold's matrices
        RidgeProbeMetric(n_jobs=2, max_dense_bytes=3 * 8 * 40 * 40 + 1)(X, labels, seed=2)
    RidgeProbeMetric(n_jobs=1, max_dense_bytes=3 * 8 * 40 * 40 + 1)(X, labels, seed=2)


@pytest.mark.parametrize("metric", [LinearProbeMetric(), RidgeProbeMetric(), LDAProbeMetric()], ids=lambda m: m.name)
def test_embeddings_a_probe_cannot_standardize_are_refused_with_the_fix(metric):
    """At 1e160 the squares overflow (LinearProbe and Ridge failed in LAPACK, "eigenvalues did not converge"), at
    1e80 LDA's fourth powers do (chance), at 1e-160 the squares underflow (every column read as constant: chance).  Inside the range the scale
    does not matter: 1e60 and 1e-140 give the unit-scale score (powers of two would be bitwise; these agree to
    rounding)."""
    X, y = _classes(90, 5, 3, seed=4)
    labels = _labels(y)
    base = metric(X, labels, target_metadata=SINGLE, seed=0)["score"]
    for scale in (1e60, 1e-140):
        assert metric(X * scale, labels, target_metadata=SINGLE, seed=0)["score"] == pytest.approx(base, abs=1e-12)
    for scale in (1e80, 1e-160):
        with pytest.raises(MetricError, match="largest magnitude is .*where squares overflow or underflow float64 "
                                              "and standardizing fails; rescale the embeddings"):
            metric(X * scale, labels, target_metadata=SINGLE, seed=0)

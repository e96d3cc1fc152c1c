"""The exact probe solver against scikit-learn converged to tol=1e-10, fold by fold and as the whole metric.

Reference: ``StandardScaler`` then ``LogisticRegression(tol=1e-10, max_iter=100_000)`` (``OneVsRestClassifier`` of it
for multi-label, ``Ridge`` for regression) on the same training fold.  Coefficients must agree to 1e-4 relative and
every prediction must be equal, except where the reference's own decision margin is below 1e-6.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, StratifiedKFold, cross_val_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vertebrae import ConfigError, ConfigTypeError, LinearProbeMetric, MetricError
from vertebrae.scoring.linear_probe import repeat_seed
from vertebrae.scoring.probe_solver import Backend, fit_fold, fit_logistic, fold_basis, path_start, path_warm

SINGLE = {"target_type": "single_label"}
MULTI = {"target_type": "multi_label"}
REGRESSION = {"target_type": "regression"}


def _tight() -> LogisticRegression:
    return LogisticRegression(tol=1e-10, max_iter=100_000)


def _labels(y) -> np.ndarray:
    return np.array([f"vk:int:{c:02d}" for c in y])


def _classes(n: int, d: int, k: int, seed: int, spread: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    return rng.normal(0.0, spread, (k, d))[y] + rng.normal(size=(n, d)), y


def _heavy_spectrum(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features with a MiniLM-like heavy spectrum: singular values ~ j^-1.5, mixed by a random rotation so that
    per-column standardization does not undo it, plus a few large-mean columns."""
    X, y = _classes(n, d, k, seed, spread=0.4)
    rng = np.random.default_rng(seed + 1)
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    X = (X * np.arange(1, d + 1) ** -1.5) @ rotation
    X[:, :3] += 40.0
    return X, y


def _compare(ours, reference, X_test, standardized_test, multinomial: bool) -> int:
    """Assert coefficients (standardized space) within 1e-4 relative and predictions equal up to near ties;
    returns how many predictions were excused as near ties."""
    scaler = reference.steps[0][1] if hasattr(reference, "steps") else None
    model = reference.steps[-1][1]
    coef_ours = ours.coef * scaler.scale_[:, None]
    intercept_ours = ours.intercept + scaler.mean_ @ ours.coef if scaler.with_mean else ours.intercept
    if isinstance(model, OneVsRestClassifier):
        coef_ref = np.stack([e.coef_[0] for e in model.estimators_], axis=1)
        intercept_ref = np.array([e.intercept_[0] for e in model.estimators_])
        margins = np.abs(np.stack([e.decision_function(standardized_test) for e in model.estimators_], axis=1))
    elif isinstance(model, Ridge):
        coef_ref, intercept_ref, margins = np.atleast_2d(model.coef_).T, np.atleast_1d(model.intercept_), None
    else:
        coef_ref, intercept_ref = model.coef_.T, model.intercept_
        decision = model.decision_function(standardized_test)
        if decision.ndim == 1:
            margins = np.abs(decision)
        else:
            top2 = np.sort(decision, axis=1)[:, -2:]
            margins = top2[:, 1] - top2[:, 0]
    if multinomial:  # the softmax is blind to a common intercept shift
        intercept_ours, intercept_ref = intercept_ours - intercept_ours.mean(), intercept_ref - intercept_ref.mean()
    assert np.linalg.norm(coef_ours - coef_ref) <= 1e-4 * np.linalg.norm(coef_ref)
    assert np.linalg.norm(intercept_ours - intercept_ref) <= 1e-4 * max(np.linalg.norm(intercept_ref), 1.0)
    predicted = ours.predict(X_test)[0]
    expected = reference.predict(X_test)
    if isinstance(model, Ridge):
        np.testing.assert_allclose(predicted.reshape(expected.shape), expected, rtol=1e-8, atol=1e-8)
        return 0
    differ = predicted.reshape(expected.shape) != expected
    near = margins.reshape(differ.shape) < 1e-6
    assert not (differ & ~near).any()
    return int(near.sum())


def _fold_cases():
    binary = _classes(200, 10, 2, seed=1)
    three = _classes(300, 12, 3, seed=2)
    twenty = _classes(1000, 16, 20, seed=3, spread=1.0)
    wide = _classes(60, 300, 3, seed=4)
    constant = _classes(150, 8, 3, seed=5)
    constant[0][:, 2] = 3.25
    heavy = _heavy_spectrum(400, 60, 3, seed=6)
    return {"binary": binary, "3-class": three, "20-class": twenty, "60x300": wide, "constant column": constant,
            "heavy spectrum": heavy}


@pytest.mark.parametrize("case", list(_fold_cases()))
def test_single_label_folds_equal_tightly_converged_logistic_regression(case):
    X, y = _fold_cases()[case]
    train, test = next(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    ours = fit_fold(fold_basis(X[train], Backend(), False), y[train], "single_label", C=1.0, alpha=1.0,
                    max_iter=1000)
    assert all(fit.converged for fit in ours.fits)
    reference = make_pipeline(StandardScaler(), _tight()).fit(X[train], y[train])
    _compare(ours, reference, X[test], reference[0].transform(X[test]), multinomial=len(np.unique(y)) > 2)


def test_multi_label_regression_and_sparse_folds_equal_their_references():
    X, y = _classes(240, 10, 4, seed=7)
    indicator = np.stack([y == 0, y >= 2, y % 2 == 1, np.zeros_like(y, bool)], axis=1).astype(np.int8)
    train, test = next(KFold(5, shuffle=True, random_state=1).split(X))
    basis = fold_basis(X[train], Backend(), False)
    ours = fit_fold(basis, indicator[train, :3], "multi_label", C=0.3, alpha=1.0, max_iter=1000)
    reference = make_pipeline(StandardScaler(), OneVsRestClassifier(LogisticRegression(C=0.3, tol=1e-10,
                                                                                        max_iter=100_000)))
    reference.fit(X[train], indicator[train, :3])
    _compare(ours, reference, X[test], reference[0].transform(X[test]), multinomial=False)
    # a label that never occurs in the training fold is predicted constant, as OneVsRestClassifier does
    constant = fit_fold(basis, indicator[train], "multi_label", C=0.3, alpha=1.0, max_iter=1000)
    assert (constant.predict(X[test])[0][:, 3] == 0).all()

    values = np.stack([X[:, 0] * 3 + X[:, 2], X[:, 1] - X[:, 4] ** 2], axis=1)
    ridge = fit_fold(basis, values[train], "regression", C=1.0, alpha=2.5, max_iter=1000)
    reference = make_pipeline(StandardScaler(), Ridge(alpha=2.5)).fit(X[train], values[train])
    _compare(ridge, reference, X[test], reference[0].transform(X[test]), multinomial=False)

    Xs = sparse.csr_matrix(np.where(X > 0.7, X, 0.0))
    for target_type, targets, model in [("single_label", y, _tight()),
                                        ("regression", values, Ridge(alpha=2.5, solver="sparse_cg", tol=1e-12))]:
        ours = fit_fold(fold_basis(Xs[train], Backend(), True), targets[train], target_type, C=1.0, alpha=2.5,
                        max_iter=1000)
        reference = make_pipeline(StandardScaler(with_mean=False), model).fit(Xs[train], targets[train])
        _compare(ours, reference, Xs[test], reference[0].transform(Xs[test]), multinomial=target_type != "regression")


def test_torch_backend_runs_the_same_solver():
    """The torch path (what device="cuda" runs) on the CPU reaches scikit-learn's optimum: StandardScaler then
    LogisticRegression(tol=1e-10) on the same rows (coefficients within 1e-4 relative, predictions equal up to near
    ties), dense and sparse; it also agrees with the numpy backend to 1e-6."""
    pytest.importorskip("torch")
    X, y = _classes(300, 12, 3, seed=2)
    Xs = sparse.csr_matrix(np.where(X > 0.5, X, 0.0))
    for matrix, is_sparse in ((X, False), (Xs, True)):
        bases = [fold_basis(matrix, backend, is_sparse) for backend in (Backend(), Backend("torch", "cpu"))]
        fits = [fit_fold(basis, y, "single_label", C=1.0, alpha=1.0, max_iter=1000) for basis in bases]
        reference = make_pipeline(StandardScaler(with_mean=not is_sparse), _tight()).fit(matrix, y)
        _compare(fits[1], reference, matrix, reference[0].transform(matrix), multinomial=True)
        np.testing.assert_allclose(fits[1].coef, fits[0].coef, rtol=1e-6, atol=1e-8)
        np.testing.assert_array_equal(fits[1].predict(matrix)[0], fits[0].predict(matrix)[0])
        # the path start C="auto" predicts for the next C, on torch too
        starts = [path_warm(basis, fit, y, 1.0, 10.0) for basis, fit in zip(bases, fits)]
        np.testing.assert_allclose(starts[1][1].numpy(), starts[0][1], rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------------------------- whole metric
def _reference_scores(model, X, y, cv, scoring, groups=None) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cross_val_score(model, X, y, groups=groups, cv=cv, scoring=scoring).tolist()


def test_metric_fold_scores_equal_cross_val_score_of_the_converged_pipeline():
    X, y = _heavy_spectrum(300, 40, 3, seed=8)
    payload = LinearProbeMetric()(X, _labels(y), target_metadata=SINGLE, seed=4)
    expected = _reference_scores(make_pipeline(StandardScaler(), _tight()), X, y,
                                 StratifiedKFold(5, shuffle=True, random_state=4), "balanced_accuracy")
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-12)
    assert payload["diagnostics"]["unconverged_fits"] == 0 and payload["diagnostics"]["near_ties"] == 0
    assert payload["diagnostics"]["max_gradient_ratio"] <= 1e-10
    assert payload["metadata"]["fold_test_sizes"] == [60] * 5 and payload["metadata"]["fold_train_sizes"] == [240] * 5

    groups = np.arange(len(X)) % 7
    payload = LinearProbeMetric(C=0.5)(X, _labels(y), target_metadata=SINGLE, groups=_labels(groups), seed=3)
    expected = _reference_scores(make_pipeline(StandardScaler(), LogisticRegression(C=0.5, tol=1e-10,
                                                                                    max_iter=100_000)),
                                 X, y, GroupKFold(5, shuffle=True, random_state=3), "balanced_accuracy", groups)
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-12)
    assert payload["metadata"]["folds"] == "GroupKFold"

    indicator = np.stack([y == 0, y >= 1, X[:, 0] > 0], axis=1).astype(np.int8)
    payload = LinearProbeMetric()(X, sparse.csr_matrix(indicator), target_metadata=MULTI, seed=2)
    expected = _reference_scores(make_pipeline(StandardScaler(), OneVsRestClassifier(_tight())), X, indicator,
                                 KFold(5, shuffle=True, random_state=2), "f1_macro")
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-12)

    Xs = sparse.csr_matrix(np.where(np.abs(X - X.mean(0)) > 0.01, X, 0.0))
    payload = LinearProbeMetric()(Xs, _labels(y), target_metadata=SINGLE, seed=0)
    expected = _reference_scores(make_pipeline(StandardScaler(with_mean=False), _tight()), Xs, y,
                                 StratifiedKFold(5, shuffle=True, random_state=0), "balanced_accuracy")
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-12)


ONE_ROW_NOTE = ("class(es) [2] have one row each, so the probe tested on such a row was trained without its class and "
                "cannot predict it")


def test_a_class_of_one_row_scores_as_cross_val_score_does_or_is_refused_before_any_fit():
    """A class of one row sits in one test fold, so the training fold beside it lacks the class.  With two other
    classes every training fold still holds two: scikit-learn scores it, and so does the probe, with a note.  With
    one other class that training fold holds a single class: cross_val_score fails on it mid-run, the probe refuses
    it up front (its preflight too), naming the class, its rows and the fix, with a fixed C and with C="auto"."""
    y = np.repeat([0, 1, 2], [20, 20, 1])
    X = np.random.default_rng(3).normal(size=(y.size, 4)) + y[:, None]
    payload = LinearProbeMetric()(X, _labels(y), target_metadata=SINGLE, seed=1)
    expected = _reference_scores(make_pipeline(StandardScaler(), _tight()), X, y,
                                 StratifiedKFold(5, shuffle=True, random_state=1), "balanced_accuracy")
    assert payload["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-12)
    assert ONE_ROW_NOTE in payload["warnings"]

    X, y = X[:21], y[:21]  # class 0 (20 rows) and class 1 (1 row)
    with pytest.raises(ValueError, match="only one class"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cross_val_score(make_pipeline(StandardScaler(), LogisticRegression()), X, y,
                        cv=StratifiedKFold(5, shuffle=True, random_state=0), error_score="raise")
    refusal = (r"^metric 'linear_probe': class\(es\) 1 \(1 row\(s\)\) sit in one test fold, so its training fold "
               r"holds class 0 alone, and a probe needs two classes to train; drop those classes' rows or add rows to "
               r"them")
    for metric in (LinearProbeMetric(), LinearProbeMetric(n_splits=2), LinearProbeMetric(C="auto")):
        with pytest.raises(MetricError, match=refusal):
            metric(X, _labels(y), target_metadata=SINGLE, seed=0)
        with pytest.raises(MetricError, match=refusal):
            metric.preflight(_labels(y), target_metadata=SINGLE)


def test_repeats_keep_the_first_repeat_and_reshuffle_the_rest():
    X, y = _classes(150, 6, 3, seed=9)
    once = LinearProbeMetric(n_splits=3)(X, _labels(y), target_metadata=SINGLE, seed=5)
    twice = LinearProbeMetric(n_splits=3, n_repeats=2)(X, _labels(y), target_metadata=SINGLE, seed=5)
    scores = twice["diagnostics"]["fold_scores"]
    assert len(scores) == 6 and scores[:3] == once["diagnostics"]["fold_scores"]
    assert twice["metadata"]["n_repeats"] == 2 and twice["metadata"]["n_splits"] == 3
    assert len(twice["metadata"]["fold_test_sizes"]) == 6 and sum(twice["metadata"]["fold_test_sizes"]) == 300
    reshuffled = int(np.random.SeedSequence([5, 1]).generate_state(1)[0])  # docs/metrics.md: repeat r's fold seed
    assert repeat_seed(5, 1) == reshuffled != 5
    second = _reference_scores(make_pipeline(StandardScaler(), _tight()), X, y,
                               StratifiedKFold(3, shuffle=True, random_state=reshuffled), "balanced_accuracy")
    assert scores[3:] == pytest.approx(second, abs=1e-12)
    assert second != once["diagnostics"]["fold_scores"]  # the second repeat really is other folds


@pytest.mark.parametrize("k", [2, 4])
def test_path_start_follows_the_tangent_of_the_regularization_path(k):
    """The start C="auto" predicts for the next C is the optimum moved along d theta / d log C, checked against a
    finite difference of two tightly converged optima (measured 0.3% off; the tangent solve stops at 1%), and it
    lands closer to the next optimum than the previous optimum itself does (measured 0.48 vs 0.96, 0.59 vs 0.79)."""
    X, y = _classes(300, 12, k, seed=20 + k, spread=0.5)
    basis = fold_basis(X, Backend(), False)
    kind, Y = ("sigmoid", (y == 1).astype(float)[:, None]) if k == 2 else ("softmax", np.eye(k)[y])
    C, h = 1.0, 1e-4
    here = fit_logistic(basis, Y, kind, C, tol=1e-13).theta
    nearby = fit_logistic(basis, Y, kind, C * np.exp(h), tol=1e-13).theta
    tangent = path_start(basis, Y, kind, C, here, C * np.e) - here  # a step of 1 in log C: the tangent itself
    finite_difference = (nearby - here) / h
    assert np.linalg.norm(tangent - finite_difference) <= 0.02 * np.linalg.norm(finite_difference)
    far = fit_logistic(basis, Y, kind, 10 * C, tol=1e-13)
    start = path_start(basis, Y, kind, C, here, 10 * C)
    assert np.linalg.norm(start - far.theta) < 0.8 * np.linalg.norm(here - far.theta)
    from_start = fit_logistic(basis, Y, kind, 10 * C, theta0=start)
    from_previous = fit_logistic(basis, Y, kind, 10 * C, theta0=here)
    assert from_start.converged and from_start.newton_iterations <= from_previous.newton_iterations
    assert np.abs(from_start.theta - far.theta).max() <= 1e-6 * np.abs(far.theta).max()


def test_auto_C_equals_grid_search_on_the_same_inner_folds():
    X, y = _classes(180, 8, 3, seed=10, spread=0.35)
    grid = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    payload = LinearProbeMetric(n_splits=3, C="auto", C_grid=grid)(X, _labels(y), target_metadata=SINGLE, seed=1)
    chosen = payload["diagnostics"]["chosen_C"]
    expected = []
    for train, _ in StratifiedKFold(3, shuffle=True, random_state=1).split(X, y):
        search = GridSearchCV(make_pipeline(StandardScaler(), _tight()), {"logisticregression__C": list(grid)},
                              cv=StratifiedKFold(3, shuffle=True, random_state=1), scoring="balanced_accuracy",
                              refit=False).fit(X[train], y[train])
        expected.append(search.best_params_["logisticregression__C"])
    assert chosen == expected
    assert len(set(expected)) >= 2  # C is searched per outer fold: here the folds choose differently
    assert payload["metadata"]["C"] == "auto"
    fixed = [LinearProbeMetric(n_splits=3, C=c)(X, _labels(y), target_metadata=SINGLE, seed=1) for c in set(chosen)]
    assert all(p["diagnostics"]["unconverged_fits"] == 0 for p in fixed)


def test_search_stops_after_patience_values_below_the_best_before_them():
    from vertebrae.scoring.probe_solver import search_stopped

    assert search_stopped([0.5, 0.6, 0.55], 1) and not search_stopped([0.5, 0.6, 0.55], 2)
    assert search_stopped([0.5, 0.6, 0.55, 0.58], 2)   # both below 0.6
    assert not search_stopped([0.5, 0.6, 0.6], 1)       # a tie is not a decline
    assert not search_stopped([0.5, 0.6, 0.55, 0.61], 1)  # a new best
    assert not search_stopped([0.6, 0.5], 2) and not search_stopped([0.6, 0.5], None)


def test_C_patience_searches_a_prefix_of_the_grid_and_chooses_its_best(monkeypatch):
    """The search is sequential, so a patient one sees exactly the first values of the whole-grid search (the same
    inner scores, bit for bit) and chooses the best of them; here the whole-grid choice lies inside that prefix.  A
    path's tangent is computed only when the path goes on: one per inner fold and value fitted after the first."""
    from vertebrae.scoring import probe_solver
    from vertebrae.scoring.probe_solver import search_stopped

    tangents: list[float] = []  # a spy on the real function (it still runs), counting the next values asked for

    def counted(basis, Y, kind, C, theta, next_C):
        tangents.append(next_C)
        return path_start(basis, Y, kind, C, theta, next_C)

    X, y = _classes(240, 10, 3, seed=12, spread=0.35)
    grid = tuple(10.0 ** k for k in range(-4, 4))
    whole = LinearProbeMetric(n_splits=3, C="auto", C_grid=grid)(X, _labels(y), target_metadata=SINGLE, seed=2)
    monkeypatch.setattr(probe_solver, "path_start", counted)
    for patience in (1, 2):
        tangents.clear()
        short = LinearProbeMetric(n_splits=3, C="auto", C_grid=grid, C_patience=patience, n_jobs=1)(
            X, _labels(y), target_metadata=SINGLE, seed=2)
        fitted = [len(prefix) for prefix in short["diagnostics"]["inner_scores"]]
        assert sorted(tangents) == sorted(c for n in fitted for c in grid[1:n] for _ in range(3))  # 3 inner folds
        for curve, prefix, chosen in zip(whole["diagnostics"]["inner_scores"], short["diagnostics"]["inner_scores"],
                                         short["diagnostics"]["chosen_C"]):
            assert len(curve) == len(grid) and len(prefix) < len(grid)
            assert prefix == curve[:len(prefix)]
            assert search_stopped(prefix, patience) and not search_stopped(prefix[:-1], patience)
            assert chosen == grid[int(np.argmax(prefix))]
        assert short["diagnostics"]["chosen_C"] == whole["diagnostics"]["chosen_C"]
        assert short["score"] == whole["score"]


def test_config_and_device_are_validated_and_keyed():
    with pytest.raises(ConfigError, match="C_grid must be strictly increasing"):
        LinearProbeMetric(C="auto", C_grid=(1.0, 0.1))
    for grid in (np.array(1.0), 5, "1.0", np.ones((2, 2))):  # a 0-d array failed in len() ("unsized object")
        with pytest.raises(ConfigTypeError, match="C_grid must be a non-empty list of positive numbers, got "):
            LinearProbeMetric(C="auto", C_grid=grid)
    with pytest.raises(ConfigError, match=r"C_grid\[1\] must be in \(0.0, inf\], got -1.0"):
        LinearProbeMetric(C="auto", C_grid=[0.1, -1])
    with pytest.raises(ConfigError, match="C must be"):
        LinearProbeMetric(C="best")
    with pytest.raises(ConfigError, match="device must be 'cpu' or 'cuda'"):
        LinearProbeMetric(device="tpu")
    with pytest.raises(ConfigError, match="n_repeats must be >= 1"):
        LinearProbeMetric(n_repeats=0)
    with pytest.raises(ConfigError, match="C_patience must be >= 1"):
        LinearProbeMetric(C="auto", C_patience=0)
    identities = {repr(LinearProbeMetric(**kw).identity()) for kw in
                  ({}, {"C": "auto"}, {"C": "auto", "C_grid": (0.1, 1.0)}, {"n_repeats": 2}, {"device": "cuda"},
                   {"C": "auto", "C_patience": 2})}
    assert len(identities) == 6
    assert LinearProbeMetric.from_dict(LinearProbeMetric(C="auto").to_dict()) == LinearProbeMetric(C="auto")


def test_device_cuda_matches_cpu():
    torch = pytest.importorskip("torch")
    X, y = _heavy_spectrum(400, 48, 4, seed=11)
    if not torch.cuda.is_available():
        with pytest.raises(MetricError, match="torch sees no CUDA device"):
            LinearProbeMetric(device="cuda")(X, _labels(y), target_metadata=SINGLE, seed=0)
        pytest.skip("no CUDA device on this machine: device='cuda' is checked only for its clear error here")
    cpu = LinearProbeMetric()(X, _labels(y), target_metadata=SINGLE, seed=0)
    gpu = LinearProbeMetric(device="cuda")(X, _labels(y), target_metadata=SINGLE, seed=0)
    assert gpu["diagnostics"]["fold_scores"] == pytest.approx(cpu["diagnostics"]["fold_scores"], abs=1e-4)
    assert gpu["score"] == pytest.approx(cpu["score"], abs=1e-4)
    # and against the independent reference: scikit-learn converged to tol=1e-10 on the documented folds
    expected = _reference_scores(make_pipeline(StandardScaler(), _tight()), X, y,
                                 StratifiedKFold(5, shuffle=True, random_state=0), "balanced_accuracy")
    assert gpu["diagnostics"]["fold_scores"] == pytest.approx(expected, abs=1e-4)


def test_fold_workers_give_identical_bytes_and_move_no_key():
    """``n_jobs`` is speed-only: each fold runs on one BLAS thread, so 1, 2 or 5 workers give the same bytes."""
    import json

    X, y = _heavy_spectrum(300, 40, 3, seed=4)
    multi = np.random.default_rng(2).integers(0, 2, (300, 3))
    cases = [(X, _labels(y), {"target_type": "single_label"}, {}),
             (X, _labels(y), {"target_type": "single_label"}, {"C": "auto", "C_grid": (0.1, 1.0)}),
             (X, multi, {"target_type": "multi_label"}, {"n_repeats": 2})]
    for data, labels, meta, settings in cases:
        payloads = {json.dumps(LinearProbeMetric(n_jobs=jobs, **settings)(data, labels, target_metadata=meta, seed=3),
                               sort_keys=True) for jobs in (1, 2, 5)}
        assert len(payloads) == 1, settings
    assert LinearProbeMetric(n_jobs=4).identity() == LinearProbeMetric().identity()
    assert LinearProbeMetric(n_jobs=3).fold_workers(5) == 3 and LinearProbeMetric(device="cuda").fold_workers(5) == 1
    with pytest.raises(ConfigError, match="n_jobs must be >= 1"):
        LinearProbeMetric(n_jobs=0)

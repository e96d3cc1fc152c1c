"""Every built-in metric, called on its own, refuses embeddings, labels and seeds it cannot take before any work,
naming itself, the argument and the fix (vertebrae/scoring/metric_embeddings.py, metric_targets.py and
LinearProbeMetric.folds, whose folds the closed-form probes share).

Before the shared check, a 1-D or 3-D array, strings or NaN failed inside NumPy, scikit-learn or LAPACK ("not enough
values to unpack", "Eigenvalues did not converge", "Input contains NaN"), and ``LDAProbeMetric`` on dense NaN and
``LinearProbeMetric`` on sparse NaN returned a score.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from vertebrae import (InputTypeError, InputValidationError, KNNMetric, LabelRetrievalMetric, LDAProbeMetric, MetricError,
                       LinearProbeMetric, LogMEMetric, RidgeProbeMetric)

METRICS = [LinearProbeMetric(), RidgeProbeMetric(), RidgeProbeMetric(selection="gcv", name="gcv"), LDAProbeMetric(),
           KNNMetric(), LogMEMetric(), LabelRetrievalMetric()]
X = np.random.default_rng(0).normal(size=(40, 4))
LABELS = np.array(["a", "b"] * 20)
NAN = np.where(X > 1.5, np.nan, X)


@pytest.mark.parametrize("metric", METRICS, ids=lambda m: m.name)
@pytest.mark.parametrize("embeddings, error, message", [
    (X[:, 0], InputValidationError, r"must be 2-D \(rows x features\), got shape \(40,\); reshape a single feature "
                                    r"with x\.reshape\(-1, 1\)"),
    (X.reshape(40, 2, 2), InputValidationError, r"must be 2-D \(rows x features\), got shape \(40, 2, 2\); flatten or "
                                                 r"pool each row's other axes, e.g\. x\.reshape\(len\(x\), -1\)$"),
    (X.astype(str), InputTypeError, r"must be numeric, got dtype <U32; convert it to a float array"),
    (X.astype(complex), InputTypeError, r"must hold real numbers, got dtype complex128"),
    (NAN, InputValidationError, r"has NaN or infinite values in rows 10, 11, 12, 15, 16, \.\.\. \(0-based; 8 row\(s\)\); "
                                r"impute or drop those rows"),
    (np.where(X > 1.5, -np.inf, X), InputValidationError, r"has NaN or infinite values in rows 10, 11, 12"),
    (X[:, :0], InputValidationError, r"has zero width \(0 features\); give at least one column$"),
    (X.tolist(), InputTypeError, r"must be a NumPy array or a SciPy sparse matrix \(rows x features\), got list; pass "
                                 r"np\.asarray\(embeddings\)"),
], ids=["1-D", "3-D", "strings", "complex", "NaN", "-inf", "no columns", "a list"])
def test_a_metric_refuses_embeddings_it_cannot_score_naming_itself_and_the_fix(metric, embeddings, error, message):
    with pytest.raises(error, match=rf"^metric '{metric.name}': embeddings {message}"):
        metric(embeddings, LABELS, seed=0)


@pytest.mark.parametrize("metric", [m for m in METRICS if m.name != "lda_probe"], ids=lambda m: m.name)
def test_sparse_nan_is_refused_naming_the_stored_rows(metric):
    """LDA refuses sparse input as such (its own test); the others named nothing, or scored it."""
    with pytest.raises(InputValidationError, match=rf"^metric '{metric.name}': embeddings has NaN or infinite stored "
                                                   r"values in rows 10, 11, 12, 15, 16"):
        metric(sparse.csr_matrix(NAN), LABELS, seed=0)


@pytest.mark.parametrize("metric", METRICS, ids=lambda m: m.name)
def test_valid_integer_boolean_and_sparse_embeddings_still_score(metric):
    above_row_minimum = X > X.min(axis=1, keepdims=True)  # no all-zero row (label retrieval's cosine needs none)
    for embeddings in (np.rint(3 * X).astype(int) + 10, above_row_minimum,
                       *([] if metric.name == "lda_probe" else [sparse.csr_matrix(X)])):
        assert np.isfinite(metric(embeddings, LABELS, seed=0)["score"])


@pytest.mark.parametrize("metric", METRICS, ids=lambda m: m.name)
def test_labels_as_a_list_score_and_labels_that_fit_no_row_are_refused(metric):
    """A list of labels reached ``labels.shape`` (AttributeError); None did too."""
    assert metric(X, LABELS.tolist(), seed=0)["score"] == metric(X, LABELS, seed=0)["score"]
    rule = r"labels must (hold one target|be 1-D with one label) per embedding row \(40\), got "
    with pytest.raises(MetricError, match=rf"^metric '{metric.name}': {rule}(NoneType|shape \(\))"):
        metric(X, None, seed=0)
    with pytest.raises(MetricError, match=rf"{rule}(3 rows|shape \(3,\))"):
        metric(X, LABELS[:3], seed=0)


@pytest.mark.parametrize("metric", [m for m in METRICS if "regression" in m.supported_target_types],
                         ids=lambda m: m.name)
def test_regression_and_multi_label_targets_must_be_numbers(metric):
    """Strings as regression targets failed in NumPy ("could not convert string to float"); NaN reached the fit."""
    regression = {"target_type": "regression"}
    with pytest.raises(MetricError, match=rf"^metric '{metric.name}': regression targets must be numbers \(one column "
                                          r"per target\), got dtype <U1"):
        metric(X, LABELS, target_metadata=regression, seed=0)
    with pytest.raises(MetricError, match="regression targets hold NaN or infinite values; drop those rows"):
        metric(X, np.where(X[:, 0] > 1.5, np.nan, X[:, 0]), target_metadata=regression, seed=0)
    if "multi_label" in metric.supported_target_types:
        with pytest.raises(MetricError, match=r"multi-label targets must be numbers \(a 0/1 indicator matrix\), got"):
            metric(X, np.array([["a", "b"]] * 40), target_metadata={"target_type": "multi_label"}, seed=0)


@pytest.mark.parametrize("metric", [m for m in METRICS if m.name in ("linear_probe", "ridge_probe", "lda_probe")],
                         ids=lambda m: m.name)
@pytest.mark.parametrize("seed", ["x", -1, 2**32, True, 1.5])
def test_a_seed_the_folds_cannot_take_is_refused(metric, seed):
    """scikit-learn's own error named neither the metric nor the range ("'x' cannot be used to seed ...")."""
    with pytest.raises(MetricError, match=rf"^metric '{metric.name}': seed must be an integer in \[0, 2\*\*32 - 1\] or "
                                          rf"None, got {seed!r}"):
        metric(X, LABELS, seed=seed)
    assert metric(X, LABELS, seed=np.int64(3))["score"] == metric(X, LABELS, seed=3)["score"]


@pytest.mark.parametrize("metric", [m for m in METRICS if m.name != "lda_probe"], ids=lambda m: m.name)
@pytest.mark.parametrize("fmt", ["coo_matrix", "lil_matrix", "dok_matrix", "dia_matrix", "bsr_matrix"])
def test_sparse_formats_other_than_csr_and_csc_are_refused_with_the_fix(metric, fmt):
    """They failed inside scipy in most metrics (COO has no row indexing, LIL's ``.data`` holds lists, DOK has none,
    DIA's holds padding); CSR and CSC score alike.  LDA refuses any sparse input (its own test)."""
    with pytest.raises(InputTypeError, match=rf"^metric '{metric.name}': embeddings is a SciPy sparse {fmt}; metrics "
                                             r"read CSR \(or CSC\) rows: pass embeddings\.tocsr\(\)$"):
        metric(getattr(sparse, fmt)(X), LABELS, seed=0)


def test_object_arrays_of_numbers_are_targets_as_their_numbers():
    """pandas' nullable types reach a metric as object arrays; a first version of the numeric check refused them."""
    values = X[:, 0] * 3
    indicator = (X[:, :2] > 0).astype(int)
    for metric, target_type, numbers in ((KNNMetric(), "regression", values), (KNNMetric(), "multi_label", indicator),
                                         (RidgeProbeMetric(), "regression", values)):
        meta = {"target_type": target_type}
        assert (metric(X, numbers.astype(object), target_metadata=meta, seed=0)["score"]
                == metric(X, numbers, target_metadata=meta, seed=0)["score"])

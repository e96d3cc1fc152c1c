"""Scores do not depend on the scale of the embeddings (issue 28, item 1).

With ``normalize_embeddings=True`` only a row's direction may matter; without it only
the geometry, which a global scale does not change.  Rows of extreme scale reach the
dependencies scaled by a power of two (exact), so scores at 2**e times the data are
bit-identical to the data's own, and at any decimal scale they match the reference:
the same rows pre-normalized in float64.  The fuzz tests are bounded (``fuzz`` marker).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import sparse

from vertebrae import OverlapScoringConfig, SeparatixConfig
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.inputs.embeddings import ORDINARY_MAX_ABS, evaluated_matrix, is_constant, unit_scaled
from vertebrae.scoring.label_retrieval import LabelRetrievalMetric
from vertebrae.scoring.separatix import SeparatixScorer
from vertebrae.scoring.stability import StabilityConfig, run_stability_analysis

#: Bounded so the fuzz tests stay within a CI budget (each example is one or two OverlapIndex fits).
FUZZ = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SCALES = [1e-200, 1e-160, 1e-9, 1e-7, 1e19, 1e20, 1e155, 1e200]


def issue_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The issue's reproduction: three classes of 5-D Gaussians, 90 rows."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(mean, 1.0, (30, 5)) for mean in (0.0, 1.5, 3.0)])
    return X, np.repeat(np.array(["a", "b", "c"]), 30)


def prenormalized(X: np.ndarray) -> np.ndarray:
    """Unit rows in float64, by plain division (max-abs first, so 1e155 does not overflow the norm)."""
    X = X / np.abs(X).max(axis=1, keepdims=True)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def score(X, y, *, normalize: bool = True) -> float:
    config = OverlapScoringConfig(normalize_embeddings=normalize)
    return OverlapIndexScorer(config).score(X, y, warn=False).score


@pytest.mark.parametrize("fmt", [np.asarray, sparse.csr_matrix], ids=["dense", "csr"])
@pytest.mark.parametrize("scale", SCALES)
def test_issue_reproduction_scores_the_same_at_every_scale(scale, fmt):
    X, y = issue_data()
    reference = score(prenormalized(X), y)
    assert score(X, y) == reference  # ordinary data: the fast path
    # Before the fix: 0.81 at 1e-9, 0.72 at 1e19, 1.0 at 1e20, "identical in every row" at 1e-200 and 1e200.
    assert score(fmt(X * scale), y) == reference


@pytest.mark.parametrize("fmt", [np.asarray, sparse.csr_matrix], ids=["dense", "csr"])
@pytest.mark.parametrize("scale", [1e-160, 1e-200, 1e200])
def test_one_class_at_another_scale_scores_as_its_directions(scale, fmt):
    X, y = issue_data()
    reference = score(prenormalized(X), y)
    mixed = X.copy()
    mixed[:30] *= scale  # was 0.667 instead of 0.478 at 1e-160
    assert score(fmt(mixed), y) == reference


def test_values_near_the_float_limit_are_scored_not_rejected():
    X, y = issue_data()
    big = X.copy()
    big[:, 2] *= 1e155  # used to raise sklearn's "Input X contains NaN" though every value is finite
    assert score(big, y) == score(prenormalized(big), y)
    # Without normalization the geometry is the same at any global scale: the huge column dominates.
    assert score(big, y, normalize=False) == score(big * 2.0**-515, y, normalize=False)


@st.composite
def labeled_gaussians(draw):
    n_classes = draw(st.integers(2, 4))
    dim = draw(st.integers(2, 8))
    per_class = draw(st.integers(4, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = np.vstack([rng.normal(rng.normal(0.0, 1.5, dim), 1.0, (per_class, dim)) for _ in range(n_classes)])
    if draw(st.booleans()):
        X = X.astype(np.float32)
    return X, np.repeat(np.arange(n_classes), per_class)


@pytest.mark.fuzz
@FUZZ
@given(data=labeled_gaussians(), exponent=st.integers(-664, 664), one_class=st.booleans(), csr=st.booleans())
def test_power_of_two_scales_give_bit_identical_scores(data, exponent, one_class, csr):
    """2**-664 ~ 1e-200, 2**664 ~ 1e200: a power of two commutes with every rounding, so equality is exact."""
    X, y = data
    scaled = X.astype(np.float64)
    scaled[y == 0 if one_class else slice(None)] *= 2.0**exponent
    fmt = sparse.csr_matrix if csr else np.asarray
    assert score(fmt(scaled), y) == score(fmt(X), y)


@pytest.mark.fuzz
@FUZZ
@given(data=labeled_gaussians(), exponent=st.integers(-200, 200), csr=st.booleans())
def test_decimal_scales_match_the_prenormalized_reference(data, exponent, csr):
    """Any scale matches pre-normalized float64 rows (ulp-level rounding may at most flip one near-tie hit)."""
    X, y = data
    fmt = sparse.csr_matrix if csr else np.asarray
    reference = score(fmt(prenormalized(X.astype(np.float64))), y)
    one_hit = 1.0 / X.shape[0]  # a class's score moves by 1/n_c per hit; the macro mean by 1/(C * n_c)
    assert abs(score(fmt(X.astype(np.float64) * 10.0**exponent), y) - reference) <= one_hit


@pytest.mark.fuzz
@FUZZ
@given(data=labeled_gaussians(), exponent=st.integers(-1000, 1000), csr=st.booleans())
def test_unscaled_scores_are_invariant_to_a_global_power_of_two(data, exponent, csr):
    X, y = data
    fmt = sparse.csr_matrix if csr else np.asarray
    scaled = X.astype(np.float64) * 2.0**exponent
    if not np.isfinite(scaled).all() or not scaled.any():
        return  # beyond float64 itself
    assert score(fmt(scaled), y, normalize=False) == score(fmt(X), y, normalize=False)


def test_the_fast_path_makes_no_copy_and_the_slow_path_keeps_csr_sparse():
    X, _ = issue_data()
    f32 = X.astype(np.float32)
    assert unit_scaled(X, per_row=True) is X and unit_scaled(f32, per_row=False) is f32
    csr = sparse.csr_matrix(X)
    assert unit_scaled(csr, per_row=True) is csr
    tiny = sparse.csr_matrix(X * 1e-200)
    scaled = unit_scaled(tiny, per_row=True)
    assert sparse.issparse(scaled) and scaled.nnz == tiny.nnz and scaled.dtype == np.float64
    peaks = abs(scaled).max(axis=1).toarray().ravel()
    assert ((peaks >= 0.5) & (peaks < 1.0)).all()
    assert scaled.indices is not tiny.indices  # the caller's structure is never shared
    assert ORDINARY_MAX_ABS == (2.0**-20, 2.0**40)
    e = np.frexp(np.abs(X).max())[1]  # max-abs in [2**(e-1), 2**e)
    for inside in (np.ldexp(X, -19 - e), np.ldexp(X, 40 - e)):  # max-abs in [2**-20, 2**-19), [2**39, 2**40)
        assert unit_scaled(inside, per_row=False) is inside
    for outside in (np.ldexp(X, -20 - e), np.ldexp(X, 41 - e)):
        assert unit_scaled(outside, per_row=False) is not outside
    # an all-zero row stays zero and does not force a copy
    with_zero = X.copy()
    with_zero[3] = 0
    assert unit_scaled(with_zero, per_row=True) is with_zero


@pytest.mark.parametrize("fmt", [np.asarray, sparse.csr_matrix], ids=["dense", "csr"])
def test_evaluated_matrix_is_the_same_at_every_scale(fmt):
    """The matrix separatix and ContinuousOverlapIndex see (regression shares this path)."""
    X, _ = issue_data()
    reference, _ = evaluated_matrix(fmt(X), True)
    dense = (lambda m: m.toarray()) if fmt is sparse.csr_matrix else np.asarray
    for exponent in (-1000, -664, -30, 30, 664, 1000):
        same, zeros = evaluated_matrix(fmt(X * 2.0**exponent), True)
        assert np.array_equal(dense(same), dense(reference)) and zeros.size == 0
    for scale in SCALES:
        np.testing.assert_allclose(dense(evaluated_matrix(fmt(X * scale), True)[0]), dense(reference), rtol=1e-14)
    unscaled, _ = evaluated_matrix(fmt(X * 1e200), False)
    assert np.isfinite(dense(unscaled)).all() and 0.5 <= np.abs(dense(unscaled)).max() < 1.0


def test_tiny_rows_are_not_one_point():
    X, _ = issue_data()
    for normalize in (True, False):
        # was True ("the same embedding for every row"): the tolerance was absolute
        assert not is_constant(X * 1e-200, normalize=normalize)
        assert not is_constant(sparse.csr_matrix(X * 1e-200), normalize=normalize)
        assert is_constant(np.tile(X[:1] * 1e-200, (10, 1)), normalize=normalize)
    multiples = X[:1] * np.array([[1e-200], [1.0], [1e200]])
    assert is_constant(multiples, normalize=True) and not is_constant(multiples, normalize=False)


def test_label_retrieval_ranks_the_same_at_every_scale():
    X, y = issue_data()
    for similarity in ("cosine", "dot"):
        metric = LabelRetrievalMetric(similarity=similarity)
        reference = metric(X, y)["diagnostics"]
        for scale in (2.0**-664, 2.0**664):
            # was "zero norm" (cosine at 1e-200) and "overflow float32" (dot at 1e200)
            assert metric(X * scale, y)["diagnostics"] == reference
            assert metric(sparse.csr_matrix(X * scale), y)["diagnostics"] == reference


def test_separatix_sees_the_same_matrix_at_every_scale():
    X, y = issue_data()
    scorer = SeparatixScorer(SeparatixConfig(run_when="always", budget="fast"))
    reference = scorer.diagnose(X, y, overlap_score=0.5)
    scaled = scorer.diagnose(X * 2.0**900, y, overlap_score=0.5)  # ~1e271: its L2 norm overflowed to zero rows
    assert scaled.scores == reference.scores and scaled.recommendation == reference.recommendation
    big = X.copy()
    big[:, 2] *= 1e155
    unnormalized = SeparatixScorer(SeparatixConfig(run_when="always", budget="fast"),
                                   overlap_config=OverlapScoringConfig(normalize_embeddings=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = unnormalized.diagnose(big, y, overlap_score=0.5)  # was a raw LinAlgError
    assert result.status == "completed"


def test_stability_repeats_score_the_same_at_every_scale():
    X, y = issue_data()
    config = StabilityConfig(repeats=3)
    reference = run_stability_analysis(X, y, config=config).repeat_scores
    assert run_stability_analysis(X * 1e-200, y, config=config).repeat_scores == reference


def test_cosine_retrieval_endpoints_are_the_same_at_every_scale():
    from vertebrae.families.retrieval.ranking import prepare_endpoints

    X, _ = issue_data()
    queries, gallery = X[:20], X[20:]
    ids = {"query_ids": [f"q{i}" for i in range(20)], "gallery_ids": [f"g{i}" for i in range(70)]}
    reference = prepare_endpoints(queries, sparse.csr_matrix(gallery), "cosine", source="test", **ids)
    # queries at ~1e-200 were "zero norm"; gallery rows at ~1e200 were "an L2 norm above 1e18"
    scaled = prepare_endpoints(queries * 2.0**-664, sparse.csr_matrix(gallery * 2.0**664), "cosine", source="test",
                               **ids)
    assert np.array_equal(scaled.queries, reference.queries)
    assert np.array_equal(scaled.gallery.toarray(), reference.gallery.toarray())

"""OverlapIndexScorer: fidelity to direct OverlapIndex / ContinuousOverlapIndex calls, k resolution,
typed labels, exclusions, sparse input, determinism and degenerate input."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
import warnings

import numpy as np
from threadpoolctl import threadpool_limits
import pytest
from overlapindex import ContinuousOverlapIndex
from scipy import sparse
from sklearn.preprocessing import normalize

from vertebrae import ContinuousOverlapScoringConfig, InputTypeError, InputValidationError, OverlapScoringConfig
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.errors import ScoringWarning

from .conftest import gaussian_classes
from .references import direct_oi


def test_single_label_matches_direct_overlapindex_exactly():
    X, y = gaussian_classes(n_per_class=80, n_classes=4, seed=1)
    result = OverlapIndexScorer(OverlapScoringConfig(k=7)).score(X, y, seed=11)
    oi = direct_oi(X, y, 7, seed=11)
    assert result.score == oi.index and result.macro_score == oi.index
    assert result.weighted_score == oi.weighted_index
    assert result.per_class_scores == {f"int:{c}": float(oi.singleton_index[c]) for c in range(4)}
    assert result.class_counts == {f"int:{c}": int(oi.cluster_cardinality[c]) for c in range(4)}
    assert result.k_per_class == {f"int:{c}": len(oi.rev_map[c]) for c in range(4)}
    for a in range(4):
        for b in range(4):
            if a != b:
                assert result.pairwise_scores[f"int:{a}"][f"int:{b}"] == oi.pairwise_index[(a, b)]
                assert result.sparse_adjacency.get(f"int:{a}", {}).get(f"int:{b}", 0) == oi.sparse_adj.get((a, b), 0)
    assert result.metadata["seed"] == 11 and result.metadata["kmeans_kwargs"] == {"random_state": 11}
    assert result.metadata["normalize_embeddings"] is True and "thread_limit" not in result.metadata  # speed-only
    json.dumps(result.to_dict())


def test_multilabel_indicator_and_label_sets_match_direct_call():
    X, y = gaussian_classes(n_per_class=60, n_classes=3, seed=2)
    rng = np.random.default_rng(0)
    Y = np.zeros((len(y), 4), dtype=np.int8)
    Y[np.arange(len(y)), y] = 1
    Y[rng.random(len(y)) < 0.3, 3] = 1
    names = ["cat", "dog", "owl", "night"]
    by_indicator = OverlapIndexScorer(OverlapScoringConfig(k=5)).score(X, sparse.csr_matrix(Y), label_names=names)
    by_sets = OverlapIndexScorer(OverlapScoringConfig(k=5)).score(
        X, [{names[j] for j in np.flatnonzero(row)} for row in Y], target_type="multi_label")
    # the catalog orders labels: cat, dog, night, owl -> direct call on the same column order
    order = [0, 1, 3, 2]
    oi = direct_oi(X, sparse.csr_matrix(Y[:, order]), 5)
    keys = ["str:cat", "str:dog", "str:night", "str:owl"]
    for result in (by_indicator, by_sets):
        assert result.target_type == "multi_label"
        assert result.score == oi.index and result.weighted_score == oi.weighted_index
        assert result.per_class_scores == {keys[j]: float(oi.singleton_index[j]) for j in range(4)}
        assert result.class_counts == {keys[j]: int(Y[:, order[j]].sum()) for j in range(4)}
        assert result.k_per_class == {keys[j]: len(oi.rev_map[j]) for j in range(4)}
        for a in range(4):
            for b in range(4):
                if a != b:
                    expected = oi.pairwise_index[(a, b)]
                    got = result.pairwise_scores[keys[a]][keys[b]]
                    assert got is None if math.isnan(expected) else got == expected
                    assert result.sparse_adjacency.get(keys[a], {}).get(keys[b], 0) == oi.sparse_adj.get((a, b), 0)


def test_each_regression_target_is_scored_alone_as_the_direct_call_scores_it():
    """Spec (results and reports): a regression's score detail is the continuous overlap per target.  With several
    targets, each is one more ContinuousOverlapIndex fit with the same settings and seed (a direct call is the
    reference); with one, it is the score itself; stability repeats leave them out (``per_target=False``)."""
    X, _ = gaussian_classes(n_per_class=40, n_classes=3, seed=3)
    rng = np.random.default_rng(0)
    Y = np.c_[X[:, 0] * 2 + rng.normal(0, 0.1, len(X)), rng.normal(size=len(X))]  # a signal and pure noise
    cfg = ContinuousOverlapScoringConfig(k=4, n_null_permutations=3)
    scorer = OverlapIndexScorer(continuous_config=cfg)
    result = scorer.score(X, Y, target_type="regression", target_names=["signal", "noise"], seed=5, warn=False)
    per_target = result.regression["per_target"]
    assert list(per_target) == ["signal", "noise"]
    for j, name in enumerate(("signal", "noise")):
        coi = ContinuousOverlapIndex(model_type="MiniBatchKMeans", kmeans_k=4, kmeans_kwargs={"random_state": 5},
                                     null_mode="refit_permutation", n_null_permutations=3, random_state=5)
        coi.fit_offline(normalize(X.astype(np.float64)), Y[:, j])
        assert per_target[name] == {"score": coi.index, "loss_ratio": coi.loss_ratio_}
    assert per_target["signal"]["score"] > per_target["noise"]["score"]
    from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, PrecomputedExtractor, SeparatixConfig

    dataset = BenchmarkDataset.from_embeddings(X, Y, identity=DatasetIdentity.declared("two-targets", "1"),
                                               target_type="regression", target_names=["signal", "noise"])
    run = Benchmark(dataset, [PrecomputedExtractor("x")], continuous_config=cfg, progress=False,
                    separatix_config=SeparatixConfig(enabled=False)).run()
    reported = run["x"].overlap.regression["per_target"]
    assert set(reported) == {"signal", "noise"}
    text = run.to_markdown()
    assert (f"Per target, each scored alone: signal {reported['signal']['score']:.4f} (loss ratio "
            f"{reported['signal']['loss_ratio']:.4f}), noise") in text
    one = scorer.score(X, Y[:, 0], target_type="regression", seed=5, warn=False)
    assert one.regression["per_target"] == {"target_0": {"score": one.score, "loss_ratio": one.loss_ratio}}
    assert scorer.score(X, Y, target_type="regression", seed=5, warn=False,
                        per_target=False).regression["per_target"] == {}


def test_regression_matches_direct_continuous_overlapindex():
    X, _ = gaussian_classes(n_per_class=50, n_classes=3, seed=3)
    y = X[:, 0] * 2 + np.random.default_rng(0).normal(0, 0.1, len(X))
    cfg = ContinuousOverlapScoringConfig(k=4, n_null_permutations=3)
    result = OverlapIndexScorer(continuous_config=cfg).score(X, y, target_type="regression", seed=5)
    coi = ContinuousOverlapIndex(model_type="MiniBatchKMeans", kmeans_k=4, kmeans_kwargs={"random_state": 5},
                                 null_mode="refit_permutation", n_null_permutations=3, random_state=5)
    coi.fit_offline(normalize(X.astype(np.float64)), y)
    assert result.score == coi.index and result.macro_score == coi.macro_index_
    assert result.weighted_score == coi.weighted_index and result.loss_ratio == coi.loss_ratio_
    null = result.regression["null_calibration"]
    assert null["null_mode_used"] == "refit_permutation" and null["null_loss"] == coi.null_loss_
    assert null["null_loss_samples"] == [float(v) for v in coi.null_loss_samples_]
    prototypes = result.regression["prototypes"]
    assert set(prototypes) == {str(int(p)) for p in coi.prototype_index_}
    for p in coi.prototype_index_:
        mine = prototypes[str(int(p))]
        assert mine["index"] == coi.prototype_index_[p] and mine["loss"] == coi.prototype_loss_[p]
        assert mine["support"] == int(coi.prototype_support_.get(p, 0))
        assert mine["target_cell"] == int(coi.prototype_to_target_cell_[p])
        assert mine["target_mean"] == np.asarray(coi.prototype_target_mean_[p], dtype=float).ravel().tolist()
        assert mine["target_radius"] == coi.prototype_target_radius_[p]
    assert result.regression["target_cells"] == {
        f"cell:{int(c)}": sorted(int(p) for p in protos) for c, protos in coi.target_cell_to_prototypes_.items()}
    assert result.regression["prototype_adjacency"] == [
        [int(p), int(q), float(w), int(coi.prototype_adjacency_count_.get((p, q), 0))]
        for (p, q), w in sorted(coi.prototype_adjacency_.items())]
    assert 0.0 <= result.score <= 1.0
    json.dumps(result.to_dict())


def test_auto_k_resolution_and_reduction_warning():
    # class sizes 200, 40, 12 with defaults min_k=10, max_k=50, min_samples_per_cluster=5:
    # capacity = max(2, n // 5) capped at n -> 40, 8, 2; auto asks clip(capacity, 10, 50) -> 40, 10, 10
    rng = np.random.default_rng(0)
    X = rng.normal(size=(252, 6)).astype(np.float32)
    y = np.array(["big"] * 200 + ["mid"] * 40 + ["tiny"] * 12)
    with pytest.warns(ScoringWarning, match="tiny"):
        result = OverlapIndexScorer().score(X, y)
    assert result.k_per_class == {"str:big": 40, "str:mid": 8, "str:tiny": 2}
    assert any("'mid': k reduced from 10 (auto) to 8" in w and "40 sample" in w for w in result.warnings)
    assert any("'tiny': k reduced from 10 (auto) to 2" in w for w in result.warnings)
    fixed = OverlapIndexScorer(OverlapScoringConfig(k=30, min_samples_per_cluster=1)).score(X, y)
    assert fixed.k_per_class == {"str:big": 30, "str:mid": 30, "str:tiny": 12}
    assert any("'tiny': k reduced from 30 (fixed) to 12" in w for w in fixed.warnings)


def test_typed_labels_stay_distinct_and_k_mapping_uses_typed_values():
    X, _ = gaussian_classes(n_per_class=40, n_classes=3, seed=4)
    y = [1] * 40 + ["1"] * 40 + [True] * 40
    cfg = OverlapScoringConfig(k=[(1, 3), ("1", 4), (True, 5)])
    result = OverlapIndexScorer(cfg).score(X, y)
    assert result.k_per_class == {"bool:true": 5, "int:1": 3, "str:1": 4}
    assert result.labels == {"bool:true": "True", "int:1": "1 (int)", "str:1": "1 (str)"}
    assert result.class_counts == {"bool:true": 40, "int:1": 40, "str:1": 40}
    dates = [datetime.date(2024, 1, d) for d in (1, 2, 3) for _ in range(40)]
    by_date = OverlapIndexScorer(OverlapScoringConfig(k=[(datetime.date(2024, 1, 2), 6)])).score(X, dates)
    assert by_date.k_per_class["date:2024-01-02"] == 6
    with pytest.raises(InputValidationError, match="not in the dataset"):
        OverlapIndexScorer(OverlapScoringConfig(k={"2024-01-02": 6})).score(X, dates)


def test_excluded_classes_are_fitted_but_not_aggregated():
    X, y = gaussian_classes(n_per_class=50, n_classes=4, seed=5)
    y = y.copy()
    y[:10] = 3  # unequal counts so macro and weighted differ: 40, 50, 50, 60
    result = OverlapIndexScorer(OverlapScoringConfig(k=5, exclude_classes=[0])).score(X, y)
    per_class, counts = result.per_class_scores, result.class_counts
    assert set(per_class) == {"int:0", "int:1", "int:2", "int:3"}  # still reported
    assert "int:0" in result.pairwise_scores
    included = ["int:1", "int:2", "int:3"]
    assert result.metadata["aggregation_classes"] == included
    assert result.metadata["excluded_classes"] == ["int:0"]
    assert result.macro_score == pytest.approx(sum(per_class[k] for k in included) / 3, abs=1e-12)
    weighted = sum(per_class[k] * counts[k] for k in included) / sum(counts[k] for k in included)
    assert result.weighted_score == pytest.approx(weighted, abs=1e-12)
    assert result.macro_score != pytest.approx(sum(per_class.values()) / 4, abs=1e-6)
    with pytest.raises(InputValidationError, match="excludes every class"):
        OverlapIndexScorer(OverlapScoringConfig(exclude_classes=[0, 1, 2, 3])).score(X, y)
    with pytest.raises(InputValidationError, match="not a class"):
        OverlapIndexScorer(OverlapScoringConfig(exclude_classes=["0"])).score(X, y)


def test_deterministic_without_a_seed_in_process_and_across_processes():
    X, y = gaussian_classes(n_per_class=60, n_classes=3, seed=6)
    first = OverlapIndexScorer().score(X, y)
    second = OverlapIndexScorer().score(X, y)
    assert first.to_dict() == second.to_dict() and first.metadata["seed"] == 0
    code = ("import json,sys;from tests.conftest import gaussian_classes;from vertebrae.scoring import OverlapIndexScorer;"
            "X,y=gaussian_classes(n_per_class=60,n_classes=3,seed=6);"
            "r=OverlapIndexScorer().score(X,y);print(json.dumps([r.score,r.weighted_score,r.per_class_scores]))")
    outputs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
               for _ in range(2)]
    assert outputs[0] == outputs[1] == json.dumps([first.score, first.weighted_score, first.per_class_scores]) + "\n"


def test_sparse_input_stays_sparse_and_matches_dense():
    X, y = gaussian_classes(n_per_class=50, n_classes=3, seed=7)
    X[np.abs(X) < 1.0] = 0.0
    dense = OverlapIndexScorer(OverlapScoringConfig(k=4)).score(X, y)
    oi = direct_oi(sparse.csr_matrix(X), y, 4)
    for matrix in (sparse.csr_matrix(X), sparse.coo_matrix(X), sparse.csr_array(X)):
        result = OverlapIndexScorer(OverlapScoringConfig(k=4)).score(matrix, y)
        assert result.metadata["input_sparse"] is True
        assert result.score == oi.index and result.weighted_score == oi.weighted_index  # exact vs the direct call
        assert result.per_class_scores == {f"int:{c}": float(oi.singleton_index[c]) for c in range(3)}
        assert result.score == pytest.approx(dense.score, abs=1e-12)  # and sparse agrees with dense


def test_large_sparse_matrix_scores_far_below_its_dense_size():
    """50,000 x 20,000 CSR at 0.5% density: dense float64 would be 7.5 GiB; peak RSS must stay far below."""
    code = """
import resource, numpy as np
from scipy import sparse
from vertebrae import OverlapScoringConfig
from vertebrae.scoring import OverlapIndexScorer
rng = np.random.default_rng(0)
n, d = 50_000, 20_000
per_row = 100  # 0.5% density; built directly (sparse.random allocates n*d indices)
indices = np.sort(rng.choice(d, size=(n, per_row), replace=True), axis=1).ravel().astype(np.int32)
X = sparse.csr_matrix((rng.random(n * per_row, dtype=np.float32), indices, np.arange(0, n * per_row + 1, per_row)),
                      shape=(n, d))
X.sum_duplicates()
y = rng.integers(0, 10, n)
def peak_kib():
    # VmHWM is this process's own peak; ru_maxrss also counts the parent's RSS at fork/exec (a big pytest process)
    try:
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = peak_kib()
r = OverlapIndexScorer(OverlapScoringConfig(k=20)).score(X, y)
after = peak_kib()
print(before * 1024, after * 1024, r.metadata["input_sparse"], r.score)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, peak = int(out[0]), int(out[1])
    dense_bytes = 50_000 * 20_000 * 8
    assert before < 1.5 * 2**30  # the fixture itself stays small
    assert out[2] == "True" and 0.0 <= float(out[3]) <= 1.0
    assert peak < dense_bytes / 10, f"peak RSS {peak / 2**20:.0f} MiB vs dense {dense_bytes / 2**30:.1f} GiB"


# ----------------------------------------------------------------------------- degenerate input
@pytest.mark.parametrize("embeddings, error, match", [
    (np.array([[0.0, np.nan], [1.0, 2.0]] * 4), InputValidationError, "NaN or infinite values in rows 0"),
    (np.array([[0.0, np.inf], [1.0, 2.0]] * 4), InputValidationError, "NaN or infinite"),
    (np.arange(8.0), InputValidationError, "must be 2-D"),
    (np.zeros((8, 0)), InputValidationError, "zero width"),
    (np.array([["a", "b"]] * 8), InputTypeError, "numeric"),
    (np.zeros((0, 3)), InputValidationError, "empty"),
    (np.zeros((5, 3)) + np.arange(3), InputValidationError, "rows but embeddings has 5|has 8 rows"),
])
def test_bad_embeddings_raise_before_fitting(embeddings, error, match):
    y = [0, 1] * 4
    with pytest.raises(error, match=match):
        OverlapIndexScorer().score(embeddings, y)


def test_sparse_nonfinite_values_name_the_row():
    X = sparse.csr_matrix(np.eye(8))
    X.data[3] = np.nan
    with pytest.raises(InputValidationError, match="rows 3"):
        OverlapIndexScorer().score(X, [0, 1] * 4)


def test_label_problems_raise_before_fitting():
    X = np.random.default_rng(0).normal(size=(8, 3))
    with pytest.raises(InputValidationError, match="single class"):
        OverlapIndexScorer().score(X, [1] * 8)
    with pytest.raises(InputValidationError, match="'c' \\(1 sample\\)"):
        OverlapIndexScorer().score(X, ["a"] * 4 + ["b"] * 3 + ["c"])
    with pytest.raises(InputValidationError, match="rows 2"):
        OverlapIndexScorer().score(X, [0, 1, None, 1, 0, 1, 0, 1])


def test_identical_embeddings_are_rejected_instead_of_scoring_perfect():
    # OverlapIndex itself reports 1.0 (perfect separation) for a constant space.
    X = np.ones((20, 4))
    y = [0, 1] * 10
    assert direct_oi(X, y, 3).index == 1.0
    with pytest.raises(InputValidationError, match="identical in every row"):
        OverlapIndexScorer().score(X, y)


def test_zero_rows_under_normalization_warn_and_are_counted():
    X, y = gaussian_classes(n_per_class=30, n_classes=2, seed=8)
    X[[3, 40]] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        result = OverlapIndexScorer(OverlapScoringConfig(k=3)).score(X, y)
    assert result.metadata["zero_rows"] == 2
    assert any("2 all-zero embedding row(s) (rows 3, 40)" in w for w in result.warnings)
    assert result.score == direct_oi(X, y, 3).index


def test_float32_input_is_copied_once_to_float64():
    from vertebrae.inputs.embeddings import evaluated_matrix

    X = np.ones((4, 3), dtype=np.float32)
    Xf, _ = evaluated_matrix(X, normalize=True)
    assert Xf.dtype == np.float64
    X64 = np.ones((4, 3))
    Xn, _ = evaluated_matrix(X64, normalize=True)
    assert np.all(X64 == 1.0)  # the caller's float64 matrix is never modified in place
    assert np.allclose(np.linalg.norm(Xn, axis=1), 1.0)


def test_subset_targets_missing_a_catalog_class_are_rejected_clearly(identity):
    from vertebrae import BenchmarkDataset

    X, y = gaussian_classes(n_per_class=10, n_classes=3, seed=9)
    targets = BenchmarkDataset.from_embeddings(X, y, identity=identity).targets
    rows = np.flatnonzero(y != 2)
    with pytest.raises(InputValidationError, match="'2' \\(0 row\\(s\\)\\)"):
        OverlapIndexScorer().score(X[rows], targets.subset(rows))


def test_rows_pointing_one_way_are_constant_after_normalization():
    base = np.random.default_rng(0).normal(size=6)
    X = np.outer(np.arange(1.0, 21.0), base)  # every row a positive multiple of one vector
    y = [0, 1] * 10
    # after normalization the rows differ only by rounding, so any score OverlapIndex gives is noise
    with pytest.raises(InputValidationError, match="identical in every row after L2 normalization"):
        OverlapIndexScorer().score(X, y)
    raw = OverlapIndexScorer(OverlapScoringConfig(k=3, normalize_embeddings=False)).score(X, y)
    assert raw.score == direct_oi(X, y, 3, normalize_rows=False).index  # without normalization the rows differ
    with pytest.raises(InputValidationError, match="identical"):
        OverlapIndexScorer().score(sparse.csr_matrix(X), y)


def test_boolean_embeddings_are_accepted_dense_and_sparse():
    rng = np.random.default_rng(0)
    X = rng.random((60, 10)) < 0.5
    y = np.repeat([0, 1], 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        dense = OverlapIndexScorer(OverlapScoringConfig(k=3)).score(X, y)
        sparse_result = OverlapIndexScorer(OverlapScoringConfig(k=3)).score(sparse.csr_matrix(X), y)
    assert dense.score == direct_oi(X.astype(np.float64), y, 3).index
    assert sparse_result.score == pytest.approx(dense.score, abs=1e-12)


def test_distinct_rows_counts_points_dense_sparse_and_after_normalization():
    from vertebrae.inputs.embeddings import distinct_rows

    points = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 3.0]])  # rows 0 and 1 share a direction
    X = points[np.arange(150) % 3]
    assert distinct_rows(X) == 3 and distinct_rows(sparse.csr_matrix(X)) == 3
    assert distinct_rows(X, normalize=True) == 2 and distinct_rows(sparse.csr_matrix(X), normalize=True) == 2
    assert distinct_rows(np.random.default_rng(0).normal(size=(5000, 8)).astype(np.float32)) == 5000  # > one block


def test_a_space_collapsed_onto_few_points_warns_that_its_score_is_unreliable():
    # Random labels carry nothing, yet with 50 prototypes a class (the default at this size) the dependency
    # scores 2 coincident points far above 1500 distinct ones.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 1500)
    collapsed = rng.normal(size=(2, 16))[rng.integers(0, 2, 1500)]
    spread = rng.normal(size=(1500, 16))
    assert direct_oi(collapsed, y, 50).index > direct_oi(spread, y, 50).index + 0.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScoringWarning)
        result = OverlapIndexScorer(OverlapScoringConfig(k=50)).score(collapsed, y)
        ordinary = OverlapIndexScorer(OverlapScoringConfig(k=50)).score(spread, y)
    # The scorer runs the dependency on one BLAS thread (thread_limit=1); so does the reference here. With coincident
    # rows k-means ties are broken by round-off, and on an AMD EPYC (OpenBLAS Haswell) two threads gave 0.5626, one 0.5606.
    with threadpool_limits(1):
        assert result.score == direct_oi(collapsed, y, 50).index
    assert any("only 2 distinct embedding rows among 1500 after L2 normalization" in w and "unreliable" in w
               for w in result.warnings), result.warnings
    assert not any("distinct embedding rows" in w for w in ordinary.warnings)

"""Zero-shot scoring: fidelity against scikit-learn and a float64 reference, exact blocking, ties, prototypes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import (accuracy_score, balanced_accuracy_score, confusion_matrix, f1_score,
                             precision_recall_fscore_support, top_k_accuracy_score)

from vertebrae import (BenchmarkDataset, DatasetIdentity, PrecomputedZeroShotEncoder, ZeroShotBenchmark,
                           ZeroShotConfig, ZeroShotDataset)
from vertebrae.errors import ConfigError, DataWarning, ExtractorError, InputValidationError, ScoringWarning
from vertebrae.families.zero_shot.classify import build_prototypes, classify, plan_blocks, tile_rows

IDENTITY = DatasetIdentity.declared("zero-shot-scoring", "1")


def problem(n: int = 400, n_classes: int = 12, dim: int = 16, prompts_per_class: int = 3, seed: int = 0):
    """Samples near (noisy) class directions, prompts that are noisy copies of them, with varied norms."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_classes, dim))
    y = np.concatenate([np.arange(n_classes), rng.integers(0, n_classes, n - n_classes)])  # every class occurs
    samples = (centers[y] + 1.6 * rng.normal(size=(n, dim))) * rng.uniform(0.5, 3.0, (n, 1))
    prompt_embeddings = np.repeat(centers, prompts_per_class, axis=0) + 0.8 * rng.normal(
        size=(n_classes * prompts_per_class, dim))
    prompt_embeddings *= rng.uniform(0.2, 5.0, (len(prompt_embeddings), 1))
    return samples.astype(np.float32), y, prompt_embeddings.astype(np.float32)


def zero_shot_dataset(y, prompts_per_class: int = 3) -> ZeroShotDataset:
    n_classes = int(y.max()) + 1
    source = BenchmarkDataset.from_embeddings(np.zeros((len(y), 1)) + y[:, None], y, identity=IDENTITY)
    prompts = {c: [f"prompt {j} of class {c}" for j in range(prompts_per_class)] for c in range(n_classes)}
    return ZeroShotDataset.from_prompts(source, prompts)


def reference_similarities(samples, prompt_embeddings, n_classes, prompts_per_class, similarity):
    """Independent float64 implementation of the documented protocol."""
    E = prompt_embeddings.astype(np.float64)
    X = samples.astype(np.float64)
    if similarity == "cosine":
        E = E / np.linalg.norm(E, axis=1, keepdims=True)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    protos = E.reshape(n_classes, prompts_per_class, -1).mean(axis=1)
    if similarity == "cosine":
        protos = protos / np.linalg.norm(protos, axis=1, keepdims=True)
    return X @ protos.T


def run(data, encoder, **config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning))
        return ZeroShotBenchmark(data, [encoder], config=ZeroShotConfig(**config), progress=False).run()


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_every_metric_equals_sklearn_on_the_same_predictions(similarity):
    samples, y, prompts = problem()
    n_classes = 12
    scores = reference_similarities(samples, prompts, n_classes, 3, similarity)
    ordered = np.sort(scores, axis=1)
    assert (ordered[:, -1] - ordered[:, -2]).min() > 1e-4  # no near-ties: float32 and float64 agree on the argmax
    predicted = scores.argmax(axis=1)
    assert 0.3 < accuracy_score(y, predicted) < 0.9  # informative, not trivial

    result = run(zero_shot_dataset(y), PrecomputedZeroShotEncoder("e", samples, prompts), similarity=similarity,
                 top_k=(1, 3, 5))["e"]
    labels = list(range(n_classes))
    assert result.scores["top1_accuracy"] == pytest.approx(accuracy_score(y, predicted), abs=1e-12)
    assert result.scores["macro_f1"] == pytest.approx(f1_score(y, predicted, average="macro"), abs=1e-12)
    assert result.scores["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, predicted), abs=1e-12)
    assert result.confusion_matrix == confusion_matrix(y, predicted, labels=labels).tolist()
    for k in (1, 3, 5):
        expected = top_k_accuracy_score(y, scores, k=k, labels=labels)
        assert result.top_k_accuracies[f"top{k}_accuracy"] == pytest.approx(expected, abs=1e-12)
    precision, recall, f1, support = precision_recall_fscore_support(y, predicted, labels=labels, zero_division=0)
    keys = [f"int:{c}" for c in labels]
    assert [result.per_class[k]["precision"] for k in keys] == pytest.approx(precision, abs=1e-12)
    assert [result.per_class[k]["recall"] for k in keys] == pytest.approx(recall, abs=1e-12)
    assert [result.per_class[k]["f1"] for k in keys] == pytest.approx(f1, abs=1e-12)
    assert [result.per_class[k]["support"] for k in keys] == support.tolist()
    margins = ordered[:, -1] - ordered[:, -2]
    assert result.margins["mean"] == pytest.approx(margins.mean(), rel=1e-5)
    assert result.margins["median"] == pytest.approx(np.median(margins), rel=1e-5)
    assert result.primary_score == result.scores["top1_accuracy"]


def test_a_class_never_predicted_scores_zero_precision_like_sklearn():
    samples, y, prompts = problem(n=200, n_classes=4, dim=8, seed=3)
    prompts[3 * 3:] = -prompts[:3]  # class 3's prompts point away from everything: never predicted
    result = run(zero_shot_dataset(y), PrecomputedZeroShotEncoder("e", samples, prompts))["e"]
    predicted = reference_similarities(samples, prompts, 4, 3, "cosine").argmax(axis=1)
    assert result.per_class["int:3"]["predicted"] == int((predicted == 3).sum())
    assert result.scores["macro_f1"] == pytest.approx(f1_score(y, predicted, average="macro", zero_division=0))


def test_blocked_scoring_equals_unblocked_exactly():
    rng = np.random.default_rng(1)
    n, n_classes = 9000, 1000
    tile = tile_rows(n_classes)
    assert tile == 4096 and tile_rows(3) == 4096 and tile_rows(20_000) == 192 and tile_rows(10**7) == 64
    samples = rng.standard_normal((n, 16), dtype=np.float32)
    prototypes = rng.standard_normal((n_classes, 16), dtype=np.float32)
    y = rng.integers(0, n_classes, n)
    for similarity in ("cosine", "dot"):
        whole = classify(samples, prototypes, y, similarity, plan_blocks(n, n_classes, 2**30, None))
        for budget, rows in ((tile * n_classes * 5, None), (2 * tile * n_classes * 5 + 7, None), (2**30, tile + 100),
                             (2**30, 1)):
            plan = plan_blocks(n, n_classes, budget, rows)
            assert plan.rows_per_block % tile == 0 and plan.peak_bytes <= budget and plan.n_blocks > 1
            blocked = classify(samples, prototypes, y, similarity, plan)
            for field in ("predictions", "true_rank", "top1", "top2"):
                assert np.array_equal(getattr(blocked, field), getattr(whole, field)), (plan, field)


def test_ranks_over_many_tiles_and_chunks_equal_a_direct_reference_with_ties():
    """Small integer embeddings make every product exact (whatever the BLAS kernel) and ties frequent, so the
    blocked, chunked ranking can be compared with a whole-matrix reference of the documented tie rule."""
    rng = np.random.default_rng(3)
    n, n_classes = 9000, 1000
    samples = rng.integers(-2, 3, (n, 8)).astype(np.float32)
    prototypes = rng.integers(-2, 3, (n_classes, 8)).astype(np.float32)
    y = rng.integers(0, n_classes, n)
    scores = samples.astype(np.float64) @ prototypes.T.astype(np.float64)
    true = scores[np.arange(n), y][:, None]
    before = np.arange(n_classes)[None, :] < y[:, None]
    ranks = (scores > true).sum(axis=1) + ((scores == true) & before).sum(axis=1)
    assert ((scores == true).sum(axis=1) > 1).mean() > 0.5  # the true class ties with another in most rows
    ordered = np.sort(scores, axis=1)
    plan = plan_blocks(n, n_classes, 2 * tile_rows(n_classes) * n_classes * 5, None)
    assert plan.n_blocks == 2
    outcome = classify(samples, prototypes, y, "dot", plan)
    assert np.array_equal(outcome.predictions, scores.argmax(axis=1))
    assert np.array_equal(outcome.true_rank, ranks)
    assert np.array_equal(outcome.top1, ordered[:, -1]) and np.array_equal(outcome.top2, ordered[:, -2])


def test_blocked_benchmark_results_equal_unblocked_ones(monkeypatch):
    # The tile size is a module constant (covered at its real value above); a small one keeps this run fast.
    monkeypatch.setattr("vertebrae.families.zero_shot.classify._TILE_CELLS", 64 * 30)
    samples, y, prompts = problem(n=1000, n_classes=30, dim=24, seed=1)
    assert tile_rows(30) == 64
    data = zero_shot_dataset(y)
    encoder = PrecomputedZeroShotEncoder("e", samples, prompts)
    small = run(data, encoder, max_dense_bytes=64 * 30 * 5).to_dict()
    large = run(data, encoder).to_dict()
    assert small["protocol"]["block_plan"]["n_blocks"] == 16 and large["protocol"]["block_plan"]["n_blocks"] == 1
    assert small["extractor_results"] == large["extractor_results"]  # keys included: the budget is not an input


def test_ties_follow_the_catalog_order_rule():
    # class prototypes (cosine): c0 = e0, c1 = e0 (tied with c0), c2 = e1
    samples = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    y = np.array([0, 1, 2, 2, 0, 1])
    prompts = np.array([[2.0, 0.0], [3.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    source = BenchmarkDataset.from_embeddings(samples + np.arange(6)[:, None], y, identity=IDENTITY)
    data = ZeroShotDataset.from_prompts(source, {0: "zero", 1: "one", 2: "two"})
    outcome = classify(samples, build_prototypes(prompts, np.arange(3), ["0", "1", "2"], ["zero", "one", "two"],
                                                 "cosine").matrix, y, "cosine", plan_blocks(6, 3, 2**20, None))
    # rows 0/1: c0 and c1 tie at 1.0 -> predicted c0; true class 1 ranks after the tied class 0
    # rows 4/5: all three classes tie at 1/sqrt(2) -> predicted c0; true class 1 has rank 1
    assert outcome.predictions.tolist() == [0, 0, 2, 2, 0, 0]
    assert outcome.true_rank.tolist() == [0, 1, 0, 0, 0, 1]
    assert outcome.margins.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    result = run(data, PrecomputedZeroShotEncoder("e", samples, prompts), top_k=(2,))["e"]
    assert result.confusion_matrix == [[2, 0, 0], [2, 0, 0], [0, 0, 2]]
    assert result.top_k_accuracies == {"top1_accuracy": 4 / 6, "top2_accuracy": 1.0}
    assert result.margins["n_tied_top1"] == 4


def test_prompt_ensemble_normalizes_averages_and_renormalizes():
    prompts = np.array([[10.0, 0.0], [0.0, 0.1], [3.0, 4.0]])
    cosine = build_prototypes(prompts, np.array([0, 0, 1]), ["a", "b"], ["p", "q", "r"], "cosine")
    assert np.allclose(cosine.matrix, [[np.sqrt(0.5), np.sqrt(0.5)], [0.6, 0.8]])  # each prompt weighs the same
    assert cosine.metadata["prompts_per_class"] == [2, 1]
    dot = build_prototypes(prompts, np.array([0, 0, 1]), ["a", "b"], ["p", "q", "r"], "dot")
    assert np.allclose(dot.matrix, [[5.0, 0.05], [3.0, 4.0]])
    with pytest.raises(ExtractorError, match="prompt\\(s\\) 'q' \\(class 'a'\\) as the zero vector"):
        build_prototypes(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]), np.array([0, 0, 1]), ["a", "b"],
                         ["p", "q", "r"], "cosine")
    with pytest.raises(ExtractorError, match="prompts of class\\(es\\) \\['a'\\] cancel out"):
        build_prototypes(np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]), np.array([0, 0, 1]), ["a", "b"],
                         ["p", "q", "r"], "cosine")


def test_zero_sample_rows_tie_on_every_class_and_are_reported():
    samples, y, prompts = problem(n=100, n_classes=4, dim=8, seed=2)
    samples[[5, 17]] = 0.0
    result = run(zero_shot_dataset(y), PrecomputedZeroShotEncoder("e", samples, prompts))["e"]
    assert any("2 sample embedding(s) are all-zero" in w for w in result.warnings)


def test_budget_and_shapes_are_checked_before_any_work():
    samples, y, prompts = problem(n=100, n_classes=4, dim=8)
    data = zero_shot_dataset(y)
    with pytest.raises(ConfigError, match="max_dense_bytes=100 is too small to score 4 classes; one tile of 4096 "
                                          "samples needs 81920 bytes"):
        ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("e", samples, prompts)],
                          config=ZeroShotConfig(max_dense_bytes=100))
    with pytest.raises(InputValidationError, match=r"prompts embeddings from encoder 'e' has 11 rows but there are 12 "
                                                   r"prompts; embeddings must have exactly one row per prompt, in "
                                                   r"dataset.flat_prompts order"):
        ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("e", samples, prompts[:11])])
    with pytest.raises(Exception, match="sample embeddings have 8 columns but prompt embeddings have 7"):
        ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("e", samples, prompts[:, :7])])
    with pytest.raises(ExtractorError, match="as the zero vector"):
        zeros = prompts.copy()
        zeros[4] = 0
        ZeroShotBenchmark(data, [PrecomputedZeroShotEncoder("e", samples, zeros)])


@pytest.mark.parametrize("field, value, message", [
    ("metric", "accuracy", "metric must be one of"), ("similarity", "l2", "similarity must be one of"),
    ("top_k", (0,), "top_k\\[0\\] must be >= 1"), ("top_k", "5", "top_k must be a list"),
    ("block_rows", 0, "block_rows must be >= 1"), ("max_dense_bytes", 1.5, "max_dense_bytes must be an integer"),
    ("quality_tolerance", -1.0, "quality_tolerance must be in"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(ConfigError, match=message):
        ZeroShotConfig(**{field: value})
    with pytest.raises(ConfigError, match="unknown field 'k'"):
        ZeroShotConfig.from_dict({"k": 1})
    assert ZeroShotConfig(top_k=(5, 3, 5)).top_k == (1, 3, 5)


def test_sparse_and_float64_samples_classify_like_dense_float32():
    from scipy import sparse

    samples, y, prompts = problem(n=300, n_classes=6, dim=20, seed=4)
    samples[samples < 0.5] = 0.0  # mostly zeros, as a bag-of-words matrix would be
    prototypes = build_prototypes(prompts, np.repeat(np.arange(6), 3), [str(c) for c in range(6)],
                                  [str(i) for i in range(18)], "cosine").matrix
    plan = plan_blocks(300, 6, 2**20, None)
    dense = classify(samples, prototypes, y, "cosine", plan)
    as64 = classify(samples.astype(np.float64), prototypes, y, "cosine", plan)
    assert np.array_equal(as64.predictions, dense.predictions) and np.array_equal(as64.top1, dense.top1)
    csr = classify(sparse.csr_matrix(samples.astype(np.float64)), prototypes, y, "cosine", plan)
    assert np.array_equal(csr.predictions, dense.predictions) and np.array_equal(csr.true_rank, dense.true_rank)
    assert np.allclose(csr.top1, dense.top1, rtol=1e-5, atol=1e-6)
    assert np.allclose(csr.top2, dense.top2, rtol=1e-5, atol=1e-6)


def test_typed_labels_round_trip_through_the_result():
    rng = np.random.default_rng(5)
    labels = [1, "1", True] * 10
    samples = rng.normal(size=(30, 4)).astype(np.float32)
    source = BenchmarkDataset.from_embeddings(samples, labels, identity=IDENTITY)
    data = ZeroShotDataset.from_templates(source, ["class {label}"])
    prompts = rng.normal(size=(3, 4)).astype(np.float32)
    result = run(data, PrecomputedZeroShotEncoder("e", samples, prompts), top_k=(2,))
    assert set(result["e"].per_class) == {"int:1", "str:1", "bool:true"}
    assert [p["display"] for p in result.protocol["prompts"]] == ["True", "1 (int)", "1 (str)"]
    assert sum(result["e"].per_class[k]["support"] for k in result["e"].per_class) == 30
    markdown = result.to_markdown()
    assert "| e | 1 (int) | 10 |" in markdown and "class 1 (str)" in markdown

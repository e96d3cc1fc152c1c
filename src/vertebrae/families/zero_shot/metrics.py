"""Zero-shot metrics from predictions and true-class ranks (pure NumPy; tests compare them with scikit-learn).

Every class of the label catalog occurs in the true labels (the source dataset
guarantees it), so macro averages run over all catalog classes, as scikit-learn's
do over the union of true and predicted labels.  A class never predicted has
precision 0 (scikit-learn's ``zero_division`` default).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .classify import Classification


def confusion(codes: np.ndarray, predictions: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows: true class, columns: predicted class, both in catalog order."""
    flat = codes.astype(np.int64) * n_classes + predictions
    return np.bincount(flat, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def _safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.zeros(numerator.shape), where=denominator > 0)


def zero_shot_metrics(codes: np.ndarray, outcome: Classification, n_classes: int, top_k: tuple[int, ...]
                      ) -> dict[str, Any]:
    """Accuracy, macro F1, balanced accuracy, top-k accuracies, per-class scores, confusion matrix, margins."""
    matrix = confusion(codes, outcome.predictions, n_classes)
    true_positives = np.diag(matrix).astype(np.float64)
    support = matrix.sum(axis=1)
    predicted = matrix.sum(axis=0)
    precision = _safe_ratio(true_positives, predicted.astype(np.float64))
    recall = _safe_ratio(true_positives, support.astype(np.float64))
    f1 = _safe_ratio(2 * precision * recall, precision + recall)
    n = codes.shape[0]
    correct = outcome.predictions == codes
    return {
        "scores": {"top1_accuracy": float(true_positives.sum() / n), "macro_f1": float(f1.mean()),
                   "balanced_accuracy": float(recall.mean())},
        "top_k_accuracies": {f"top{k}_accuracy": float(np.count_nonzero(outcome.true_rank < k) / n) for k in top_k},
        "per_class": {"precision": precision.tolist(), "recall": recall.tolist(), "f1": f1.tolist(),
                      "support": support.tolist(), "predicted": predicted.tolist()},
        "confusion_matrix": matrix.tolist(),
        "margins": margin_summary(outcome.margins, correct),
    }


#: The margin summary fields the reports show (a loaded result must have them; zero_shot.result checks it).
REPORTED_MARGINS = ("mean", "p10", "median", "p90", "mean_correct", "mean_incorrect", "n_tied_top1")


def margin_summary(margins: np.ndarray, correct: np.ndarray) -> dict[str, Any]:
    """Top-1 minus top-2 similarity: distribution overall and split by correct / wrong predictions."""
    values = margins.astype(np.float64)
    quantiles = np.quantile(values, [0.1, 0.5, 0.9])

    def mean(mask: np.ndarray) -> float | None:
        return float(values[mask].mean()) if mask.any() else None

    return {"mean": float(values.mean()), "p10": float(quantiles[0]), "median": float(quantiles[1]),
            "p90": float(quantiles[2]), "min": float(values.min()), "max": float(values.max()),
            "mean_correct": mean(correct), "mean_incorrect": mean(~correct),
            "n_tied_top1": int(np.count_nonzero(values == 0))}

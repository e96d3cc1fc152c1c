"""LabelRetrievalMetric: exact leave-one-out same-label retrieval for single-label benchmarks.

Every row is a query; all other rows are its gallery; a gallery row is relevant when
it has the query's label.  Rankings are exact (a full sort per query, no ANN index),
computed one block of ``block_size`` queries at a time in float32, so the largest
temporary is about ``block_size x n`` and sparse input is never densified beyond one
block of similarities.  ``block_size`` is part of the metric's identity: on some CPUs (OpenBLAS's
Haswell kernels) a float32 matmul of 7 rows rounds differently from one of 256, which moved a
near-tied rank and the score in its seventh digit.  The definitions are written out in docs/metrics.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_choice, check_int
from .._base.sparse import is_sparse
from ..inputs.embeddings import unit_scaled
from ..errors import ConfigError, MetricError
from .metric_embeddings import check_metric_embeddings
from .metrics import check_metric_name

SIMILARITIES = ("cosine", "dot")
#: Ranking order of a query's gallery; documented in docs/metrics.md.
TIE_RULE = ("similarity descending; at equal similarity other-label rows before same-label rows (pessimistic), "
            "then row index ascending")


@dataclasses.dataclass(frozen=True)
class LabelRetrievalMetric(Config):
    """Opt-in same-label retrieval quality: precision@k, recall@k, MRR and mAP.

    ``primary`` picks the ranked score: ``"map"``, ``"mrr"``, ``"precision@k"`` or
    ``"recall@k"`` for a k in ``cutoffs``.  Only defined for single-label datasets:
    multi-label and regression relevance must be declared, so it is never inferred.
    """

    cutoffs: tuple[int, ...] = (1, 5, 10)
    similarity: str = "cosine"
    primary: str = "map"
    block_size: int = 256
    name: str = "label_retrieval"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    supported_target_types: ClassVar[tuple[str, ...]] = ("single_label",)

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        if isinstance(self.cutoffs, (str, bytes)) or not hasattr(self.cutoffs, "__iter__") or not list(self.cutoffs):
            raise ConfigError(f"{owner}.cutoffs must be a non-empty sequence of positive integers, "
                              f"got {self.cutoffs!r}")
        self._set("cutoffs", tuple(sorted({check_int(owner, "cutoffs", k, minimum=1) for k in self.cutoffs})))
        check_choice(owner, "similarity", self.similarity, SIMILARITIES)
        check_choice(owner, "primary", self.primary, self.measures())
        self._set("block_size", check_int(owner, "block_size", self.block_size, minimum=1))

    def measures(self) -> tuple[str, ...]:
        """Every aggregate this metric reports (each is a diagnostic; ``primary`` is the score)."""
        return ("map", "mrr", *(f"{m}@{k}" for m in ("precision", "recall") for k in self.cutoffs))

    def identity(self) -> dict[str, Any]:
        return {"type": "label_retrieval", **self.fingerprint()}

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        """Score one embedding matrix; ``groups`` and ``seed`` are unused (the metric is exact)."""
        check_metric_embeddings(self.name, embeddings)
        target_type = (target_metadata or {}).get("target_type", "single_label")
        if target_type != "single_label":
            raise MetricError(f"metric {self.name!r} is only defined for single-label targets, got {target_type}; "
                              "same-label relevance is not inferred for multi-label or regression targets")
        labels = np.asarray(labels)
        n = embeddings.shape[0]
        if labels.ndim != 1 or labels.shape[0] != n:
            raise MetricError(f"metric {self.name!r}: labels must be 1-D with one label per embedding row "
                              f"({n}), got shape {labels.shape}")
        classes, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
        n_relevant = counts[codes] - 1
        answerable = n_relevant > 0
        if not answerable.any():
            raise MetricError(f"metric {self.name!r}: no query has another row with its label; retrieval is undefined")
        matrix = self._prepared(embeddings)
        per_query = {m: np.zeros(n) for m in self.measures()}
        for start in range(0, n, self.block_size):
            stop = min(start + self.block_size, n)
            self._score_block(matrix, codes, n_relevant, start, stop, per_query)
        means = {m: float(values[answerable].mean()) for m, values in per_query.items()}
        per_class_map = {str(c): float(per_query["map"][answerable & (codes == i)].mean())
                         for i, c in enumerate(classes) if counts[i] > 1}
        diagnostics = {**means, "per_class_map": per_class_map, "n_queries": int(answerable.sum()),
                       "n_queries_without_relevant": int((~answerable).sum())}
        warnings = [] if answerable.all() else [
            f"{int((~answerable).sum())} query row(s) have no other row with their label and were left out"]
        return {"score": means[self.primary], "diagnostics": diagnostics, "warnings": warnings,
                "metadata": {"similarity": self.similarity, "cutoffs": list(self.cutoffs), "primary": self.primary,
                             "tie_rule": TIE_RULE, "dtype": "float32"}}

    def _prepared(self, embeddings: Any) -> Any:
        """A float32 copy (CSR stays CSR) with unit rows for cosine; zero rows are an error for cosine.

        Rows (cosine) or the whole matrix (dot) of extreme scale are first scaled by a power
        of two, which changes no direction and no ranking, so float32 neither under- nor overflows.
        """
        embeddings = unit_scaled(embeddings, per_row=self.similarity == "cosine")
        if is_sparse(embeddings):
            matrix = embeddings.astype(np.float32, copy=True).tocsr()
            matrix.sum_duplicates()
            norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1), dtype=np.float64).ravel())
        else:
            matrix = np.array(embeddings, dtype=np.float32, order="C", copy=True)
            norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
        if self.similarity == "dot":
            return matrix
        zero = np.flatnonzero(norms == 0)
        if zero.size:
            shown = ", ".join(map(str, zero[:5])) + (", ..." if zero.size > 5 else "")
            raise MetricError(f"metric {self.name!r}: embedding row(s) {shown} have zero norm, so cosine similarity is "
                              "undefined for them; use similarity='dot' or fix the extractor output")
        scale = (1.0 / norms).astype(np.float32)
        if is_sparse(matrix):
            matrix.data *= np.repeat(scale, np.diff(matrix.indptr))
        else:
            matrix *= scale[:, None]
        return matrix

    def _score_block(self, matrix: Any, codes: np.ndarray, n_relevant: np.ndarray, start: int, stop: int,
                     per_query: dict[str, np.ndarray]) -> None:
        """Rank the gallery of queries ``start:stop`` and write their per-query measures."""
        n = matrix.shape[0]
        rows = np.arange(start, stop)
        sims = matrix[start:stop] @ matrix.T
        sims = sims.toarray() if is_sparse(sims) else np.asarray(sims)
        order = _ranked_columns(sims, codes == codes[rows, None])
        del sims
        order = order[order != rows[:, None]].reshape(len(rows), n - 1)  # leave the query itself out
        hits = codes[order] == codes[rows, None]
        del order
        found = np.cumsum(hits, axis=1, dtype=np.int32)
        relevant = np.maximum(n_relevant[rows], 1)  # queries without relevant rows are dropped later
        for k in self.cutoffs:
            top = found[:, min(k, n - 1) - 1]
            per_query[f"precision@{k}"][rows] = top / k
            per_query[f"recall@{k}"][rows] = top / relevant
        first = hits.argmax(axis=1)
        per_query["mrr"][rows] = np.where(hits.any(axis=1), 1.0 / (first + 1), 0.0)
        query, rank = np.nonzero(hits)
        precision_at_hit = found[query, rank] / (rank + 1.0)
        per_query["map"][rows] = np.bincount(query, weights=precision_at_hit, minlength=len(rows)) / relevant


def _ranked_columns(sims: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """Column indices of each row by similarity descending; at equal similarity non-relevant
    columns come first (pessimistic: a collapsed space cannot earn credit from row order),
    then column index ascending.

    Same order as ``np.lexsort((index, relevant, -sims))`` per row, faster: each entry becomes
    one int64 key — the order-preserving integer image of ``-similarity`` in the high 32 bits,
    the relevance bit at bit 31, the column index in the low 31 bits — so an ordinary sort of
    these distinct keys gives the tie rule.  ``0 - s`` never produces ``-0.0``, so equal
    similarities get equal high bits.
    """
    if sims.shape[1] >= 2**31:
        raise MetricError(f"LabelRetrievalMetric supports at most 2**31 - 1 rows, got {sims.shape[1]}")
    bits = (np.float32(0) - sims).view(np.int32)
    keys = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).astype(np.int64) << 32
    keys |= relevant.astype(np.int64) << 31
    keys |= np.arange(sims.shape[1], dtype=np.int64)
    keys.sort(axis=1)
    keys &= 0x7FFFFFFF
    return keys

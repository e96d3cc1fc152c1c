"""KNNMetric: exact leave-one-out k-nearest-neighbour prediction quality.

Rows are L2-normalized exactly as the overlap scorer normalizes them
(:func:`~vertebrae.inputs.embeddings.evaluated_matrix`: in float64, zero rows stay at the
origin), so similarity is cosine; similarities are computed in float64 for float64
input and in float32 otherwise (scikit-learn's rule for float32 input; integer and float16 input
too, twice as fast).  Queries are processed in blocks whose
temporaries stay under ``max_block_bytes``; sparse input stays CSR and only one
block of similarities is dense.  Definitions, tie rules and measured speed are in
docs/metrics.md ("Reference metrics").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .._base.config import Config, check_int
from .._base.sparse import is_sparse, sparse_module
from ..inputs.embeddings import evaluated_matrix, is_constant
from ..errors import MetricError
from ..inputs.targets import TARGET_TYPES
from .metric_embeddings import check_metric_embeddings
from .metric_targets import MetricTargets, group_codes, metric_targets, prediction_score
from .metrics import check_metric_name

#: Bytes held per (query, row) cell of a block: similarities, their partitioned copy, masks and a running count.
BYTES_PER_CELL = 32
#: How neighbours and votes are chosen; documented in docs/metrics.md.
TIE_RULE = ("neighbours: cosine similarity descending, at equal similarity the lower row index first; votes: "
            "the most frequent class, at equal votes the class whose marked key sorts first (scikit-learn's rule); "
            "multi-label: a label is predicted when more than half of the neighbours carry it")


@dataclasses.dataclass(frozen=True)
class KNNMetric(Config):
    """How well the ``k`` nearest neighbours of each row predict its target, leaving the row itself out.

    Estimates the accuracy of a cosine k-NN classifier (balanced accuracy for
    single-label targets, macro-F1 over labels for multi-label, R² of the neighbour
    mean averaged over targets for regression) on rows it was not fitted on.  With
    groups, a row's neighbours come from other groups only, so near-duplicates within
    a group cannot inflate it.  Exact and deterministic: ``seed`` is unused.
    """

    k: int = 5
    max_block_bytes: int = 64 * 2**20
    name: str = "knn"

    higher_is_better: ClassVar[bool] = True
    aggregate_valid: ClassVar[bool] = True
    #: Marks a reference metric: results report how the primary ranking agrees with it (docs/metrics.md).
    reference: ClassVar[str] = "k-nearest-neighbour model"
    supported_target_types: ClassVar[tuple[str, ...]] = TARGET_TYPES

    def _validate(self) -> None:
        owner = type(self).__name__
        self._set("name", check_metric_name(self.name, owner))
        self._set("k", check_int(owner, "k", self.k, minimum=1))
        self._set("max_block_bytes", check_int(owner, "max_block_bytes", self.max_block_bytes, minimum=1))

    def identity(self) -> dict[str, Any]:
        return {"type": "knn", **self.fingerprint()}

    def block_rows(self, n_rows: int) -> int:
        """Queries per block: as many as ``max_block_bytes`` allows, at least one."""
        return max(1, min(n_rows, self.max_block_bytes // (BYTES_PER_CELL * max(n_rows, 1))))

    @staticmethod
    def candidates(n: int, codes: np.ndarray | None) -> np.ndarray:
        """The neighbours each row may have: every other row, or (with groups) every row of another group."""
        return np.full(n, n - 1) if codes is None else n - np.bincount(codes)[codes]

    def preflight(self, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                  groups: Any = None) -> None:
        """Refuse a ``k`` that reaches every candidate of every row: each row would vote with all of them, whatever
        the embedding, so the score would rank nothing (with 3 balanced classes it is 0.0 for every candidate)."""
        n = labels.shape[0]
        most = int(self.candidates(n, group_codes(self.name, groups, n)).max(initial=0))
        if self.k >= most:
            raise MetricError(f"metric {self.name!r}: k={self.k} reaches every candidate neighbour of every row (at "
                              f"most {most} of the {n} rows{' in other groups' if groups is not None else ''}), so "
                              f"the votes do not depend on the embedding; lower k below {most}")

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> dict[str, Any]:
        check_metric_embeddings(self.name, embeddings)
        n = embeddings.shape[0]
        targets = metric_targets(self.name, labels, target_metadata, n, self.supported_target_types)
        codes = group_codes(self.name, groups, n)
        if n < 2:
            raise MetricError(f"metric {self.name!r}: leave-one-out needs at least 2 rows, got {n}")
        warnings = list(targets.warnings)
        matrix, zeros = evaluated_matrix(embeddings, normalize=True)
        dtype = np.float64 if embeddings.dtype == np.float64 else np.float32
        matrix = matrix.astype(dtype, copy=False)
        if zeros.size:
            warnings.append(f"{zeros.size} all-zero embedding row(s) have cosine similarity 0 to every row")
        candidates = self.candidates(n, codes)
        short = int((candidates < self.k).sum())
        if short:
            warnings.append(f"{short} row(s) have fewer than k={self.k} candidate neighbours"
                            + (" in other groups" if codes is not None else "") + "; they vote with all they have")
        truth = targets.columns()
        n_neighbours = np.minimum(candidates, self.k)
        rows = self.block_rows(n)
        blocks = []
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            votes = self._neighbours(matrix, codes, start, stop) @ truth
            blocks.append(_predictions(targets, votes, n_neighbours[start:stop]))
        predicted = np.concatenate(blocks)
        valid = not is_constant(matrix)
        if not valid:
            warnings.append("every row is the same point after L2 normalization, so all similarities tie and the "
                            "neighbours are chosen by row order alone; the score is not rankable")
        return {"score": prediction_score(targets, predicted), "aggregate_valid": valid,
                "diagnostics": {"measure": targets.scorer, "n_queries": n, "rows_with_fewer_than_k": short,
                                "zero_rows": int(zeros.size)},
                "warnings": warnings,
                "metadata": {"similarity": "cosine", "normalization": "l2 (as overlap scoring)", "k": self.k,
                             "groups": "neighbours from other groups only" if codes is not None else None,
                             "block_rows": rows, "tie_rule": TIE_RULE, "dtype": np.dtype(dtype).name}}

    def _neighbours(self, matrix: Any, codes: np.ndarray | None, start: int, stop: int) -> Any:
        """A CSR 0/1 matrix ``(stop - start, n)`` marking each query's neighbours (at most ``k`` per row)."""
        sims = matrix[start:stop] @ matrix.T
        sims = sims.toarray() if is_sparse(sims) else np.asarray(sims)
        queries = np.arange(start, stop)
        if codes is None:
            sims[queries - start, queries] = -np.inf
        else:
            sims[codes[queries, None] == codes[None, :]] = -np.inf
        k = min(self.k, sims.shape[1] - 1)
        kth = np.partition(sims, sims.shape[1] - k, axis=1)[:, sims.shape[1] - k]
        above = sims > kth[:, None]
        need = k - above.sum(axis=1)
        at = (sims == kth[:, None]) & np.isfinite(kth)[:, None]
        del sims
        tied = np.flatnonzero(at.sum(axis=1) > need)  # more rows at the k-th similarity than places left
        if tied.size:  # ties at the k-th: the lower row index first
            at[tied] &= np.cumsum(at[tied], axis=1, dtype=np.int32) <= need[tied, None]
        above |= at
        del at
        hit_rows, hit_cols = np.nonzero(above)
        return sparse_module().csr_matrix((np.ones(hit_rows.size), (hit_rows, hit_cols)), shape=above.shape)


def _predictions(targets: MetricTargets, votes: np.ndarray, n_neighbours: np.ndarray) -> np.ndarray:
    """The class with most votes (the first on ties), labels with a strict majority, or the neighbour mean."""
    if targets.target_type == "single_label":
        return votes.argmax(axis=1)
    if targets.target_type == "multi_label":
        return (2 * votes > n_neighbours[:, None]).astype(np.int8)
    return votes / n_neighbours[:, None]

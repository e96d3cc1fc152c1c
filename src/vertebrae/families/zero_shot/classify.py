"""Prompt prototypes and exact, blocked nearest-prototype classification.

Prototypes (cosine): every prompt embedding is L2-normalized, the prompts of a
class are averaged, and the mean is L2-normalized again, so each prompt weighs the
same whatever its norm.  With ``similarity="dot"`` nothing is normalized: a
prototype is the plain mean of its prompts' embeddings and samples keep their norm
(for encoders trained with an unnormalized inner product).

Scoring is blocked so the samples x classes similarity matrix never needs more
than ``max_dense_bytes``.  BLAS results for a row depend on the shape of the product
and the row's position in it (OpenBLAS picks kernels and K-splits by shape), so
every product here has one fixed shape: tiles of :func:`tile_rows` sample rows
(a function of the class count only) starting at multiples of the tile size.  A
block is a whole number of tiles, hence every similarity — and every prediction —
is bit-identical whatever the budget.

Cosine similarity of a sample to every prototype is its raw product divided by the
sample's norm, a positive factor of the row: the order of the classes (hence the
prediction and the rank of the true class) is taken from the raw products, and only
the reported best / second-best similarities are divided by the norm.

Tie rule (deterministic): at equal similarity the class earlier in label catalog
order ranks first, so the prediction is the first maximum (``argmax``) and the
rank of the true class counts the classes scoring strictly higher plus the tied
classes before it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..._base.sparse import is_sparse
from ...errors import ConfigError, ExtractorError

#: Bounds of the sample rows per BLAS product.  Small products are slow with several BLAS
#: threads on a busy machine (10,000 x 1,000 x 384 float32 on 2 shared cores, median of 7:
#: 2.81 s in 256-row products, 0.46 s in 1,024-row, 0.31 s in 4,096-row, 0.29 s in one
#: product; with one thread all took 0.25-0.27 s), so a tile holds about 16 MiB of similarities.
MIN_TILE_ROWS, MAX_TILE_ROWS = 64, 4096
_TILE_CELLS = 2**22
#: Bytes per sample row and class held by a block: its float32 similarity, plus at most one for ranking (a
#: float32 threshold and a boolean comparison per cell of a chunk of an eighth of the block's rows, at least one row).
_BYTES_PER_CELL = 5
#: Similarities ranked per chunk, right after their tile's product: about 2 MiB, so the passes over them
#: (threshold comparison, row counts, argmax, max) mostly read from cache rather than from main memory.
_RANK_CELLS = 2**19
TIE_RULE = ("at equal similarity the class earlier in label catalog order ranks first (the prediction is the first "
            "maximum; a true class tied with others ranks after the tied classes before it)")
ENSEMBLE_RULE = {"cosine": "each prompt embedding L2-normalized, averaged per class, the mean L2-normalized again",
                 "dot": "plain mean of the class's prompt embeddings (no normalization)"}


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """How many sample rows one similarity block holds under the budget."""

    tile_rows: int
    rows_per_block: int
    n_blocks: int
    peak_bytes: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def tile_rows(n_classes: int) -> int:
    """Sample rows per BLAS product: a multiple of 64 holding about 16 MiB of similarities, from the class count only."""
    rows = (_TILE_CELLS // n_classes) // MIN_TILE_ROWS * MIN_TILE_ROWS
    return min(MAX_TILE_ROWS, max(MIN_TILE_ROWS, rows))


def plan_blocks(n_samples: int, n_classes: int, max_dense_bytes: int, block_rows: int | None) -> BlockPlan:
    """Whole tiles per block: as many as the budget (and ``block_rows``, rounded down to tiles) allow."""
    tile = tile_rows(n_classes)
    tile_bytes = tile * n_classes * _BYTES_PER_CELL
    if max_dense_bytes < tile_bytes:
        raise ConfigError(f"ZeroShotConfig.max_dense_bytes={max_dense_bytes} is too small to score {n_classes} "
                          f"classes; one tile of {tile} samples needs {tile_bytes} bytes. Raise the budget.")
    tiles = max_dense_bytes // tile_bytes
    if block_rows is not None:
        tiles = min(tiles, max(1, block_rows // tile))
    tiles = min(tiles, -(-n_samples // tile))
    rows = tiles * tile
    held = min(rows, n_samples)
    return BlockPlan(tile, rows, -(-n_samples // rows), held * n_classes * _BYTES_PER_CELL)


@dataclasses.dataclass
class Prototypes:
    """One float32 prototype per class (catalog order) and how they were made."""

    matrix: np.ndarray
    metadata: dict[str, Any]


def build_prototypes(prompt_embeddings: Any, prompt_classes: np.ndarray, class_names: list[str],
                     prompts: list[str], similarity: str) -> Prototypes:
    """Class prototypes from the prompt embeddings (rows in declaration order)."""
    E = prompt_embeddings.toarray() if is_sparse(prompt_embeddings) else np.asarray(prompt_embeddings)
    E = E.astype(np.float64)  # a copy, normalized in place
    n_classes = len(class_names)
    if similarity == "cosine":
        norms = np.sqrt(np.einsum("ij,ij->i", E, E))
        zero = np.flatnonzero(norms == 0)
        if zero.size:
            shown = ", ".join(f"{prompts[i]!r} (class {class_names[prompt_classes[i]]!r})" for i in zero[:5])
            raise ExtractorError(f"the encoder embedded prompt(s) {shown} as the zero vector, which has no direction "
                                 "for cosine similarity; change the prompt or use similarity='dot'")
        E /= norms[:, None]
    prompt_classes = np.asarray(prompt_classes)
    if np.any(np.diff(prompt_classes) < 0):  # group each class's prompts, keeping declaration order
        order = np.argsort(prompt_classes, kind="stable")
        E, prompt_classes = E[order], prompt_classes[order]
    counts = np.bincount(prompt_classes, minlength=n_classes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sums = np.zeros((n_classes, E.shape[1]))
    uniform = counts.min() == counts.max()  # the same number of prompts per class: rows j, j + k, ... are strided
    for j in range(int(counts.max())):  # the j-th prompt of every class at once, in declaration order
        if uniform:
            sums += E[j::counts[0]]
        else:
            has = counts > j
            sums[has] += E[starts[has] + j]
    means = sums  # divided in place into the per-class means
    means /= counts[:, None]
    if similarity == "cosine":
        norms = _row_norms(means)
        cancelled = np.flatnonzero(norms < 1e-12)
        if cancelled.size:
            raise ExtractorError(f"the prompts of class(es) {[class_names[c] for c in cancelled[:5]]} cancel out "
                                 "(their normalized mean is the zero vector); use prompts that agree in direction")
        means /= norms[:, None]
    matrix = np.ascontiguousarray(means, dtype=np.float32)
    norms = _row_norms(matrix.astype(np.float64))
    return Prototypes(matrix, {"n_classes": n_classes, "embedding_dim": int(matrix.shape[1]),
                               "prompts_per_class": counts.tolist(), "ensemble": ENSEMBLE_RULE[similarity],
                               "norm_min": float(norms.min()), "norm_max": float(norms.max())})


def _row_norms(matrix: np.ndarray) -> np.ndarray:
    """``np.linalg.norm(matrix, axis=1)`` of a real float64 matrix (the same operations, minus its conjugate copy)."""
    return np.sqrt(np.add.reduce(matrix * matrix, axis=1))


@dataclasses.dataclass
class Classification:
    """Per-sample outcome of nearest-prototype classification (codes in catalog order)."""

    predictions: np.ndarray  # int32 predicted class code
    true_rank: np.ndarray  # int32 rank of the true class (0 = predicted)
    top1: np.ndarray  # float32 best similarity
    top2: np.ndarray  # float32 second-best similarity
    n_zero_rows: int = 0

    @property
    def margins(self) -> np.ndarray:
        return self.top1 - self.top2


def classify(samples: Any, prototypes: np.ndarray, codes: np.ndarray, similarity: str, plan: BlockPlan
             ) -> Classification:
    """Blocked nearest-prototype classification of every sample row (see the module docstring)."""
    n, n_classes = samples.shape[0], prototypes.shape[0]
    if samples.shape[1] != prototypes.shape[1]:
        raise ExtractorError(f"sample embeddings have {samples.shape[1]} columns but prompt embeddings have "
                             f"{prototypes.shape[1]}; both branches must embed into the same space")
    sparse = is_sparse(samples)
    if sparse and samples.dtype != np.float32:
        samples = samples.astype(np.float32)
    transposed = np.ascontiguousarray(prototypes.T)
    inverse_norms = _inverse_norms(samples) if similarity == "cosine" else None
    out = Classification(np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.float32),
                         np.empty(n, np.float32), 0 if inverse_norms is None else int((inverse_norms == 0).sum()))
    held = min(plan.rows_per_block, n)
    chunk = max(1, min(_RANK_CELLS // n_classes, held // 8))  # rows ranked at once (rows are independent)
    block = np.empty((held, n_classes), dtype=np.float32)
    mask = np.empty((chunk, n_classes), dtype=bool)
    rows = np.arange(mask.shape[0])
    for start in range(0, n, plan.rows_per_block):
        stop = min(start + plan.rows_per_block, n)
        for tile in range(start, stop, plan.tile_rows):
            end = min(tile + plan.tile_rows, n)
            part = samples[tile:end]
            target = block[tile - start:end - start]
            if sparse:
                target[...] = part @ transposed
            elif part.dtype == np.float32:
                np.matmul(part, transposed, out=target)
            else:
                np.matmul(part.astype(np.float32), transposed, out=target)
            for first in range(tile, end, chunk):  # ranked while the tile's similarities are still in cache
                last = min(first + chunk, end)
                _rank_chunk(target[first - tile:last - tile], mask[: last - first], codes[first:last],
                            rows[: last - first], out, first)
    if inverse_norms is not None:  # a positive per-row factor: ranks and argmax need only the raw products
        out.top1 *= inverse_norms
        out.top2 *= inverse_norms
    return out


def _inverse_norms(samples: Any) -> np.ndarray:
    """1 / ||row|| as float32 (0 for all-zero rows, whose similarities are then all 0: a full tie)."""
    if is_sparse(samples):
        squared = np.asarray(samples.multiply(samples).sum(axis=1), dtype=np.float64).ravel()
    else:
        squared = np.einsum("ij,ij->i", samples, samples, dtype=np.float64)
    norms = np.sqrt(squared)
    return np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)


def _row_counts(mask: np.ndarray) -> np.ndarray:
    """True values per row (a 16-bit accumulator when the row is short enough: it adds faster than 32 bits)."""
    counter = np.uint16 if mask.shape[1] <= np.iinfo(np.uint16).max else np.int32
    return np.add.reduce(mask.view(np.uint8), axis=1, dtype=counter)


def _rank_chunk(scores: np.ndarray, mask: np.ndarray, codes: np.ndarray, rows: np.ndarray, out: Classification,
                start: int) -> None:
    """Rank of the true class, prediction, best and second-best similarity of each row of one chunk.

    The rank counts the classes scoring above the true class, plus the tied classes before it, in one
    comparison per similarity: classes after the true class must exceed its similarity ``t``, classes
    before it must reach it (``s >= t`` is ``s > nextafter(t, -inf)`` for finite floats).  The thresholds
    are laid out row by row as runs (``code`` values below ``t``, then ``n_classes - code`` values ``t``).
    """
    stop = start + scores.shape[0]
    true_scores = scores[rows, codes]
    runs = np.stack([np.nextafter(true_scores, -np.inf), true_scores], axis=1).ravel()
    lengths = np.stack([codes, scores.shape[1] - codes], axis=1).ravel()
    np.greater(scores.reshape(-1), np.repeat(runs, lengths), out=mask.reshape(-1))
    predictions = scores.argmax(axis=1)
    out.predictions[start:stop] = predictions
    out.true_rank[start:stop] = _row_counts(mask)
    out.top1[start:stop] = scores[rows, predictions]
    scores[rows, predictions] = -np.inf
    out.top2[start:stop] = scores.max(axis=1)

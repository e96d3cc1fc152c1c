"""Relational units: nodes, edges, entities, pairs and triplets as ordinary labelled embedding rows.

Each constructor materializes one row per unit and returns a plain
:class:`~vertebrae.inputs.datasets.BenchmarkDataset`, so the ordinary benchmark scores it
(supervised overlap of the units' labels, not link prediction).  Rows derived from
endpoint embeddings are *composed*:

- ``concat``: ``[a, b]`` (order-sensitive; width ``2d``)
- ``hadamard``: ``a * b``
- ``abs_diff``: ``|a - b|``
- ``average``: ``(a + b) / 2``

A triplet (anchor, positive, negative) becomes ``[compose(anchor, positive),
compose(anchor, negative)]``.  The summary's ``structure`` records
``relational_unit`` and the composition, so reports show how rows were made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._base.config import FrozenDict
from .datasets import BenchmarkDataset
from ..errors import InputTypeError, InputValidationError
from .identity import DatasetIdentity
from .labels import semantic_key

COMPOSITIONS = ("concat", "hadamard", "abs_diff", "average")
SELF_LOOP_POLICIES = ("error", "allow")


def compose(a: np.ndarray, b: np.ndarray, composition: str) -> np.ndarray:
    """Row-wise composition of two endpoint matrices (see the module docstring)."""
    if composition == "concat":
        return np.hstack([a, b])
    if composition == "hadamard":
        return a * b
    if composition == "abs_diff":
        return np.abs(a - b)
    return (a + b) / 2.0


def _check_composition(composition: Any) -> str:
    if composition not in COMPOSITIONS:
        raise InputValidationError(f"composition must be one of {list(COMPOSITIONS)}, got {composition!r}")
    return composition


def _dense(matrix: Any, argument: str, n_rows: int | None = None) -> np.ndarray:
    array = np.asarray(matrix)
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InputValidationError(f"{argument} must be a 2-D numeric array (one embedding per row), got shape "
                                   f"{array.shape} and dtype {array.dtype}")
    if n_rows is not None and array.shape[0] != n_rows:
        raise InputValidationError(f"{argument} has {array.shape[0]} rows but {n_rows} were expected; give one "
                                   "embedding per unit")
    return array.astype(np.float64 if array.dtype == np.float64 else np.float32, copy=False)


def _id_index(ids: Any, argument: str, n_rows: int) -> dict[Any, int]:
    """Semantic key of each id -> its row; ids must be unique and one per row."""
    values = list(ids.tolist() if isinstance(ids, np.ndarray) else ids)
    if len(values) != n_rows:
        raise InputValidationError(f"{argument} has {len(values)} ids but there are {n_rows} embedding rows; give "
                                   "one id per row")
    index: dict[Any, int] = {}
    for i, value in enumerate(values):
        try:
            key = semantic_key(value)
        except (ValueError, TypeError) as exc:
            raise InputTypeError(f"{argument}[{i}]: {exc}") from None
        if key in index:
            raise InputValidationError(f"{argument}[{i}] repeats id {value!r} (first at row {index[key]}); node and "
                                       "entity ids must be unique")
        index[key] = i
    return index


def _edges(edge_index: Any, ids: dict[Any, int], *, self_loops: str, directed: bool) -> np.ndarray:
    """``(n_edges, 2)`` endpoint rows of ``edge_index`` (``(2, E)`` or ``(E, 2)`` node ids), validated."""
    if self_loops not in SELF_LOOP_POLICIES:
        raise InputValidationError(f"self_loops must be one of {list(SELF_LOOP_POLICIES)}, got {self_loops!r}")
    array = np.asarray(edge_index, dtype=object)
    if array.ndim != 2 or 2 not in array.shape:
        raise InputValidationError(f"edge_index must have shape (2, n_edges) or (n_edges, 2), got {array.shape}")
    pairs = array.T if array.shape[0] == 2 and array.shape[1] != 2 else array
    rows = np.empty((len(pairs), 2), dtype=np.int64)
    seen: dict[tuple[int, int], int] = {}
    for e, (source, target) in enumerate(pairs):
        for side, node in enumerate((source, target)):
            try:
                rows[e, side] = ids[semantic_key(node.item() if isinstance(node, np.generic) else node)]
            except (KeyError, ValueError, TypeError):
                raise InputValidationError(f"edge_index edge {e} refers to unknown node {node!r}; every endpoint "
                                           "must be one of node_ids") from None
        if rows[e, 0] == rows[e, 1] and self_loops == "error":
            raise InputValidationError(f"edge_index edge {e} is a self-loop on node {source!r}; remove it or pass "
                                       "self_loops='allow'")
        key = (int(rows[e, 0]), int(rows[e, 1]))
        key = key if directed else tuple(sorted(key))
        if key in seen:
            raise InputValidationError(f"edge_index edge {e} ({source!r}, {target!r}) duplicates edge {seen[key]}"
                                       + ("" if directed else " (the graph is undirected)")
                                       + "; give each edge once")
        seen[key] = e
    return rows


def _dataset(rows: np.ndarray, labels: Any, structure: dict[str, Any], *, identity: DatasetIdentity | None,
             target_type: str | None, groups: Any, name: str | None) -> BenchmarkDataset:
    dataset = BenchmarkDataset.from_embeddings(rows, labels, identity=identity, target_type=target_type,
                                               groups=groups, name=name)
    return dataclasses.replace(dataset, structure=FrozenDict({"family": "relational", **structure}))


def from_node_embeddings(embeddings: Any, labels: Any, node_ids: Sequence[Any], edge_index: Any = None, *,
                         identity: DatasetIdentity | None = None, target_type: str | None = None,
                         self_loops: str = "error", directed: bool = False, groups: Any = None,
                         name: str | None = None) -> BenchmarkDataset:
    """One row per node (its embedding, its label); ``edge_index`` is validated against ``node_ids`` and counted."""
    matrix = _dense(embeddings, "embeddings")
    ids = _id_index(node_ids, "node_ids", matrix.shape[0])
    structure: dict[str, Any] = {"relational_unit": "node", "n_nodes": matrix.shape[0]}
    if edge_index is not None:
        structure.update(n_edges=len(_edges(edge_index, ids, self_loops=self_loops, directed=directed)),
                         directed=directed, self_loops=self_loops)
    return _dataset(matrix, labels, structure, identity=identity, target_type=target_type, groups=groups, name=name)


def from_edge_embeddings(labels: Any, edge_index: Any, *, node_embeddings: Any, node_ids: Sequence[Any],
                         composition: str = "concat", identity: DatasetIdentity | None = None,
                         target_type: str | None = None, self_loops: str = "error", directed: bool = False,
                         groups: Any = None, name: str | None = None) -> BenchmarkDataset:
    """One row per edge: ``compose(source embedding, target embedding)``, labelled by the edge's label."""
    composition = _check_composition(composition)
    nodes = _dense(node_embeddings, "node_embeddings")
    ids = _id_index(node_ids, "node_ids", nodes.shape[0])
    ends = _edges(edge_index, ids, self_loops=self_loops, directed=directed)
    rows = compose(nodes[ends[:, 0]], nodes[ends[:, 1]], composition)
    structure = {"relational_unit": "edge", "composition": {"method": composition, "operands": ["source", "target"],
                                                            "endpoint_dim": nodes.shape[1]},
                 "n_nodes": nodes.shape[0], "n_edges": len(ends), "directed": directed, "self_loops": self_loops}
    return _dataset(rows, labels, structure, identity=identity, target_type=target_type, groups=groups, name=name)


def from_entity_embeddings(embeddings: Any, labels: Any, entity_ids: Sequence[Any], *,
                           identity: DatasetIdentity | None = None, target_type: str | None = None,
                           groups: Any = None, name: str | None = None) -> BenchmarkDataset:
    """One row per entity (ids must be unique)."""
    matrix = _dense(embeddings, "embeddings")
    _id_index(entity_ids, "entity_ids", matrix.shape[0])
    structure = {"relational_unit": "entity", "n_entities": matrix.shape[0]}
    return _dataset(matrix, labels, structure, identity=identity, target_type=target_type, groups=groups, name=name)


def from_pair_embeddings(left: Any, right: Any, labels: Any, *, composition: str = "concat",
                         identity: DatasetIdentity | None = None, target_type: str | None = None,
                         groups: Any = None, name: str | None = None) -> BenchmarkDataset:
    """One row per pair: ``compose(left[i], right[i])``, labelled by the pair's label."""
    composition = _check_composition(composition)
    a = _dense(left, "left")
    b = _dense(right, "right", a.shape[0])
    _same_width(("left", a), ("right", b))
    structure = {"relational_unit": "pair", "n_pairs": a.shape[0],
                 "composition": {"method": composition, "operands": ["left", "right"], "endpoint_dim": a.shape[1]}}
    return _dataset(compose(a, b, composition), labels, structure, identity=identity, target_type=target_type,
                    groups=groups, name=name)


def from_triplet_embeddings(anchor: Any, positive: Any, negative: Any, labels: Any, *, composition: str = "abs_diff",
                            identity: DatasetIdentity | None = None, target_type: str | None = None,
                            groups: Any = None, name: str | None = None) -> BenchmarkDataset:
    """One row per triplet: ``[compose(anchor, positive), compose(anchor, negative)]``."""
    composition = _check_composition(composition)
    a = _dense(anchor, "anchor")
    p, n = _dense(positive, "positive", a.shape[0]), _dense(negative, "negative", a.shape[0])
    _same_width(("anchor", a), ("positive", p), ("negative", n))
    rows = np.hstack([compose(a, p, composition), compose(a, n, composition)])
    structure = {"relational_unit": "triplet", "n_triplets": a.shape[0],
                 "composition": {"method": composition, "operands": ["anchor", "positive", "negative"],
                                 "pairing": "[compose(anchor, positive), compose(anchor, negative)]",
                                 "endpoint_dim": a.shape[1]}}
    return _dataset(rows, labels, structure, identity=identity, target_type=target_type, groups=groups, name=name)


def _same_width(*named: tuple[str, np.ndarray]) -> None:
    widths = {name: m.shape[1] for name, m in named}
    if len(set(widths.values())) > 1:
        raise InputValidationError(f"endpoint embeddings must have one width to be composed, got {widths}")

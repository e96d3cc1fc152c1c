"""Relational units on a generated graph with planted communities; fidelity against a plain benchmark."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, InputValidationError, PrecomputedExtractor
from vertebrae import SeparatixConfig
from vertebrae.inputs import relational

IDENTITY = DatasetIdentity.declared("planted-graph", "1")


def planted_graph(seed: int = 0, n_per: int = 30, k: int = 3, dim: int = 6):
    """Stochastic block model: nodes near their community centre, dense intra- and sparse inter-community edges."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, size=(k, dim))
    community = np.repeat(np.arange(k), n_per)
    nodes = (centres[community] + rng.normal(size=(k * n_per, dim))).astype(np.float32)
    ids = [f"n{i}" for i in range(k * n_per)]
    edges, kinds = [], []
    for i in range(k * n_per):
        for j in range(i + 1, k * n_per):
            same = community[i] == community[j]
            if rng.random() < (0.12 if same else 0.02):
                edges.append((ids[i], ids[j]))
                kinds.append("intra" if same else "inter")
    return nodes, community, ids, np.array(edges, dtype=object).T, np.array(kinds)


@pytest.fixture(scope="module")
def graph():
    return planted_graph()


def _run(dataset: BenchmarkDataset):
    return Benchmark(dataset, [PrecomputedExtractor("graph")], separatix_config=SeparatixConfig(enabled=False)).run()


@pytest.mark.parametrize("composition, by_hand", [
    ("concat", lambda a, b: np.hstack([a, b])), ("hadamard", lambda a, b: a * b),
    ("abs_diff", lambda a, b: np.abs(a - b)), ("average", lambda a, b: (a + b) / 2)])
def test_edge_rows_are_the_composed_endpoints_and_score_like_a_plain_benchmark(graph, composition, by_hand):
    nodes, _, ids, edge_index, kinds = graph
    dataset = relational.from_edge_embeddings(kinds, edge_index, node_embeddings=nodes, node_ids=ids,
                                              composition=composition, identity=IDENTITY)
    position = {node: i for i, node in enumerate(ids)}
    src = nodes[[position[s] for s in edge_index[0]]]
    dst = nodes[[position[t] for t in edge_index[1]]]
    expected = by_hand(src, dst)
    np.testing.assert_allclose(dataset.embeddings, expected, rtol=1e-6)
    plain = BenchmarkDataset.from_embeddings(expected, kinds, identity=IDENTITY)
    ours, reference = _run(dataset).extractor_results[0], _run(plain).extractor_results[0]
    assert ours.overlap.score == pytest.approx(reference.overlap.score, abs=1e-12)
    assert ours.overlap.per_class_scores == reference.overlap.per_class_scores
    structure = dataset.summary()["structure"]
    assert structure["relational_unit"] == "edge"
    assert structure["composition"]["method"] == composition
    assert structure["n_edges"] == len(kinds) == dataset.n_samples


def test_node_rows_separate_planted_communities_and_reports_carry_the_unit(graph, tmp_path):
    nodes, community, ids, edge_index, _ = graph
    dataset = relational.from_node_embeddings(nodes, community, ids, edge_index, identity=IDENTITY)
    result = _run(dataset)
    reference = _run(BenchmarkDataset.from_embeddings(nodes, community, identity=IDENTITY))
    assert result.extractor_results[0].overlap.score == pytest.approx(
        reference.extractor_results[0].overlap.score, abs=1e-12)
    assert result.extractor_results[0].overlap.score > 0.9  # planted communities are well separated
    data = json.loads(result.to_json())
    assert data["dataset_summary"]["structure"] == {"family": "relational", "relational_unit": "node",
                                                    "n_nodes": 90, "n_edges": edge_index.shape[1],
                                                    "directed": False, "self_loops": "error"}
    markdown = result.to_markdown()
    assert "## Dataset structure" in markdown and "| relational_unit | node |" in markdown
    page = (tmp_path / "report.html")
    result.save_html(page)
    assert "<td>relational_unit</td><td>node</td>" in page.read_text().replace("\n", "").replace("<wbr>", "")


def test_entity_pair_and_triplet_rows(graph):
    nodes, community, ids, _, _ = graph
    entity = relational.from_entity_embeddings(nodes, community, ids, identity=IDENTITY)
    assert entity.summary()["structure"]["relational_unit"] == "entity"
    rng = np.random.default_rng(1)
    left, right = rng.integers(0, 90, 60), rng.integers(0, 90, 60)
    same = community[left] == community[right]
    pair = relational.from_pair_embeddings(nodes[left], nodes[right], same, composition="abs_diff",
                                           identity=IDENTITY)
    np.testing.assert_allclose(pair.embeddings, np.abs(nodes[left] - nodes[right]))
    assert pair.summary()["structure"]["composition"]["operands"] == ["left", "right"]
    negative = rng.integers(0, 90, 60)
    triplet = relational.from_triplet_embeddings(nodes[left], nodes[right], nodes[negative], community[left],
                                                 composition="hadamard", identity=IDENTITY)
    np.testing.assert_allclose(triplet.embeddings,
                               np.hstack([nodes[left] * nodes[right], nodes[left] * nodes[negative]]))
    assert triplet.summary()["structure"]["relational_unit"] == "triplet"
    assert triplet.embeddings.shape == (60, 12)


def test_edge_index_shape_e_by_2_is_accepted(graph):
    nodes, _, ids, edge_index, kinds = graph
    a = relational.from_edge_embeddings(kinds, edge_index, node_embeddings=nodes, node_ids=ids, identity=IDENTITY)
    b = relational.from_edge_embeddings(kinds, edge_index.T, node_embeddings=nodes, node_ids=ids, identity=IDENTITY)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)


@pytest.mark.parametrize("edges, kwargs, message", [
    ([("a", "zz")], {}, "edge 0 refers to unknown node 'zz'"),
    ([("a", "a")], {}, "edge 0 is a self-loop on node 'a'"),
    ([("a", "b"), ("b", "a")], {}, "edge 1 ('b', 'a') duplicates edge 0 (the graph is undirected)"),
    ([("a", "b"), ("a", "b")], {"directed": True}, "edge 1 ('a', 'b') duplicates edge 0"),
    ([("a", "b")], {"composition": "sum"}, "composition must be one of"),
    ([("a", "b")], {"self_loops": "drop"}, "self_loops must be one of"),
])
def test_bad_edges_are_rejected_with_the_offending_edge(edges, kwargs, message):
    nodes = np.eye(3, dtype=np.float32)
    with pytest.raises(InputValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        relational.from_edge_embeddings(["x"] * len(edges), np.array(edges, dtype=object),
                                        node_embeddings=nodes, node_ids=["a", "b", "c"], identity=IDENTITY, **kwargs)


def test_self_loops_allowed_when_asked_and_duplicate_ids_rejected():
    nodes = np.eye(3, dtype=np.float32)
    allowed = relational.from_edge_embeddings(["x", "y", "x", "y"], [("a", "a"), ("b", "b"), ("a", "b"), ("b", "c")],
                                              node_embeddings=nodes, node_ids=["a", "b", "c"], self_loops="allow",
                                              identity=IDENTITY)
    assert allowed.n_samples == 4
    with pytest.raises(InputValidationError, match=r"node_ids\[2\] repeats id 'a' \(first at row 0\)"):
        relational.from_node_embeddings(nodes, [0, 1, 0], ["a", "b", "a"], identity=IDENTITY)
    with pytest.raises(InputValidationError, match="node_ids has 2 ids but there are 3 embedding rows"):
        relational.from_node_embeddings(nodes, [0, 1, 0], ["a", "b"], identity=IDENTITY)
    with pytest.raises(InputValidationError, match="endpoint embeddings must have one width"):
        relational.from_pair_embeddings(nodes, np.eye(3, 4), [0, 1, 0], identity=IDENTITY)

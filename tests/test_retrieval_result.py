"""RetrievalBenchmarkResult: JSON round trip and determinism, Markdown, DataFrame, ranking, combine."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from vertebrae import DatasetIdentity
from vertebrae.errors import DataWarning, InputTypeError, InputValidationError, SerializationError
from vertebrae.execution.plan import artifact_key
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.families.retrieval import (PrecomputedPairExtractor, RetrievalBenchmark, RetrievalBenchmarkResult,
                                              RetrievalConfig, RetrievalDataset, TwoBranchExtractor)
from vertebrae.families.retrieval.report import render_markdown

IDENTITY = DatasetIdentity.declared("retrieval-result", "1")
CONFIG = RetrievalConfig(cutoffs=[1, 5], bidirectional=True)


def data(seed: int = 0, n_gallery: int = 20):
    rng = np.random.default_rng(seed)
    queries, gallery = rng.normal(size=(8, 5)), rng.normal(size=(n_gallery, 5))
    gallery[:8] = queries + 0.5 * rng.normal(size=(8, 5))
    relevance = [(f"q|{i}", f"doc\n{i}", 1 + i % 3) for i in range(8)] + [("q|0", "doc\n9", 1)]
    return queries, gallery, relevance


def dataset(seed: int = 0, identity: DatasetIdentity = IDENTITY, **kwargs) -> RetrievalDataset:
    queries, gallery, relevance = data(seed, **kwargs)
    return RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance,
                                            query_ids=[f"q|{i}" for i in range(8)],
                                            gallery_ids=[f"doc\n{i}" for i in range(len(gallery))], identity=identity)


def run(extractors, ds=None, config=CONFIG) -> RetrievalBenchmarkResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return RetrievalBenchmark(ds or dataset(), extractors, retrieval_config=config, progress=False).run()


def noise(name: str, seed: int) -> PrecomputedPairExtractor:
    rng = np.random.default_rng(seed)
    return PrecomputedPairExtractor(name, rng.normal(size=(8, 5)), rng.normal(size=(20, 5)))


@pytest.fixture(scope="module")
def result() -> RetrievalBenchmarkResult:
    return run([PrecomputedExtractor("own | best"), noise("noise", 1), noise("noise 2", 2)])


# ----------------------------------------------------------------------------- JSON
def test_json_round_trip_reconstructs_an_equal_result(result, tmp_path):
    path = result.save_json(tmp_path / "retrieval.json")
    loaded = RetrievalBenchmarkResult.load(path)
    assert loaded == result
    assert RetrievalBenchmarkResult.from_json(result.to_json()) == result
    assert loaded.to_json() == result.to_json()
    assert loaded.config == CONFIG


def test_json_is_byte_identical_across_runs_except_timing(result):
    again = run([PrecomputedExtractor("own | best"), noise("noise", 1), noise("noise 2", 2)])
    first, second = json.loads(result.to_json()), json.loads(again.to_json())
    assert first["timing"] != second["timing"]  # start time and runtimes differ...
    assert set(first["timing"]) == {"started_at", "host", "runtime"}  # the run envelope's timing (docs/results.md)
    first.pop("timing"), second.pop("timing")
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)  # ...nothing else does


def test_json_keeps_the_complete_protocol(result):
    protocol = json.loads(result.to_json())["protocol"]
    assert protocol["config"] == CONFIG.to_dict()
    assert protocol["fingerprint"] == dataset().fingerprint
    assert protocol["identity"] == IDENTITY.to_dict()
    assert protocol["n_queries"] == 8 and protocol["n_gallery"] == 20 and protocol["n_relevant_pairs"] == 9
    assert protocol["tie_rule"].startswith("pessimistic")
    assert "block_plan" not in protocol  # execution detail, recorded per direction
    assert result["own | best"].forward.block_plan["rows_per_block"] == 8


def test_json_is_strict_with_undefined_diagnostics():
    ds = RetrievalDataset.from_embeddings(np.eye(2), np.eye(2), relevance=np.ones((2, 2)), identity=IDENTITY)
    result = run([PrecomputedExtractor("own")], ds, RetrievalConfig(cutoffs=[1]))
    text = result.to_json()
    assert "NaN" not in text and json.loads(text)["extractor_results"][0]["forward"]["diagnostics"]["similarity_margin"] is None


@pytest.mark.parametrize("payload, message", [
    ({"result_type": "benchmark", "schema_version": 1}, "not a vertebrae retrieval result"),
    ({"result_type": "retrieval", "schema_version": 99}, "not a vertebrae retrieval result"),
    ({"result_type": "retrieval", "schema_version": 1, "protocol": {}}, r"\$: missing key .entries."),
    ([1, 2], "not a vertebrae retrieval result"),
])
def test_malformed_json_is_a_serialization_error(payload, message):
    with pytest.raises(SerializationError, match=message):
        RetrievalBenchmarkResult.from_json(json.dumps(payload))


def test_invalid_json_text_is_a_serialization_error():
    with pytest.raises(SerializationError, match="not valid JSON"):
        RetrievalBenchmarkResult.from_json("{")


# ----------------------------------------------------------------------------- views
def test_ranked_results_and_dataframe(result):
    ranked = result.ranked_results()
    assert ranked[0].name == "own | best"
    assert [e.primary_score for e in ranked] == sorted((e.primary_score for e in ranked), reverse=True)
    frame = result.to_dataframe()
    assert list(frame["extractor"]) == [e.name for e in ranked]
    assert list(frame["rank"]) == [1, 2, 3]
    for column in ("primary_metric", "primary_score", "forward.ndcg@10", "reverse.ndcg@10", "forward.map",
                   "forward.hit_rate@5", "reverse.similarity_margin", "query_embedding_dim", "gallery_embedding_dim",
                   "runtime.rank_forward", "runtime.rank_reverse", "runtime.encode_queries"):
        assert column in frame.columns, column
    assert set(frame["primary_metric"]) == {"ndcg@10"}
    row = frame.iloc[0]
    assert row["primary_score"] == pytest.approx((row["forward.ndcg@10"] + row["reverse.ndcg@10"]) / 2)


def test_tied_primary_scores_share_a_rank_in_input_order():
    queries, gallery, _ = data()
    tied = run([PrecomputedExtractor("b"), PrecomputedPairExtractor("a", queries * 3, gallery)])  # cosine: same space
    assert tied["a"].primary_score == tied["b"].primary_score
    assert [row["rank"] for row in tied.rows()] == [1, 1]
    assert [e.name for e in tied.ranked_results()] == ["b", "a"]  # the one tie rule: input order, not by name


def test_markdown_is_rendered_from_the_serialized_dict(result, tmp_path):
    text = result.to_markdown()
    assert text == render_markdown(json.loads(result.to_json()))
    assert text == render_markdown(json.loads(RetrievalBenchmarkResult.load(result.save_json(tmp_path / "r.json"))
                                              .to_json()))
    for heading in ("## Ranking", "## Metrics per cutoff", "## Full-ranking metrics and similarity diagnostics",
                    "## Protocol", "## Extractors", "## Warnings"):
        assert heading in text
    assert "Ranked by **ndcg@10**" in text and "mean of forward and reverse" in text
    assert "| 1 | own \\| best |" in text  # pipes in names are escaped by the shared cell renderer
    assert "reverse direction: 11 of 20 gallery item(s)" in text
    assert result.save_markdown(tmp_path / "r.md").read_text(encoding="utf-8") == text


def test_markdown_tables_keep_their_shape_with_hostile_names():
    result = run([PrecomputedExtractor("pipe | and\nnewline"), noise("noise", 1)])
    tables, current = [], []
    for line in result.to_markdown().splitlines() + [""]:
        if line.startswith("|"):
            current.append(line.replace("\\|", ""))  # escaped pipes are cell content
        elif current:
            tables.append(current)
            current = []
    assert len(tables) == 5
    for rows in tables:
        assert len({row.count("|") for row in rows}) == 1, rows[0]
    assert "pipe \\| and<br>newline" in result.to_markdown()


# ----------------------------------------------------------------------------- combine
def test_combine_merges_runs_of_the_same_protocol():
    first = run([PrecomputedExtractor("own")])
    second = run([noise("noise", 1)])
    combined = RetrievalBenchmarkResult.combine([first, second])
    assert [e.name for e in combined.ranked_results()] == ["own", "noise"]
    assert combined.protocol == first.protocol
    assert [run["extractors"] for run in combined.timing["runs"]] == [["own"], ["noise"]]
    assert combined.timing["runs"][1]["started_at"] == second.timing["started_at"]
    assert "started_at" not in combined.timing  # a combined result lists its runs
    plan = first.metadata["plan"] + second.metadata["plan"]
    assert combined.metadata == {"run_key": artifact_key("run", [job["key"] for job in plan]), "plan": plan,
                                 "versions": first.metadata["versions"]}
    assert RetrievalBenchmarkResult.from_json(combined.to_json()) == combined
    assert combined["noise"].runtime == second["noise"].runtime
    again = RetrievalBenchmarkResult.combine([combined, run([noise("noise 2", 2)])])
    assert [run["extractors"] for run in again.timing["runs"]] == [["own"], ["noise"], ["noise 2"]]


def test_combine_rejects_other_package_versions():
    first, second = run([PrecomputedExtractor("own")]), run([noise("noise", 1)])
    second.metadata["versions"]["numpy"] = "1.0"
    with pytest.raises(InputValidationError, match=r"different set of package versions .*numpy: '.*' vs '1.0'"):
        RetrievalBenchmarkResult.combine([first, second])


def test_combine_rejects_a_different_configuration():
    other = run([noise("noise", 1)], config=RetrievalConfig(cutoffs=[1, 5], bidirectional=True, similarity="dot"))
    with pytest.raises(InputValidationError, match=r"different retrieval configuration .*'cosine' vs 'dot'"):
        RetrievalBenchmarkResult.combine([run([PrecomputedExtractor("own")]), other])


def test_combine_rejects_a_different_protocol_fingerprint():
    other = run([PrecomputedExtractor("other")], dataset(n_gallery=21))
    with pytest.raises(InputValidationError, match="different protocol fingerprint"):
        RetrievalBenchmarkResult.combine([run([PrecomputedExtractor("own")]), other])


def test_combine_rejects_a_different_identity():
    other = run([noise("noise", 1)], dataset(identity=DatasetIdentity.declared("retrieval-result", "2")))
    with pytest.raises(InputValidationError, match=r"different dataset identity .*revision: '1' vs '2'"):
        RetrievalBenchmarkResult.combine([run([PrecomputedExtractor("own")]), other])


def test_combine_rejects_duplicate_extractors_and_bad_input():
    first = run([PrecomputedExtractor("own")])
    with pytest.raises(InputValidationError, match=r"extractor 'own' appears in results\[0\] and results\[1\]"):
        RetrievalBenchmarkResult.combine([first, run([PrecomputedExtractor("own")])])
    with pytest.raises(InputTypeError, match="non-empty list"):
        RetrievalBenchmarkResult.combine([])
    with pytest.raises(InputTypeError, match=r"results\[1\] is a str"):
        RetrievalBenchmarkResult.combine([first, "result.json"])


def test_getitem_names_known_extractors(result):
    assert math.isfinite(result["noise"].primary_score)
    with pytest.raises(KeyError, match="have"):
        result["missing"]


def test_two_branch_recipes_survive_the_round_trip():
    two = TwoBranchExtractor("dual", np.asarray, np.asarray, params={"shape": (1, 2)})
    result = run([two])
    assert result["dual"].recipe["params"] == {"shape": [1, 2]}
    assert RetrievalBenchmarkResult.from_json(result.to_json()) == result

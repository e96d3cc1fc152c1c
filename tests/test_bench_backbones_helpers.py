"""The pure helpers of benchmarks/bench_backbones.py on generated inputs (no packaged model is needed)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_backbones


def test_parse_fortunes_splits_at_percent_lines_and_resolves_overstriking():
    text = "First one\n  -- someone\n%\n%\nSecond\x08\x08\x08\x08\x08\x08Second\nline\n%\n   \n%\n_\x08a_\x08b\n"
    assert bench_backbones.parse_fortunes(text) == ["First one\n  -- someone", "Second\nline", "ab"]


def test_parse_fortunes_keeps_percent_inside_a_line():
    assert bench_backbones.parse_fortunes("50% off\n%\nlast") == ["50% off", "last"]


def test_topic_pool_draws_distinct_texts_per_topic_and_refuses_a_small_topic():
    files = {"a": "\n%\n".join(f"a{i}" for i in range(6)) + "\n%\na0", "b": "\n%\n".join(f"b{i}" for i in range(4))}
    texts, labels = bench_backbones.topic_pool(files, 3, seed=1)
    assert labels == ["a"] * 3 + ["b"] * 3
    assert len(set(texts)) == 6 and all(t.startswith(label) for t, label in zip(texts, labels))
    assert bench_backbones.topic_pool(files, 3, seed=1) == (texts, labels)
    with pytest.raises(ValueError, match="topic 'b' has 4 distinct texts.*per_topic=5"):
        bench_backbones.topic_pool(files, 5)
    with pytest.raises(ValueError, match="topic 'a' has 6 distinct texts"):  # the repeated a0 counts once
        bench_backbones.topic_pool({"a": files["a"]}, 7)


def _split_zip(tmp_path: Path, n_parts: int) -> tuple[list[Path], bytes]:
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        z.writestr("all-mpnet-base-v2/model.safetensors", bytes(range(256)) * 40)
    data = archive.read_bytes()
    cuts = np.linspace(0, len(data), n_parts + 1).astype(int)
    parts = []
    for i in range(n_parts):
        part = tmp_path / f"part_{i + 1:03d}" / f"m.zip.{i + 1:03d}"
        part.parent.mkdir()
        part.write_bytes(data[cuts[i]:cuts[i + 1]])
        parts.append(part)
    return parts, bytes(range(256)) * 40


def test_reassemble_concatenates_parts_in_order_and_extracts_once(tmp_path):
    parts, weights = _split_zip(tmp_path, 5)
    ordered = bench_backbones.ordered_parts(list(reversed(parts)))
    assert ordered == parts
    folder = bench_backbones.reassemble(ordered, tmp_path / "cache")
    assert folder.name == "all-mpnet-base-v2"
    assert (folder / "model.safetensors").read_bytes() == weights
    (folder / "model.safetensors").write_bytes(b"changed")  # a second call reads the extracted folder as it is
    assert bench_backbones.reassemble(ordered, tmp_path / "cache") == folder
    assert (folder / "model.safetensors").read_bytes() == b"changed"


def test_ordered_parts_names_a_missing_or_repeated_part(tmp_path):
    parts, _ = _split_zip(tmp_path, 3)
    with pytest.raises(ValueError, match=r"parts \[2\] are missing"):
        bench_backbones.ordered_parts([parts[0], parts[2]])
    with pytest.raises(ValueError, match="part 001 twice"):
        bench_backbones.ordered_parts([parts[0], parts[0]])
    with pytest.raises(ValueError, match="install all five"):
        bench_backbones.ordered_parts([])


def test_rename_output_keeps_what_the_graph_computes(tmp_path):
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["onnx::Shape_7"]), helper.make_node("Relu", ["onnx::Shape_7"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3]),
         helper.make_tensor_value_info("onnx::Shape_7", TensorProto.FLOAT, [None, 3])],
        [onnx.numpy_helper.from_array(weight, "w")])
    source = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(source))
    dest = bench_backbones.rename_output(source, 1, "token_states", tmp_path / "out" / "g.onnx")
    x = np.array([[1.0, -2.0], [0.5, 0.25]], dtype=np.float32)
    renamed = onnxruntime.InferenceSession(str(dest), providers=["CPUExecutionProvider"])
    assert [o.name for o in renamed.get_outputs()] == ["y", "token_states"]
    y, states = renamed.run(None, {"x": x})
    np.testing.assert_array_equal(states, x @ weight)
    np.testing.assert_array_equal(y, np.maximum(x @ weight, 0))


def test_bert_parameters_matches_a_bert_model_without_pooler():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=101, hidden_size=24, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=40, max_position_embeddings=64, type_vocab_size=2)
    model = BertModel(config, add_pooling_layer=False)
    assert bench_backbones.bert_parameters(101, 24, 40, 3, positions=64) == sum(p.numel() for p in model.parameters())


def test_rows_embedded_counts_every_row_for_a_backbone_with_a_finalist():
    def result(name, status=None, rows=None):
        return SimpleNamespace(name=name, screening=None if status is None else {"status": status, "rows": rows})

    results = [result("mpnet:layer3_mean", "screened_out", 112), result("mpnet:layer12_mean-pca32", "screened_out", 334),
               result("minilm:layer2_cls", "screened_out", 112), result("minilm:layer6_mean", "finalist", None),
               result("e5", "screened_out", 112), result("tfidf_svd300")]
    assert bench_backbones.rows_embedded(results, 1000) == {"mpnet": 334, "minilm": 1000, "e5": 112,
                                                            "tfidf_svd300": 1000}
    assert bench_backbones.backbone_of("minilm_l3:token_states_max-pca32") == "minilm_l3"

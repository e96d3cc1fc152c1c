"""ONNXTextExtractor: a tiny random BERT exported to ONNX in the test, against HFTextExtractor on the same weights.

The model is built from a config (random weights, MiniLM's bert-base-uncased vocabulary and tokenizer files),
saved with ``save_pretrained`` and exported with ``torch.onnx.export`` — offline, nothing downloads.  The
export outputs the last hidden state and hidden state 1, so two "layers" are compared with HF's layers 2 and 1.
A tiny random RoBERTa, built and exported the same way, checks where texts are cut when positions start past row 0.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from vertebrae import HFTextExtractor, ONNXTextExtractor  # noqa: E402
from vertebrae.cli.model_config import build_extractors, check_extractors  # noqa: E402
from vertebrae.errors import ConfigError, InputValidationError  # noqa: E402

POOLINGS = ["mean", "cls", "max", "last_token"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


class States(torch.nn.Module):
    """The exported graph: token ids and mask in, the last and the first layer's token states out."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         output_hidden_states=True)
        return out.last_hidden_state, out.hidden_states[1]


def export(module, args, path, **kwargs) -> None:
    """The TorchScript exporter (needs only the onnx package; the dynamo one needs onnxscript), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, **kwargs)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, minilm_path):
    folder = tmp_path_factory.mktemp("tiny_bert_onnx")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64, attn_implementation="eager")
    model = transformers.BertModel(config).eval()
    model.save_pretrained(folder / "hf")
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_path / name, folder / "hf" / name)
    # A padded example, so the traced graph keeps the attention mask (an all-ones mask can be optimized away).
    ids = torch.tensor([[101, 2023, 2003, 102, 0], [101, 2023, 2003, 1037, 102]])
    mask = (ids != 0).long()
    dynamic = {0: "batch", 1: "tokens"}
    export(States(model).eval(), (ids, mask, torch.zeros_like(ids)), folder / "model.onnx",
           input_names=["input_ids", "attention_mask", "token_type_ids"],
           output_names=["last_hidden_state", "hidden_state_1"],
           dynamic_axes={name: dynamic for name in ("input_ids", "attention_mask", "token_type_ids",
                                                    "last_hidden_state", "hidden_state_1")})
    return folder


TEXTS = ["a short one", "a much longer text than the first one, with a comma and more words in it",
         "mid length text here", "x", "Capitals And Punctuation!? are lower-cased by the tokenizer",
         "another line", "the quick brown fox jumps over the lazy dog"]


def test_onnx_text_equals_hf_text_on_the_same_weights(tiny_bert):
    onnx = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf" / "tokenizer.json",
                             layers=["last_hidden_state", "hidden_state_1"], poolings=POOLINGS, batch_size=3,
                             progress=False)
    hf = HFTextExtractor("h", tiny_bert / "hf", layers=[2, 1], poolings=POOLINGS, batch_size=3, device="cpu",
                         progress=False)
    assert onnx.output_names() == tuple(f"{layer}_{p}" for layer in ("last_hidden_state", "hidden_state_1")
                                        for p in POOLINGS)
    assert onnx.output_metadata()["hidden_state_1_max"] == {"hidden_layer": "hidden_state_1", "pooling": "max"}
    got, expected = onnx.transform_many(TEXTS), hf.transform_many(TEXTS)
    for layer, hf_layer in (("last_hidden_state", 2), ("hidden_state_1", 1)):
        for pooling in POOLINGS:
            value = got[f"{layer}_{pooling}"]
            assert value.shape == (len(TEXTS), 32) and value.dtype == np.float32
            np.testing.assert_allclose(value, expected[f"layer{hf_layer}_{pooling}"], rtol=1e-4, atol=1e-5)
    # The texts really differ, so equal outputs are not an accident of a constant model.
    assert np.abs(got["last_hidden_state_mean"][0] - got["last_hidden_state_mean"][1]).max() > 1e-2


def test_max_length_truncates_like_hf(tiny_bert):
    onnx = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf", poolings=["mean", "last_token"],
                             max_length=5, progress=False)
    hf = HFTextExtractor("h", tiny_bert / "hf", poolings=["mean", "last_token"], max_length=5, device="cpu",
                         progress=False)
    got, expected = onnx.transform_many(TEXTS), hf.transform_many(TEXTS)
    np.testing.assert_allclose(got["last_hidden_state_mean"], expected["layer2_mean"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["last_hidden_state_last_token"], expected["layer2_last_token"], rtol=1e-4,
                               atol=1e-5)
    untruncated = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf", progress=False).transform(TEXTS)
    assert np.abs(untruncated[1] - got["last_hidden_state_mean"][1]).max() > 1e-3


def test_an_output_that_is_not_in_the_graph_is_named_with_the_closest_at_construction(tiny_bert):
    """It was named when the session started, after the candidates before it had been embedded."""
    with pytest.raises(ConfigError, match=r"layers \['last_hidden_states'\] are not outputs of model.onnx "
                                          r"\('last_hidden_states': closest \['last_hidden_state'.*; name layers from"):
        ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf", layers=["last_hidden_states"])


def test_a_file_that_is_not_an_onnx_model_is_named_at_construction(tiny_bert, tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(InputValidationError, match=r"ONNXTextExtractor 'o': model_path '.*model\.onnx' is not an ONNX "
                                                   r"model \(its bytes are not ONNX's protobuf encoding"):
        ONNXTextExtractor("o", tmp_path / "model.onnx", tiny_bert / "hf")


def test_texts_past_the_position_table_are_cut_there_like_hf(tiny_bert, tmp_path):
    """The tiny BERT embeds 64 positions; the tokenizer.json cuts at 128 (and, edited, not at all), and max_length=100
    asks for more: a text past 64 tokens failed inside onnxruntime mid-run ("Attempting to broadcast an axis by a
    dimension other than 1. 64 by 128").  HFTextExtractor cuts at the model's 64 positions too."""
    texts = [*TEXTS, " ".join(["word"] * 150)]
    uncut = tmp_path / "tokenizer.json"
    uncut.write_text(json.dumps({**json.loads((tiny_bert / "hf" / "tokenizer.json").read_text()), "truncation": None}))
    hf = HFTextExtractor("h", tiny_bert / "hf", device="cpu", progress=False).transform(texts)
    for tokenizer, max_length in ((tiny_bert / "hf", None), (uncut, None), (tiny_bert / "hf", 100)):
        onnx = ONNXTextExtractor("o", tiny_bert / "model.onnx", tokenizer, max_length=max_length, progress=False)
        assert onnx.max_length_ == 64 and onnx.session_ is None  # settled at construction
        np.testing.assert_allclose(onnx.transform(texts), hf, rtol=1e-4, atol=1e-5)
    short = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf", max_length=5, progress=False)
    assert short.max_length_ == 5


@pytest.fixture(scope="module", params=[0, 1], ids=["pad0", "pad1"])
def tiny_roberta(request, tmp_path_factory, minilm_path):
    """A tiny random RobertaModel of 66 positions, exported as the BERT is.  Its position ids are counted over the
    tokens that are not ``pad_token_id`` from ``pad_token_id + 1``.  Pad 0 is the tokenizer's [PAD], so padding is as
    in HFTextExtractor's run (the exporter folds the ``+ 0`` away: Gather <- Cast <- Mul <- CumSum); pad 1 is
    RoBERTa's own ``padding_idx`` (``Gather <- Add(1) <- Cast <- Mul <- CumSum``; both extractors feed the same
    [PAD] ids, which the model counts as tokens, masked out of attention and pooling)."""
    pad = request.param
    folder = tmp_path_factory.mktemp(f"tiny_roberta_onnx_pad{pad}")
    torch.manual_seed(0)
    config = transformers.RobertaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=37, max_position_embeddings=66, pad_token_id=pad,
                                        attn_implementation="eager")
    model = transformers.RobertaModel(config).eval()
    model.save_pretrained(folder / "hf")
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_path / name, folder / "hf" / name)
    ids = torch.tensor([[101, 2023, 2003, 102, 0], [101, 2023, 2003, 1037, 102]])
    dynamic = {0: "batch", 1: "tokens"}
    export(States(model).eval(), (ids, (ids != 0).long(), torch.zeros_like(ids)), folder / "model.onnx",
           input_names=["input_ids", "attention_mask", "token_type_ids"],
           output_names=["last_hidden_state", "hidden_state_1"],
           dynamic_axes={name: dynamic for name in ("input_ids", "attention_mask", "token_type_ids",
                                                    "last_hidden_state", "hidden_state_1")})
    return folder, pad


def test_a_roberta_graph_cuts_texts_below_its_first_position_like_hf(tiny_roberta, tmp_path):
    """RoBERTa-style graphs take positions padding_idx + 1 .. table - 1, so 66 rows hold 66 - (pad + 1) tokens.  The
    limit was the table's 66 rows: a 150-word text, uncut by the tokenizer.json, was cut at 66 tokens and failed
    inside onnxruntime (Gather's indices out of bounds); now it is cut where HFTextExtractor cuts, outputs equal."""
    folder, pad = tiny_roberta
    texts = [*TEXTS, " ".join(["word"] * 150), " ".join(["word"] * 60)]  # the last one: 62 tokens, within the limit
    uncut = tmp_path / "tokenizer.json"
    uncut.write_text(json.dumps({**json.loads((folder / "hf" / "tokenizer.json").read_text()), "truncation": None}))
    hf = HFTextExtractor("h", folder / "hf", layers=[2, 1], poolings=POOLINGS, batch_size=3, device="cpu",
                         progress=False)
    expected = hf.transform_many(texts)
    assert hf.max_length_ == 66 - (pad + 1)
    onnx = ONNXTextExtractor("o", folder / "model.onnx", uncut, layers=["last_hidden_state", "hidden_state_1"],
                             poolings=POOLINGS, batch_size=3, progress=False)
    limit = onnx.max_length_  # settled at construction
    got = onnx.transform_many(texts)
    assert limit == hf.max_length_
    for layer, hf_layer in (("last_hidden_state", 2), ("hidden_state_1", 1)):
        for pooling in POOLINGS:
            np.testing.assert_allclose(got[f"{layer}_{pooling}"], expected[f"layer{hf_layer}_{pooling}"], rtol=1e-4,
                                       atol=1e-5)
    assert np.abs(got["last_hidden_state_mean"][-2] - got["last_hidden_state_mean"][-1]).max() > 1e-3
    # The tokenizer.json's own 128 and a max_length past the table are capped alike; a shorter one stands.
    assert ONNXTextExtractor("o", folder / "model.onnx", folder / "hf").max_length_ == 66 - (pad + 1)
    assert ONNXTextExtractor("o", folder / "model.onnx", folder / "hf", max_length=100).max_length_ == 66 - (pad + 1)
    assert ONNXTextExtractor("o", folder / "model.onnx", folder / "hf", max_length=20).max_length_ == 20


def test_the_first_position_is_read_from_the_graph_or_left_at_zero(tiny_roberta, tiny_bert, tmp_path):
    """The offset is found whether the constant is a Constant node or an initializer; a BERT graph (a sliced arange
    buffer) and a position path of another shape (an exclusive CumSum here) keep the table's size, as before."""
    import onnx

    folder, pad = tiny_roberta
    table = "model.embeddings.position_embeddings.weight"
    assert ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf").graph.position_starts == {}
    model = onnx.load(str(folder / "model.onnx"))
    ops = {n.output[0]: n for n in model.graph.node}
    gather = next(n for n in model.graph.node if n.op_type == "Gather" and n.input[0] == table)
    path, name = [], gather.input[1]
    while ops[name].op_type != "CumSum":
        path.append(ops[name].op_type)
        name = next(i for i in ops[name].input if ops.get(i) is not None and ops[i].op_type != "Constant")
    assert path == (["Add"] if pad else []) + ["Cast", "Mul"]
    constants = [n for n in model.graph.node if n.op_type == "Constant"]
    for node in constants:  # every Constant node an initializer instead
        tensor = onnx.TensorProto()
        tensor.CopyFrom(node.attribute[0].t)
        tensor.name = node.output[0]
        model.graph.initializer.append(tensor)
        model.graph.node.remove(node)
    onnx.save(model, str(tmp_path / "initializers.onnx"))
    moved = ONNXTextExtractor("o", tmp_path / "initializers.onnx", folder / "hf")
    assert moved.graph.position_starts == {table: pad + 1} and moved.max_length_ == 66 - (pad + 1)
    cumsum = next(n for n in model.graph.node if n.op_type == "CumSum")
    cumsum.attribute.append(onnx.helper.make_attribute("exclusive", 1))
    onnx.save(model, str(tmp_path / "exclusive.onnx"))
    other = ONNXTextExtractor("o", tmp_path / "exclusive.onnx", folder / "hf")
    assert other.graph.position_starts == {} and other.max_length_ == 66


def test_a_tokenizer_without_a_padding_token_is_named_at_construction(tiny_bert, tmp_path):
    config = json.loads((tiny_bert / "hf" / "tokenizer.json").read_text())
    config["padding"] = None
    config["added_tokens"] = [t for t in config["added_tokens"] if t["content"] != "[PAD]"]
    del config["model"]["vocab"]["[PAD]"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(InputValidationError, match=r"tokenizer\.json sets no padding token and has neither \[PAD\] "
                                                   "nor <pad>; save the tokenizer with its pad token set"):
        ONNXTextExtractor("o", tiny_bert / "model.onnx", tmp_path)


def test_identity_holds_the_model_and_tokenizer_files(tiny_bert, tmp_path):
    base = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf")
    edited = tmp_path / "tokenizer.json"
    edited.write_text((tiny_bert / "hf" / "tokenizer.json").read_text() + " ")  # other bytes, same JSON
    assert ONNXTextExtractor("o", tiny_bert / "model.onnx", edited).identity() != base.identity()
    assert ONNXTextExtractor("renamed", tiny_bert / "model.onnx", tiny_bert / "hf").identity() == base.identity()


def test_a_graph_that_is_not_a_text_encoder_is_refused_at_construction(tmp_path, tiny_bert):
    """Inputs other than token ids, float token ids, and token ids of a fixed size (an export without dynamic axes,
    which failed at the first batch with "Got invalid dimensions for input: input_ids") were named, if at all, only
    when the session started."""
    linear = torch.nn.Linear(3, 2)
    export(linear, (torch.zeros(1, 3),), tmp_path / "linear.onnx", input_names=["x"], output_names=["y"])
    with pytest.raises(InputValidationError, match=r"the model takes inputs \['x'\]; a text encoder takes input_ids"):
        ONNXTextExtractor("o", tmp_path / "linear.onnx", tiny_bert / "hf", layers="y")
    ids = torch.tensor([[101, 2023, 2003, 102, 0], [101, 2023, 2003, 1037, 102]])
    export(States(transformers.BertModel.from_pretrained(tiny_bert / "hf")).eval(), (ids, (ids != 0).long(),
           torch.zeros_like(ids)), tmp_path / "fixed.onnx", input_names=["input_ids", "attention_mask", "token_type_ids"],
           output_names=["last_hidden_state", "hidden_state_1"])
    with pytest.raises(InputValidationError, match=r"inputs \['input_ids', 'attention_mask', 'token_type_ids'\] have "
                                                   r"shapes \{'input_ids': \(2, 5\), .*export them with dynamic axes"):
        ONNXTextExtractor("o", tmp_path / "fixed.onnx", tiny_bert / "hf")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mul", ["input_ids", "attention_mask"], ["last_hidden_state"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "tokens"])
                               for n in ("input_ids", "attention_mask")],
                              [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, None)])
    (tmp_path / "float.onnx").write_bytes(helper.make_model(graph).SerializeToString())
    with pytest.raises(InputValidationError, match=r"inputs \['input_ids', 'attention_mask'\] are not int64 or int32 "
                                                   r"tensors \(\{'input_ids': 'tensor\(float\)'.*; export them as int64"):
        ONNXTextExtractor("o", tmp_path / "float.onnx", tiny_bert / "hf")


def test_a_run_config_names_the_onnx_text_kind(tiny_bert):
    entries = [{"name": "onnx", "kind": "onnx_text", "model": "model.onnx", "tokenizer": "hf/tokenizer.json",
                "layers": ["last_hidden_state"], "poolings": ["mean", "cls"], "batch_size": 4}]
    (built,) = build_extractors(check_extractors(entries, tiny_bert, {}))
    direct = ONNXTextExtractor("onnx", tiny_bert / "model.onnx", tiny_bert / "hf" / "tokenizer.json",
                               poolings=["mean", "cls"], batch_size=4)
    assert isinstance(built, ONNXTextExtractor) and built.identity() == direct.identity()
    np.testing.assert_array_equal(built.transform_many(TEXTS)["last_hidden_state_cls"],
                                  direct.transform_many(TEXTS)["last_hidden_state_cls"])
    missing = [{**entries[0], "tokenizer": "hf/missing.json"}]
    with pytest.raises(InputValidationError, match=r"tokenizer 'hf/missing.json' does not exist"):
        check_extractors(missing, tiny_bert, {})

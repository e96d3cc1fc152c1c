"""ONNXTextExtractor: a tiny random BERT exported to ONNX in the test, against HFTextExtractor on the same weights.

The model is built from a config (random weights, MiniLM's bert-base-uncased vocabulary and tokenizer files),
saved with ``save_pretrained`` and exported with ``torch.onnx.export`` — offline, nothing downloads.  The
export outputs the last hidden state and hidden state 1, so two "layers" are compared with HF's layers 2 and 1.
"""

from __future__ import annotations

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
from vertebrae.errors import ConfigError, ExtractorError, InputValidationError  # noqa: E402

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


def test_an_output_that_is_not_in_the_graph_is_named_with_the_closest_before_running(tiny_bert):
    extractor = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf", layers=["last_hidden_states"])
    with pytest.raises(ConfigError, match=r"layers \['last_hidden_states'\] are not outputs of model.onnx "
                                          r"\('last_hidden_states': closest \['last_hidden_state'"):
        extractor.transform(TEXTS)


def test_identity_holds_the_model_and_tokenizer_files(tiny_bert, tmp_path):
    base = ONNXTextExtractor("o", tiny_bert / "model.onnx", tiny_bert / "hf")
    edited = tmp_path / "tokenizer.json"
    edited.write_text((tiny_bert / "hf" / "tokenizer.json").read_text() + " ")  # other bytes, same JSON
    assert ONNXTextExtractor("o", tiny_bert / "model.onnx", edited).identity() != base.identity()
    assert ONNXTextExtractor("renamed", tiny_bert / "model.onnx", tiny_bert / "hf").identity() == base.identity()


def test_a_graph_without_token_inputs_is_refused(tmp_path, tiny_bert):
    linear = torch.nn.Linear(3, 2)
    export(linear, (torch.zeros(1, 3),), tmp_path / "linear.onnx", input_names=["x"], output_names=["y"])
    with pytest.raises(ExtractorError, match=r"the model takes inputs \['x'\]; a text encoder takes input_ids"):
        ONNXTextExtractor("o", tmp_path / "linear.onnx", tiny_bert / "hf", layers="y").transform(TEXTS)


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

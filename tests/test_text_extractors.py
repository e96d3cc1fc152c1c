"""SentenceTransformerExtractor and HFTextExtractor on the real MiniLM model (offline)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from vertebrae import HFTextExtractor, SentenceTransformerExtractor
from vertebrae.errors import ConfigError, ConfigTypeError, InputTypeError, InputValidationError
from vertebrae.extractors.batching import observe_batches

LAYERS = [0, 3, -1]
POOLINGS = ["mean", "cls", "max", "last_token"]


@pytest.fixture(scope="session")
def auto_model(minilm_path):
    """A plain AutoModel/AutoTokenizer pair: the independent reference for HFTextExtractor."""
    from transformers import AutoModel, AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_path)), AutoModel.from_pretrained(str(minilm_path)).eval()


@pytest.fixture(scope="session")
def hf_outputs(minilm_path, tweets):
    extractor = HFTextExtractor("minilm", minilm_path, layers=LAYERS, poolings=POOLINGS, batch_size=8,
                                device="cpu", progress=False)
    return extractor.transform_many(tweets.texts)


def test_sentence_transformer_equals_encode_with_the_same_batch_size(minilm, minilm_path, tweets):
    expected = minilm.encode(tweets.texts, batch_size=8)
    from_path = SentenceTransformerExtractor("st", minilm_path, batch_size=8, device="cpu", progress=False)
    in_memory = SentenceTransformerExtractor("st", minilm, batch_size=8, progress=False)
    for extractor in (from_path, in_memory):
        out = extractor.transform(tweets.texts)
        assert out.shape == (36, 384) and out.dtype == np.float32
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6)
    normalized = SentenceTransformerExtractor("n", minilm, batch_size=8, normalize_embeddings=True, progress=False)
    np.testing.assert_allclose(normalized.transform(tweets.texts),
                               minilm.encode(tweets.texts, batch_size=8, normalize_embeddings=True), atol=1e-6)


def test_hf_layers_and_poolings_match_unpadded_automodel_runs(auto_model, tweets, hf_outputs):
    """Reference: each text alone through AutoModel (no padding at all), pooled in NumPy."""
    tokenizer, model = auto_model
    reference: dict[str, list[np.ndarray]] = {}
    with torch.no_grad():
        for text in tweets.texts:
            states = model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states
            for layer in (0, 3, 6):
                tokens = states[layer][0].numpy()
                for pooling, vector in (("mean", tokens.mean(0)), ("cls", tokens[0]), ("max", tokens.max(0)),
                                        ("last_token", tokens[-1])):
                    reference.setdefault(f"layer{layer}_{pooling}", []).append(vector)
    assert sorted(hf_outputs) == sorted(reference)
    for name, rows in reference.items():
        np.testing.assert_allclose(hf_outputs[name], np.stack(rows), rtol=1e-4, atol=2e-5, err_msg=name)


def test_hf_batches_hold_texts_of_similar_length(minilm_path, tweets):
    """Batches go longest first by token count (little padding); the outputs' row order is the dataset's (test
    above, against each text alone)."""
    batches = []

    def observer(embed, rows):
        batches.append(rows.tolist())
        return embed(rows)

    extractor = HFTextExtractor("minilm", minilm_path, batch_size=8, device="cpu", progress=False)
    with observe_batches(observer):
        extractor.transform(tweets.texts)
    assert [len(b) for b in batches] == [8, 8, 8, 8, 4]
    assert sorted(row for batch in batches for row in batch) == list(range(36))
    counts = [len(extractor.tokenizer_(tweets.texts[row])["input_ids"]) for batch in batches for row in batch]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]


def test_left_and_right_padding_give_equal_outputs(minilm_path, tweets, hf_outputs):
    left = HFTextExtractor("left", minilm_path, layers=LAYERS, poolings=POOLINGS, batch_size=8,
                           padding_side="left", device="cpu", progress=False)
    out = left.transform_many(tweets.texts)
    assert left.tokenizer_.padding_side == "left"
    for name in hf_outputs:
        np.testing.assert_allclose(out[name], hf_outputs[name], rtol=1e-4, atol=2e-5, err_msg=name)


def test_last_layer_mean_equals_the_sentence_transformer_before_normalization(minilm, tweets, hf_outputs):
    mean = hf_outputs["layer6_mean"]
    np.testing.assert_allclose(mean / np.linalg.norm(mean, axis=1, keepdims=True),
                               minilm.encode(tweets.texts, batch_size=8), atol=1e-5)


def test_output_names_and_metadata_are_known_without_loading(minilm_path):
    extractor = HFTextExtractor("m", minilm_path, layers=[2, -1], poolings=["cls", "mean"])
    assert extractor.output_names() == ("layer2_cls", "layer2_mean", "layer6_cls", "layer6_mean")
    assert extractor.output_metadata()["layer6_mean"] == {"hidden_layer": 6, "pooling": "mean"}
    assert extractor.model_ is None and extractor.cache_eligible
    recipe = extractor.recipe()
    assert recipe["hidden_layers"] == [2, 6] and recipe["poolings"] == ["cls", "mean"] and "name" not in recipe
    assert json.loads(json.dumps(recipe)) == recipe
    assert HFTextExtractor("other-name", minilm_path, layers=[2, 6], poolings=["cls", "mean"]).recipe() == recipe
    assert HFTextExtractor("m", minilm_path, layers=[2, 6], poolings=["cls", "mean"],
                           max_length=16).recipe() != recipe


def test_recipes_of_path_models_import_no_framework(minilm_path):
    code = ("import sys, json; from vertebrae import HFTextExtractor, SentenceTransformerExtractor; "
            f"p = {str(minilm_path)!r}; "
            "print(json.dumps([HFTextExtractor('h', p, layers=[1, 2]).recipe(), "
            "SentenceTransformerExtractor('s', p).recipe()])); "
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'tokenizers') "
            "if m in sys.modules))")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[1] == "[]"
    assert json.loads(lines[0])[0] == HFTextExtractor("h", minilm_path, layers=[1, 2]).recipe()


def test_changing_one_weight_changes_the_recipe(minilm_path, minilm, tmp_path):
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "minilm"
    shutil.copytree(minilm_path, copy)
    before = (HFTextExtractor("h", copy).recipe(), SentenceTransformerExtractor("s", copy).recipe())
    weights = load_file(copy / "model.safetensors")
    name = sorted(weights)[0]
    weights[name].view(-1)[0] += 1e-3
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    assert HFTextExtractor("h", copy).recipe() != before[0]
    assert SentenceTransformerExtractor("s", copy).recipe() != before[1]
    in_memory = SentenceTransformerExtractor("s", minilm).recipe()
    parameter = next(minilm.parameters())
    with torch.no_grad():
        parameter.view(-1)[0] += 1e-3
        try:
            assert SentenceTransformerExtractor("s", minilm).recipe() != in_memory
        finally:
            parameter.view(-1)[0] -= 1e-3


def test_an_in_memory_sentence_transformers_prompts_and_truncation_move_its_recipe(minilm, tweets):
    """encode() prepends the default prompt and truncates to truncate_dim: both change the embeddings, so both are
    in the recipe (they were not: a cache returned the unprompted, full-width embeddings)."""
    before = SentenceTransformerExtractor("s", minilm).recipe()
    saved = (dict(minilm.prompts), minilm.default_prompt_name, minilm.truncate_dim)
    try:
        minilm.prompts, minilm.default_prompt_name = {"query": "query: "}, "query"
        prompted = SentenceTransformerExtractor("s", minilm, progress=False)
        prompted_recipe = prompted.recipe()  # read off the live model: taken now, before it changes again
        assert prompted_recipe != before
        np.testing.assert_allclose(prompted.transform(tweets.texts[:3]),
                                   minilm.encode(["query: " + t for t in tweets.texts[:3]], prompt=""), atol=1e-6)
        minilm.prompts, minilm.default_prompt_name, minilm.truncate_dim = saved[0], None, 16
        truncated = SentenceTransformerExtractor("s", minilm, progress=False)
        assert truncated.recipe() not in (before, prompted_recipe)
        assert truncated.transform(tweets.texts[:3]).shape == (3, 16)
    finally:
        minilm.prompts, minilm.default_prompt_name, minilm.truncate_dim = saved
    assert SentenceTransformerExtractor("s", minilm).recipe() == before


@pytest.mark.parametrize("kwargs, error, message", [
    ({"layers": 7}, ConfigError, r"layers 7 is out of range; this model has 7 hidden states: 0 \(embed"),
    ({"layers": [-1, 6]}, ConfigError, "lists layer 6 twice"),
    ({"poolings": "median"}, ConfigError, "poolings must be one of"),
    ({"layers": 1, "hidden_layer": 1}, ConfigError, "hidden_layer= is the old spelling of layers=; pass only layers="),
    ({"max_length": 0}, ConfigError, "max_length must be a positive integer"),
    ({"padding_side": "top"}, ConfigError, "padding_side must be 'left', 'right' or None"),
    ({"device": "gpu"}, ConfigError, "device must be 'auto', 'cpu'"),
    ({"layers": "1"}, ConfigError, r"layers must be an integer or a list of integers \(layer indices\), got '1'"),
    ({"layers": 1.0}, ConfigError, "layers must be an integer or a list of integers"),
])
def test_hf_rejections(minilm_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        HFTextExtractor("bad", minilm_path, **kwargs)


def test_a_numpy_integer_layer_is_one_layer(minilm_path):
    """layers=np.int64(1) raised "'numpy.int64' object is not iterable" though NumPy integers are layer indices."""
    assert HFTextExtractor("m", minilm_path, layers=np.int64(1)).hidden_layers == (1,)


def test_a_folder_without_a_tokenizer_is_refused_before_it_embeds_every_text_alike(minilm_path, tmp_path):
    """Without tokenizer files transformers built an empty-vocabulary tokenizer: every word [UNK], every text of a
    length the same row, scored as a valid candidate (0.0)."""
    import shutil

    for name in ("config.json", "model.safetensors"):
        shutil.copy(minilm_path / name, tmp_path / name)
    for make in (lambda: HFTextExtractor("bad", tmp_path), lambda: SentenceTransformerExtractor("bad", tmp_path)):
        with pytest.raises(InputValidationError, match="holds no tokenizer .*tokenizer.save_pretrained\\(folder\\)"):
            make()
    with pytest.raises(ConfigTypeError, match="normalize_embeddings must be True or False, got 'no'"):
        SentenceTransformerExtractor("s", minilm_path, normalize_embeddings="no")


def test_a_folder_transformers_cannot_load_is_bad_input_naming_it(minilm_path, tmp_path):
    """A folder without weights was a UserCodeError wrapping transformers' OSError (a failure of extractor code: the
    CLI's exit 1); it is bad input, named with the folder and the fix."""
    import shutil

    for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(minilm_path / name, tmp_path / name)
    for extractor in (HFTextExtractor("bad", tmp_path, device="cpu", progress=False),
                      SentenceTransformerExtractor("bad", tmp_path, device="cpu", progress=False)):
        with pytest.raises(InputValidationError, match=f"cannot load the model in {tmp_path} \\(OSError: .*pass a "
                                                       "folder holding what save_pretrained writes"):
            extractor.transform(["a text"])


def test_models_that_are_not_local_are_rejected_without_download(tmp_path):
    with pytest.raises(InputValidationError, match="vertebrae never downloads models"):
        HFTextExtractor("bad", "no-such-org/no-such-model")
    with pytest.raises(InputValidationError, match="vertebrae never downloads models"):
        SentenceTransformerExtractor("bad", str(tmp_path / "missing"))
    with pytest.raises(InputTypeError, match="model must be a folder path or a Hugging Face model id"):
        SentenceTransformerExtractor("bad", 3)


def test_non_text_inputs_fail_before_the_model_loads(minilm_path):
    extractor = HFTextExtractor("m", minilm_path)
    with pytest.raises(InputTypeError, match=r"X\[1\] is float, not str"):
        extractor.transform(["fine", 1.5])
    assert extractor.model_ is None


def test_max_length_truncates_like_the_tokenizer(minilm_path, auto_model, tweets):
    tokenizer, model = auto_model
    out = HFTextExtractor("short", minilm_path, poolings="mean", max_length=8, batch_size=16, device="cpu",
                          progress=False).transform(tweets.texts)
    with torch.no_grad():
        expected = np.stack([model(**tokenizer(t, truncation=True, max_length=8, return_tensors="pt"))
                             .last_hidden_state[0].mean(0).numpy() for t in tweets.texts])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5)


def test_the_old_spelling_warns_once_and_builds_the_same_extractor(minilm_path):
    """``hidden_layer`` / ``pooling`` still work for one release, with a warning pointing at the caller."""
    with pytest.warns(DeprecationWarning) as caught:
        old = HFTextExtractor("m", minilm_path, hidden_layer=[2, -1], pooling=["cls", "mean"])
    assert [w.filename for w in caught] == [__file__, __file__]
    assert "hidden_layer= is deprecated" in str(caught[0].message) and "spell it layers=" in str(caught[0].message)
    assert "pooling= is deprecated" in str(caught[1].message) and "spell it poolings=" in str(caught[1].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = HFTextExtractor("m", minilm_path, layers=[2, -1], poolings=["cls", "mean"])
    assert old.identity() == new.identity() and old.output_names() == new.output_names()
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match=r"hidden_layer 9 is out of range"):
        HFTextExtractor("m", minilm_path, hidden_layer=9)


def test_token_states_takes_layer_and_the_old_hidden_layer(minilm_path):
    from vertebrae.extractors.huggingface import token_states

    extractor = HFTextExtractor("m", minilm_path, device="cpu", progress=False)
    states, offsets = token_states(extractor, ["two words"], layer=3)
    with pytest.warns(DeprecationWarning, match="hidden_layer= is deprecated"):
        old_states, old_offsets = token_states(extractor, ["two words"], hidden_layer=3)
    np.testing.assert_array_equal(states[0], old_states[0])
    assert np.abs(states[0] - token_states(extractor, ["two words"])[0][0]).max() > 1e-3  # layer 3 is not the last


def test_a_distilbert_folder_reads_its_layer_count_and_pools_like_automodel(minilm_path, tweets, tmp_path):
    """DistilBERT's config.json says n_layers (not num_hidden_layers): it used to be refused as layer-less."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_path))
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=16, n_layers=2, n_heads=2,
                                           hidden_dim=32, max_position_embeddings=128)
    model = transformers.DistilBertModel(config).eval()
    model.save_pretrained(tmp_path)
    texts = tweets.texts[:6]
    out = HFTextExtractor("distil", tmp_path, layers=[0, -1], poolings=["mean"], batch_size=4, device="cpu",
                          progress=False).transform_many(texts)
    assert sorted(out) == ["layer0_mean", "layer2_mean"]
    with torch.no_grad():
        states = [model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states
                  for text in texts]
    for layer in (0, 2):
        expected = np.stack([s[layer][0].numpy().mean(0) for s in states])
        np.testing.assert_allclose(out[f"layer{layer}_mean"], expected, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("kind, positions", [("bert", 16), ("roberta", 18)])  # RoBERTa starts at padding_idx + 1
def test_texts_past_the_models_positions_are_cut_at_them(minilm_path, tweets, tmp_path, kind, positions):
    """A folder whose tokenizer allows 512 tokens but whose model embeds 16 positions: a longer text used to fail
    inside torch (IndexError / size mismatch); it is cut at 16 tokens, as sentence-transformers cuts it."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_path))
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    configs = {"bert": (transformers.BertConfig, transformers.BertModel),
               "roberta": (transformers.RobertaConfig, transformers.RobertaModel)}
    config_class, model_class = configs[kind]
    model = model_class(config_class(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=positions,
                                     pad_token_id=tokenizer.pad_token_id if kind == "bert" else 1)).eval()
    model.save_pretrained(tmp_path)
    texts = [" ".join(tweets.texts), "a short text"]
    assert tokenizer.model_max_length == 512 and len(tokenizer(texts[0])["input_ids"]) > 100
    extractor = HFTextExtractor("short", tmp_path, batch_size=2, device="cpu", progress=False)
    out = extractor.transform(texts)
    with torch.no_grad():
        expected = np.stack([model(**tokenizer(t, truncation=True, max_length=16, return_tensors="pt"))
                             .last_hidden_state[0].mean(0).numpy() for t in texts])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=2e-5)
    assert extractor.max_length_ == 16
    bigger = HFTextExtractor("big", tmp_path, max_length=1000, batch_size=2, device="cpu", progress=False)
    np.testing.assert_allclose(bigger.transform(texts), out, rtol=1e-5, atol=1e-6)

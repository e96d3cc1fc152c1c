"""TorchExtractor on small real torch modules (torch 2.13.0 CPU)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, TorchExtractor
from vertebrae.errors import ConfigError, ExtractorError, InputTypeError, InputValidationError

X = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
Y = np.repeat([0, 1], 20)


def small_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.5), nn.Linear(8, 3))


def reference(model: nn.Module, X: np.ndarray) -> np.ndarray:
    """The eval-mode forward pass written out in NumPy from the weights (dropout is identity in eval)."""
    w1, b1 = model[0].weight.detach().numpy(), model[0].bias.detach().numpy()
    w2, b2 = model[3].weight.detach().numpy(), model[3].bias.detach().numpy()
    return np.tanh(X @ w1.T + b1) @ w2.T + b2


class TwoHeads(nn.Module):
    """Returns a dict of two tensors and counts forward calls (to prove one pass per batch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.body = nn.Linear(4, 6)
        self.head = nn.Linear(6, 2)
        self.calls = 0
        self.modes: list[tuple[bool, bool, bool]] = []

    def forward(self, x):
        self.calls += 1
        self.modes.append((self.training, torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        hidden = torch.relu(self.body(x))
        return {"hidden": hidden, "logits": self.head(hidden)}


def keep_logits(out):
    return out["logits"]


def extract_key(extractor) -> str:
    dataset = BenchmarkDataset.from_arrays(X, Y, identity=DatasetIdentity.declared("torch-test", "1"))
    return next(job.key for job in Benchmark(dataset, [extractor]).plan() if job.stage == "extract")


def test_output_equals_numpy_forward_pass_and_restores_train_mode():
    model = small_model()
    model.train()
    model[0].eval()  # mixed per-submodule modes must come back exactly
    before = [m.training for m in model.modules()]
    out = TorchExtractor("mlp", model, batch_size=16, device="cpu", progress=False).transform(X)
    assert out.shape == (40, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, reference(model, X), rtol=1e-5, atol=1e-6)
    assert [m.training for m in model.modules()] == before


def test_runs_in_eval_and_inference_mode_one_forward_per_batch():
    model = TwoHeads().train()
    extractor = TorchExtractor("heads", model, outputs=("hidden", "logits"), batch_size=16, device="cpu",
                               progress=False)
    out = extractor.transform_many(X)
    assert model.calls == 3  # 40 rows in batches of 16: one forward pass per batch for both outputs
    assert set(model.modes) == {(False, True, False)} and model.training
    with torch.no_grad():
        hidden = torch.relu(model.body(torch.from_numpy(X)))
        np.testing.assert_allclose(out["hidden"], hidden.numpy(), rtol=1e-6)
        np.testing.assert_allclose(out["logits"], model.head(hidden).numpy(), rtol=1e-6)
    assert extractor.output_names() == ("hidden", "logits")
    assert extractor.output_metadata() == {"hidden": {"hidden_layer": None, "pooling": None},
                                           "logits": {"hidden_layer": None, "pooling": None}}
    with pytest.raises(ExtractorError, match=r"has 2 named outputs \['hidden', 'logits'\]; call transform_many"):
        extractor.transform(X)


def test_single_output_extractors_have_only_the_plain_protocol():
    single = TorchExtractor("mlp", small_model())
    assert not any(hasattr(single, a) for a in ("output_names", "transform_many", "output_metadata"))
    with pytest.raises(AttributeError, match="has a single output, so it has no transform_many"):
        single.transform_many(X)
    assert hasattr(TorchExtractor("two", TwoHeads(), outputs=("hidden", "logits")), "transform_many")


def test_named_outputs_keep_only_the_declared_keys_and_name_a_missing_one():
    """A model that returns more than it is asked for (logits beside the embedding) keeps the named keys, as
    ONNXExtractor fetches only its named outputs; it used to fail on the extra key."""
    model = TwoHeads()
    only = TorchExtractor("hidden", model, outputs=("hidden",), device="cpu", progress=False).transform_many(X)
    assert list(only) == ["hidden"]
    with torch.no_grad():
        np.testing.assert_allclose(only["hidden"], torch.relu(model.body(torch.as_tensor(X))).numpy(), rtol=1e-6)
    with pytest.raises(ExtractorError, match=r"outputs \['pooled'\] are not among the keys of the model output "
                                             r"\['hidden', 'logits'\]"):
        TorchExtractor("p", model, outputs=("pooled",), device="cpu", progress=False).transform_many(X)


def test_inference_mode_false_uses_no_grad():
    model = TwoHeads()
    TorchExtractor("heads", model, output_fn=keep_logits, inference_mode=False, device="cpu",
                   progress=False).transform(X)
    assert set(model.modes) == {(False, False, False)}


def test_collate_fn_builds_keyword_inputs():
    class Keywords(nn.Module):
        def forward(self, features, scale):
            return features * scale

    out = TorchExtractor("kw", Keywords(), collate_fn=collate_keywords, device="cpu", progress=False).transform(X)
    np.testing.assert_allclose(out, X * 3)


def collate_keywords(rows):
    return {"features": torch.as_tensor(rows), "scale": torch.tensor(3.0)}


def test_recipe_is_json_canonical_without_the_name_and_tracks_every_weight():
    model = small_model()
    a, b = TorchExtractor("a", model), TorchExtractor("b", model)
    assert a.recipe() == b.recipe() and extract_key(a) == extract_key(b)
    assert "a" not in json.dumps(a.recipe()).replace('"', " ").split()
    assert a.recipe()["model"]["class"] == "torch.nn.modules.container.Sequential"
    key = extract_key(a)
    with torch.no_grad():
        model[3].bias[1] += 1e-3  # one weight changes
    assert extract_key(a) != key
    assert TorchExtractor("c", small_model(seed=2)).recipe() != TorchExtractor("d", small_model()).recipe()


def test_recipe_tracks_buffers_and_configuration():
    def norm(momentum):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=momentum))

    assert TorchExtractor("x", norm(0.1)).recipe() != TorchExtractor("x", norm(0.2)).recipe()  # config (repr)
    changed = norm(0.1)
    changed[1].running_mean += 1.0  # a buffer, not a parameter
    assert TorchExtractor("x", changed).recipe() != TorchExtractor("x", norm(0.1)).recipe()


def test_cache_eligibility_follows_the_user_functions():
    model = small_model()
    assert TorchExtractor("f", model, output_fn=keep_logits).cache_eligible
    assert not TorchExtractor("l", model, output_fn=lambda out: out).cache_eligible
    scale = 2.0
    assert not TorchExtractor("c", model, collate_fn=lambda rows: torch.as_tensor(rows) * scale).cache_eligible
    declared = TorchExtractor("d", model, output_fn=lambda out: out, cache_identity="identity-v1")
    assert declared.cache_eligible and declared.recipe()["cache_identity"] == "identity-v1"


MODULE_SOURCE = """
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x) * SCALE
"""


def test_editing_a_modules_forward_moves_its_identity(tmp_path, monkeypatch):
    """Same weights and repr, another forward: the class source is in the identity (it was not, so a cache served
    the old forward's embeddings); a class without a readable source is cached only with a cache_identity."""
    import importlib

    monkeypatch.syspath_prepend(str(tmp_path))
    identities, outputs = [], []
    for scale in ("2.0", "3.0"):
        (tmp_path / "scaled_module.py").write_text(MODULE_SOURCE.replace("SCALE", scale))
        sys.modules.pop("scaled_module", None)
        importlib.invalidate_caches()
        module = importlib.import_module("scaled_module")
        torch.manual_seed(0)
        model = module.Scaled()
        extractor = TorchExtractor("m", model, progress=False)
        assert extractor.cache_eligible
        identities.append(extractor.recipe()["model"])
        outputs.append(extractor.transform(np.ones((2, 4), dtype=np.float32)))
    sys.modules.pop("scaled_module", None)
    assert identities[0]["weights_sha256"] == identities[1]["weights_sha256"]
    assert identities[0]["config_sha256"] == identities[1]["config_sha256"]
    assert identities[0] != identities[1] and not np.allclose(outputs[0], outputs[1])
    namespace: dict = {}
    exec(MODULE_SOURCE.replace("SCALE", "2.0"), namespace)  # as in a REPL: no source file to read
    unreadable = namespace["Scaled"]()
    assert not TorchExtractor("r", unreadable).cache_eligible
    assert TorchExtractor("r", unreadable, cache_identity="scaled-v1").cache_eligible


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_file_recipe_needs_no_torch_and_loads_lazily(tmp_path):
    model = small_model()
    path = tmp_path / "mlp.pt"
    torch.jit.script(model.eval()).save(str(path))
    code = ("import sys, json; from vertebrae import TorchExtractor; "
            f"e = TorchExtractor('m', {str(path)!r}, device='cpu'); print(json.dumps(e.recipe())); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    extractor = TorchExtractor("m", path, device="cpu", progress=False)
    assert json.loads(lines[0]) == extractor.recipe() and lines[1] == "[]"
    assert extractor.model_ is None  # nothing loaded until transform
    np.testing.assert_allclose(extractor.transform(X), reference(model, X), rtol=1e-5, atol=1e-6)
    first = extractor.recipe()
    torch.jit.script(small_model(seed=3)).save(str(path))
    assert TorchExtractor("m", path).recipe() != first


def test_factory_is_identified_by_its_checkpoint_files(tmp_path, monkeypatch):
    checkpoint = tmp_path / "weights.pt"
    monkeypatch.setattr(sys.modules[__name__], "CHECKPOINT", str(checkpoint))  # a global the identity can hash
    trained = small_model(seed=4)
    torch.save(trained.state_dict(), checkpoint)
    extractor = TorchExtractor("f", build_from_checkpoint, checkpoint_paths=[checkpoint], device="cpu", progress=False)
    first = extractor.recipe()
    assert extractor.model_ is None and extractor.cache_eligible
    np.testing.assert_allclose(extractor.transform(X), reference(trained, X), rtol=1e-5, atol=1e-6)
    torch.save(small_model(seed=5).state_dict(), checkpoint)
    assert TorchExtractor("f", build_from_checkpoint, checkpoint_paths=[checkpoint]).recipe() != first
    with pytest.raises(InputValidationError, match="needs checkpoint_paths"):
        TorchExtractor("f", build_from_checkpoint)


CHECKPOINT = None  # set by the test above


def build_from_checkpoint() -> nn.Module:
    model = small_model()
    model.load_state_dict(torch.load(CHECKPOINT))
    return model


@pytest.mark.parametrize("kwargs, error, message", [
    ({"device": "tpu"}, ConfigError, "device must be 'auto', 'cpu', 'cuda'"),
    ({"device": "cuda:x"}, ConfigError, "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got 'cuda:x'"),
    ({"device": "auto:1"}, ConfigError, "got 'auto:1'"),  # accepted before, then torch's RuntimeError at transform
    ({"outputs": ()}, ConfigError, "outputs must be non-empty names"),
    ({"batch_size": 0}, InputValidationError, "batch_size must be a positive integer, got 0"),
    ({"collate_fn": 3}, InputTypeError, "collate_fn must be callable"),
    ({"cache_identity": ""}, InputTypeError, "cache_identity must be a non-empty string"),
    ({"checkpoint_paths": ["/no/such/file.pt"]}, InputValidationError, "'/no/such/file.pt' does not exist"),
])
def test_constructor_rejections(kwargs, error, message):
    with pytest.raises(error, match=message):
        TorchExtractor("bad", small_model(), **kwargs)


def test_model_type_and_output_rejections(tmp_path):
    with pytest.raises(InputTypeError, match="model must be a torch.nn.Module"):
        TorchExtractor("bad", 42)
    with pytest.raises(InputValidationError, match="does not exist"):
        TorchExtractor("bad", tmp_path / "missing.pt")
    with pytest.raises(ExtractorError, match="the model output is a dict; pass output_fn"):
        TorchExtractor("dict", TwoHeads(), device="cpu", progress=False).transform(X)
    with pytest.raises(ExtractorError, match="needs output_fn to return a mapping"):
        TorchExtractor("t", small_model(), outputs=("a", "b"), device="cpu", progress=False).transform_many(X)


TEXT_FIX = (r"without collate_fn the model takes numeric arrays \(fed as float32\): embed texts with HFTextExtractor "
            r"or SentenceTransformerExtractor, or pass collate_fn=\.\.\. that builds the model input")


def built_model() -> nn.Module:
    """A factory that records each build: the model loads on first use."""
    BUILT.append(small_model())
    return BUILT[-1]


BUILT: list[nn.Module] = []


@pytest.mark.parametrize("layers", [None, ["0"]])
def test_rows_that_are_not_numbers_are_named_before_the_model_loads(layers):
    """Before: NumPy's own ValueError ("could not convert string to float: 'a tweet'", or "inhomogeneous shape"),
    naming neither the extractor, the row nor the fix; with layers=[...] too (rows of one 4-wide token each there,
    so the tapped Linear returns tokens to pool)."""
    BUILT.clear()
    extractor = TorchExtractor("t", built_model, cache_identity="built", layers=layers, batch_size=16, device="cpu",
                               progress=False)
    with pytest.raises(InputTypeError, match=r"TorchExtractor 't': X\[0\] is 'a tweet' \(str\); " + TEXT_FIX):
        extractor.transform(["a tweet", "another"])
    with pytest.raises(InputTypeError, match=r"X\[0\] is np\.str_\('a tweet'\) \(str_\); without collate_fn"):
        extractor.transform(np.array(["a tweet", "another"]))
    assert BUILT == []  # refused before the factory ran
    data = X if layers is None else X[:, None, :]
    rows = [row.tolist() for row in data]
    rows[20] = "late text"
    with pytest.raises(InputTypeError, match=r"TorchExtractor 't': X\[20\] is 'late text' \(str\); " + TEXT_FIX):
        extractor.transform(rows)
    rows[20] = data[20][..., :3].tolist()
    with pytest.raises(InputValidationError, match=r"X rows 16\.\.31 have different shapes; pass rows of one shape "
                                                   r"\(or collate_fn=\.\.\. that builds the model input\)"):
        extractor.transform(rows)
    rows[20] = data[20].tolist()
    model = BUILT[0]
    if layers is None:
        np.testing.assert_allclose(extractor.transform(rows), reference(model, X), rtol=1e-5, atol=1e-6)
    else:
        first = X @ model[0].weight.detach().numpy().T + model[0].bias.detach().numpy()
        np.testing.assert_allclose(extractor.transform(rows), first, rtol=1e-5, atol=1e-6)


def test_a_text_dataset_given_to_a_torch_model_is_named_not_numpys_error():
    """TorchExtractor declares no input kind (a collate_fn may tokenize texts), so Benchmark(...) accepts a text
    dataset; its default collate used to fail in run() as "extractor 't' failed during fit/transform: ValueError:
    could not convert string to float", blaming user code.  A collate_fn that reads texts still works."""
    texts = BenchmarkDataset.from_arrays(["a red car", "a green tree"] * 20, Y,
                                         identity=DatasetIdentity.declared("texts", "1"))
    model = small_model()
    with pytest.raises(InputTypeError, match=r"TorchExtractor 't': X\[0\] is 'a red car' \(str\); " + TEXT_FIX):
        Benchmark(texts, [TorchExtractor("t", model, device="cpu", progress=False)], progress=False).run()
    extractor = TorchExtractor("t", model, collate_fn=word_lengths, device="cpu", progress=False)
    np.testing.assert_allclose(extractor.transform(texts.inputs),
                               reference(model, word_lengths(list(texts.inputs)).numpy()), rtol=1e-5, atol=1e-6)


def word_lengths(texts: list[str]) -> torch.Tensor:
    """Four numbers per text: the lengths of its first words (0 past the last)."""
    return torch.tensor([[float(len(w)) for w in (t.split() + [""] * 4)[:4]] for t in texts])


def test_a_path_that_is_not_torchscript_is_named_at_construction(tmp_path):
    """A state dict (torch.save) given as the model path failed at the first batch with torch.jit.load's
    "PytorchStreamReader failed locating file constants.pkl ... corrupted" essay; a non-zip file likewise."""
    state = tmp_path / "weights.pt"
    torch.save(small_model().state_dict(), state)
    with pytest.raises(InputValidationError, match=r"model '.*weights\.pt' was written by torch\.save \(a state dict.*"
                                                   r"pass the module, or a factory with checkpoint_paths"):
        TorchExtractor("sd", state)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a model")
    with pytest.raises(InputValidationError, match=r"model '.*garbage\.pt' is not a TorchScript file"):
        TorchExtractor("g", garbage)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_unavailable_cuda_is_an_error_not_a_fallback():
    with pytest.raises(ConfigError, match="CUDA is not available"):
        TorchExtractor("gpu", small_model(), device="cuda", progress=False).transform(X)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu_and_model_returns_to_cpu():
    model = small_model()
    out = TorchExtractor("gpu", model, device="cuda", progress=False).transform(X)
    np.testing.assert_allclose(out, reference(model, X), rtol=1e-4, atol=1e-5)
    assert next(model.parameters()).device.type == "cpu"

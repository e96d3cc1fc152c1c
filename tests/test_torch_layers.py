"""TorchExtractor(layers=[...], poolings=[...]): named modules' outputs from one forward pass, pooled.

References: (1) the same forward hooks registered by hand on an independent copy of the model, pooled with
NumPy; (2) feature extraction written out by hand — the CNN's ``features`` run block by block, the way
``torchvision.models.feature_extraction`` reads intermediate nodes (torchvision itself does not import beside
torch 2.13.0 here; when it does, the test also compares with ``create_feature_extractor``).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from vertebrae import BenchmarkDataset, DatasetIdentity, TorchExtractor  # noqa: E402
from vertebrae.errors import ConfigError, ExtractorError  # noqa: E402

TAPS = ["features.1", "features.3.conv.1", "features.4"]


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU6())

    def forward(self, x):
        return self.conv(x)


class SmallCNN(nn.Module):
    """MobileNet-like names (``features.i.conv.j``, ``classifier.1``) with random weights and BN statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), Block(4, 6),
                                      Block(6, 8), nn.Conv2d(8, 5, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(5, 3))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def small_cnn() -> SmallCNN:
    torch.manual_seed(0)
    model = SmallCNN()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):  # non-trivial running statistics, so eval mode matters
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).normal(size=(11, 3, 12, 10)).astype(np.float32)


def hooked_reference(model, images, layers):
    """Hooks registered by hand on a copy, one forward over all images, pooled with NumPy."""
    model = copy.deepcopy(model).eval()
    seen = {}
    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.numpy()))
               for name in layers]
    with torch.no_grad():
        model(torch.from_numpy(images))
    for handle in handles:
        handle.remove()
    return {f"{name}_{p}": getattr(seen[name].reshape(*seen[name].shape[:2], -1), p)(axis=2)
            for name in layers for p in ("mean", "max")}


def blockwise_reference(model, images):
    """Feature extraction by hand: ``features`` run child by child, each intermediate map kept."""
    model = copy.deepcopy(model).eval()
    maps, x = {}, torch.from_numpy(images)
    with torch.no_grad():
        for index, block in enumerate(model.features):
            x = block(x)
            maps[f"features.{index}"] = x
    return {f"{name}_{p}": getattr(torch, "amax" if p == "max" else p)(x, dim=(2, 3)).numpy()
            for name, x in maps.items() for p in ("mean", "max")}


def test_taps_match_hand_registered_hooks_and_blockwise_features(images):
    model = small_cnn()
    model.train()  # the extractor must run eval mode and restore train mode afterwards
    extractor = TorchExtractor("cnn", model, layers=TAPS, poolings=["mean", "max"], batch_size=4, device="cpu",
                               progress=False)
    assert extractor.output_names() == tuple(f"{t}_{p}" for t in TAPS for p in ("mean", "max"))
    assert extractor.output_metadata()["features.4_max"] == {"hidden_layer": "features.4", "pooling": "max"}
    out = extractor.transform_many(images)
    assert model.training and all(m.training for m in model.modules())
    assert not any(m._forward_hooks for m in model.modules())  # the hooks are removed
    hooked = hooked_reference(model, images, TAPS)
    blockwise = blockwise_reference(model, images)
    assert set(out) == set(hooked)
    for name, value in out.items():
        assert value.shape == (11, hooked[name].shape[1]) and value.dtype == np.float32
        np.testing.assert_allclose(value, hooked[name], rtol=1e-5, atol=1e-6)
    for name in ("features.1_mean", "features.1_max", "features.4_mean", "features.4_max"):
        np.testing.assert_allclose(out[name], blockwise[name], rtol=1e-5, atol=1e-6)


def test_taps_match_torchvision_feature_extraction_when_it_imports(images):
    """Taps against torchvision's create_feature_extractor, where torchvision is installed.  It is no test dependency
    (not in pyproject.toml), so CI skips this; the taps are always checked against hooks and a blockwise forward above."""
    pytest.importorskip("torchvision", reason="torchvision is not installed; it is not a test dependency of vertebrae")
    from torchvision.models.feature_extraction import create_feature_extractor  # an import error here fails the test

    model = small_cnn().eval()
    with torch.no_grad():
        maps = create_feature_extractor(model, return_nodes=["features.1", "features.4"])(torch.from_numpy(images))
    out = TorchExtractor("cnn", model, layers=["features.1", "features.4"], poolings="max", device="cpu",
                         progress=False).transform_many(images)
    for name, x in maps.items():
        np.testing.assert_allclose(out[f"{name}_max"], x.amax((2, 3)).numpy(), rtol=1e-5, atol=1e-6)


class TokenModel(nn.Module):
    """Token states (batch, tokens, width) from a dict input with an attention mask, as HF models take."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.embed = nn.Embedding(20, 6)
        self.mix = nn.Linear(6, 6)

    def forward(self, input_ids, attention_mask):
        return self.mix(self.embed(input_ids)).sum(-1)


def test_token_taps_pool_over_the_attended_tokens_only():
    """Padding never leaks in: each padded row equals the row's tokens alone, by hand, for every pooling."""
    rows = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]

    def collate(batch):
        width = max(len(r) for r in batch)
        ids = torch.tensor([list(r) + [0] * (width - len(r)) for r in batch])
        return {"input_ids": ids, "attention_mask": (torch.arange(width)[None] < torch.tensor(
            [len(r) for r in batch])[:, None]).long()}

    model = TokenModel()
    poolings = ["mean", "max", "cls", "last_token"]
    out = TorchExtractor("tok", model, collate_fn=collate, layers=["mix"], poolings=poolings, batch_size=3,
                         device="cpu", cache_identity="tok-v1", progress=False).transform_many(rows)
    with torch.no_grad():
        for i, row in enumerate(rows):
            states = model.mix(model.embed(torch.tensor(row))).numpy()
            expected = {"mean": states.mean(0), "max": states.max(0), "cls": states[0], "last_token": states[-1]}
            for pooling in poolings:
                np.testing.assert_allclose(out[f"mix_{pooling}"][i], expected[pooling], rtol=1e-5, atol=1e-6)


def test_an_unknown_module_is_named_with_the_closest_names_before_the_model_runs():
    model = small_cnn()
    calls = []
    model.register_forward_pre_hook(lambda m, i: calls.append(1))
    with pytest.raises(ConfigError, match=r"layers \['features\.33'\] are not modules of SmallCNN \('features\.33': "
                                          r"closest \['features\.3', "):
        TorchExtractor("cnn", model, layers=["features.1", "features.33"])
    factory = TorchExtractor("cnn", small_cnn, layers=["feature.4"], cache_identity="cnn-v1", device="cpu")
    with pytest.raises(ConfigError, match=r"'feature\.4': closest \['features\.4'"):
        factory.transform(np.zeros((2, 3, 8, 8), dtype=np.float32))
    assert calls == []


@pytest.mark.parametrize("kwargs, message", [
    ({"poolings": "max"}, "poolings='max' pools tapped modules; name them with layers"),
    ({"layers": ["features.1"], "outputs": ("a",)}, "layers=\\[...\\] names the outputs itself"),
    ({"layers": ["features.1"], "poolings": "median"}, "poolings must be one of"),
    ({"layers": ["features.1", "features.1"]}, "lists a name twice"),
    ({"layers": [""]}, "layers must be a non-empty list of names"),
])
def test_tap_rejections(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TorchExtractor("cnn", small_cnn(), **kwargs)


def test_a_torchscript_file_cannot_be_tapped(tmp_path):
    path = tmp_path / "cnn.pt"
    torch.jit.save(torch.jit.script(small_cnn()), str(path))
    with pytest.raises(ConfigError, match="forward hooks, which TorchScript modules do not support"):
        TorchExtractor("cnn", path, layers=["features.1"])


def test_poolings_that_need_tokens_and_vector_outputs_are_refused_by_module(images):
    with pytest.raises(ExtractorError, match=r"module 'features.4' returns a feature map \(2, 5, 6, 5\); pooling "
                                             "'cls' needs tokens"):
        TorchExtractor("cnn", small_cnn(), layers=["features.4"], poolings="cls", device="cpu",
                       progress=False).transform(images[:2])
    with pytest.raises(ExtractorError, match=r"module 'classifier.1' returns shape \(2, 3\); pooling needs"):
        TorchExtractor("cnn", small_cnn(), layers=["classifier.1"], device="cpu", progress=False).transform(images[:2])


def test_a_module_that_runs_twice_is_refused():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.conv(self.conv(x))

    with pytest.raises(ExtractorError, match="module 'conv' ran 2 times in one forward pass"):
        TorchExtractor("t", Twice(), layers=["conv"], device="cpu", progress=False).transform(
            np.zeros((2, 3, 4, 4), dtype=np.float32))


def test_tapped_outputs_are_scored_as_named_results(images):
    labels = np.arange(len(images)) % 2
    dataset = BenchmarkDataset.from_arrays(images, labels, identity=DatasetIdentity.declared("cnn-taps", "1"))
    extractor = TorchExtractor("cnn", small_cnn(), layers=["features.1", "features.4"], poolings=["mean", "max"],
                               device="cpu", progress=False)
    from vertebrae import Benchmark, SeparatixConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = Benchmark(dataset, [extractor], separatix_config=SeparatixConfig(enabled=False)).run()
    names = sorted(r.name for r in result.extractor_results)
    assert names == sorted(f"cnn:{t}_{p}" for t in ("features.1", "features.4") for p in ("mean", "max"))
    embedding = result["cnn:features.4_max"].embedding
    assert embedding["hidden_layer"] == "features.4" and embedding["pooling"] == "max"

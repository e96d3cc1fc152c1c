"""A complete key, one rule: every argument that shapes an artifact moves its key, and nothing else does.

* Extractors: every constructor argument of every shipped extractor and encoder moves its identity
  (what the extract/encode key hashes), except the ones its class declares ``speed_only``; each of
  those has a test below showing bitwise-identical outputs across its values.
* Configs: every field moves the config's fingerprint except the declared ``speed_only`` ones, each
  proven the same way; a stored artifact records the fingerprint, so runs that differ only in speed
  settings store the same bytes.
* Stages hash only what they read: a scorer config that does not apply to the chain's targets, or an
  overlap setting the metrics do not read, leaves their keys alone.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA

from tests.conftest import gaussian_classes
from tests.test_code_versions import shipped_extractors
from vertebrae import (Benchmark, BenchmarkDataset, CallableMetric, ContinuousOverlapScoringConfig, DatasetIdentity,
                       HFTextExtractor, OverlapScoringConfig, SeparatixConfig, SklearnExtractor, StabilityConfig)
from vertebrae.scoring import OverlapIndexScorer
from vertebrae.scoring.ridge_probe import RidgeProbeMetric
from vertebrae._base.config import Config
from vertebrae.families.labeled.stages import STABILITY_CODEC, StabilityArtifact
from vertebrae.execution.context import extractor_identity
from vertebrae._base.fingerprint import content_sha256

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: no TensorFlow needed

IDENTITY = DatasetIdentity.declared("key-completeness", "1")


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    return {"score": float(np.asarray(embeddings.std()))}


def blobs_dataset() -> BenchmarkDataset:
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    return BenchmarkDataset.from_arrays(X, y, identity=IDENTITY)


def chain_keys(dataset=None, extractors=None, **settings) -> dict[str, str]:
    extractors = extractors or [SklearnExtractor("pca", PCA(2, random_state=0))]
    return Benchmark(dataset or blobs_dataset(), extractors, **settings).plan().chain_keys[0]


# ----------------------------------------------------------------------------- the two reproductions
def test_hf_text_batch_size_moves_the_extract_key(minilm_path):
    """Batches of 2 and 48 MiniLM texts round differently (max |diff| ~9e-7 on tweets): two caches, not one."""
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(12)]
    dataset = BenchmarkDataset.from_arrays(texts, [i % 2 for i in range(12)], identity=IDENTITY)
    small, large = (chain_keys(dataset, [HFTextExtractor("minilm", minilm_path, batch_size=size, progress=False)])
                    for size in (2, 48))
    assert small["extract"] != large["extract"]
    renamed = chain_keys(dataset, [HFTextExtractor("other", minilm_path, batch_size=2, progress=False)])
    assert renamed["extract"] == small["extract"]  # the name is a label, not an input


def _stability_bytes_and_key(n_jobs: int) -> tuple[str, str]:
    benchmark = Benchmark(blobs_dataset(), [SklearnExtractor("pca", PCA(2, random_state=0))],
                          stability_config=StabilityConfig(mode="subsample", repeats=3, n_jobs=n_jobs),
                          separatix_config=SeparatixConfig(enabled=False))
    key = benchmark.plan().chain_keys[0]["stability"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stability = benchmark.run()["pca"].stability
    stored = STABILITY_CODEC.encode(StabilityArtifact(stability))
    return json.dumps(stored.document, sort_keys=True), key


def test_stability_n_jobs_stores_the_same_bytes_under_the_same_key():
    """A staged run over a shared store must not report another run's n_jobs: the artifact holds the fingerprint."""
    (one, key_one), (two, key_two) = _stability_bytes_and_key(1), _stability_bytes_and_key(2)
    assert key_one == key_two
    assert one == two
    assert "n_jobs" not in json.loads(one)["stability"]["config"]


# ----------------------------------------------------------------------------- stages hash what they read
def test_a_continuous_config_change_on_single_label_data_moves_no_key():
    settings = dict(stability_config=StabilityConfig(repeats=3),
                    metrics=[CallableMetric("spread", spread, cache_identity="spread-v1")])
    base = chain_keys(**settings)
    changed = chain_keys(continuous_config=ContinuousOverlapScoringConfig(k=3, n_null_permutations=7), **settings)
    assert changed == base


def test_an_overlap_config_change_on_regression_data_moves_no_scoring_key():
    X, _ = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    dataset = BenchmarkDataset.from_arrays(X, X[:, 0] * 2.0 + 1.0, target_type="regression", identity=IDENTITY)
    settings = dict(stability_config=StabilityConfig(repeats=3), separatix_config=SeparatixConfig(enabled=False))
    base = chain_keys(dataset, **settings)
    assert chain_keys(dataset, scoring_config=OverlapScoringConfig(k=4), **settings) == base
    moved = chain_keys(dataset, continuous_config=ContinuousOverlapScoringConfig(k=3), **settings)
    assert {stage for stage in base if base[stage] != moved[stage]} == {"score", "stability", "assemble"}


def test_metrics_hash_the_scoring_seed_not_the_score():
    settings = dict(metrics=[CallableMetric("spread", spread, cache_identity="spread-v1")],
                    separatix_config=SeparatixConfig(enabled=False))
    base = chain_keys(**settings)
    assert chain_keys(scoring_config=OverlapScoringConfig(k=4), **settings)["metrics"] == base["metrics"]
    assert chain_keys(scoring_config=OverlapScoringConfig(random_state=3), **settings)["metrics"] != base["metrics"]


def test_speed_only_scorer_fields_move_no_key():
    settings = dict(stability_config=StabilityConfig(repeats=3), separatix_config=SeparatixConfig())
    base = chain_keys(**settings)
    fast = chain_keys(scoring_config=OverlapScoringConfig(offline_chunk_size=7),
                      stability_config=StabilityConfig(repeats=3, n_jobs=2),
                      separatix_config=SeparatixConfig(thread_limit=2))
    assert fast == base
    threads = chain_keys(scoring_config=OverlapScoringConfig(thread_limit=2), **settings)
    assert threads != base  # hashed: threads round k-means ties differently on collapsed spaces


# ----------------------------------------------------------------------------- extractors: the round trip
def alt_fn(batch):
    return batch


def other_fn(batch):
    return batch * 2


def apply_a(params, x):
    return x @ params["w"]


def apply_b(params, x):
    return x @ params["w"] + 1.0


class DeclaredModel:
    """A text model with a declared identity (what a TextEncoder's identity hashes)."""

    def __init__(self, version: str) -> None:
        self.version = version

    def encode(self, texts, **kwargs):
        return np.ones((len(texts), 2))

    def __vertebrae_identity__(self):
        return self.version


def _folder(root, name: str, files: dict[str, object]):
    folder = root / name
    folder.mkdir()
    for file, content in files.items():
        (folder / file).write_text(json.dumps(content))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model folders and files for constructing every extractor (identities hash them; nothing is loaded)."""
    root = tmp_path_factory.mktemp("identity_models")
    text = {"config.json": {"model_type": "bert", "num_hidden_layers": 2},
            "tokenizer.json": {"model": {"type": "WordPiece"}}}  # a text folder must hold a tokenizer
    vision = {"config.json": {"model_type": "vit", "num_hidden_layers": 2}}
    audio = {"config.json": {"model_type": "wav2vec2", "num_hidden_layers": 2}, "preprocessor_config.json": {}}
    clip = {"config.json": {"model_type": "clip", "vision_config": {}, "text_config": {}}}
    made = {}
    for kind, files in (("text", text), ("vision", vision), ("audio", audio), ("clip", clip)):
        made[kind] = _folder(root, kind, files)
        made[f"{kind}2"] = _folder(root, f"{kind}2", {**files, "extra.json": {"changed": True}})
    for name, content in (("onnx", _onnx_model("a", text=False)), ("onnx2", _onnx_model("b", text=False)),
                          ("onnx_text", _onnx_model("a", text=True)), ("onnx_text2", _onnx_model("b", text=True)),
                          ("ckpt", b"weights"), ("tokenizer", b'{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0}}}'),
                          ("tokenizer2", b'{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0}}, "added_tokens": []}')):
        (root / name).write_bytes(content)
        made[name] = root / name
    return made


def _onnx_model(graph_name: str, *, text: bool) -> bytes:
    """A graph the ONNX extractors accept at construction (they read its inputs and outputs; it never runs): a float
    input for ONNXExtractor (outputs y and a), token ids and mask for ONNXTextExtractor (last_hidden_state, hidden)."""
    from onnx import TensorProto, helper

    if text:
        inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
                  for n in ("input_ids", "attention_mask")]
        nodes = [helper.make_node("Cast", [i], [o], to=TensorProto.FLOAT)
                 for i, o in (("input_ids", "last_hidden_state"), ("attention_mask", "hidden"))]
    else:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])]
        nodes = [helper.make_node("Identity", ["x"], [o]) for o in ("y", "a")]
    outputs = [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None) for node in nodes]
    graph = helper.make_graph(nodes, graph_name, inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _torch_module(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _torch_sequential():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))


def _keras_model(seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="top")(hidden))


def extractor_cases(models) -> dict[str, tuple[dict, dict]]:
    """Class name -> (constructor arguments, {argument: another value}) for every shipped extractor."""
    a, b = np.arange(12.0).reshape(4, 3), np.arange(12.0).reshape(4, 3) + 1
    inner, other = SklearnExtractor("pca", PCA(2, random_state=0)), SklearnExtractor("pca", PCA(3, random_state=0))
    return {
        "PrecomputedExtractor": ({"name": "e"}, {"embeddings": a}),
        "CallableExtractor": ({"name": "e", "fn": alt_fn},
                              {"fn": other_fn, "params": {"scale": 2}, "cache_identity": "v2"}),
        "SklearnExtractor": ({"name": "e", "estimator": PCA(2, random_state=0)},
                             {"estimator": PCA(3, random_state=0), "supervised": True}),
        "HFTextExtractor": ({"name": "e", "model_path_or_id": models["text"]},
                            {"model_path_or_id": models["text2"], "layers": 1, "poolings": "max",
                             "max_length": 8, "batch_size": 2, "device": "cpu", "padding_side": "left",
                             "cache_identity": "v2", "hidden_layer": 1, "pooling": "max"}),
        "HFVisionExtractor": ({"name": "e", "model_path": models["vision"]},
                              {"model_path": models["vision2"], "layers": 1, "poolings": "max", "final_norm": True, "batch_size": 2,
                               "device": "cpu", "processor_backend": "torchvision", "cache_identity": "v2"}),
        "HFAudioExtractor": ({"name": "e", "model_path": models["audio"], "sampling_rate": 16000},
                             {"model_path": models["audio2"], "sampling_rate": 8000, "layers": 1, "poolings": "max",
                              "batch_size": 2, "device": "cpu", "cache_identity": "v2"}),
        "SentenceTransformerExtractor": ({"name": "e", "model_or_path": models["text"]},
                                         {"model_or_path": models["text2"], "batch_size": 2,
                                          "normalize_embeddings": True, "device": "cpu", "cache_identity": "v2"}),
        "ONNXExtractor": ({"name": "e", "model_path": models["onnx"]},
                          {"model_path": models["onnx2"], "input_fn": alt_fn, "output_fn": alt_fn, "outputs": ("a",),
                           "providers": ["CUDAExecutionProvider"], "batch_size": 2, "cache_identity": "v2"}),
        "TorchExtractor": [({"name": "e", "model": _torch_module(0)},
                            {"model": _torch_module(1), "collate_fn": alt_fn, "output_fn": alt_fn, "device": "cpu",
                             "outputs": ("a",), "batch_size": 2, "checkpoint_paths": models["ckpt"],
                             "cache_identity": "v2", "inference_mode": False}),
                           ({"name": "e", "model": _torch_sequential(), "layers": ["0"]},
                            {"layers": ["1"], "poolings": ["max"]})],
        "ONNXTextExtractor": ({"name": "e", "model_path": models["onnx_text"], "tokenizer": models["tokenizer"]},
                              {"model_path": models["onnx_text2"], "tokenizer": models["tokenizer2"],
                               "layers": "hidden", "poolings": "cls", "max_length": 8, "batch_size": 2,
                               "providers": ["CUDAExecutionProvider"], "cache_identity": "v2"}),
        "KerasExtractor": ({"name": "e", "model": _keras_model(0)},
                           {"model": _keras_model(1), "layer": "hidden", "batch_size": 2, "cache_identity": "v2"}),
        "JAXExtractor": ({"name": "e", "apply": apply_a, "params": {"w": a[:3]}},
                         {"apply": apply_b, "params": {"w": b[:3]}, "batch_size": 2, "jit": False,
                          "cache_identity": "v2"}),
        "FieldExtractor": ({"extractor": inner, "fields": "image"}, {"extractor": other, "fields": "caption"}),
        "SharedSpaceExtractor": ({"extractor": inner}, {"extractor": other}),
        "TwoBranchExtractor": ({"name": "e", "query_fn": alt_fn, "gallery_fn": alt_fn},
                               {"query_fn": other_fn, "gallery_fn": other_fn, "params": {"scale": 2},
                                "cache_identity": "v2"}),
        "PrecomputedPairExtractor": ({"name": "e", "query_embeddings": a, "gallery_embeddings": a},
                                     {"query_embeddings": b, "gallery_embeddings": b}),
        "TextEncoder": ({"name": "e", "model": DeclaredModel("1")},
                        {"model": DeclaredModel("2"), "encode_kwargs": {"batch_size": 2}, "cache_identity": "v2"}),
        "ExtractorEncoder": ({"extractor": inner}, {"extractor": other}),
        "PrecomputedZeroShotEncoder": ({"name": "e", "sample_embeddings": a, "prompt_embeddings": a},
                                       {"sample_embeddings": b, "prompt_embeddings": b,
                                        "modalities": {"samples": "image"}}),
        "ImageTextEncoder": ({"name": "e", "model_path": models["clip"]},
                             {"model_path": models["clip2"], "batch_size": 2, "device": "cpu",
                              "processor_backend": "torchvision", "cache_identity": "v2"}),
    }


def identity_hash(extractor) -> str:
    return content_sha256(extractor_identity(extractor, "same-token")[0])


def test_every_constructor_argument_of_every_shipped_extractor_moves_its_identity(models):
    cases = extractor_cases(models)
    classes = shipped_extractors()
    assert sorted(cls.__name__ for cls in classes.values()) == sorted(cases)
    for cls in classes.values():
        pairs = cases[cls.__name__] if isinstance(cases[cls.__name__], list) else [cases[cls.__name__]]
        arguments = set(inspect.signature(cls).parameters)
        speed_only = set(getattr(cls, "speed_only", ()))
        covered = {argument for _, alternatives in pairs for argument in alternatives} | speed_only | {"name"}
        assert arguments <= covered, f"{cls.__name__}: add a changed value of {sorted(arguments - covered)} here"
        for base, alternatives in pairs:  # several bases: arguments read only with another one set
            reference = identity_hash(cls(**base))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # old spellings move it too, with a warning
                moved = {argument: identity_hash(cls(**{**base, argument: value})) != reference
                         for argument, value in alternatives.items()}
            assert all(moved.values()), f"{cls.__name__}({[a for a, m in moved.items() if not m]}=...) does not " \
                                        "move the identity"
            for argument in speed_only:
                assert argument not in json.dumps(extractor_identity(cls(**base), "t")[0], default=str)
            if "name" in base:
                assert identity_hash(cls(**{**base, "name": "renamed"})) == reference, \
                    f"{cls.__name__}: name is a label"


def test_every_identity_holds_the_code_version_and_the_package_versions(models):
    from importlib.metadata import version

    cases = extractor_cases(models)
    for cls in shipped_extractors().values():
        base, _ = cases[cls.__name__][0] if isinstance(cases[cls.__name__], list) else cases[cls.__name__]
        identity = extractor_identity(cls(**base), "t")[0]
        assert identity["code"]["version"] == cls.version
        assert set(identity["packages"]) == set(getattr(cls(**base), "computes_with", ()))
    text = extractor_identity(HFTextExtractor("t", models["text"]), "t")[0]
    assert text["code"]["version"] == 2
    assert text["packages"] == {p: version(p) for p in ("torch", "transformers", "tokenizers")}


def test_a_new_package_version_moves_an_extractor_identity(models, monkeypatch):
    from vertebrae._base import fingerprint

    before = identity_hash(HFTextExtractor("t", models["text"]))
    real = fingerprint.package_version
    monkeypatch.setattr(fingerprint, "package_version", lambda name: "99.0" if name == "transformers" else real(name))
    assert identity_hash(HFTextExtractor("t", models["text"])) != before


# ----------------------------------------------------------------------------- extractors: speed-only proofs
def _bitwise(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_progress_leaves_outputs_bitwise_identical(minilm_path):
    """``progress`` (every batched extractor and the image-text encoder) only drives the progress bar."""
    from vertebrae import SentenceTransformerExtractor, TorchExtractor

    texts = ["a short one", "a much longer text than the first one", "mid length text", "x"]
    X = np.random.default_rng(0).normal(size=(9, 3)).astype(np.float32)
    for build, inputs in ((lambda p: HFTextExtractor("t", minilm_path, batch_size=3, device="cpu", progress=p), texts),
                          (lambda p: SentenceTransformerExtractor("s", minilm_path, batch_size=3, device="cpu",
                                                                  progress=p), texts),
                          (lambda p: TorchExtractor("m", _torch_module(0), batch_size=4, device="cpu", progress=p), X)):
        quiet, shown = build(False).transform(inputs), build(True).transform(inputs)
        assert _bitwise(quiet, shown)


# ----------------------------------------------------------------------------- configs: the round trip
CONFIG_MODULES = ("vertebrae.artifacts.cache", "vertebrae.extractors.compression", "vertebrae.inputs.views", "vertebrae.extractors.profiling",
                  "vertebrae.scoring.memory", "vertebrae.scoring.overlap", "vertebrae.scoring.separatix",
                  "vertebrae.scoring.stability", "vertebrae.families.retrieval.config", "vertebrae.families.zero_shot.config",
                  "vertebrae.selection.screening", "vertebrae.scoring.knn_metric", "vertebrae.scoring.label_retrieval",
                  "vertebrae.scoring.linear_probe", "vertebrae.scoring.logme", "vertebrae.scoring.ridge_probe",
                  "vertebrae.scoring.lda_probe")

#: Config -> (arguments of a base config, {field: another value}), or a list of such pairs (fields read only
#: with some other setting).
CONFIG_CASES = {
    "CacheConfig": ({"store": "/tmp/a"}, {"enabled": False, "store": "/tmp/b", "storage_options": {"anon": True},
                                         "mode": "refresh", "secret": "s" * 16, "max_artifact_bytes": 10}),
    "EmbeddingCompressionConfig": [({"method": "pca", "n_components": 2},
                                    {"method": "truncated_svd", "n_components": 3, "whiten": True, "random_state": 1,
                                     "name": "p2"}),
                                   ({"method": "quantize", "dtype": "int8"}, {"dtype": "float16"})],
    "TargetViewConfig": ({}, {"views": ("coarse",), "output_views": {"a": ("coarse",)}}),
    "LabelViewConfig": ({}, {"levels": ("family",), "output_levels": {"a": ("family",)}}),
    "ResourceProfilingConfig": ({}, {"enabled": False, "rss_interval_seconds": 0.5, "synchronize": False}),
    "MemoryConfig": ({"max_scoring_bytes": 10_000_000}, {"max_scoring_bytes": 20_000_000, "policy": "fail",
                                                         "random_state": 1}),
    "OverlapScoringConfig": ({}, {"k": 4, "min_k": 2, "max_k": 20, "min_samples_per_cluster": 3,
                                  "kmeans_kwargs": {"max_iter": 50}, "normalize_embeddings": False,
                                  "max_dense_bytes": 1000, "exclude_classes": ["a"], "random_state": 1,
                                  "offline_chunk_size": 7, "thread_limit": 2}),
    "ContinuousOverlapScoringConfig": ({}, {"k": 4, "target_cover": "quantile", "n_target_cells": 3,
                                            "target_distance": "wasserstein", "n_null_permutations": 5,
                                            "null_mode": "auto", "aggregation": "macro", "target_scaling": "none",
                                            "adjacency_mode": "hard_top1", "top_k": 2,
                                            "kmeans_kwargs": {"max_iter": 50}, "normalize_embeddings": False,
                                            "random_state": 1, "offline_chunk_size": 7, "thread_limit": 2}),
    "SeparatixConfig": ({}, {"enabled": False, "run_when": "always", "overlap_threshold": 0.5,
                             "regression_overlap_threshold": 0.2, "budget": "standard", "densify_policy": "skip",
                             "max_dense_bytes": 1000, "mlp_probes": True, "random_state": 1, "thread_limit": 2}),
    "StabilityConfig": [({}, {"mode": "subsample", "repeats": 5, "interval_level": 0.9, "subsample_fraction": 0.5,
                              "random_state": 1, "n_jobs": 2}),
                        ({"repeats": "auto"}, {"repeats": 5, "min_repeats": 4, "max_repeats": 40, "batch_repeats": 3,
                                               "equivalence_margin": 0.02})],
    "RetrievalConfig": ({}, {"primary_metric": "map", "cutoffs": (1, 5), "similarity": "dot", "bidirectional": True,
                             "memory_budget_bytes": 1 << 20, "block_size": 8, "thread_limit": 2,
                             "quality_tolerance": 0.05}),
    "ZeroShotConfig": ({}, {"metric": "macro_f1", "similarity": "dot", "top_k": (1, 3), "block_rows": 4,
                            "max_dense_bytes": 1 << 20, "quality_tolerance": 0.05, "thread_limit": 2}),
    "ScreeningConfig": ({}, {"start_fraction": 0.2, "start_rows": 50, "eta": 2, "repeats": 4,
                             "subsample_fraction": 0.5, "interval_level": 0.9, "seed": 1,
                             "metric": RidgeProbeMetric()}),
    "KNNMetric": ({}, {"k": 3, "max_block_bytes": 1 << 20, "name": "knn3"}),
    "LabelRetrievalMetric": ({}, {"cutoffs": (1, 5), "similarity": "dot", "primary": "mrr", "block_size": 8,
                                  "name": "lr"}),
    "LinearProbeMetric": [({}, {"n_splits": 3, "C": 2.0, "max_iter": 50, "alpha": 2.0, "name": "lp", "n_repeats": 2,
                                "device": "cuda"}),
                          ({"C": "auto"}, {"C_grid": (0.1, 1.0), "C_patience": 2})],
    "LogMEMetric": ({}, {"max_iter": 50, "tol": 1e-6, "max_dense_bytes": 1 << 20, "name": "lm"}),
    "RidgeProbeMetric": ({}, {"n_splits": 3, "alphas": (1.0, 2.0), "selection": "gcv", "max_dense_bytes": 1 << 20,
                              "name": "rp"}),
    "LDAProbeMetric": ({}, {"n_splits": 3, "max_dense_bytes": 1 << 20, "name": "ldp"}),
}


def shipped_configs() -> list[type]:
    for module in CONFIG_MODULES:
        importlib.import_module(module)

    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return [cls for cls in below(Config) if cls.__module__.startswith("vertebrae.")]


def test_every_config_field_moves_its_fingerprint_unless_speed_only():
    configs = shipped_configs()
    assert sorted(cls.__name__ for cls in configs) == sorted(CONFIG_CASES)
    for cls in configs:
        cases = CONFIG_CASES[cls.__name__]
        cases = cases if isinstance(cases, list) else [cases]
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        covered = {field for _, alternatives in cases for field in alternatives}
        assert fields <= covered | set(cls.speed_only), \
            f"{cls.__name__}: add a changed value of {sorted(fields - covered - set(cls.speed_only))}"
        for base, alternatives in cases:
            reference = cls(**base).fingerprint()
            for field, value in alternatives.items():
                moved = cls(**{**base, field: value}).fingerprint() != reference
                assert moved is (field not in cls.speed_only), \
                    f"{cls.__name__}.{field}: {'moves' if moved else 'does not move'} the fingerprint"


def test_the_declared_speed_only_config_fields():
    """Each is proven below; this pins the list, so a new declaration needs its own proof."""
    declared = {cls.__name__: tuple(cls.speed_only) for cls in shipped_configs() if cls.speed_only}
    assert declared == {"OverlapScoringConfig": ("offline_chunk_size",),
                        "ContinuousOverlapScoringConfig": ("offline_chunk_size",),
                        "StabilityConfig": ("n_jobs",),
                        "SeparatixConfig": ("thread_limit",),
                        # proven in tests/test_probe_solver.py::test_fold_workers_give_identical_bytes_and_move_no_key
                        "LinearProbeMetric": ("n_jobs",),
                        # proven in tests/test_closed_form_probes.py::test_fold_workers_give_identical_bytes_...
                        "RidgeProbeMetric": ("n_jobs",), "LDAProbeMetric": ("n_jobs",)}


# ----------------------------------------------------------------------------- configs: speed-only proofs
def _scored(config_kwargs: dict) -> tuple[str, str, str]:
    """One JSON document each of a single-label, multi-label and regression score."""
    rng = np.random.default_rng(0)
    n = 240
    X = rng.normal(size=(n, 12)).astype(np.float32)
    y = rng.integers(0, 3, n)
    X[:, 0] += y
    labels = (rng.random((n, 3)) < 0.3).astype(int)
    labels[:, 0] |= X[:, 1] > 0
    labels[:, 2] |= labels.sum(1) == 0
    scorer = OverlapIndexScorer(OverlapScoringConfig(**config_kwargs),
                                ContinuousOverlapScoringConfig(n_null_permutations=3, **config_kwargs))
    results = (scorer.score(X, y, warn=False), scorer.score(X, labels, target_type="multi_label", warn=False),
               scorer.score(X, X[:, :2] @ [1.0, 0.5] + rng.normal(size=n), target_type="regression", warn=False))
    return tuple(json.dumps(r.to_dict(), sort_keys=True) for r in results)


def test_overlap_speed_fields_leave_scores_bitwise_identical():
    assert _scored({"offline_chunk_size": 7}) == _scored({})


@pytest.mark.parametrize("config_type", [OverlapScoringConfig, ContinuousOverlapScoringConfig])
def test_overlap_thread_limit_is_in_the_key_because_blas_threads_break_kmeans_ties_differently(config_type):
    """Once declared speed-only; tests/test_overlap_scorer.py shows a collapsed space scoring 0.5606 on one OpenBLAS
    thread and 0.5626 on two (AMD EPYC, Haswell kernels), so each limit has its own identity."""
    identities = {json.dumps(config_type(thread_limit=limit).fingerprint(), sort_keys=True)
                  for limit in (1, 2, None)}
    assert len(identities) == 3


def test_stability_n_jobs_leaves_the_repeats_bitwise_identical():
    from vertebrae.scoring.stability import run_stability_analysis

    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6)
    results = [run_stability_analysis(X, y, config=StabilityConfig(mode="subsample", repeats=3, n_jobs=n_jobs))
               for n_jobs in (1, 2)]
    assert json.dumps(results[0].to_dict(), sort_keys=True) == json.dumps(results[1].to_dict(), sort_keys=True)
    assert results[1].config.n_jobs == 2  # the run used two workers; what it stores does not say so


def test_retrieval_thread_limit_is_in_the_key_because_blas_threads_round_differently():
    """Once declared speed-only; on an AMD EPYC (OpenBLAS Haswell kernels) one- and two-thread sgemm differ by up to
    1.5e-7 per similarity, which moved ``mean_positive_similarity`` in its ninth digit: so each limit has its key."""
    from vertebrae.families.retrieval import RetrievalBenchmark, RetrievalConfig, RetrievalDataset
    from vertebrae.families.retrieval.extractors import PrecomputedPairExtractor

    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(60, 32)).astype(np.float32), rng.normal(size=(400, 32)).astype(np.float32)
    relevance = [(i, (7 * i + j) % 400, 1) for i in range(60) for j in range(3)]
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=relevance, identity=IDENTITY)
    entries, keys = set(), set()
    for limit in (1, 2, None):
        benchmark = RetrievalBenchmark(dataset, [PrecomputedPairExtractor("p", queries, gallery)],
                                       retrieval_config=RetrievalConfig(thread_limit=limit, bidirectional=True))
        keys.add(tuple(sorted(benchmark.plan().chain_keys[0].items())))
        forward = benchmark.run().to_dict()["extractor_results"][0]["forward"]
        entries.add(json.dumps(forward["metrics"], sort_keys=True))
    assert len(keys) == 3  # the rank stages hash the limit
    assert len(entries) == 1  # the metrics themselves agree on this data (no near-tied items)


def test_separatix_thread_limit_leaves_the_stored_diagnosis_bitwise_identical():
    from vertebrae.families.labeled.stages import SEPARATIX_CODEC
    from vertebrae.scoring.separatix import SeparatixScorer

    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 12)).astype(np.float32)
    y = rng.integers(0, 3, 240)
    X[:, 0] += 2 * y
    stored = {json.dumps(SEPARATIX_CODEC.encode(SeparatixScorer(SeparatixConfig(thread_limit=limit, run_when="always"))
                                                .diagnose(X, y, overlap_score=0.5)).document, sort_keys=True)
              for limit in (1, 2, None)}
    assert len(stored) == 1


def test_label_retrieval_block_size_is_in_the_identity_because_block_shapes_round_differently():
    """Once declared speed-only; on an AMD EPYC (OpenBLAS Haswell kernels) blocks of 7 and 256 queries gave scores
    0.35215508 and 0.35215516 (a near-tied rank moved), so each block size has its own identity."""
    from vertebrae.scoring.label_retrieval import LabelRetrievalMetric
    from vertebrae.scoring.metrics import run_metrics
    from vertebrae.inputs.targets import build_targets

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8)).astype(np.float32)
    y = rng.integers(0, 4, 300)
    X[:, 0] += y
    results = {json.dumps(run_metrics([LabelRetrievalMetric(block_size=size)], X, build_targets(y), None,
                                      seed=0).results[0].to_dict(), sort_keys=True) for size in (256, 7, 1000)}
    scores = {json.loads(r)["score"] for r in results}
    assert max(scores) - min(scores) < 1e-6  # the same metric up to float32 round-off
    assert len({json.dumps(LabelRetrievalMetric(block_size=size).identity(), sort_keys=True)
                for size in (256, 7, 1000)}) == 3


def test_a_retrieval_ranking_hashes_what_it_reads():
    from vertebrae.families.retrieval import RetrievalBenchmark, RetrievalConfig, RetrievalDataset
    from vertebrae.families.retrieval.extractors import PrecomputedPairExtractor

    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(6, 4)), rng.normal(size=(12, 4))
    dataset = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(6)],
                                               identity=IDENTITY)

    def keys(**config):
        extractor = PrecomputedPairExtractor("p", queries, gallery)
        return RetrievalBenchmark(dataset, [extractor], retrieval_config=RetrievalConfig(**config)).plan().chain_keys[0]

    base = keys(cutoffs=(1, 5, 10))
    assert {s for s, k in keys(cutoffs=(1, 5, 10), primary_metric="ndcg@5").items() if base[s] != k} == {"assemble"}
    assert keys(cutoffs=(1, 5, 10), bidirectional=True)["rank_forward"] == base["rank_forward"]
    assert keys(cutoffs=(1, 10))["rank_forward"] != base["rank_forward"]

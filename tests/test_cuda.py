"""Every GPU path against its CPU twin: each extractor, the linear probe and the CUDA resource profile.

These tests need a CUDA device and skip without one, saying so; CI has none, so they run where a GPU is lent
(docs/gpu.md lists the runs and their figures).  Models are tiny random architectures saved with
``save_pretrained`` and loaded by path, as a user's checkpoint is; each output on ``cuda`` must equal the same
extractor's output on ``cpu``.  The tolerances are those of float32 kernels that sum in another order (cuBLAS,
cuDNN); TF32 is off by torch's default for matrix products, and the conv front ends are checked at a looser
``rtol`` because cuDNN may use TF32 for convolutions (``torch.backends.cudnn.allow_tf32`` defaults to True).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device: each test compares a GPU run with the CPU run")

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, HFAudioExtractor,  # noqa: E402
                       HFTextExtractor, HFVisionExtractor, ImageTextEncoder, LinearProbeMetric,
                       ResourceProfilingConfig, SentenceTransformerExtractor, SeparatixConfig, TorchExtractor)

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "photo", "of", "red", "green", "picture", "thing", "the", "is"]
TEXTS = ["a photo of red", "the thing is green", "a picture", "red red green thing of the photo", "is a",
         "green picture of a thing", "the red", "photo photo photo picture thing"] * 3
TRANSFORMER = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
IMAGE = dict(TRANSFORMER, image_size=32, patch_size=8)
WAVEFORM = dict(TRANSFORMER, conv_dim=(8, 8), conv_stride=(4, 2), conv_kernel=(8, 4), num_conv_pos_embeddings=8,
                num_conv_pos_embedding_groups=2)


def _tokenizer(template: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", eos_token="[SEP]", model_max_length=32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Folders of a tiny BERT, sentence-transformers BERT, ViT, ConvNeXt, CLIP, wav2vec2 and Whisper."""
    import transformers as tf
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("cuda_models")
    paths = {name: root / name for name in ("bert", "st", "vit", "convnext", "clip", "wav2vec2", "whisper")}
    text = dict(TRANSFORMER, vocab_size=len(WORDS), max_position_embeddings=32, pad_token_id=0)
    tf.BertModel(tf.BertConfig(**text)).save_pretrained(paths["bert"])
    _tokenizer("[CLS] $A [SEP]").save_pretrained(paths["bert"])
    SentenceTransformer(modules=[st_models.Transformer(str(paths["bert"])), st_models.Pooling(16)],
                        device="cpu").save(str(paths["st"]))
    square = {"height": 32, "width": 32}
    tf.ViTModel(tf.ViTConfig(**IMAGE)).save_pretrained(paths["vit"])
    tf.ViTImageProcessor(size=square).save_pretrained(paths["vit"])
    tf.ConvNextModel(tf.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)).save_pretrained(
        paths["convnext"])
    tf.ConvNextImageProcessor(size={"shortest_edge": 32}).save_pretrained(paths["convnext"])
    clip_text = dict(text, bos_token_id=2, eos_token_id=3)
    tf.CLIPModel(tf.CLIPConfig(text_config=clip_text, vision_config=IMAGE, projection_dim=8)).save_pretrained(
        paths["clip"])
    tf.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square).save_pretrained(paths["clip"])
    _tokenizer("$A [SEP]").save_pretrained(paths["clip"])
    tf.Wav2Vec2Model(tf.Wav2Vec2Config(**WAVEFORM, feat_extract_norm="layer")).save_pretrained(paths["wav2vec2"])
    tf.Wav2Vec2FeatureExtractor(sampling_rate=16_000, return_attention_mask=True).save_pretrained(paths["wav2vec2"])
    whisper = tf.WhisperConfig(d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                               decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
                               max_source_positions=50, max_target_positions=16, vocab_size=64, pad_token_id=0,
                               bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    tf.WhisperModel(whisper).save_pretrained(paths["whisper"])
    tf.WhisperFeatureExtractor(feature_size=8, sampling_rate=16_000, hop_length=160, chunk_length=1,
                               n_fft=64).save_pretrained(paths["whisper"])
    return paths


def pictures(n: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 255, size=(24 + 5 * i, 40 - 2 * i, 3), dtype=np.uint8) for i in range(n)]


def clips(n: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.normal(0, 0.3, 4_000 + 1_500 * i).astype(np.float32) for i in range(n)]


def named_outputs(extractor, inputs) -> dict[str, np.ndarray]:
    """Every output by name; a single-output extractor's one output under its own name."""
    try:
        return extractor.transform_many(inputs)
    except AttributeError:  # a single output has no transform_many (BatchedExtractor says so)
        return {extractor.name: extractor.transform(inputs)}


def assert_same_outputs(build, inputs, *, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """``build(device)`` on cuda and on cpu give every output within float32 reordering error; prints the gap."""
    on_cpu = named_outputs(build("cpu"), inputs)
    gpu = build("cuda")
    on_gpu = named_outputs(gpu, inputs)
    assert on_gpu.keys() == on_cpu.keys()
    for name in on_cpu:
        gap = float(np.max(np.abs(on_gpu[name] - on_cpu[name])))
        print(f"{type(gpu).__name__} {name}: max |cuda - cpu| = {gap:.2e}")
        np.testing.assert_allclose(on_gpu[name], on_cpu[name], rtol=rtol, atol=atol, err_msg=name)


def test_hf_text_on_cuda_equals_cpu(models):
    assert_same_outputs(lambda device: HFTextExtractor("bert", models["bert"], layers=[0, 1, 2], poolings=("mean", "cls",
                        "max"), batch_size=5, device=device, progress=False), TEXTS)


def test_sentence_transformer_on_cuda_equals_cpu(models):
    assert_same_outputs(lambda device: SentenceTransformerExtractor("st", models["st"], batch_size=5, device=device,
                                                                    progress=False), TEXTS)


@pytest.mark.parametrize("name", ["vit", "convnext"])
def test_hf_vision_on_cuda_equals_cpu(models, name):
    rtol = 1e-3 if name == "convnext" else 1e-4  # ConvNeXt's stem is a convolution (cuDNN may use TF32)
    assert_same_outputs(lambda device: HFVisionExtractor(name, models[name], layers=[0, -1], poolings=("mean", "cls")
                                                         if name == "vit" else ("mean",), batch_size=3, device=device,
                                                         progress=False), pictures(), rtol=rtol, atol=1e-4)


@pytest.mark.parametrize("name", ["wav2vec2", "whisper"])
def test_hf_audio_on_cuda_equals_cpu(models, name):
    assert_same_outputs(lambda device: HFAudioExtractor(name, models[name], sampling_rate=16_000, layers=[0, -1],
                                                        poolings=("mean", "max"), batch_size=4, device=device,
                                                        progress=False), clips(), rtol=1e-3, atol=1e-4)


def test_image_text_encoder_on_cuda_equals_cpu(models):
    cpu = ImageTextEncoder("clip", models["clip"], batch_size=3, device="cpu", progress=False)
    gpu = ImageTextEncoder("clip", models["clip"], batch_size=3, device="cuda", progress=False)
    prompts = ["a photo of red", "a photo of green", "the thing"]
    np.testing.assert_allclose(gpu.encode_samples(pictures()), cpu.encode_samples(pictures()), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpu.encode_prompts(prompts), cpu.encode_prompts(prompts), rtol=1e-4, atol=1e-5)


def test_torch_extractor_on_cuda_equals_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.GELU(), torch.nn.Linear(32, 5))
    X = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
    assert_same_outputs(lambda device: TorchExtractor("mlp", model, batch_size=7, device=device, progress=False), X)
    assert next(model.parameters()).device.type == "cpu"  # the caller's model is handed back where it was


def test_jax_extractor_on_the_gpu_equals_numpy():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip(f"jax sees no GPU here ({jax.devices()}); the JAX path places arrays on jax's default device")
    from vertebrae import JAXExtractor

    W = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    X = np.random.default_rng(2).normal(size=(30, 6)).astype(np.float32)
    out = JAXExtractor("jax", lambda params, x: jax.numpy.tanh(x @ params), W, batch_size=8,
                       progress=False).transform(X)
    np.testing.assert_allclose(out, np.tanh(X @ W), rtol=1e-5, atol=1e-6)


def test_keras_on_the_torch_backend_runs_on_cuda_and_equals_numpy():
    """Keras places models itself (its torch backend picks cuda when torch sees one): the output must not move."""
    import os

    if os.environ.setdefault("KERAS_BACKEND", "torch") != "torch":
        pytest.skip(f"KERAS_BACKEND={os.environ['KERAS_BACKEND']}; this test checks the torch backend on cuda")
    keras = pytest.importorskip("keras")
    from vertebrae import KerasExtractor

    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(6,))
    model = keras.Model(inputs, keras.layers.Dense(4, activation="tanh")(inputs))
    assert str(model.weights[0].value.device).startswith("cuda")
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in model.weights)
    X = np.random.default_rng(2).normal(size=(30, 6)).astype(np.float32)
    out = KerasExtractor("keras", model, batch_size=8, progress=False).transform(X)
    np.testing.assert_allclose(out, np.tanh(X @ kernel + bias), rtol=1e-5, atol=1e-6)


def test_onnx_on_the_cuda_provider_equals_the_cpu_provider(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip(f"this onnxruntime build offers {onnxruntime.get_available_providers()}, not CUDA "
                    "(onnxruntime-gpu provides it)")
    from vertebrae import ONNXExtractor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).eval()
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(model, torch.zeros(1, 6), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, dynamo=False)
    X = np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)
    assert_same_outputs(lambda device: ONNXExtractor("mlp", path, providers=["CUDAExecutionProvider"]
                                                     if device == "cuda" else ["CPUExecutionProvider"],
                                                     progress=False), X)


def test_a_cuda_benchmark_profiles_the_allocator_peak(models):
    """The CUDA branch of resource profiling: synchronized latency and the allocator's peak in the profile window."""
    labels = [i % 2 for i in range(len(TEXTS))]
    dataset = BenchmarkDataset.from_arrays(TEXTS, labels, identity=DatasetIdentity.declared("cuda-texts", "1"))
    extractor = HFTextExtractor("bert", models["bert"], layers=[-1], batch_size=4, device="cuda", progress=False)
    result = Benchmark(dataset, [extractor], resource_profiling=ResourceProfilingConfig(),
                       separatix_config=SeparatixConfig(enabled=False), progress=False).run()
    profile = result.extractor_results[0].resource_profile
    memory = profile["device_memory"]
    print(f"profile: latency {profile['latency']}, device memory {memory}")
    assert memory["status"] == "measured" and memory["device"].startswith("cuda")
    parameters = sum(p.numel() * p.element_size() for p in extractor.model_.parameters())
    assert memory["peak_allocated_bytes"] >= parameters  # the weights sit on the device for the whole window
    assert memory["peak_increase_bytes"] == memory["peak_allocated_bytes"] - memory["baseline_allocated_bytes"]
    assert profile["context"]["synchronization"] == "synchronized"
    assert profile["latency"]["clock"] == "device_synchronized"


def _classes(n: int, dim: int, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = (rng.normal(0, 0.25, (n_classes, dim))[y] + rng.normal(size=(n, dim))) * np.geomspace(1, 1e-2, dim)
    return X.astype(np.float32), y


SINGLE = {"target_type": "single_label"}


@pytest.mark.parametrize("settings", [{}, {"C": "auto", "C_grid": (0.01, 0.1, 1.0, 10.0)}, {"n_repeats": 2},
                                      {"C": 100.0}])
def test_probe_on_cuda_matches_cpu_for_single_label_targets(settings):
    X, y = _classes(600, 64, 5, seed=3)
    labels = np.array([f"vk:int:{c}" for c in y])
    cpu = LinearProbeMetric(**settings)(X, labels, target_metadata=SINGLE, seed=0)
    gpu = LinearProbeMetric(device="cuda", **settings)(X, labels, target_metadata=SINGLE, seed=0)
    print(f"{settings}: cpu {cpu['score']:.6f}, cuda {gpu['score']:.6f}")
    assert gpu["diagnostics"]["fold_scores"] == pytest.approx(cpu["diagnostics"]["fold_scores"], abs=1e-4)
    if "C_grid" in settings:
        assert gpu["diagnostics"]["chosen_C"] == cpu["diagnostics"]["chosen_C"]
    else:  # the independent reference: scikit-learn converged to tol=1e-10 on the documented folds
        assert gpu["diagnostics"]["fold_scores"] == pytest.approx(_sklearn_fold_scores(X, y, **settings), abs=1e-4)


def _sklearn_fold_scores(X, y, C: float = 1.0, n_repeats: int = 1) -> list[float]:
    """``StandardScaler`` then ``LogisticRegression(C, tol=1e-10)`` on StratifiedKFold(5, shuffled) folds, repeat-major:
    repeat 0 with seed 0, repeat r with ``SeedSequence([0, r]).generate_state(1)[0]`` (docs/metrics.md)."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    seeds = [0, *(int(np.random.SeedSequence([0, r]).generate_state(1)[0]) for r in range(1, n_repeats))]
    model = make_pipeline(StandardScaler(), LogisticRegression(C=C, tol=1e-10, max_iter=100_000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [score for seed in seeds for score in cross_val_score(
            model, X, y, cv=StratifiedKFold(5, shuffle=True, random_state=seed), scoring="balanced_accuracy")]


def test_probe_on_cuda_matches_cpu_for_multi_label_regression_groups_and_sparse_input():
    """cuda equals cpu, and its fold scores equal scikit-learn's on the documented folds (seed 0): StandardScaler
    (with_mean=False for sparse) then OneVsRest LogisticRegression(tol=1e-10) / Ridge(alpha=1.0) /
    LogisticRegression(tol=1e-10) on KFold, GroupKFold or StratifiedKFold(5, shuffled)."""
    import warnings

    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.model_selection import GroupKFold, KFold, StratifiedKFold, cross_val_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = _classes(400, 32, 3, seed=4)
    multi = np.random.default_rng(5).integers(0, 2, (400, 3))
    multi[:, 0] = y == 1
    continuous = X[:, :2] @ np.array([1.0, -2.0]) + np.random.default_rng(6).normal(0, 0.1, 400)
    groups = np.arange(400) % 20
    sparse = sp.random(400, 200, density=0.05, format="csr", random_state=7, dtype=np.float64)
    tight = LogisticRegression(tol=1e-10, max_iter=100_000)
    folds, stratified = KFold(5, shuffle=True, random_state=0), StratifiedKFold(5, shuffle=True, random_state=0)
    labels = np.array([f"vk:int:{c}" for c in y])
    cases = [(X, multi, {"target_type": "multi_label"}, {},
              (make_pipeline(StandardScaler(), OneVsRestClassifier(tight)), multi, folds, "f1_macro")),
             (X, continuous, {"target_type": "regression"}, {},
              (make_pipeline(StandardScaler(), Ridge(alpha=1.0)), continuous, folds, "r2")),
             (X, labels, SINGLE, {"groups": groups},
              (make_pipeline(StandardScaler(), tight), y, GroupKFold(5, shuffle=True, random_state=0),
               "balanced_accuracy")),
             (sparse, labels, SINGLE, {},
              (make_pipeline(StandardScaler(with_mean=False), tight), y, stratified, "balanced_accuracy"))]
    for data, targets, meta, extra, (model, reference_y, cv, scoring) in cases:
        cpu = LinearProbeMetric()(data, targets, target_metadata=meta, seed=0, **extra)
        gpu = LinearProbeMetric(device="cuda")(data, targets, target_metadata=meta, seed=0, **extra)
        print(f"{meta['target_type']}{' groups' if extra else ''}{' sparse' if data is sparse else ''}: "
              f"cpu {cpu['score']:.6f}, cuda {gpu['score']:.6f}")
        assert gpu["score"] == pytest.approx(cpu["score"], abs=1e-4), meta
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = cross_val_score(model, data, reference_y, groups=extra.get("groups"), cv=cv, scoring=scoring)
        assert gpu["diagnostics"]["fold_scores"] == pytest.approx(expected.tolist(), abs=1e-4), meta

"""HFVisionExtractor and ImageTextEncoder on real architectures (tiny configs, random weights, saved and loaded by path).

Every number is checked against a direct ``transformers`` forward on the same images with the pooling written
out here; nothing is downloaded (HF_HUB_OFFLINE=1 in conftest).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, HFVisionExtractor, ImageTextEncoder,
                           OverlapScoringConfig, SeparatixConfig, ZeroShotBenchmark, ZeroShotDataset)
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.errors import ConfigError, InputTypeError, InputValidationError
from vertebrae.extractors.profiling import ResourceProfilingConfig
from vertebrae._base.profile_records import CACHE_HIT

SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=32,
             patch_size=8)
WORDS = ["[PAD]", "[UNK]", "<s>", "</s>", "a", "photo", "of", "red", "green", "picture", "thing"]
CONFIG = OverlapScoringConfig(k=2, min_samples_per_cluster=2)
NO_SEPARATIX = SeparatixConfig(enabled=False)


def _tokenizer():
    """A word-level tokenizer that appends the end-of-text token CLIP's text tower pools."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>",
                                   model_max_length=16)


@pytest.fixture(scope="session")
def vision_models(tmp_path_factory):
    """Tiny ViT, DINOv2 with registers, ConvNeXt, CLIP and SigLIP folders (model + image processor), built once."""
    import transformers as tf

    torch.manual_seed(0)
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("vision_models")
    square = {"height": 32, "width": 32}
    text = dict(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=32, max_position_embeddings=16, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    built = {
        "vit": (tf.ViTModel(tf.ViTConfig(**SMALL)), tf.ViTImageProcessor(size=square)),
        "dinov2": (tf.Dinov2WithRegistersModel(tf.Dinov2WithRegistersConfig(**SMALL, num_register_tokens=2)),
                   tf.BitImageProcessor(size={"shortest_edge": 32}, crop_size=square)),
        "convnext": (tf.ConvNextModel(tf.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
                     tf.ConvNextImageProcessor(size={"shortest_edge": 32})),
        "clip": (tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=SMALL, projection_dim=8)),
                 tf.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=square)),
        "siglip": (tf.SiglipModel(tf.SiglipConfig(text_config=text, vision_config=SMALL)),
                   tf.SiglipImageProcessor(size=square)),
    }
    paths = {}
    for name, (model, processor) in built.items():
        paths[name] = root / name
        model.save_pretrained(paths[name])
        processor.save_pretrained(paths[name])
    for name in ("clip", "siglip"):
        _tokenizer().save_pretrained(paths[name])
    return paths


def pictures(n: int = 8) -> list[np.ndarray]:
    """Images of different sizes; class c (= row % 2) is bright in channel c."""
    rng = np.random.default_rng(3)
    images = []
    for i in range(n):
        image = rng.integers(0, 90, size=(24 + 5 * i, 40 - 2 * i, 3), dtype=np.uint8)
        image[:, :, i % 2] += 160
        images.append(image)
    return images


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pictures")
    paths = []
    for i, image in enumerate(pictures()):
        paths.append(folder / f"p{i}.png")
        Image.fromarray(image).save(paths[-1])
    return BenchmarkDataset.from_image_paths(paths, ["red" if i % 2 == 0 else "green" for i in range(8)],
                                             identity=DatasetIdentity.content_hash("pictures"))


def direct_states(path, images, **processor_kwargs):
    """``transformers`` itself: the processor on every image at once, one forward pass with hidden states."""
    from transformers import AutoImageProcessor, AutoModel

    model = AutoModel.from_pretrained(str(path)).eval()
    tower = getattr(model, "vision_model", model)
    pixels = AutoImageProcessor.from_pretrained(str(path), backend="pil")(images=images, return_tensors="pt",
                                                                          **processor_kwargs)
    with torch.no_grad():
        return tower(pixel_values=pixels["pixel_values"], output_hidden_states=True)


#: model -> (poolings it supports, leading special tokens: CLS and registers)
CASES = {"vit": (["cls", "mean", "max", "pooler"], 1), "dinov2": (["cls", "mean", "max", "pooler"], 3),
         "clip": (["cls", "mean", "max", "pooler"], 1), "siglip": (["mean", "max", "pooler"], 0),
         "convnext": (["mean", "max", "pooler"], None)}


@pytest.mark.parametrize("model", sorted(CASES))
def test_outputs_equal_a_direct_forward_with_the_pooling_written_out(vision_models, image_dataset, model):
    poolings, n_special = CASES[model]
    extractor = HFVisionExtractor(model, vision_models[model], layers=[0, -1], poolings=poolings, batch_size=3,
                                  device="cpu", progress=False)
    got = extractor.transform_many(image_dataset.inputs)
    images = [image_dataset.inputs[i] for i in range(8)]
    out = direct_states(vision_models[model], images)
    last = len(out.hidden_states) - 1
    for layer in (0, last):
        states = out.hidden_states[layer].numpy()
        if n_special is None:  # ConvNeXt feature map (batch, channels, h, w): global pooling
            expected = {"mean": states.mean(axis=(2, 3)), "max": states.max(axis=(2, 3))}
        else:
            patches = states[:, n_special:]
            expected = {"cls": states[:, 0], "mean": patches.mean(axis=1), "max": patches.max(axis=1)}
        for pooling in poolings:
            if pooling != "pooler":
                np.testing.assert_allclose(got[f"layer{layer}_{pooling}"], expected[pooling], atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(got["pooler"], out.pooler_output.reshape(8, -1).numpy(), atol=1e-5, rtol=1e-4)
    assert set(got) == set(extractor.output_names())


@pytest.mark.parametrize("model", ["vit", "dinov2", "siglip", "clip"])
def test_final_norm_outputs_are_the_normalized_last_layer_of_a_direct_forward(vision_models, image_dataset, model):
    """ViT, DINOv2 and SigLIP normalize ``last_hidden_state``; CLIP normalizes only its CLS (``pooler_output``)."""
    poolings, n_special = CASES[model]
    token = [p for p in poolings if p != "pooler"]
    extractor = HFVisionExtractor(model, vision_models[model], layers=-1, poolings=token, final_norm=True,
                                  batch_size=3, device="cpu", progress=False)
    assert extractor.output_names() == (*(f"layer2_{p}" for p in token), *(f"final_norm_{p}" for p in token))
    assert extractor.output_metadata()["final_norm_mean"] == {"hidden_layer": 2, "pooling": "mean", "final_norm": True}
    got = extractor.transform_many(image_dataset.inputs)
    out = direct_states(vision_models[model], [image_dataset.inputs[i] for i in range(8)])
    if model == "clip":  # last_hidden_state is the raw last block; the final norm is post_layernorm
        np.testing.assert_allclose(out.last_hidden_state.numpy(), out.hidden_states[-1].numpy())
        from transformers import AutoModel

        normed = AutoModel.from_pretrained(str(vision_models[model])).vision_model.post_layernorm
        with torch.no_grad():
            states = normed(out.hidden_states[-1]).numpy()
        np.testing.assert_allclose(got["final_norm_cls"], out.pooler_output.numpy(), atol=1e-5, rtol=1e-4)
    else:
        states = out.last_hidden_state.numpy()
    assert not np.allclose(states, out.hidden_states[-1].numpy(), atol=1e-3)  # the norm changes the states
    expected = {"cls": states[:, 0], "mean": states[:, n_special:].mean(axis=1), "max": states[:, n_special:].max(axis=1)}
    for pooling in token:
        np.testing.assert_allclose(got[f"final_norm_{pooling}"], expected[pooling], atol=1e-5, rtol=1e-4)
    if model == "vit":  # the standard ViT linear-probe feature: the final-norm CLS token
        np.testing.assert_allclose(got["final_norm_cls"], out.last_hidden_state[:, 0].numpy(), atol=1e-5, rtol=1e-4)


def test_batched_equals_unbatched_for_images_of_different_sizes(vision_models, image_dataset):
    def run(batch_size):
        return HFVisionExtractor("vit", vision_models["vit"], layers=[1, 2], poolings=["cls", "mean"],
                                 batch_size=batch_size, device="cpu", progress=False).transform_many(image_dataset.inputs)

    one, many = run(1), run(5)
    for name in one:
        np.testing.assert_allclose(one[name], many[name], atol=1e-5, rtol=1e-4)


def test_names_and_metadata_follow_the_text_extractor_and_are_known_without_loading(vision_models):
    extractor = HFVisionExtractor("dino", vision_models["dinov2"], layers=[1, -1], poolings=["mean", "pooler"])
    assert extractor.output_names() == ("layer1_mean", "layer2_mean", "pooler")
    assert extractor.output_metadata() == {"layer1_mean": {"hidden_layer": 1, "pooling": "mean"},
                                           "layer2_mean": {"hidden_layer": 2, "pooling": "mean"},
                                           "pooler": {"hidden_layer": 2, "pooling": "pooler"}}
    recipe = extractor.recipe()
    assert extractor.model_ is None
    assert recipe["image_loader"]["library"] == "pillow" and recipe["processor_backend"] == "pil"


def test_processor_settings_and_the_loading_path_enter_the_recipe(vision_models, tmp_path):
    copy = tmp_path / "vit"
    shutil.copytree(vision_models["vit"], copy)
    before = HFVisionExtractor("vit", copy).recipe()
    assert HFVisionExtractor("vit", copy, processor_backend="torchvision").recipe() != before
    settings = json.loads((copy / "preprocessor_config.json").read_text())
    settings["image_mean"] = [0.4, 0.4, 0.4]
    (copy / "preprocessor_config.json").write_text(json.dumps(settings))
    assert HFVisionExtractor("vit", copy).recipe()["model_files_sha256"] != before["model_files_sha256"]


@pytest.mark.parametrize("model, kwargs, error, message", [
    ("siglip", {"poolings": "cls"}, ConfigError, "siglip_vision_model model has no CLS token"),
    ("convnext", {"poolings": ["mean", "cls"]}, ConfigError, "convnext model has no CLS token"),
    ("vit", {"poolings": "last_token"}, ConfigError, r"poolings must be one of \['cls', 'mean', 'max', 'pooler'\]"),
    ("vit", {"layers": 3}, ConfigError, "layers 3 is out of range; this model has 3 hidden states"),
    ("convnext", {"layers": -4}, ConfigError, "layers -4 is out of range"),
    ("vit", {"processor_backend": "cv2"}, ConfigError, "processor_backend must be one of"),
    ("vit", {"batch_size": 0}, InputValidationError, "batch_size must be a positive integer"),
    ("convnext", {"final_norm": True}, ConfigError, "final norm applies to the pooled vector, which is the 'pooler'"),
    ("vit", {"final_norm": "yes"}, ConfigError, "final_norm must be True or False"),
    ("vit", {"final_norm": True, "poolings": "pooler"}, ConfigError, "add one of them to poolings"),
])
def test_vision_rejections(vision_models, model, kwargs, error, message):
    with pytest.raises(error, match=message):
        HFVisionExtractor("x", vision_models[model], **kwargs)


def test_non_images_and_missing_models_fail_before_anything_loads(vision_models, tmp_path):
    extractor = HFVisionExtractor("vit", vision_models["vit"])
    with pytest.raises(InputTypeError, match=r"X\[1\] is str; vision models embed images"):
        extractor.transform([np.zeros((4, 4, 3), np.uint8), "cat.png"])
    assert extractor.model_ is None
    with pytest.raises(InputValidationError, match="hf download"):
        HFVisionExtractor("nope", str(tmp_path / "no-such-model"))


def test_a_model_given_the_wrong_kind_of_dataset_is_refused_when_the_benchmark_is_built(vision_models, image_dataset,
                                                                                           minilm_path):
    """Before: the text model failed only when its turn to embed came, after the vision model had run."""
    from vertebrae import HFTextExtractor, PrecomputedExtractor

    vit = HFVisionExtractor("vit", vision_models["vit"], progress=False)
    text = HFTextExtractor("minilm", minilm_path, progress=False)
    with pytest.raises(InputValidationError, match=r"extractors\[1\] \('minilm', HFTextExtractor\) embeds text, but "
                                                   r"the dataset holds image; pass an extractor that reads image, or build the "
                                                   r"dataset from text with BenchmarkDataset.from_arrays"):
        Benchmark(image_dataset, [vit, text], separatix_config=NO_SEPARATIX, progress=False)
    texts = BenchmarkDataset.from_arrays(["a red photo", "a green thing"] * 4, [0, 1] * 4,
                                         identity=DatasetIdentity.declared("texts", "1"))
    with pytest.raises(InputValidationError, match=r"extractors\[0\] \('vit', HFVisionExtractor\) embeds image, but "
                                                   r"the dataset holds text.*from_images\(\.\.\.\) or from_image_paths"):
        Benchmark(texts, [vit], separatix_config=NO_SEPARATIX, progress=False)
    assert vit.model_ is None and text.model_ is None
    # extractors that declare no input kind, and datasets of numbers, are not checked
    numbers = BenchmarkDataset.from_arrays(np.zeros((8, 3)), [0, 1] * 4, identity=DatasetIdentity.declared("n", "1"))
    Benchmark(numbers, [PrecomputedExtractor("raw")], separatix_config=NO_SEPARATIX, progress=False)
    Benchmark(image_dataset, [vit], separatix_config=NO_SEPARATIX, progress=False)


def test_arrays_passed_straight_follow_the_datasets_pixel_rule(vision_models):
    """transform(arrays) used to skip from_images' rule: a grayscale (height, width) array failed inside the
    processor and a channels-first (3, height, width) one embedded as a 3-pixel-high image."""
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (20, 24), dtype=np.uint8)
    rgba = rng.integers(0, 256, (20, 24, 4), dtype=np.uint8)
    dataset = BenchmarkDataset.from_images([gray, rgba] * 2, [0, 0, 1, 1], identity=DatasetIdentity.declared("g", "1"))
    extractor = HFVisionExtractor("vit", vision_models["vit"], device="cpu", progress=False)
    np.testing.assert_array_equal(extractor.transform([gray, rgba]), extractor.transform(dataset.inputs)[:2])
    fresh = HFVisionExtractor("vit", vision_models["vit"], device="cpu", progress=False)
    with pytest.raises(InputValidationError, match=r"'vit': X\[1\] has shape \(3, 20, 24\); pass \(height, width\) "
                                                   r"grayscale or \(height, width, 1\|3\|4\) channels-last .*transpose"):
        fresh.transform([gray, np.moveaxis(rgba[:, :, :3], 2, 0)])
    with pytest.raises(InputValidationError, match=r"X\[0\] has dtype float32; images are 8-bit"):
        fresh.transform([gray.astype(np.float32) / 255])
    assert fresh.model_ is None  # refused before the model loads


@pytest.mark.parametrize("model", ["vit", "convnext"])
def test_images_one_or_three_pixels_high_are_read_channels_last(vision_models, model):
    """The processor guesses the channel axis from the shape: a (3, width, 3) RGB array, 3 pixels high, embedded as
    a width-high, 3-wide image read channels first, and a (1, width, 3) one failed inside the processor ("mean must
    have 1 elements").  The reference is the processor called directly with input_data_format="channels_last"; an
    image of ordinary height embeds as the processor's own guess did, as before."""
    rng = np.random.default_rng(1)
    strip3, strip1 = (rng.integers(0, 256, (height, 20, 3), dtype=np.uint8) for height in (3, 1))
    normal = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    extractor = HFVisionExtractor(model, vision_models[model], poolings=["mean", "max"], batch_size=2, device="cpu",
                                  progress=False)
    got = extractor.transform_many([strip3, normal, strip1])
    explicit = direct_states(vision_models[model], [strip3, normal, strip1], input_data_format="channels_last")
    guessed = direct_states(vision_models[model], [strip3, normal])  # the old reading
    n_special = CASES[model][1] or 0
    for pooling in ("mean", "max"):
        name = f"layer{extractor.n_layers}_{pooling}"
        np.testing.assert_allclose(got[name], pooled(explicit.hidden_states[-1], pooling, n_special), atol=1e-5,
                                   rtol=1e-4)
        old = pooled(guessed.hidden_states[-1], pooling, n_special)
        np.testing.assert_allclose(got[name][1], old[1], atol=1e-5, rtol=1e-4)  # a normal image: unchanged
        assert not np.allclose(got[name][0], old[0], atol=1e-3)  # the 3-high strip: no longer read channels first
    # the same pixels from a dataset (PIL images, which the processor always reads channels last) agree
    dataset = BenchmarkDataset.from_images([strip3, normal, strip1, normal], [0, 1, 0, 1],
                                           identity=DatasetIdentity.declared("strips", "1"))
    for name, values in extractor.transform_many(dataset.inputs).items():
        np.testing.assert_allclose(values[:3], got[name], atol=1e-5, rtol=1e-4)


def pooled(states: torch.Tensor, pooling: str, n_special: int) -> np.ndarray:
    """Mean or max over the patch tokens (after the CLS and register tokens), or over a feature map's positions."""
    patches = states.flatten(2).transpose(1, 2) if states.ndim == 4 else states[:, n_special:]
    return (patches.mean(1) if pooling == "mean" else patches.amax(1)).numpy()


def test_benchmark_profiles_and_cache_statuses(vision_models, image_dataset, tmp_path):
    """Cold run measures and stores every output from one extraction; the warm run is served from the store."""
    cache = CacheConfig(store=str(tmp_path / "cache"))

    def run():
        extractor = HFVisionExtractor("vit", vision_models["vit"], layers=[-1], poolings=["cls", "mean"],
                                      batch_size=4, device="cpu", progress=False)
        return Benchmark(image_dataset, [extractor], scoring_config=CONFIG, separatix_config=NO_SEPARATIX,
                         resource_profiling=ResourceProfilingConfig(), cache_config=cache, progress=False).run()

    cold, warm = run(), run()
    assert sorted(r.name for r in cold.extractor_results) == ["vit:layer2_cls", "vit:layer2_mean"]
    entry = cold["vit:layer2_mean"]
    assert entry.embedding["source"] == "image" and entry.embedding["pooling"] == "mean"
    assert entry.embedding["cache_status"] == "miss" and entry.resource_profile["status"] == "measured"
    from transformers import ViTModel

    n_parameters = sum(p.numel() for p in ViTModel.from_pretrained(str(vision_models["vit"])).parameters())
    assert entry.resource_profile["model"]["parameter_count"] == n_parameters
    assert entry.resource_profile["model"]["checkpoint_files"] == 3  # config, weights, preprocessor config
    for name in ("vit:layer2_cls", "vit:layer2_mean"):
        assert warm[name].embedding["cache_status"] == "hit" and warm[name].resource_profile["status"] == CACHE_HIT
        assert warm[name].overlap.to_dict() == cold[name].overlap.to_dict()
    assert cold.dataset_summary["structure"]["modality"] == "image"


# -- image-text zero-shot ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("model, padding", [("clip", "longest"), ("siglip", "max_length")])
def test_image_text_zero_shot_top1_equals_the_projected_cosine_argmax(vision_models, image_dataset, model, padding):
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    templates = ("a photo of {label}", "a {label} thing")
    dataset = ZeroShotDataset.from_templates(image_dataset, templates)
    encoder = ImageTextEncoder(model, vision_models[model], batch_size=3, device="cpu", progress=False)
    result = ZeroShotBenchmark(dataset, [encoder], scoring_config=CONFIG, progress=False).run()[model]
    assert result.error is None, result.error
    assert encoder.recipe()["prompt_padding"] == padding

    path = str(vision_models[model])
    model = AutoModel.from_pretrained(path).eval()
    pixels = AutoImageProcessor.from_pretrained(path, backend="pil")(
        images=[image_dataset.inputs[i] for i in range(8)], return_tensors="pt")
    tokens = AutoTokenizer.from_pretrained(path)(dataset.flat_prompts, padding=padding, return_tensors="pt")
    with torch.no_grad():
        image = model.get_image_features(pixel_values=pixels["pixel_values"])
        text = model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
    image = getattr(image, "pooler_output", image).numpy()
    text = getattr(text, "pooler_output", text).numpy()
    assert image.shape[0] == 8 and text.shape == (4, image.shape[1])  # one shared space
    np.testing.assert_allclose(encoder.encode_samples(image_dataset.inputs), image, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(encoder.encode_prompts(dataset.flat_prompts), text, atol=1e-5, rtol=1e-4)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    prototypes = np.stack([text[[c * 2, c * 2 + 1]].mean(axis=0) for c in range(2)])  # prompts class after class
    prototypes /= np.linalg.norm(prototypes, axis=1, keepdims=True)
    predicted = (image / np.linalg.norm(image, axis=1, keepdims=True) @ prototypes.T).argmax(axis=1)
    truth = dataset.targets.codes
    confusion = np.zeros((2, 2), int)
    np.add.at(confusion, (truth, predicted), 1)
    assert result.confusion_matrix == confusion.tolist()
    assert result.scores["top1_accuracy"] == pytest.approx(float((predicted == truth).mean()))
    assert result.embedding["samples"]["modality"] == "image" and result.embedding["prompts"]["modality"] == "text"


def test_image_text_encoder_reads_a_three_pixel_high_image_channels_last(vision_models):
    """Its samples go through the same pixel_values as HFVisionExtractor's (read channels first before)."""
    from transformers import AutoImageProcessor, AutoModel

    strip = np.random.default_rng(2).integers(0, 256, (3, 20, 3), dtype=np.uint8)
    path = str(vision_models["clip"])
    pixels = AutoImageProcessor.from_pretrained(path, backend="pil")(images=[strip], return_tensors="pt",
                                                                     input_data_format="channels_last")
    with torch.no_grad():
        image = AutoModel.from_pretrained(path).eval().get_image_features(pixel_values=pixels["pixel_values"])
    encoder = ImageTextEncoder("clip", path, device="cpu", progress=False)
    np.testing.assert_allclose(encoder.encode_samples([strip]), getattr(image, "pooler_output", image).numpy(),
                               atol=1e-5, rtol=1e-4)


def test_image_text_encoder_rejects_a_single_tower_checkpoint(vision_models):
    with pytest.raises(InputTypeError, match="not a two-tower image-text checkpoint"):
        ImageTextEncoder("vit", vision_models["vit"])

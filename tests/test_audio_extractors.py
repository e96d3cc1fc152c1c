"""HFAudioExtractor on real wav2vec2, HuBERT and Whisper architectures (tiny random configs, offline).

Each model is built from a small config, saved with ``save_pretrained`` together with
its feature extractor into a temporary folder and loaded by path, as a user's
checkpoint is.  The reference for every output is the model run on each clip alone
(no batch, no padding beyond what the model itself always does), pooled in NumPy.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from vertebrae import (Benchmark, BenchmarkDataset, CacheConfig, DatasetIdentity, HFAudioExtractor,
                           ResourceProfilingConfig, SeparatixConfig)
from vertebrae.errors import ConfigError, InputTypeError, InputValidationError

RATE = 16_000
LAYERS = [0, 1, -1]
POOLINGS = ["mean", "max"]
_WAVEFORM = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                 conv_dim=(8, 8), conv_stride=(4, 2), conv_kernel=(8, 4), num_conv_pos_embeddings=8,
                 num_conv_pos_embedding_groups=2)


@pytest.fixture(scope="session")
def audio_models(tmp_path_factory):
    """Folders of a layer-norm wav2vec2 (takes a mask), a group-norm HuBERT (no mask) and a Whisper encoder."""
    from transformers import (HubertConfig, HubertModel, Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2Model,
                              WhisperConfig, WhisperFeatureExtractor, WhisperModel)

    root = tmp_path_factory.mktemp("audio_models")
    torch.manual_seed(0)
    Wav2Vec2Model(Wav2Vec2Config(**_WAVEFORM, feat_extract_norm="layer")).save_pretrained(root / "wav2vec2")
    Wav2Vec2FeatureExtractor(sampling_rate=RATE, return_attention_mask=True).save_pretrained(root / "wav2vec2")
    HubertModel(HubertConfig(**_WAVEFORM, feat_extract_norm="group")).save_pretrained(root / "hubert")
    Wav2Vec2FeatureExtractor(sampling_rate=RATE, return_attention_mask=False).save_pretrained(root / "hubert")
    whisper = WhisperConfig(d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
                            max_source_positions=50, max_target_positions=16, vocab_size=64, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    WhisperModel(whisper).save_pretrained(root / "whisper")
    # a 1 s window (100 mel frames -> 50 encoder frames) stands in for Whisper's 30 s
    WhisperFeatureExtractor(feature_size=8, sampling_rate=RATE, hop_length=160, chunk_length=1,
                            n_fft=64).save_pretrained(root / "whisper")
    return {name: root / name for name in ("wav2vec2", "hubert", "whisper")}


@pytest.fixture(scope="session")
def clips():
    """Ten clips of different lengths (0.1 s to 0.9 s) at 16 kHz; two have equal lengths."""
    rng = np.random.default_rng(0)
    lengths = [1600, 9000, 4000, 2500, 14000, 4000, 6100, 3000, 12000, 1900]
    return [rng.normal(scale=0.3, size=n).astype(np.float32) for n in lengths]


@pytest.fixture(scope="session")
def reference_models(audio_models):
    """Each folder loaded independently with AutoFeatureExtractor + AutoModel (the encoder of Whisper)."""
    from transformers import AutoFeatureExtractor, AutoModel

    loaded = {}
    for kind, path in audio_models.items():
        model = AutoModel.from_pretrained(str(path)).eval()
        loaded[kind] = (AutoFeatureExtractor.from_pretrained(str(path)),
                        model.get_encoder() if model.config.is_encoder_decoder else model)
    return loaded


def _alone(reference, clip):
    """Reference: the clip alone through the feature extractor and encoder; each layer's states on its frames."""
    fe, encoder = reference
    features = fe([clip], sampling_rate=RATE, return_tensors="pt")
    with torch.no_grad():
        states = encoder(**{encoder.main_input_name: features[encoder.main_input_name]},
                         output_hidden_states=True).hidden_states
    if encoder.main_input_name == "input_features":  # Whisper: mel frames every 160 samples, then a stride-2 conv
        frames = math.ceil(math.ceil(len(clip) / 160) / 2)
    else:  # the clip alone is unpadded: every frame is the clip's
        frames = states[0].shape[1]
    return [s[0, :frames].numpy() for s in states]


@pytest.mark.parametrize("kind", ["wav2vec2", "hubert", "whisper"])
def test_every_output_equals_the_clip_run_alone(audio_models, reference_models, clips, kind):
    extractor = HFAudioExtractor(kind, audio_models[kind], sampling_rate=RATE, layers=LAYERS, poolings=POOLINGS,
                                 batch_size=4, device="cpu", progress=False)
    out = extractor.transform_many(clips)
    assert sorted(out) == sorted(f"layer{layer}_{p}" for layer in (0, 1, 2) for p in POOLINGS)
    for i, clip in enumerate(clips):
        states = _alone(reference_models[kind], clip)
        for layer in (0, 1, 2):
            np.testing.assert_allclose(out[f"layer{layer}_mean"][i], states[layer].mean(0), rtol=1e-4, atol=3e-5,
                                       err_msg=f"{kind} clip {i} layer {layer} mean")
            np.testing.assert_allclose(out[f"layer{layer}_max"][i], states[layer].max(0), rtol=1e-4, atol=3e-5,
                                       err_msg=f"{kind} clip {i} layer {layer} max")


@pytest.mark.parametrize("kind", ["wav2vec2", "hubert", "whisper"])
def test_batched_equals_unbatched(audio_models, clips, kind):
    def run(batch_size):
        return HFAudioExtractor(kind, audio_models[kind], sampling_rate=RATE, layers=[1, -1], poolings=POOLINGS,
                                batch_size=batch_size, device="cpu", progress=False).transform_many(clips)

    one, many = run(1), run(len(clips))
    for name in one:
        np.testing.assert_allclose(many[name], one[name], rtol=1e-4, atol=3e-5, err_msg=name)


def test_a_padded_short_clip_gives_the_embedding_of_the_clip_alone(audio_models, clips):
    """One batch holds a 0.1 s and a 0.9 s clip; the short one's vector is the one it gets alone.

    Without the mask (the padded batch pooled over every frame) it would not be: the check can fail.
    """
    short, long = clips[0], clips[4]
    extractor = HFAudioExtractor("w", audio_models["wav2vec2"], sampling_rate=RATE, poolings=POOLINGS,
                                 batch_size=2, device="cpu", progress=False)
    together = extractor.transform_many([short, long])
    alone = extractor.transform_many([short])
    for name in together:
        np.testing.assert_allclose(together[name][0], alone[name][0], rtol=1e-4, atol=3e-5, err_msg=name)
    features = extractor.feature_extractor_([short, long], sampling_rate=RATE, padding=True, return_tensors="pt")
    with torch.no_grad():
        unmasked = extractor.model_(features["input_values"]).last_hidden_state[0].mean(0).numpy()
    assert np.abs(unmasked - alone["layer2_mean"][0]).max() > 1e-3


def test_names_metadata_and_recipe_need_no_model(audio_models):
    extractor = HFAudioExtractor("w", audio_models["whisper"], sampling_rate=RATE, layers=[0, -1],
                                 poolings=["max", "mean"], progress=False)
    assert extractor.output_names() == ("layer0_max", "layer0_mean", "layer2_max", "layer2_mean")
    assert extractor.output_metadata()["layer2_mean"] == {"hidden_layer": 2, "pooling": "mean"}
    recipe = extractor.recipe()
    assert recipe["type"] == "huggingface_audio" and recipe["sampling_rate"] == RATE
    assert extractor.model_ is None  # nothing loaded


@pytest.mark.parametrize("kwargs, error, message", [
    ({"sampling_rate": 8000}, ConfigError, "does not match the model's feature extractor \\(16000 Hz\\); resample"),
    ({"sampling_rate": True}, ConfigError, "sampling_rate must be a whole number of Hz"),
    ({"sampling_rate": 0}, ConfigError, "sampling_rate must be a whole number of Hz"),
    ({"sampling_rate": 2**63}, ConfigError, "sampling_rate must be a whole number of Hz from 1 to 10000000"),
    ({"sampling_rate": RATE, "poolings": "cls"}, ConfigError, r"poolings must be one of \['mean', 'max'\]"),
    ({"sampling_rate": RATE, "layers": 3}, ConfigError, "layers 3 is out of range"),
])
def test_configuration_is_checked_before_anything_loads(audio_models, kwargs, error, message):
    with pytest.raises(error, match=message):
        HFAudioExtractor("w", audio_models["wav2vec2"], **kwargs)


def test_a_folder_without_its_feature_extractor_is_named(audio_models, tmp_path):
    (tmp_path / "config.json").write_text((audio_models["wav2vec2"] / "config.json").read_text())
    with pytest.raises(InputValidationError, match="preprocessor_config.json.*feature_extractor.save_pretrained"):
        HFAudioExtractor("w", tmp_path, sampling_rate=RATE)


@pytest.mark.parametrize("bad, error, message", [
    ([np.zeros(100), np.array([0.0, np.nan])], InputValidationError, r"X\[1\] has NaN"),
    ([np.zeros(100), np.zeros(0)], InputValidationError, r"X\[1\] has no samples \(an empty waveform\)"),
    ([np.zeros((2, 2, 2))], InputValidationError, r"X\[0\] has shape \(2, 2, 2\)"),
    ([np.array(["a", "b"])], InputTypeError, r"X\[0\] has dtype <U1"),
    ("a string", InputTypeError, "single str"),
])
def test_bad_waveforms_are_named_before_the_model_loads(audio_models, bad, error, message):
    extractor = HFAudioExtractor("w", audio_models["wav2vec2"], sampling_rate=RATE, progress=False)
    with pytest.raises(error, match=message):
        extractor.transform(bad)
    assert extractor.model_ is None


def test_a_clip_longer_than_whispers_window_is_named(audio_models):
    extractor = HFAudioExtractor("w", audio_models["whisper"], sampling_rate=RATE, progress=False)
    with pytest.raises(InputValidationError, match=r"X\[1\] has 16001 samples \(1.0 s\); this encoder sees at most "
                                                   r"16000"):
        extractor.transform([np.zeros(100), np.zeros(16_001)])
    assert extractor.model_ is None


def test_a_clip_shorter_than_one_frame_is_named_before_the_model_loads(audio_models):
    """The tiny wav2vec2's convolutions (kernels 8, 4; strides 4, 2) need 20 samples for one frame: a shorter clip in
    a batch pooled no frame (a row of zeros, or -3.4e38 for max, finite and so accepted), alone a raw torch error."""
    import torch

    convolutions = torch.nn.Sequential(torch.nn.Conv1d(1, 1, 8, 4), torch.nn.Conv1d(1, 1, 4, 2))
    assert convolutions(torch.zeros(1, 1, 20)).shape[-1] == 1  # the hand-derived minimum, by the layers themselves
    with pytest.raises(RuntimeError):
        convolutions(torch.zeros(1, 1, 19))
    extractor = HFAudioExtractor("w", audio_models["wav2vec2"], sampling_rate=RATE, progress=False)
    assert extractor.min_samples == 20
    with pytest.raises(InputValidationError, match=r"X\[1\] has 19 samples; this encoder's convolutions need at "
                                                   r"least 20 \(1 ms\) to make one frame"):
        extractor.transform([np.ones(400, dtype=np.float32), np.ones(19, dtype=np.float32)])
    assert extractor.model_ is None
    whisper = HFAudioExtractor("w", audio_models["whisper"], sampling_rate=RATE, progress=False)
    assert whisper.min_samples == 1  # a log-mel front end pads to its window


def test_two_channels_are_averaged_to_mono(audio_models, clips):
    extractor = HFAudioExtractor("w", audio_models["wav2vec2"], sampling_rate=RATE, progress=False, device="cpu")
    stereo = np.stack([clips[1], 0.5 * clips[1]])
    np.testing.assert_allclose(extractor.transform([stereo]), extractor.transform([0.75 * clips[1]]),
                               rtol=1e-5, atol=1e-6)


def test_benchmark_results_cache_statuses_and_profile(audio_models, clips, tmp_path):
    labels = [i % 2 for i in range(len(clips))]
    dataset = BenchmarkDataset.from_arrays(clips, labels, identity=DatasetIdentity.declared("clips", "1"))
    cache = CacheConfig(store=str(tmp_path / "cache"))

    def run():
        extractor = HFAudioExtractor("w2v", audio_models["wav2vec2"], sampling_rate=RATE, layers=[1, -1],
                                     batch_size=4, device="cpu", progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = Benchmark(dataset, [extractor], cache_config=cache, resource_profiling=ResourceProfilingConfig(),
                               separatix_config=SeparatixConfig(enabled=False), progress=False).run()
        return result, extractor

    cold, extractor = run()
    assert [r.name for r in cold.extractor_results] == ["w2v:layer1_mean", "w2v:layer2_mean"]
    assert {r.embedding["cache_status"] for r in cold.extractor_results} == {"miss"}
    model = cold["w2v:layer2_mean"].resource_profile["model"]
    assert model["parameter_count"] == sum(p.numel() for p in extractor.model_.parameters())
    assert model["checkpoint_bytes"] == sum(p.stat().st_size for p in audio_models["wav2vec2"].iterdir())
    warm, extractor = run()
    assert {r.embedding["cache_status"] for r in warm.extractor_results} == {"hit"}
    assert extractor.model_ is None  # a hit never loads the model
    assert warm["w2v:layer2_mean"].overlap.score == cold["w2v:layer2_mean"].overlap.score


def test_an_audio_model_given_texts_is_refused_when_the_benchmark_is_built(audio_models):
    texts = BenchmarkDataset.from_arrays(["one", "two", "three", "four"], [0, 1, 0, 1],
                                         identity=DatasetIdentity.declared("texts", "1"))
    extractor = HFAudioExtractor("w2v", audio_models["wav2vec2"], sampling_rate=RATE, device="cpu", progress=False)
    with pytest.raises(InputValidationError, match=r"extractors\[0\] \('w2v', HFAudioExtractor\) embeds audio, but the "
                                                   r"dataset holds text.*from_audio_arrays"):
        Benchmark(texts, [extractor], separatix_config=SeparatixConfig(enabled=False), progress=False)
    assert extractor.model_ is None


def test_a_dataset_at_another_rate_is_refused_before_the_model_loads(audio_models, clips):
    """8 kHz waveforms given to a 16 kHz extractor would embed another signal without complaint."""
    dataset = BenchmarkDataset.from_audio_arrays(clips, [i % 2 for i in range(len(clips))], sampling_rate=8000,
                                                 identity=DatasetIdentity.declared("clips", "1"))
    extractor = HFAudioExtractor("w2v", audio_models["wav2vec2"], sampling_rate=RATE, device="cpu", progress=False)
    with pytest.raises(InputValidationError, match=r"extractors\[0\] \('w2v'\) expects audio at 16000 Hz, but the "
                                                   r"dataset's waveforms are 8000 Hz; resample them first \(e\.g\. "
                                                   r"scipy\.signal\.resample_poly\(w, 2, 1\) or librosa\.resample"):
        Benchmark(dataset, [extractor], progress=False)
    assert extractor.model_ is None

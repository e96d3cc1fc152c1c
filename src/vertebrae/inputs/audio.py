"""Audio datasets: finite float waveforms of varying length, with the sampling rate they were recorded at.

``BenchmarkDataset.from_audio_arrays`` keeps an :class:`AudioInputs` — a plain list of the
waveforms (what an audio extractor receives) that also carries ``sampling_rate``.  The rate
is part of the dataset's content: the same samples at another rate are another signal.
"""

from __future__ import annotations

from typing import Any

import math

import numpy as np

from ..errors import InputTypeError, InputValidationError
from .._base.fingerprint import content_sha256


class AudioInputs(list):
    """The waveforms of an audio dataset (1-D samples or 2-D channels x samples each) and their ``sampling_rate``."""

    def __init__(self, waveforms: list[np.ndarray], sampling_rate: int) -> None:
        super().__init__(waveforms)
        self.sampling_rate = sampling_rate

    def __vertebrae_content__(self) -> str:
        """The content digest dataset identity and artifact keys hash: every waveform plus the rate."""
        return content_sha256(["audio", self.sampling_rate, list(self)])

    def structure(self) -> dict[str, Any]:
        samples = np.array([w.shape[-1] for w in self], dtype=float)
        seconds = {"min": samples.min(), "median": np.median(samples), "max": samples.max()}
        return {"family": "audio", "modality": "audio", "source": "in_memory", "sampling_rate": self.sampling_rate,
                "channels": 1 if self[0].ndim == 1 else int(self[0].shape[0]),
                "duration_seconds": {k: float(v) / self.sampling_rate for k, v in seconds.items()}}

    def __reduce__(self) -> Any:  # pickle (dask, staged runs) keeps the rate
        return (AudioInputs, (list(self), self.sampling_rate))


#: The highest sampling rate accepted (Hz): far above any audio rate (384 kHz is the highest in common use), and
#: a bound on what durations are computed from (a rate of 2**63 Hz overflows int64 arithmetic downstream).
MAX_SAMPLING_RATE = 10_000_000


def check_sampling_rate(sampling_rate: Any, *, where: str) -> int:
    """A whole number of Hz in 1..MAX_SAMPLING_RATE, else a clear error naming ``where``."""
    if isinstance(sampling_rate, (bool, np.bool_)) or not isinstance(sampling_rate, (int, np.integer)):
        raise InputTypeError(f"{where}: sampling_rate must be a positive integer (samples per second, e.g. 16000), "
                             f"got {sampling_rate!r}")
    if not 0 < sampling_rate <= MAX_SAMPLING_RATE:
        raise InputValidationError(f"{where}: sampling_rate must be a whole number of Hz from 1 to "
                                   f"{MAX_SAMPLING_RATE} (e.g. 16000), got {sampling_rate}")
    return int(sampling_rate)


def check_extractor_rates(dataset: Any, extractors: Any) -> None:
    """Every extractor that declares a ``sampling_rate`` reads the audio dataset's rate (vertebrae never resamples).

    Checked when the benchmark is built, before any model loads: the same samples read at another rate
    are another signal, and the model would embed it without complaint.
    """
    inputs = getattr(dataset, "inputs", None)
    if not isinstance(inputs, AudioInputs):
        return
    have = inputs.sampling_rate
    for i, extractor in enumerate(extractors):
        want = getattr(extractor, "sampling_rate", None)
        if want is None or int(want) == have:
            continue
        want = int(want)
        step = math.gcd(want, have)
        raise InputValidationError(
            f"extractors[{i}] ({extractor.name!r}) expects audio at {want} Hz, but the dataset's waveforms are "
            f"{have} Hz; resample them first (e.g. scipy.signal.resample_poly(w, {want // step}, {have // step}) "
            f"or librosa.resample(w, orig_sr={have}, target_sr={want})) and build the dataset with "
            f"sampling_rate={want}")


def audio_arrays(waveforms: Any, sampling_rate: Any) -> AudioInputs:
    """Validate waveforms: real floating samples, finite, 1-D or 2-D channels x samples, one channel layout."""
    where = "BenchmarkDataset.from_audio_arrays"
    rate = check_sampling_rate(sampling_rate, where=where)
    if isinstance(waveforms, (str, bytes)) or not hasattr(waveforms, "__iter__"):
        raise InputTypeError(f"{where}: waveforms must be a list of arrays (one per row), got {type(waveforms).__name__}")
    items = list(waveforms)
    if not items:
        raise InputValidationError(f"{where}: waveforms is empty; a benchmark needs at least two classes with two "
                                   "rows each")
    checked = [check_waveform(item, f"waveforms[{row}]", where=where) for row, item in enumerate(items)]
    layout = checked[0].shape[:-1]
    for row, wave in enumerate(checked):
        if wave.shape[:-1] != layout:
            raise InputValidationError(f"{where}: waveforms[{row}] has shape {wave.shape} but waveforms[0] has "
                                       f"{checked[0].shape}; every clip needs the same channel layout (mix down to mono "
                                       "with w.mean(axis=0), or pick one channel)")
    return AudioInputs(checked, rate)


def check_waveform(item: Any, label: str, *, where: str) -> np.ndarray:
    """One waveform by the rules every audio input follows (datasets, audio files, audio extractors).

    Real float samples (integer PCM must be scaled first: vertebrae cannot know its full scale), 1-D samples
    or 2-D channels x samples, at least one sample, all finite. ``label`` names the item in messages
    (``waveforms[3]``, ``X[3]``, ``row 3 (array 'arr_3')``); the array is returned as given.
    """
    try:
        wave = np.asarray(item)
    except (TypeError, ValueError):
        raise InputTypeError(f"{where}: {label} is {type(item).__name__}, not a waveform array") from None
    if np.issubdtype(wave.dtype, np.integer):
        raise InputValidationError(f"{where}: {label} has dtype {wave.dtype}; pass float samples "
                                   "(int16 PCM: divide by 32768.0)")
    if not np.issubdtype(wave.dtype, np.floating):
        raise InputTypeError(f"{where}: {label} has dtype {wave.dtype}; a waveform holds real-valued float samples")
    if wave.ndim not in (1, 2):
        raise InputValidationError(f"{where}: {label} has shape {wave.shape}; pass 1-D samples or 2-D "
                                   "channels x samples")
    if wave.ndim == 2 and wave.shape[0] > wave.shape[1]:
        raise InputValidationError(f"{where}: {label} has shape {wave.shape}, more channels than samples; "
                                   "2-D waveforms are channels x samples: pass w.T")
    if wave.shape[-1] == 0:
        raise InputValidationError(f"{where}: {label} has no samples (an empty waveform)")
    if not np.isfinite(wave).all():
        raise InputValidationError(f"{where}: {label} has NaN or infinite samples; clean or drop that row")
    return wave

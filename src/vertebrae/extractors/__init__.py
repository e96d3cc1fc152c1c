"""Feature extractors: anything with ``name``, ``fit``, ``transform`` and ``recipe()``."""

from .base import CallableExtractor, Extractor, PrecomputedExtractor, SklearnExtractor
from .hf_audio import HFAudioExtractor
from .hf_vision import HFVisionExtractor
from .huggingface import HFTextExtractor
from .jax import JAXExtractor
from .keras import KerasExtractor
from .onnx import ONNXExtractor
from .onnx_text import ONNXTextExtractor
from .sentence_transformers import SentenceTransformerExtractor
from .torch import TorchExtractor

__all__ = ["Extractor", "PrecomputedExtractor", "CallableExtractor", "SklearnExtractor",
           "HFTextExtractor", "HFVisionExtractor", "ONNXExtractor", "ONNXTextExtractor", "SentenceTransformerExtractor", "TorchExtractor",
           "HFAudioExtractor", "KerasExtractor", "JAXExtractor"]

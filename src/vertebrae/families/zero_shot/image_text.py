"""ImageTextEncoder: a two-tower image–text checkpoint (CLIP, SigLIP) as a zero-shot encoder.

Samples (images: a ``from_image_paths`` / ``from_images`` dataset) go through the vision tower
and its projection (``get_image_features``), prompts through the tokenizer, the text tower and
its projection (``get_text_features``), so both land in the shared space the model was trained
in.  The benchmark's prompt ensembling and cosine prototypes apply unchanged.  Prompts are
padded as the model family was trained: to the tokenizer's maximum length for SigLIP, to the
longest prompt for CLIP (whose text tower pools the end-of-text token, so padding never enters).
Images batch through :func:`vertebrae.extractors.batching.stream_batches`, so resource profiling
observes each batch as it does for extractors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import DependencyError, InputTypeError
from ...extractors.base import check_cache_identity, check_extractor_name
from ...extractors.batching import SINGLE_OUTPUT, check_batch_size, check_texts, stream_batches
from ...extractors.hf_vision import check_images, check_processor_backend, load_processor, pixel_values
from ...extractors.huggingface import local_model_dir, read_model_config
from ...extractors.model_identity import files_sha256
from ...extractors.torch import check_device, frozen, resolve_device, to_device
from ..._base.extras import install_hint
from ..._base.fingerprint import declared_identity
from ...inputs.images import LOADER

#: Model types trained with prompts padded to the tokenizer's maximum length.
MAX_LENGTH_PADDING = ("siglip", "siglip2")


def _features(output: Any) -> Any:
    """``get_*_features`` returns the projected tensor (transformers 4) or an output whose pooler holds it (5)."""
    return output if hasattr(output, "shape") else output.pooler_output


class ImageTextEncoder:
    """Images through the vision tower, prompts through the text tower, both projected into the shared space."""

    modalities = {"samples": "image", "prompts": "text"}
    #: 2: sample arrays 1 or 3 pixels high are read channels-last (:func:`pixel_values`; they were read as channels
    #: first).
    version = 2
    computes_with = ("torch", "transformers", "tokenizers", "pillow")
    #: Only the progress bar: bitwise-identical embeddings either way (tests/test_key_completeness.py).
    speed_only = ("progress",)

    def __init__(self, name: str, model_path: Any, *, batch_size: int = 32, device: str = "auto",
                 processor_backend: str = "pil", cache_identity: str | None = None,
                 progress: bool | None = None) -> None:
        self.name = check_extractor_name(name)
        where = f"ImageTextEncoder {name!r}"
        self.model_dir = local_model_dir(model_path, where=where)
        config = read_model_config(self.model_dir, where=where)
        if not (isinstance(config.get("vision_config"), dict) and isinstance(config.get("text_config"), dict)):
            raise InputTypeError(f"{where}: {str(self.model_dir)!r} is not a two-tower image-text checkpoint (its "
                                 "config.json has no vision_config and text_config); pass a CLIP or SigLIP folder")
        self.model_type = str(config.get("model_type", ""))
        self.batch_size = check_batch_size(batch_size, where=where)
        self.device = check_device(device, where=where)
        self.processor_backend = check_processor_backend(processor_backend, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.progress = progress
        self.model_: Any = None
        self.processor_: Any = None
        self.tokenizer_: Any = None

    def recipe(self) -> dict[str, Any]:
        return {"type": "huggingface_image_text", "model_files_sha256": files_sha256([self.model_dir]),
                "processor_backend": self.processor_backend, "image_loader": dict(LOADER),
                "prompt_padding": self._padding(), "batch_size": self.batch_size, "device": self.device,
                "cache_identity": self.cache_identity}

    def identity(self) -> dict[str, Any]:
        return declared_identity(self, self.recipe())

    def _padding(self) -> str:
        return "max_length" if self.model_type in MAX_LENGTH_PADDING else "longest"

    def load(self) -> tuple[Any, Any, Any]:
        """Image processor, tokenizer and model from the local folder, loaded on first use."""
        if self.model_ is None:
            where = f"ImageTextEncoder {self.name!r}"
            processor = load_processor(self.model_dir, self.processor_backend, where=where)
            try:
                from transformers import AutoModel, AutoTokenizer
            except ImportError:
                raise DependencyError(f"{where} needs transformers; {install_hint('vision')}") from None
            self.tokenizer_ = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
            model = AutoModel.from_pretrained(str(self.model_dir), local_files_only=True)
            self.processor_, self.model_ = processor, model.to(resolve_device(self.device, where=where))
        return self.processor_, self.tokenizer_, self.model_

    def encode_samples(self, inputs: Any) -> np.ndarray:
        where = f"ImageTextEncoder {self.name!r}"
        inputs = check_images(inputs, where=where)
        processor, _, model = self.load()
        device = resolve_device(self.device, where=where)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            features = _features(model.get_image_features(pixel_values=pixel_values(processor, inputs, rows, device)))
            return {SINGLE_OUTPUT: features.float().cpu().numpy()}

        with frozen(model, device):
            return stream_batches(len(inputs), self.batch_size, embed, (SINGLE_OUTPUT,), source=f"{self.name} (images)",
                                  progress=self.progress)[SINGLE_OUTPUT]

    def encode_prompts(self, prompts: list[str]) -> np.ndarray:
        where = f"ImageTextEncoder {self.name!r}"
        texts = check_texts(prompts, where=where)
        _, tokenizer, model = self.load()
        device = resolve_device(self.device, where=where)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            encoded = to_device(dict(tokenizer([texts[i] for i in rows], padding=self._padding(), truncation=True,
                                               return_tensors="pt")), device)
            encoded.pop("token_type_ids", None)
            return {SINGLE_OUTPUT: _features(model.get_text_features(**encoded)).float().cpu().numpy()}

        with frozen(model, device):
            return stream_batches(len(texts), self.batch_size, embed, (SINGLE_OUTPUT,),
                                  source=f"{self.name} (prompts)", progress=self.progress)[SINGLE_OUTPUT]

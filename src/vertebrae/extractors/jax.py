"""JAXExtractor: a pure ``apply(params, x)`` function with its params pytree (e.g. a Flax module's apply).

Each batch is one call of ``apply`` (``jax.jit``-compiled unless ``jit=False``; a
last, smaller batch compiles once more), turned into a NumPy array, which also
waits for the device, so host-observed latencies are complete.  Identity: the
function as :func:`vertebrae._base.fingerprint.canonical` identifies it (a module-level
function by its qualified name and source hash; a lambda, closure or bound method
of an unidentifiable object needs ``cache_identity``) plus every params leaf's path,
dtype, shape and bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DependencyError, ExtractorError, InputTypeError
from .._base.extras import install_hint
from .._base.fingerprint import callable_identity, identified
from .base import check_cache_identity
from .batching import SINGLE_OUTPUT, BatchedExtractor, n_inputs, take_rows

#: Why a JAX profile has no buffer_bytes.
BUFFER_REASON = ("a JAX params pytree does not mark which leaves are parameters and which are other state "
                 "(e.g. batch statistics); every leaf counts as a parameter")
#: The spec's rule for JAX accelerators: no allocator window is read, so the peaks stay null.
ACCELERATOR_REASON = ("JAX accelerators keep null peaks: vertebrae reads no JAX/XLA allocator statistics as a "
                      "profile window; host RSS covers the host side only")


def import_jax() -> Any:
    try:
        import jax
    except ImportError:
        raise DependencyError(f"JAXExtractor needs jax; {install_hint('jax')}") from None
    return jax


def _leaves(params: Any) -> list[tuple[str, Any]]:
    """(path, leaf) of every params leaf, in pytree order."""
    jax = import_jax()
    flat, _ = jax.tree_util.tree_flatten_with_path(params)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def params_sha256(params: Any) -> str:
    """Hash of every params leaf: its path in the pytree, dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for path, leaf in _leaves(params):
        value = np.asarray(leaf)
        if value.dtype == object:
            raise InputTypeError(f"JAXExtractor: params leaf {path} is {type(leaf).__name__}, not an array")
        digest.update(f"{path}|{value.dtype}|{value.shape}\x00".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


class JAXExtractor(BatchedExtractor):
    """Embed inputs with ``apply(params, batch)``, one call per batch; ``params`` is any pytree of arrays."""

    version = 1
    computes_with = ("jax", "jaxlib")

    def __init__(self, name: str, apply: Callable[[Any, Any], Any], params: Any, *, batch_size: int = 64,
                 jit: bool = True, cache_identity: str | None = None, progress: bool | None = None) -> None:
        super().__init__(name, batch_size, progress)
        where = f"JAXExtractor {name!r}"
        if not callable(apply):
            raise InputTypeError(f"{where}: apply must be callable as apply(params, x), got {type(apply).__name__}")
        self.apply, self.params, self.jit = apply, params, bool(jit)
        self.cache_identity = check_cache_identity(where, cache_identity)
        self.cache_eligible = identified(callable_identity(apply, self.cache_identity))
        self.fn_: Any = None

    def recipe(self) -> dict[str, Any]:
        return {"type": "jax", "apply": callable_identity(self.apply, self.cache_identity),
                "params_sha256": params_sha256(self.params), "jit": self.jit, "batch_size": self.batch_size,
                "cache_identity": self.cache_identity}

    def __getstate__(self) -> dict[str, Any]:
        """A compiled function does not pickle (staged and dask runs ship extractors): it is rebuilt on first use."""
        return {**self.__dict__, "fn_": None}

    def load(self) -> Callable[[Any, Any], Any]:
        if self.fn_ is None:
            jax = import_jax()
            self.fn_ = jax.jit(self.apply) if self.jit else self.apply
        return self.fn_

    def _embed_all(self, X: Any) -> dict[str, np.ndarray]:
        n_rows = n_inputs(X, where=f"JAXExtractor {self.name!r}")
        fn = self.load()

        def embed(rows: np.ndarray) -> dict[str, np.ndarray]:
            out = fn(self.params, np.asarray(take_rows(X, rows)))
            if isinstance(out, (tuple, list, dict)):
                raise ExtractorError(f"JAXExtractor {self.name!r}: apply returned a {type(out).__name__}; return "
                                     "one array of shape (batch, ...)")
            return {SINGLE_OUTPUT: np.asarray(out).reshape(len(rows), -1)}

        return self._stream(n_rows, embed)

    def profile_facts(self) -> dict[str, dict[str, Any]]:
        """The params' sizes and where they live; see vertebrae.extractors.profiling.framework_facts."""
        leaves = [leaf for _, leaf in _leaves(self.params)]
        arrays = [leaf if hasattr(leaf, "nbytes") else np.asarray(leaf) for leaf in leaves]  # no device copy
        dtypes = sorted({str(a.dtype) for a in arrays})
        total = sum(a.nbytes for a in arrays)
        devices = sorted({str(d) for leaf in leaves if hasattr(leaf, "devices") for d in leaf.devices()}) \
            or [str(d) for d in import_jax().devices()[:1]]
        on_cpu = all(device.lower().startswith(("cpu", "tfrt_cpu")) for device in devices)
        device_memory = {"device": ",".join(devices), "status": "not_applicable" if on_cpu else "unavailable",
                         "reason": "JAX on CPU: allocator memory is not tracked; host RSS is the portable measure"
                         if on_cpu else ACCELERATOR_REASON}
        return {"model": {"parameter_count": sum(a.size for a in arrays), "parameter_bytes": total,
                          "trainable_parameter_count": None, "trainable_parameter_bytes": None,
                          "buffer_bytes": None, "buffer_reason": BUFFER_REASON, "in_memory_bytes": total,
                          "weight_dtypes": dtypes, "parameter_status": "measured", "parameter_reason": None},
                "device_memory": device_memory,
                "context": {"device": ",".join(devices), "precision": ",".join(dtypes) or None,
                            "precision_source": "stored_weights" if dtypes else None}}

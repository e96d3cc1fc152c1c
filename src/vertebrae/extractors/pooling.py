"""How token states become one vector per row: the poolings every layer-by-pooling extractor shares.

Padding never leaks into a pooled vector: ``mean`` and ``max`` ignore padded positions, ``cls``
takes the first attended token and ``last_token`` the last one, so left- and right-padded batches
agree.  :func:`pool` works on torch tensors (the Hugging Face and torch extractors pool on the
model's device); :func:`pool_array` is the same rule on NumPy arrays, for engines that return
arrays (ONNX Runtime) and must not need torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import ConfigError

POOLINGS = ("mean", "cls", "max", "last_token")


def as_tuple(value: Any) -> tuple[Any, ...]:
    """One value or a sequence of them as a tuple (a NumPy integer or a float is one value, for the caller's type
    check to name, not a TypeError from iterating it)."""
    return (value,) if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) else tuple(value)


def check_poolings(pooling: Any, *, where: str, allowed: tuple[str, ...] = POOLINGS,
                   argument: str = "pooling") -> tuple[str, ...]:
    poolings = as_tuple(pooling)
    bad = [p for p in poolings if p not in allowed]
    if bad or not poolings or len(set(poolings)) != len(poolings):
        raise ConfigError(f"{where}: {argument} must be one of {list(allowed)} or a list of distinct ones, got "
                          f"{pooling!r}")
    return poolings


def pool(hidden: Any, mask: Any, pooling: str) -> Any:
    """Pool token states ``(batch, tokens, width)`` over the attended positions given by ``mask``."""
    import torch

    if pooling == "mean":
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    if pooling == "max":
        return hidden.masked_fill(~mask.bool().unsqueeze(-1), torch.finfo(hidden.dtype).min).amax(1)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    attended = mask.long()
    if pooling == "cls":  # the first attended position (position 0 unless the batch is left-padded)
        return hidden[rows, attended.argmax(1)]
    # last_token: the last attended position, wherever the padding sits
    return hidden[rows, mask.shape[1] - 1 - attended.flip(1).argmax(1)]



def pool_array(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """:func:`pool` on NumPy arrays: token states ``(batch, tokens, width)``, ``mask`` ``(batch, tokens)``."""
    attended = np.asarray(mask).astype(bool)
    if pooling == "mean":
        weights = attended[..., None].astype(hidden.dtype)
        return (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1.0)
    if pooling == "max":
        return np.where(attended[..., None], hidden, np.finfo(hidden.dtype).min).max(1)
    rows = np.arange(hidden.shape[0])
    if pooling == "cls":
        return hidden[rows, attended.argmax(1)]
    return hidden[rows, attended.shape[1] - 1 - attended[:, ::-1].argmax(1)]


def renamed(where: str, new: tuple[str, Any], old: tuple[str, Any], default: Any) -> Any:
    """The value of an argument given in its one spelling (``new``), or in its old one for one release.

    ``layers`` / ``poolings`` is the spelling of every layer-by-pooling extractor and run config;
    the old spelling still works, with a DeprecationWarning that names the new one.
    """
    (new_name, new_value), (old_name, old_value) = new, old
    if old_value is None:
        return default if new_value is None else new_value
    if new_value is not None:
        raise ConfigError(f"{where}: {old_name}= is the old spelling of {new_name}=; pass only {new_name}=")
    warnings.warn(f"{where}: {old_name}= is deprecated and will be removed in the next release; spell it "
                  f"{new_name}= (the spelling of every extractor and run config)", DeprecationWarning, stacklevel=3)
    return old_value

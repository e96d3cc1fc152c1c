"""Taps on named submodules of a torch model: their outputs from one forward pass, pooled to one vector per row.

:class:`~vertebrae.extractors.torch.TorchExtractor` with ``layers=[...]`` registers a forward
hook on each named module (``model.named_modules()`` names, e.g. ``features.3``), runs the model
once per batch, and pools what each module returned:

* a channels-first map ``(batch, channels, *spatial)`` of rank 4 or more (a conv feature map):
  ``mean`` / ``max`` are global average / max pooling over every spatial position;
* a token sequence ``(batch, tokens, width)`` (rank 3): pooled as the Hugging Face extractors pool
  (:func:`~vertebrae.extractors.pooling.pool`), over the attended tokens when the collated model
  input is a mapping holding an ``attention_mask`` of that many tokens, over every token otherwise.

Names are checked against the model before it runs, with the closest names in the message.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, ExtractorError
from .pooling import POOLINGS, check_poolings, pool

#: A feature map has no first or last token: it takes mean and max only (tokens take every HF pooling).
MAP_POOLINGS = ("mean", "max")


def check_layer_names(layers: Any, *, where: str, what: str = "model.named_modules() names such as 'features.3'"
                      ) -> tuple[str, ...]:
    """Distinct, non-empty names without ':' (it joins an extractor's and its output's names); ``what`` they name."""
    names = (layers,) if isinstance(layers, str) else tuple(layers)
    if not names or any(not isinstance(n, str) or not n or ":" in n for n in names):
        raise ConfigError(f"{where}: layers must be a non-empty list of names ({what}) without ':', got {layers!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: layers lists a name twice ({list(names)})")
    return names


def check_tap_poolings(poolings: Any, *, where: str) -> tuple[str, ...]:
    return check_poolings(poolings, where=where, allowed=POOLINGS, argument="poolings")


def check_layers_exist(model: Any, layers: Sequence[str], *, where: str) -> None:
    """Every name in ``layers`` is a submodule of ``model``; an unknown one is named with the closest names."""
    known = [name for name, _ in model.named_modules() if name]
    missing = [name for name in layers if name not in set(known)]
    if missing:
        hints = "; ".join(f"{name!r}: closest {difflib.get_close_matches(name, known, n=3, cutoff=0.4) or 'none'}"
                          for name in missing)
        raise ConfigError(f"{where}: layers {missing} are not modules of {type(model).__name__} ({hints}); names are "
                          f"those of model.named_modules(), e.g. {known[:6]}")


@contextlib.contextmanager
def tapped(model: Any, layers: Sequence[str]) -> Iterator[dict[str, list[Any]]]:
    """Forward hooks on ``layers`` while the block runs; yields ``{name: [outputs of this pass]}`` (cleared per batch
    by the caller)."""
    modules = dict(model.named_modules())
    seen: dict[str, list[Any]] = {name: [] for name in layers}
    handles = []

    def hook_for(name: str) -> Any:
        def hook(module: Any, inputs: Any, output: Any) -> None:
            seen[name].append(output)
        return hook

    try:
        for name in layers:
            handles.append(modules[name].register_forward_hook(hook_for(name)))
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def tap_tensor(name: str, outputs: list[Any], *, where: str) -> Any:
    """The one tensor a module returned in this pass (the first element of a tuple output such as an LSTM's)."""
    if len(outputs) != 1:
        raise ExtractorError(f"{where}: module {name!r} ran {len(outputs)} times in one forward pass; tap a module "
                             "that runs exactly once (a shared module's output is ambiguous)")
    output = outputs[0]
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    if not (hasattr(output, "ndim") and hasattr(output, "detach")):
        raise ExtractorError(f"{where}: module {name!r} returned {type(output).__name__}, not a tensor; tap a module "
                             "that returns a tensor (or a tuple whose first element is one)")
    return output


def pool_tap(name: str, tensor: Any, pooling: str, inputs: Any, *, where: str) -> Any:
    """One vector per row from a module's output: a feature map pooled over its positions, tokens as HF pools."""
    import torch

    if tensor.ndim >= 4:
        if pooling not in MAP_POOLINGS:
            raise ExtractorError(f"{where}: module {name!r} returns a feature map {tuple(tensor.shape)}; pooling "
                                 f"{pooling!r} needs tokens: use {list(MAP_POOLINGS)} for maps")
        positions = tensor.flatten(2)
        return positions.mean(2) if pooling == "mean" else positions.amax(2)
    if tensor.ndim == 3:
        mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
        if mask is None or tuple(mask.shape) != tuple(tensor.shape[:2]):
            mask = torch.ones(tensor.shape[:2], dtype=torch.long, device=tensor.device)
        return pool(tensor, mask.to(tensor.device), pooling)
    raise ExtractorError(f"{where}: module {name!r} returns shape {tuple(tensor.shape)}; pooling needs a feature map "
                         "(batch, channels, height, width) or tokens (batch, tokens, width); a module that already "
                         "returns one vector per row is read with output_fn=... instead of layers")

"""Feature extractors: anything with ``name``, ``fit``, ``transform`` and ``recipe()``."""

from .base import CallableExtractor, Extractor, PrecomputedExtractor, SklearnExtractor

__all__ = ["Extractor", "PrecomputedExtractor", "CallableExtractor", "SklearnExtractor"]

"""Retrieval and matching: exact ranking of frozen query embeddings against a gallery.

A separate protocol from the labeled-data benchmark: it fits no head, builds no ANN
index and mines no negatives.  See ``docs/retrieval.md`` for metric definitions,
the tie rule and the memory budget.
"""

from .benchmark import RetrievalBenchmark
from .config import RetrievalConfig
from .dataset import RetrievalDataset
from .extractors import PrecomputedPairExtractor, RetrievalExtractor, SharedSpaceExtractor, TwoBranchExtractor
from .result import DirectionResult, RetrievalBenchmarkResult, RetrievalEntry

__all__ = [
    "DirectionResult", "PrecomputedPairExtractor", "RetrievalBenchmark", "RetrievalBenchmarkResult",
    "RetrievalConfig", "RetrievalDataset", "RetrievalEntry", "RetrievalExtractor", "SharedSpaceExtractor",
    "TwoBranchExtractor",
]

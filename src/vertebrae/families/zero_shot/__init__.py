"""Zero-shot classification: fixed prompt prototypes, ranked by a declared zero-shot metric.

A separate protocol from the labeled-data benchmark: each encoder embeds the samples
and per-class prompts, prompts are averaged into class prototypes and every sample
takes its nearest prototype.  OverlapIndex of the sample embeddings is reported as
context, never combined with the zero-shot score.  See ``docs/zero_shot.md``.
"""

from .benchmark import ZeroShotBenchmark
from .config import ZeroShotConfig
from .dataset import ZeroShotDataset
from .encoders import ExtractorEncoder, PrecomputedZeroShotEncoder, TextEncoder, ZeroShotEncoder
from .image_text import ImageTextEncoder
from .result import ZeroShotBenchmarkResult, ZeroShotExtractorResult

__all__ = [
    "ExtractorEncoder", "ImageTextEncoder", "PrecomputedZeroShotEncoder", "TextEncoder", "ZeroShotBenchmark", "ZeroShotBenchmarkResult",
    "ZeroShotConfig", "ZeroShotDataset", "ZeroShotEncoder", "ZeroShotExtractorResult",
]

"""Scoring: the OverlapIndex and Separatix adapters, stability, paired verdicts, metrics and reference probes.

The adapters are internals of the scoring stages; they are exported here (not from ``vertebrae``) for
users who call them directly, as the scoring docs show."""

from .overlap import OverlapIndexScorer
from .separatix import SeparatixScorer

__all__ = ["OverlapIndexScorer", "SeparatixScorer"]

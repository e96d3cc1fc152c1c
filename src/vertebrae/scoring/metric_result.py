"""MetricResult: the normalized outcome of any embedding metric (built-in or custom).

Only ``score`` is eligible for ranking, in the direction ``higher_is_better``
declares, and only when ``aggregate_valid`` is true.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..errors import MetricError
from .._base.result_schema import NUMBER, Number, nullable

OVERLAP_METRIC = "overlap"

_FOLD_SIZES = nullable([Number(integer=True, low=1)])
#: The fold record of a probe metric, which probe verdicts pair fold by fold (vertebrae.scoring.probe_verdicts, the
#: report's agreement and referee sections): any metric may keep it, in this form (docs/metrics.md, "Probe verdicts").
_FOLD_DIAGNOSTICS = {"fold_scores?": [nullable(NUMBER)]}
_FOLD_METADATA = {"n_splits?": Number(integer=True, low=2), "n_repeats?": Number(integer=True, low=1),
                  "fold_test_sizes?": _FOLD_SIZES, "fold_train_sizes?": _FOLD_SIZES}
#: What reports read of a serialized MetricResult (checked on load; see vertebrae._base.result_schema).
SCHEMA = {"name": str, "score": nullable(NUMBER), "higher_is_better?": bool, "aggregate_valid?": bool,
          "diagnostics?": _FOLD_DIAGNOSTICS, "warnings?": [str], "metadata?": _FOLD_METADATA,
          "error?": nullable(str)}


@dataclasses.dataclass
class MetricResult:
    name: str
    score: float | None
    higher_is_better: bool = True
    aggregate_valid: bool = True
    diagnostics: dict[str, Any] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str | None = None

    def __post_init__(self) -> None:
        if self.aggregate_valid and (self.score is None or not math.isfinite(self.score)):
            raise MetricError(f"metric {self.name!r}: a valid aggregate needs one finite score, got {self.score!r}")

    @property
    def rankable(self) -> bool:
        return self.aggregate_valid and self.score is not None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MetricResult":
        return cls(**data)


def overlap_metric_result(overlap: Any) -> MetricResult:
    """The built-in overlap metric, always present as ``metrics["overlap"]``."""
    return MetricResult(name=OVERLAP_METRIC, score=float(overlap.score), higher_is_better=True,
                        diagnostics={"macro_score": overlap.macro_score, "weighted_score": overlap.weighted_score},
                        metadata={"target_type": overlap.target_type})

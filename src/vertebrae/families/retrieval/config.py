"""RetrievalConfig: every setting that shapes a retrieval evaluation.

Two results are only comparable (and combinable) when their configs are equal, so
the config is frozen, validated once, and stored verbatim in every result.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..._base.config import Config, check_bool, check_choice, check_float, check_int
from ...errors import ConfigError

SIMILARITIES = ("cosine", "dot", "squared_l2")
#: Metrics reported at every cutoff k (as ``name@k``).
CUTOFF_METRICS = ("ndcg", "precision", "recall", "hit_rate", "map", "mrr")
#: Metrics over the full ranking (no cutoff).
FULL_RANKING_METRICS = ("map", "mrr")
DEFAULT_MEMORY_BUDGET = 256 * 2**20

_METRIC_PATTERN = re.compile(r"^([a-z_]+)@(\d+)$")


#: Ranking directions: forward (query -> gallery) and reverse (gallery -> query).
DIRECTIONS = ("forward", "reverse")

def parse_metric(owner: str, name: Any) -> tuple[str, int | None]:
    """Split ``"ndcg@10"`` into ``("ndcg", 10)``; full-ranking metrics have no cutoff."""
    allowed = [f"{m}@k" for m in CUTOFF_METRICS] + list(FULL_RANKING_METRICS)
    if isinstance(name, str) and name in FULL_RANKING_METRICS:
        return name, None
    match = _METRIC_PATTERN.match(name) if isinstance(name, str) else None
    if match is None or match.group(1) not in CUTOFF_METRICS or int(match.group(2)) < 1:
        raise ConfigError(f"{owner}.primary_metric must be one of {allowed} (k a positive integer, e.g. 'ndcg@10'), "
                          f"got {name!r}; similarity diagnostics cannot be primary metrics")
    return match.group(1), int(match.group(2))


@dataclasses.dataclass(frozen=True)
class RetrievalConfig(Config):
    """Settings of an exact retrieval evaluation.

    ``cutoffs`` are normalized to a sorted tuple that always contains the primary
    metric's cutoff.  ``memory_budget_bytes`` bounds the similarity block held at once;
    ``block_size`` optionally caps the query rows per block further.  ``thread_limit``
    caps BLAS threads (``None``: the BLAS library's default).  It is part of the key: on some CPUs
    (OpenBLAS's Haswell kernels on an AMD EPYC) a float32 matmul on one thread rounds differently
    from the same matmul on two (measured up to 1.5e-7 per similarity), which moves the similarity
    diagnostics and could reorder near-tied items.  The block settings shape outputs too: a ranking
    records its block plan.  ``quality_tolerance`` is the default width of ``quality_cohort()`` (0.02, as for
    ``Benchmark`` and zero-shot): it shapes no artifact, so no key holds it.
    """

    primary_metric: str = "ndcg@10"
    cutoffs: tuple[int, ...] = (1, 5, 10, 100)
    similarity: str = "cosine"
    bidirectional: bool = False
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET
    block_size: int | None = None
    thread_limit: int | None = None
    quality_tolerance: float = 0.02

    def _validate(self) -> None:
        name = type(self).__name__
        _, primary_k = parse_metric(name, self.primary_metric)
        if isinstance(self.cutoffs, (str, bytes)) or not hasattr(self.cutoffs, "__iter__"):
            raise ConfigError(f"{name}.cutoffs must be a list of positive integers such as [1, 5, 10], "
                              f"got {self.cutoffs!r}")
        cutoffs = {check_int(name, f"cutoffs[{i}]", k, minimum=1) for i, k in enumerate(self.cutoffs)}
        if not cutoffs:  # checked before the primary's cutoff is added, which would hide it
            raise ConfigError(f"{name}.cutoffs is empty; give at least one cutoff, e.g. [10]")
        if primary_k is not None:
            cutoffs.add(primary_k)
        self._set("cutoffs", tuple(sorted(cutoffs)))
        check_choice(name, "similarity", self.similarity, SIMILARITIES)
        self._set("bidirectional", check_bool(name, "bidirectional", self.bidirectional))
        self._set("memory_budget_bytes", check_int(name, "memory_budget_bytes", self.memory_budget_bytes, minimum=1))
        self._set("block_size", check_int(name, "block_size", self.block_size, minimum=1, allow_none=True))
        self._set("thread_limit", check_int(name, "thread_limit", self.thread_limit, minimum=1, allow_none=True))
        self._set("quality_tolerance", check_float(name, "quality_tolerance", self.quality_tolerance, low=0.0))

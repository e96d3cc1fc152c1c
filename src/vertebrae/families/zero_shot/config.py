"""ZeroShotConfig: every setting that shapes a zero-shot evaluation.

Two results are only comparable when their configs are equal, so the config is
frozen, validated once and stored verbatim in every result.
"""

from __future__ import annotations

import dataclasses

from ..._base.config import Config, check_choice, check_float, check_int
from ...errors import ConfigError

#: Zero-shot metrics that can rank encoders (all higher-is-better, in [0, 1]).
METRICS = ("top1_accuracy", "macro_f1", "balanced_accuracy")
SIMILARITIES = ("cosine", "dot")
DEFAULT_MAX_DENSE_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class ZeroShotConfig(Config):
    """Settings of a fixed prompt-prototype classification.

    ``metric`` ranks the encoders.  ``top_k`` lists the k of the reported top-k
    accuracies (sorted, deduplicated, always with 1).  ``max_dense_bytes`` bounds the
    samples x classes similarity block held at once; ``block_rows`` optionally caps
    its sample rows further (both are rounded to whole tiles, see docs/zero_shot.md).
    ``quality_tolerance`` is the default width of ``quality_cohort()`` (0.02, as for
    :class:`~vertebrae.Benchmark`).
    ``thread_limit`` caps BLAS threads (``None``: the library default).
    """

    metric: str = "top1_accuracy"
    similarity: str = "cosine"
    top_k: tuple[int, ...] = (1, 5)
    block_rows: int | None = None
    max_dense_bytes: int = DEFAULT_MAX_DENSE_BYTES
    quality_tolerance: float = 0.02
    thread_limit: int | None = None

    def _validate(self) -> None:
        name = type(self).__name__
        check_choice(name, "metric", self.metric, METRICS)
        check_choice(name, "similarity", self.similarity, SIMILARITIES)
        if isinstance(self.top_k, (str, bytes)) or not hasattr(self.top_k, "__iter__"):
            raise ConfigError(f"{name}.top_k must be a list of positive integers such as [1, 5], got {self.top_k!r}")
        ks = {check_int(name, f"top_k[{i}]", k, minimum=1) for i, k in enumerate(self.top_k)}
        self._set("top_k", tuple(sorted(ks | {1})))
        self._set("block_rows", check_int(name, "block_rows", self.block_rows, minimum=1, allow_none=True))
        self._set("max_dense_bytes", check_int(name, "max_dense_bytes", self.max_dense_bytes, minimum=1))
        self._set("quality_tolerance", check_float(name, "quality_tolerance", self.quality_tolerance, low=0.0))
        self._set("thread_limit", check_int(name, "thread_limit", self.thread_limit, minimum=1, allow_none=True))

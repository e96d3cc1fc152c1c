"""A memory budget for scoring: estimate what an overlap scoring call needs, and subsample or fail above it.

OverlapIndex works on a float64 copy of the matrix, takes per-class slices of it
(multi-label rows once per label) and scores in tiles of ``offline_chunk_size`` rows
against every prototype.  :func:`estimate_scoring_bytes` adds those up; the estimate
was checked against measured peak RSS (``benchmarks/bench_memory.py``, figures in
docs/distributed.md).  Over budget, ``policy="subsample"`` scores a target-preserving
subsample drawn with the samplers of subsample stability (every class or label keeps
at least 2 rows, regression at least 3) and records the effective counts and a
note (the result's warning, which the benchmark warns once, named by extractor);
``policy="fail"`` raises :class:`~vertebrae.errors.MemoryBudgetError` with
the estimate and the fix.  The budget stage (``budget`` in
:mod:`vertebrae.families.labeled.stages`) applies it between embedding and scoring; a budget
that no embedding could meet (:func:`smallest_scoring_bytes`) is refused by the
``Benchmark`` constructor, before any extraction.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._base.config import Config, check_choice, check_int, check_seed
from .._base.sparse import is_sparse
from ..errors import ConfigError, MemoryBudgetError
from ..inputs.targets import RegressionTargets, Targets

POLICIES = ("subsample", "fail")
#: Bookkeeping per row (label codes, assignments, tile indices), measured as noise next to the matrix copies.
ROW_OVERHEAD_BYTES = 64


@dataclasses.dataclass(frozen=True)
class MemoryConfig(Config):
    """``max_scoring_bytes``: the most memory one scoring call may take (bytes, beyond the input matrix).

    ``policy``: ``"subsample"`` scores a target-preserving subsample that fits,
    ``"fail"`` raises before scoring.  ``random_state`` seeds the subsample draw.
    """

    max_scoring_bytes: int
    policy: str = "subsample"
    random_state: int = 0

    def _validate(self) -> None:
        name = type(self).__name__
        self._set("max_scoring_bytes", check_int(name, "max_scoring_bytes", self.max_scoring_bytes, minimum=1))
        check_choice(name, "policy", self.policy, POLICIES)
        self._set("random_state", check_seed(name, "random_state", self.random_state, allow_none=False))


def _float64_bytes(X: Any) -> int:
    """Bytes of ``X`` as float64 (CSR: float64 values and int32 indices, plus the row pointer)."""
    if is_sparse(X):
        return 12 * int(X.nnz) + 8 * (X.shape[0] + 1)
    return 8 * X.shape[0] * X.shape[1]


def estimate_scoring_bytes(X: Any, targets: Targets, scoring_config: Any, continuous_config: Any = None) -> int:
    """Estimated peak memory of one overlap scoring call on ``X`` and ``targets`` (beyond ``X`` itself)."""
    counts = None if isinstance(targets, RegressionTargets) else targets.counts()
    return _footprint(X.shape[0], _float64_bytes(X), counts, targets, scoring_config, continuous_config)


def _footprint(n: int, copy: int, counts: dict[str, int] | None, targets: Targets, scoring_config: Any,
               continuous_config: Any) -> int:
    """The estimate for ``n`` rows whose float64 copy takes ``copy`` bytes (``counts``: rows per class or label)."""
    if counts is None:
        # ContinuousOverlapIndex: the normalized copy made here, its own working copy, and a k-NN graph.
        k = continuous_config.k if continuous_config is not None else 8
        return 2 * copy + 16 * n * (k + 1) + ROW_OVERHEAD_BYTES * n
    from .overlap import resolve_k

    label_rows = sum(counts.values())  # each multi-label row is sliced once per label it carries
    k_per_class, _, _ = resolve_k(counts, scoring_config, targets.catalog)
    tiles = 8 * min(scoring_config.offline_chunk_size, n) * sum(k_per_class.values())
    return copy + copy * label_rows // n + tiles + ROW_OVERHEAD_BYTES * n


def smallest_scoring_bytes(targets: Targets, config: MemoryConfig, scoring_config: Any,
                           continuous_config: Any = None) -> tuple[int, str]:
    """A lower bound of every scoring footprint ``config`` may meet on these targets, and what it scores.

    Before extraction the rows and classes are known, the embedding width is not.  So:
    the fewest rows the policy may score (every row under ``"fail"``; under ``"subsample"``
    2 rows per class, 2 positive rows per label with at least 2 rows, or 3 rows for
    regression) at the narrowest width, one dense float64 column (a CSR copy of the same
    rows is never smaller).  No embedding can be scored in less.
    """
    regression = isinstance(targets, RegressionTargets)
    counts = None if regression else targets.counts()
    if config.policy == "fail":
        n, what = targets.n_samples, f"all {targets.n_samples:,} rows (policy='fail')"
    elif regression:
        n, what = 3, "3 rows, the smallest regression subsample"
    else:
        counts = {key: min(2, count) for key, count in counts.items()}
        n = sum(counts.values()) if targets.target_type == "single_label" else 2
        what = (f"{n} rows, 2 per class" if targets.target_type == "single_label"
                else f"2 positive rows for each of {len(counts)} labels")
    return _footprint(n, 8 * n, counts, targets, scoring_config, continuous_config), what


def check_budget_feasible(targets: Targets, config: MemoryConfig, scoring_config: Any,
                          continuous_config: Any = None) -> None:
    """Refuse, before any extraction, a budget that no embedding of these targets can meet."""
    smallest, what = smallest_scoring_bytes(targets, config, scoring_config, continuous_config)
    if config.max_scoring_bytes < smallest:
        raise MemoryBudgetError(
            f"MemoryConfig.max_scoring_bytes={config.max_scoring_bytes:,} cannot be met by any embedding: scoring "
            f"{what} at a single dimension already needs about {smallest:,} bytes; raise max_scoring_bytes to at "
            "least that (a real embedding needs more: about 8 bytes per row per dimension, plus prototypes)")


@dataclasses.dataclass
class BudgetedInput:
    """What the scoring stages score: the matrix, targets and groups, subsampled when over budget."""

    matrix: Any
    targets: Targets
    groups: Any
    #: JSON-safe facts recorded in the embedding metadata (``memory_budget``).
    record: dict[str, Any]
    warning: str | None = None


def apply_memory_budget(X: Any, targets: Targets, groups: Any, config: MemoryConfig, scoring_config: Any,
                        continuous_config: Any, *, source: str) -> BudgetedInput:
    """``X``/``targets`` unchanged when the estimate fits; else a subsample that fits, or MemoryBudgetError."""
    n = X.shape[0]
    estimate = estimate_scoring_bytes(X, targets, scoring_config, continuous_config)
    record = {"max_scoring_bytes": config.max_scoring_bytes, "policy": config.policy, "estimated_bytes": estimate,
              "n_rows": n, "n_rows_scored": n, "subsampled": False}
    if estimate <= config.max_scoring_bytes:
        return BudgetedInput(X, targets, groups, record)
    tiles = _tile_bytes(X, targets, scoring_config)  # does not shrink with the rows (conservative below a tile)
    fit_rows = max(int((config.max_scoring_bytes - tiles) // ((estimate - tiles) / n)), 0)
    if config.policy == "fail":
        raise MemoryBudgetError(
            f"{source}: scoring {n:,} rows x {X.shape[1]:,} dimensions needs about {_mib(estimate)} MiB, over "
            f"MemoryConfig.max_scoring_bytes={config.max_scoring_bytes:,} ({_mib(config.max_scoring_bytes)} MiB); "
            f"raise max_scoring_bytes to at least {estimate:,}, or use policy='subsample' (it would score about "
            f"{fit_rows:,} target-preserving rows), or reduce the embedding width")
    from .stability import draw_subsample

    fraction = fit_rows / n
    try:
        if fit_rows == 0:
            raise ConfigError("not even one row fits")
        rows = draw_subsample(targets, fraction, config.random_state)
    except ConfigError:
        raise MemoryBudgetError(
            f"{source}: scoring needs about {_mib(estimate)} MiB, over MemoryConfig.max_scoring_bytes="
            f"{config.max_scoring_bytes:,}, and no target-preserving subsample fits that budget ({fit_rows:,} "
            "affordable rows; every class or label must keep at least 2 rows, regression 3); raise "
            "max_scoring_bytes") from None
    sub_targets = targets.subset(rows)
    matrix = X[rows]
    scored = estimate_scoring_bytes(matrix, sub_targets, scoring_config, continuous_config)
    record.update(n_rows_scored=int(rows.size), subsampled=True, subsample_fraction=fraction,
                  subsample_estimated_bytes=scored, random_state=config.random_state)
    if not isinstance(targets, RegressionTargets):
        record["class_counts"] = sub_targets.counts()
    note = (f"memory budget: scoring all {n:,} rows needs about {_mib(estimate)} MiB, over max_scoring_bytes "
            f"({_mib(config.max_scoring_bytes)} MiB); scored a target-preserving subsample of {rows.size:,} rows "
            f"({fraction:.4g} of each class), seed {config.random_state}")
    return BudgetedInput(matrix, sub_targets, None if groups is None else groups.subset(rows), record, note)


def _tile_bytes(X: Any, targets: Targets, scoring_config: Any) -> int:
    """The part of the estimate that does not grow with the row count once rows exceed a tile."""
    if isinstance(targets, RegressionTargets):
        return 0
    from .overlap import resolve_k

    k_per_class, _, _ = resolve_k(targets.counts(), scoring_config, targets.catalog)
    return 8 * min(scoring_config.offline_chunk_size, X.shape[0]) * sum(k_per_class.values())


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f}"


"""Stability analysis: how far an overlap score moves when only chance moves.

*Prototype* mode (the default) re-scores the same embeddings and targets with a
different MiniBatchKMeans seed per repeat, isolating clustering sensitivity.
*Subsample* mode also draws a target-preserving subset of rows per repeat.  Every
repeat goes through :class:`OverlapIndexScorer`; the whole plan (seeds and rows) is
drawn and checked before anything is scored, so an infeasible request fails before
any work.  The first repeat always uses the scorer's own seed, so in prototype mode it
*is* the primary score a benchmark ranks by, and the ranked score is one member of the
distribution it is compared with.  Summaries report *stability intervals*: percentile
ranges of the repeat scores, not confidence intervals.  The rules are spelled out in
docs/stability.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .._base.config import Config, check_choice, check_float, check_int, check_seed
from ..inputs.embeddings import validate_embeddings
from ..errors import ConfigError, ConfigTypeError, InputValidationError
from .._base.fanout import fanout_map
from .._base.result_schema import COUNT, INT, NUMBER, AnyOf, Choice, MapOf, both, nullable, rule
from ..inputs.targets import MultiLabelTargets, RegressionTargets, SingleLabelTargets, Targets, build_targets
from .overlap import OverlapIndexScorer

MODES = ("prototype", "subsample")
#: The three repeat values kept and summarized: OverlapScoreResult score / macro_score / weighted_score.
METRICS = ("score", "macro", "weighted")
#: Standard deviations use ddof=1: the repeats are a sample of the possible seeds/subsets.
STD_DDOF = 1
#: numpy.percentile method of the stability interval.
INTERVAL_METHOD = "linear"
#: Version of the repeat protocol, part of every stability artifact key.  2: repeat 0 is the primary draw.
PROTOCOL_VERSION = 2
#: Most repeats a config may ask for: each repeat is a full scoring call (20 is the default, a few hundred is a lot),
#: and the seeds of all of them are drawn first, so a mistyped count must fail before any memory or time is spent.
MAX_REPEATS = 10_000
#: An adjacent pair of the reported ranking is flagged unstable when its order holds in fewer repeats than this.
ORDER_AGREEMENT = 0.9


#: ``repeats`` value that turns on adaptive repeats (vertebrae.selection.adaptive_repeats; docs/stability.md).
AUTO = "auto"
#: The fields read only with ``repeats="auto"`` (left out of a fixed config's JSON, which stays as it was).
ADAPTIVE_FIELDS = ("min_repeats", "max_repeats", "batch_repeats", "equivalence_margin")


@dataclasses.dataclass(frozen=True)
class StabilityConfig(Config):
    """How to repeat overlap scoring.

    ``subsample_fraction`` is read in subsample mode only.  ``random_state`` seeds two
    independent streams (scoring seeds, sampling seeds).  ``n_jobs > 1`` runs repeats in
    that many worker processes, with results identical to ``n_jobs=1``.

    ``repeats="auto"`` adds repeats in rounds until every candidate's paired verdict against
    the best of its view is decided (its interval excludes 0, or lies within
    ``[-equivalence_margin, equivalence_margin]``) or ``max_repeats`` is reached: first
    ``min_repeats``, then ``batch_repeats`` more per round (vertebrae.selection.adaptive_repeats).
    Those four fields are read only then.
    """

    mode: str = "prototype"
    repeats: int | str = 20
    interval_level: float = 0.95
    subsample_fraction: float = 0.8
    random_state: int = 0
    n_jobs: int = 1
    min_repeats: int = 5
    max_repeats: int = 50
    batch_repeats: int = 5
    equivalence_margin: float = 0.01

    #: Repeats run in worker processes give the results of one process (tests/test_key_completeness.py).
    speed_only = ("n_jobs",)
    _removed_fields = {
        "stratified": "categorical subsampling cannot opt out of target preservation; subsample mode always samples "
                      "single-label targets per class and keeps every multi-label label, so there is nothing to switch "
                      "off (see docs/stability.md)",
    }

    def _validate(self) -> None:
        name = type(self).__name__
        check_choice(name, "mode", self.mode, MODES)
        if isinstance(self.repeats, str) and self.repeats != AUTO:
            raise ConfigTypeError(f"{name}.repeats must be an int >= 2 or the string 'auto' (adaptive repeats), got "
                                  f"{self.repeats!r}")
        if self.repeats != AUTO:
            self._set("repeats", self._count("repeats", self.repeats, 2))
            changed = [f for f in ADAPTIVE_FIELDS if getattr(self, f) != _DEFAULTS[f]]
            if changed:
                raise ConfigError(f"{name}.{changed[0]} is read only with repeats='auto' (adaptive repeats), but "
                                  f"repeats={self.repeats}; pass repeats='auto' or leave {changed[0]} out")
        self._set("interval_level", check_float(name, "interval_level", self.interval_level, low=0.0, high=1.0,
                                                low_open=True, high_open=True))
        self._set("subsample_fraction", check_float(name, "subsample_fraction", self.subsample_fraction, low=0.0,
                                                    high=1.0, low_open=True))
        self._set("random_state", check_seed(name, "random_state", self.random_state, allow_none=False))
        self._set("n_jobs", check_int(name, "n_jobs", self.n_jobs, minimum=1))
        self._set("min_repeats", self._count("min_repeats", self.min_repeats, 2))
        self._set("max_repeats", self._count("max_repeats", self.max_repeats, 2))
        self._set("batch_repeats", self._count("batch_repeats", self.batch_repeats, 1))
        if self.min_repeats > self.max_repeats:
            raise ConfigError(f"{name}.min_repeats ({self.min_repeats}) must be <= max_repeats ({self.max_repeats})")
        self._set("equivalence_margin", check_float(name, "equivalence_margin", self.equivalence_margin, low=0.0))

    def _count(self, field: str, value: Any, minimum: int) -> int:
        name = type(self).__name__
        value = check_int(name, field, value, minimum=minimum)
        if value > MAX_REPEATS:
            raise ConfigError(f"{name}.{field} must be <= {MAX_REPEATS} (each repeat is one full scoring call), got "
                              f"{value}")
        return value

    @property
    def adaptive(self) -> bool:
        """True for ``repeats="auto"``."""
        return self.repeats == AUTO

    def to_dict(self) -> dict[str, Any]:
        """Every field; a fixed config leaves out the adaptive fields (its JSON is what it was before them)."""
        data = super().to_dict()
        return data if self.adaptive else {k: v for k, v in data.items() if k not in ADAPTIVE_FIELDS}

    def draws(self) -> dict[str, Any]:
        """What decides repeat i's scoring seed and rows (for every i): the key of a round of repeats.

        The repeat count and the adaptive fields are not in it: repeat i is the same however
        many repeats are run (:func:`plan_repeats`), so a round is reused whatever the stopping rule."""
        return {"mode": self.mode, "subsample_fraction": self.subsample_fraction, "random_state": self.random_state,
                "protocol_version": PROTOCOL_VERSION}

    def fixed(self, repeats: int) -> StabilityConfig:
        """The fixed-count config with this one's draws: what a run that stopped at ``repeats`` equals."""
        return StabilityConfig(mode=self.mode, repeats=repeats, interval_level=self.interval_level,
                               subsample_fraction=self.subsample_fraction, random_state=self.random_state,
                               n_jobs=self.n_jobs)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(StabilityConfig)}


@dataclasses.dataclass(frozen=True)
class StabilitySummary:
    """Spread of one score over the repeats.

    ``std`` uses ddof=1; the stability interval is the central ``interval_level`` range
    of the repeat values: numpy percentiles at (1-l)/2 and (1+l)/2, linear interpolation.
    """

    mean: float
    std: float
    min: float
    max: float
    interval_low: float
    interval_high: float

    @property
    def interval_width(self) -> float:
        return self.interval_high - self.interval_low

    @classmethod
    def of(cls, values: Sequence[float], interval_level: float) -> StabilitySummary:
        v = np.asarray(values, dtype=np.float64)
        low, high = np.percentile(v, [50 * (1 - interval_level), 50 * (1 + interval_level)], method=INTERVAL_METHOD)
        return cls(mean=float(v.mean()), std=float(v.std(ddof=STD_DDOF)), min=float(v.min()), max=float(v.max()),
                   interval_low=float(low), interval_high=float(high))


_SUMMARY_SCHEMA = both({name: NUMBER for name in ("mean", "std", "min", "max", "interval_low", "interval_high")},
                       rule(lambda s: s["min"] <= s["max"] and s["interval_low"] <= s["interval_high"],
                            "a summary needs min <= max and interval_low <= interval_high"))
#: What reports read of a serialized StabilityResult (checked on load; see vertebrae._base.result_schema); the
#: config itself is checked by StabilityConfig.from_dict.
SCHEMA = both({"config": {"repeats": AnyOf((INT, Choice((AUTO,)))), "mode": str, "interval_level": NUMBER},
               "summaries": both({"score": _SUMMARY_SCHEMA}, MapOf(_SUMMARY_SCHEMA)),
               "repeat_scores": {"score": [NUMBER]}, "effective_subsample_fractions": [NUMBER], "warnings": [str]},
              rule(lambda s: len(s["effective_subsample_fractions"]) == len(s["repeat_scores"]["score"])
                   and s["config"]["repeats"] in (AUTO, len(s["repeat_scores"]["score"])),
                   "repeat_scores.score and effective_subsample_fractions need one value per repeat"))

#: ``metadata["adaptive_repeats"]`` of a benchmark result with ``repeats="auto"`` (vertebrae.selection.adaptive_repeats).
ADAPTIVE_SCHEMA = {"repeats": COUNT, "rounds": COUNT, "windows": [[COUNT]],
                   "stopped": Choice(("decided", "max_repeats")), "equivalence_margin": NUMBER, "undecided": [str],
                   "decisions": MapOf({"view": nullable(str), "repeats_to_decide": nullable(COUNT)})}


@dataclasses.dataclass
class StabilityResult:
    """Everything a stability analysis produced, including the plan needed to reproduce it.

    Per-repeat lists are aligned by repeat index.  ``sampling_seeds`` and
    ``repeat_class_counts`` are empty in prototype mode (nothing is sampled);
    ``repeat_class_counts`` is also empty for regression (there are no classes).
    ``scoring_config`` is the scorer config that applies to ``target_type``.
    ``includes_primary_draw``: repeat 0 is exactly the primary score (prototype mode:
    same data, the scorer's own seed); False for results written before that rule.
    """

    config: StabilityConfig
    target_type: str
    n_samples: int
    scoring_config: dict[str, Any]
    scoring_seeds: list[int]
    sampling_seeds: list[int]
    effective_sample_counts: list[int]
    effective_subsample_fractions: list[float]
    repeat_class_counts: list[dict[str, int]]
    repeat_scores: dict[str, list[float]]
    summaries: dict[str, StabilitySummary]
    warnings: list[str]
    includes_primary_draw: bool = False

    @property
    def summary(self) -> StabilitySummary:
        """Summary of the scorer's primary ``score`` (what the DataFrame stability columns show)."""
        return self.summaries["score"]

    def position_of(self, score: float) -> dict[str, Any]:
        """Where ``score`` (the ranked overlap score) sits among the repeat scores; see :func:`score_position`."""
        return score_position(score, self.repeat_scores["score"], self.summary.interval_low, self.summary.interval_high)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the configs' fingerprints (no speed-only field), whatever run computed it."""
        data = dataclasses.asdict(self)  # deep copy; summaries become plain dicts
        data["config"] = self.config.fingerprint()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StabilityResult:
        return cls(**{**data, "config": StabilityConfig.from_dict(data["config"]),
                      "summaries": {name: StabilitySummary(**s) for name, s in data["summaries"].items()}})


def score_position(score: float, repeat_scores: Sequence[float], interval_low: float,
                   interval_high: float) -> dict[str, Any]:
    """Where one score sits in a repeat distribution, JSON-safe.

    ``percentile`` is the mid-rank share of repeats below it (ties count half; what
    ``scipy.stats.percentileofscore(kind="mean")`` gives, divided by 100);
    ``relative_to_interval`` is ``"below"``, ``"inside"`` or ``"above"`` the stability interval.
    """
    values = np.asarray(repeat_scores, dtype=np.float64)
    below, above = int((values < score).sum()), int((values > score).sum())
    where = "below" if score < interval_low else "above" if score > interval_high else "inside"
    return {"score": float(score), "percentile": (below + 0.5 * (values.size - below - above)) / values.size,
            "repeats_below": below, "repeats_above": above, "n_repeats": int(values.size),
            "relative_to_interval": where}


# ----------------------------------------------------------------------- sampling plan
def least_fraction(rows: int, count: int) -> float:
    """The smallest ``subsample_fraction`` of four decimals that keeps ``rows`` of ``count`` (what an error suggests:
    ``2 / 7`` printed as 0.2857 would keep only 1 of 7 rows; 0.2858 keeps 2)."""
    return math.ceil(Fraction(rows, count) * 10_000) / 10_000


def subsample_size(count: int, fraction: float) -> int:
    """``floor(count * fraction)``, reading ``fraction`` as the decimal it prints as.

    Binary floating point makes ``100 * 0.57`` equal 56.999..., whose floor is 56; users
    who asked for 0.57 of 100 rows mean 57.
    """
    return math.floor(count * Fraction(str(fraction)))


class SubsampleInfeasible(ConfigError):
    """A subsample that cannot keep the targets.  ``counts`` says so without the fraction or the advice about
    ``subsample_fraction``, as what the subsample ``keeps ...`` (screening draws its rungs with fractions of its own,
    no setting of the user's)."""

    def __init__(self, message: str, counts: str = "") -> None:  # one argument too: callers re-raise type(exc)(text)
        super().__init__(message)
        self.counts = counts


def _infeasible(message: str, counts: str) -> SubsampleInfeasible:
    return SubsampleInfeasible(f"StabilityConfig(mode='subsample'): {message}. The subset is never expanded silently: "
                               "use a larger subsample_fraction, or mode='prototype' (no sampling).", counts)


class _SingleLabelSampler:
    """``floor(n_c * fraction)`` rows of every class c, drawn without replacement."""

    def __init__(self, targets: SingleLabelTargets, fraction: float) -> None:
        keys = targets.catalog.keys
        self.groups = [np.flatnonzero(targets.keys == key) for key in keys]
        self.sizes = [subsample_size(g.size, fraction) for g in self.groups]
        short = [(key, g.size, s) for key, g, s in zip(keys, self.groups, self.sizes) if s < 2]
        if short:
            names = [targets.catalog.display(k) for k, _, _ in short[:5]]
            shown = ", ".join(f"{name!r}: floor({n} x {fraction}) = {s}" for name, (_, n, s) in zip(names, short))
            kept = ", ".join(f"{name!r}: {s} of {n}" for name, (_, n, s) in zip(names, short))
            enough = least_fraction(2, min(g.size for g in self.groups))
            raise _infeasible(f"subsample_fraction={fraction} keeps fewer than 2 rows of class(es) {shown}; "
                              "every class must keep at least 2 rows (subsample_fraction >= "
                              f"{enough:g} would do)",
                              f"keeps fewer than 2 rows of class(es) {kept}; every class must keep at "
                              "least 2 rows")

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.sort(np.concatenate([rng.choice(g, s, replace=False) for g, s in zip(self.groups, self.sizes)]))


class _MultiLabelSampler:
    """``floor(n * fraction)`` rows in which every label keeps at least 2 positive rows.

    Required rows first: labels are visited from rarest to most common, and each gets
    random positive rows until two of its positives are required (rows picked for rarer
    labels count, so common labels rarely add any).  The remaining budget is filled
    uniformly from the other rows.  Always feasible when the budget is at least twice
    the label count; below that it can depend on the draw.
    """

    def __init__(self, targets: MultiLabelTargets, fraction: float) -> None:
        self.n = targets.n_samples
        self.fraction = fraction
        self.size = subsample_size(self.n, fraction)
        csc = targets.indicator.tocsc()
        positives = [csc.indices[csc.indptr[j]:csc.indptr[j + 1]] for j in range(csc.shape[1])]
        self.positives = sorted(positives, key=len)  # rarest first (stable: ties keep column order)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        chosen = np.zeros(self.n, dtype=bool)
        for rows in self.positives:
            missing = 2 - int(chosen[rows].sum())
            if missing > 0:
                chosen[rng.choice(rows[~chosen[rows]], missing, replace=False)] = True
        required = np.flatnonzero(chosen)
        if required.size > self.size:
            needs = (f"keeping 2 positive rows of each of the {len(self.positives)} labels needs {required.size} "
                     "rows in this draw")
            raise _infeasible(f"{needs}, but floor({self.n} x {self.fraction}) = {self.size}",
                              f"keeps {self.size} of {self.n} rows, but {needs}")
        others = np.setdiff1d(np.arange(self.n), required, assume_unique=True)
        return np.sort(np.concatenate([required, rng.choice(others, self.size - required.size, replace=False)]))


class _RegressionSampler:
    """``floor(n * fraction)`` uniform rows (at least 3) in which some target varies.

    If a draw leaves every target constant, its last row is swapped for the first
    unchosen row (in the same random order) with different target values.
    """

    def __init__(self, targets: RegressionTargets, fraction: float) -> None:
        self.values = targets.values
        self.size = subsample_size(targets.n_samples, fraction)
        if self.size < 3:
            raise _infeasible(f"subsample_fraction={fraction} keeps floor({targets.n_samples} x {fraction}) = "
                              f"{self.size} rows; regression repeats need at least 3 (subsample_fraction >= "
                              f"{least_fraction(3, targets.n_samples):g} would do)",
                              f"keeps {self.size} of {targets.n_samples} rows; regression repeats need at "
                              "least 3")

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        order = rng.permutation(self.values.shape[0])
        rows, rest = order[: self.size].copy(), order[self.size:]
        if np.ptp(self.values[rows], axis=0).max() == 0:
            rows[-1] = rest[(self.values[rest] != self.values[rows[0]]).any(axis=1)][0]
        return np.sort(rows)


_SAMPLERS = {"single_label": _SingleLabelSampler, "multi_label": _MultiLabelSampler, "regression": _RegressionSampler}


def draw_subsample(targets: Targets, fraction: float, seed: int) -> np.ndarray:
    """Sorted rows of one target-preserving subsample (the rules of subsample mode; ConfigError if infeasible)."""
    return _SAMPLERS[targets.target_type](targets, fraction).draw(np.random.default_rng(seed))


class _Repeat(NamedTuple):
    scoring_seed: int
    rows: np.ndarray | None  # None: every row (prototype mode)


def plan_repeats(targets: Targets, config: StabilityConfig,
                 primary_seed: int | None = None) -> tuple[list[_Repeat], list[int]]:
    """Draw every repeat's scoring seed and rows; returns (repeats, sampling seeds).

    ``SeedSequence(random_state).spawn(2)`` gives two independent streams: the first
    yields the scoring seeds, the second the sampling seeds (one ``default_rng`` per
    repeat), so changing the mode never changes the scoring seeds.  ``primary_seed``
    (the scorer's own seed) is the first repeat's scoring seed, followed by the first
    ``repeats - 1`` seeds of the scoring stream.  Repeat i never depends on the repeat count
    (``generate_state(n)`` extends ``generate_state(m)``, and each repeat draws its rows from
    its own seed), so the first m repeats of a plan of n are the plan of m: what lets adaptive
    repeats stop at m with the result of a fixed run of m.
    """
    if config.adaptive:
        raise ConfigError("plan_repeats needs a repeat count: plan config.fixed(n) for the first n repeats of "
                          "repeats='auto'")
    scoring_stream, sampling_stream = np.random.SeedSequence(config.random_state).spawn(2)
    drawn = scoring_stream.generate_state(config.repeats).tolist()
    scoring_seeds = drawn if primary_seed is None else [primary_seed, *drawn[: config.repeats - 1]]
    if config.mode == "prototype":
        return [_Repeat(seed, None) for seed in scoring_seeds], []
    sampler = _SAMPLERS[targets.target_type](targets, config.subsample_fraction)
    sampling_seeds = sampling_stream.generate_state(config.repeats).tolist()
    repeats = [_Repeat(seed, sampler.draw(np.random.default_rng(s))) for seed, s in zip(scoring_seeds, sampling_seeds)]
    return repeats, sampling_seeds


# ----------------------------------------------------------------------- scoring
class _Outcome(NamedTuple):
    values: tuple[float, float, float]  # in METRICS order
    warnings: list[str]


def _score_repeat(X: Any, targets: Targets, scorer: OverlapIndexScorer, repeat: _Repeat) -> _Outcome:
    if repeat.rows is not None:
        X, targets = X[repeat.rows], targets.subset(repeat.rows)
    # The scorer records its warnings in the result; re-emitting them once per repeat is noise.
    result = scorer.score(X, targets, seed=repeat.scoring_seed, warn=False, per_target=False)
    return _Outcome((result.score, result.macro_score, result.weighted_score), result.warnings)


_WORKER: dict[str, Any] = {}


def _init_worker(X: Any, targets: Targets, scorer: OverlapIndexScorer) -> None:
    """Receive the data once per worker process and pin it to one BLAS/OpenMP thread.

    The scorer limits threads per call already; the process-wide limit also covers a
    ``thread_limit=None`` scorer, which would otherwise oversubscribe the cores.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    _WORKER.update(X=X, targets=targets, scorer=scorer)


def _score_in_worker(repeat: _Repeat) -> _Outcome:
    return _score_repeat(_WORKER["X"], _WORKER["targets"], _WORKER["scorer"], repeat)


def _score_all(X: Any, targets: Targets, scorer: OverlapIndexScorer, repeats: list[_Repeat],
               n_jobs: int) -> list[_Outcome]:
    fanned = fanout_map(_score_repeat, (X, targets, scorer), repeats)  # a distributed runner's workers
    if fanned is not None:
        return fanned
    if n_jobs == 1:
        return [_score_repeat(X, targets, scorer, repeat) for repeat in repeats]
    import multiprocessing  # here, not at import: `import vertebrae` stays light
    from concurrent.futures import ProcessPoolExecutor

    # 'spawn' rather than fork: forking a process whose OpenMP runtime is initialized can hang.
    with ProcessPoolExecutor(max_workers=min(n_jobs, len(repeats)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_init_worker, initargs=(X, targets, scorer)) as pool:
        return list(pool.map(_score_in_worker, repeats))


def _repeat_window(window: Any, config: StabilityConfig) -> tuple[int, int]:
    """``window`` as (start, stop) repeats of the plan (None: all of a fixed count); a fixed count bounds ``stop``,
    so a window never scores repeats the config does not ask for."""
    if window is None:
        return 0, config.repeats
    if isinstance(window, (str, bytes)) or not isinstance(window, Sequence) or len(window) != 2:
        raise ConfigTypeError(f"window must be a pair (start, stop) of repeat indices, got {window!r}")
    start = check_int("run_stability_analysis", "window[0]", window[0], minimum=0)
    stop = check_int("run_stability_analysis", "window[1]", window[1], minimum=1)
    limit, what = (MAX_REPEATS, "") if config.adaptive else (config.repeats, f" (StabilityConfig.repeats={config.repeats})")
    if not start < stop <= limit:
        raise ConfigError(f"window must be (start, stop) with 0 <= start < stop <= {limit}{what}, got {window}")
    return start, stop


def run_stability_analysis(embeddings: Any, targets: Targets | Any, *, config: StabilityConfig | None = None,
                           scorer: OverlapIndexScorer | None = None, target_type: str | None = None,
                           window: tuple[int, int] | None = None) -> StabilityResult:
    """Score ``embeddings`` ``config.repeats`` times and summarize the spread.

    ``targets`` is a validated targets object or raw labels (validated here with
    ``target_type``; regression must be requested).  ``scorer`` carries the overlap
    settings (default ``OverlapIndexScorer()``).  Dense and sparse (CSR) embeddings
    reach the scorer in their own format in every repeat.  ``window=(start, stop)`` scores
    only repeats ``start..stop-1`` of the plan (one round of adaptive repeats; required for
    ``repeats="auto"``); :func:`merge_rounds` joins rounds into the result of ``stop`` repeats.
    """
    config = StabilityConfig() if config is None else config
    if not isinstance(config, StabilityConfig):
        raise ConfigTypeError(f"config must be a StabilityConfig, got {type(config).__name__}")
    scorer = OverlapIndexScorer() if scorer is None else scorer
    if not isinstance(scorer, OverlapIndexScorer):
        raise ConfigTypeError(f"scorer must be an OverlapIndexScorer, got {type(scorer).__name__}")
    X = validate_embeddings(embeddings)
    if not isinstance(targets, (SingleLabelTargets, MultiLabelTargets, RegressionTargets)):
        targets = build_targets(targets, target_type=target_type, n_samples=X.shape[0], argument="targets")
    elif targets.n_samples != X.shape[0]:
        raise InputValidationError(f"targets has {targets.n_samples} rows but embeddings has {X.shape[0]}; "
                                   "give exactly one target per embedding row")
    categorical = not isinstance(targets, RegressionTargets)
    scoring_config = scorer.config if categorical else scorer.continuous_config
    # Repeat 0 uses the scorer's own seed: in prototype mode it is the primary score itself.
    if config.adaptive and window is None:
        raise ConfigError("StabilityConfig(repeats='auto') is run in rounds: pass window=(start, stop), or use "
                          "Benchmark, which runs the rounds (vertebrae.selection.adaptive_repeats)")
    start, stop = _repeat_window(window, config)
    repeats, sampling_seeds = plan_repeats(targets, config.fixed(stop), primary_seed=scoring_config.random_state)
    repeats, sampling_seeds = repeats[start:], sampling_seeds[start:]
    outcomes = _score_all(X, targets, scorer, repeats, config.n_jobs)

    n = targets.n_samples
    counts = [n if r.rows is None else int(r.rows.size) for r in repeats]
    class_counts = [targets.subset(r.rows).counts() for r in repeats if r.rows is not None and categorical]
    values = {name: [float(o.values[i]) for o in outcomes] for i, name in enumerate(METRICS)}
    return StabilityResult(
        config=config, target_type=targets.target_type, n_samples=n, scoring_config=scoring_config.fingerprint(),
        scoring_seeds=[r.scoring_seed for r in repeats], sampling_seeds=sampling_seeds,
        effective_sample_counts=counts, effective_subsample_fractions=[c / n for c in counts],
        repeat_class_counts=class_counts, repeat_scores=values,
        summaries={name: StabilitySummary.of(v, config.interval_level) for name, v in values.items()},
        warnings=list(dict.fromkeys(w for o in outcomes for w in o.warnings)),
        includes_primary_draw=config.mode == "prototype" and start == 0)


def stored_round(result: StabilityResult) -> StabilityResult:
    """A round of adaptive repeats holding only what its key hashes (the draws, :meth:`StabilityConfig.draws`):
    every stopping field and the interval level at their defaults, the summaries at that level.  Runs with other
    stopping rules reuse the round, so it must be the same bytes whichever run stored it; :func:`merge_rounds`
    gives the run's own config and interval level back."""
    c = result.config
    config = StabilityConfig(mode=c.mode, repeats="auto", subsample_fraction=c.subsample_fraction,
                             random_state=c.random_state)
    return dataclasses.replace(result, config=config, summaries={
        name: StabilitySummary.of(v, config.interval_level) for name, v in result.repeat_scores.items()})


def merge_rounds(rounds: Sequence[StabilityResult], config: StabilityConfig) -> StabilityResult:
    """Consecutive rounds (windows ``0..a``, ``a..b``, ...) joined into one result over all their repeats.

    Per-repeat lists are concatenated and the summaries recomputed at ``config.interval_level``;
    the result carries ``config`` (a round read from a cache may have been stored by a run with
    other stopping fields, which do not change its repeats).  So the merge of rounds ending at n
    equals a fixed run of n repeats in everything but ``config.repeats``.
    """
    first = dataclasses.replace(rounds[0], config=config)
    lists = ("scoring_seeds", "sampling_seeds", "effective_sample_counts", "effective_subsample_fractions",
             "repeat_class_counts")
    joined = {name: [item for part in rounds for item in getattr(part, name)] for name in lists}
    values = {name: [v for part in rounds for v in part.repeat_scores[name]] for name in METRICS}
    return dataclasses.replace(
        first, **joined, repeat_scores=values,
        summaries={name: StabilitySummary.of(v, first.config.interval_level) for name, v in values.items()},
        warnings=list(dict.fromkeys(w for part in rounds for w in part.warnings)))


# ----------------------------------------------------------------------- ranking stability
def ranking_stability(per_extractor_repeat_scores: Mapping[str, Sequence[float]], *,
                      higher_is_better: bool = True, ranked: Sequence[str] | None = None) -> dict[str, Any]:
    """How stable the extractor ranking is across stability repeats.

    Repeat r of every extractor forms one ranking, so every extractor must have been
    analysed with the same repeat count and the same seeds (the same StabilityConfig).
    The reference ranking ranks the mean repeat scores.  Ranks are competition ranks
    (ties share the best rank, 1 = best).  Returns, JSON-safe: ``reference_ranks``,
    ``mean_ranks``, ``rank_retention`` (share of repeats in which an extractor holds
    its reference rank), ``top_extractor`` (best mean; ties: first given) and
    ``top_retention`` (share of repeats in which it ranks first), and
    ``mean_kendall_tau``: Kendall's tau-b between the rankings of every pair of repeats,
    averaged; pairs where tau is undefined (all scores of a repeat tied) are left out,
    and it is None when no pair is defined.

    ``ranked`` is the order a report shows (best first, e.g. by the primary draw); for
    each adjacent pair of it, ``pair_agreement`` gives the share of repeats in which the
    better-ranked extractor scores better (ties count half), and ``order_stable`` is False
    when any pair holds in fewer than ``ORDER_AGREEMENT`` of the repeats (those pairs are
    listed in ``unstable_pairs``).
    """
    from scipy.stats import kendalltau, rankdata  # scipy.stats is slow to import; keep `import vertebrae` fast

    names = list(per_extractor_repeat_scores)
    if len(names) < 2:
        raise InputValidationError(f"ranking stability needs at least 2 extractors, got {len(names)}")
    lengths = {name: len(v) for name, v in per_extractor_repeat_scores.items()}
    if len(set(lengths.values())) != 1:
        raise InputValidationError(f"every extractor needs the same number of stability repeats (run them with the "
                                   f"same StabilityConfig), got {lengths}")
    scores = np.array([[float(x) for x in v] for v in per_extractor_repeat_scores.values()])  # (extractor, repeat)
    n_repeats = scores.shape[1]
    if n_repeats < 2 or not np.isfinite(scores).all():
        raise InputValidationError(f"ranking stability needs at least 2 finite repeat scores per extractor, got "
                                   f"{n_repeats} repeat(s){'' if np.isfinite(scores).all() else ' with NaN/inf'}")
    better_first = -scores if higher_is_better else scores
    ranks = rankdata(better_first, method="min", axis=0)
    means = scores.mean(axis=1)
    reference = rankdata(better_first.mean(axis=1), method="min")
    top = int(np.argmin(reference))
    taus = [kendalltau(scores[:, r], scores[:, s]).statistic for r in range(n_repeats) for s in range(r + 1, n_repeats)]
    defined = [float(t) for t in taus if not math.isnan(t)]
    return {
        "reference": "mean_score", "higher_is_better": higher_is_better, "n_repeats": n_repeats, "extractors": names,
        "mean_scores": {n: float(m) for n, m in zip(names, means)},
        "reference_ranks": {n: int(r) for n, r in zip(names, reference)},
        "mean_ranks": {n: float(r) for n, r in zip(names, ranks.mean(axis=1))},
        "rank_retention": {n: float(v) for n, v in zip(names, (ranks == reference[:, None]).mean(axis=1))},
        "top_extractor": names[top], "top_retention": float((ranks[top] == 1).mean()),
        "mean_kendall_tau": float(np.mean(defined)) if defined else None, "kendall_tau_pairs": len(defined),
        **({} if ranked is None else _order_agreement(list(ranked), names, better_first)),
    }


def _order_agreement(ranked: list[str], names: list[str], better_first: np.ndarray) -> dict[str, Any]:
    """Per adjacent pair of ``ranked``: share of repeats that keep its order (lower ``better_first`` is better)."""
    if sorted(ranked) != sorted(names):
        raise InputValidationError(f"ranked must list the analysed extractors {names} once each, got {ranked}")
    row = {name: i for i, name in enumerate(names)}
    pairs = []
    for better, worse in zip(ranked, ranked[1:]):
        a, b = better_first[row[better]], better_first[row[worse]]
        agreement = float(((a < b).sum() + 0.5 * (a == b).sum()) / a.size)
        pairs.append({"better": better, "worse": worse, "agreement": agreement})
    unstable = [p for p in pairs if p["agreement"] < ORDER_AGREEMENT]
    return {"ranked_order": ranked, "order_agreement_threshold": ORDER_AGREEMENT, "pair_agreement": pairs,
            "unstable_pairs": unstable, "order_stable": not unstable}

"""Adaptive repeats: add paired stability repeats in rounds until every verdict against the best is decided.

``StabilityConfig(repeats="auto")`` runs ``min_repeats`` repeats with the benchmark's plan
(the ``stability_round`` stage), then rounds of ``batch_repeats`` more, each a plan of only
the ``stability_round`` jobs (and what they read) for the new repeat range, executed by the
same runner.  Earlier repeats are never rescored: a round's key hashes its repeat range, so
with a cache a rerun reads every round back.  After each round the rounds are merged and the
paired verdicts computed exactly as :meth:`BenchmarkResult.paired_verdicts` computes them.

Stopping rule (docs/stability.md): a candidate's verdict against the best of its view is
*decided* when its paired interval excludes 0 (``difference_high < 0``: worse;
``difference_low > 0``: better on the repeats than its full-data rank says) or lies within
``[-equivalence_margin, equivalence_margin]`` (tied within the margin).  The run stops when
every ranked candidate of every view is decided, or at ``max_repeats``.  Repeat i does not
depend on the repeat count (``plan_repeats``), so a run that stops at n repeats holds exactly
the repeats of a fixed run with ``repeats=n``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..families.labeled.stages import repeat_window
from ..errors import ConfigError, VertebraeError
from ..execution.jobs import RunOutcome
from ..execution.plan import Plan
from ..families.front_door import Rounds, RunScope, chain_runtime
from ..families.labeled.results import BenchmarkResult, ExtractorResult
from ..scoring.metric_result import OVERLAP_METRIC
from ..scoring.paired_verdicts import PairedComparison
from ..scoring.stability import StabilityConfig, merge_rounds

ROUND_STAGE = "stability_round"
def check_adaptive(config: StabilityConfig | None, primary_metric: str) -> None:
    """Adaptive repeats judge the overlap ranking: refuse another primary metric before any work."""
    if config is not None and config.adaptive and primary_metric != OVERLAP_METRIC:
        raise ConfigError(f"StabilityConfig(repeats='auto') stops when the paired verdicts of the overlap ranking are "
                          f"decided, but primary_metric is {primary_metric!r}; use a fixed count (repeats=20) or "
                          f"primary_metric={OVERLAP_METRIC!r}")


def check_staged(config: StabilityConfig | None) -> None:
    """A staged run plans every job before any runs, so it cannot grow rounds: refuse auto with what to do."""
    if config is not None and config.adaptive:
        raise ConfigError("stability repeats = 'auto' needs rounds decided while the run goes, which a staged plan "
                          "cannot hold: set [stability] repeats to a count (e.g. 20) for plan/embed/score/collect, or "
                          "use `vertebrae run` for repeats = 'auto'")


def is_decided(comparison: PairedComparison, margin: float) -> bool:
    """The stopping rule for one candidate against its view's best (see the module docstring)."""
    low, high = comparison.difference_low, comparison.difference_high
    return high < 0 or low > 0 or (-margin <= low and high <= margin)


def decisions(results: Sequence[Any], margin: float) -> dict[str, tuple[str | None, bool]]:
    """``{candidate: (view, decided)}`` for every ranked candidate but the best of each view."""
    judged = BenchmarkResult({}, list(results), [], {})
    decided: dict[str, tuple[str | None, bool]] = {}
    for view in judged.views():
        if len(judged.ranked_results(view)) < 2:  # nothing to compare (failed chains are unranked)
            continue
        verdicts = judged.paired_verdicts(view)
        if not verdicts.available:  # every valid chain has every round, so this is a bug, not a user's mistake
            raise VertebraeError(f"adaptive repeats: no paired verdicts for view {view!r}: {verdicts.reason}")
        for comparison in verdicts.against_best[1:]:
            decided[comparison.candidate] = (view, is_decided(comparison, margin))
    return decided


def run_rounds(results: list[Any], plan: Plan, outcome: RunOutcome,
               later: Rounds) -> tuple[list[Any], dict[str, Any]]:
    """The results with their merged stability repeats, and the run's adaptive record (``ADAPTIVE_SCHEMA``).

    ``plan`` and ``outcome`` are the first round's, which gave ``results``; ``later`` runs the next rounds in the
    run's scope (:class:`~vertebrae.families.front_door.RunScope`).
    """
    scope = later.scope
    config: StabilityConfig = scope.settings.stability_config
    results = list(results)
    rounds: dict[int, list[Any]] = {}
    for i, (chain, keys) in enumerate(zip(plan.chains, plan.chain_keys)):
        _take_round(scope, results, rounds, i, chain, keys, plan, outcome)
    windows = [repeat_window(scope.settings)]
    history: list[tuple[int, dict[str, tuple[str | None, bool]]]] = []
    while True:
        merged = _merged(results, rounds, config)
        history.append((windows[-1][1], decisions(merged, config.equivalence_margin)))
        stop = windows[-1][1]
        if all(done for _, done in history[-1][1].values()) or stop >= config.max_repeats or not rounds:
            break
        windows.append((stop, min(stop + config.batch_repeats, config.max_repeats)))
        _run_round(results, rounds, plan, windows[-1], later)
    return merged, _record(history, windows, config)


def _take_round(scope: RunScope, results: list[Any], rounds: dict[int, list[Any]], i: int, chain: Any,
                keys: dict[str, str], plan: Plan, outcome: RunOutcome) -> None:
    """Append chain i's round from ``outcome``; a chain whose round failed becomes an invalid result."""
    if results[i].error is not None:  # a failed chain (on_error='record') is unranked and gets no rounds
        return
    key = keys[ROUND_STAGE]
    artifact = outcome.artifacts.get(key)
    if artifact is None:
        failure = outcome.failures[key]
        results[i] = ExtractorResult.failed(chain.name, scope.settings.primary_metric,
                                            failure.to_dict(chain.parent), artifact_keys=dict(keys))
        rounds.pop(i, None)
        return
    rounds.setdefault(i, []).append(artifact.stability)
    runtime = chain_runtime({ROUND_STAGE: key}, plan, outcome)
    if len(rounds[i]) > 1:  # later rounds add their seconds to the chain's stability_round runtime
        runtime = {name: _add(results[i].runtime.get(name), value) for name, value in runtime.items()}
    results[i].runtime = {**results[i].runtime, **runtime}


def _add(before: Any, value: Any) -> Any:
    """Seconds add up; a round read from the cache (``not_measured_cache_hit``) adds none."""
    if isinstance(before, (int, float)) and isinstance(value, (int, float)):
        return before + value
    return before if isinstance(before, (int, float)) else value


def _run_round(results: list[Any], rounds: dict[int, list[Any]], plan: Plan, window: tuple[int, int],
               later: Rounds) -> None:
    """Run the ``stability_round`` jobs of repeats ``window`` (the round's state) for the live chains (reading the
    first round's embeddings, never extracting again)."""
    live = sorted(rounds)
    round_plan, outcome = later.run((ROUND_STAGE,), f"{later.scope.description} (repeats {window[0]}-{window[1] - 1})",
                                    chains=[plan.chains[i] for i in live], state={"stability_window": window})
    for i, chain, keys in zip(live, round_plan.chains, round_plan.chain_keys):
        _take_round(later.scope, results, rounds, i, chain, keys, round_plan, outcome)


def _merged(results: list[Any], rounds: dict[int, list[Any]], config: StabilityConfig) -> list[Any]:
    return [dataclasses.replace(r, stability=merge_rounds(rounds[i], config)) if i in rounds else r
            for i, r in enumerate(results)]


def _record(history: list[tuple[int, dict[str, tuple[str | None, bool]]]], windows: list[tuple[int, int]],
            config: StabilityConfig) -> dict[str, Any]:
    """Per candidate: the repeats after which its verdict was decided in every later round (None: undecided)."""
    final = history[-1][1]
    record = {}
    for name, (view, done) in final.items():
        since = None
        for repeats, state in reversed(history):
            if not state[name][1]:
                break
            since = repeats
        record[name] = {"view": view, "repeats_to_decide": since if done else None}
    undecided = [name for name, (_, done) in final.items() if not done]
    return {"repeats": windows[-1][1], "rounds": len(windows), "windows": [list(w) for w in windows],
            "stopped": "max_repeats" if undecided else "decided", "equivalence_margin": config.equivalence_margin,
            "undecided": undecided, "decisions": record}


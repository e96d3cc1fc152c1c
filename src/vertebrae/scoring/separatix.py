"""Separatix adapter: the only module that imports ``separatix``.

Separatix diagnoses the apparent classifier complexity of a labeled feature space
(is a linear model enough, or does it take a smooth nonlinear, local/kernel or
high-capacity one?).  vertebrae runs it as an optional, purely descriptive stage:
on the same evaluated matrix the overlap score used (same L2 normalization, sparse
kept sparse), after that score exists and by default only when it passes a gate,
with an explicit target mode, seed and dense-memory budget, under a thread limit.
Its output never takes part in ranking.  See ``docs/separatix.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base.config import Config, check_bool, check_choice, check_float, check_int, check_seed
from .._base.sparse import is_sparse
from ..inputs.datasets import Groups, build_groups
from ..inputs.embeddings import evaluated_matrix, validate_embeddings
from ..errors import (ConfigTypeError, DensificationBudgetError, InputValidationError, ScoringWarning,
                      SerializationError)
from .._base.result_schema import ANY, NUMBER, MapOf, Switch, both, nullable, rule
from ..inputs.targets import MultiLabelTargets, RegressionTargets, SingleLabelTargets, Targets, build_targets
from .._base.threads import DEFAULT_THREAD_LIMIT, limited_threads
from .overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig
from .._base.call_warnings import call_warnings

#: separatix's own ``max_dense_mb`` default, used when no vertebrae budget is set.
SEPARATIX_DEFAULT_MAX_DENSE_MB = 512
_MIB = 2**20

#: vertebrae target type -> separatix ``target_mode`` (always passed explicitly: in
#: "auto" mode separatix reads a float target as one class per distinct value).
_TARGET_MODES = {"single_label": "singlelabel", "multi_label": "multilabel", "regression": "regression"}

#: Separatix's probe families (as listed in its single-label ``families`` evidence).
PROBE_FAMILIES = {"dummy": "dummy", "linear": "linear", "smooth_poly": "smooth_nonlinear",
                  "knn": "local_kernel", "kernel_approx": "local_kernel"}
_NONLINEAR_FAMILIES = ("smooth_nonlinear", "local_kernel")

#: Direction of every comparable probe metric separatix 0.1.1 reports.  Accuracy, F1,
#: Jaccard and R² families are larger-is-better; RMSE/MAE/loss families smaller-is-better.
#: Metrics not listed here (e.g. stability spreads) are reported but never compared.
METRIC_DIRECTIONS = {
    "balanced_accuracy": "higher", "accuracy": "higher", "macro_f1": "higher", "micro_f1": "higher",
    "samples_f1": "higher", "sample_jaccard": "higher", "subset_accuracy": "higher",
    "label_balanced_accuracy_macro": "higher", "r2_variance_weighted": "higher", "r2_uniform_average": "higher",
    "hamming_loss": "lower", "normalized_rmse_mean": "lower",
}

#: Numeric probe fields that describe the run, not the probe's quality.
_PROBE_BOOKKEEPING = frozenset({"runtime_seconds", "prediction_evidence_bytes", "estimated_expanded_feature_count",
                                "estimated_expanded_mb", "original_feature_count", "probe_degree", "stability_repeats"})

#: separatix's own input validation per target mode: which of its ValueErrors the targets cause (with and without
#: the groups) is asked of it, not read from its messages.
_VALIDATORS = {"singlelabel": "validate_inputs", "multilabel": "validate_multilabel_inputs",
               "regression": "validate_regression_inputs"}


@dataclasses.dataclass(frozen=True)
class SeparatixConfig(Config):
    """Settings of the optional Separatix diagnostic stage.

    The gate compares the overlap score with ``overlap_threshold`` (classification and
    multi-label OverlapIndex) or ``regression_overlap_threshold`` (ContinuousOverlapIndex).
    The regression default is lower because the continuous index is measured against a
    permutation null and saturates far below 1: on 400x16 data we measured about 0.01 for a
    pure-noise target, 0.17-0.19 for informative noisy or nonlinear targets, and 0.34 for a
    nearly noiseless linear one, so 0.10 separates "no signal" from "some signal".
    ``run_when="always"`` ignores the gate.  ``max_dense_bytes=None`` falls back to
    ``OverlapScoringConfig.max_dense_bytes`` (see :meth:`dense_budget`).
    """

    enabled: bool = True
    run_when: str = "gate"
    overlap_threshold: float = 0.80
    regression_overlap_threshold: float = 0.10
    budget: str = "fast"
    densify_policy: str = "warn_and_sample"
    max_dense_bytes: int | None = None
    mlp_probes: bool = False
    random_state: int = 0
    thread_limit: int | None = DEFAULT_THREAD_LIMIT

    #: Diagnoses are bitwise identical across BLAS thread counts (tests/test_key_completeness.py).
    speed_only = ("thread_limit",)

    def _validate(self) -> None:
        name = type(self).__name__
        self._set("enabled", check_bool(name, "enabled", self.enabled))
        check_choice(name, "run_when", self.run_when, ("gate", "always"))
        self._set("overlap_threshold", check_float(
            name, "overlap_threshold", self.overlap_threshold, low=0.0, high=1.0))
        self._set("regression_overlap_threshold", check_float(
            name, "regression_overlap_threshold", self.regression_overlap_threshold, low=0.0, high=1.0))
        check_choice(name, "budget", self.budget, ("fast", "standard", "extended"))
        check_choice(name, "densify_policy", self.densify_policy, ("warn_and_sample", "skip", "fail"))
        self._set("max_dense_bytes", check_int(
            name, "max_dense_bytes", self.max_dense_bytes, minimum=1, allow_none=True))
        self._set("mlp_probes", check_bool(name, "mlp_probes", self.mlp_probes))
        self._set("random_state", check_seed(name, "random_state", self.random_state, allow_none=False))
        self._set("thread_limit", check_int(name, "thread_limit", self.thread_limit, minimum=1, allow_none=True))

    def dense_budget(self, overlap_config: OverlapScoringConfig | None = None) -> tuple[int, str]:
        """``(max_dense_mb, source)`` handed to separatix, which budgets in whole MiB.

        The bytes come from this config, else from ``overlap_config.max_dense_bytes``;
        they are floored to whole MiB, at least 1.  With neither set, separatix's own
        default (512 MiB) applies.  ``source`` names where the value came from.
        """
        if self.max_dense_bytes is not None:
            return max(1, self.max_dense_bytes // _MIB), "SeparatixConfig.max_dense_bytes"
        if overlap_config is not None and overlap_config.max_dense_bytes is not None:
            return max(1, overlap_config.max_dense_bytes // _MIB), "OverlapScoringConfig.max_dense_bytes"
        return SEPARATIX_DEFAULT_MAX_DENSE_MB, "separatix default"

    def effective_max_dense_mb(self, overlap_config: OverlapScoringConfig | None = None) -> int:
        """The whole-MiB budget passed to separatix (see :meth:`dense_budget`)."""
        return self.dense_budget(overlap_config)[0]


_COMPARISON_SCHEMA = {"paired": nullable({"lower_95": NUMBER, "upper_95": NUMBER}), "direction": str,
                      "linear_score": nullable(NUMBER), "nonlinear_probe": ANY, "nonlinear_score": nullable(NUMBER),
                      "favored_family": ANY, "nonlinear_improvement": nullable(NUMBER), "confidence": ANY}
_PROBE_SUMMARY_SCHEMA = {
    "probe_metric": nullable(str), "best_probe": ANY, "probe_score": nullable(NUMBER), "metric_source": ANY,
    "linear_vs_nonlinear": MapOf(nullable(_COMPARISON_SCHEMA)), "recommendation_confidence": ANY,
    "declared_primary_metrics": [str], "probes": MapOf({"family": ANY, "metrics": dict, "skipped_reason": ANY}),
    "evaluation": dict, "sampling": nullable(dict), "skip_reasons": dict,
    "grouping": both(dict, rule(lambda g: not g.get("provided") or isinstance(g.get("skipped"), list),
                                "grouping.skipped must be a list when groups were provided"))}
#: What reports read of a serialized SeparatixResult (checked on load; see vertebrae._base.result_schema): a completed
#: diagnostic is rendered in full, a gated or skipped one by its reason.
SCHEMA = both({"probe_summary": dict, "warnings": [str], "scores": MapOf(ANY)},
              Switch("status", {"completed": {"decision_path": list, "probe_summary": _PROBE_SUMMARY_SCHEMA,
                                              "config": {"densify_policy": ANY, "budget": ANY},
                                              "skipped_diagnostics": [{"name": ANY}],
                                              "densification_events": [dict]},
                                "gated": {}, "skipped": {}}))


@dataclasses.dataclass
class SeparatixResult:
    """What one Separatix stage produced for one embedding matrix.

    ``status`` is ``"completed"`` (separatix ran; ``report`` holds its complete terse
    report as plain JSON data), ``"gated"`` (the overlap gate did not pass; separatix
    was not called) or ``"skipped"`` (disabled, or a grouped run lacked cross-group
    class support).  ``reason`` explains every non-completed status and any blocking
    skip inside a completed run.
    """

    status: str
    reason: str | None
    target_mode: str
    gate: dict[str, Any]
    recommendation: str | None
    confidence: str | None
    decision_path: list[str]
    scores: dict[str, float | None]
    preprocessing: dict[str, Any]
    densification_events: list[dict[str, Any]]
    skipped_diagnostics: list[dict[str, Any]]
    warnings: list[str]
    report: dict[str, Any] | None
    probe_summary: dict[str, Any]
    runtime_seconds: float
    effective_max_dense_mb: int
    dense_budget_source: str
    config: SeparatixConfig

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["config"] = self.config.fingerprint()  # the stored form: no speed-only field
        return json.loads(json.dumps(data, allow_nan=False))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SeparatixResult":
        """Rebuild a result; every field is required (``probe_summary`` is never rebuilt from ``report``)."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in data]
        unknown = sorted(set(data) - set(names))
        if missing or unknown:
            raise SerializationError(f"SeparatixResult: missing field(s) {missing}, unknown field(s) {unknown}; "
                                     "results written before the current schema are not supported; "
                                     "re-run the diagnostic")
        return cls(**{**data, "config": SeparatixConfig.from_dict(data["config"])})


class SeparatixScorer:
    """Runs the Separatix diagnostic on evaluated embeddings, gated by the overlap score.

    ``overlap_config`` / ``continuous_config`` are the configs overlap scoring used: their
    ``normalize_embeddings`` decides the L2 normalization (classification / regression),
    and ``overlap_config.max_dense_bytes`` is the fallback dense budget.
    """

    def __init__(self, config: SeparatixConfig | None = None, overlap_config: OverlapScoringConfig | None = None,
                 continuous_config: ContinuousOverlapScoringConfig | None = None) -> None:
        self.config = config or SeparatixConfig()
        self.overlap_config = overlap_config or OverlapScoringConfig()
        self.continuous_config = continuous_config or ContinuousOverlapScoringConfig()
        for argument, value, kind in (("config", self.config, SeparatixConfig),
                                      ("overlap_config", self.overlap_config, OverlapScoringConfig),
                                      ("continuous_config", self.continuous_config, ContinuousOverlapScoringConfig)):
            if not isinstance(value, kind):
                raise ConfigTypeError(f"{argument} must be a {kind.__name__}, got {type(value).__name__}")

    def diagnose(self, embeddings: Any, targets: Targets | Any, *, overlap_score: float, groups: Any = None,
                 target_type: str | None = None, source: str = "") -> SeparatixResult:
        """Diagnose ``embeddings`` (n x d, dense or sparse) against ``targets``.

        ``overlap_score`` is the overlap score of the same embeddings (it drives the gate);
        ``groups`` is a :class:`~vertebrae.inputs.datasets.Groups` or one group id per row;
        ``source`` names the extractor in messages.  Raises
        :class:`~vertebrae.errors.DensificationBudgetError` when ``densify_policy="fail"``
        and a dense-only step does not fit the budget.
        """
        start = time.perf_counter()
        cfg = self.config
        X = validate_embeddings(embeddings, source=source)
        if not isinstance(targets, (SingleLabelTargets, MultiLabelTargets, RegressionTargets)):
            targets = build_targets(targets, target_type=target_type, argument="targets")
        if targets.n_samples != X.shape[0]:
            raise InputValidationError(f"targets has {targets.n_samples} rows but embeddings has {X.shape[0]}; "
                                       "give exactly one target per embedding row")
        group_keys = _group_keys(groups, X.shape[0])
        mode = _TARGET_MODES[targets.target_type]
        regression = isinstance(targets, RegressionTargets)
        gate = _gate(cfg, _check_overlap_score(overlap_score), regression)
        max_dense_mb, budget_source = cfg.dense_budget(self.overlap_config)
        normalize = (self.continuous_config if regression else self.overlap_config).normalize_embeddings
        preprocessing = {"normalize_embeddings": normalize, "input_sparse": is_sparse(X),
                         "input_dtype": str(X.dtype), "n_samples": int(X.shape[0]), "n_features": int(X.shape[1]),
                         "zero_rows": None, "separatix": None}
        notes = _budget_notes(cfg, self.overlap_config, max_dense_mb)

        def not_run(status: str, reason: str, skipped: list[dict[str, Any]] | None = None) -> SeparatixResult:
            return SeparatixResult(
                status=status, reason=reason, target_mode=mode, gate=gate, recommendation=None, confidence=None,
                decision_path=[], scores={}, preprocessing=preprocessing, densification_events=[],
                skipped_diagnostics=skipped or [], warnings=notes, report=None,
                probe_summary=unavailable_probe_summary(mode, reason), runtime_seconds=time.perf_counter() - start,
                effective_max_dense_mb=max_dense_mb, dense_budget_source=budget_source, config=cfg)

        if not cfg.enabled:
            return not_run("skipped", "SeparatixConfig.enabled is False")
        if cfg.run_when == "gate" and not gate["passed"]:
            return not_run("gated", f"overlap score {gate['overlap_score']:.4f} is below {gate['threshold_field']}="
                                    f"{gate['threshold']}; Separatix runs only past the gate "
                                    "(set run_when='always' to run it anyway)")
        Xf, zero_rows = evaluated_matrix(X, normalize)
        preprocessing["zero_rows"] = int(zero_rows.size)
        if zero_rows.size and normalize:
            notes.append(f"{zero_rows.size} all-zero embedding row(s) cannot be L2-normalized and stay at the origin")
        from separatix import diagnose as separatix_diagnose
        from separatix.exceptions import DensificationError

        y = _separatix_y(targets)
        try:
            with limited_threads(cfg.thread_limit), call_warnings() as caught:
                report = separatix_diagnose(
                    Xf, y, groups=group_keys, return_report=True, target_mode=mode,
                    budget=cfg.budget, densify_policy=cfg.densify_policy, max_dense_mb=max_dense_mb,
                    random_state=cfg.random_state, mlp_probes=cfg.mlp_probes)
        except DensificationError as exc:
            raise DensificationBudgetError(
                f"Separatix{f' on {source}' if source else ''} needs a dense copy that exceeds the dense budget of "
                f"{max_dense_mb} MiB ({budget_source}) under densify_policy='fail' ({exc}). Raise "
                "SeparatixConfig.max_dense_bytes, or use densify_policy='warn_and_sample' (sample within the budget) "
                "or 'skip' (record the dense-only diagnostics as unavailable).") from exc
        except ValueError as exc:
            refusal = _input_refusal(Xf, y, mode)
            if refusal is not None:  # targets valid for the overlap score that separatix cannot diagnose
                reason = f"separatix cannot diagnose these targets: {refusal} Recorded as skipped."
            elif group_keys is not None and _input_refusal(Xf, y, mode, group_keys) is not None:
                reason = (f"grouped diagnostic lacks cross-group class support: {exc} Recorded as skipped; vertebrae "
                          "never retries a grouped diagnostic with a row-level split.")
            else:
                raise
            skip = {"name": "separatix_diagnostic", "reason": str(exc), "severity": "blocking"}
            return not_run("skipped", reason, [skip])
        captured = {f"separatix: {w.category.__name__}: {w.message}": str(w.message) for w in caught}
        for text in captured:  # named by ``source`` (the extractor), which the recorded notes leave out
            warnings.warn(f"{source}: {text}" if source else text, ScoringWarning, stacklevel=2)
        data = json.loads(json.dumps(report.to_dict(terse=True), allow_nan=False))
        preprocessing["separatix"] = data["preprocessing"]
        skipped = [_with_group_context(entry, data["grouping"]) for entry in data["skipped_diagnostics"]]
        blocking = [f"{s['name']}: {s['reason']}" for s in skipped if s.get("severity") == "blocking"]
        recorded = notes + data["warnings"]  # a warning separatix both reports and raises is recorded once
        recorded += [text for text, message in captured.items() if message not in recorded]
        return SeparatixResult(
            status="completed", reason="; ".join(blocking) or None, target_mode=mode, gate=gate,
            recommendation=data["recommendation"], confidence=data["confidence"], decision_path=data["decision_path"],
            scores=data["scores"], preprocessing=preprocessing, densification_events=data["densification_events"],
            skipped_diagnostics=skipped, warnings=recorded, report=data,
            probe_summary=build_probe_summary(data, mode), runtime_seconds=time.perf_counter() - start,
            effective_max_dense_mb=max_dense_mb, dense_budget_source=budget_source, config=cfg)


# ----------------------------------------------------------------------- input helpers
def _input_refusal(X: Any, y: Any, mode: str, groups: Any = None) -> str | None:
    """The message of separatix's own input validation of ``mode`` when it refuses (X, y, groups), else None."""
    from separatix import validation

    try:
        getattr(validation, _VALIDATORS[mode])(X, y, groups=groups)
    except ValueError as exc:
        return str(exc)
    return None


def _separatix_y(targets: Targets) -> Any:
    """Semantic key strings (single-label), the CSR 0/1 indicator (multi-label), float64 (n, T) values."""
    if isinstance(targets, SingleLabelTargets):
        return np.asarray(targets.keys, dtype=str)
    if isinstance(targets, MultiLabelTargets):
        return targets.indicator
    return targets.values


def _check_overlap_score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)) \
            or not 0.0 <= float(value) <= 1.0:
        raise InputValidationError(f"overlap_score must be a finite number in [0, 1] (the overlap score of the same "
                                   f"embeddings), got {value!r}")
    return float(value)


def _group_keys(groups: Any, n_samples: int) -> np.ndarray | None:
    """Groups as semantic-key strings (so ``1``, ``"1"`` and ``True`` stay distinct groups)."""
    if groups is None:
        return None
    if not isinstance(groups, Groups):
        groups = build_groups(groups, n_samples)
    elif groups.keys.shape[0] != n_samples:
        raise InputValidationError(f"groups has {groups.keys.shape[0]} entries but embeddings has {n_samples} rows; "
                                   "give one group id per row")
    return np.asarray(groups.keys, dtype=str)


def _gate(cfg: SeparatixConfig, overlap_score: float, regression: bool) -> dict[str, Any]:
    field = "regression_overlap_threshold" if regression else "overlap_threshold"
    threshold = getattr(cfg, field)
    return {"overlap_score": overlap_score, "threshold": threshold, "threshold_field": f"SeparatixConfig.{field}",
            "passed": overlap_score >= threshold, "run_when": cfg.run_when}


def _budget_notes(cfg: SeparatixConfig, overlap_config: OverlapScoringConfig, max_dense_mb: int) -> list[str]:
    """Say so when a budget under 1 MiB had to be rounded up to separatix's whole-MiB granularity."""
    given = cfg.max_dense_bytes if cfg.max_dense_bytes is not None else overlap_config.max_dense_bytes
    if given is not None and given < _MIB:
        return [f"max_dense_bytes={given} is below 1 MiB; Separatix budgets in whole MiB, "
                f"so {max_dense_mb} MiB is used"]
    return []


def _with_group_context(entry: dict[str, Any], grouping: dict[str, Any]) -> dict[str, Any]:
    """Name the classes behind separatix's ``unsupported_group_classes`` skip (it only gives a count)."""
    if entry.get("name") != "unsupported_group_classes":
        return entry
    return {**entry, "classes": grouping.get("skipped_singlelabel_classes", [])}


# ----------------------------------------------------------------------- probe summary
def unavailable_probe_summary(target_mode: str, reason: str) -> dict[str, Any]:
    """The probe summary of a run that produced no report (same keys, empty values)."""
    return {"available": False, "unavailable_reason": reason, "target_mode": target_mode, "best_probe": None,
            "probe_metric": None, "probe_score": None, "metric_source": None, "declared_primary_metrics": [],
            "best_by_metric": {}, "probes": {}, "linear_vs_nonlinear": {}, "evaluation": {}, "sampling": None,
            "grouping": {}, "skip_reasons": {}, "recommendation_confidence": None, "mlp": {}}


def build_probe_summary(report: Mapping[str, Any], target_mode: str) -> dict[str, Any]:
    """Normalize the probe evidence already in a Separatix report; no model is fitted.

    Rules:

    * ``probe_metric`` is the first of the ``primary_metrics`` Separatix declares in its
      ``baseline`` evidence (multi-label: micro F1, macro F1, sample Jaccard; regression:
      variance-weighted R², uniform R²), and ``best_probe`` / ``probe_score`` are its
      ``best_by_metric`` entry.  Single-label reports declare no list; their baseline is
      balanced accuracy (``best_probe`` / ``best_probe_score``), used as the fallback.
      Multi-label and regression reports without a declaration leave all three None:
      no accuracy and no undeclared metric is ever picked.
    * ``probes`` holds each probe's family and every scalar metric it reports.
    * ``linear_vs_nonlinear`` compares, per metric with a known direction
      (:data:`METRIC_DIRECTIONS`), the linear probe with the best nonlinear one in that
      direction; ``nonlinear_improvement`` is positive when the nonlinear probe is better.
      Its ``confidence`` comes from Separatix's paired bootstrap interval of that pair:
      ``"clear"`` when the 95% interval excludes 0, ``"uncertain"`` when it does not,
      ``"unavailable"`` without one.  It is separate from ``recommendation_confidence``.
    * MLP probes stay in ``mlp`` and never enter the baseline fields above.
    """
    metrics = report["metrics"]
    probes: dict[str, dict[str, Any]] = metrics.get("probes") or {}
    baseline = metrics.get("baseline") or {}
    declared = list(baseline.get("primary_metrics") or [])
    if declared:
        metric, source = declared[0], "declared_primary"
        best_by_metric = dict(baseline.get("best_by_metric") or {})
    elif target_mode == "singlelabel":
        metric, source = "balanced_accuracy", "singlelabel_balanced_accuracy_fallback"
        best = baseline.get("best_probe")
        best_by_metric = {metric: {"probe": best, "score": baseline.get("best_probe_score")} if best else None}
    else:
        metric, source, best_by_metric = None, None, {}
    best = best_by_metric.get(metric) if metric else None
    if not best or best.get("score") is None:
        metric = source = best = None
    evaluation = metrics.get("probe_evaluation") or {}
    paired = metrics.get("paired_probe_comparisons") or {}
    grouping = report.get("grouping") or {}
    supported = grouping.get("supported_singlelabel_classes", grouping.get("supported_multilabel_labels"))
    skipped = grouping.get("skipped_singlelabel_classes", grouping.get("skipped_multilabel_labels"))
    mlp = metrics.get("mlp_probes") or {}
    return {
        "available": True, "unavailable_reason": None, "target_mode": target_mode,
        "best_probe": best["probe"] if best else None, "probe_metric": metric,
        "probe_score": best["score"] if best else None, "metric_source": source,
        "declared_primary_metrics": declared, "best_by_metric": best_by_metric,
        "probes": {name: {"family": PROBE_FAMILIES.get(name, "other"),
                          "evaluation_mode": entry.get("evaluation_mode"),
                          "metrics": _scalar_metrics(entry), "skipped_reason": entry.get("skipped_reason")}
                   for name, entry in probes.items()},
        "linear_vs_nonlinear": _linear_vs_nonlinear(probes, paired),
        "evaluation": {"cv_method": evaluation.get("cv_method"), "n_splits": evaluation.get("n_splits"),
                       "group_aware": evaluation.get("group_aware"), "n_samples": evaluation.get("n_samples"),
                       "alignment_status": evaluation.get("alignment_status"),
                       "evaluation_mode": grouping.get("effective_supervised_evaluation_mode"),
                       "paired_comparison_method": paired.get("method"),
                       "paired_comparison_status": paired.get("status")},
        "sampling": (report.get("sampling") or {}).get("probe"),
        "grouping": {"provided": grouping.get("provided"), "group_count": grouping.get("group_count"),
                     "group_size_summary": grouping.get("group_size_summary"),
                     "supported_count": None if supported is None else len(supported),
                     "skipped_count": None if skipped is None else len(skipped), "skipped": skipped or []},
        "skip_reasons": {name: entry["skipped_reason"] for name, entry in probes.items()
                         if entry.get("skipped_reason")},
        "recommendation_confidence": report.get("confidence"),
        "mlp": {key: mlp.get(key) for key in ("status", "reason", "trigger", "recommendation_override",
                                              "override_reason", "best_architecture", "metrics_clearing_override",
                                              "pairwise_comparisons", "pairwise_comparison_audit")},
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _scalar_metrics(entry: Mapping[str, Any]) -> dict[str, float]:
    return {k: v for k, v in entry.items() if _is_number(v) and k not in _PROBE_BOOKKEEPING}


def _linear_vs_nonlinear(probes: Mapping[str, Mapping[str, Any]], paired: Mapping[str, Any]) -> dict[str, Any]:
    linear = probes.get("linear") or {}
    out: dict[str, Any] = {}
    for metric, direction in METRIC_DIRECTIONS.items():
        if not _is_number(linear.get(metric)):
            continue
        candidates = [(name, entry[metric]) for name, entry in probes.items()
                      if PROBE_FAMILIES.get(name) in _NONLINEAR_FAMILIES and _is_number(entry.get(metric))]
        if not candidates:
            continue
        sign = 1.0 if direction == "higher" else -1.0
        name, value = max(candidates, key=lambda item: sign * item[1])
        improvement = sign * (value - linear[metric])
        interval = _paired_interval(paired, name, metric, sign)
        if interval is None:
            confidence = "unavailable"
        else:
            confidence = "clear" if interval["lower_95"] > 0 or interval["upper_95"] < 0 else "uncertain"
        out[metric] = {
            "direction": f"{direction}_is_better", "linear_probe": "linear", "linear_score": linear[metric],
            "nonlinear_probe": name, "nonlinear_family": PROBE_FAMILIES[name], "nonlinear_score": value,
            "nonlinear_improvement": improvement,
            "favored_family": "nonlinear" if improvement > 0 else "linear" if improvement < 0 else "tie",
            "paired": interval, "confidence": confidence,
        }
    return out


def _paired_interval(paired: Mapping[str, Any], probe: str, metric: str, sign: float) -> dict[str, Any] | None:
    """Separatix's paired bootstrap delta of linear vs ``probe``, oriented as nonlinear advantage.

    Separatix stores ``first - second`` under ``"first__vs__second"``.
    """
    comparisons = paired.get("comparisons") or {}
    for key, flip in ((f"linear__vs__{probe}", -1.0), (f"{probe}__vs__linear", 1.0)):
        stats = ((comparisons.get(key) or {}).get("metrics") or {}).get(metric)
        if stats is None:
            continue
        values = [stats.get("point_delta"), stats.get("lower_95"), stats.get("upper_95")]
        if not all(_is_number(v) for v in values):
            return None
        point, low, high = (sign * flip * v for v in values)
        return {"method": paired.get("method"), "point_delta": point, "lower_95": min(low, high),
                "upper_95": max(low, high), "resamples_used": stats.get("resamples_used")}
    return None

"""Custom embedding metrics: the metric protocol, the built-in wrappers and the metrics stage.

A metric scores the same evaluated embedding matrix that OverlapIndex scores and
returns a small payload (one finite ``score`` plus optional JSON-safe extras).  The
built-in overlap metric always runs in the score stage; every other metric runs in
the ``metrics`` analysis stage through :func:`run_metrics`, which owns the label
boundary (categorical labels and groups cross it as marked semantic-key strings) and
the failure rule (a failing metric is recorded as an invalid aggregate, the run
goes on).  The contract is spelled out in docs/metrics.md.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import numbers
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from .._base.config import check_bool
from .._base.sparse import is_sparse, sparse_module
from .._base.user_modules import import_user_module
from ..errors import ConfigError, ConfigTypeError, InputTypeError, MetricError, SerializationError
from .._base.fingerprint import callable_identity, check_cache_identity, identified
from ..inputs.labels import LabelCatalog, mark
from .._base import json_codec
from ..inputs.targets import TARGET_TYPES, MultiLabelTargets, RegressionTargets, Targets
from .metric_result import OVERLAP_METRIC, MetricResult
from .overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig

#: Keys a metric payload may contain; anything else is a contract violation.
PAYLOAD_KEYS = ("score", "aggregate_valid", "diagnostics", "warnings", "metadata")
#: Keyword arguments vertebrae passes to every metric (``params`` may not reuse them).
CALL_ARGUMENTS = ("target_metadata", "groups", "seed")
#: Metric names become ``metric.<name>`` columns and CLI ``PATH:NAME`` suffixes: no spaces or colons.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*")
_METRIC_ATTRIBUTES = ("name", "higher_is_better", "aggregate_valid", "supported_target_types", "identity")


@runtime_checkable
class Metric(Protocol):
    """What vertebrae needs from a custom embedding metric.

    ``aggregate_valid=False`` declares a descriptive metric: it is computed and
    reported but never ranked (and cannot be the primary metric).  A single call can
    also return ``aggregate_valid: False`` to mark one extractor's score invalid.
    ``identity()`` is a JSON-safe description of everything that changes the score;
    it keys the metrics artifact.
    """

    name: str
    higher_is_better: bool
    aggregate_valid: bool
    supported_target_types: tuple[str, ...]

    def identity(self) -> dict[str, Any]: ...

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> Mapping[str, Any]: ...


def check_metric_name(name: Any, owner: str) -> str:
    """Names become columns and CLI suffixes, and ``overlap`` belongs to the built-in metric."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{owner}: metric name must be a non-empty string of letters, digits and _ . @ - "
                          f"(no spaces or colons), got {name!r}")
    if name == OVERLAP_METRIC:
        raise ConfigError(f"{owner}: the metric name {OVERLAP_METRIC!r} is reserved for the built-in OverlapIndex "
                          "metric; configure it with OverlapMetric(config=...) and give your metric another name")
    return name


def _callable_path(fn: Any) -> str:
    """``module:qualname`` of a function, or of the type of a callable object."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', '?')}:{target.__qualname__}"


#: How vertebrae calls a metric, as error messages show it.
CALL_SIGNATURE = "fn(embeddings, labels, *, target_metadata=None, groups=None, seed=None, **params)"


def check_call_signature(fn: Any, name: str, params: Mapping[str, Any] | None = None) -> None:
    """Fail before any run when ``fn`` cannot accept the arguments :func:`run_metrics` passes.

    Callables without an introspectable signature (some builtins) are accepted: their
    failure is still recorded per extractor by the metrics stage.
    """
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None, **{argument: None for argument in CALL_ARGUMENTS}, **dict(params or {}))
    except TypeError as exc:
        raise InputTypeError(f"metric {name!r} ({_callable_path(fn)}{signature}) cannot be called the way vertebrae "
                             f"calls metrics: {exc}; it needs the signature {CALL_SIGNATURE} and must return "
                             "{'score': float, ...}; wrap other functions (e.g. sklearn.metrics scores, which take "
                             "y_true, y_pred) in a function with that signature") from None


def _json_safe(value: Any, what: str, error: type[Exception] = MetricError) -> Any:
    """``value`` as it will read back from a result JSON, or ``error`` naming ``what``."""
    try:
        encoded = json_codec.encode(value)
        json.dumps(encoded, allow_nan=False)
    except (SerializationError, TypeError, ValueError) as exc:
        raise error(f"{what} is not JSON-safe ({exc}); use numbers, strings, lists and dicts") from None
    return json_codec.decode(encoded)


# --------------------------------------------------------------------------- metrics
@dataclasses.dataclass(frozen=True)
class OverlapMetric:
    """The built-in OverlapIndex metric, listed in ``metrics=`` to set its configuration.

    It is the same setting as ``Benchmark(scoring_config=..., continuous_config=...)``;
    giving both with different values is an error.  Overlap always runs, listed or not.
    """

    config: OverlapScoringConfig | None = None
    continuous_config: ContinuousOverlapScoringConfig | None = None
    name: ClassVar[str] = OVERLAP_METRIC
    higher_is_better: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.config is not None and not isinstance(self.config, OverlapScoringConfig):
            raise ConfigTypeError(f"OverlapMetric.config must be an OverlapScoringConfig, got {type(self.config).__name__}")
        continuous = self.continuous_config
        if continuous is not None and not isinstance(continuous, ContinuousOverlapScoringConfig):
            raise ConfigTypeError("OverlapMetric.continuous_config must be a ContinuousOverlapScoringConfig, got "
                              f"{type(continuous).__name__}")


class CallableMetric:
    """A plain function as a metric.

    ``fn(embeddings, labels, *, target_metadata=None, groups=None, seed=None, **params)``
    returns ``{"score": float, "diagnostics"?: {...}, "warnings"?: [...], "metadata"?: {...},
    "aggregate_valid"?: bool}``.  ``params`` (JSON-safe) are passed as keyword arguments
    and, with the name and the function's ``module:qualname``, identify the metric.  Its
    artifact key also hashes the function's code: a module-level function by its source;
    anything else only by a declared ``cache_identity`` (without one, the metrics are
    never reused across runs).
    """

    supported_target_types: tuple[str, ...] = TARGET_TYPES

    def __init__(self, name: str, fn: Callable[..., Mapping[str, Any]], *, higher_is_better: bool = True,
                 aggregate_valid: bool = True, params: Mapping[str, Any] | None = None,
                 cache_identity: str | None = None) -> None:
        self.name = check_metric_name(name, "CallableMetric")
        if not callable(fn) or isinstance(fn, type):
            raise InputTypeError(f"CallableMetric {name!r}: fn must be a function (or callable object), got "
                                 f"{fn!r:.80}")
        self.fn = fn
        self.higher_is_better = check_bool(f"CallableMetric {name!r}", "higher_is_better", higher_is_better)
        self.aggregate_valid = check_bool(f"CallableMetric {name!r}", "aggregate_valid", aggregate_valid)
        if params is not None and not isinstance(params, Mapping):
            raise ConfigTypeError(f"CallableMetric {name!r}: params must be a mapping of keyword arguments, got "
                                  f"{params!r:.80}")
        params = dict(params or {})
        clash = sorted(set(params) & {*CALL_ARGUMENTS, "embeddings", "labels"})
        if clash or not all(isinstance(k, str) for k in params):
            raise ConfigError(f"CallableMetric {name!r}: params must have string keys other than "
                              f"{['embeddings', 'labels', *CALL_ARGUMENTS]}, got {sorted(map(repr, params))}")
        self.params = _json_safe(params, f"CallableMetric {name!r} params", ConfigError)
        check_call_signature(fn, self.name, self.params)
        self.cache_identity = check_cache_identity(f"CallableMetric {name!r}", cache_identity)

    @property
    def cache_eligible(self) -> bool:
        """A module-level function is known by its source; anything else only by a declared ``cache_identity``."""
        return identified(self.code_identity())

    def code_identity(self) -> Any:
        """What identifies the function's code in the metrics key (see :func:`~vertebrae._base.fingerprint.canonical`)."""
        return callable_identity(self.fn, self.cache_identity)

    def identity(self) -> dict[str, Any]:
        identity = {"type": "callable", "name": self.name, "callable": _callable_path(self.fn), "params": self.params,
                    "higher_is_better": self.higher_is_better, "aggregate_valid": self.aggregate_valid}
        return identity if self.cache_identity is None else {**identity, "cache_identity": self.cache_identity}

    def __call__(self, embeddings: Any, labels: Any, *, target_metadata: Mapping[str, Any] | None = None,
                 groups: Any = None, seed: int | None = None) -> Mapping[str, Any]:
        return self.fn(embeddings, labels, target_metadata=target_metadata, groups=groups, seed=seed, **self.params)

    def __repr__(self) -> str:
        return f"CallableMetric({self.name!r}, {_callable_path(self.fn)})"


def load_metric(path: str, name: str | None = None, higher_is_better: bool | None = None, *,
                aggregate_valid: bool | None = None, params: Mapping[str, Any] | None = None) -> Metric:
    """Load ``"package.module:function"`` (what the CLI and distributed runs use).

    A function is wrapped in :class:`CallableMetric` (``name`` defaults to the
    function's name, ``higher_is_better`` and ``aggregate_valid`` to True).  An
    attribute that already is a metric object (e.g. ``retrieval = LabelRetrievalMetric(...)``)
    is returned as is: its own settings apply, so the arguments may only repeat them.
    A metric class (e.g. ``"vertebrae:KNNMetric"``) is built with ``params`` as its
    keyword arguments (and ``name`` when given); its direction and validity are its own.
    """
    module_name, _, attribute = path.partition(":") if isinstance(path, str) else ("", "", "")
    parts = module_name.split(".") + attribute.split(".")
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(f"metric path {path!r} is malformed; write 'package.module:function', "
                          "e.g. 'my_project.metrics:label_aware_metric'")
    obj: Any = import_user_module(module_name, f"metric path {path!r}")
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"metric path {path!r}: {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if _is_metric_class(obj):
        obj = _built_metric(path, obj, name, params)
        name = params = None  # they built it; the check below may only repeat the class's own settings
    if _is_metric(obj):
        for field, given in (("name", name), ("higher_is_better", higher_is_better),
                             ("aggregate_valid", aggregate_valid), ("params", params)):
            if given is not None and given != getattr(obj, field, None):
                raise ConfigError(f"metric path {path!r} names a metric object, whose {field} cannot be overridden "
                                  f"(got {field}={given!r}); change it where the object is defined")
        return obj
    if isinstance(obj, type) or not callable(obj):
        raise InputTypeError(f"metric path {path!r} names a {type(obj).__name__}, not a metric function, metric "
                             "object or metric class; point it at fn(embeddings, labels, *, target_metadata, groups, "
                             "seed)")
    return CallableMetric(name or attribute.rsplit(".", 1)[-1], obj,
                          higher_is_better=True if higher_is_better is None else higher_is_better,
                          aggregate_valid=True if aggregate_valid is None else aggregate_valid, params=params)


#: Keys of one ``metrics`` entry in a run configuration (the arguments of :func:`load_metric`).
CONFIG_ENTRY_KEYS = ("path", "name", "higher_is_better", "aggregate_valid", "params")


def metrics_from_config(entries: Any) -> list[Metric]:
    """``metrics = [{path = "pkg.module:function", name = ..., higher_is_better = ..., params = {...}}]``."""
    if not isinstance(entries, list):
        raise ConfigTypeError('config metrics must be a list of tables such as [{path = "my_pkg.metrics:fn"}], got '
                          f"{type(entries).__name__}")
    loaded = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or "path" not in entry:
            raise ConfigError(f'config metrics[{i}] must be a table with path = "package.module:function", '
                              f"got {entry!r}")
        unknown = sorted(set(entry) - set(CONFIG_ENTRY_KEYS))
        if unknown:
            raise ConfigError(f"config metrics[{i}] has unknown key(s) {unknown}; allowed: {list(CONFIG_ENTRY_KEYS)}")
        loaded.append(load_metric(entry["path"], entry.get("name"), entry.get("higher_is_better"),
                                  aggregate_valid=entry.get("aggregate_valid"), params=entry.get("params")))
    return loaded


def _is_metric(obj: Any) -> bool:
    return not isinstance(obj, type) and callable(obj) and all(hasattr(obj, a) for a in _METRIC_ATTRIBUTES)


def _is_metric_class(obj: Any) -> bool:
    """A class whose instances are metrics, such as :class:`~vertebrae.KNNMetric` (its ``name`` is a field)."""
    return isinstance(obj, type) and all(hasattr(obj, a) for a in _METRIC_ATTRIBUTES)


def _built_metric(path: str, cls: type, name: str | None, params: Mapping[str, Any] | None) -> Any:
    """``cls(**params, name=name)``: the metric class of a path, configured by a run config's ``params``."""
    kwargs = dict(params or {})
    if name is not None:
        kwargs["name"] = name
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"metric path {path!r}: {cls.__name__} cannot be built with params {kwargs!r}: {exc}"
                          ) from None


# ---------------------------------------------------------------- benchmark settings
def resolve_metrics(metrics: Sequence[Any] | None, scoring_config: OverlapScoringConfig | None,
                    continuous_config: ContinuousOverlapScoringConfig | None, target_type: str
                    ) -> tuple[OverlapScoringConfig | None, ContinuousOverlapScoringConfig | None, tuple[Metric, ...]]:
    """Split ``Benchmark(metrics=...)`` into the overlap configs and the custom metrics.

    Fails before any extractor runs: unknown objects, duplicate or reserved names,
    conflicting overlap configs, metrics that do not support the target type.
    """
    if metrics is None:
        return scoring_config, continuous_config, ()
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, Sequence):
        raise InputTypeError("metrics must be a list such as [OverlapMetric(...), CallableMetric('name', fn)], got "
                             f"{type(metrics).__name__}")
    overlap_seen = False
    custom: dict[str, Metric] = {}
    for i, metric in enumerate(metrics):
        if isinstance(metric, OverlapMetric):
            if overlap_seen:
                raise ConfigError(f"metrics[{i}] is a second OverlapMetric; list the built-in overlap metric once")
            overlap_seen = True
            scoring_config = _merge_config("scoring_config", scoring_config, "config", metric.config)
            continuous_config = _merge_config("continuous_config", continuous_config, "continuous_config",
                                              metric.continuous_config)
            continue
        check_metric(metric, f"metrics[{i}]", target_type)
        if metric.name in custom:
            raise ConfigError(f"metrics has two metrics named {metric.name!r}; give every metric a unique name")
        custom[metric.name] = metric
    return scoring_config, continuous_config, tuple(custom.values())


def check_metric(metric: Any, where: str, target_type: str, remove: str = "remove it from metrics") -> Metric:
    """One metric object, checked before any run: the protocol, its name, flags, target type, identity and call."""
    if not _is_metric(metric):
        missing = [a for a in _METRIC_ATTRIBUTES if not hasattr(metric, a)]
        hint = "wrap a function as CallableMetric('name', fn)" if callable(metric) else "see vertebrae.Metric"
        raise InputTypeError(f"{where} ({type(metric).__name__}) is not a metric "
                             f"(missing {missing or 'a call'}); {hint}")
    name = check_metric_name(metric.name, where)
    for flag in ("higher_is_better", "aggregate_valid"):
        check_bool(f"metric {name!r}", flag, getattr(metric, flag))
    if target_type not in metric.supported_target_types:
        raise MetricError(f"metric {name!r} supports {list(metric.supported_target_types)} targets, but this "
                          f"dataset is {target_type}; it is not defined there, so {remove}")
    _json_safe(metric.identity(), f"metric {name!r} identity()", ConfigError)
    if not isinstance(metric, CallableMetric):  # a CallableMetric checked its function when it was built
        check_call_signature(metric, name)
    return metric


def _merge_config(argument: str, given: Any, field: str, listed: Any) -> Any:
    if listed is None or given is None or given == listed:
        return listed if listed is not None else given
    raise ConfigError(f"Benchmark got {argument}=... and OverlapMetric({field}=...) with different values; they set "
                      "the same built-in overlap config, so give it in one place")


def check_primary_metric(primary_metric: Any, metrics: Sequence[Metric]) -> str:
    """The primary metric must be configured and rankable."""
    by_name = {m.name: m for m in metrics}
    known = [OVERLAP_METRIC, *by_name]
    if primary_metric not in known:
        raise ConfigError(f"primary_metric {primary_metric!r} is not a configured metric; choose one of {known}")
    if primary_metric in by_name and not by_name[primary_metric].aggregate_valid:
        raise ConfigError(f"primary_metric {primary_metric!r} declares aggregate_valid=False (a descriptive metric "
                          "that is never ranked); pick a rankable metric as primary")
    return primary_metric


def metrics_fingerprint(metrics: Sequence[Metric]) -> dict[str, Any]:
    return {"metrics": [m.identity() for m in metrics]}


def metrics_key_fingerprint(metrics: Sequence[Metric]) -> dict[str, Any]:
    """What the metrics artifact key hashes: each identity (a CallableMetric's with its function's code), plus a
    per-position token for a metric whose identity cannot be trusted across runs, so two such metrics never share
    a key."""
    identities = []
    for i, metric in enumerate(metrics):
        identity = dict(metric.identity())
        if isinstance(metric, CallableMetric):
            identity["code"] = metric.code_identity()
        if not _metric_safe(metric, identity):
            identity["unsafe_identity_token"] = f"metric-{i}"
        identities.append(identity)
    return {"metrics": identities}


def metrics_cache_eligible(metrics: Sequence[Metric]) -> bool:
    return all(_metric_safe(m, m.identity()) for m in metrics)


def _metric_safe(metric: Metric, identity: Any) -> bool:
    """Trusted across runs: not declared ineligible, and nothing in its identity unidentified."""
    return bool(getattr(metric, "cache_eligible", True)) and identified(identity)


# ------------------------------------------------------------------ label boundary
def _marked(keys: Sequence[str]) -> np.ndarray:
    return np.array([mark(k) for k in keys], dtype=str)


def _catalog_payload(catalog: LabelCatalog) -> dict[str, Any]:
    """The catalog's ``to_dict`` (unmarked keys, for provenance) plus marked key -> display text."""
    return {**catalog.to_dict(), "display": {mark(k): catalog.display(k) for k in catalog.keys}}


def _read_only(matrix: Any) -> Any:
    """A view the metric cannot write through, so one metric cannot corrupt the next stage's input."""
    if is_sparse(matrix):
        parts = []
        for part in (matrix.data, matrix.indices, matrix.indptr):
            view = part.view()
            view.flags.writeable = False
            parts.append(view)
        return sparse_module().csr_matrix(tuple(parts), shape=matrix.shape, copy=False)
    view = matrix.view()
    view.flags.writeable = False
    return view


def metric_inputs(targets: Targets, groups: Any = None) -> tuple[Any, dict[str, Any], np.ndarray | None]:
    """``(labels, target_metadata, groups)`` exactly as every metric receives them.

    Single-label: a str array of marked keys.  Multi-label: the CSR 0/1 indicator,
    column j named ``target_metadata["label_names"][j]``.  Regression: float64 (n,)
    or (n, T).  Groups: a str array of marked keys, or None.
    """
    metadata: dict[str, Any] = {"target_type": targets.target_type}
    if isinstance(targets, RegressionTargets):
        labels = targets.values[:, 0] if targets.values.shape[1] == 1 else targets.values
        metadata.update(target_names=list(targets.target_names), label_catalog=None)
    elif isinstance(targets, MultiLabelTargets):
        labels = targets.indicator
        metadata.update(label_names=[mark(k) for k in targets.catalog.keys],
                        label_catalog=_catalog_payload(targets.catalog))
    else:
        labels = _marked(targets.keys.tolist())
        metadata["label_catalog"] = _catalog_payload(targets.catalog)
    metadata["group_catalog"] = None if groups is None else _catalog_payload(groups.catalog)
    group_keys = None if groups is None else _read_only(_marked(groups.keys.tolist()))
    return _read_only(labels), metadata, group_keys


def check_metrics_feasible(metrics: Sequence[Metric], targets: Targets, groups: Any,
                           arguments: Sequence[str] | None = None) -> None:
    """Settings that no embedding could satisfy on these targets (more folds than rows, a missing GPU, a k that
    reaches every row) fail before any extractor runs, not on every candidate in turn: each metric that declares
    ``preflight(labels, *, target_metadata, groups)`` is asked with the inputs it would be called with, and its
    MetricError becomes a ConfigError.  ``arguments``: where each metric was given (``metrics[0]``, ``referee``),
    so the error names the argument to change, as the other checks of ``Benchmark(...)`` do."""
    labels, target_metadata, group_keys = metric_inputs(targets, groups)
    for i, metric in enumerate(metrics):
        if hasattr(metric, "preflight"):
            try:
                metric.preflight(labels, target_metadata=copy.deepcopy(target_metadata), groups=group_keys)
            except MetricError as exc:
                message = str(exc) if arguments is None else argument_message(str(exc), metric, arguments[i])
                raise ConfigError(f"{message} (on this dataset, for every extractor; checked before any ran)") from None


def argument_message(message: str, metric: Metric, argument: str) -> str:
    """A metric's own message (``metric 'linear_probe': ...``, as a direct call says it) headed by the argument
    that configured the metric instead: ``metrics[0] (linear_probe): ...``."""
    own = f"metric {metric.name!r}: "
    return f"{argument} ({metric.name}): {message[len(own):] if message.startswith(own) else message}"


def metric_arguments(metrics: Sequence[Any] | None, resolved: Sequence[Metric]) -> tuple[str, ...]:
    """Where each of the ``resolved`` metrics (:func:`resolve_metrics`) stands in the ``metrics`` argument:
    ``metrics[i]`` with ``i`` the user's position (an OverlapMetric before it counts too)."""
    position = {id(metric): i for i, metric in enumerate(metrics or ())}
    return tuple(f"metrics[{position[id(metric)]}]" for metric in resolved)


# -------------------------------------------------------------------- metrics stage
def metric_result(metric: Metric, payload: Any, extractor: str | None = None) -> MetricResult:
    """Check one payload against the contract and normalize it into a MetricResult.

    Errors name the metric, and the extractor when given (the metrics stage gives none: its
    artifact is shared by every chain with the same embedding, see :class:`MetricsArtifact`).
    """
    where = f"metric {metric.name!r}" + ("" if extractor is None else f" on extractor {extractor!r}")
    if not isinstance(payload, Mapping):
        raise MetricError(f"{where} returned {type(payload).__name__}; a metric returns a mapping such as "
                          "{'score': 0.9, 'diagnostics': {...}}")
    unknown = sorted(map(repr, set(payload) - set(PAYLOAD_KEYS)))
    if unknown:
        raise MetricError(f"{where} returned unknown key(s) {', '.join(unknown)}; allowed keys are "
                          f"{list(PAYLOAD_KEYS)} (put extra values under 'diagnostics' or 'metadata')")
    score = payload.get("score")
    if isinstance(score, (bool, np.bool_)) or not isinstance(score, numbers.Real) or not math.isfinite(score):
        raise MetricError(f"{where} returned score={score!r}; 'score' must be one finite real number "
                          "(the only value eligible for ranking)")
    valid = payload.get("aggregate_valid", True)
    if not isinstance(valid, (bool, np.bool_)):
        raise MetricError(f"{where} returned aggregate_valid={valid!r}; it must be True or False")
    extras = {}
    for field in ("diagnostics", "metadata"):
        value = payload.get(field, {})
        if not isinstance(value, Mapping):
            raise MetricError(f"{where} returned {field} of type {type(value).__name__}; it must be a mapping")
        extras[field] = _json_safe(dict(value), f"{where}: {field}")
    notes = payload.get("warnings", [])
    if isinstance(notes, str) or not isinstance(notes, Sequence) or not all(isinstance(w, str) for w in notes):
        raise MetricError(f"{where} returned warnings={notes!r:.80}; it must be a list of strings")
    return MetricResult(name=metric.name, score=float(score), higher_is_better=metric.higher_is_better,
                        aggregate_valid=bool(metric.aggregate_valid and valid), warnings=list(notes), **extras)


def failed_result(metric: Metric, error: str) -> MetricResult:
    """A failing metric keeps the run going: its aggregate is invalid and ``error`` is recorded."""
    return MetricResult(name=metric.name, score=None, higher_is_better=metric.higher_is_better, aggregate_valid=False,
                        error=error)


@dataclasses.dataclass
class MetricsArtifact:
    """Output of the metrics stage for one embedding (its timings live beside it, not in it).

    It names no extractor: every chain with the same embedding shares it.  A failure is
    recorded neutrally and phrased with the extractor's name when a result is assembled
    (:func:`attributed_results`).
    """

    results: list[MetricResult] = dataclasses.field(default_factory=list)
    #: Names of the metrics whose payload broke the contract (their error is phrased with the extractor).
    violations: list[str] = dataclasses.field(default_factory=list)


def attributed_results(artifact: MetricsArtifact, extractor: str) -> list[MetricResult]:
    """The metrics of one result: failures phrased with ``extractor`` (the front door warns each note once, named)."""
    results = []
    for result in artifact.results:
        if result.error is not None:
            error = result.error
            if result.name in artifact.violations:  # "MetricError: metric 'm' <problem>" names the extractor too
                head = f"{MetricError.__name__}: metric {result.name!r}"
                error = f"{head} on extractor {extractor!r}{error[len(head):]}"
            note = (f"failed on extractor {extractor!r} ({error}); its aggregate is invalid, so this metric does not "
                    "rank that extractor")
            result = dataclasses.replace(result, error=error, warnings=[*result.warnings, note])
        results.append(result)
    return results


def metric_warnings(results: Sequence[MetricResult]) -> list[str]:
    """Every metric warning as a result lists it: ``metric '<name>': <warning>``."""
    return [f"metric {r.name!r}: {w}" for r in results for w in r.warnings]


def run_metrics(metrics: Sequence[Metric], embeddings: Any, targets: Targets, groups: Any, *, seed: int,
                timings: dict[str, float] | None = None) -> MetricsArtifact:
    """Run every custom metric on one evaluated embedding matrix.

    ``seed`` is the seed the overlap score used.  A metric that raises or breaks the
    payload contract becomes an invalid aggregate with ``error`` set (phrased with the
    extractor by :func:`attributed_results`; the benchmark warns it once, named by extractor).
    ``timings`` receives ``metric.<name>`` seconds per metric.
    """
    labels, target_metadata, group_keys = metric_inputs(targets, groups)
    matrix = _read_only(embeddings)
    artifact = MetricsArtifact()
    for metric in metrics:
        start = time.perf_counter()
        try:
            payload = metric(matrix, labels, target_metadata=copy.deepcopy(target_metadata), groups=group_keys,
                             seed=seed)
        except Exception as exc:  # a metric is user code: keep the other metrics and extractors
            result = failed_result(metric, f"{type(exc).__name__}: {exc}")
        else:
            try:
                result = metric_result(metric, payload)
            except Exception as exc:  # a payload that breaks the contract (MetricError), or cannot be inspected
                result = failed_result(metric, f"{type(exc).__name__}: {exc}")
                if isinstance(exc, MetricError):
                    artifact.violations.append(metric.name)
        if timings is not None:
            timings[f"metric.{metric.name}"] = time.perf_counter() - start
        artifact.results.append(result)
    return artifact

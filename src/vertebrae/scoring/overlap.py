"""OverlapIndex adapter: the only module that imports ``overlapindex``.

Every overlap number vertebrae reports comes from :class:`OverlapIndexScorer`.  It
validates the input, resolves k per class, translates typed labels to catalog codes,
calls ``OverlapIndex`` (which L2-normalizes on its own copy; rows of extreme scale
are first scaled by a power of two here, see :func:`vertebrae.inputs.embeddings.unit_scaled`) or
``ContinuousOverlapIndex`` (normalized here on one float64 copy) with the fixed
MiniBatchKMeans backend under a thread limit and a deterministic seed, and returns an
:class:`OverlapScoreResult` keyed by semantic label keys.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._base.config import Config, FrozenDict, check_bool, check_choice, check_int, check_seed, check_str_mapping
from .._base.sparse import is_sparse
from ..inputs.embeddings import (distinct_rows, evaluated_matrix, is_collapsed, is_constant, unit_scaled,
                                 validate_embeddings, zero_rows)
from ..errors import ConfigError, ConfigTypeError, InputValidationError, ScoringWarning
from .._base.fingerprint import package_version
from ..inputs.labels import LabelCatalog, decode_key, semantic_key
from .._base.result_schema import NUMBER, Choice, MapOf, both, nullable, rule
from ..inputs.targets import MultiLabelTargets, RegressionTargets, SingleLabelTargets, Targets, build_targets
from .._base.threads import DEFAULT_THREAD_LIMIT, limited_threads
from .._base.call_warnings import call_warnings

_LOG = logging.getLogger(__name__)
#: Seed used when the caller gives none: unseeded MiniBatchKMeans drifts between runs.
DEFAULT_SEED = 0
BACKEND = "MiniBatchKMeans"
#: The most classes (or labels) one overlap score takes.  The score and its result hold a value for every
#: ordered pair of classes, so time and size grow with the square of the class count: 1,000 classes are about
#: 1 million pairwise scores (about 35 s per scoring call and 48 MB of result JSON on a 2-core machine), and
#: 100,000 classes would be 10 billion.  Refused before any work (docs/scoring.md, "How many classes").
MAX_CLASSES = 1_000

_KMEANS_FORBIDDEN = {
    "n_clusters": "the prototype count is set through k / min_k / max_k",
    "random_state": "pass the seed through random_state on the config (or seed= to score)",
}


def _label_key_list(owner: str, field: str, value: Any) -> tuple[str, ...]:
    """Normalize typed labels (or serialized ``{"label_key": ...}`` items) to semantic keys."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    keys = []
    for item in items:
        if isinstance(item, Mapping) and set(item) == {"label_key"}:
            decode_key(item["label_key"])  # validates the key
            keys.append(item["label_key"])
        else:
            try:
                keys.append(semantic_key(item))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{owner}.{field}: {exc}") from None
    return tuple(sorted(set(keys)))


def _k_pairs(value: Any) -> list[tuple[Any, Any]] | None:
    """The (label, k) pairs of a k mapping, or None when ``value`` is not a mapping form.

    Accepted: a dict of typed label -> k; a list of ``(label, k)`` pairs (needed when
    labels such as ``1`` and ``True`` must both appear: a Python dict merges them);
    the serialized form ``[{"label_key": ..., "k": ...}]``.
    """
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(i, Mapping) and set(i) == {"label_key", "k"} for i in value):
            return [({"label_key": i["label_key"]}, i["k"]) for i in value]
        if all(isinstance(i, (list, tuple)) and len(i) == 2 for i in value):
            return [tuple(i) for i in value]
    return None


def _check_k(owner: str, value: Any) -> Any:
    if isinstance(value, str) and value == "auto":
        return "auto"
    pairs = _k_pairs(value)
    if pairs is not None:
        out: dict[str, int] = {}
        for label, k in pairs:
            if isinstance(label, Mapping):
                key = label["label_key"]
                decode_key(key)
            else:
                try:
                    key = semantic_key(label)
                except (ValueError, TypeError) as exc:
                    raise ConfigError(f"{owner}.k mapping key {label!r}: {exc}") from None
            if key in out:
                raise ConfigError(f"{owner}.k gives class {label!r} twice")
            out[key] = check_int(owner, f"k[{label!r}]", k, minimum=1)
        if not out:
            raise ConfigError(f"{owner}.k mapping is empty; use 'auto', an integer, or a non-empty class-to-k mapping")
        return FrozenDict(dict(sorted(out.items())))
    try:
        return check_int(owner, "k", value, minimum=1)
    except ConfigError:
        raise ConfigError(f"{owner}.k must be 'auto', a positive integer, or a mapping of class -> positive integer, "
                          f"got {value!r}") from None


def _validate_kmeans_kwargs(owner: str, value: Any) -> FrozenDict:
    kwargs = check_str_mapping(owner, "kmeans_kwargs", value, forbidden=_KMEANS_FORBIDDEN)
    if kwargs:
        import inspect

        from sklearn.cluster import MiniBatchKMeans

        allowed = set(inspect.signature(MiniBatchKMeans).parameters) - set(_KMEANS_FORBIDDEN)
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise ConfigError(f"{owner}.kmeans_kwargs has unknown MiniBatchKMeans argument(s) {unknown}; "
                              f"allowed: {sorted(allowed)}")
        try:  # value checks now, not at fit time after every extractor has run
            MiniBatchKMeans(**kwargs)._validate_params()
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{owner}.kmeans_kwargs has an invalid value: {exc}") from None
    return kwargs


@dataclasses.dataclass(frozen=True)
class OverlapScoringConfig(Config):
    """Settings of the fixed MiniBatchKMeans OverlapIndex backend (classification, multi-label).

    ``k`` is ``"auto"``, an integer, or a mapping keyed by the user's typed class labels;
    mapping keys and ``exclude_classes`` are stored as semantic label keys.
    """

    k: Any = "auto"
    min_k: int = 10
    max_k: int = 50
    min_samples_per_cluster: int = 5
    kmeans_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=FrozenDict)
    offline_chunk_size: int = 10_000
    normalize_embeddings: bool = True
    max_dense_bytes: int | None = None
    exclude_classes: Any = None
    random_state: int = DEFAULT_SEED
    thread_limit: int | None = DEFAULT_THREAD_LIMIT

    #: Scores are bitwise identical across tile sizes (tests/test_key_completeness.py).  Not across BLAS thread
    #: counts: on a space collapsed onto few points k-means breaks its ties by round-off, and one and two OpenBLAS
    #: threads scored 0.5606 and 0.5626 there (tests/test_overlap_scorer.py), so ``thread_limit`` is hashed.
    speed_only = ("offline_chunk_size",)

    def _validate(self) -> None:
        name = type(self).__name__
        self._set("k", _check_k(name, self.k))
        self._set("min_k", check_int(name, "min_k", self.min_k, minimum=1))
        self._set("max_k", check_int(name, "max_k", self.max_k, minimum=1))
        if self.max_k < self.min_k:
            raise ConfigError(f"{name}.max_k ({self.max_k}) must be >= min_k ({self.min_k})")
        self._set("min_samples_per_cluster", check_int(name, "min_samples_per_cluster", self.min_samples_per_cluster, minimum=1))
        self._set("kmeans_kwargs", _validate_kmeans_kwargs(name, self.kmeans_kwargs))
        self._set("offline_chunk_size", check_int(name, "offline_chunk_size", self.offline_chunk_size, minimum=1))
        self._set("normalize_embeddings", check_bool(name, "normalize_embeddings", self.normalize_embeddings))
        self._set("max_dense_bytes", check_int(name, "max_dense_bytes", self.max_dense_bytes, minimum=1, allow_none=True))
        self._set("exclude_classes", _label_key_list(name, "exclude_classes", self.exclude_classes))
        self._set("random_state", check_seed(name, "random_state", self.random_state, allow_none=False))
        self._set("thread_limit", check_int(name, "thread_limit", self.thread_limit, minimum=1, allow_none=True))

    def _encode_field(self, name: str, value: Any) -> Any:
        if name == "k" and isinstance(value, Mapping):
            return [{"label_key": key, "k": k} for key, k in value.items()]
        if name == "exclude_classes":
            return [{"label_key": key} for key in value]
        return super()._encode_field(name, value)


@dataclasses.dataclass(frozen=True)
class ContinuousOverlapScoringConfig(Config):
    """Settings of ContinuousOverlapIndex for explicit regression targets.

    ``null_mode`` defaults to ``"refit_permutation"``: the dependency's ``"auto"`` silently
    switches to a fixed-structure null above rows x permutations >= 100,000, which was
    measured to report 0.0 where the refit null gave 0.31-0.35.
    """

    k: int = 8
    target_cover: str = "auto"
    n_target_cells: Any = "auto"
    target_distance: str = "auto"
    n_null_permutations: int = 20
    null_mode: str = "refit_permutation"
    aggregation: str = "support_weighted"
    target_scaling: str = "standard"
    adjacency_mode: str = "soft_topk"
    top_k: int = 5
    kmeans_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=FrozenDict)
    offline_chunk_size: int = 10_000
    normalize_embeddings: bool = True
    random_state: int = DEFAULT_SEED
    thread_limit: int | None = DEFAULT_THREAD_LIMIT

    #: Scores are bitwise identical across tile sizes (tests/test_key_completeness.py).  Not across BLAS thread
    #: counts: on a space collapsed onto few points k-means breaks its ties by round-off, and one and two OpenBLAS
    #: threads scored 0.5606 and 0.5626 there (tests/test_overlap_scorer.py), so ``thread_limit`` is hashed.
    speed_only = ("offline_chunk_size",)

    def _validate(self) -> None:
        name = type(self).__name__
        self._set("k", check_int(name, "k", self.k, minimum=1))
        check_choice(name, "target_cover", self.target_cover, ("auto", "quantile", "kmeans"))
        if self.n_target_cells != "auto":
            self._set("n_target_cells", check_int(name, "n_target_cells", self.n_target_cells, minimum=1))
        check_choice(name, "target_distance", self.target_distance, ("auto", "wasserstein", "sliced_wasserstein"))
        self._set("n_null_permutations", check_int(name, "n_null_permutations", self.n_null_permutations, minimum=1))
        check_choice(name, "null_mode", self.null_mode, ("refit_permutation", "fixed_structure_permutation", "auto"))
        check_choice(name, "aggregation", self.aggregation, ("support_weighted", "macro"))
        check_choice(name, "target_scaling", self.target_scaling, ("standard", "none", "minmax", "robust"))
        check_choice(name, "adjacency_mode", self.adjacency_mode, ("soft_topk", "hard_top1"))
        self._set("top_k", check_int(name, "top_k", self.top_k, minimum=1))
        self._set("kmeans_kwargs", _validate_kmeans_kwargs(name, self.kmeans_kwargs))
        self._set("offline_chunk_size", check_int(name, "offline_chunk_size", self.offline_chunk_size, minimum=1))
        self._set("normalize_embeddings", check_bool(name, "normalize_embeddings", self.normalize_embeddings))
        self._set("random_state", check_seed(name, "random_state", self.random_state, allow_none=False))
        self._set("thread_limit", check_int(name, "thread_limit", self.thread_limit, minimum=1, allow_none=True))


#: What reports and ``compare`` read of a serialized OverlapScoreResult (checked on load; vertebrae._base.result_schema).
SCHEMA = both({"score": NUMBER, "macro_score": NUMBER, "weighted_score": NUMBER,
               "per_class_scores": MapOf(nullable(NUMBER)), "pairwise_scores": MapOf(MapOf(nullable(NUMBER))),
               "k_per_class": dict, "warnings": [str], "target_type": Choice(("single_label", "multi_label", "regression")),
               "metadata": {"aggregation_classes?": [str], "excluded_classes?": nullable([str])},
               "labels?": MapOf(str), "loss_ratio?": nullable(NUMBER),
               "regression?": nullable({"null_calibration": {"actual_loss": NUMBER, "null_loss": NUMBER,
                                                             "null_mode_used": str}})},
              rule(lambda o: o.get("loss_ratio") is None or o.get("regression") is not None,
                   "a loss_ratio needs its regression section (null_calibration)"))


@dataclasses.dataclass
class OverlapScoreResult:
    """Everything one overlap scoring call produced, keyed by semantic label keys.

    ``score`` is the primary value (the macro index for classification, the configured
    aggregation for regression); ``labels`` maps each key to its display text.
    """

    score: float
    macro_score: float
    weighted_score: float
    per_class_scores: dict[str, float]
    pairwise_scores: dict[str, dict[str, float | None]]
    sparse_adjacency: dict[str, dict[str, int]]
    class_counts: dict[str, int]
    k_per_class: dict[str, int]
    warnings: list[str]
    metadata: dict[str, Any]
    target_type: str
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    loss_ratio: float | None = None
    regression: dict[str, Any] | None = None

    def display(self, key: str) -> str:
        return self.labels.get(key, key)

    def weakest_class(self) -> tuple[str, float] | None:
        """The aggregated class with the lowest per-class score (ties: first key)."""
        included = self.metadata.get("aggregation_classes") or list(self.per_class_scores)
        scored = [(self.per_class_scores[k], k) for k in included if k in self.per_class_scores]
        if not scored:
            return None
        value, key = min(scored)
        return key, value

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OverlapScoreResult":
        return cls(**data)


# ----------------------------------------------------------------------- k resolution
#: Classes a grouped k note names before "...".
_SHOWN_CLASSES = 5
def resolve_k(counts: Mapping[str, int], config: OverlapScoringConfig, catalog: LabelCatalog
              ) -> tuple[dict[str, int], dict[str, str], list[str]]:
    """Per-class k from class size, ``min_k``, ``max_k`` and ``min_samples_per_cluster``.

    capacity(c) = max(2, n_c // min_samples_per_cluster), capped at n_c: the most
    prototypes a class can support.  ``"auto"`` asks for clip(capacity, min_k, max_k);
    an integer or mapping asks for that value.  When the request exceeds capacity the
    class gets the capacity and a warning with the numbers, one for all the classes reduced alike (same
    request, size and k: balanced data is one fact, not one line per class).  Returns (k per class,
    source per class, warnings).
    """
    resolved: dict[str, int] = {}
    source: dict[str, str] = {}
    reduced: dict[tuple[int, str, int, int], list[str]] = {}
    for key, n in counts.items():
        capacity = min(n, max(2, n // config.min_samples_per_cluster))
        if isinstance(config.k, Mapping) and key in config.k:
            want, source[key] = config.k[key], "mapping"
        elif isinstance(config.k, int):
            want, source[key] = config.k, "fixed"
        else:
            want, source[key] = min(config.max_k, max(config.min_k, capacity)), "auto"
        resolved[key] = min(want, capacity)
        if resolved[key] < want:
            reduced.setdefault((want, source[key], resolved[key], n), []).append(key)
    notes = [_k_note(keys, len(counts), want, how, k, n, config.min_samples_per_cluster, catalog)
             for (want, how, k, n), keys in reduced.items()]
    if isinstance(config.k, Mapping):
        notes.extend(merged_key_notes(config.k, counts, catalog))
    return resolved, source, notes


def _k_note(keys: list[str], n_classes: int, want: int, how: str, k: int, n: int, min_samples: int,
            catalog: LabelCatalog) -> str:
    """``class 'tiny': k reduced ...``, ``classes 'a', 'b': ...`` or ``every class (10 classes): ...``."""
    shown = ", ".join(repr(catalog.display(key)) for key in keys[:_SHOWN_CLASSES])
    if len(keys) == 1:
        who, has = f"class {shown}", "it has"
    else:
        who = (f"every class ({n_classes} classes)" if len(keys) == n_classes else
               f"classes {shown}{', ...' if len(keys) > _SHOWN_CLASSES else ''} ({len(keys)} of {n_classes})")
        has = "each has"
    return (f"{who}: k reduced from {want} ({how}) to {k} because {has} only {n} sample(s) "
            f"(min_samples_per_cluster={min_samples})")


def merged_key_notes(mapping: Mapping[str, int], counts: Mapping[str, int], catalog: LabelCatalog) -> list[str]:
    """Notes for classes equal in value to a k-mapping key but of another type, which the mapping leaves out.

    A Python dict merges equal keys before vertebrae sees them (``{1: 3, True: 2}`` is
    ``{1: 2}``), so a k meant for ``True`` may have landed on ``1``; the list-of-pairs form
    keeps both.
    """
    by_value: dict[Any, list[str]] = {}
    for key in counts:
        by_value.setdefault(decode_key(key), []).append(key)  # a dict groups 1, 1.0 and True together
    notes = []
    for key in mapping:
        for other in by_value.get(decode_key(key), []) if key in counts else []:
            if other not in mapping:
                notes.append(
                    f"OverlapScoringConfig.k names class {decode_key(key)!r} ({key.partition(':')[0]}) but not "
                    f"class {decode_key(other)!r} ({other.partition(':')[0]}), an equal value of another type: a "
                    "Python dict merges such keys (1 == 1.0 == True), so a k given for one may have replaced the "
                    "other's; give k as (label, k) pairs to set each, e.g. [(1, 3), (True, 2)]")
    return notes


def check_class_settings(config: OverlapScoringConfig, counts: Mapping[str, int], catalog: LabelCatalog) -> list[str]:
    """Check ``exclude_classes`` and the keys of a ``k`` mapping against the dataset's classes.

    Called by the scorer and by ``Benchmark`` (so typos, and more classes than :data:`MAX_CLASSES`, fail before
    any extractor runs).  Returns the classes that enter the macro/weighted aggregation.
    """
    if len(counts) > MAX_CLASSES:
        raise InputValidationError(
            f"the targets have {len(counts):,} classes; the overlap score takes at most {MAX_CLASSES:,}, because it "
            f"scores every ordered pair of classes ({len(counts) * (len(counts) - 1):,} pairs here), so its time and "
            "its result grow with the square of the class count. Score coarser classes (a label view: "
            "LabelViewConfig, or a mapping of the labels onto groups) or a subset of the classes")
    for key in config.exclude_classes:
        if key not in counts:
            raise InputValidationError(
                f"OverlapScoringConfig.exclude_classes names {decode_key(key)!r} ({key.partition(':')[0]}), which is "
                f"not a class of this dataset; known classes: {[catalog.display(k) for k in list(counts)[:10]]}. "
                "Note that 1, '1' and True are different classes.")
    included = [k for k in catalog.keys if k not in config.exclude_classes]
    if not included:
        raise InputValidationError("OverlapScoringConfig.exclude_classes excludes every class; nothing would be "
                                   "aggregated. Exclude fewer classes.")
    unknown = [key for key in config.k if key not in counts] if isinstance(config.k, Mapping) else []
    if unknown:
        shown = ", ".join(f"{decode_key(u)!r} ({u.partition(':')[0]})" for u in unknown[:5])
        raise InputValidationError(
            f"OverlapScoringConfig.k mapping names class(es) {shown} that are not in the dataset; known classes: "
            f"{[catalog.display(k) for k in list(counts)[:10]]}. Note that 1, '1' and True are different classes.")
    return included


# ----------------------------------------------------------------------- the adapter
def _capture(caught: list[warnings.WarningMessage]) -> list[str]:
    seen: list[str] = []
    for item in caught:
        text = f"overlapindex: {item.category.__name__}: {item.message}"
        if text not in seen:
            seen.append(text)
    return seen


class OverlapIndexScorer:
    """Scores one embedding matrix against validated targets with OverlapIndex."""

    def __init__(self, config: OverlapScoringConfig | None = None,
                 continuous_config: ContinuousOverlapScoringConfig | None = None) -> None:
        self.config = config or OverlapScoringConfig()
        self.continuous_config = continuous_config or ContinuousOverlapScoringConfig()
        if not isinstance(self.config, OverlapScoringConfig):
            raise ConfigTypeError(f"config must be an OverlapScoringConfig, got {type(self.config).__name__}")
        if not isinstance(self.continuous_config, ContinuousOverlapScoringConfig):
            raise ConfigTypeError("continuous_config must be a ContinuousOverlapScoringConfig, got "
                              f"{type(self.continuous_config).__name__}")

    def score(self, embeddings: Any, targets: Targets | Any, *, seed: int | None = None,
              target_type: str | None = None, label_names: Sequence[Any] | None = None,
              target_names: Sequence[str] | None = None, warn: bool = True,
              per_target: bool = True) -> OverlapScoreResult:
        """Score ``embeddings`` (n x d, dense or sparse) against ``targets``.

        ``targets`` is a validated targets object (from a dataset) or raw labels,
        validated here with ``target_type`` / ``label_names`` / ``target_names``.
        ``seed`` defaults to the config's ``random_state``; the seed used is recorded.
        Each of the result's ``warnings`` is also warned (a :class:`ScoringWarning` at your
        call) unless ``warn=False``: a benchmark's stages record them and its ``run`` warns
        each once, named by extractor.  ``per_target=False`` leaves out the per-target scores of a
        regression with several targets (one more ContinuousOverlapIndex fit per target): stability repeats
        summarize the score alone.
        """
        X = validate_embeddings(embeddings)
        if not isinstance(targets, (SingleLabelTargets, MultiLabelTargets, RegressionTargets)):
            targets = build_targets(targets, target_type=target_type, label_names=label_names,
                                    target_names=target_names, argument="targets")
        if targets.n_samples != X.shape[0]:
            raise InputValidationError(f"targets has {targets.n_samples} rows but embeddings has {X.shape[0]}; "
                                       "give exactly one target per embedding row")
        if isinstance(targets, RegressionTargets):
            result = self._score_regression(X, targets, seed, per_target)
        else:
            result = self._score_categorical(X, targets, seed)
        if warn:
            for note in result.warnings:
                warnings.warn(note, ScoringWarning, stacklevel=2)
        return result

    # -- classification / multi-label -----------------------------------------
    def _score_categorical(self, X: Any, targets: SingleLabelTargets | MultiLabelTargets,
                           seed: int | None) -> OverlapScoreResult:
        from overlapindex import OverlapIndex

        cfg = self.config
        seed = cfg.random_state if seed is None else check_seed("score", "seed", seed, allow_none=False)
        catalog = targets.catalog
        counts = targets.counts()
        sparse_classes = {key: n for key, n in counts.items() if n < 2}
        if sparse_classes:  # e.g. targets.subset() of a dataset: the catalog keeps classes the rows lack
            shown = ", ".join(f"{catalog.display(k)!r} ({n} row(s))" for k, n in list(sparse_classes.items())[:5])
            raise InputValidationError(
                f"targets: class(es) {shown} have fewer than 2 rows here; every catalog class needs at least 2 rows "
                "to be scored: subsample per class (as subsample stability does) or drop the class")
        included = check_class_settings(cfg, counts, catalog)
        k_per_class, k_source, notes = resolve_k(counts, cfg, catalog)
        zeros, distinct = _check_geometry(X, cfg.normalize_embeddings, notes)
        # OverlapIndex sees integer codes into the label catalog: column j of the multi-label
        # indicator, or code j of a single-label row, is catalog.keys[j].  Integer labels also
        # keep OverlapIndex's per-row label bookkeeping ~10% cheaper than string keys.
        to_oi = {key: j for j, key in enumerate(catalog.keys)}
        y_oi = targets.indicator if isinstance(targets, MultiLabelTargets) else targets.codes
        from_oi = {v: k for k, v in to_oi.items()}
        kmeans_kwargs = {**cfg.kmeans_kwargs, "random_state": seed}
        excluded = [to_oi[k] for k in cfg.exclude_classes]
        with limited_threads(cfg.thread_limit), call_warnings() as caught:
            # OverlapIndex casts to float64 and L2-normalizes (in float32) on its own copy, so
            # ordinary input goes in as it is, without a copy here; rows whose scale its float32
            # arithmetic cannot take are first scaled by a power of two (per row when
            # normalizing, else the whole matrix): the score does not depend on the scale.
            oi = OverlapIndex(model_type=BACKEND, kmeans_k={to_oi[k]: v for k, v in k_per_class.items()},
                              kmeans_kwargs=kmeans_kwargs, offline_chunk_size=cfg.offline_chunk_size,
                              exclude_classes=excluded or None,
                              feature_normalization="l2" if cfg.normalize_embeddings else None)
            oi.fit_offline(unit_scaled(X, per_row=cfg.normalize_embeddings), y_oi)
        per_class = {from_oi[_py(label)]: float(v) for label, v in oi.singleton_index.items()}
        pairwise: dict[str, dict[str, float | None]] = {}
        for a in catalog.keys:
            row = {}
            for b in catalog.keys:
                if a != b:
                    value = float(oi.pairwise_index[(to_oi[a], to_oi[b])])
                    row[b] = None if math.isnan(value) else value
            pairwise[a] = row
        adjacency: dict[str, dict[str, int]] = {}
        for (a, b), hits in sorted(oi.sparse_adj.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))):
            adjacency.setdefault(from_oi[_py(a)], {})[from_oi[_py(b)]] = int(hits)
        unevaluable = sorted(from_oi[_py(lab)] for lab in getattr(oi, "unevaluable_labels_", None) or [])
        aggregation = [k for k in included if k not in unevaluable]
        metadata = {
            **_backend_metadata(cfg, X, kmeans_kwargs, zeros, distinct),
            "aggregation_classes": aggregation, "excluded_classes": list(cfg.exclude_classes),
            "unevaluable_classes": unevaluable, "k_source": k_source,
        }
        return OverlapScoreResult(
            score=float(oi.index), macro_score=float(oi.index), weighted_score=float(oi.weighted_index),
            per_class_scores={k: per_class[k] for k in catalog.keys if k in per_class},
            pairwise_scores=pairwise, sparse_adjacency=adjacency,
            class_counts={k: int(counts[k]) for k in catalog.keys}, k_per_class=dict(k_per_class),
            warnings=notes + _capture(caught), metadata=metadata, target_type=targets.target_type,
            labels={k: catalog.display(k) for k in catalog.keys})

    # -- regression -----------------------------------------------------------
    def _score_regression(self, X: Any, targets: RegressionTargets, seed: int | None,
                          per_target: bool) -> OverlapScoreResult:
        cfg = self.continuous_config
        seed = cfg.random_state if seed is None else check_seed("score", "seed", seed, allow_none=False)
        notes: list[str] = []
        constant = targets.constant_targets()
        keep = [j for j, name in enumerate(targets.target_names) if name not in constant]
        if not keep:
            raise InputValidationError(f"every regression target is constant ({list(targets.target_names)}); nothing to score")
        if constant:
            notes.append(f"constant regression target(s) {constant} carry no information and were left out of scoring")
        Y = targets.values[:, keep]
        Y = Y[:, 0] if Y.shape[1] == 1 else Y
        # ContinuousOverlapIndex has no normalization option: normalize on one float64 copy here.
        zeros, distinct = _check_geometry(X, cfg.normalize_embeddings, notes)
        Xf, _ = evaluated_matrix(X, cfg.normalize_embeddings)
        kmeans_kwargs = {**cfg.kmeans_kwargs, "random_state": seed}
        _LOG.info("ContinuousOverlapIndex on %d x %d with %d %s null permutation(s); this is slow (about 70 s at "
                  "20,000 x 384 with 20 permutations on 2 cores)", X.shape[0], X.shape[1], cfg.n_null_permutations,
                  cfg.null_mode)
        names = [targets.target_names[j] for j in keep]
        with limited_threads(cfg.thread_limit), call_warnings() as caught:
            coi = _continuous_index(cfg, kmeans_kwargs, seed)
            coi.fit_offline(Xf, Y)
            # Spec: a regression's score detail is the continuous overlap per target.  One target: the score
            # itself; several: each target scored alone, with the same settings and seed.
            alone = {names[0]: coi} if len(keep) == 1 else {} if not per_target else {
                name: _continuous_index(cfg, kmeans_kwargs, seed).fit(Xf, targets.values[:, j])
                for name, j in zip(names, keep)}
        cells = {f"cell:{int(c)}": sorted(int(p) for p in protos)
                 for c, protos in sorted(coi.target_cell_to_prototypes_.items())}
        support = {int(p): int(v) for p, v in coi.prototype_support_.items()}
        prototypes = {
            str(int(p)): {
                "index": _finite(coi.prototype_index_.get(p)), "loss": _finite(coi.prototype_loss_.get(p)),
                "support": support.get(int(p), 0), "target_cell": int(coi.prototype_to_target_cell_[p]),
                "target_mean": np.asarray(coi.prototype_target_mean_[p], dtype=float).ravel().tolist(),
                "target_radius": _finite(coi.prototype_target_radius_.get(p)),
            } for p in sorted(coi.prototype_index_)}
        adjacency = [[int(p), int(q), float(w), int(coi.prototype_adjacency_count_.get((p, q), 0))]
                     for (p, q), w in sorted(coi.prototype_adjacency_.items())]
        regression = {
            "null_calibration": {"null_mode_requested": cfg.null_mode, "null_mode_used": str(coi.null_mode_),
                                 "null_loss": float(coi.null_loss_), "actual_loss": float(coi.actual_loss_),
                                 "null_loss_samples": [float(v) for v in coi.null_loss_samples_],
                                 "n_null_permutations": cfg.n_null_permutations,
                                 "auto_null_work": int(coi.auto_null_work_)},
            "target_cover": str(coi.target_cover_), "target_distance": str(coi.target_distance_),
            "target_cells": cells, "prototypes": prototypes, "prototype_adjacency": adjacency,
            "scored_targets": names,
            "per_target": {name: {"score": float(one.index), "loss_ratio": float(one.loss_ratio_)}
                           for name, one in alone.items()},
        }
        metadata = {
            **_backend_metadata(cfg, X, kmeans_kwargs, zeros, distinct), "aggregation": cfg.aggregation,
            "aggregation_classes": list(cells), "excluded_classes": [],
        }
        return OverlapScoreResult(
            score=float(coi.index), macro_score=float(coi.macro_index_), weighted_score=float(coi.weighted_index),
            per_class_scores={}, pairwise_scores={}, sparse_adjacency={},
            class_counts={cell: sum(support.get(p, 0) for p in protos) for cell, protos in cells.items()},
            k_per_class={cell: len(protos) for cell, protos in cells.items()},
            warnings=notes + _capture(caught), metadata=metadata, target_type="regression",
            labels={cell: cell for cell in cells}, loss_ratio=float(coi.loss_ratio_), regression=regression)


def _continuous_index(cfg: ContinuousOverlapScoringConfig, kmeans_kwargs: dict[str, Any], seed: int) -> Any:
    """An unfitted ContinuousOverlapIndex with ``cfg``'s settings and the fixed backend."""
    from overlapindex import ContinuousOverlapIndex

    return ContinuousOverlapIndex(
        model_type=BACKEND, kmeans_k=cfg.k, kmeans_kwargs=kmeans_kwargs, offline_chunk_size=cfg.offline_chunk_size,
        target_cover=cfg.target_cover, n_target_cells=cfg.n_target_cells, target_distance=cfg.target_distance,
        adjacency_mode=cfg.adjacency_mode, top_k=cfg.top_k, null_mode=cfg.null_mode,
        n_null_permutations=cfg.n_null_permutations, aggregation=cfg.aggregation,
        target_scaling=cfg.target_scaling, random_state=seed)


def _check_geometry(X: Any, normalize: bool, notes: list[str]) -> tuple[np.ndarray, int]:
    """Reject a space with one point (OverlapIndex calls it perfectly separated); note a space collapsed onto
    few points and zero rows.

    Returns the indices of all-zero rows and the number of distinct rows; their warnings are appended to ``notes``.
    """
    if is_constant(X, normalize=normalize):
        raise InputValidationError(
            "embeddings are identical in every row" + (" after L2 normalization" if normalize else "")
            + ", so they separate nothing; OverlapIndex would report 1.0 (perfect separation) for such a space. "
            "Check the extractor (a collapsed or untrained model?).")
    distinct = distinct_rows(X, normalize=normalize)
    if is_collapsed(distinct, X.shape[0]):
        notes.append(f"only {distinct} distinct embedding rows among {X.shape[0]}"
                     + (" after L2 normalization" if normalize else "")
                     + ": OverlapIndex's score is unreliable on coincident rows (2 points under random labels "
                     "can outscore 1,500 distinct ones); binary quantization or max pooling can collapse inputs "
                     "onto few points: check the ranking with a linear probe (referee='probe')")
    zeros = zero_rows(X)
    if zeros.size:
        shown = ", ".join(map(str, zeros[:5])) + (", ..." if zeros.size > 5 else "")
        notes.append(f"{zeros.size} all-zero embedding row(s) (rows {shown})"
                     + (" cannot be L2-normalized and stay at the origin" if normalize else ""))
    return zeros, distinct


def _backend_metadata(cfg: Any, X: Any, kmeans_kwargs: Mapping[str, Any], zeros: np.ndarray,
                      distinct: int) -> dict[str, Any]:
    """Backend facts every overlap result records, classification or regression (no tile size, which is speed-only:
    the stored score is the same bytes whichever computed it; the thread limit, which is not, is in the key)."""
    return {"backend": BACKEND, "normalize_embeddings": cfg.normalize_embeddings, "seed": kmeans_kwargs["random_state"],
            "kmeans_kwargs": dict(kmeans_kwargs), "input_sparse": bool(is_sparse(X)), "input_dtype": str(X.dtype),
            "n_samples": int(X.shape[0]), "n_features": int(X.shape[1]),
            "zero_rows": int(zeros.size), "distinct_rows": distinct,
            "overlapindex_version": package_version("overlapindex")}


def _py(label: Any) -> Any:
    return label.item() if isinstance(label, np.generic) else label


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


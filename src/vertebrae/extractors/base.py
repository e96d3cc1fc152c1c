"""The Extractor protocol and the three built-in extractors.

An extractor turns a dataset's inputs into an embedding matrix.  ``recipe()`` is a
JSON-safe, human-readable description shown in results.  ``identity()`` (optional;
``recipe()`` minus ``name`` when absent) is what keys the embedding artifact, with
the input content: two extractors with the same identity must produce the same
embeddings, and the name is a label, never part of it.  An identity that holds a
value :func:`~vertebrae._base.fingerprint.canonical` cannot identify (a lambda, an unseeded
estimator), or an extractor with ``cache_eligible = False``, cannot be trusted across
runs (see :func:`vertebrae.execution.context.extractor_identity`).
``supervised = True`` makes the extract stage fit with the targets (and key on them).

Every shipped extractor builds its identity with one rule,
:func:`~vertebrae._base.fingerprint.declared_identity`, from three class declarations: ``version``
(its code version), ``computes_with`` (the distributions whose installed versions enter the
key; none when absent) and ``speed_only`` (constructor arguments left out, each proven by a test to
leave the outputs bitwise identical; none when absent); every other constructor argument is in the
identity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


from ..inputs.embeddings import validate_embeddings
from ..errors import InputTypeError, InputValidationError
from .._base.fingerprint import (callable_identity, callable_name, canonical, check_cache_identity, content_sha256,
                                 declared_identity, identified)


@runtime_checkable
class Extractor(Protocol):
    """What vertebrae needs from a candidate representation."""

    name: str

    def fit(self, X: Any, y: Any = None) -> "Extractor": ...

    def transform(self, X: Any) -> Any: ...

    def recipe(self) -> dict[str, Any]: ...


def check_extractor_name(name: Any, owner: str = "extractor name") -> str:
    """A non-empty string without ``+``, which joins a compression variant to it in result names (``raw+pca64``):
    ``a+pca2`` would read as extractor ``a``'s variant.  ``owner`` says where the name came from."""
    if not isinstance(name, str):
        raise InputTypeError(f"{owner} must be a non-empty string, got {type(name).__name__} {name!r}")
    if not name.strip():
        raise InputValidationError(f"{owner} must be a non-empty string, got {name!r}")
    if "+" in name:
        raise InputValidationError(f"{owner} {name!r} contains '+', which result names use before a compression "
                                   f"variant ('raw+pca64'); rename it, e.g. {name.replace('+', '-')!r}")
    return name


class PrecomputedExtractor:
    """Embeddings computed elsewhere.

    Without ``embeddings`` it returns the dataset's own embedding matrix (a dataset
    built with ``BenchmarkDataset.from_embeddings``); with a matrix it returns that.
    """

    def __init__(self, name: str, embeddings: Any = None) -> None:
        self.name = check_extractor_name(name)
        self.embeddings = None if embeddings is None else validate_embeddings(embeddings, argument=f"embeddings of {name!r}")

    #: Nothing to compute, and ``transform`` ignores its rows when given a matrix: never sharded by rows.
    shardable = False
    version = 1

    def fit(self, X: Any, y: Any = None) -> "PrecomputedExtractor":
        return self

    def transform(self, X: Any) -> Any:
        if self.embeddings is not None:
            return self.embeddings
        if X is None:
            raise InputValidationError(f"PrecomputedExtractor {self.name!r} has no embeddings and the dataset has none; "
                                       "pass embeddings=... or build the dataset with BenchmarkDataset.from_embeddings")
        return X

    def recipe(self) -> dict[str, Any]:
        recipe: dict[str, Any] = {"type": "precomputed", "name": self.name}
        if self.embeddings is not None:
            recipe["content_sha256"] = content_sha256(self.embeddings)
        return recipe

    def identity(self) -> dict[str, Any]:
        """Its own matrix by content, or "the dataset's embeddings" (whose content the input fact hashes)."""
        if self.embeddings is None:
            return declared_identity(self, {"type": "precomputed", "source": "dataset_embeddings"})
        return declared_identity(self, {"type": "precomputed", "content_sha256": content_sha256(self.embeddings)})


class CallableExtractor:
    """Wraps ``fn(X) -> embeddings`` (a model's encode method, a feature function).

    A module-level function is identified by its qualified name and source.  Anything
    else (a lambda, a closure, a bound method) needs a declared ``cache_identity`` (a
    version string that you change with the function); without one its embeddings are
    never shared with another extractor nor reused across runs
    (``cache_status="bypassed_unsafe_identity"``).
    """

    version = 1

    def __init__(self, name: str, fn: Callable[[Any], Any], *, params: dict[str, Any] | None = None,
                 cache_identity: str | None = None) -> None:
        self.name = check_extractor_name(name)
        if not callable(fn):
            raise InputTypeError(f"CallableExtractor {name!r}: fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.params = dict(params or {})
        self.cache_identity = check_cache_identity(f"CallableExtractor {name!r}", cache_identity)

    @property
    def cache_eligible(self) -> bool:
        return identified(self.identity())

    def fit(self, X: Any, y: Any = None) -> "CallableExtractor":
        return self

    def transform(self, X: Any) -> Any:
        return self.fn(X)

    def recipe(self) -> dict[str, Any]:
        return {"type": "callable", "name": self.name, "callable": callable_name(self.fn), "params": self.params}

    def identity(self) -> dict[str, Any]:
        return declared_identity(self, {"type": "callable", "callable": callable_identity(self.fn, self.cache_identity),
                                        "params": canonical(self.params), "cache_identity": self.cache_identity})


class SklearnExtractor:
    """Fits a scikit-learn transformer or pipeline on the dataset inputs, then transforms them.

    The estimator is cloned, so the one passed in is never mutated.  It is fitted
    without labels unless ``supervised=True`` (label-aware transforms such as LDA leak
    the targets into the representation they are scored on; opt in deliberately).
    """

    version = 1
    computes_with = ("scikit-learn",)

    def __init__(self, name: str, estimator: Any, *, supervised: bool = False) -> None:
        self.name = check_extractor_name(name)
        if isinstance(estimator, type):
            raise InputTypeError(f"SklearnExtractor {name!r}: estimator is the class {estimator.__name__}, not an "
                                 f"instance; give an instance: {estimator.__name__}(...)")
        if not (hasattr(estimator, "fit") and hasattr(estimator, "transform")):
            raise InputTypeError(f"SklearnExtractor {name!r}: estimator must have fit and transform, got "
                                 f"{type(estimator).__name__}")
        self.estimator = estimator
        self.supervised = supervised
        self.fitted_ = None

    def fit(self, X: Any, y: Any = None) -> "SklearnExtractor":
        from sklearn.base import clone

        self.fitted_ = clone(self.estimator)
        self.fitted_.fit(X, y if self.supervised else None)
        return self

    def transform(self, X: Any) -> Any:
        if self.fitted_ is None:
            raise InputValidationError(f"SklearnExtractor {self.name!r} must be fitted before transform")
        return self.fitted_.transform(X)

    def recipe(self) -> dict[str, Any]:
        params = self.estimator.get_params(deep=True)
        return {"type": "sklearn", "name": self.name, "estimator": callable_name(type(self.estimator)),
                "supervised": self.supervised,
                "params": {k: _param_text(v) for k, v in sorted(params.items())}}

    def identity(self) -> dict[str, Any]:
        """Estimator class and every parameter by content (nested estimators recursively).

        A function parameter is identified by name and source; a lambda or an unseeded
        ``random_state=None`` anywhere makes the identity unsafe (never shared, never reused).
        """
        return declared_identity(self, {"type": "sklearn", "estimator": canonical(self.estimator),
                                        "supervised": self.supervised})


def _param_text(value: Any) -> Any:
    """A JSON-safe stand-in for one estimator parameter (NaN defaults such as SimpleImputer's become text)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if hasattr(value, "get_params"):
        return callable_name(type(value))
    return repr(value)

"""Retrieval extractors: anything that embeds both endpoints, queries and gallery.

A :class:`RetrievalExtractor` has ``name``, ``fit(gallery_inputs)``,
``encode_queries``, ``encode_gallery`` and ``recipe()``.  Three forms ship:

* any standard :class:`~vertebrae.extractors.Extractor` (``PrecomputedExtractor(name)``,
  ``SklearnExtractor``, ``CallableExtractor``), adapted by :func:`as_retrieval_extractor`:
  fitted once on the gallery, then applied to both endpoints, so both live in one space;
* :class:`TwoBranchExtractor`: separate query and gallery encoders (e.g. a dual encoder);
* :class:`PrecomputedPairExtractor`: two precomputed matrices, one per endpoint, so
  several precomputed candidates can be compared on one dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ...inputs.embeddings import validate_embeddings
from ...inputs.modalities import declared_modalities
from ...errors import InputTypeError, InputValidationError
from ...extractors.base import PrecomputedExtractor, check_extractor_name
from ..._base.fingerprint import (callable_identity, callable_name, canonical, check_cache_identity, content_sha256,
                                  declared_identity, identified)


#: The endpoints a retrieval extractor embeds, each ``unknown`` until its ``modalities`` declares a kind.
UNDECLARED = {"query": "unknown", "gallery": "unknown"}


@runtime_checkable
class RetrievalExtractor(Protocol):
    """What a retrieval benchmark needs from a candidate representation."""

    name: str

    def fit(self, gallery_inputs: Any) -> Any: ...

    def encode_queries(self, inputs: Any) -> Any: ...

    def encode_gallery(self, inputs: Any) -> Any: ...

    def recipe(self) -> dict[str, Any]: ...


class SharedSpaceExtractor:
    """One standard extractor for both endpoints: fitted on the gallery only, then applied to each.

    Fitting on the gallery (never on the queries) keeps query information out of the
    representation the queries are ranked in.
    """

    version = 1

    def __init__(self, extractor: Any) -> None:
        self.extractor = extractor
        self.name = extractor.name

    def fit(self, gallery_inputs: Any) -> "SharedSpaceExtractor":
        self.extractor.fit(gallery_inputs)
        return self

    def encode_queries(self, inputs: Any) -> Any:
        return self.extractor.transform(inputs)

    def encode_gallery(self, inputs: Any) -> Any:
        return self.extractor.transform(inputs)

    @property
    def cache_eligible(self) -> bool:
        return bool(getattr(self.extractor, "cache_eligible", True))

    def recipe(self) -> dict[str, Any]:
        return {"type": "shared_space", "fit_on": "gallery", "extractor": self.extractor.recipe()}

    def identity(self) -> dict[str, Any]:
        inner = self.extractor.identity() if hasattr(self.extractor, "identity") else self.extractor.recipe()
        return declared_identity(self, {"type": "shared_space", "fit_on": "gallery",
                                        "extractor": {k: v for k, v in inner.items() if k != "name"}})


class TwoBranchExtractor:
    """Separate encoders per endpoint: ``query_fn(query_inputs)`` and ``gallery_fn(gallery_inputs)``.

    Like :class:`~vertebrae.extractors.CallableExtractor`, module-level functions are
    identified by name and source; anything else only by a declared ``cache_identity``.
    """

    version = 1

    def __init__(self, name: str, query_fn: Callable[[Any], Any], gallery_fn: Callable[[Any], Any], *,
                 params: dict[str, Any] | None = None, cache_identity: str | None = None) -> None:
        self.name = check_extractor_name(name)
        for argument, fn in (("query_fn", query_fn), ("gallery_fn", gallery_fn)):
            if not callable(fn):
                raise InputTypeError(f"TwoBranchExtractor {name!r}: {argument} must be callable, got "
                                     f"{type(fn).__name__}")
        self.query_fn, self.gallery_fn = query_fn, gallery_fn
        self.params = dict(params or {})
        self.cache_identity = check_cache_identity(f"TwoBranchExtractor {name!r}", cache_identity)

    @property
    def cache_eligible(self) -> bool:
        return identified(self.identity())

    def fit(self, gallery_inputs: Any) -> "TwoBranchExtractor":
        return self

    def encode_queries(self, inputs: Any) -> Any:
        return self.query_fn(inputs)

    def encode_gallery(self, inputs: Any) -> Any:
        return self.gallery_fn(inputs)

    def recipe(self) -> dict[str, Any]:
        return {"type": "two_branch", "name": self.name, "query_callable": callable_name(self.query_fn),
                "gallery_callable": callable_name(self.gallery_fn), "params": self.params}

    def identity(self) -> dict[str, Any]:
        return declared_identity(self, {"type": "two_branch",
                                        "query_callable": callable_identity(self.query_fn, self.cache_identity),
                                        "gallery_callable": callable_identity(self.gallery_fn, self.cache_identity),
                                        "params": canonical(self.params), "cache_identity": self.cache_identity})


class PrecomputedPairExtractor:
    """Precomputed embeddings of both endpoints, rows in the dataset's query / gallery order."""

    version = 1

    def __init__(self, name: str, query_embeddings: Any, gallery_embeddings: Any) -> None:
        self.name = check_extractor_name(name)
        self.query_embeddings = validate_embeddings(query_embeddings, argument=f"query_embeddings of {name!r}")
        self.gallery_embeddings = validate_embeddings(gallery_embeddings, argument=f"gallery_embeddings of {name!r}")

    def fit(self, gallery_inputs: Any) -> "PrecomputedPairExtractor":
        return self

    def encode_queries(self, inputs: Any) -> Any:
        return self.query_embeddings

    def encode_gallery(self, inputs: Any) -> Any:
        return self.gallery_embeddings

    def recipe(self) -> dict[str, Any]:
        return {"type": "precomputed_pair", "name": self.name,
                "query_sha256": content_sha256(self.query_embeddings),
                "gallery_sha256": content_sha256(self.gallery_embeddings)}

    def identity(self) -> dict[str, Any]:
        return declared_identity(self, self.recipe())


def check_endpoint_modalities(who: str, extractor: Any) -> dict[str, str]:
    """The modality an extractor declares per endpoint (``modalities = {"query": "text", "gallery": "image"}``,
    ``unknown`` where it declares none), refused where the declaration names an endpoint retrieval lacks or a kind no
    check knows (:func:`~vertebrae.inputs.modalities.declared_modalities`)."""
    return declared_modalities(who, extractor, UNDECLARED, "endpoint",
                               "a retrieval extractor's endpoints", "{'query': 'text', 'gallery': 'image'}")


def as_retrieval_extractor(extractor: Any, position: int, has_embeddings: bool) -> RetrievalExtractor:
    """Accept a retrieval extractor as is and adapt a standard one; reject what cannot work."""
    if isinstance(extractor, RetrievalExtractor):
        return extractor
    missing = [attr for attr in ("name", "fit", "transform", "recipe") if not hasattr(extractor, attr)]
    if missing:
        raise InputTypeError(
            f"extractors[{position}] ({type(extractor).__name__}) lacks {missing}; pass a standard extractor (name, "
            "fit, transform, recipe) or a retrieval extractor (name, fit, encode_queries, encode_gallery, recipe)")
    if isinstance(extractor, PrecomputedExtractor):
        if extractor.embeddings is not None:
            raise InputValidationError(
                f"extractors[{position}] PrecomputedExtractor {extractor.name!r} holds one matrix, but retrieval needs "
                "query and gallery embeddings; use PrecomputedPairExtractor(name, query_embeddings, "
                "gallery_embeddings)")
        if not has_embeddings:
            raise InputValidationError(
                f"extractors[{position}] PrecomputedExtractor {extractor.name!r} uses the dataset's own embeddings, "
                "but the dataset was built from raw inputs; build it with RetrievalDataset.from_embeddings or use "
                "PrecomputedPairExtractor")
    return SharedSpaceExtractor(extractor)

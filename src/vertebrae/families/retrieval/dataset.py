"""RetrievalDataset: queries, a gallery, graded relevance and exclusions.

The dataset *is* the retrieval protocol: which items are ranked against which, what
counts as relevant and what is excluded.  It is validated completely when built, so
a bad id or grade is reported before any extractor runs, and it carries a
fingerprint of that protocol which results use to refuse mixing incomparable runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...inputs.datasets import FactAnswer, dataset_fact, inputs_sha256
from ...inputs.embeddings import validate_embeddings
from ...errors import InputTypeError, InputValidationError
from ...inputs.identity import DatasetIdentity, require_identity
from .relevance import build_ids, read_exclusions, read_relevance, shown

_FINGERPRINT_VERSION = b"vertebrae.families.retrieval.protocol/1"


@dataclasses.dataclass(frozen=True, eq=False)
class RetrievalDataset:
    """One retrieval protocol plus the endpoint data extractors embed.

    ``relevance`` holds the eligible positive grades (CSR, queries x gallery; pairs
    that are also excluded are removed), ``exclusions`` the excluded pairs (CSR of
    ones).  Endpoint data is either precomputed embeddings or raw inputs.  Build it
    with :meth:`from_embeddings`, :meth:`from_inputs` or :meth:`from_relevance_matrix`.
    """

    identity: DatasetIdentity
    query_ids: tuple[Any, ...]
    gallery_ids: tuple[Any, ...]
    relevance: Any
    exclusions: Any
    fingerprint: str
    query_embeddings: Any = None
    gallery_embeddings: Any = None
    query_inputs: Any = None
    gallery_inputs: Any = None
    warnings: tuple[str, ...] = ()

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def n_gallery(self) -> int:
        return len(self.gallery_ids)

    def __repr__(self) -> str:
        """A few facts, never the ids, relevance or endpoint rows."""
        kind = "embeddings" if self.has_embeddings else "inputs"
        return (f"RetrievalDataset({self.n_queries} queries x {self.n_gallery} gallery items, "
                f"{self.relevance.nnz} relevant pairs, {self.exclusions.nnz} excluded, {kind}, "
                f"identity={self.identity.kind}:{self.identity.dataset_id}, fingerprint={self.fingerprint[:12]})")

    @property
    def has_embeddings(self) -> bool:
        return self.query_embeddings is not None

    def endpoint_data(self) -> tuple[Any, Any]:
        """What extractors receive for (queries, gallery): raw inputs if given, else the embeddings."""
        if self.has_embeddings:
            return self.query_embeddings, self.gallery_embeddings
        return self.query_inputs, self.gallery_inputs

    # -- facts that artifact keys hash (see vertebrae.execution.context) --------------------
    def fact(self, name: str, view: tuple[str, str] | None, extractor: Any) -> FactAnswer:
        """Context fact ``name`` (``RunContext.fact``): each depends on the protocol alone."""
        return dataset_fact(self, name, ("query_inputs", "gallery_inputs", "relevance"))

    def query_inputs_fingerprint(self) -> str:
        return inputs_sha256(self.endpoint_data()[0])

    def gallery_inputs_fingerprint(self) -> str:
        return inputs_sha256(self.endpoint_data()[1])

    def relevance_fingerprint(self) -> str:
        """The protocol: ids, eligible grades and exclusions."""
        return self.fingerprint

    # -- constructors ----------------------------------------------------------
    @classmethod
    def from_embeddings(cls, query_embeddings: Any, gallery_embeddings: Any, *, relevance: Any,
                        query_ids: Sequence[Any] | None = None, gallery_ids: Sequence[Any] | None = None,
                        identity: DatasetIdentity | None = None, exclusions: Any = None) -> "RetrievalDataset":
        """Dataset over precomputed query and gallery embeddings (dense or SciPy sparse).

        ``relevance`` is a NumPy/SciPy queries x gallery matrix or an iterable of
        ``(query_id, gallery_id, grade)`` records (a nested list is read as records).
        Ids default to the row positions.  ``exclusions``: see :meth:`from_inputs`.
        """
        identity = require_identity(identity, where="RetrievalDataset.from_embeddings")
        queries = validate_embeddings(query_embeddings, argument="query_embeddings")
        gallery = validate_embeddings(gallery_embeddings, argument="gallery_embeddings")
        if queries.shape[1] != gallery.shape[1]:
            raise InputValidationError(
                f"query_embeddings have {queries.shape[1]} columns but gallery_embeddings have {gallery.shape[1]}; "
                "both endpoints must be embedded in the same space (same width)")
        return cls._build(identity, relevance, exclusions, query_ids, gallery_ids, (queries, gallery), None)

    @classmethod
    def from_inputs(cls, query_inputs: Any, gallery_inputs: Any, *, relevance: Any,
                    query_ids: Sequence[Any] | None = None, gallery_ids: Sequence[Any] | None = None,
                    identity: DatasetIdentity | None = None, exclusions: Any = None) -> "RetrievalDataset":
        """Dataset over raw query and gallery inputs (arrays, texts, ...) that extractors embed.

        ``exclusions`` removes (query, gallery) pairs from ranking entirely: ``"same_id"``
        (a query's own item when queries and gallery share ids), a queries x gallery
        matrix (nonzero = excluded) or ``(query_id, gallery_id)`` pairs.
        """
        identity = require_identity(identity, where="RetrievalDataset.from_inputs")
        _n_rows(query_inputs, "query_inputs")
        _n_rows(gallery_inputs, "gallery_inputs")
        return cls._build(identity, relevance, exclusions, query_ids, gallery_ids, None,
                          (query_inputs, gallery_inputs))

    @classmethod
    def from_relevance_matrix(cls, relevance_matrix: Any, *, query_embeddings: Any = None,
                              gallery_embeddings: Any = None, query_inputs: Any = None, gallery_inputs: Any = None,
                              query_ids: Sequence[Any] | None = None, gallery_ids: Sequence[Any] | None = None,
                              identity: DatasetIdentity | None = None, exclusions: Any = None) -> "RetrievalDataset":
        """Dataset whose relevance is an explicit queries x gallery matrix, e.g. a nested list.

        Give both embeddings or both raw inputs for the endpoints.
        """
        has_embeddings = query_embeddings is not None or gallery_embeddings is not None
        has_inputs = query_inputs is not None or gallery_inputs is not None
        if has_embeddings == has_inputs:
            raise InputValidationError("RetrievalDataset.from_relevance_matrix needs the endpoints either as "
                                       "query_embeddings= and gallery_embeddings= or as query_inputs= and "
                                       "gallery_inputs= (exactly one of the two forms)")
        matrix = _explicit_matrix(relevance_matrix)
        common = {"relevance": matrix, "query_ids": query_ids, "gallery_ids": gallery_ids, "identity": identity,
                  "exclusions": exclusions}
        if has_embeddings:
            return cls.from_embeddings(query_embeddings, gallery_embeddings, **common)
        return cls.from_inputs(query_inputs, gallery_inputs, **common)

    @classmethod
    def _build(cls, identity: DatasetIdentity, relevance: Any, exclusions: Any, query_ids: Any, gallery_ids: Any,
               embeddings: tuple[Any, Any] | None, inputs: tuple[Any, Any] | None) -> "RetrievalDataset":
        queries, gallery = embeddings or inputs
        qids, qindex = build_ids(query_ids, _n_rows(queries, "queries"), "query_ids")
        gids, gindex = build_ids(gallery_ids, _n_rows(gallery, "gallery"), "gallery_ids")
        graded = read_relevance(relevance, qindex, gindex, qids, gids)
        excluded = read_exclusions(exclusions, qindex, gindex, qids, gids)
        overlap = graded.multiply(excluded).tocsr()
        eligible = (graded - overlap).tocsr()
        eligible.eliminate_zeros()
        eligible.sort_indices()
        empty = np.flatnonzero(np.diff(eligible.indptr) == 0)
        if empty.size:
            after = " after exclusions" if excluded.nnz else ""
            raise InputValidationError(
                f"queries {shown([qids[i] for i in empty])} have no relevant gallery item (grade > 0){after}; every "
                "query needs at least one eligible positive — add relevance for them or drop those queries")
        notes = []
        if overlap.nnz:
            notes.append(f"{overlap.nnz} relevant (query, gallery) pair(s) are also excluded and were removed from "
                         "the relevance judgments")
        fingerprint = protocol_fingerprint(qids, gids, eligible, excluded)
        if identity.kind == "content":
            digest = hashlib.sha256(fingerprint.encode())
            for data in (queries, gallery):
                digest.update(inputs_sha256(data).encode())
            identity = identity.with_content(digest.hexdigest())
        q_emb, g_emb = embeddings or (None, None)
        q_in, g_in = inputs or (None, None)
        return cls(identity, qids, gids, eligible, excluded, fingerprint, q_emb, g_emb, q_in, g_in, tuple(notes))

    # -- protocol --------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Counts that describe the protocol (stored in every result)."""
        per_query = np.diff(self.relevance.indptr)
        grades = self.relevance.data
        return {
            "identity": self.identity.to_dict(), "fingerprint": self.fingerprint,
            "n_queries": self.n_queries, "n_gallery": self.n_gallery,
            "n_relevant_pairs": int(self.relevance.nnz), "n_excluded_pairs": int(self.exclusions.nnz),
            "relevant_per_query": {"min": int(per_query.min()), "mean": float(per_query.mean()),
                                   "max": int(per_query.max())},
            "grades": {"min": float(grades.min()), "max": float(grades.max()),
                       "distinct": int(np.unique(grades).size)},
            "input_kind": "embeddings" if self.has_embeddings else "raw_inputs",
        }


def protocol_fingerprint(query_ids: Sequence[Any], gallery_ids: Sequence[Any], relevance: Any, exclusions: Any) -> str:
    """SHA-256 of the ids (type-aware: 1 and "1" differ), the eligible grades and the exclusions."""
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    digest.update(json.dumps([list(query_ids), list(gallery_ids)], ensure_ascii=True).encode())
    for matrix in (relevance, exclusions):
        digest.update(np.asarray(matrix.shape, dtype="<i8").tobytes())
        for part, dtype in ((matrix.indptr, "<i8"), (matrix.indices, "<i8"), (matrix.data, "<f8")):
            digest.update(np.ascontiguousarray(part, dtype=dtype).tobytes())
    return digest.hexdigest()


def _n_rows(data: Any, argument: str) -> int:
    try:
        n = data.shape[0] if hasattr(data, "shape") else len(data)
    except TypeError:
        raise InputTypeError(f"{argument} must be a sized collection (array, sparse matrix, list of texts, ...), "
                             f"got {type(data).__name__}") from None
    if n == 0:
        raise InputValidationError(f"{argument} is empty; retrieval needs at least one query and one gallery item")
    return int(n)


def _explicit_matrix(matrix: Any) -> Any:
    """A nested list (or array / sparse matrix) as a 2-D array; ragged rows are an error."""
    from ..._base.sparse import is_sparse

    if is_sparse(matrix) or isinstance(matrix, np.ndarray):
        return matrix
    try:
        array = np.asarray(matrix, dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise InputValidationError(f"relevance_matrix is ragged or not numeric ({exc}); give one row of grades per "
                                   "query, each with one grade per gallery item") from None
    if array.ndim != 2:
        raise InputValidationError(f"relevance_matrix must be 2-D (queries x gallery), got shape {array.shape}")
    return array


"""The one artifact of embeddings, its one stored form, and the one compression step every pipeline uses.

A job that embeds produces an :class:`EmbeddingSet`: the :class:`Embedding` (matrix plus
metadata) of each part it made together — an extractor's outputs (``None`` names the sole
output), a retrieval run's ``query`` and ``gallery`` endpoints, one zero-shot branch
(``samples`` or ``prompts``).  A compressed variant is an EmbeddingSet too, with the
facts of its compression.  :data:`EMBEDDINGS_CODEC` is its stored form (one ``.npy`` /
``.npz`` per part), and :func:`compress_embeddings` is the compress stage of every
pipeline: fit the variant on one declared part, apply the same fitted transform to all.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from ..artifacts.codecs import ArtifactCodec, StoredArtifact, output_array
from ..extractors.compression import (Compressor, EmbeddingCompressionConfig, attributed, declares_matryoshka,
                                      raw_variant_metadata)
from ..inputs.embeddings import embedding_metadata, is_constant, validate_embeddings
from ..errors import ArtifactIntegrityError, InputValidationError


@dataclasses.dataclass
class Embedding:
    """One validated embedding matrix plus what describes it (shape, dtype, bytes; branch and modality)."""

    matrix: Any
    metadata: dict[str, Any]


@dataclasses.dataclass
class EmbeddingSet:
    """The embeddings one job made together, by part, plus the compression facts of a compressed variant."""

    parts: dict[str | None, Embedding]
    #: What the compression did (method, dims, footprints, ``fitted_on``); None for embeddings as extracted.
    compression: dict[str, Any] | None = None

    def __getitem__(self, part: str | None) -> Embedding:
        return self.parts[part]


def _encode(embeddings: EmbeddingSet) -> StoredArtifact:
    parts = list(embeddings.parts)
    return StoredArtifact("embedding_set", {output_array(p): embeddings.parts[p].matrix for p in parts},
                          {"outputs": parts, "metadata": [embeddings.parts[p].metadata for p in parts],
                           **({} if embeddings.compression is None else {"compression": embeddings.compression})})


def _decode(stored: StoredArtifact, constant_allowed: frozenset[str] = frozenset()) -> EmbeddingSet:
    try:
        parts = stored.document["outputs"]
        metadata = stored.document["metadata"]
        compression = stored.document.get("compression")
        return EmbeddingSet({p: _described(p, stored.arrays[output_array(p)], m, p in constant_allowed)
                             for p, m in zip(parts, metadata, strict=True)},
                            None if compression is None else dict(compression))
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactIntegrityError(f"embedding_set artifact is malformed: {type(exc).__name__}: {exc}") from None


def _described(part: str | None, matrix: Any, metadata: Any, constant_allowed: bool) -> Embedding:
    """A stored part whose metadata describes its matrix: results read shape, dtype and ``logical_bytes`` from it,
    so a document without them (or with other values) is malformed, not a hit."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"the metadata of part {part!r} is a {type(metadata).__name__}, not a mapping")
    expected = embedding_metadata(matrix)
    wrong = [f"{name} is {repr(metadata[name]) if name in metadata else 'missing'} (the matrix has {value!r})"
             for name, value in expected.items() if metadata.get(name) != value]
    if wrong:
        raise ValueError(f"the metadata of part {part!r} does not describe its matrix: {', '.join(wrong)}")
    _check_stored_values(part, matrix, constant_allowed)
    return Embedding(matrix, dict(metadata))


def _check_stored_values(part: str | None, matrix: Any, constant_allowed: bool) -> None:
    """A stored matrix holds what an extraction can store: finite values (NaN or infinity never passes validation
    before it is written) and, unless ``constant_allowed``, not one constant row.  Anything else was forged or
    damaged with consistent checksums (an unsigned store), so it is corrupt -- recomputed in ``read_write`` mode --
    not a hit whose run fails later in scoring.  (An extractor whose honest output is constant is recomputed, and
    fails, as on a cold run; a part a cold run stores constant is read back as it is.)"""
    what = f"the stored {'' if part is None else _noun(part) + ' '}embeddings"
    try:
        validate_embeddings(matrix, argument=what)
    except InputValidationError as exc:
        raise ValueError(str(exc)) from None
    if not constant_allowed and matrix.shape[0] > 1 and is_constant(matrix):  # one row (one query) is no repetition
        raise ValueError(f"{what} are one row repeated throughout (a space that separates nothing)")


def embedding_set_codec(constant_allowed: frozenset[str] = frozenset(), *, cached: bool = True) -> ArtifactCodec:
    """The codec of a stage that stores an :class:`EmbeddingSet`.  ``constant_allowed``: the parts a cold run stores
    even when every row is the same (retrieval's endpoints and zero-shot prompts get a warning there, not a
    failure), which a read must then accept too, or the entry would count as corrupt and never be reused."""
    return ArtifactCodec("embedding_set", _encode, functools.partial(_decode, constant_allowed=constant_allowed),
                         cached)


#: Extractions: what the embedding cache reuses (every part refused constant, as the extraction refuses it).
EMBEDDINGS_CODEC = embedding_set_codec()
#: Compressed variants: stored for staged runs (fitted once, in `vertebrae embed`), never reused by the cache (a
#: fit is cheap next to extraction, and its runtime is measured).
COMPRESSED_CODEC = embedding_set_codec(cached=False)


#: How a message names one embedding of a part (``sample embeddings``, ``query embeddings``).
_NOUNS = {"samples": "sample", "prompts": "prompt"}


def _noun(part: str | None) -> str:
    return _NOUNS.get(part, str(part))


def parts_of(inputs: Mapping[str, Any], reads: tuple[str, ...]) -> dict[str | None, Embedding]:
    """The parts of the artifacts a stage read (an EmbeddingSet, or one Embedding: the sole part ``None``)."""
    parts: dict[str | None, Embedding] = {}
    for name in reads:
        artifact = inputs[name]
        parts.update(artifact.parts if isinstance(artifact, EmbeddingSet) else {None: artifact})
    return parts


def compress_embeddings(job: Any, inputs: Mapping[str, Any], context: Any, *, reads: tuple[str, ...],
                        fit_on: str | None, source: str) -> EmbeddingSet:
    """The compress stage of every pipeline: fit the chain's variant on part ``fit_on``, apply it to every part.

    The fitted part goes through ``fit_transform`` (for PCA, scikit-learn's own), the others through
    ``transform``, so every part lands in one space.  Parts must share one width before one is fitted.
    """
    config = EmbeddingCompressionConfig.from_dict(job.params["variant"])
    parts = parts_of(inputs, reads)
    (first, a), *others = parts.items()
    for other, b in others:
        if a.matrix.shape[1] != b.matrix.shape[1]:  # before fitting on one part
            raise InputValidationError(f"{source}: {_noun(first)} embeddings have {a.matrix.shape[1]} columns but "
                                       f"{_noun(other)} embeddings have {b.matrix.shape[1]}; both must be embedded in "
                                       "the same space (same width) before they can be compressed together")
    compressor = Compressor(config, source=source,
                            matryoshka=declares_matryoshka(context.extractor(job), job.params.get("output")))
    fitted = compressor.fit_transform(parts[fit_on].matrix)
    compressed = {part: fitted if part == fit_on else compressor.transform(embedding.matrix)
                  for part, embedding in parts.items()}
    facts = compressor.metadata(parts[fit_on].matrix, fitted)
    if len(parts) > 1:  # paired parts: a footprint each, and which one the variant was fitted on
        facts["footprint"] = {part: compressor.metadata(parts[part].matrix, compressed[part])["footprint"]
                              for part in parts}
        facts["fitted_on"] = fit_on
    return EmbeddingSet({part: Embedding(matrix, {**parts[part].metadata, **embedding_metadata(matrix)})
                         for part, matrix in compressed.items()}, facts)


def variant_facts(job: Any, inputs: Mapping[str, Any], *, reads: tuple[str, ...], fit_on: str | None,
                  result_of: str) -> dict[str, Any] | None:
    """The compression facts a result shows for its chain's variant (None without variants): the compress
    artifact's, warnings named by ``result_of``; for the ``none`` variant, each part evaluated as is."""
    if job.params["variant"] is None:
        return None
    if "compress" in inputs:
        return attributed(inputs["compress"].compression, result_of)
    config = EmbeddingCompressionConfig.from_dict(job.params["variant"])
    parts = parts_of(inputs, reads)
    facts = raw_variant_metadata(parts[fit_on].matrix, config)
    if len(parts) == 1:
        return facts
    facts["footprint"] = {part: raw_variant_metadata(e.matrix, config)["footprint"] for part, e in parts.items()}
    return {**facts, "fitted_on": None}


def evaluated(inputs: Mapping[str, Any], part: str | None, encoded: str) -> Embedding:
    """The embedding a stage analyses: part ``part`` of the chain's compressed variant when it has one, else of the
    artifact of stage ``encoded``."""
    source = inputs.get("compress") or inputs[encoded]
    return source[part] if isinstance(source, EmbeddingSet) else source

"""The stages of a screened benchmark, registered under the ``screening`` pipeline.

``extract_rows`` embeds only the rows a screening rung adds (its *increment*): the rows are part of
its key (honest keys), so the cache reuses an increment exactly when the same rows of the same
inputs are embedded by the same extractor again.  The extractor is fitted on every dataset row, as
in ``benchmark/extract``, so row i has the same embedding in every rung and in the full extraction;
a multi-output extractor embeds each increment once for all its outputs.

The finalists' ``benchmark/extract`` jobs are not run again: the screening loop
(:mod:`vertebrae.screening`) assembles each one's full-data embedding from the increments in the
dataset's row order (the same artifact a whole extraction makes, as a row-sharded extraction is:
the increments are shards of the rows) and settles it through the cache under the job's own key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .benchmark_stages import fit_extractor, transform_rows
from .embedding_set import EMBEDDINGS_CODEC, Embedding, EmbeddingSet
from .embeddings import embedding_metadata, validate_embeddings
from .execution.registry import EMBED, stage
from .fingerprint import content_sha256
from .image_inputs import ImageInputs
from .multimodal import MultiModalInputs

PIPELINE = "screening"


def _rows_config(settings: Any, chain: Any) -> dict[str, Any] | None:
    """The increment's rows (a content hash) when planning a rung; None (not planned) otherwise."""
    rows = getattr(settings, "increment", None)
    return None if rows is None else {"rows": content_sha256(rows), "n_rows": int(rows.size)}


@stage(PIPELINE, "extract_rows", version=1, context=("inputs", "fit_targets", "extractor"), packages=("numpy",),
       config=_rows_config, codec=EMBEDDINGS_CODEC, phase=EMBED, runtime="seconds_and_steps", final=True)
def extract_rows(job: Any, inputs: Mapping[str, Any], context: Any, timings: dict[str, float]) -> EmbeddingSet:
    """Fit the extractor on every row (as ``benchmark/extract`` does), embed only the increment's rows.

    An extractor that declares ``shardable = False`` (a precomputed matrix: nothing to compute, and it ignores the
    rows it is given) is asked for every row, and the increment's rows are taken from its output.
    """
    rows = context.settings.increment
    extractor = fit_extractor(job, context)
    inputs = context.dataset.extractor_input
    if getattr(extractor, "shardable", True):
        outputs = transform_rows(job, extractor, rows_of(inputs, rows), None, timings)
    else:
        outputs = {output: rows_of(raw, rows) for output, raw in transform_rows(job, extractor, inputs).items()}
    name = job.params["parent"]
    return EmbeddingSet({output: _validated(raw, rows.size, f"extractor {name!r}" + (
        "" if output is None else f" output {output!r}")) for output, raw in outputs.items()})


def _validated(raw: Any, n_rows: int, source: str) -> Embedding:
    matrix = validate_embeddings(raw, argument="output", n_rows=n_rows, source=source)
    return Embedding(matrix, embedding_metadata(matrix))


def rows_of(inputs: Any, rows: Any) -> Any:
    """The given rows of an extractor input (an array, a sparse matrix, a DataFrame, a sequence, multi-modal fields;
    lazy images stay lazy)."""
    if isinstance(inputs, MultiModalInputs):
        return MultiModalInputs({field: rows_of(values, rows) for field, _, values in inputs}, inputs.modalities)
    if isinstance(inputs, ImageInputs):
        return inputs.subset(rows)
    if hasattr(inputs, "iloc"):
        return inputs.iloc[rows]
    if hasattr(inputs, "shape"):
        return inputs[rows]
    return [inputs[int(i)] for i in rows]

"""The report section for compression variants: the quality/size frontier per source embedding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..extractors.compression import frontier_rows, not_applied_names
from .document import Code, Para, Section, Strong, Table

COLUMNS = ["source", "variant", "method", "requested dim", "output dim", "applied", "stored as", "primary score",
           "raw B/row", "evaluated B/row", "size ratio", "explained variance", "frontier"]


def compression_section(data: Mapping[str, Any]) -> Section | None:
    """Each source embedding's variants, score against evaluated bytes per row; None without variants."""
    rows = frontier_rows(data["extractor_results"])
    if not rows:
        return None
    primary = rows[0]["primary_metric"]
    blocks: list[Any] = [
        Para("Per source embedding, each variant's ", Strong(primary), " against the bytes one evaluated row is "
             "stored in (quantized codes at their stored width; int8 includes its per-dimension scales, amortized "
             "over the rows). ", Code("frontier"), " marks the variants no other variant of the same source "
             "dominates (a score at least as good in no more bytes, strictly better in one). Fitted compressions "
             "were fitted on the evaluated rows themselves (transductive), the same way for every variant."),
        Table(COLUMNS, [[r["source"], r["variant"], r["method"], r["requested_dim"], r["output_dim"], r["applied"],
                         r["stored_dtype"], r["primary_score"], r["raw_bytes_per_row"], r["evaluated_bytes_per_row"],
                         r["size_ratio"], r["explained_variance_ratio"], r["frontier"]] for r in rows])]
    skipped = not_applied_names(data["extractor_results"])
    if skipped:
        blocks.append(Para("Not applied (scored uncompressed): " + "; ".join(skipped)))
    return Section("Compression frontier", blocks)

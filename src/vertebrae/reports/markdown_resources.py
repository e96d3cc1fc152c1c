"""Markdown for resource profiles: a separate cost table for the quality cohort (the ranking stays quality-only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..profiling import latency_mismatches, profile_value
from .markdown_table import table, text

#: (header, profile section, field) of the cohort resource table.
COLUMNS = [("first call s", "latency", "first_call_seconds"), ("warm calls", "latency", "warm_count"),
           ("warm median s", "latency", "warm_median_seconds"), ("warm p90 s", "latency", "warm_p90_seconds"),
           ("clock", "latency", "clock"), ("samples/s", "throughput", "samples_per_second"),
           ("peak RSS B", "host_memory", "peak_rss_bytes"), ("RSS increase B", "host_memory", "peak_increase_bytes"),
           ("device peak B", "device_memory", "peak_allocated_bytes"), ("device memory", "device_memory", "status"),
           ("parameters", "model", "parameter_count"), ("parameter B", "model", "parameter_bytes"),
           ("checkpoint B", "model", "checkpoint_bytes"), ("raw embedding B", "embedding_bytes", "raw_logical_bytes"),
           ("evaluated embedding B", "embedding_bytes", "evaluated_logical_bytes"),
           ("batch", "context", "batch_size"), ("device", "context", "device"), ("precision", "context", "precision"),
           ("sync", "context", "synchronization")]


def resource_section(data: Mapping[str, Any]) -> str:
    """The quality cohort's measured resources, one table per scored view; empty without profiles."""
    from ..results import result_from_dict

    result = result_from_dict(data)
    if not any(r.resource_profile for r in result.extractor_results):
        return ""
    lines = ["## Quality cohort resources\n",
             f"Candidates within {text(data['metadata'].get('quality_tolerance'))} of the best primary score (results "
             "with an invalid aggregate are excluded), in ranking order. These costs never change the ranking above "
             "and are not combined with the score; pick the cheaper of nearly equal candidates. Fields: "
             "docs/profiling.md.\n"]
    for view in result.views():
        cohort = result.quality_cohort(view=view)
        if view is not None:
            lines.append(f"### {text(view)}\n")
        if not cohort:
            lines.append("No valid aggregate: the quality cohort and its resource table are unavailable.\n")
            continue
        rows = [[r.name, r.primary_score, profile_value(r.resource_profile, None, "status"),
                 *(profile_value(r.resource_profile, section, field) for _, section, field in COLUMNS)]
                for r in cohort]
        lines.append(table(["extractor", "primary score", "profile", *(h for h, _, _ in COLUMNS)], rows))
        mismatched = latency_mismatches([r.resource_profile for r in cohort])
        if mismatched:
            lines.append("Latencies are **not comparable** here: " + ", ".join(mismatched) + " differ between these "
                         "candidates (compare latency only under the same batch size, workload, device, precision "
                         "and synchronization).\n")
        elif len(cohort) > 1:
            lines.append("Latencies were measured under the same batch size, workload, device, precision and "
                         "synchronization.\n")
    return "\n".join(lines)

"""The report section for resource profiles: a separate cost table for the quality cohort (the ranking stays
quality-only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..extractors.profiling import latency_mismatches, profile_value
from .document import Para, Section, Strong, Table, section_markdown

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


def resource_section(data: Mapping[str, Any]) -> Section | None:
    """The quality cohort's measured resources, one table per scored view; None without profiles."""
    from ..families.result_protocol import result_from_dict

    result = result_from_dict(data)
    if not any(r.resource_profile for r in result.extractor_results):
        return None
    blocks: list[Any] = [_heading(data["metadata"].get("quality_tolerance"))]
    for view in result.views():
        table_blocks = cohort_table(result.quality_cohort(view=view), (None,))
        blocks += table_blocks if view is None else [Section(view, table_blocks, level=3)]
    return Section("Quality cohort resources", blocks)


def endpoint_resource_section(result: Any, endpoints: tuple[str, ...], tolerance: float | None = None) -> str:
    """Retrieval (query, gallery) and zero-shot (samples, prompts): the cohort's encodings of each endpoint as
    separate rows (endpoint profiles are never merged)."""
    if not any(e.resource_profile for e in result.extractor_results):
        return ""
    tolerance = result._default_tolerance() if tolerance is None else tolerance  # the family's own default
    return section_markdown(Section("Quality cohort resources", [
        _heading(tolerance), *cohort_table(result.quality_cohort(tolerance), endpoints)]))


#: (header, context field) an endpoint table adds: what each endpoint's measurement is of.
ENDPOINT_COLUMNS = [("modality", "modality"), ("cache", "cache_status"), ("scope", "measurement_scope")]


#: (header, field of the profile's ``distributed`` section) of the distributed-extraction table.
DISTRIBUTED_COLUMNS = [("workers", "workers"), ("shards", "shards"), ("shards reused", "shards_reused"),
                       ("worker-first latency s", "worker_first_latency_seconds"),
                       ("max worker memory B", "max_worker_memory_bytes"),
                       ("aggregate compute samples/s", "aggregate_compute_throughput"),
                       ("throughput kind", "throughput_kind")]


def _distributed_table(profiles: list[tuple[Any, Any]], endpoint: str | None) -> list[Any]:
    """The cluster facts of distributed profiles (none for a local run), with what their throughput means."""
    distributed = [(r, p) for r, p in profiles if (p or {}).get("scope") == "distributed"]
    if not distributed:
        return []
    rows = [[r.name, *([] if endpoint is None else [endpoint]),
             *(profile_value(p, "distributed", field) for _, field in DISTRIBUTED_COLUMNS)] for r, p in distributed]
    return [Para("Extracted on a cluster: worker-first latency is the slowest worker's first call (its cold start), "
                 "memory the highest worker RSS, and samples/s (here and above) the ",
                 Strong("aggregate worker compute"),
                 " throughput, materialized samples / summed worker compute seconds: not cluster wall-clock "
                 "throughput."),
            Table(["extractor", *([] if endpoint is None else ["endpoint"]), *(h for h, _ in DISTRIBUTED_COLUMNS)],
                  rows)]


def _heading(tolerance: Any) -> Para:
    return Para(f"Candidates within {tolerance} of the best primary score (results with an invalid aggregate are "
                "excluded), in ranking order. These costs never change the ranking above and are not combined with the "
                "score; pick the cheaper of nearly equal candidates. Fields: docs/profiling.md.")


def cohort_table(cohort: list[Any], endpoints: tuple[str | None, ...]) -> list[Any]:
    """One row per cohort member (and endpoint), then whether their latencies are comparable."""
    if not cohort:
        return [Para("No valid aggregate: the quality cohort and its resource table are unavailable.")]
    lines: list[Any] = []
    for endpoint in endpoints:
        profiles = [(r, r.resource_profile if endpoint is None else (r.resource_profile or {}).get(endpoint))
                    for r in cohort]
        extra = [] if endpoint is None else ENDPOINT_COLUMNS
        rows = [[r.name, *([] if endpoint is None else [endpoint]), r.primary_score,
                 profile_value(p, None, "status"), *(profile_value(p, section, field) for _, section, field in COLUMNS),
                 *(profile_value(p, "context", field) for _, field in extra)]
                for r, p in profiles]
        lines.append(Table(["extractor", *([] if endpoint is None else ["endpoint"]), "primary score", "profile",
                            *(h for h, _, _ in COLUMNS), *(h for h, _ in extra)], rows))
        lines += _distributed_table(profiles, endpoint)
        mismatched = latency_mismatches([p for _, p in profiles])
        where = "" if endpoint is None else f" ({endpoint} encodings)"
        if mismatched:
            lines.append(Para(f"Latencies{where} are ", Strong("not comparable"), " here: " + ", ".join(mismatched)
                              + " differ between these candidates (compare latency only under the same batch size, "
                              "workload, device, precision and synchronization)."))
        elif len(cohort) > 1:
            lines.append(Para(f"Latencies{where} were measured under the same batch size, workload, device, precision "
                              "and synchronization."))
    return lines

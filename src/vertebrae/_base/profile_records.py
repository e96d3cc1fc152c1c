"""Resource profile records: their schema constants, the record of an extraction a cache served, and how the
measurements of one job's tasks on several cluster workers merge into one profile.

The extractor measurement itself is :mod:`vertebrae.extractors.profiling`; this is the part the execution core needs
(the dask runner merges its workers' measurements, docs/profiling.md) without reaching any extractor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

#: The timings entry of the extract job that carries its measurements (not a number: never a runtime column).
PROFILE_KEY = "resource_profile"
#: The profile layout's version (docs/profiling.md).
SCHEMA = 1
#: A profile's status when the embedding came from a cache and the extractor never ran.
CACHE_HIT = "not_measured_cache_hit"

#: ``throughput_kind`` of a distributed profile: what its samples per second divide by.
AGGREGATE_WORKER_COMPUTE = "aggregate_worker_compute"
AGGREGATE_NOTE = ("materialized samples / summed worker compute seconds (each measured task's extractor time on its "
                  "worker, added up); NOT cluster wall-clock throughput, which also depends on how many workers ran "
                  "at once, scheduling and data transfer")


@dataclasses.dataclass
class WorkerMeasurement:
    """One profiled extractor call on a cluster worker: a row shard's transform, or a whole extract job."""

    worker: str
    #: Wall-clock start (``time.time()``): orders one worker's measurements, so its first (cold) one is known.
    started: float
    profile: dict[str, Any]
    #: (seconds, rows) of every batch call, first call first; None for a whole job (then it is the only one).
    calls: list[tuple[float, int]] | None = None


def distributed_profile(parts: list[WorkerMeasurement], shards: int = 1, shards_reused: int = 0) -> dict[str, Any]:
    """One extract job's profile from its measured tasks on the workers (docs/profiling.md, distributed runs).

    Every measured task counts once: samples and compute seconds add up.  Each worker's first call is its
    cold start (worker-first latency); every other call is warm.  Memory is the highest worker peak.
    """
    if not parts:
        return cache_hit_profile("every row shard came from the store (stored by an earlier run); the extractor "
                                 "was not called")
    parts = sorted(parts, key=lambda part: part.started)
    by_worker: dict[str, list[WorkerMeasurement]] = {}
    for part in parts:
        by_worker.setdefault(part.worker, []).append(part)
    per_worker = [_worker_summary(worker, measured) for worker, measured in sorted(by_worker.items())]
    samples = sum(part.profile["throughput"]["samples"] for part in parts)
    compute = sum(part.profile["throughput"]["wall_seconds"] for part in parts)
    rate = samples / compute if compute > 0 else None
    host = _highest(parts, "host_memory", "peak_rss_bytes")
    first = parts[0].profile
    return {"schema": SCHEMA, "status": "measured", "scope": "distributed",
            "latency": _pooled_latency(parts, by_worker),
            "throughput": {"samples": samples, "compute_seconds": compute, "samples_per_second": rate,
                           "throughput_kind": AGGREGATE_WORKER_COMPUTE, "note": AGGREGATE_NOTE},
            "host_memory": host, "device_memory": _highest(parts, "device_memory", "peak_allocated_bytes"),
            "model": first["model"], "context": {**first["context"], "workload": _workload(parts)},
            "distributed": {"workers": len(by_worker), "shards": shards, "shards_measured": len(parts),
                            "shards_reused": shards_reused,
                            "worker_first_latency_seconds": max(w["first_call_seconds"] for w in per_worker),
                            "max_worker_memory_bytes": host.get("peak_rss_bytes"),
                            "aggregate_compute_throughput": rate, "samples": samples, "compute_seconds": compute,
                            "throughput_kind": AGGREGATE_WORKER_COMPUTE, "throughput_note": AGGREGATE_NOTE,
                            "per_worker": per_worker}}


def _worker_summary(worker: str, measured: list[WorkerMeasurement]) -> dict[str, Any]:
    peaks = [m.profile["host_memory"]["peak_rss_bytes"] for m in measured
             if m.profile["host_memory"]["peak_rss_bytes"] is not None]
    latency = measured[0].profile["latency"]
    return {"worker": worker, "shards": len(measured),
            "samples": sum(m.profile["throughput"]["samples"] for m in measured),
            "compute_seconds": sum(m.profile["throughput"]["wall_seconds"] for m in measured),
            "first_call_seconds": latency["first_call_seconds"], "first_call_rows": latency["first_call_rows"],
            "peak_rss_bytes": max(peaks) if peaks else None}


def _pooled_latency(parts: list[WorkerMeasurement], by_worker: dict[str, list[WorkerMeasurement]]) -> dict[str, Any]:
    """``first_call_*``: the slowest worker-first call; warm statistics: every other call of every task."""
    if len(parts) == 1:
        return {**parts[0].profile["latency"], "first_call_scope": "slowest_worker_first_call"}
    cold = {id(measured[0]) for measured in by_worker.values()}
    first = max(measured[0].calls[0] for measured in by_worker.values())
    warm = [seconds for part in parts for i, (seconds, _) in enumerate(part.calls) if i or id(part) not in cold]
    clocks = {part.profile["latency"]["clock"] for part in parts}
    clock = clocks.pop() if len(clocks) == 1 else "host_observed"
    return {**latency_summary(first, warm, sum(len(part.calls) for part in parts), clock),
            "first_call_scope": "slowest_worker_first_call"}


def _highest(parts: list[WorkerMeasurement], section: str, field: str) -> dict[str, Any]:
    """The section of the task with the highest measured ``field`` (and its worker), else the first task's."""
    measured = [part for part in parts if part.profile[section].get(field) is not None]
    if not measured:
        return dict(parts[0].profile[section])
    top = max(measured, key=lambda part: part.profile[section][field])
    return {**top.profile[section], "worker": top.worker, "scope": "max_over_workers"}


def _workload(parts: list[WorkerMeasurement]) -> dict[str, Any]:
    workload = dict(parts[0].profile["context"]["workload"])
    for field in ("rows", "total_characters"):
        if field in workload:
            workload[field] = sum(part.profile["context"]["workload"][field] for part in parts)
    return workload


def latency_summary(first: tuple[float, int], warm_seconds: list[float], calls: int, clock: str) -> dict[str, Any]:
    """The ``latency`` section: the first (cold) call, then the distribution of the warm ones."""
    warm = np.asarray(warm_seconds, dtype=float)
    latency: dict[str, Any] = {
        "calls": calls, "first_call_seconds": first[0], "first_call_rows": first[1], "clock": clock,
        "warm_status": "measured" if warm.size else "single_call",
        "warm_reason": None if warm.size else "one extractor call: there are no warm calls to summarize",
        "warm_count": int(warm.size)}
    for name, value in (("mean", np.mean), ("median", np.median), ("p90", lambda a: np.percentile(a, 90)),
                        ("max", np.max)):
        latency[f"warm_{name}_seconds"] = float(value(warm)) if warm.size else None
    return latency


def cache_hit_profile(reason: str = "the embedding came from a cache; the extractor was not called") -> dict[str, Any]:
    """The inference part of a profile whose embedding came from a cache (the extractor never ran)."""
    return {"schema": SCHEMA, "status": CACHE_HIT, "reason": reason,
            **{part: {"status": CACHE_HIT, "reason": reason}
               for part in ("latency", "throughput", "host_memory", "device_memory", "model", "context")}}

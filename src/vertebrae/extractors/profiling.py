"""Resource profiles: what one extraction cost (latency, throughput, memory, model and embedding bytes).

``Benchmark(..., resource_profiling=ResourceProfilingConfig())`` measures the extract
stage where it runs: :class:`ExtractionProfiler` times every real batch call of the
neural extractors (through :func:`vertebrae.extractors.batching.observe_batches`), or
the one ``transform`` call of any other extractor, and samples host RSS in a thread.
The measurements travel beside the artifact (in the job's timings side channel under
:data:`~vertebrae._base.profile_records.PROFILE_KEY`), never inside it, so a cached embedding stays
the same bytes; a cache hit did not run the extractor and reports ``not_measured_cache_hit``.  On a dask
cluster each task measures its calls on its worker (:func:`measure_on_worker`) and
:func:`~vertebrae._base.profile_records.distributed_profile` merges them (worker-first latency,
maximum worker memory, aggregate worker-compute throughput).
Every field is described in docs/profiling.md.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from .._base.config import Config, check_bool, check_float
from ..errors import SerializationError
from .._base.fingerprint import package_version
from .._base.profile_records import CACHE_HIT, SCHEMA, WorkerMeasurement, cache_hit_profile, latency_summary

WEIGHT_DTYPE_NOTE = "dtypes of the stored weights, not the execution or autocast precision"
#: Framework packages whose versions are recorded when the extraction imported them.
FRAMEWORKS = {"torch": "torch", "transformers": "transformers", "sentence_transformers": "sentence-transformers",
              "onnxruntime": "onnxruntime", "sklearn": "scikit-learn", "keras": "keras", "jax": "jax"}


@dataclasses.dataclass(frozen=True)
class ResourceProfilingConfig(Config):
    """Measure each extraction's resources locally (results gain ``resource_profile``).

    ``rss_interval_seconds`` is how often a thread samples host RSS (a peak shorter
    than that can be missed); ``synchronize`` waits for queued CUDA/MPS work around
    every batch so latencies are device-complete (False: host-observed latencies).
    """

    enabled: bool = True
    rss_interval_seconds: float = 0.01
    synchronize: bool = True

    def _validate(self) -> None:
        name = type(self).__name__
        self._set("enabled", check_bool(name, "enabled", self.enabled))
        self._set("rss_interval_seconds", check_float(name, "rss_interval_seconds", self.rss_interval_seconds,
                                                      low=0.0001, high=10.0))
        self._set("synchronize", check_bool(name, "synchronize", self.synchronize))


# ----------------------------------------------------------------------------- host memory
def _rss_reader() -> tuple[str, Callable[[], int]] | None:
    """(source, read current RSS bytes): psutil when installed, else Linux /proc; None where neither works."""
    try:
        import psutil

        process = psutil.Process()
        return "psutil", lambda: int(process.memory_info().rss)
    except ImportError:
        pass
    statm = Path("/proc/self/statm")
    if statm.exists():  # resident pages are its second field; one short line, cheap to read at a high rate
        page = os.sysconf("SC_PAGE_SIZE")
        return "proc_statm", lambda: int(statm.read_bytes().split()[1]) * page
    return None


class RssSampler:
    """Samples host RSS in a daemon thread between ``start`` and ``stop`` (baseline read before starting)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.reader = _rss_reader()
        self.baseline = self.peak = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        value = self.reader[1]()
        self.peak = value if self.peak is None else max(self.peak, value)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> None:
        if self.reader is None:
            return
        self.baseline = self.reader[1]()
        self.peak, self.samples = self.baseline, 1
        self._thread = threading.Thread(target=self._loop, name="vertebrae-rss", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        if self.reader is None:
            return {"status": "unavailable", "reason": "neither psutil nor /proc/self/statm can read RSS here",
                    "source": None, "baseline_rss_bytes": None, "peak_rss_bytes": None, "peak_increase_bytes": None,
                    "samples": 0, "interval_seconds": self.interval}
        self._stop.set()
        self._thread.join()
        self._sample()  # the end of the window counts too
        return {"status": "measured", "reason": None, "source": self.reader[0], "baseline_rss_bytes": self.baseline,
                "peak_rss_bytes": self.peak, "peak_increase_bytes": self.peak - self.baseline,
                "samples": self.samples, "interval_seconds": self.interval}


# ----------------------------------------------------------------------------- torch facts
def torch_module(extractor: Any) -> Any:
    """The extractor's loaded ``nn.Module`` (torch, sentence-transformers, Hugging Face), else None."""
    torch = sys.modules.get("torch")
    model = getattr(extractor, "model_", None)
    return model if torch is not None and isinstance(model, torch.nn.Module) else None


def _devices(module: Any) -> list[str]:
    return sorted({str(t.device) for t in (*module.parameters(), *module.buffers())})


def framework_facts(extractor: Any) -> dict[str, dict[str, Any]]:
    """What a non-torch model extractor (Keras, JAX) reports about itself: ``{section: fields}`` overrides.

    Such an extractor defines ``profile_facts()`` (sections ``model``, ``device_memory``, ``context``),
    because only its own framework knows its weights and where they are; see docs/profiling.md.
    """
    facts = getattr(extractor, "profile_facts", None)
    return facts() if callable(facts) else {}


def model_footprint(extractor: Any, framework: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parameter, buffer and checkpoint bytes of the extractor's model; each part has its own status.

    ``framework``: the extractor's own ``model`` facts (:func:`framework_facts`) when it holds no torch module.
    """
    module = torch_module(extractor)
    facts: dict[str, Any] = {"parameter_count": None, "parameter_bytes": None, "trainable_parameter_count": None,
                             "trainable_parameter_bytes": None, "buffer_bytes": None, "in_memory_bytes": None,
                             "weight_dtypes": None, "weight_dtypes_note": WEIGHT_DTYPE_NOTE}
    if module is not None:
        parameters, buffers = list(module.parameters()), list(module.buffers())
        trainable = [p for p in parameters if p.requires_grad]
        parameter_bytes = sum(p.numel() * p.element_size() for p in parameters)
        buffer_bytes = sum(b.numel() * b.element_size() for b in buffers)
        facts.update(parameter_count=sum(p.numel() for p in parameters), parameter_bytes=parameter_bytes,
                     trainable_parameter_count=sum(p.numel() for p in trainable),
                     trainable_parameter_bytes=sum(p.numel() * p.element_size() for p in trainable),
                     buffer_bytes=buffer_bytes, in_memory_bytes=parameter_bytes + buffer_bytes,
                     weight_dtypes=sorted({str(t.dtype).removeprefix("torch.") for t in (*parameters, *buffers)}))
        facts.update(parameter_status="measured", parameter_reason=None)
    elif framework:
        facts.update(framework)
    else:
        reason = ("ONNX graph parameters are not inspected" if hasattr(extractor, "session_")
                  else "the extractor holds no torch module to inspect")
        facts.update(parameter_status="unavailable", parameter_reason=reason)
    files = checkpoint_files(extractor)
    if files:
        facts.update(checkpoint_status="measured", checkpoint_reason=None, checkpoint_files=len(files),
                     checkpoint_bytes=sum(f.stat().st_size for f in files))
    else:
        facts.update(checkpoint_status="unavailable", checkpoint_files=0, checkpoint_bytes=None,
                     checkpoint_reason="the extractor declares no model files (an in-memory model)")
    measured = [facts["parameter_status"] == "measured", facts["checkpoint_status"] == "measured"]
    facts["status"] = "measured" if all(measured) else "partial" if any(measured) else "unavailable"
    return facts


def checkpoint_files(extractor: Any) -> list[Path]:
    """Every file the extractor loads its model from: model folder, TorchScript/ONNX file, checkpoint paths."""
    declared: list[Path] = []
    for attribute in ("model_dir", "script_path", "model_path"):
        value = getattr(extractor, attribute, None)
        if isinstance(value, (str, os.PathLike)):
            declared.append(Path(value))
    declared += [Path(p) for p in getattr(extractor, "checkpoint_paths", None) or ()]
    declared += [Path(p) for p in getattr(extractor, "model_files", None) or ()]  # ONNX external data
    files: list[Path] = []
    for path in declared:
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
    return sorted(set(files))


# ----------------------------------------------------------------------------- the profiler
class ExtractionProfiler:
    """Measures one extract stage call: wrap ``transform`` in :meth:`measure`, pass :meth:`batch` as batch hook."""

    def __init__(self, config: ResourceProfilingConfig, extractor: Any, X: Any) -> None:
        self.config, self.extractor = config, extractor
        self.inputs = describe_inputs(X)
        self.n_samples = self.inputs["rows"]
        self.calls: list[tuple[float, int]] = []  # (seconds, rows) per extractor batch call
        self.sync_failures: list[str] = []
        self.synchronized_boundaries = 0
        self.device: Any = None
        self.device_after: Any = None
        self.allocator: DeviceAllocator | None = None
        self._started = 0.0

    # -- device ---------------------------------------------------------------
    def _synchronize(self) -> None:
        torch = sys.modules.get("torch")
        device = self.device
        if torch is None or device is None or device.type not in ("cuda", "mps") or not self.config.synchronize:
            return
        try:
            torch.cuda.synchronize(device) if device.type == "cuda" else torch.mps.synchronize()
            self.synchronized_boundaries += 1
        except Exception as exc:  # a boundary that could not be synchronized makes latency host-observed
            self.sync_failures.append(f"{type(exc).__name__}: {exc}")

    def _resolve_device(self) -> Any:
        """Where the extraction runs, read inside the batch call: the model's parameters once it is loaded (the
        extractors move it there), else the declared device; ``("multi", devices)`` for a model on several."""
        module = torch_module(self.extractor)
        torch = sys.modules.get("torch")
        declared = getattr(self.extractor, "device", None)
        if torch is None or not isinstance(declared, str):
            return None
        devices = [] if module is None else _devices(module)
        if devices:  # a model without parameters or buffers (nn.Tanh()) runs where it is declared to
            return torch.device(devices[0]) if len(devices) == 1 else ("multi", devices)
        from .torch import resolve_device

        resolved = resolve_device(declared, where=f"extractor {self.extractor.name!r}")
        if resolved.type == "cuda" and resolved.index is None:  # the same spelling parameters report
            resolved = torch.device("cuda", torch.cuda.current_device())
        return resolved

    # -- hooks ----------------------------------------------------------------
    def batch(self, embed: Callable[[Any], Any], rows: Any) -> Any:
        """The batch hook: one timed (synchronized when supported) extractor call.

        The first call opens the device window (allocator baseline, peak reset) on the device the model is on
        then; every call re-reads it, so a model that moves is noticed.
        """
        if self.allocator is None:
            device = self._resolve_device()
            self.device = None if isinstance(device, tuple) else device  # several devices: none to synchronize
            self.allocator = DeviceAllocator(device)
            self.allocator.start()
        self._synchronize()
        start = time.perf_counter()
        out = embed(rows)
        self._synchronize()
        end = time.perf_counter()
        self.device_after = self._resolve_device()
        # The first call counts from the start of transform, so it includes lazy model loading.
        self.calls.append(((end - self._started) if not self.calls else (end - start), len(rows)))
        return out

    def measure(self, transform: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
        """Run ``transform()`` under measurement; return (its outputs, the inference profile)."""
        from .batching import observe_batches

        rss = RssSampler(self.config.rss_interval_seconds)
        rss.start()
        try:
            self._started = time.perf_counter()
            with observe_batches(self.batch):
                outputs = transform()
            wall = time.perf_counter() - self._started
        finally:  # a failing extractor must not leave the sampler thread running
            host = rss.stop()
        if self.allocator is None:  # not a batched extractor: the one transform call is the one observed call
            self.calls.append((wall, self.n_samples))
            self.allocator = DeviceAllocator(None)
        device_memory = self.allocator.stop(self.device_after, calls=len(self.calls), sync_failures=self.sync_failures)
        return outputs, self._profile(wall, host, device_memory, self.allocator.device)

    # -- report ---------------------------------------------------------------
    def _profile(self, wall: float, host: dict[str, Any], device_memory: dict[str, Any], device: Any) -> dict[str, Any]:
        cuda_like = device is not None and not isinstance(device, tuple) and device.type in ("cuda", "mps")
        if not cuda_like:
            synchronization = "not_required_cpu" if device is not None else "not_applicable"
        elif not self.config.synchronize:
            synchronization = "disabled"
        else:
            synchronization = "failed" if self.sync_failures else "synchronized"
        framework = framework_facts(self.extractor)
        return {"schema": SCHEMA, "status": "measured", "latency": self._latency(synchronization),
                "throughput": {"samples": self.n_samples, "wall_seconds": wall,
                               "samples_per_second": self.n_samples / wall if wall > 0 else None},
                "host_memory": host, "device_memory": {**device_memory, **framework.get("device_memory", {})},
                "model": model_footprint(self.extractor, framework.get("model")),
                "context": {**self._context(device, synchronization), **framework.get("context", {})}}

    def _latency(self, synchronization: str) -> dict[str, Any]:
        clock = "device_synchronized" if synchronization == "synchronized" else "host_observed"
        return latency_summary(self.calls[0], [s for s, _ in self.calls[1:]], len(self.calls), clock)

    def _context(self, device: Any, synchronization: str) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        module = torch_module(self.extractor)
        dtypes = None if module is None else sorted({str(p.dtype).removeprefix("torch.") for p in module.parameters()})
        return {"batch_size": getattr(self.extractor, "batch_size", None), "workload": self.inputs,
                "device": None if device is None else (str(device) if not isinstance(device, tuple)
                                                       else ",".join(device[1])),
                "precision": None if not dtypes else ",".join(dtypes), "precision_source": "stored_weights"
                if dtypes else None, "torch_threads": None if torch is None else torch.get_num_threads(),
                "cpu_count": os.cpu_count(), "synchronization": synchronization,
                "synchronized_boundaries": self.synchronized_boundaries,
                "synchronization_failures": list(self.sync_failures),
                "framework_versions": {package: package_version(package) for module_name, package
                                       in FRAMEWORKS.items() if module_name in sys.modules}}


class DeviceAllocator:
    """The torch CUDA allocator window: baseline, reset peak counters, absolute peak and peak increase."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.baseline: int | None = None
        self.reason: str | None = None

    def start(self) -> None:
        torch, device = sys.modules.get("torch"), self.device
        if device is None or isinstance(device, tuple) or device.type != "cuda":
            return
        try:
            torch.cuda.synchronize(device)
            self.baseline = int(torch.cuda.memory_allocated(device))
            torch.cuda.reset_peak_memory_stats(device)
        except Exception as exc:
            self.reason = f"could not reset the allocator peak counters: {type(exc).__name__}: {exc}"

    def stop(self, device_after: Any, *, calls: int, sync_failures: list[str]) -> dict[str, Any]:
        empty = {"device": None, "baseline_allocated_bytes": None, "peak_allocated_bytes": None,
                 "peak_increase_bytes": None, "measurement_scope": None}
        device = self.device
        if isinstance(device, tuple):
            return {**empty, "status": "unavailable", "reason": f"the model spans several devices {device[1]}"}
        if device is None or device.type == "cpu":
            return {**empty, "status": "not_applicable",
                    "reason": "CPU allocator memory is not tracked; host RSS is the portable measure"
                    if device is not None else "not a torch extractor; host RSS is the portable measure"}
        if device.type != "cuda":
            return {**empty, "device": str(device), "status": "unavailable",
                    "reason": f"allocator peaks are read for CUDA only, not {device.type}"}
        torch = sys.modules["torch"]
        if self.reason is None and device_after != device:
            self.reason = f"the model moved from {device} to {device_after} during extraction"
        if self.reason is None and sync_failures:
            self.reason = "a synchronization boundary failed: " + sync_failures[0]
        if self.reason is None and calls < 1:
            self.reason = "no extractor call was observed"
        if self.reason is None:
            try:
                torch.cuda.synchronize(device)
                peak = int(torch.cuda.max_memory_allocated(device))
            except Exception as exc:
                self.reason = f"could not read the allocator peak: {type(exc).__name__}: {exc}"
            else:
                return {"device": str(device), "status": "measured", "reason": None,
                        "baseline_allocated_bytes": self.baseline, "peak_allocated_bytes": peak,
                        "peak_increase_bytes": peak - self.baseline, "measurement_scope": "profile_window"}
        return {**empty, "device": str(device), "baseline_allocated_bytes": self.baseline, "status": "unavailable",
                "reason": self.reason}


def describe_inputs(X: Any) -> dict[str, Any]:
    """The input workload: how many rows, of what kind (texts also by total characters)."""
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    if isinstance(X, (list, tuple)) and X and all(isinstance(x, str) for x in X):
        return {"rows": int(n), "kind": "text", "total_characters": int(sum(len(x) for x in X))}
    shape = list(getattr(X, "shape", ())[1:])
    return {"rows": int(n), "kind": type(X).__name__, "row_shape": shape or None}


def profile_extraction(config: ResourceProfilingConfig, extractor: Any, X: Any,
                       transform: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """Run ``transform()`` (the extractor call of the extract stage) and measure it."""
    return ExtractionProfiler(config, extractor, X).measure(transform)


# ----------------------------------------------------------------------------- typed profiles
#: What an endpoint profile's context adds (retrieval query/gallery, zero-shot samples/prompts): which branch,
#: its declared modality, its encode job's cache status and what the measurement covers.
ENDPOINT_CONTEXT = ("branch", "modality", "cache_status", "measurement_scope")
_STATUS = frozenset({"status", "reason"})  # a cache hit's sections hold only these
_LATENCY = frozenset({"calls", "first_call_seconds", "first_call_rows", "clock", "warm_status", "warm_reason",
                      "warm_count", "warm_mean_seconds", "warm_median_seconds", "warm_p90_seconds", "warm_max_seconds"})
_HOST = frozenset({"source", "baseline_rss_bytes", "peak_rss_bytes", "peak_increase_bytes", "samples",
                   "interval_seconds"})
_DEVICE = frozenset({"device", "baseline_allocated_bytes", "peak_allocated_bytes", "peak_increase_bytes",
                     "measurement_scope"})
_MODEL = frozenset({"parameter_count", "parameter_bytes", "trainable_parameter_count", "trainable_parameter_bytes",
                    "buffer_bytes", "buffer_reason", "in_memory_bytes", "weight_dtypes", "weight_dtypes_note",
                    "parameter_status", "parameter_reason", "checkpoint_status", "checkpoint_reason", "checkpoint_files",
                    "checkpoint_bytes"})
_CONTEXT = frozenset({"batch_size", "workload", "device", "precision", "precision_source", "torch_threads",
                      "cpu_count", "synchronization", "synchronized_boundaries", "synchronization_failures",
                      "framework_versions", *ENDPOINT_CONTEXT})
_EMBEDDING = frozenset({"raw_logical_bytes", "evaluated_logical_bytes", "persisted_status", "persisted_bytes",
                        "persisted_reason"})
_MAX_OVER_WORKERS = frozenset({"worker", "scope"})


class ResourceProfile(dict):
    """One extraction's resource profile, typed by where it was measured.

    It is the dict the JSON holds (reports, columns and figures read it as one, and it
    serializes byte-identically); :meth:`load` rebuilds the right type from a document and
    rejects a field this version does not write, naming its path.  ``SECTIONS`` lists
    each section's fields; the top level may hold the sections, ``schema``, ``status``,
    ``reason`` and ``TOP_FIELDS``.
    """

    SECTIONS: ClassVar[dict[str, frozenset[str]]] = {}
    TOP_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @staticmethod
    def load(data: Mapping[str, Any], path: str = "$.resource_profile") -> "ResourceProfile":
        """The typed profile of ``data``: distributed when it holds a ``distributed`` section, else local."""
        if not isinstance(data, Mapping):
            raise SerializationError(f"{path}: a resource profile must be a JSON object, got {type(data).__name__}")
        kind = DistributedResourceProfile if "distributed" in data else LocalResourceProfile
        kind.check(data, path)
        return kind(data)

    @classmethod
    def check(cls, data: Mapping[str, Any], path: str) -> None:
        """Reject unknown fields at the top level and inside every section, with their path."""
        unknown = sorted(set(data) - set(cls.SECTIONS) - {"schema", "status", "reason"} - cls.TOP_FIELDS)
        if unknown:
            raise SerializationError(f"{path}: unknown field(s) {unknown} in a {cls.__name__}; allowed: "
                                     f"{sorted({'schema', 'status', 'reason', *cls.SECTIONS, *cls.TOP_FIELDS})}")
        for section, fields in cls.SECTIONS.items():
            value = data.get(section)
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise SerializationError(f"{path}.{section}: must be a JSON object, got {type(value).__name__}")
            extra = sorted(set(value) - fields - _STATUS)
            if extra:
                raise SerializationError(f"{path}.{section}: unknown field(s) {extra} in a {cls.__name__}")


class LocalResourceProfile(ResourceProfile):
    """Measured in the process that ran the extract job (or the cache-hit marker)."""

    SECTIONS = {"latency": _LATENCY, "throughput": frozenset({"samples", "wall_seconds", "samples_per_second"}),
                "host_memory": _HOST, "device_memory": _DEVICE, "model": _MODEL, "context": _CONTEXT,
                "embedding_bytes": _EMBEDDING}


class DistributedResourceProfile(ResourceProfile):
    """Merged from the measured tasks of one extract job on dask workers (worker-first latency, maximum
    worker memory, aggregate worker-compute throughput)."""

    SECTIONS = {"latency": _LATENCY | {"first_call_scope"},
                "throughput": frozenset({"samples", "compute_seconds", "samples_per_second", "throughput_kind",
                                         "note"}),
                "host_memory": _HOST | _MAX_OVER_WORKERS, "device_memory": _DEVICE | _MAX_OVER_WORKERS,
                "model": _MODEL, "context": _CONTEXT, "embedding_bytes": _EMBEDDING,
                "distributed": frozenset({"workers", "shards", "shards_measured", "shards_reused",
                                          "worker_first_latency_seconds", "max_worker_memory_bytes",
                                          "aggregate_compute_throughput", "samples", "compute_seconds",
                                          "throughput_kind", "throughput_note", "per_worker"})}
    TOP_FIELDS = frozenset({"scope"})


def chain_profile(inference: dict[str, Any] | None, cache_status: str, raw_bytes: int | None,
                  evaluated_bytes: int | None, footprint: dict[str, Any] | None = None,
                  context: Mapping[str, Any] | None = None) -> ResourceProfile:
    """One result's profile: its extract job's measurements (or the cache-hit marker) plus its embedding bytes.

    ``footprint`` is the cache's raw/evaluated footprint (embedding metadata ``footprint``) when a store
    was used: its persisted bytes are the stored object's real size.  ``context`` is added to the
    profile's context section (an endpoint's :data:`ENDPOINT_CONTEXT`).
    """
    if cache_status == "hit":
        profile = cache_hit_profile()
    elif inference is None:
        profile = {"schema": SCHEMA, "status": "unavailable",
                   "reason": "the runner returned no measurements for the extract job"}
    else:
        profile = dict(inference)
    if context:
        profile["context"] = {**profile.get("context", {}), **context}
    persisted = (footprint or {}).get("raw", {})
    profile["embedding_bytes"] = {
        "raw_logical_bytes": raw_bytes, "evaluated_logical_bytes": evaluated_bytes,
        "persisted_status": persisted.get("persisted_status", "unavailable"),
        "persisted_bytes": persisted.get("persisted_bytes"),
        "persisted_reason": persisted.get("persisted_reason") if footprint is not None
        else "no persistent embedding store was used in this run"}
    return ResourceProfile.load(profile, "resource_profile")  # typed, and checked against what load accepts


# ----------------------------------------------------------------------------- endpoint profiles
#: ``measurement_scope`` of a measured endpoint: its own encode call (encode_queries, encode_gallery,
#: encode_samples or encode_prompts), from the start of that call; fitting is not part of it.
ENCODE_CALL = "encode_call"
NOT_MEASURED = "not_measured"


def measured_call(profiling: ResourceProfilingConfig | None, owner: Any, data: Any,
                  call: Callable[[], Any]) -> tuple[Any, dict[str, Any] | None]:
    """(``call()``'s outputs, its profile), or (outputs, None) with profiling off.

    ``owner`` is the encoder making the call; an adapter around a standard extractor (its ``extractor``)
    is measured as that extractor, which holds the model, device and batch size.
    """
    if profiling is None or not profiling.enabled:
        return call(), None
    return profile_extraction(profiling, getattr(owner, "extractor", owner), data, call)


def endpoint_profiles(measured: Mapping[str, dict[str, Any] | None], embedding: Mapping[str, Mapping[str, Any]],
                      compression: Mapping[str, Any] | None,
                      modalities: Mapping[str, str]) -> dict[str, ResourceProfile]:
    """Each endpoint's profile, never merged (retrieval: query/gallery; zero-shot: samples/prompts).

    ``measured``: each endpoint's encode measurements (None: none came back); ``embedding``: the result's
    endpoint metadata (cache status, logical bytes, footprint); ``compression``: the result's variant facts,
    whose per-endpoint footprint holds the raw bytes; ``modalities``: the declared ones (else ``unknown``).
    """
    profiles = {}
    for branch, inference in measured.items():
        facts = embedding[branch]
        evaluated = facts.get("logical_bytes")
        raw = evaluated if compression is None else compression["footprint"][branch].get("raw_bytes")
        status = facts["cache_status"]
        scope = CACHE_HIT if status == "hit" else NOT_MEASURED if inference is None else ENCODE_CALL
        context = {"branch": branch, "modality": modalities.get(branch) or "unknown", "cache_status": status,
                   "measurement_scope": scope}
        profiles[branch] = chain_profile(inference, status, raw, evaluated, facts.get("footprint"), context)
    return profiles


def load_endpoint_profiles(data: Mapping[str, Any] | None, path: str) -> dict[str, ResourceProfile] | None:
    """Typed endpoint profiles of a reloaded result (each checked like a labeled-data profile)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise SerializationError(f"{path}: endpoint profiles must be a JSON object, got {type(data).__name__}")
    return {branch: ResourceProfile.load(profile, f"{path}.{branch}") for branch, profile in data.items()}


# ----------------------------------------------------------------------------- distributed runs
def measure_on_worker(config: ResourceProfilingConfig, extractor: Any, X: Any, transform: Callable[[], Any],
                      worker: str) -> tuple[Any, WorkerMeasurement]:
    """Run ``transform()`` on a worker under measurement, keeping its batch calls for
    :func:`~vertebrae._base.profile_records.distributed_profile`."""
    started = time.time()
    profiler = ExtractionProfiler(config, extractor, X)
    outputs, profile = profiler.measure(transform)
    return outputs, WorkerMeasurement(worker, started, profile, list(profiler.calls))


#: Compact DataFrame columns: ``resource.<name>`` <- (profile section, field).
COLUMNS = {"status": (None, "status"), "first_call_seconds": ("latency", "first_call_seconds"),
           "warm_count": ("latency", "warm_count"), "warm_median_seconds": ("latency", "warm_median_seconds"),
           "warm_p90_seconds": ("latency", "warm_p90_seconds"), "latency_clock": ("latency", "clock"),
           "samples_per_second": ("throughput", "samples_per_second"),
           "peak_rss_bytes": ("host_memory", "peak_rss_bytes"),
           "rss_increase_bytes": ("host_memory", "peak_increase_bytes"),
           "device_peak_bytes": ("device_memory", "peak_allocated_bytes"),
           "device_memory_status": ("device_memory", "status"), "parameter_count": ("model", "parameter_count"),
           "parameter_bytes": ("model", "parameter_bytes"), "checkpoint_bytes": ("model", "checkpoint_bytes"),
           "raw_logical_bytes": ("embedding_bytes", "raw_logical_bytes"),
           "evaluated_logical_bytes": ("embedding_bytes", "evaluated_logical_bytes"),
           "batch_size": ("context", "batch_size"), "device": ("context", "device"),
           "precision": ("context", "precision"), "synchronization": ("context", "synchronization")}


def profile_value(profile: dict[str, Any] | None, section: str | None, field: str) -> Any:
    if not profile:
        return None
    part = profile if section is None else profile.get(section) or {}
    return part.get(field)


#: Added to the columns of a distributed profile only (a local run's rows are unchanged).
DISTRIBUTED_COLUMNS = {"throughput_kind": ("throughput", "throughput_kind"), "workers": ("distributed", "workers"),
                       "worker_first_latency_seconds": ("distributed", "worker_first_latency_seconds"),
                       "max_worker_memory_bytes": ("distributed", "max_worker_memory_bytes")}


def resource_columns(profile: dict[str, Any] | None, prefix: str = "resource.") -> dict[str, Any]:
    """The compact ``resource.*`` row columns of one profile (all None without profiling)."""
    columns = {**COLUMNS, **(DISTRIBUTED_COLUMNS if (profile or {}).get("scope") == "distributed" else {})}
    return {f"{prefix}{name}": profile_value(profile, section, field) for name, (section, field) in columns.items()}


def endpoint_resource_columns(profiles: Mapping[str, dict[str, Any]] | None) -> dict[str, Any]:
    """``<branch>.resource.*`` columns of every endpoint profile, with its :data:`ENDPOINT_CONTEXT` (none
    without profiling)."""
    row: dict[str, Any] = {}
    for branch, profile in (profiles or {}).items():
        prefix = f"{branch}.resource."
        row.update(resource_columns(profile, prefix))
        row.update({f"{prefix}{field}": profile_value(profile, "context", field) for field in ENDPOINT_CONTEXT})
    return row


#: What must match before two latencies are comparable (spec: batch, workload, device, precision, synchronization).
COMPARABILITY = ("batch_size", "workload", "device", "precision", "synchronization")


def latency_mismatches(profiles: list[dict[str, Any]]) -> list[str]:
    """The context fields that differ among measured profiles (empty: their latencies are comparable)."""
    measured = [p["context"] for p in profiles if p and p.get("status") == "measured"]
    return [field for field in COMPARABILITY if len({repr(c.get(field)) for c in measured}) > 1]


def check_profiling(owner: str, value: Any) -> ResourceProfilingConfig | None:
    if value is not None and not isinstance(value, ResourceProfilingConfig):
        from ..errors import ConfigTypeError

        raise ConfigTypeError(f"{owner}: resource_profiling must be a ResourceProfilingConfig or None, got "
                              f"{type(value).__name__}; pass resource_profiling=ResourceProfilingConfig()")
    return value

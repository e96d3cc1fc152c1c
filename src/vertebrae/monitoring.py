"""RepresentationMonitor: score each training snapshot on your labeled data, with a crash-safe JSONL history.

Every evaluation is an ordinary one-extractor :class:`~vertebrae.families.labeled.benchmark.Benchmark` run,
so a snapshot's row is the benchmark's own row (``result_row``) plus the monitor's fields.
A history file is append-only JSON Lines: a manifest line that pins the dataset and
configuration, then one line per evaluation, each fsynced before ``evaluate`` returns.
One writer holds an exclusive ``flock`` on it, so two training jobs cannot interleave
lines; a line torn by a crash is detected on reopen, moved aside and never parsed.
See docs/monitoring.md.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import numbers
import os
import pathlib
import sys
import time
import traceback
import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol, TextIO

from .families.labeled.benchmark import Benchmark
from .families.labeled.stages import PIPELINE
from .inputs.datasets import BenchmarkDataset
from .errors import (ConfigError, HistoryError, HistoryLockedError, HistoryWarning, InputTypeError,
                     InputValidationError)
from .execution.context import Chain
from .execution.jobs import failure_of
from .execution.plan import planned_stages
from .extractors.base import CallableExtractor, PrecomputedExtractor
from ._base.fingerprint import package_version
from ._base import json_codec
from .families.labeled.results import VERDICT_COLUMNS, ExtractorResult, result_row
from .scoring.metric_result import OVERLAP_METRIC

HISTORY_FORMAT = "vertebrae-monitor-history"
HISTORY_SCHEMA_VERSION = 1
ERROR_POLICIES = ("raise", "continue")
#: How long opening a history waits for its lock before ``HistoryLockedError``: long enough for a
#: killed writer's lock to go (see ``_lock``), short next to a real conflict's cost.
LOCK_WAIT_SECONDS = 2.0
#: Columns every monitor row starts with, before the benchmark row's columns.
#: The largest count or integer context value a history holds (its DataFrame columns are Int64).
INT64_MAX = 2**63 - 1
MONITOR_COLUMNS = ("evaluation_index", "status", "snapshot_id", "epoch", "step", "timestamp", "recorded_at")
#: Failure columns every row ends with (None on ``ok`` rows).
FAILURE_COLUMNS = ("error_stage", "error_type", "error_message", "error_traceback")



class Reporter(Protocol):
    """Anything told about each evaluation as soon as its row is recorded."""

    def report(self, row: Mapping[str, Any]) -> None: ...


class ConsoleReporter:
    """Prints one line per evaluation (to ``stream``, default the current ``sys.stdout``)."""

    def __init__(self, stream: TextIO | None = None, digits: int = 4) -> None:
        self.stream = stream
        self.digits = digits

    def report(self, row: Mapping[str, Any]) -> None:
        print(console_line(row, self.digits), file=self.stream or sys.stdout, flush=True)

    def __repr__(self) -> str:
        return f"ConsoleReporter(digits={self.digits})"


def console_line(row: Mapping[str, Any], digits: int = 4) -> str:
    """One line: index, identifiers, status, primary score (and stability interval), or the error."""
    ids = " ".join(f"{name}={row[name]}" for name in ("snapshot_id", "epoch", "step") if row.get(name) is not None)
    head = f"[vertebrae monitor] #{row['evaluation_index']}" + (f" {ids}" if ids else "")
    if row["status"] == "failed":
        message = str(row["error_message"]).splitlines()[0] if row["error_message"] else ""
        return f"{head} FAILED in {row['error_stage']}: {row['error_type']}: {message[:200]}"
    score = row["primary_score"]
    line = f"{head} {row['primary_metric']}=" + ("invalid" if score is None else f"{score:.{digits}f}")
    if row.get("stability_interval_low") is not None:
        line += f" interval=[{row['stability_interval_low']:.{digits}f}, {row['stability_interval_high']:.{digits}f}]"
    if row.get("weakest_class") is not None:
        line += f" weakest={row['weakest_class']}"
    return line


class RepresentationMonitor:
    """Track how well successive snapshots of a model represent one labeled dataset.

    The settings are those of :class:`~vertebrae.families.labeled.benchmark.Benchmark` and are validated
    here, before any snapshot is scored.  ``history`` is ``None`` (rows kept in memory)
    or a ``.jsonl`` path (rows also appended, durably, and resumed on reopen).
    ``error_policy="continue"`` records a failed snapshot as a row with null scores and
    carries on; ``"raise"`` records that row and then re-raises the error.
    """

    def __init__(self, dataset: BenchmarkDataset, *, scoring_config: Any = None, continuous_config: Any = None,
                 metrics: Sequence[Any] | None = None, primary_metric: str = OVERLAP_METRIC,
                 separatix_config: Any = None, stability_config: Any = None,
                 history: str | os.PathLike[str] | None = None, error_policy: str = "raise",
                 reporters: Sequence[Reporter] | None = None) -> None:
        if error_policy not in ERROR_POLICIES:
            raise ConfigError(f"RepresentationMonitor: error_policy must be one of {list(ERROR_POLICIES)}, got "
                              f"{error_policy!r}; 'continue' records a failed snapshot and goes on, 'raise' records "
                              "it and re-raises")
        self.error_policy = error_policy
        self.reporters = _check_reporters(reporters)
        self._options = {"scoring_config": scoring_config, "continuous_config": continuous_config, "metrics": metrics,
                         "primary_metric": primary_metric, "separatix_config": separatix_config,
                         "stability_config": stability_config}
        self.dataset = dataset
        # A benchmark over a placeholder extractor validates every setting now, before any snapshot runs.
        self.settings = Benchmark(dataset, [PrecomputedExtractor("settings-check")], **self._options).settings
        self._null_columns = _standard_null_columns(self.settings)
        self._rows: list[dict[str, Any]] = []
        self._file: JsonlHistory | None = None
        if history is not None:
            self._file = JsonlHistory(history, history_manifest(dataset, self.settings))
            self._rows = list(self._file.rows)

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, extractor_or_model: Any, *, snapshot_id: str | None = None, epoch: int | None = None,
                 step: int | None = None, timestamp: _dt.datetime | str | None = None,
                 context_metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Benchmark one snapshot; record, report and return its row.

        ``extractor_or_model`` is an extractor, or a callable ``fn(X) -> embeddings`` (for
        example the forward pass up to the layer you watch).  With a history file the row
        is on disk (fsynced) before this returns.
        """
        if self._file is not None and self._file.closed:
            raise HistoryError(f"this monitor's history {self._file.path} is closed; open a new RepresentationMonitor "
                               "on it to continue")
        index = len(self._rows)
        ids = {"snapshot_id": _check_snapshot_id(snapshot_id), "epoch": _check_count("epoch", epoch),
               "step": _check_count("step", step), "timestamp": _check_timestamp(timestamp)}
        context = _check_context_metadata(context_metadata)
        extractor = _as_extractor(extractor_or_model, snapshot_id or f"evaluation-{index}")
        try:
            result = Benchmark(self.dataset, [extractor], **self._options, progress=False).run()
        except Exception as exc:
            row = self._record(index, "failed", ids, self._failure_row(extractor.name, exc), context, _failure(exc))
            if self.error_policy == "raise":
                raise
            return row
        row = result.rows(include_invalid=True)[0]
        return self._record(index, "ok", ids, row, context, dict.fromkeys(FAILURE_COLUMNS))

    def _failure_row(self, name: str, exc: BaseException) -> dict[str, Any]:
        """The benchmark's own row of a failed result: the canonical columns, null scores."""
        error = {"stage": _failed_stage(exc), "type": type(exc).__name__, "message": str(exc), "extractor": name}
        return result_row(ExtractorResult.failed(name, self.settings.primary_metric, error, artifact_keys={}), None)

    def _record(self, index: int, status: str, ids: dict[str, Any], benchmark_row: dict[str, Any],
                context: dict[str, Any], failure: dict[str, Any]) -> dict[str, Any]:
        recorded_at = _dt.datetime.now(_dt.timezone.utc).isoformat()
        row = {"evaluation_index": index, "status": status, **ids, "recorded_at": recorded_at}
        row.update(benchmark_row)
        for column in self._null_columns:
            row.setdefault(column, None)
        row.update({f"context_metadata.{key}": value for key, value in context.items()})
        row.update(failure)
        row = json_codec.encode(row)  # strict JSON values (NumPy scalars become Python ones)
        if self._file is not None:
            self._file.append(row)
        self._rows.append(row)
        for reporter in self.reporters:
            reporter.report(dict(row))
        return dict(row)

    # -- views ---------------------------------------------------------------------------------
    @property
    def history(self) -> list[dict[str, Any]]:
        """Every recorded row (resumed ones first), as copies."""
        return [dict(row) for row in self._rows]

    @property
    def manifest(self) -> dict[str, Any] | None:
        """The history file's manifest (None for an in-memory monitor)."""
        return None if self._file is None else dict(self._file.manifest)

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of the history, one row per evaluation, in evaluation order."""
        return history_dataframe(self._rows)

    def to_markdown(self) -> str:
        """The Markdown trend table of the history (see :mod:`vertebrae.reports.markdown_trend`)."""
        from .reports.markdown_trend import render_trend

        return render_trend(self._rows)

    def to_html(self) -> str:
        """A self-contained HTML page: the trend figure (with matplotlib) and the snapshot table."""
        from .reports.html import render_monitor_html

        return render_monitor_html({"result_type": "monitor", "rows": self.history})

    def save_html(self, path: str | pathlib.Path) -> pathlib.Path:
        path = pathlib.Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the history file's lock (the kernel also drops it if the process dies)."""
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> "RepresentationMonitor":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._file is None else str(self._file.path)
        return f"RepresentationMonitor({self.dataset.name!r}, history={where}, evaluations={len(self._rows)})"


def history_dataframe(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Rows as a DataFrame; integer identifiers that may be missing use pandas' nullable Int64."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=None if rows else list(MONITOR_COLUMNS))
    for column in ("rank", "epoch", "step"):
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


# ----------------------------------------------------------------------------- history file
#: The histories this process holds open, closed in a forked child (:func:`_close_in_forked_child`).
_OPEN_HISTORIES: weakref.WeakSet[JsonlHistory] = weakref.WeakSet()


def _close_in_forked_child() -> None:
    """A child forked without exec (a ``fork`` worker, a DataLoader worker) inherits every open history's descriptor,
    and with it the parent's ``flock``: the lock would outlive the parent's ``close()`` for as long as the child
    lives and refuse the next monitor on that file.  The child closes its copies at once (the parent's lock stays:
    it goes only when every descriptor of the open file is closed); its history objects read as closed."""
    for history in list(_OPEN_HISTORIES):
        if history._fd is not None:
            os.close(history._fd)
            history._fd = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_forked_child)


class JsonlHistory:
    """An exclusively locked, append-only JSONL file: the manifest line, then one line per evaluation."""

    def __init__(self, path: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
        import fcntl  # POSIX only; imported here so in-memory monitors work everywhere

        self.path = _check_history_path(path)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if not _lock(self._fd, fcntl):
            os.close(self._fd)
            self._fd = None
            raise HistoryLockedError(f"history={str(self.path)!r} is locked by another writer (a monitor in this or "
                                     "another process, or a process such a writer started that still has the file "
                                     f"open), still after {LOCK_WAIT_SECONDS:g} s; one writer at a time: close the "
                                     "other monitor, or give this one its own history path")
        _OPEN_HISTORIES.add(self)
        try:
            #: The manifest in force and the rows the file held when opened (the monitor keeps the rest).
            self.manifest, self.rows = self._load(manifest)
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._fd is None

    def _load(self, manifest: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Parse the file, set a torn last line aside, check the manifest; start a new file with ``manifest``."""
        data = _read_all(self._fd)
        stored, rows, complete = parse_history(data, self.path)
        if complete < len(data):
            self._set_aside(data[complete:], complete, len(rows))
        if stored is None:
            self._write_line(manifest)
            _fsync_directory(self.path.parent)
            return manifest, []
        check_manifest(stored, manifest, self.path)
        return stored, rows

    def _set_aside(self, torn: bytes, complete: int, kept: int) -> None:
        """Copy the incomplete last line to a sidecar (fsynced), then cut it from the history."""
        aside = _free_path(self.path.with_name(self.path.name + ".torn"))
        with open(aside, "xb") as handle:
            handle.write(torn)
            handle.flush()
            os.fsync(handle.fileno())
        os.ftruncate(self._fd, complete)
        os.fsync(self._fd)
        warnings.warn(HistoryWarning(
            f"{self.path}: the last line ({len(torn)} bytes, no newline) is incomplete - a crash while it was being "
            f"written; it was moved to {aside.name} and the {kept} complete evaluation(s) were kept"), stacklevel=5)

    def append(self, row: dict[str, Any]) -> None:
        """One evaluation line, written and fsynced before returning."""
        if self._fd is None:
            raise HistoryError(f"history {self.path} is closed")
        self._write_line({"record": "evaluation", "row": row})

    def _write_line(self, record: dict[str, Any]) -> None:
        """Append one line and fsync it; a failed write (disk full, I/O error) is cut off again, never left torn."""
        data = (json.dumps(record, allow_nan=False, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        start = os.fstat(self._fd).st_size  # stable: we hold the only writer's lock
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked; O_APPEND keeps every chunk at the end
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, start)
                os.fsync(self._fd)
            except OSError:
                self.close()  # cannot restore a clean end: refuse further appends rather than glue lines together
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __del__(self) -> None:
        """A history nobody holds releases its lock (a notebook re-runs the cell), warned as Python's files do."""
        if getattr(self, "_fd", None) is not None:
            warnings.warn(f"unclosed monitor history {self.path}: close the RepresentationMonitor or use it in a "
                          "`with` block", ResourceWarning, source=self)
            self.close()


def _lock(fd: int, fcntl: Any) -> bool:
    """Take the exclusive ``flock`` on ``fd``, waiting up to ``LOCK_WAIT_SECONDS`` for a writer that is going.

    A killed writer's lock can outlive it: ``flock`` belongs to the open file description, and a
    process the writer was starting when it died (joblib's ``lscpu``, ``platform``'s ``uname -p``:
    any fork then exec) holds a copy of the descriptor until its exec - ``O_CLOEXEC`` closes it
    only then.  That child is an orphan waiting for a CPU, for milliseconds or, on a loaded
    machine, longer, so a run restarted right after the writer was reaped would be refused.  A live
    writer still holds the lock after the wait, and ``False`` says so.
    """
    deadline, pause = time.monotonic() + LOCK_WAIT_SECONDS, 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)


def read_history(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(manifest, rows) of a history file, read-only and without the lock (e.g. while training runs).

    An incomplete last line is skipped with a warning (it may be a line being written now).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise InputValidationError(f"history={str(path)!r} does not exist or is not a file")
    data = path.read_bytes()
    manifest, rows, complete = parse_history(data, path)
    if complete < len(data):
        warnings.warn(HistoryWarning(f"{path}: skipped an incomplete last line ({len(data) - complete} bytes): a "
                                     "crash mid-write, or a line still being written"), stacklevel=2)
    if manifest is None:
        raise HistoryError(f"{path} has no complete manifest line; it is empty or not a monitor history")
    return manifest, rows


def parse_history(data: bytes, path: pathlib.Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
    """(manifest or None, rows, byte length of the complete lines).  Only a line without newline is torn."""
    complete = data.rfind(b"\n") + 1
    lines = data[:complete].split(b"\n")[:-1]
    if not lines:
        return None, [], complete
    records = [_parse_line(line, number, path) for number, line in enumerate(lines, start=1)]
    manifest = records[0]
    if manifest.get("record") != "manifest" or manifest.get("format") != HISTORY_FORMAT:
        raise HistoryError(f"{path}: line 1 is not a vertebrae monitor manifest, so this is not a monitor history; "
                           "pass a new path (or the right file) as history=")
    if manifest.get("schema_version") != HISTORY_SCHEMA_VERSION:
        raise HistoryError(f"{path}: history schema_version {manifest.get('schema_version')!r}; this vertebrae "
                           f"reads version {HISTORY_SCHEMA_VERSION}; start a new history file")
    rows = []
    for number, record in enumerate(records[1:], start=2):
        row = record.get("row")
        index = row.get("evaluation_index") if isinstance(row, dict) else None
        if record.get("record") != "evaluation" or not isinstance(row, dict):
            raise HistoryError(f"{path}: line {number} is not evaluation {len(rows)} (got record "
                               f"{record.get('record')!r}); the file was edited or mixed with another history")
        if type(index) is not int or index != len(rows):  # not 1.0 nor True: vertebrae writes ints
            raise HistoryError(f"{path}: line {number} is not evaluation {len(rows)} (got evaluation_index "
                               f"{index!r}); the file was edited or mixed with another history")
        rows.append(row)
    return manifest, rows, complete


def _parse_line(line: bytes, number: int, path: pathlib.Path) -> dict[str, Any]:
    """One record, as strict JSON: vertebrae never writes NaN or infinity, so one in the file was put there by hand."""
    def non_finite(text: str) -> NoReturn:
        raise HistoryError(f"{path}: line {number} holds the non-finite number {text}; monitor histories are strict "
                           "JSON (vertebrae never writes NaN or infinity), so the line was edited; restore the file "
                           "from a copy or start a new history")

    def strict_float(text: str) -> float:
        value = float(text)
        return value if math.isfinite(value) else non_finite(text)

    try:
        record = json.loads(line, parse_constant=non_finite, parse_float=strict_float)
    except HistoryError:
        raise
    except RecursionError:
        raise HistoryError(f"{path}: line {number} is nested too deeply to parse, so it is not a monitor record; "
                           "restore the file from a copy or start a new history") from None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise HistoryError(f"{path}: line {number} is complete (newline-terminated) but not a JSON object, so it is "
                           "corruption, not a crash mid-write; restore the file from a copy or start a new history")
    return record


# ----------------------------------------------------------------------------- manifest
def history_manifest(dataset: BenchmarkDataset, settings: Any) -> dict[str, Any]:
    """The first line of a history: what its rows are comparable under."""
    data, config = dataset_section(dataset), configuration_section(settings)
    return {"record": "manifest", "format": HISTORY_FORMAT, "schema_version": HISTORY_SCHEMA_VERSION,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "dataset_fingerprint": _sha256(data), "configuration_fingerprint": _sha256(config),
            "dataset": data, "configuration": config,
            "versions": {name: package_version(name) for name in ("vertebrae", "overlapindex", "separatix")}}


def dataset_section(dataset: BenchmarkDataset) -> dict[str, Any]:
    """Identity and content facts of the dataset.  An ephemeral identity names no data, so its inputs are hashed."""
    identity = dataset.identity
    section: dict[str, Any] = {"identity_kind": identity.kind, "dataset_id": identity.dataset_id,
                               "n_samples": dataset.n_samples, "target_type": dataset.target_type,
                               "targets_sha256": dataset.targets_fingerprint(),
                               "groups_sha256": dataset.groups_fingerprint()}
    if identity.kind == "declared":
        section["revision"] = identity.revision
    elif identity.kind == "content":
        section["content_sha256"] = identity.content_sha256
    else:
        section["inputs_sha256"] = dataset.inputs_fingerprint()
    return section


def configuration_section(settings: Any) -> dict[str, Any]:
    """The benchmark settings that shape the scores (StabilityConfig without ``n_jobs``, as in the artifact keys)."""
    config = settings.to_dict()
    if settings.stability_config is not None:
        config["stability_config"] = settings.stability_config.fingerprint()
    return json_codec.encode(config)


def check_manifest(stored: Mapping[str, Any], current: Mapping[str, Any], path: pathlib.Path) -> None:
    """A reopened history must describe the same dataset and configuration; name every difference."""
    differences = []
    for section in ("dataset", "configuration"):
        if stored.get(f"{section}_fingerprint") != current[f"{section}_fingerprint"]:
            differences += _differences(stored.get(section), current[section], section)
    if differences:
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        raise HistoryError(f"history={str(path)!r} was written for a different dataset or configuration: {shown}. "
                           "Open it with the same dataset and settings, or pass a new history path")


def _differences(stored: Any, current: Any, where: str) -> list[str]:
    if isinstance(stored, dict) and isinstance(current, dict):
        found = []
        for key in sorted(set(stored) | set(current)):
            found += _differences(stored.get(key, "<absent>"), current.get(key, "<absent>"), f"{where}.{key}")
        return found
    return [] if stored == current else [f"{where}: history has {_short(stored)}, this monitor has {_short(current)}"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _sha256(section: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(section, sort_keys=True, allow_nan=False).encode()).hexdigest()


# ----------------------------------------------------------------------------- helpers
def _standard_null_columns(settings: Any) -> list[str]:
    """``metric.<name>`` per configured metric, ``runtime.<name>`` per runtime entry the stages of a snapshot's plan
    declare (``StageDefinition.runtime_names``) and the paired-verdict columns (failed rows lack them)."""
    names = [OVERLAP_METRIC, *(metric.name for metric in settings.metrics)]
    chain = Chain("snapshot", "snapshot", "snapshot")
    runtimes = [name for definition, _ in planned_stages(PIPELINE, settings, chain)
                for name in definition.runtime_names(settings)]
    return [f"metric.{name}" for name in names] + [f"runtime.{name}" for name in runtimes] + list(VERDICT_COLUMNS)


def _failed_stage(exc: BaseException) -> str:
    """The stage whose job raised ``exc`` (the runner attaches it), or ``setup`` (it failed before any stage ran)."""
    failure = failure_of(exc)
    return "setup" if failure is None else failure.stage


def _failure(exc: BaseException) -> dict[str, Any]:
    return {"error_stage": _failed_stage(exc), "error_type": type(exc).__name__, "error_message": str(exc),
            "error_traceback": "".join(traceback.format_exception(exc))}


def _as_extractor(obj: Any, name: str) -> Any:
    if all(hasattr(obj, attr) for attr in ("name", "fit", "transform", "recipe")):
        return obj
    if callable(obj):
        return CallableExtractor(name, obj)
    raise InputTypeError(f"extractor_or_model must be an extractor (name, fit, transform, recipe) or a callable "
                         f"fn(X) -> embeddings such as lambda X: model_hidden_layer(X); got {type(obj).__name__}")


def _check_reporters(reporters: Sequence[Any] | None) -> list[Reporter]:
    if reporters is None:
        return [ConsoleReporter()]
    if isinstance(reporters, (str, bytes)) or not isinstance(reporters, Sequence):
        raise InputTypeError(f"reporters must be a list of reporters (objects with report(row)), got "
                             f"{type(reporters).__name__}; pass [] for none")
    for i, reporter in enumerate(reporters):
        if not callable(getattr(reporter, "report", None)):
            raise InputTypeError(f"reporters[{i}] ({type(reporter).__name__}) has no report(row) method; use "
                                 "ConsoleReporter() or an object with report(row)")
    return list(reporters)


def _check_history_path(path: Any) -> pathlib.Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"history must be None or a path to a .jsonl file, got {type(path).__name__}")
    path = pathlib.Path(path)
    if path.is_dir():
        raise InputValidationError(f"history={str(path)!r} is a directory; pass a file path such as "
                                   f"{str(path / 'history.jsonl')!r}")
    if not path.parent.is_dir():
        raise InputValidationError(f"history={str(path)!r}: the folder {str(path.parent)!r} does not exist; "
                                   "create it first")
    return path


def _check_snapshot_id(snapshot_id: Any) -> str | None:
    if snapshot_id is not None and (not isinstance(snapshot_id, str) or not snapshot_id.strip()):
        raise InputValidationError(f"snapshot_id must be None or a non-empty string, got {snapshot_id!r}")
    return snapshot_id


def _check_count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"{name} must be None or an integer, got {type(value).__name__} {value!r}")
    if not 0 <= int(value) <= INT64_MAX:
        raise InputValidationError(f"{name} must be between 0 and {INT64_MAX} (the DataFrame's Int64 column), got "
                                   f"{value!r:.60}")
    return int(value)


def _check_timestamp(timestamp: Any) -> str | None:
    """A datetime or an ISO-8601 string, stored as ISO-8601 text."""
    if timestamp is None:
        return None
    if isinstance(timestamp, _dt.datetime):
        return timestamp.isoformat()
    if isinstance(timestamp, str):
        try:
            return _dt.datetime.fromisoformat(timestamp).isoformat()
        except ValueError:
            pass
    raise InputValidationError(f"timestamp must be None, a datetime or an ISO-8601 string, got {timestamp!r}; for "
                               "Unix seconds pass datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc)")


def _check_context_metadata(context: Any) -> dict[str, Any]:
    """Flat JSON scalars only: each key becomes a ``context_metadata.<key>`` column."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InputTypeError(f"context_metadata must be a mapping of names to values, got {type(context).__name__}")
    checked = {}
    for key, value in context.items():
        if not isinstance(key, str) or not key:
            raise InputValidationError(f"context_metadata key {key!r} must be a non-empty string")
        if hasattr(value, "item") and getattr(value, "shape", None) == ():
            value = value.item()  # a NumPy scalar
        finite = not isinstance(value, float) or math.isfinite(value)
        if not (value is None or isinstance(value, (bool, int, float, str))) or not finite:
            raise InputValidationError(f"context_metadata[{key!r}] = {value!r:.60} is not a finite JSON scalar (str, "
                                       "int, float, bool or None); flatten nested values into separate keys")
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise InputValidationError(f"context_metadata[{key!r}] is an integer beyond 64 bits; store it as a "
                                       "string")
        checked[key] = value
    return checked


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _free_path(base: pathlib.Path) -> pathlib.Path:
    """``base``, or ``base.1``, ``base.2``... whichever does not exist yet."""
    candidate, n = base, 0
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}.{n}")
    return candidate


def _fsync_directory(folder: pathlib.Path) -> None:
    """Make a new file's directory entry durable (the file's own fsync does not cover it)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

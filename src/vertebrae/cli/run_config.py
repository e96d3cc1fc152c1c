"""Build a Benchmark from a TOML/YAML run configuration (what ``vertebrae run`` reads).

Example (TOML)::

    [dataset]
    id = "support-tickets"        # with revision: a declared identity
    revision = "2026-11"
    labels = "labels.csv"         # .npy, .txt, .csv or .parquet
    labels_column = "label"       # or a list of columns: 0/1 indicators (their names are the labels)
    # target_type = "multi_label" | "regression"; label_names = [...]; target_names = [...]
    # groups = "groups.csv"; groups_column = "customer"

    # texts = "tickets.csv"; input_column = "body"   # or raw inputs for model extractors (vertebrae.inputs.raw):
    #                             # texts, images (folder or table of paths) or audio (.npz/.npy + sampling_rate)

    [[extractors]]
    name = "minilm"
    embeddings = "minilm.npy"     # .npy, .npz, .parquet or .csv
    # or a model (vertebrae.cli.model_config): kind = "hf_text", model = "models/minilm", layers = [4, -1], ...

    [scoring]                     # OverlapScoringConfig fields
    k = "auto"

    [stability]                   # StabilityConfig fields (optional)
    mode = "prototype"
    repeats = 20

    [separatix]                   # SeparatixConfig fields (optional; enabled and gated by default)
    overlap_threshold = 0.8

    [screening]                   # ScreeningConfig fields (optional; turns screening on, as vertebrae run --screen)
    start_fraction = 0.1
    eta = 3

    [benchmark]
    quality_tolerance = 0.02
    # primary_metric = "my_metric"
    # on_error = "record"         # keep the other extractors when one fails (default "raise")
    # stage_modules = ["my_project.stages"]   # modules whose @stage functions join the plan
    # probe = true                # add LinearProbeMetric and KNNMetric as reference metrics (vertebrae run --probe)
    # referee = "probe"           # a linear probe judges the finalists (vertebrae run --referee probe)
    # referee_finalists = "auto"  # whom it judges: "overlap" (default), "all", "auto" (vertebrae run --finalists)
    # referee_share = 0.25        # "auto" judges every candidate when that costs at most this share of the scoring

    [[compression]]               # EmbeddingCompressionConfig fields, one table per variant (optional)
    method = "none"               # keep the raw embedding beside the compressed variants
    [[compression]]
    method = "pca"
    n_components = 64

    [cache]                       # CacheConfig fields (optional; no cache without this section or --cache)
    store = "cache"               # a folder (relative to this file), file://, s3://bucket/prefix, gs://...
    mode = "read_write"           # or "read_only", "refresh"; also enabled = false, storage_options = {...},
                                  # max_artifact_bytes = ...; the signing secret only from $VERTEBRAE_CACHE_SECRET

    [[metrics]]                   # custom metrics, loaded with vertebrae.load_metric
    path = "my_project.metrics:label_aware_metric"
    name = "my_metric"            # optional: defaults to the function name
    higher_is_better = true       # optional; also aggregate_valid, params = {...}

Relative paths are resolved against the config file's folder.  Unknown sections and
keys (and extractor kinds and options) are rejected with the list of allowed ones, a value of
the wrong type with one line naming its key, and a missing model or file by its path, before
any file or model is loaded.  :func:`input_files` records every
file a run reads (path as given, size, SHA-256) for the result's metadata.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..selection.agreement import probe_metrics
from ..selection.referee import check_finalist_policy, referee_metric
from ..families.labeled.benchmark import Benchmark
from ..artifacts.cache import CacheConfig
from ..extractors.compression import EmbeddingCompressionConfig
from ..inputs.datasets import BenchmarkDataset
from ..errors import ConfigError, ConfigTypeError, InputValidationError
from ..inputs.identity import DatasetIdentity
from ..inputs.audio import MAX_SAMPLING_RATE
from ..inputs.io import file_record, labels_source, load_column, load_config_file
from .model_config import KINDS, build_extractors, check_extractors
from ..inputs.raw import dataset_from_source, source_files, source_of
from ..inputs.targets import build_targets
from ..scoring.metrics import metrics_from_config
from ..scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig
from ..scoring.separatix import SeparatixConfig
from ..scoring.stability import StabilityConfig
from ..selection.screening import ScreeningConfig
from .._base.user_modules import import_user_module

BENCHMARK_KEYS = {"primary_metric", "quality_tolerance", "on_error", "stage_modules", "probe", "referee",
                  "referee_finalists", "referee_share"}
#: Top-level sections a run configuration may contain.
SECTIONS = {"dataset", "extractors", "scoring", "continuous", "stability", "screening", "separatix", "benchmark",
            "metrics", "cache", "compression"}


def _is_text(value: Any) -> bool:
    """A name: a string, or a whole number (YAML and TOML read ``revision: 2`` as one); never a list or a float
    (``1.10`` would silently become ``1.1``)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


#: Each key of a config table: the test its value must pass and what the message says it must be.
DATASET_FIELDS = {
    "id": (_is_text, 'a string such as "support-tickets"'),
    "revision": (_is_text, 'a string such as "2026-11" (quote a version number: "1.10")'),
    "identity": (lambda v: isinstance(v, str), '"declared" or "content"'),
    "labels": (_is_path, 'a file path such as "labels.csv"'),
    "labels_column": (lambda v: isinstance(v, str) or (_is_strings(v) and len(v) > 0),
                      "a column name or a list of them"),
    "target_type": (lambda v: isinstance(v, str), '"single_label", "multi_label" or "regression"'),
    "label_names": (_is_strings, "a list of strings"),
    "target_names": (_is_strings, "a list of strings"),
    "groups": (_is_path, 'a file path such as "groups.csv"'),
    "groups_column": (lambda v: isinstance(v, str), "a column name"),
    "name": (_is_text, "a string"),
    # raw inputs that model extractors embed (vertebrae.inputs.raw)
    "texts": (_is_path, 'a .csv or .parquet file such as "tickets.csv"'),
    "images": (_is_path, 'a folder of class subfolders, or a .csv/.parquet table of image paths'),
    "audio": (_is_path, 'a .npz (one array per clip) or .npy file'),
    "input_column": (lambda v: isinstance(v, str), "a column name"),
    "sampling_rate": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SAMPLING_RATE,
                      f"a whole number of Hz from 1 to {MAX_SAMPLING_RATE} such as 16000"),
    "max_image_pixels": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                         "a positive whole number of pixels such as 50000000"),
    "follow_links": (lambda v: v in ("inside", "anywhere"), '"inside" (the default) or "anywhere"'),
}
DATASET_KEYS = set(DATASET_FIELDS)


def _check_keys(where: str, data: Any, allowed: set[str]) -> Mapping[str, Any]:
    if data is None:  # an empty config file, or a YAML key with nothing under it
        raise ConfigError(f"config section {where} is missing or empty; see docs/cli.md for what it holds")
    if not isinstance(data, Mapping):
        raise ConfigTypeError(f"config section {where} must be a table/mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"config section {where} has unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return data


def _check_fields(where: str, data: Any, fields: Mapping[str, tuple[Any, str]]) -> Mapping[str, Any]:
    """A table with known keys whose values have the right types (one line naming the key otherwise)."""
    _check_keys(where, data, set(fields))
    for key, value in data.items():
        valid, expected = fields[key]
        if not valid(value):
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ConfigTypeError(f"config {where} {key} must be {expected}, got {shown}")
    return data


def _identity(section: Mapping[str, Any]) -> DatasetIdentity:
    kind = section.get("identity", "declared")
    if "id" not in section:
        raise ConfigError("config [dataset] needs id = \"...\" (and revision = \"...\" for a declared identity)")
    if kind == "declared":
        if "revision" not in section:
            raise ConfigError("config [dataset] needs revision = \"...\" for a declared identity "
                              "(or identity = \"content\" to hash the data)")
        return DatasetIdentity.declared(str(section["id"]), str(section["revision"]))
    if kind == "content":
        return DatasetIdentity.content_hash(str(section["id"]))
    raise ConfigError(f"config [dataset] identity must be 'declared' or 'content', got {kind!r}")


def benchmark_kwargs(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``Benchmark`` from the config sections other than dataset/extractors."""
    kwargs: dict[str, Any] = {}
    for section, keyword, config_class in (("scoring", "scoring_config", OverlapScoringConfig),
                                           ("continuous", "continuous_config", ContinuousOverlapScoringConfig),
                                           ("stability", "stability_config", StabilityConfig),
                                           ("screening", "screening", ScreeningConfig),
                                           ("separatix", "separatix_config", SeparatixConfig)):
        if section in config:
            with config_section(f"[{section}]"):
                kwargs[keyword] = config_class.from_dict(config[section])
    if "metrics" in config:
        kwargs["metrics"] = metrics_from_config(config["metrics"])
    if "compression" in config:
        kwargs["compression"] = compression_from_config(config["compression"])
    kwargs.update(_check_keys("[benchmark]", config.get("benchmark", {}), BENCHMARK_KEYS))
    import_stage_modules(kwargs.pop("stage_modules", []))
    if _probe(kwargs.pop("probe", False)):
        named = {m.name for m in kwargs.get("metrics", [])}  # a probe already configured (e.g. with params) stays
        kwargs["metrics"] = [*kwargs.get("metrics", []), *(m for m in probe_metrics() if m.name not in named)]
    if "referee" in kwargs:
        kwargs["referee"] = referee_metric(kwargs["referee"], "config [benchmark] referee")
    with config_section("[benchmark]"):  # Benchmark's own check, before any file is read
        check_finalist_policy(kwargs.get("referee_finalists", "overlap"), kwargs.get("referee_share"),
                              kwargs.get("referee"))
    return kwargs


@contextlib.contextmanager
def config_section(where: str, owner: str | None = None) -> Iterator[None]:
    """Name the config section a class's own validation error came from: ``config [stability]: StabilityConfig.repeats
    must be >= 2, got -1`` (the field is the section's key of that name); with ``owner``, only errors about that
    class's fields (``Benchmark.referee_share ...``) are named so, the others pass unchanged."""
    try:
        yield
    except ConfigError as exc:
        message = str(exc)
        if message.startswith("config ") or (owner is not None and not message.startswith(f"{owner}.")):
            raise
        raise type(exc)(f"config {where}: {exc}") from None


def _probe(value: Any) -> bool:
    """``[benchmark] probe``: a boolean (``true`` adds the reference probes; the primary metric is unchanged)."""
    if not isinstance(value, bool):
        raise ConfigTypeError(f"config [benchmark] probe must be true or false, got {value!r}")
    return value


def import_stage_modules(modules: Any) -> None:
    """``[benchmark] stage_modules``: import each module, which registers its ``@stage`` functions (every process of
    a staged run reads the same config, so each registers them)."""
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise ConfigTypeError(f"config [benchmark] stage_modules must be a list of module names, e.g. "
                              f"[\"my_project.stages\"], got {modules!r}")
    for i, module in enumerate(modules):
        import_user_module(module, f"config [benchmark] stage_modules[{i}]")


def cache_config_from_section(section: Any, base_dir: pathlib.Path) -> CacheConfig:
    """The ``[cache]`` section; a relative folder is resolved against the config file's folder."""
    if isinstance(section, Mapping) and "secret" in section:
        raise ConfigError("config [cache] must not hold the secret (a config file is copied and shared); set "
                          "the VERTEBRAE_CACHE_SECRET environment variable instead")
    cache = CacheConfig.from_dict(_check_keys("[cache]", section, {f.name for f in dataclasses.fields(CacheConfig)}))
    store = cache.store
    if store is not None and "://" not in store and not pathlib.Path(store).expanduser().is_absolute():
        cache = cache.replace(store=str(base_dir / store))
    return cache


def compression_from_config(entries: Any) -> list[EmbeddingCompressionConfig]:
    """``[[compression]]`` tables -> configs (each validated; unknown keys rejected by the config)."""
    if not isinstance(entries, list) or not entries:
        raise ConfigError("config [[compression]] must be a list of tables (one per variant), e.g. "
                          "[[compression]] method = \"pca\" n_components = 64")
    configs = []
    for i, entry in enumerate(entries):
        try:
            configs.append(EmbeddingCompressionConfig.from_dict(entry))
        except ConfigError as exc:
            raise ConfigError(f"config [[compression]] #{i + 1}: {exc}") from None
    return configs


def load_run_config(path: str | pathlib.Path) -> dict[str, Any]:
    config = load_config_file(path)
    unknown = sorted(set(config) - SECTIONS)
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {unknown}; allowed: {sorted(SECTIONS)}")
    return config


def benchmark_from_config(config: Mapping[str, Any], base_dir: pathlib.Path, *,
                          progress: bool | None = None) -> Benchmark:
    """Validate every section and every extractor entry (kinds, options, paths) before any file or model loads,
    then load the data and build the extractors (their models load when the run first needs them)."""
    section = _check_fields("[dataset]", config.get("dataset"), DATASET_FIELDS)
    source = source_of(section)
    if source is None and "labels" not in section:
        raise ConfigError("config [dataset] needs labels = \"path\" (labels, indicator or regression targets), or a "
                          "raw-input source (texts, images or audio) for model extractors")
    kwargs = benchmark_kwargs(config)  # every section's fields before any file is looked at
    if "cache" in config:
        kwargs["cache_config"] = cache_config_from_section(config["cache"], base_dir)
    checked = check_extractors(config.get("extractors"), base_dir, section)
    if source is None:
        model = next((entry for entry in checked if KINDS[entry.kind].embeds_inputs), None)
        if model is not None:
            raise ConfigError(f"{model.where} embeds raw inputs: name them in [dataset] (texts = \"data.csv\" with "
                              "input_column, images = \"folder/\", or audio = \"clips.npz\")")
    resolve = _resolver(base_dir)
    target_type, label_names, target_names = (section.get(key) for key in ("target_type", "label_names",
                                                                            "target_names"))
    columns = section.get("labels_column")
    if isinstance(columns, list):  # the columns name the indicator labels (or the regression targets)
        if target_type == "regression" and target_names is None:
            target_names = [str(c) for c in columns]
        elif target_type in (None, "multi_label") and label_names is None:
            label_names = [str(c) for c in columns]
    targets = {"identity": _identity(section), "target_type": target_type, "label_names": label_names,
               "target_names": target_names, "name": section.get("name")}
    if source is not None:
        dataset = dataset_from_source(section, resolve, **targets)
        extractors = build_extractors(checked, progress=progress)
        _check_rows(config["extractors"], extractors, dataset.n_samples, f"the {source} source {str(section[source])!r}")
    else:
        y = load_column(resolve(section["labels"]), section.get("labels_column"), "labels")
        extractors = build_extractors(checked, progress=progress)
        n_labels = len(y) if hasattr(y, "__len__") and np.ndim(y) != 0 else None
        if n_labels is not None:
            _check_rows(config["extractors"], extractors, n_labels, f"the labels file {str(section['labels'])!r}")
        where = labels_source(resolve(section["labels"]), section["labels"], section.get("labels_column"))
        build_targets(y, target_type=target_type, label_names=label_names, target_names=target_names, argument=where)
        dataset = BenchmarkDataset.from_embeddings(extractors[0].embeddings, y, **targets)
    if "groups" in section:
        groups = load_column(resolve(section["groups"]), section.get("groups_column"), "groups")
        try:
            dataset = dataset.with_groups(groups)
        except InputValidationError as exc:  # the count is the file's: name it
            raise InputValidationError(f"config [dataset] groups = {str(section['groups'])!r}: {exc}") from None
    with config_section("[benchmark]", "Benchmark"):  # its keys are Benchmark's keywords, checked by Benchmark
        return Benchmark(dataset, extractors, progress=progress, **kwargs)


def _check_rows(entries: Sequence[Any], extractors: Sequence[Any], n_rows: int, what: str) -> None:
    """Each precomputed matrix has one row per label (or raw input), in the same order."""
    for i, (entry, extractor) in enumerate(zip(entries, extractors)):
        matrix = getattr(extractor, "embeddings", None) if "embeddings" in entry else None
        if matrix is not None and matrix.shape[0] != n_rows:
            raise InputValidationError(f"{what} has {n_rows} rows but extractors[{i}] {str(entry['embeddings'])!r} "
                                       f"has {matrix.shape[0]}; give one label per embedding row, in the same order")


def _resolver(base_dir: pathlib.Path) -> Any:
    """Relative paths in a config are relative to the config file's folder."""
    return lambda p: (base_dir / p) if not pathlib.Path(p).is_absolute() else pathlib.Path(p)


def input_files(config: Mapping[str, Any], config_path: str | pathlib.Path) -> list[dict[str, Any]]:
    """Provenance of every data file a validated run config reads: the config itself, the raw inputs (each image of
    an image source), labels, groups, embeddings.  Model files are not listed: each extractor's identity hashes them.

    Paths are recorded as given (on the command line, in the config); sizes and SHA-256
    hashes are of the bytes read, so a result names exactly the files it came from.
    """
    resolve = _resolver(pathlib.Path(config_path).resolve().parent)
    section = config["dataset"]
    records = [file_record("config", config_path, pathlib.Path(config_path))]
    records += [file_record(role, given, path) for role, given, path in source_files(section, resolve)]
    for role in ("labels", "groups"):
        if role in section:
            records.append(file_record(role, section[role], resolve(section[role])))
    for entry in config["extractors"]:
        if "embeddings" in entry:
            records.append({**file_record("embeddings", entry["embeddings"], resolve(entry["embeddings"])),
                            "extractor": str(entry["name"])})
    return records


def input_paths(records: Sequence[Mapping[str, Any]], base_dir: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Each data file of :func:`input_files` records, by its path as recorded, resolved against the config file's
    folder ``base_dir``; the config itself is left out (its path is as given on the command line, and its holder
    knows it)."""
    return {record["path"]: pathlib.Path(base_dir) / record["path"] for record in records if record["role"] != "config"}


def with_metric_options(config: dict, specs: Sequence[str], primary_metric: str | None, probe: bool = False) -> dict:
    """``--metric`` specs join the config's [[metrics]] (an identical entry once); ``--primary-metric`` overrides
    [benchmark]; ``--probe`` sets [benchmark] probe."""
    config = dict(config)
    if probe:
        config["benchmark"] = {**config.get("benchmark", {}), "probe": True}
    if specs:
        entries = [*config.get("metrics", [])]
        for entry in map(metric_entry, specs):
            if entry not in entries:  # the same metric twice (e.g. to plan and to score) is one metric
                entries.append(entry)
        config["metrics"] = entries
    if primary_metric is not None:
        config["benchmark"] = {**config.get("benchmark", {}), "primary_metric": primary_metric}
    return config


def metric_entry(spec: str) -> dict[str, str]:
    """``module:function`` or ``module:function:name`` as a [[metrics]] entry (load_metric checks the path)."""
    if spec.count(":") == 2:
        path, name = spec.rsplit(":", 1)
        return {"path": path, "name": name}
    return {"path": spec}

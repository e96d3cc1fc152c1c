"""Build a Benchmark from a TOML/YAML run configuration (what ``vertebrae run`` reads).

Example (TOML)::

    [dataset]
    id = "support-tickets"        # with revision: a declared identity
    revision = "2026-11"
    labels = "labels.csv"         # .npy, .txt, .csv or .parquet
    labels_column = "label"       # or a list of columns: 0/1 indicators (their names are the labels)
    # target_type = "multi_label" | "regression"; label_names = [...]; target_names = [...]
    # groups = "groups.csv"; groups_column = "customer"

    [[extractors]]
    name = "minilm"
    embeddings = "minilm.npy"     # .npy, .npz, .parquet or .csv

    [scoring]                     # OverlapScoringConfig fields
    k = "auto"

    [stability]                   # StabilityConfig fields (optional)
    mode = "prototype"
    repeats = 20

    [separatix]                   # SeparatixConfig fields (optional; enabled and gated by default)
    overlap_threshold = 0.8

    [benchmark]
    quality_tolerance = 0.02
    # primary_metric = "my_metric"
    # on_error = "record"         # keep the other extractors when one fails (default "raise")
    # stage_modules = ["my_project.stages"]   # modules whose @stage functions join the plan
    # probe = true                # add LinearProbeMetric and KNNMetric as reference metrics (vertebrae run --probe)
    # referee = "probe"           # a linear probe judges the finalists (vertebrae run --referee probe)

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
keys are rejected with the list of allowed ones, and a value of the wrong type with one
line naming its key, before any file is loaded.  :func:`input_files` records every
file a run reads (path as given, size, SHA-256) for the result's metadata.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .agreement import probe_metrics
from .referee import referee_metric
from .benchmark import Benchmark
from .cache import CacheConfig
from .compression import EmbeddingCompressionConfig
from .datasets import BenchmarkDataset
from .errors import ConfigError, ConfigTypeError, InputValidationError
from .extractors import PrecomputedExtractor
from .identity import DatasetIdentity
from .io import file_record, load_column, load_config_file, load_matrix
from .scoring.metrics import metrics_from_config
from .scoring.overlap import ContinuousOverlapScoringConfig, OverlapScoringConfig
from .scoring.separatix import SeparatixConfig
from .scoring.stability import StabilityConfig
from .user_modules import import_user_module

BENCHMARK_KEYS = {"primary_metric", "quality_tolerance", "on_error", "stage_modules", "probe", "referee"}
#: Top-level sections a run configuration may contain.
SECTIONS = {"dataset", "extractors", "scoring", "continuous", "stability", "separatix", "benchmark", "metrics",
            "cache", "compression"}


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
}
EXTRACTOR_FIELDS = {"name": (_is_text, 'a string such as "minilm"'),
                    "embeddings": (_is_path, 'a file path such as "minilm.npy"')}
DATASET_KEYS = set(DATASET_FIELDS)


def _check_keys(where: str, data: Any, allowed: set[str]) -> Mapping[str, Any]:
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
    if "scoring" in config:
        kwargs["scoring_config"] = OverlapScoringConfig.from_dict(config["scoring"])
    if "continuous" in config:
        kwargs["continuous_config"] = ContinuousOverlapScoringConfig.from_dict(config["continuous"])
    if "stability" in config:
        kwargs["stability_config"] = StabilityConfig.from_dict(config["stability"])
    if "separatix" in config:
        kwargs["separatix_config"] = SeparatixConfig.from_dict(config["separatix"])
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
    return kwargs


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
    """Validate every section (and load the files) before anything is scored."""
    section = _check_fields("[dataset]", config.get("dataset"), DATASET_FIELDS)
    if "labels" not in section:
        raise ConfigError("config [dataset] needs labels = \"path\" (labels, indicator or regression targets)")
    extractors_cfg = config.get("extractors")
    if not isinstance(extractors_cfg, list) or not extractors_cfg:
        raise ConfigError("config needs at least one [[extractors]] entry with name and embeddings")
    for i, entry in enumerate(extractors_cfg):
        if "name" not in _check_fields(f"extractors[{i}]", entry, EXTRACTOR_FIELDS) or "embeddings" not in entry:
            raise ConfigError(f"config extractors[{i}] needs name and embeddings")
    kwargs = benchmark_kwargs(config)  # config errors before loading large files
    if "cache" in config:
        kwargs["cache_config"] = cache_config_from_section(config["cache"], base_dir)
    resolve = _resolver(base_dir)
    y = load_column(resolve(section["labels"]), section.get("labels_column"), "labels")
    extractors = [PrecomputedExtractor(str(entry["name"]), load_matrix(resolve(entry["embeddings"])))
                  for entry in extractors_cfg]
    first = extractors[0].embeddings
    n_labels = len(y) if hasattr(y, "__len__") and np.ndim(y) != 0 else None
    if n_labels is not None and n_labels != first.shape[0]:
        raise InputValidationError(f"the labels file {str(section['labels'])!r} has {n_labels} rows but "
                                   f"extractors[0] {str(extractors_cfg[0]['embeddings'])!r} has {first.shape[0]}; "
                                   "give one label per embedding row, in the same order")
    target_type, label_names, target_names = (section.get(key) for key in ("target_type", "label_names",
                                                                            "target_names"))
    columns = section.get("labels_column")
    if isinstance(columns, list):  # the columns name the indicator labels (or the regression targets)
        if target_type == "regression" and target_names is None:
            target_names = [str(c) for c in columns]
        elif target_type in (None, "multi_label") and label_names is None:
            label_names = [str(c) for c in columns]
    dataset = BenchmarkDataset.from_embeddings(
        first, y, identity=_identity(section), target_type=target_type, label_names=label_names,
        target_names=target_names, name=section.get("name"))
    if "groups" in section:
        dataset = dataset.with_groups(load_column(resolve(section["groups"]), section.get("groups_column"), "groups"))
    return Benchmark(dataset, extractors, progress=progress, **kwargs)


def _resolver(base_dir: pathlib.Path) -> Any:
    """Relative paths in a config are relative to the config file's folder."""
    return lambda p: (base_dir / p) if not pathlib.Path(p).is_absolute() else pathlib.Path(p)


def input_files(config: Mapping[str, Any], config_path: str | pathlib.Path) -> list[dict[str, Any]]:
    """Provenance of every file a validated run config reads: the config itself, labels, groups, embeddings.

    Paths are recorded as given (on the command line, in the config); sizes and SHA-256
    hashes are of the bytes read, so a result names exactly the files it came from.
    """
    resolve = _resolver(pathlib.Path(config_path).resolve().parent)
    section = config["dataset"]
    records = [file_record("config", config_path, pathlib.Path(config_path)),
               file_record("labels", section["labels"], resolve(section["labels"]))]
    if "groups" in section:
        records.append(file_record("groups", section["groups"], resolve(section["groups"])))
    for entry in config["extractors"]:
        records.append({**file_record("embeddings", entry["embeddings"], resolve(entry["embeddings"])),
                        "extractor": str(entry["name"])})
    return records


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

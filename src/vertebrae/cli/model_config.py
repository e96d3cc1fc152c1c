"""Extractors named in a run config: one declarative table of kinds (what ``[[extractors]]`` may say).

Each row names the extractor class by import path (imported only when a config uses the kind, so
``import vertebrae`` stays light) and says which of its options are files that must exist, Hugging Face
model folders (or ids in the local cache), Python objects by ``module:attribute``, or embedding files.
The options a kind accepts are its class's constructor parameters (``model`` stands for the parameter
that takes the model), so the table never repeats a signature and cannot drift from it.

Checking and building are two steps: :func:`check_extractors` validates every entry — kind, option
names, required options, every path — before any data file or model loads, so a typo in the last
entry or a model that was never downloaded is one line before the first model spends a minute
loading; :func:`build_extractors` then imports the named objects and constructs the extractors
(which load their models lazily, on first use).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import pathlib
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError, ConfigTypeError, DependencyError, InputValidationError, VertebraeError
from ..inputs.io import load_matrix
from .._base.user_modules import import_user_module

#: Constructor parameters a config never sets: the entry's ``name`` is its own key; progress follows the CLI.
SET_BY_VERTEBRAE = ("self", "name", "progress")
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


@dataclasses.dataclass(frozen=True)
class Kind:
    """One extractor kind: its class and what its options mean (option names as the config writes them)."""

    target: str  #: ``module:Class``
    model: str | None = None  #: the constructor parameter the config's ``model`` option fills
    hub_models: tuple[str, ...] = ()  #: a Hugging Face model folder, or a model id in the local cache
    paths: tuple[str, ...] = ()  #: files or folders (one or a list) that must exist
    imports: tuple[str, ...] = ()  #: Python objects as ``module:attribute``
    path_or_import: tuple[str, ...] = ()  #: a file path, or ``module:attribute``
    factories: tuple[str, ...] = ()  #: imported objects that are a class or function are called with no arguments
    matrices: tuple[str, ...] = ()  #: embedding files (.npy, .npz, .parquet, .csv) loaded as the matrix
    required: tuple[str, ...] = ()  #: options a config must give beyond the constructor's required parameters
    embeds_inputs: bool = True  #: whether it embeds the dataset's raw inputs (False: precomputed embeddings)


KINDS: dict[str, Kind] = {
    "precomputed": Kind("vertebrae.extractors.base:PrecomputedExtractor", matrices=("embeddings",),
                        required=("embeddings",), embeds_inputs=False),
    "sentence_transformers": Kind("vertebrae.extractors.sentence_transformers:SentenceTransformerExtractor",
                                  model="model_or_path", hub_models=("model",)),
    "hf_text": Kind("vertebrae.extractors.huggingface:HFTextExtractor", model="model_path_or_id",
                    hub_models=("model",)),
    "hf_vision": Kind("vertebrae.extractors.hf_vision:HFVisionExtractor", model="model_path", hub_models=("model",)),
    "hf_audio": Kind("vertebrae.extractors.hf_audio:HFAudioExtractor", model="model_path", hub_models=("model",)),
    "onnx": Kind("vertebrae.extractors.onnx:ONNXExtractor", model="model_path", paths=("model",),
                 imports=("input_fn", "output_fn")),
    "onnx_text": Kind("vertebrae.extractors.onnx_text:ONNXTextExtractor", model="model_path",
                      paths=("model", "tokenizer")),
    "torch": Kind("vertebrae.extractors.torch:TorchExtractor", model="model", path_or_import=("model",),
                  paths=("checkpoint_paths",), imports=("collate_fn", "output_fn")),
    "keras": Kind("vertebrae.extractors.keras:KerasExtractor", model="model", path_or_import=("model",)),
    "jax": Kind("vertebrae.extractors.jax:JAXExtractor", model="apply", imports=("model", "params")),
    "sklearn": Kind("vertebrae.extractors.base:SklearnExtractor", model="estimator", imports=("model",),
                    factories=("model",)),
    "callable": Kind("vertebrae.extractors.base:CallableExtractor", model="fn", imports=("model",)),
}
#: Facts of the ``[dataset]`` section an extractor option defaults to when the config leaves it out.
DATASET_DEFAULTS = ("sampling_rate",)


@dataclasses.dataclass(frozen=True)
class CheckedEntry:
    """A validated ``[[extractors]]`` entry: paths resolved, import paths not yet imported."""

    where: str
    name: str
    kind: str
    options: Mapping[str, Any]


def extractor_class(kind: str, where: str) -> Any:
    """The class of ``kind``, imported now (an extractor module imports its framework only when a model loads)."""
    module_name, _, attribute = KINDS[kind].target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DependencyError(f"{where}: kind {kind!r} is not available in this installation: importing "
                              f"{module_name} failed ({exc})") from None
    return getattr(module, attribute)


def _parameters(kind: str, where: str) -> dict[str, inspect.Parameter]:
    """The constructor's parameters by config option name (``model`` for the model parameter)."""
    spec = KINDS[kind]
    parameters = {}
    for name, parameter in inspect.signature(extractor_class(kind, where)).parameters.items():
        if name in SET_BY_VERTEBRAE or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        parameters["model" if name == spec.model else name] = parameter
    return parameters


def allowed_options(kind: str, where: str = "config") -> list[str]:
    """Every key an entry of ``kind`` may hold: ``name``, ``kind`` and the constructor's options."""
    return sorted({"name", "kind", *_parameters(kind, where)})


def check_extractors(entries: Any, base_dir: pathlib.Path, dataset: Mapping[str, Any]) -> list[CheckedEntry]:
    """Validate every ``[[extractors]]`` entry, then every path in them, before any data or model loads.

    Kinds and options first (a typo anywhere fails before a file is looked at), then the paths in
    config order, so the first missing model is named and nothing has been loaded.
    """
    if not isinstance(entries, list) or not entries:
        raise ConfigError("config needs at least one [[extractors]] entry: name and embeddings = \"x.npy\", or "
                          "name, kind and model (docs/cli.md, \"Models in a run config\")")
    checked = [_check_entry(i, entry, dataset) for i, entry in enumerate(entries)]
    return [dataclasses.replace(entry, options=_resolve_paths(entry, base_dir)) for entry in checked]


def _check_entry(i: int, entry: Any, dataset: Mapping[str, Any]) -> CheckedEntry:
    where = f"extractors[{i}]"
    if not isinstance(entry, Mapping):
        raise ConfigTypeError(f"config section {where} must be a table/mapping, got {type(entry).__name__}")
    kind = entry.get("kind", "precomputed")
    if not isinstance(kind, str) or kind not in KINDS:
        close = difflib.get_close_matches(str(kind), list(KINDS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"config {where} kind {kind!r} is unknown{hint}; allowed: {sorted(KINDS)}")
    name = entry.get("name")
    if isinstance(name, int) and not isinstance(name, bool):
        name = str(name)  # YAML and TOML read `name: 2` as a number
    if name is not None and not (isinstance(name, str) and name.strip()):
        raise ConfigTypeError(f"config {where} name must be a non-empty string such as \"minilm\", got {name!r}")
    parameters = _parameters(kind, f"config {where}")
    allowed = sorted({"name", "kind", *parameters})
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        spelled = "" if "kind" in entry else " (an entry without kind reads precomputed embeddings)"
        raise ConfigError(f"config section {where} has unknown key(s) {unknown} for kind {kind!r}{spelled}; "
                          f"allowed: {allowed}")
    options = {key: value for key, value in entry.items() if key not in ("name", "kind")}
    for key in DATASET_DEFAULTS:
        if key in parameters and key not in options and key in dataset:
            options[key] = dataset[key]
    required = {key for key, p in parameters.items() if p.default is inspect.Parameter.empty} | set(KINDS[kind].required)
    missing = sorted(required - set(options) | ({"name"} if name is None else set()))
    if missing:
        if kind == "precomputed" and "kind" not in entry:
            raise ConfigError(f"config {where} needs name and embeddings (or kind = \"...\" and model = \"...\" for a "
                              f"model; kinds: {sorted(KINDS)})")
        raise ConfigError(f"config {where} (kind {kind!r}) needs {missing}; allowed: {allowed}")
    where = f"config {where} ({name!r}, kind {kind!r})"
    _check_value_types(where, kind, options)
    return CheckedEntry(where, name, kind, options)


def _check_value_types(where: str, kind: str, options: Mapping[str, Any]) -> None:
    """Path and import-path options are strings (a list of strings for ``paths``); other values the class checks."""
    spec = KINDS[kind]
    for key, value in options.items():
        if key in spec.paths and isinstance(value, list):
            ok = bool(value) and all(isinstance(v, str) and v for v in value)
        elif key in (*spec.hub_models, *spec.paths, *spec.path_or_import, *spec.matrices):
            ok = isinstance(value, str) and value != ""
        elif key in spec.imports:
            ok = isinstance(value, str) and _IMPORT_PATH.fullmatch(value) is not None
        else:
            continue
        if not ok:
            what = ("\"module:attribute\", e.g. \"my_project.models:encoder\"" if key in spec.imports else
                    "a path (or a list of paths)" if key in spec.paths else
                    "a path or \"module:attribute\"" if key in spec.path_or_import else "a path")
            raise ConfigTypeError(f"{where}: {key} must be {what}, got {value!r}")


def _resolve_paths(entry: CheckedEntry, base_dir: pathlib.Path) -> dict[str, Any]:
    """Relative paths against the config's folder; a missing one is named here, before any model loads."""
    spec, options = KINDS[entry.kind], dict(entry.options)
    for key, value in entry.options.items():
        if key in spec.hub_models:
            options[key] = _model_folder(entry.where, key, value, base_dir)
        elif key in spec.paths or key in spec.matrices or (key in spec.path_or_import
                                                           and not _IMPORT_PATH.fullmatch(value)):
            paths = [_existing(entry.where, key, item, base_dir) for item in (value if isinstance(value, list)
                                                                                else [value])]
            options[key] = paths if isinstance(value, list) else paths[0]
    return options


def _resolve(value: str, base_dir: pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def _existing(where: str, key: str, value: str, base_dir: pathlib.Path) -> str:
    path = _resolve(value, base_dir)
    if not path.exists():
        raise InputValidationError(f"{where}: {key} {value!r} does not exist (no file or folder {path}); relative "
                                   "paths are relative to the config file")
    return str(path)


def _model_folder(where: str, key: str, value: str, base_dir: pathlib.Path) -> str:
    """A Hugging Face model: a folder (relative to the config) or a model id already in the local cache."""
    from ..extractors.huggingface import local_model_dir

    path = _resolve(value, base_dir)
    if path.is_dir():
        return str(path)
    if not path.exists() and _HUB_ID.fullmatch(value):
        try:
            return str(local_model_dir(value, where=where))
        except (InputValidationError, DependencyError):
            pass
    found = "is a file, not a model folder" if path.exists() else "does not exist"
    by_id = f"; for a model id, `hf download {value}` puts it in the local cache" if _HUB_ID.fullmatch(value) else ""
    raise InputValidationError(f"{where}: {key} {value!r} {found} (no folder {path} and no model {value!r} in the "
                               f"local Hugging Face cache); vertebrae never downloads models: fetch it first with "
                               f"`hf download REPO_ID --local-dir {path}` (huggingface_hub{by_id}), or fix the path")


def build_extractors(checked: Sequence[CheckedEntry], *, progress: bool | None = None) -> list[Any]:
    """Import the named objects and construct each extractor (models load lazily, on first use)."""
    return [_build(entry, progress) for entry in checked]


def _build(entry: CheckedEntry, progress: bool | None) -> Any:
    spec = KINDS[entry.kind]
    cls = extractor_class(entry.kind, entry.where)
    kwargs = {}
    for key, value in entry.options.items():
        if key in spec.imports or (key in spec.path_or_import and _IMPORT_PATH.fullmatch(value)):
            value = import_object(value, f"{entry.where} {key}")
            if key in spec.factories and (inspect.isclass(value) or not hasattr(value, "fit")):
                value = _call_factory(entry.where, key, value)
        elif key in spec.matrices:
            value = load_matrix(value)
        kwargs[spec.model if key == "model" else key] = value
    if "progress" in inspect.signature(cls).parameters:
        kwargs["progress"] = progress
    with warnings.catch_warnings(record=True) as caught:  # re-raised below with the entry's location
        warnings.simplefilter("always", DeprecationWarning)
        try:
            built = cls(entry.name, **kwargs)
        except VertebraeError as exc:  # named with the entry and the data files it read (a NaN row is the file's)
            files = ", ".join(f"{key} = {str(entry.options[key])!r}" for key in spec.matrices if key in entry.options)
            raise type(exc)(f"{entry.where}{f' ({files})' if files else ''}: {exc}") from None
        except TypeError as exc:  # a value of the wrong type that the class does not check itself
            raise ConfigTypeError(f"{entry.where}: {exc}") from None
    for item in caught:  # an old option spelling: the config entry to edit, and the new spelling
        warnings.warn(f"{entry.where}: {item.message}", item.category, stacklevel=1)
    return built


def import_object(path: str, where: str) -> Any:
    """``module:attribute`` (the attribute may be dotted) from an importable module."""
    module_name, _, attribute = path.partition(":")
    value: Any = import_user_module(module_name, where)
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"{where}: {path!r}: {module_name} has no attribute {attribute!r}")
        value = getattr(value, part)
    return value


def _call_factory(where: str, key: str, factory: Any) -> Any:
    if not callable(factory):
        raise ConfigTypeError(f"{where}: {key} names a {type(factory).__name__}, neither the object nor a "
                              "class or function that builds it")
    try:
        return factory()
    except Exception as exc:  # user code: say which option failed and why
        raise ConfigError(f"{where}: building {key} by calling it with no arguments failed: "
                          f"{type(exc).__name__}: {exc}") from exc

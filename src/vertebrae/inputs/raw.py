"""Raw-input sources of a run config's ``[dataset]``: texts, images or audio for model extractors to embed.

One of three keys names the source (relative paths are relative to the config file):

- ``texts = "tickets.csv"`` (or ``.parquet``): the ``input_column`` of the table; the labels are its
  ``labels_column`` unless ``labels = "..."`` names another file;
- ``images = "photos/"``: a folder with one subfolder per class (the subfolder names are the labels), or
  ``images = "images.csv"``: a table whose ``input_column`` holds image paths (relative to the table's
  folder) and whose ``labels_column`` holds the labels; ``max_image_pixels`` bounds what one file may
  decode to (see :mod:`vertebrae.inputs.images`).  A folder follows a symbolic link (to a class folder,
  a subfolder or a file) only when its target lies inside the folder, unless ``follow_links =
  "anywhere"``: a link out of it is refused, named, by default (a dataset folder describes its own
  files, and a link planted in a shared folder must not read elsewhere unasked);
- ``audio = "clips.npz"``: one waveform per array in archive order (1-D samples or 2-D channels x
  samples, lengths may differ), or ``clips.npy``: one 2-D (clips x samples) or 3-D array; with
  ``sampling_rate`` (Hz) and ``labels = "..."``.

Every problem names the file, and the column and 0-based row where there is one, before any model loads.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .audio import MAX_SAMPLING_RATE, check_waveform
from ..errors import ConfigError, ConfigTypeError, InputValidationError
from .io import _existing, _load_numpy, _read_parquet, labels_source, load_column
from .targets import TargetSource, build_targets

SOURCES = ("texts", "images", "audio")
#: How an image folder treats symbolic links: follow those whose target lies inside it (default), or any.
FOLLOW_LINKS = ("inside", "anywhere")
TABLE_SUFFIXES = (".csv", ".parquet")
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")


def source_of(section: Mapping[str, Any]) -> str | None:
    """The raw-input key of ``[dataset]`` (None: precomputed embeddings only); at most one."""
    given = [key for key in SOURCES if key in section]
    if len(given) > 1:
        raise ConfigError(f"config [dataset] names {given}; give one raw-input source (texts, images or audio)")
    if not given:
        for key in ("input_column", "sampling_rate", "max_image_pixels", "follow_links"):
            if key in section:
                raise ConfigError(f"config [dataset] {key} applies to a raw-input source; add texts, images or audio")
        return None
    return given[0]


def load_source(section: Mapping[str, Any],
                resolve: Any) -> tuple[str, Any, Any, TargetSource | None, dict[str, Any]]:
    """``(kind, inputs, labels, where the labels are, constructor options)`` of the source; ``kind`` picks the
    dataset constructor; the labels' source is None for an image folder (its subfolder names are the labels)."""
    source = source_of(section)
    path = resolve(section[source])
    if source == "audio":
        if "sampling_rate" not in section:
            raise ConfigError("config [dataset] audio needs sampling_rate = 16000 (the waveforms' rate in Hz)")
        rate = section["sampling_rate"]
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= MAX_SAMPLING_RATE:
            raise ConfigTypeError(f"config [dataset] sampling_rate must be a whole number of Hz from 1 to "
                                  f"{MAX_SAMPLING_RATE} (e.g. 16000), got {rate!r}")
        return "audio", load_waveforms(path), *_separate_labels(section, resolve, "audio"), {"sampling_rate": rate}
    if "sampling_rate" in section:
        raise ConfigError(f"config [dataset] sampling_rate applies to audio, not to {source}")
    if "max_image_pixels" in section and source != "images":
        raise ConfigError(f"config [dataset] max_image_pixels applies to images, not to {source}")
    if "follow_links" in section and not (source == "images" and path.is_dir()):
        raise ConfigError("config [dataset] follow_links applies to a folder of images, not to a table or to "
                          f"{source}")
    options = {"max_image_pixels": section["max_image_pixels"]} if "max_image_pixels" in section else {}
    if source == "images" and path.is_dir():
        if any(key in section for key in ("labels", "labels_column", "input_column")):
            raise ConfigError("config [dataset] images is a folder: its class subfolders are the labels; leave out "
                              "labels, labels_column and input_column (or give a table of image paths)")
        paths, labels = image_folder(path, section.get("follow_links", "inside"))
        return "images", paths, labels, None, options
    table = _table(path, source)
    column = section.get("input_column")
    if column is None:
        raise ConfigError(f"config [dataset] needs input_column = \"...\": the column of {section[source]!r} that holds "
                          f"the {'texts' if source == 'texts' else 'image paths'}")
    values = _column_values(table, column, path, "text" if source == "texts" else "image path")
    if "labels" in section:
        labels, where = _separate_labels(section, resolve, source)
    elif "labels_column" in section:
        labels = load_column(path, section["labels_column"], "labels")
        where = labels_source(path, section[source], section["labels_column"], source)
    else:
        raise ConfigError(f"config [dataset] needs labels_column = \"...\" (a column of {section[source]!r}) or "
                          "labels = \"labels.csv\"")
    if source == "texts":
        return "texts", values, labels, where, {}
    return "images", [_image_file(path, i, value) for i, value in enumerate(values)], labels, where, options


def dataset_from_source(section: Mapping[str, Any], resolve: Any, **options: Any) -> Any:
    """The ``BenchmarkDataset`` of the source (``options``: identity, target options, name; None values left out)."""
    from .datasets import BenchmarkDataset

    kind, inputs, labels, where, extra = load_source(section, resolve)
    options = {key: value for key, value in options.items() if value is not None}
    if where is not None:  # the dataset would name them ``y``; here they are a file's column and rows
        build_targets(labels, n_samples=len(inputs), argument=where,
                      **{key: options[key] for key in ("target_type", "label_names", "target_names") if key in options})
    if kind == "texts":
        return BenchmarkDataset.from_arrays(inputs, labels, **options)
    if kind == "images":
        return BenchmarkDataset.from_image_paths(inputs, labels, **extra, **options)
    return BenchmarkDataset.from_audio_arrays(inputs, labels, **extra, **options)


def _separate_labels(section: Mapping[str, Any], resolve: Any, source: str) -> tuple[Any, TargetSource]:
    if "labels" not in section:
        raise ConfigError(f"config [dataset] {source} needs labels = \"labels.csv\" (one label per row)")
    path, column = resolve(section["labels"]), section.get("labels_column")
    return load_column(path, column, "labels"), labels_source(path, section["labels"], column)


def _table(path: pathlib.Path, source: str) -> Any:
    _existing(path, source)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        folder = " or a folder of class subfolders" if source == "images" else ""
        raise InputValidationError(f"{path}: the {source} source must be a .csv or .parquet table{folder}, "
                                   f"got {suffix!r}")
    if suffix == ".parquet":
        return _read_parquet(path)
    import pandas as pd

    # every cell is text: "NA" or "123" is a text here; only an empty cell is missing
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])


def _column_values(table: Any, column: Any, path: pathlib.Path, what: str) -> list[str]:
    if not isinstance(column, str):
        raise ConfigTypeError(f"config [dataset] input_column must be a column name, got {column!r}")
    if column not in table.columns:
        raise InputValidationError(f"{path}: column {column!r} not found; columns are {list(table.columns)}")
    values = table[column].tolist()
    for i, value in enumerate(values):
        if not isinstance(value, str):
            problem = "is empty" if value is None or value != value else f"is {type(value).__name__} {value!r}"
            raise InputValidationError(f"{path}: row {i} of column {column!r} {problem}, not a {what}; fix or "
                                       "delete that row")
        if not value.strip():
            raise InputValidationError(f"{path}: row {i} of column {column!r} is blank, not a {what}; fix or "
                                       "delete that row")
    return values


def _image_file(table_path: pathlib.Path, row: int, value: str) -> str:
    """An image path of a table row, relative to the table's folder; it must exist."""
    path = pathlib.Path(value).expanduser()
    path = path if path.is_absolute() else table_path.parent / path
    if not path.is_file():
        raise InputValidationError(f"{table_path}: row {row}: image {value!r} does not exist (no file {path})")
    return str(path)


def image_folder(folder: pathlib.Path, follow_links: str = "inside") -> tuple[list[str], list[str]]:
    """Image files below each class subfolder (sorted), and their labels (the subfolder names).

    A symbolic link is followed only while its target lies inside ``folder`` (``follow_links="anywhere"``: any);
    a link out of it is refused, naming the link and its target.  A link that leads back to a folder already
    walked is not walked again."""
    if follow_links not in FOLLOW_LINKS:
        raise ConfigError(f"config [dataset] follow_links must be one of {list(FOLLOW_LINKS)}, got {follow_links!r}")
    root = folder.resolve()
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if loose:
        raise InputValidationError(f"{folder}: image {loose[0]!r} is not in a class subfolder; put each image in the "
                                   "subfolder named by its label")
    if not classes:
        raise InputValidationError(f"{folder}: no class subfolders; put each image in a subfolder named by its label")
    paths, labels = [], []
    for cls in classes:
        images = sorted(_images_below(cls, folder, root, follow_links))
        if not images:
            raise InputValidationError(f"{cls}: the class folder holds no images ({', '.join(IMAGE_SUFFIXES)})")
        paths += [str(p) for p in images]
        labels += [cls.name] * len(images)
    return paths, labels


def _images_below(cls: pathlib.Path, folder: pathlib.Path, root: pathlib.Path, follow_links: str) -> list[pathlib.Path]:
    """The image files below one class folder (hidden names skipped), every link checked against the rule."""
    found, walked, pending = [], set(), [cls]
    while pending:
        directory = pending.pop()
        real = _followed(directory, folder, root, follow_links)
        if real in walked:
            continue
        walked.add(real)
        for entry in directory.iterdir():
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                pending.append(entry)
            elif entry.is_file() and entry.suffix.lower() in IMAGE_SUFFIXES:
                _followed(entry, folder, root, follow_links)
                found.append(entry)
    return found


def _followed(path: pathlib.Path, folder: pathlib.Path, root: pathlib.Path, follow_links: str) -> pathlib.Path:
    """Where ``path`` really is; a place outside the dataset folder is refused unless links may go anywhere."""
    real = path.resolve()
    if follow_links == "inside" and real != root and root not in real.parents:
        raise InputValidationError(
            f"{path}: a symbolic link to {real}, outside the dataset folder {folder}; an image folder follows links "
            "only inside itself: move or copy the files in, or set follow_links = \"anywhere\" in [dataset] to "
            "follow links out of it")
    return real


def load_waveforms(path: pathlib.Path) -> list[np.ndarray]:
    """Waveforms from ``.npz`` (one array per clip, archive order) or ``.npy`` (2-D or 3-D, one clip per row)."""
    _existing(path, "audio")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        array = _load_numpy(path, "audio")
        if array.ndim not in (2, 3):
            raise InputValidationError(f"{path}: an audio .npy holds one clip per row (clips x samples, or clips x "
                                       f"channels x samples), got shape {array.shape}; use a .npz for clips of "
                                       "different lengths")
        named = [(f"row {i}", clip) for i, clip in enumerate(array)]
    elif suffix == ".npz":
        with _load_numpy(path, "audio") as archive:
            named = [(f"row {i} (array {key!r})", archive[key]) for i, key in enumerate(archive.files)]
    else:
        raise InputValidationError(f"{path}: audio must be a .npz (one array per clip) or a .npy, got {suffix!r}")
    if not named:
        raise InputValidationError(f"{path}: the audio file holds no clips")
    # the dataset's own rules (audio_inputs.check_waveform), named with the file and row: integer PCM is refused
    # with the scaling to apply, as BenchmarkDataset.from_audio_arrays refuses it
    return [check_waveform(clip, label, where=str(path)) for label, clip in named]


def source_files(section: Mapping[str, Any], resolve: Any) -> list[tuple[str, str, pathlib.Path]]:
    """``(role, path as given, path)`` of every file a source reads, for the result's provenance."""
    source = source_of(section)
    if source is None:
        return []
    given = section[source]
    path = resolve(given)
    if source == "images" and path.is_dir():
        return [("image", str(pathlib.Path(given) / pathlib.Path(p).relative_to(path)), pathlib.Path(p))
                for p in image_folder(path, section.get("follow_links", "inside"))[0]]
    files = [("inputs", given, path)]
    if source == "images":
        values = _column_values(_table(path, source), section["input_column"], path, "image path")
        # as given relative to the table's folder, recorded relative to the config's (where every path is read from)
        files += [("image", value if pathlib.Path(value).expanduser().is_absolute()
                   else str(pathlib.Path(given).parent / value), pathlib.Path(_image_file(path, i, value)))
                  for i, value in enumerate(values)]
    return files

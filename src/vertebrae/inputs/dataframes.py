"""DataFrame datasets: inputs and labels read from named columns of a pandas DataFrame.

``BenchmarkDataset.from_dataframe(df, input_col=..., label_col=...)`` reads

* ``input_col="text"`` — one column of strings (``modality="text"``, the default), or of image
  file paths with ``modality="image"`` (loaded like ``from_image_paths``);
* ``input_col=["f1", "f2", ...]`` — numeric columns as one float feature matrix
  (``modality="tabular"``, the default for numeric columns);
* ``label_col="label"`` — one label per row; ``label_col=["cat", "dog", ...]`` — several 0/1
  columns as a multi-label indicator whose label names are the column names.

Missing values are rejected with their rows before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputTypeError, InputValidationError

MODALITIES = ("text", "image", "tabular")
WHERE = "BenchmarkDataset.from_dataframe"


@dataclass(frozen=True)
class DataFrameColumns:
    """What ``from_dataframe`` builds the dataset from."""

    inputs: Any
    labels: Any
    label_names: list[str] | None
    modality: str
    structure: dict[str, Any]


def _columns(argument: str, value: Any, available: list[Any]) -> list[Any]:
    names = [value] if isinstance(value, str) or not isinstance(value, Sequence) else list(value)
    if not names:
        raise InputValidationError(f"{WHERE}: {argument} is empty; name one column or a list of columns")
    missing = [n for n in names if n not in available]
    if missing:
        raise InputValidationError(f"{WHERE}: {argument} names columns {missing} that the DataFrame lacks; it has "
                                   f"{available}")
    if len(set(names)) != len(names):
        raise InputValidationError(f"{WHERE}: {argument} lists a column twice ({names})")
    return names


def _no_missing(df: Any, columns: list[Any], argument: str) -> None:
    for column in columns:
        rows = np.flatnonzero(df[column].isna().to_numpy())
        if rows.size:
            raise InputValidationError(f"{WHERE}: column {column!r} ({argument}) has missing values in rows "
                                       f"{[int(r) for r in rows[:5]]}; fill or drop them first")


def read_columns(df: Any, input_col: Any, label_col: Any, modality: str | None) -> DataFrameColumns:
    """Validate the named columns and return the inputs, labels and provenance facts."""
    if not (hasattr(df, "columns") and hasattr(df, "iloc")):
        raise InputTypeError(f"{WHERE}: df must be a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise InputValidationError(f"{WHERE}: df has no rows; a benchmark needs at least two classes with two rows each")
    available = list(df.columns)
    inputs = _columns("input_col", input_col, available)
    labels = _columns("label_col", label_col, available)
    overlap = sorted(set(inputs) & set(labels), key=str)
    if overlap:
        raise InputValidationError(f"{WHERE}: columns {overlap} are both input_col and label_col; the labels must "
                                   "not be inputs")
    if modality is None:
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        numeric = is_numeric_dtype(df[inputs[0]]) and not is_bool_dtype(df[inputs[0]])
        modality = "tabular" if len(inputs) > 1 or numeric else "text"
    if modality not in MODALITIES:
        raise InputValidationError(f"{WHERE}: modality must be one of {list(MODALITIES)}, got {modality!r}")
    if modality != "tabular" and len(inputs) > 1:
        raise InputValidationError(f"{WHERE}: modality {modality!r} reads one input column, got {inputs}; several "
                                   "columns form a numeric feature matrix (modality='tabular')")
    _no_missing(df, inputs, "input_col")
    _no_missing(df, labels, "label_col")
    values = _inputs(df, inputs, modality)
    if len(labels) == 1:
        y, label_names = df[labels[0]].tolist(), None
    else:
        y, label_names = _indicator(df, labels), [str(c) for c in labels]
    structure = {"family": "dataframe", "modality": modality, "input_columns": [str(c) for c in inputs],
                 "label_columns": [str(c) for c in labels]}
    return DataFrameColumns(values, y, label_names, modality, structure)


def _inputs(df: Any, columns: list[Any], modality: str) -> Any:
    if modality == "tabular":
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        frame = df[columns]
        non_numeric = [c for c in columns if is_bool_dtype(frame[c]) or not is_numeric_dtype(frame[c])]
        if non_numeric:
            raise InputValidationError(f"{WHERE}: tabular input columns {non_numeric} are not numeric; encode them "
                                       "first or leave them out")
        matrix = frame.to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
        if bad.size:
            raise InputValidationError(f"{WHERE}: input columns have infinite values in rows {bad[:5].tolist()}")
        return matrix
    values = df[columns[0]].tolist()
    kind = "file paths" if modality == "image" else "strings"
    for row, value in enumerate(values):
        if not isinstance(value, str) and not (modality == "image" and hasattr(value, "__fspath__")):
            raise InputTypeError(f"{WHERE}: column {columns[0]!r} row {row} is {type(value).__name__}, but a "
                                 f"{modality} column holds {kind}")
    return values


def _indicator(df: Any, columns: list[Any]) -> np.ndarray:
    """Several label columns: one 0/1 (or bool) column per label."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    matrix = np.empty((len(df), len(columns)), dtype=np.int8)
    for j, column in enumerate(columns):
        values = df[column].to_numpy()
        if is_bool_dtype(df[column]):
            matrix[:, j] = values
            continue
        numeric = is_numeric_dtype(df[column])
        if not numeric or not np.isin(values, (0, 1)).all():
            found = (f"rows {[int(r) for r in np.flatnonzero(~np.isin(values, (0, 1)))[:5]]} do not" if numeric
                     else f"it holds {df[column].dtype} values, not numbers")
            raise InputValidationError(f"{WHERE}: label column {column!r} must hold 0/1 or booleans when several label "
                                       f"columns form a multi-label indicator ({found})")
        matrix[:, j] = values
    return matrix

"""Streaming extraction: every batch validated, outputs written into preallocated arrays."""

from __future__ import annotations

import numpy as np
import pytest

from vertebrae.errors import ConfigError, ExtractorError, InputTypeError, InputValidationError
from vertebrae.extractors.batching import check_outputs, check_texts, stream_batches

X = np.arange(30, dtype=np.float32).reshape(10, 3)


def two_outputs(rows):
    return {"double": X[rows] * 2, "sum": X[rows].sum(axis=1, keepdims=True)}


def test_batches_fill_rows_in_dataset_order():
    calls = []

    def embed(rows):
        calls.append(rows.tolist())
        return two_outputs(rows)

    out = stream_batches(10, 4, embed, ("double", "sum"), source="t", progress=False)
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    np.testing.assert_array_equal(out["double"], X * 2)
    np.testing.assert_array_equal(out["sum"], X.sum(axis=1, keepdims=True))
    assert out["double"].dtype == np.float32


def test_custom_order_changes_batches_not_row_positions():
    order = np.array([9, 3, 0, 7, 1, 2, 8, 4, 6, 5])
    out = stream_batches(10, 3, two_outputs, ("double", "sum"), source="t", progress=False, order=order)
    np.testing.assert_array_equal(out["double"], X * 2)


@pytest.mark.parametrize("bad_batch, message", [
    (lambda rows: {"double": X[rows] * 2}, r"returned outputs \['double'\], expected \['double', 'sum'\]"),
    (lambda rows: {"double": X[rows][:-1], "sum": X[rows][:, :1]}, r"output 'double' has shape \(3, 3\), expected \(4"),
    (lambda rows: {"double": X[rows][:, 0], "sum": X[rows][:, :1]}, r"output 'double' has shape \(4,\)"),
    (lambda rows: {"double": X[rows].astype(str), "sum": X[rows][:, :1]}, r"output 'double' has dtype <U"),
])
def test_first_batch_rejections(bad_batch, message):
    with pytest.raises(ExtractorError, match=message):
        stream_batches(10, 4, bad_batch, ("double", "sum"), source="my-model", progress=False)


@pytest.mark.parametrize("order, nan_row, named", [
    (None, 6, r"batch of rows 4..7: output 'double' has NaN .* rows \[6\]"),
    # extractors batch texts of similar length, so a batch's rows are no range: "9..2" named nothing
    (np.array([9, 2, 7, 5, 0, 1, 3, 4, 6, 8]), 2, r"batch of 4 rows \(2, 5, 7, 9\): output 'double' has NaN"),
])
def test_non_finite_values_name_the_batch_and_its_rows(order, nan_row, named):
    def embed(rows):
        out = two_outputs(rows)
        out["double"] = out["double"].copy()
        out["double"][rows == nan_row] = np.nan
        return out

    with pytest.raises(ExtractorError, match="my-model: " + named):
        stream_batches(10, 4, embed, ("double", "sum"), source="my-model", progress=False, order=order)


@pytest.mark.parametrize("change, message", [
    (lambda a: np.hstack([a, a]), r"is 6 wide with dtype float32, but earlier batches were 3 wide"),
    (lambda a: a.astype(np.float64), r"is 3 wide with dtype float64, but earlier batches were 3 wide with dtype float32"),
])
def test_later_batches_must_match_the_first(change, message):
    def embed(rows):
        out = two_outputs(rows)
        if rows[0] >= 4:
            out["double"] = change(out["double"])
        return out

    with pytest.raises(ExtractorError, match=message):
        stream_batches(10, 4, embed, ("double", "sum"), source="m", progress=False)


def test_progress_bar_reports_rows_per_second(capsys):
    stream_batches(10, 4, two_outputs, ("double", "sum"), source="bar-test", progress=True)
    err = capsys.readouterr().err
    assert "bar-test" in err and "10/10" in err and "rows/s" in err


def test_progress_is_quiet_when_disabled(capsys):
    stream_batches(10, 4, two_outputs, ("double", "sum"), source="quiet", progress=False)
    assert capsys.readouterr().err == ""


def test_text_and_output_name_checks():
    with pytest.raises(InputTypeError, match=r"X\[1\] is int, not str"):
        check_texts(["a", 3], where="E")
    with pytest.raises(InputTypeError, match="got a single str"):
        check_texts("a sentence", where="E")
    with pytest.raises(InputValidationError, match="X is empty"):
        check_texts([], where="E")
    with pytest.raises(ConfigError, match="without ':'"):
        check_outputs(["a:b"], where="E")
    with pytest.raises(ConfigError, match="duplicate"):
        check_outputs(["a", "a"], where="E")

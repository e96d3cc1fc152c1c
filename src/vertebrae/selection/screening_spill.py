"""Where the screening rung loop keeps the rows it embedded: on disk, so memory stays flat with the candidates.

A rung embeds only the rows it adds (its increment), and a candidate that continues needs every
increment again at the next rung.  Held in memory, the increments of 500 candidates outweigh
everything else a run holds; here each increment of each output is written to a run-scoped
temporary folder as soon as its extraction batch returns (``np.save``, or ``save_npz`` for sparse
embeddings), and a candidate's rung matrix is read back (memory-mapped) only while that candidate
is scored.  The saved arrays are the extracted ones, bit for bit, so the scores do not change.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

from .._base.sparse import is_sparse, sparse_module
from ..families.labeled.stages import stack_rows
from ..families.embedding_set import EmbeddingSet


class IncrementStore:
    """Each live extractor's increments, one file per output per rung, in a temporary folder removed by ``close``."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="vertebrae-screening-")
        self._files: dict[str, dict[str | None, list[str]]] = {}
        self._written = 0

    def add(self, extractor_id: str, embeddings: EmbeddingSet) -> None:
        """Write one increment of every output of an extractor (appended after its earlier increments)."""
        files = self._files.setdefault(extractor_id, {})
        for output, embedding in embeddings.parts.items():
            path = os.path.join(self.folder, str(self._written))
            self._written += 1
            if is_sparse(embedding.matrix):
                path += ".npz"
                sparse_module().save_npz(path, sparse_module().csr_matrix(embedding.matrix), compressed=False)
            else:
                path += ".npy"
                np.save(path, embedding.matrix, allow_pickle=False)
            files.setdefault(output, []).append(path)

    def outputs(self, extractor_id: str) -> list[str | None]:
        """The outputs the extractor produced, in its order."""
        return list(self._files[extractor_id])

    def rows(self, extractor_id: str, output: str | None) -> Any:
        """The output's increments so far, concatenated in rung order (an in-memory matrix of this output only)."""
        parts = [_load(path) for path in self._files[extractor_id][output]]
        matrix = stack_rows(parts)
        return matrix if is_sparse(matrix) else np.asarray(matrix)

    def keep_only(self, extractor_ids: set[str]) -> None:
        """Delete the files of every extractor not in ``extractor_ids`` (their candidates left the race)."""
        for extractor_id in set(self._files) - extractor_ids:
            for paths in self._files.pop(extractor_id).values():
                for path in paths:
                    os.remove(path)

    def close(self) -> None:
        self._files.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def _load(path: str) -> Any:
    if path.endswith(".npz"):
        return sparse_module().load_npz(path)
    return np.load(path, mmap_mode="r", allow_pickle=False)

"""Lazy SciPy access, so ``import vertebrae`` does not pay for importing SciPy.

An object can only be a SciPy sparse matrix if ``scipy.sparse`` is already imported,
so :func:`is_sparse` checks ``sys.modules`` instead of importing it.
"""

from __future__ import annotations

import sys
from typing import Any


def is_sparse(obj: Any) -> bool:
    module = sys.modules.get("scipy.sparse")
    return module is not None and module.issparse(obj)


def sparse_module() -> Any:
    """``scipy.sparse``, imported on first use."""
    from scipy import sparse

    return sparse

"""Running plans: the local runner, and the dask.distributed runner (dask imported only when it connects)."""

from .dask import DaskRunner
from .local import LocalRunner

__all__ = ["DaskRunner", "LocalRunner"]

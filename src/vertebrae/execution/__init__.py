"""Running plans: the local runner, the dask.distributed runner (dask imported only when it connects), and the
store runner of staged runs (one phase of a plan file per process)."""

from .dask import DaskRunner
from .local import LocalRunner
from .staged import PlanFile, StoreRunner

__all__ = ["DaskRunner", "LocalRunner", "PlanFile", "StoreRunner"]

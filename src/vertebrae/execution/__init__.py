"""Running plans: the local runner, the dask.distributed runner and the store runner of staged runs (one phase of
a plan per process).  ``DaskRunner`` is loaded on first use: importing this package loads no dask, distributed or
asyncio module."""

from typing import Any

from .local import LocalRunner
from .staged import StoreRunner

__all__ = ["DaskRunner", "LocalRunner", "StoreRunner"]


def __getattr__(name: str) -> Any:
    if name == "DaskRunner":
        from .dask import DaskRunner

        return DaskRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

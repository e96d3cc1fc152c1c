"""limited_threads: the limit holds inside the block, the libraries' own settings come back after it."""

import sys
import types

import numpy as np
import threadpoolctl

from vertebrae._base import threads
from vertebrae._base.threads import limited_threads


def thread_counts() -> dict[str, int]:
    return {lib["filepath"]: lib["num_threads"] for lib in threadpoolctl.threadpool_info()}


def test_the_limit_holds_inside_the_block_and_the_settings_come_back_after_it():
    np.ones((4, 4)) @ np.ones((4, 4))  # BLAS loaded
    before = thread_counts()
    assert before, "no BLAS/OpenMP library found to limit"
    for _ in range(2):  # the second time with the kept controller
        with limited_threads(1):
            assert set(thread_counts().values()) == {1}
        assert thread_counts() == before


def test_the_controller_is_kept_until_a_module_is_imported(monkeypatch):
    with limited_threads(1):
        pass
    kept = threads._threadpool_controller()
    assert threads._threadpool_controller() is kept
    monkeypatch.setitem(sys.modules, "vertebrae_test_new_module", types.ModuleType("vertebrae_test_new_module"))
    rebuilt = threads._threadpool_controller()
    assert rebuilt is not kept
    with limited_threads(1):
        assert set(thread_counts().values()) == {1}


def test_no_limit_leaves_the_settings_alone():
    before = thread_counts()
    with limited_threads(None):
        assert thread_counts() == before

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


def _stamp(item, workspace):
    """Write the item into its workspace after a varying delay (later items often finish first) and return both."""
    import time

    time.sleep(0.002 * ((item * 7) % 5))
    workspace[0] = item
    return item, workspace


def test_reused_workspaces_keep_each_result_until_the_caller_takes_it():
    for workers in (1, 2, 4):
        made = []
        results = threads.map_reusing_workspaces(_stamp, list(range(12)), lambda: made.append(np.zeros(1)) or made[-1],
                                                 workers=workers)
        taken = []
        for item, workspace in results:
            assert workspace[0] == item  # not yet overwritten by a later item
            taken.append(item)
        assert taken == list(range(12))
        assert len(made) == (workers + 1 if workers > 1 else 1)


def test_reused_workspaces_stop_cleanly_on_an_error_or_an_abandoned_iteration():
    import pytest

    def failing(item, workspace):
        if item == 3:
            raise ValueError("item 3")
        return _stamp(item, workspace)

    with pytest.raises(ValueError, match="item 3"):
        list(threads.map_reusing_workspaces(failing, list(range(10)), lambda: np.zeros(1), workers=2))
    results = threads.map_reusing_workspaces(_stamp, list(range(10)), lambda: np.zeros(1), workers=2)
    assert next(results)[0] == 0
    results.close()  # the waiting items are released and the pool stops (the test would hang otherwise)

"""Only the scoring call's own warnings land in a result (issue 37 item 15): a ResourceWarning that the garbage
collector fires during scoring, about a file other code left open, is not an OverlapIndex warning of the
extractor being scored; it still reaches the user's warning handlers."""

from __future__ import annotations

import gc
import sys
import threading
import warnings

import numpy as np
import pytest

from vertebrae.scoring.overlap import OverlapIndexScorer, OverlapScoringConfig
from vertebrae._base.call_warnings import call_warnings


class _Leaky:
    """Code that leaves a file open in a reference cycle: only the cyclic collector closes it (ResourceWarning)."""

    def __init__(self, path) -> None:
        self.me = self
        self.handle = open(path, "rb")  # noqa: SIM115 - left open on purpose


def _collect_when_called(name: str):
    """A profile hook that runs the garbage collector once, the first time a function called ``name`` starts:
    a real collection at a chosen moment inside the dependency's call (it replaces nothing)."""
    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_name == name:
            sys.setprofile(None)
            gc.collect()
    return hook


@pytest.fixture
def leaked_file(tmp_path):
    gc.collect()
    gc.disable()  # the cycle must survive until the collection inside the call
    path = tmp_path / "left-open.bin"
    path.write_bytes(b"x")
    _Leaky(path)
    yield path
    sys.setprofile(None)
    gc.enable()


def test_a_resource_warning_fired_by_gc_during_scoring_is_not_recorded(leaked_file):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1.0, size=(20, 4)) for c in (0.0, 3.0, 6.0)])
    y = np.repeat([0, 1, 2], 20)
    scorer = OverlapIndexScorer(OverlapScoringConfig(k=3))
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        sys.setprofile(_collect_when_called("fit_offline"))  # OverlapIndex's own fitting method
        result = scorer.score(X, y, warn=False)
        sys.setprofile(None)
    unclosed = [w for w in outer if issubclass(w.category, ResourceWarning) and str(leaked_file) in str(w.message)]
    assert len(unclosed) == 1  # it did fire, inside the call, and reached the caller's handler
    assert not any("ResourceWarning" in note or "unclosed" in note for note in result.warnings), result.warnings
    assert result.score == scorer.score(X, y, warn=False).score  # and the score is the same as without it


def test_call_warnings_keeps_the_calls_own_and_passes_on_the_others(tmp_path):
    def from_other_thread():
        warnings.warn("from a monitor thread", RuntimeWarning)

    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with call_warnings() as caught:
            warnings.warn("the call's own", UserWarning)
            worker = threading.Thread(target=from_other_thread)
            worker.start()
            worker.join()
            path = tmp_path / "f.bin"
            path.write_bytes(b"")
            handle = open(path, "rb")  # noqa: SIM115
            del handle  # refcount finalizer: a ResourceWarning about an object, not about the call
            assert [str(w.message) for w in outer] == []  # nothing passed on while the block runs
    assert [(w.category, str(w.message)) for w in caught] == [(UserWarning, "the call's own")]
    passed = [(w.category, str(w.message)) for w in outer]
    assert (RuntimeWarning, "from a monitor thread") in passed
    assert any(category is ResourceWarning and "f.bin" in message for category, message in passed)
    assert len(passed) == 2


def test_call_warnings_passes_on_even_when_the_call_raises():
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with pytest.raises(ValueError), call_warnings():
            worker = threading.Thread(target=lambda: warnings.warn("elsewhere", UserWarning))
            worker.start()
            worker.join()
            raise ValueError("the call failed")
    assert [str(w.message) for w in outer] == ["elsewhere"]

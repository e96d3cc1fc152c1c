"""Pull-based execution: a job whose readers are all cache hits is not run (issue 35, item 2).

The fittable encoder is a seeded random projection of word counts whose ``fit`` appends a line to a
file, so fits are counted in whichever process runs them (the test process or a dask worker). A warm
zero-shot run reads both encodings from the cache and fits 0 times, locally and on a 2-worker
LocalCluster; a warm staged ``score`` reads no embedding. An expected hit whose stored file is
corrupt is computed after all (its fit with it) in read_write mode, and raises in read_only mode.
"""

from __future__ import annotations

import pathlib
import shutil
import warnings

import pytest
from sklearn.exceptions import DataDimensionalityWarning
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.pipeline import make_pipeline
from sklearn.random_projection import GaussianRandomProjection

from tests.test_staged_cli import project  # noqa: F401  (fixture: three extractors, two variants each)
from tests.test_zero_shot_benchmark import text_dataset
from tests.test_zero_shot_fit_once import VOCABULARY
from vertebrae import SklearnExtractor, ZeroShotBenchmark
from vertebrae._base import json_codec
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.cli.main import main
from vertebrae.errors import ArtifactIntegrityError, ArtifactWarning, DataWarning, ScoringWarning
from vertebrae.execution import DaskRunner


class LoggedFit(SklearnExtractor):
    """A fittable encoder: each fit appends the number of rows it saw to ``log`` (one line per fit)."""

    def __init__(self, name: str, log: pathlib.Path) -> None:
        super().__init__(name, make_pipeline(CountVectorizer(vocabulary=VOCABULARY),
                                             GaussianRandomProjection(64, random_state=0)))
        self.log = str(log)

    def fit(self, X, y=None):
        with open(self.log, "a", encoding="utf-8") as file:
            file.write(f"{len(X)}\n")
        return super().fit(X, y)


def fits(log: pathlib.Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def zero_shot(store: pathlib.Path, log: pathlib.Path, mode: str = "read_write") -> ZeroShotBenchmark:
    return ZeroShotBenchmark(text_dataset(), [LoggedFit("proj", log)], cache_config=CacheConfig(store=str(store),
                                                                                                  mode=mode),
                             progress=False)


def run(benchmark: ZeroShotBenchmark, runner=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DataWarning, ScoringWarning, DataDimensionalityWarning))
        return benchmark.run(runner)


def scores(result) -> str:
    data = result.to_dict()
    return json_codec.dumps([r["scores"] for r in data["extractor_results"]])


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_a_warm_zero_shot_run_fits_its_encoder_zero_times(tmp_path, runner, request):
    make_runner = (lambda: None) if runner == "local" else (lambda: DaskRunner(request.getfixturevalue("dask_client")))
    store, log = tmp_path / "cache", tmp_path / "fits.txt"
    cold = run(zero_shot(store, log), make_runner())
    assert fits(log) == 1
    warm = run(zero_shot(store, log), make_runner())
    assert fits(log) == 1  # both encodings are hits: the fit job is not run
    entry = warm["proj"]
    assert [entry.embedding[b]["cache_status"] for b in ("samples", "prompts")] == ["hit", "hit"]
    assert entry.runtime["fit"] == "not_measured_cache_hit"  # it ran nothing, as the hits it served
    assert scores(warm) == scores(cold)


def test_the_skipped_job_is_reported_as_not_needed(tmp_path):
    store, log = tmp_path / "cache", tmp_path / "fits.txt"
    run(zero_shot(store, log))
    benchmark = zero_shot(store, log)
    plan, outcome = benchmark.execute(None, "warm")
    [fit] = [job for job in plan.jobs if job.stage == "fit"]
    assert outcome.statuses[fit.key] == "not_needed" and fit.key not in outcome.timings


def _corrupt_samples(store: pathlib.Path) -> None:
    """Flip one byte in the stored sample embedding (a real corrupted file; its manifest is untouched)."""
    [path] = [p for p in store.glob("encode_samples/*/*.npy")]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_a_corrupt_expected_hit_is_recomputed_with_its_fit_in_read_write_mode(tmp_path, runner, request):
    store, log = tmp_path / "cache", tmp_path / "fits.txt"
    cold = run(zero_shot(store, log))
    _corrupt_samples(store)
    if runner == "local":
        with pytest.warns(ArtifactWarning, match="is corrupt"):
            repaired = run(zero_shot(store, log))
    else:  # the worker finds the entry corrupt (its warning stays there); the driver resubmits it with its fit
        repaired = run(zero_shot(store, log), DaskRunner(request.getfixturevalue("dask_client")))
    assert fits(log) == 2  # the fit the corrupt entry needed, once
    entry = repaired["proj"]
    assert [entry.embedding[b]["cache_status"] for b in ("samples", "prompts")] == ["miss", "hit"]
    assert isinstance(entry.runtime["fit"], float)
    assert scores(repaired) == scores(cold)
    run(zero_shot(store, log))
    assert fits(log) == 2  # the entry was replaced: warm again


def test_a_corrupt_expected_hit_raises_in_read_only_mode(tmp_path):
    store, log = tmp_path / "cache", tmp_path / "fits.txt"
    run(zero_shot(store, log))
    _corrupt_samples(store)
    with pytest.raises(ArtifactIntegrityError, match="read_only mode never repairs"):
        run(zero_shot(store, log, mode="read_only"))
    assert fits(log) == 1


def test_a_warm_staged_score_reads_no_embedding(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    for argv in (["plan", "run.toml", "--store", "store", "-q"], ["embed", "plan.json", "-q"],
                 ["score", "plan.json", "-q"]):
        assert main(argv) == 0
    capsys.readouterr()
    for stage in ("extract", "compress"):  # a warm score needs none of the embed phase's artifacts
        shutil.rmtree(project / "store" / stage)
    assert main(["score", "plan.json"]) == 0
    assert "(0 computed, 18 already there), 0 failed" in capsys.readouterr().out

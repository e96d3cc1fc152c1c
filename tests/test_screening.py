"""Screening by successive halving (vertebrae.selection.screening): rungs, row-increment extraction, results, rejections."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, BenchmarkResult, CacheConfig, ConfigError, DatasetIdentity,
                           EmbeddingCompressionConfig, KNNMetric, ScreeningConfig, StabilityConfig)
from vertebrae.artifacts import FsspecStore
from vertebrae.cli.main import main
from vertebrae.errors import ArtifactIntegrityError
from vertebrae.execution.local import LocalRunner
from vertebrae._base.fingerprint import content_sha256
from vertebrae.extractors.profiling import ResourceProfilingConfig
from vertebrae.selection.screening import full_data_interval, plan_rungs, rung_sizes
from vertebrae.scoring.separatix import SeparatixConfig
from vertebrae.inputs.targets import build_targets
from vertebrae.inputs.views import TargetView, TargetViewConfig

N_PER_CLASS = 200


class Recorder:
    """A real extractor: a fixed linear map of the feature columns; column 0 of the inputs is the row id, and every
    row id it is asked to transform is recorded (so a test can say which rows were embedded)."""

    def __init__(self, name: str, weights: np.ndarray) -> None:
        self.name, self.weights, self.seen = name, np.asarray(weights, dtype=np.float64), []

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        X = np.asarray(X)
        self.seen.extend(X[:, 0].astype(int).tolist())
        return X[:, 1:] @ self.weights

    def recipe(self):
        return {"type": "recorder", "name": self.name, "weights": content_sha256(self.weights)}


class MultiRecorder(Recorder):
    """Two outputs from one pass (like hidden layers): counts its passes and the rows of each."""

    def __init__(self, name: str, weights: np.ndarray) -> None:
        super().__init__(name, weights)
        self.passes = 0

    def output_names(self):
        return ["a", "b"]

    def transform_many(self, X):
        self.passes += 1
        projected = self.transform(X)
        return {"a": projected, "b": projected[:, :2]}


def _features(n_per_class: int = N_PER_CLASS, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per_class)
    features = rng.normal(size=(y.size, 6))
    features[:, 0] += 3.0 * y
    features[:, 1] += 2.5 * y
    X = np.column_stack([np.arange(y.size), features])
    return X, y


def _dataset(n_per_class: int = N_PER_CLASS) -> BenchmarkDataset:
    X, y = _features(n_per_class)
    return BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("screening-blobs", "1"))


def _weights(columns, scale=1.0):
    W = np.zeros((6, len(columns)))
    for j, c in enumerate(columns):
        W[c, j] = scale
    return W


def _candidates():
    return [Recorder("strong", _weights([0, 1, 2])), Recorder("strong_too", _weights([0, 1, 3])),
            Recorder("weak", _weights([3, 4]) + 0.3 * _weights([1, 5])[:, :2]), Recorder("noise", _weights([2, 3, 4]))]


QUIET = {"separatix_config": SeparatixConfig(enabled=False), "progress": False}
# 5 repeats (the default is 3): a t quantile with 4 degrees of freedom lets the noise candidate's rung verdict be `worse`
SCREEN = ScreeningConfig(eta=2, seed=1, repeats=5)


def _screened(extractors=None, **kwargs) -> BenchmarkResult:
    options = {**QUIET, "screening": SCREEN, **kwargs}
    return Benchmark(_dataset(), _candidates() if extractors is None else extractors, **options).run()


def test_rung_sizes_grow_by_eta_up_to_the_dataset():
    assert rung_sizes(600, ScreeningConfig(start_fraction=0.1, eta=2)) == [75, 150, 300]
    assert rung_sizes(600, ScreeningConfig(start_fraction=0.1, eta=3)) == [67, 200]
    assert rung_sizes(600, ScreeningConfig(start_rows=250, eta=3)) == [250]  # one rung below the full data
    assert rung_sizes(600, ScreeningConfig(start_fraction=0.01, start_rows=100, eta=3)) == [200]


def test_rungs_are_nested_disjoint_increments_that_keep_every_class():
    _, y = _features()
    targets = build_targets(y)
    rungs = plan_rungs(targets, ScreeningConfig(eta=2, seed=3))
    assert [r.rows.size for r in rungs] == [75, 150, 300]
    for previous, rung in zip(rungs, rungs[1:]):
        assert np.array_equal(rung.rows[:previous.rows.size], previous.rows)  # nested, in embedding order
        assert not set(rung.increment) & set(previous.rows)
    for rung in rungs:
        counts = np.bincount(y[rung.rows], minlength=3)
        assert (counts >= 2).all() and counts.max() - counts.min() <= 1  # per class, in proportion
    again = plan_rungs(targets, ScreeningConfig(eta=2, seed=3))
    assert all(np.array_equal(a.rows, b.rows) for a, b in zip(rungs, again))
    other = plan_rungs(targets, ScreeningConfig(eta=2, seed=4))
    assert not np.array_equal(rungs[0].rows, other[0].rows)


def test_regression_and_multi_label_rungs_keep_their_targets():
    rng = np.random.default_rng(0)
    values = rng.normal(size=90)
    rungs = plan_rungs(build_targets(values, target_type="regression"), ScreeningConfig(start_rows=9, eta=3))
    assert rungs[0].rows.size >= 3 and np.ptp(values[rungs[0].rows]) > 0
    indicator = (rng.random((120, 4)) < 0.3).astype(int)
    indicator[:3, 3], indicator[3:, 3] = 1, 0  # a rare label with 3 positives
    indicator[indicator.sum(axis=1) == 0, 0] = 1  # every row has a label
    multi = build_targets(indicator, target_type="multi_label")
    for rung in plan_rungs(multi, ScreeningConfig(start_rows=20, eta=2, subsample_fraction=0.95)):
        assert (indicator[rung.rows].sum(axis=0) >= 2).all()


def test_a_clearly_bad_candidate_leaves_at_rung_0_having_embedded_only_rung_0_rows():
    extractors = _candidates()
    result = _screened(extractors)
    rungs = plan_rungs(build_targets(_features()[1]), SCREEN)
    noise = result["noise"]
    assert noise.screened_out and not noise.aggregate_valid and noise.error is None
    assert noise.screening["last_rung"] == 0 and noise.screening["rows"] == rungs[0].rows.size == 75
    assert noise.screening["verdict"] == "worse" and noise.screening["reason"] == "worse"
    assert sorted(extractors[3].seen) == sorted(rungs[0].rows.tolist())  # 75 rows embedded, no more
    for finalist in result.ranked_results():
        seen = next(e for e in extractors if e.name == finalist.name).seen
        assert sorted(seen) == list(range(600))  # every row once: each rung embedded only the rows it added
    assert {r.name for r in result.ranked_results()} == set(result.metadata["screening"]["finalists"])
    assert "noise" not in [r.name for r in result.quality_cohort()]


def test_finalists_results_equal_a_plain_run_of_the_finalists():
    stability = StabilityConfig(repeats=4)
    screened = _screened(stability_config=stability, separatix_config=SeparatixConfig(run_when="always"))
    finalists = result_names = screened.metadata["screening"]["finalists"]
    assert 1 <= len(finalists) < 4
    plain = Benchmark(_dataset(), [e for e in _candidates() if e.name in result_names], stability_config=stability,
                      separatix_config=SeparatixConfig(run_when="always"), progress=False).run()
    for name in finalists:
        a, b = _stored(screened, name), _stored(plain, name)  # as written to JSON: without wall-clock seconds
        assert a.pop("screening")["status"] == "finalist" and "screening" not in b
        assert a == b  # scores, stability, Separatix, metrics, embedding facts, artifact keys
    assert [r.name for r in screened.ranked_results()] == [r.name for r in plain.ranked_results()]


def _stored(result: BenchmarkResult, name: str) -> dict:
    return next(r for r in json.loads(result.to_json())["extractor_results"] if r["name"] == name)


def test_multi_output_extractor_embeds_once_per_increment_and_variants_are_candidates():
    multi = MultiRecorder("multi", _weights([0, 1, 2]))
    others = [Recorder("noise", _weights([2, 3, 4])), Recorder("weak", _weights([3, 4]))]
    variants = [EmbeddingCompressionConfig(method="none"), EmbeddingCompressionConfig(method="pca", n_components=1)]
    result = _screened([multi, *others], compression=variants)
    names = [r.name for r in result.extractor_results]
    assert len(names) == 8 and "multi:a+pca1" in names  # (2 outputs + 2 extractors) x 2 variants
    increments = [r for r in result.metadata["screening"]["rungs"] if r["new_rows"]]
    assert multi.passes == len(increments) >= 2  # one pass per increment for both outputs and both variants
    assert sorted(multi.seen) == list(range(600))  # a finalist: every row exactly once
    assert any(r.screened_out for r in result.extractor_results)


def test_screened_out_fields_round_trip_and_reports_show_the_rungs(tmp_path):
    result = _screened()
    again = BenchmarkResult.from_json(result.to_json())
    assert again.to_json() == result.to_json()
    assert again["noise"].screened_out and again["noise"].screening == result["noise"].screening
    record = result.metadata["screening"]
    assert record["config"] == SCREEN.to_dict() and record["candidates"] == 4
    assert [r["rows"] for r in record["rungs"]][-1] == 600 and record["rungs"][-1]["final"]
    assert record["rungs"][0] == {"rung": 0, "rows": 75, "new_rows": 75, "candidates": 4,
                                  "survivors": record["rungs"][0]["survivors"], "best": record["rungs"][0]["best"],
                                  "final": False}
    markdown = result.to_markdown()
    assert "## Screening" in markdown and "Screened out at rung 0 (75 rows" in markdown
    html = result.to_html()
    assert "<h2>Screening</h2>" in html
    assert "Screening: scores across rungs" in html  # the figure (matplotlib is a test dependency)
    table = result.screening_table()
    assert set(table["extractor"]) == {"strong", "strong_too", "weak", "noise"}
    assert table[table.extractor == "noise"]["verdict"].tolist() == ["worse"]
    frame = result.to_dataframe(include_invalid=True)
    assert frame.set_index("extractor").loc["noise", "screening_status"] == "screened_out"
    assert "noise" not in result.to_dataframe()["extractor"].tolist()
    assert any("Screening kept" in line for line in result.recommendations)


def test_results_without_screening_write_no_screening_fields():
    plain = Benchmark(_dataset(), _candidates()[:2], **QUIET).run()
    document = json.loads(plain.to_json())
    assert "screening" not in document["metadata"]
    assert all("screening" not in r for r in document["extractor_results"])
    assert "screening_status" not in plain.to_dataframe().columns


def _without_timing(result: BenchmarkResult) -> str:
    document = json.loads(result.to_json())
    document.pop("timing")
    return json.dumps(document, sort_keys=True)


def test_screening_is_deterministic():
    assert _without_timing(_screened()) == _without_timing(_screened())


def test_a_rerun_with_a_cache_embeds_nothing(tmp_path):
    cache = CacheConfig(store=str(tmp_path / "cache"))
    first_extractors, again_extractors = _candidates(), _candidates()
    first = _screened(first_extractors, cache_config=cache)
    again = _screened(again_extractors, cache_config=cache)
    assert sum(len(e.seen) for e in first_extractors) > 0
    assert all(e.seen == [] for e in again_extractors)  # every increment and the assembled extractions hit
    assert all(r.embedding["cache_status"] == "hit" for r in again.ranked_results())
    assert all(r.embedding["cache_status"] == "miss" for r in first.ranked_results())
    assert [r.primary_score for r in again.extractor_results] == [r.primary_score for r in first.extractor_results]
    # the finalists' assembled extractions were stored under the ordinary extract keys: a run without screening
    # reads them
    finalists = first.metadata["screening"]["finalists"]
    plain_extractors = [e for e in _candidates() if e.name in finalists]
    plain = Benchmark(_dataset(), plain_extractors, **QUIET, cache_config=cache).run()
    assert all(e.seen == [] for e in plain_extractors)
    assert all(r.embedding["cache_status"] == "hit" for r in plain.ranked_results())
    assert [plain[name].primary_score for name in finalists] == [first[name].primary_score for name in finalists]


def test_a_corrupt_stored_finalist_extraction_in_a_read_only_cache_is_the_runners_to_report(tmp_path):
    """The loop settles a finalist's extraction through the cache; a read_only cache's corrupt entry is left to the
    runner, which runs the ordinary extract job and raises or records its error per on_error."""
    store = tmp_path / "cache"
    first = _screened(cache_config=CacheConfig(store=str(store)))
    finalist = first.ranked_results()[0]
    key = finalist.artifact_keys["extract"]
    entry = next(iter(FsspecStore(str(store)).manifest(key).arrays.values()))
    path = store / key / entry["file"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    read_only = CacheConfig(store=str(store), mode="read_only")
    with pytest.raises(ArtifactIntegrityError, match="read_only mode never repairs"):
        _screened(cache_config=read_only)
    recorded = _screened(cache_config=read_only, on_error="record")[finalist.name]
    assert not recorded.aggregate_valid and recorded.error["type"] == "ArtifactIntegrityError"
    assert recorded.error["stage"] == "extract"


def test_a_dask_run_equals_a_local_run(dask_client):
    from vertebrae.execution.dask import DaskRunner

    local = _screened()
    remote = Benchmark(_dataset(), _candidates(), **QUIET, screening=SCREEN).run(runner=DaskRunner(dask_client))
    assert _without_timing(remote) == _without_timing(local)


def test_rung_scoring_runs_on_the_dask_workers_with_the_local_scores(dask_client):
    """Every candidate's rung scores are a screening/rung_score task that a worker ran (the task stream records the
    worker of each task; the driver runs none), and the result equals the in-process run's."""
    from distributed import get_task_stream

    from vertebrae.execution.dask import DaskRunner

    local = _screened()
    with get_task_stream(dask_client) as stream:
        remote = Benchmark(_dataset(), _candidates(), **QUIET, screening=SCREEN).run(runner=DaskRunner(dask_client))
    rung_tasks = [task for task in stream.data if str(task["key"]).startswith("vertebrae-rung_score-")]
    scored = sum(len(r.screening["rungs"]) for r in remote.extractor_results)  # candidate x rung pairs
    assert scored >= 6 and len({task["key"] for task in rung_tasks}) == scored
    assert {task["worker"] for task in rung_tasks} <= set(dask_client.scheduler_info()["workers"])
    assert _without_timing(remote) == _without_timing(local)


def test_a_warm_screened_run_scores_no_rung_and_embeds_no_row(tmp_path, monkeypatch):
    """The rung scores are stage artifacts the cache stores: a rerun reads them back (no scoring call on a rung's
    rows) and embeds nothing; each rung entry records its jobs' cache statuses."""
    from vertebrae.scoring.overlap import OverlapIndexScorer

    rung_calls = []
    score = OverlapIndexScorer.score

    def counted(self, embeddings, targets, **kwargs):
        if embeddings.shape[0] < 3 * N_PER_CLASS:  # a rung's repeat (the finalists' evaluation scores every row)
            rung_calls.append(embeddings.shape[0])
        return score(self, embeddings, targets, **kwargs)

    monkeypatch.setattr(OverlapIndexScorer, "score", counted)
    cache = CacheConfig(store=str(tmp_path / "cache"))
    first = _screened(cache_config=cache)
    cold = len(rung_calls)
    extractors = _candidates()
    again = _screened(extractors, cache_config=cache)
    assert cold >= 6 * SCREEN.repeats and len(rung_calls) == cold  # the warm run scored no rung
    assert all(e.seen == [] for e in extractors)  # and embedded no row
    assert [r.screening["rungs"][-1]["repeat_scores"] for r in again.extractor_results] == \
        [r.screening["rungs"][-1]["repeat_scores"] for r in first.extractor_results]

    def statuses(result):
        return {status for r in result.extractor_results for entry in r.screening["rungs"]
                for status in entry["cache_status"].values()}

    assert statuses(first) == {"miss"} and statuses(again) == {"hit"}
    noise = again["noise"]  # a screened-out candidate records the keys of its last rung's jobs, as any chain does
    assert noise.screened_out and set(noise.artifact_keys) == {"extract_rows", "rung_score"}
    assert FsspecStore(str(tmp_path / "cache")).has(noise.artifact_keys["rung_score"])


def test_rung_score_keys_hold_the_rungs_rows_repeats_seed_and_scoring_config():
    """A screened-out candidate's rung_score key moves with the screening seed (rows and repeat seeds), the repeat
    count and the overlap config, and only its rung_score key moves when only the repeats change."""
    from vertebrae import OverlapScoringConfig

    def keys(screening, **kwargs):
        result = Benchmark(_dataset(), _candidates(), **QUIET, screening=screening, **kwargs).run()
        return result["noise"].artifact_keys

    base = keys(SCREEN)
    assert keys(SCREEN)["rung_score"] == base["rung_score"]
    other_seed = keys(ScreeningConfig(eta=2, seed=2, repeats=5))
    assert other_seed["extract_rows"] != base["extract_rows"] and other_seed["rung_score"] != base["rung_score"]
    more_repeats = keys(ScreeningConfig(eta=2, seed=1, repeats=6))
    assert more_repeats["extract_rows"] == base["extract_rows"] and more_repeats["rung_score"] != base["rung_score"]
    other_k = keys(SCREEN, scoring_config=OverlapScoringConfig(k=5))
    assert other_k["extract_rows"] == base["extract_rows"] and other_k["rung_score"] != base["rung_score"]


@pytest.mark.parametrize("field, value, message", [
    ("start_fraction", 0.0, "start_fraction"), ("start_fraction", 1.0, "start_fraction"),
    ("start_rows", 0, "start_rows"), ("eta", 1, "eta"), ("eta", 2.5, "eta"), ("repeats", 1, "repeats"),
    ("subsample_fraction", 0.0, "subsample_fraction"), ("interval_level", 1.0, "interval_level"),
    ("seed", -1, "seed"), ("seed", "x", "seed"), ("etas", 2, "did you mean 'eta'"),
])
def test_every_screening_config_field_is_checked(field, value, message):
    with pytest.raises(ConfigError, match=message):
        ScreeningConfig(**{field: value})


def _rejected(match, extractors=None, dataset=None, **kwargs):
    extractors = _candidates() if extractors is None else extractors
    with pytest.raises(ConfigError, match=match):
        Benchmark(_dataset() if dataset is None else dataset, extractors, **QUIET, **kwargs)
    assert all(e.seen == [] for e in extractors)  # before any extraction


def test_bad_screening_requests_fail_before_any_extraction():
    _rejected("dataset has only 600", screening=ScreeningConfig(start_rows=600))
    # the rung's counts, not the internal fraction it is drawn with (which is no setting of the user's)
    _rejected(r"rung 0 \(3 of 600 rows\) cannot keep the targets \(the rung keeps fewer than 2 rows of class\(es\) "
              r"'0': 1 of \d+, .*every class must keep at least 2 rows\); raise start_fraction",
              screening=ScreeningConfig(start_fraction=0.001, eta=200))  # 1 row per class
    _rejected(r"repeats of rung 0 \(6 rows\) .* subsample_fraction",
              screening=ScreeningConfig(start_fraction=0.01, eta=100))  # 2 rows per class, 1 in a repeat
    _rejected("at least 2 candidates", extractors=_candidates()[:1], screening=SCREEN)
    _rejected("primary_metric", screening=SCREEN, metrics=[KNNMetric()], primary_metric="knn")
    _rejected("resource profiling", screening=SCREEN, resource_profiling=ResourceProfilingConfig())
    with pytest.raises(TypeError, match="screening must be a ScreeningConfig"):
        Benchmark(_dataset(), _candidates(), screening={"eta": 2})


def test_screening_with_target_views_is_rejected():
    X, y = _features()
    dataset = _dataset().with_target_views([TargetView("coarse", np.where(y == 2, "b", "a"))])
    with pytest.raises(ConfigError, match="target_view_config"):
        Benchmark(dataset, _candidates(), **QUIET, screening=SCREEN, target_view_config=TargetViewConfig())


CLI_CONFIG = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "strong"
embeddings = "strong.npy"
[[extractors]]
name = "noise"
embeddings = "noise.npy"
[[extractors]]
name = "weak"
embeddings = "weak.npy"

[separatix]
enabled = false
"""


@pytest.fixture
def cli_project(tmp_path):
    X, y = _features()
    np.save(tmp_path / "labels.npy", y)
    for extractor in _candidates():
        if extractor.name != "strong_too":
            np.save(tmp_path / f"{extractor.name}.npy", X[:, 1:] @ extractor.weights)
    (tmp_path / "run.toml").write_text(CLI_CONFIG)
    (tmp_path / "screen.toml").write_text(CLI_CONFIG + "\n[screening]\neta = 2\nseed = 1\n")
    return tmp_path


def test_cli_run_screen_screens_and_the_table_turns_it_on(cli_project, capsys):
    assert main(["run", str(cli_project / "run.toml"), "--screen", "-o", str(cli_project / "a"), "--quiet"]) == 0
    screened = BenchmarkResult.load(cli_project / "a" / "report.json")
    assert screened.metadata["screening"]["config"] == ScreeningConfig().to_dict()
    assert screened["noise"].screened_out
    assert main(["run", str(cli_project / "screen.toml"), "-o", str(cli_project / "b"), "--quiet"]) == 0
    assert BenchmarkResult.load(cli_project / "b" / "report.json").metadata["screening"]["config"]["eta"] == 2
    assert main(["run", str(cli_project / "run.toml"), "-o", str(cli_project / "c"), "--quiet"]) == 0
    assert "screening" not in BenchmarkResult.load(cli_project / "c" / "report.json").metadata


def test_cli_rejects_a_bad_screening_table_and_a_staged_plan_in_one_line(cli_project):
    (cli_project / "bad.toml").write_text(CLI_CONFIG + "\n[screening]\neta = 1\n")
    env = {"PYTHONPATH": _source_path()}
    for argv, expected in [(["run", "bad.toml", "-o", "out"], "eta"),
                           (["plan", "screen.toml", "--store", "store", "-o", "plan.json"],
                            "vertebrae run --screen")]:
        done = subprocess.run([sys.executable, "-m", "vertebrae.cli.main", *argv], cwd=cli_project, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in done.stderr


def _source_path() -> str:
    import vertebrae

    return str(__import__("pathlib").Path(vertebrae.__file__).parents[1])


class Broken(Recorder):
    """A real extractor that fails on every transform (what a crashing model does)."""

    def transform(self, X):
        raise RuntimeError("the model crashed")


def test_a_failing_candidate_is_recorded_and_the_others_are_screened():
    extractors = [*_candidates(), Broken("broken", _weights([0]))]
    result = _screened(extractors, on_error="record")
    broken = result["broken"]
    assert broken.error["stage"] == "extract_rows" and "the model crashed" in broken.error["message"]
    assert not broken.screened_out and not broken.aggregate_valid
    assert result.ranked_results() and result["noise"].screened_out
    with pytest.raises(Exception, match="the model crashed"):
        _screened([*_candidates(), Broken("broken", _weights([0]))])


class MissingOutput(MultiRecorder):
    """Declares an output ``c`` that its pass never produces: the rung's embedding stage fails for ``multi:c``."""

    def output_names(self):
        return ["a", "b", "c"]


def test_a_candidate_whose_rung_job_fails_is_recorded_with_the_failing_stage():
    extractors = [*_candidates(), MissingOutput("multi", _weights([0, 1, 4]))]
    result = _screened(extractors, on_error="record")
    failed = result["multi:c"]
    assert failed.error["stage"] == "embedding" and "did not produce output 'c'" in failed.error["message"]
    assert not failed.screened_out and set(failed.artifact_keys) >= {"embedding", "rung_score"}
    assert result["multi:a"].screening is not None and result.ranked_results()
    with pytest.raises(Exception, match="did not produce output 'c'"):
        _screened([*_candidates(), MissingOutput("multi", _weights([0, 1, 4]))])


class CountingRunner(LocalRunner):
    """The ordinary in-process runner, recording how many embeddings each call hands back and which spill files
    exist while it runs (what the rung loop holds in memory, and on disk, at that moment)."""

    def __init__(self, spill_root) -> None:
        super().__init__(progress=False)
        self.spill_root, self.returned, self.spilled = spill_root, [], []

    def run(self, jobs, context, **kwargs):
        outcome = super().run(jobs, context, **kwargs)
        self.returned.append(sum(job.stage == "extract_rows" for job in jobs if job.key in outcome.artifacts))
        self.spilled.append(sorted(p.name for p in self.spill_root.glob("vertebrae-screening-*/*")))
        return outcome


def test_a_rung_embeds_a_bounded_batch_of_extractors_at_a_time_and_keeps_the_increments_on_disk(tmp_path,
                                                                                             monkeypatch):
    import tempfile

    from vertebrae.selection import screening

    reference = _without_timing(_screened())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's spill folder, where the test can see it
    monkeypatch.setattr(screening, "EXTRACT_BATCH", 2)
    runner = CountingRunner(tmp_path)
    result = Benchmark(_dataset(), _candidates(), **QUIET, screening=SCREEN).run(runner=runner)
    assert _without_timing(result) == reference  # batching and spilling change no number
    rung_calls = [n for n in runner.returned[:-1] if n]  # the last call is the finalists' full evaluation
    assert max(rung_calls) == 2 and len(rung_calls) >= 3  # rung 0: 4 extractors in 2 calls of 2, never all 4
    assert runner.spilled[0] == [] and len(runner.spilled[1]) == 2  # batch 1 is on disk while batch 2 is embedded
    assert not list(tmp_path.glob("vertebrae-screening-*"))  # the spill folder is gone after the run


def test_the_spill_folder_is_removed_when_the_run_fails(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(Exception, match="the model crashed"):
        _screened([*_candidates(), Broken("broken", _weights([0]))])
    assert not list(tmp_path.glob("vertebrae-screening-*"))


def test_the_rung_interval_is_the_jackknife_interval_of_the_full_data_difference():
    from scipy import stats

    d = np.array([-0.1, -0.2, -0.3])  # mean -0.2, sd 0.1
    mean, low, high = full_data_interval(0.8, 0.2)(d, 0.95)
    # delete-d jackknife variance f / (1 - f) * sd^2, times the finite-population share 1 - 0.2: sd * sqrt(3.2)
    reference = stats.t.interval(0.95, df=2, loc=-0.2, scale=0.1 * np.sqrt(0.8 / 0.2 * 0.8))
    assert mean == pytest.approx(-0.2) and (low, high) == pytest.approx(reference)
    assert (low, high) == pytest.approx((-0.2 - 4.302653 * 0.1 * np.sqrt(3.2), -0.2 + 4.302653 * 0.1 * np.sqrt(3.2)))
    # more repeats estimate the spread better but never divide it by sqrt(repeats), as the mean's interval does
    d20 = np.tile(d, 7)[:20]
    _, low20, high20 = full_data_interval(0.8, 0.2)(d20, 0.95)
    assert high20 - low20 == pytest.approx(2 * stats.t.ppf(0.975, 19) * d20.std(ddof=1) * np.sqrt(3.2))


def test_a_difference_within_the_subsample_noise_is_tied_on_a_rung_though_its_repeat_mean_interval_excludes_0():
    from vertebrae.scoring.paired_verdicts import against_best

    best = np.array([0.50, 0.51, 0.52, 0.53, 0.54])
    other = best + np.array([-0.01, -0.02, 0.0, -0.015, -0.005])
    ranked = [("best", best), ("other", other)]
    assert against_best(ranked, higher_is_better=True, interval_level=0.95)[1].verdict == "worse"
    on_rung = against_best(ranked, higher_is_better=True, interval_level=0.95, interval=full_data_interval(0.8, 0.1))
    assert on_rung[1].verdict == "tied" and on_rung[1].difference_low < 0 < on_rung[1].difference_high


def test_subsample_fraction_1_is_refused_the_subsamples_spread_is_what_the_rung_interval_scales():
    with pytest.raises(ConfigError, match=r"subsample_fraction must be in \(0.0, 1.0\), got 1.0"):
        ScreeningConfig(subsample_fraction=1.0)


def test_a_first_rung_of_few_rows_is_warned_about_before_any_work():
    """A new user's 60-row regression screen started from 6 rows and cut the candidate a full run ranks first."""
    from vertebrae import DataWarning
    from vertebrae.selection.screening import MIN_FIRST_RUNG_ROWS

    X, y = _features(n_per_class=40)  # 120 rows: the default 10% start is 12 rows
    small = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("screening-small", "1"))
    with pytest.warns(DataWarning, match=r"first rung holds 15 of 120 rows.*raise ScreeningConfig.start_rows") as seen:
        Benchmark(small, _candidates(), **{**QUIET, "screening": SCREEN})
    assert f"e.g. {MIN_FIRST_RUNG_ROWS}" in str(seen[0].message)
    with warnings.catch_warnings():  # a first rung of enough rows is not warned about
        warnings.simplefilter("error", DataWarning)
        Benchmark(small, _candidates(), **{**QUIET, "screening": ScreeningConfig(eta=2, seed=1, repeats=5,
                                                                                   start_rows=MIN_FIRST_RUNG_ROWS)})


def test_every_rung_holds_at_least_its_size():
    """`start_rows` is a floor: the sampler floors each class's share, so a rung came out short (digits: 57 asked,
    50 drawn), and a float share lost a regression row to rounding (442 x float(148/442) floors to 147), which made
    the default's 50-row first rung 49 rows and set off the tiny-rung warning."""
    from sklearn.datasets import load_diabetes, load_digits

    X, y = load_digits(return_X_y=True)
    digits = build_targets(y, target_type="single_label")
    for config in (ScreeningConfig(start_rows=57, start_fraction=0.001, eta=32),
                   ScreeningConfig(start_rows=52, start_fraction=0.001, eta=2), ScreeningConfig()):
        drawn = [rung.rows.size for rung in plan_rungs(digits, config)]
        assert all(got >= size for got, size in zip(drawn, rung_sizes(len(y), config))), (config, drawn)
    _, values = load_diabetes(return_X_y=True)
    assert [rung.rows.size for rung in plan_rungs(build_targets(values, target_type="regression"),
                                                  ScreeningConfig())] == [50, 148]

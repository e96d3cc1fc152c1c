"""A staged run over a shared store: `vertebrae plan`, `embed`, `score`, `collect`, each in its own process.

The reference is `vertebrae run CONFIG --cache STORE` on a fresh store in the same environment: the
collected result must be the same JSON minus `timing` (the staged phases store exactly what that run
stores, so even the cache facts agree).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest

from vertebrae import BenchmarkResult, ExtractorResult
from vertebrae.artifacts import FsspecStore
from vertebrae.cli.main import main
from vertebrae.execution.staged import Shard
from vertebrae.families.labeled.results import load_result
from vertebrae.scoring.overlap import OverlapScoreResult
from vertebrae.scoring.stability import StabilityResult
from vertebrae.cli.staged_workflow import PlanFile

from .references import direct_oi
from .store_servers import moto_endpoint, s3_bucket, s3_options  # noqa: F401  (fixtures)

CONFIG = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "wide"
embeddings = "wide.npy"
[[extractors]]
name = "narrow"
embeddings = "narrow.npy"
[[extractors]]
name = "noise"
embeddings = "noise.npy"

[scoring]
k = 4

[stability]
repeats = 3

[[compression]]
method = "none"
[[compression]]
method = "pca"
n_components = 2
"""

METRICS_MODULE = '''
import numpy as np


def spread(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    """Mean row norm: a metric the test can recompute by hand."""
    return {"score": float(np.linalg.norm(np.asarray(embeddings), axis=1).mean())}
'''


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(3), 40)
    X = rng.normal(size=(labels.size, 6)) + labels[:, None] * 0.9
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "wide.npy", X.astype(np.float32))
    np.save(tmp_path / "narrow.npy", X[:, :2].astype(np.float32))
    np.save(tmp_path / "noise.npy", rng.normal(size=(labels.size, 4)).astype(np.float32))
    (tmp_path / "run.toml").write_text(CONFIG)
    return tmp_path


def cli(project: pathlib.Path, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    """One vertebrae command in a fresh Python process (what a separate machine would run)."""
    done = subprocess.run([sys.executable, "-m", "vertebrae.cli.main", *args], cwd=project, capture_output=True,
                          text=True, timeout=300, env={**_env(), "PYTHONPATH": os.pathsep.join([_source_path(),
                                                                                            str(project)])})
    assert done.returncode == expect, done.stderr
    return done


def _source_path() -> str:
    """The folder the vertebrae under test was imported from, so each phase runs the same code as the test."""
    import vertebrae

    return str(pathlib.Path(vertebrae.__file__).parents[1])


def _env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def without_timing(path: pathlib.Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("timing")
    return data


def reference(project: pathlib.Path, store: pathlib.Path) -> dict:
    """`vertebrae run --cache file://STORE` on a fresh STORE, which is then removed for the staged run."""
    assert main(["run", "run.toml", "--cache", f"file://{store}", "-o", str(project / "ref"), "-q"]) == 0
    shutil.rmtree(store)
    return without_timing(project / "ref" / "report.json")


def test_staged_phases_in_separate_processes_equal_a_run(project, monkeypatch):
    monkeypatch.chdir(project)
    store = project / "store"
    expected = reference(project, store)
    planned = cli(project, "plan", "run.toml", "--store", f"file://{store}", "--output", "plan.json")
    assert "(6 embed, 18 score, 6 collect, 3 recomputed where read)" in planned.stdout and "Next: vertebrae embed plan.json" in planned.stdout
    for shard in ("1/2", "2/2"):
        out = cli(project, "embed", "plan.json", "--shard", shard).stdout
        assert "0 failed" in out
    for shard in ("2/3", "1/3", "3/3"):
        cli(project, "score", "plan.json", "--shard", shard, "-q")
    cli(project, "collect", "plan.json", "--output", "collected/result.json", "-q")
    assert without_timing(project / "collected" / "result.json") == expected

    # Every phase ran in its own process, so each job's measured seconds came back through the store.
    timing = json.loads((project / "collected" / "result.json").read_text())["timing"]["runtime"]
    assert {"extract", "score", "stability"} <= set(timing["wide+pca2"])
    assert all(seconds > 0 for seconds in (timing["wide"]["score"], timing["noise"]["stability"]))


def test_plan_names_every_phase_so_the_parts_add_up(project, monkeypatch, capsys):
    """Issue 37 item 20: the jobs no phase stores are counted too, as recomputed where read."""
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store"]) == 0
    assert "33 jobs (6 embed, 18 score, 6 collect, 3 recomputed where read)" in capsys.readouterr().out
    assert len(PlanFile.load(project / "plan.json").jobs) == 33


def test_collected_result_is_typed(project, monkeypatch):
    monkeypatch.chdir(project)
    for argv in (["plan", "run.toml", "--store", "store", "-q"], ["embed", "plan.json", "-q"],
                 ["score", "plan.json", "-q"], ["collect", "plan.json", "-q"]):
        assert main(argv) == 0
    result = load_result(project / "result.json")
    assert isinstance(result, BenchmarkResult)
    assert all(isinstance(r, ExtractorResult) for r in result.extractor_results)
    first = result["wide"]
    assert isinstance(first.overlap, OverlapScoreResult) and isinstance(first.stability, StabilityResult)
    assert len(first.stability.repeat_scores["score"]) == 3
    # The scores are OverlapIndex called directly on the same matrix (k=4 from the config): the overlap score with
    # the default seed 0, stability repeat i with the documented seed (0, then the first seeds of the scoring stream
    # SeedSequence(random_state=0).spawn(2)[0]).
    X, labels = np.load(project / "wide.npy"), np.load(project / "labels.npy")
    direct = direct_oi(X, labels, 4, seed=0).index
    assert first.overlap.score == direct and 0 < direct < 1
    seeds = [0, *np.random.SeedSequence(0).spawn(2)[0].generate_state(2).tolist()]
    assert first.stability.repeat_scores["score"] == [direct_oi(X, labels, 4, seed=s).index for s in seeds]


def test_staged_run_on_s3(project, monkeypatch, s3_bucket, moto_endpoint):  # noqa: F811
    monkeypatch.chdir(project)
    options = json.dumps(s3_options(moto_endpoint))
    assert main(["run", "run.toml", "-o", "ref", "-q"]) == 0
    url = f"s3://{s3_bucket}/runs/one"
    cli(project, "plan", "run.toml", "--store", url, "--storage-options", options, "-q")
    cli(project, "embed", "plan.json", "--shard", "1/2", "-q")
    cli(project, "embed", "plan.json", "--shard", "2/2", "-q")
    cli(project, "score", "plan.json", "-q")
    cli(project, "collect", "plan.json", "-q")
    collected, local = without_timing(project / "result.json"), without_timing(project / "ref" / "report.json")
    assert collected["metadata"].pop("cache") == {"store": url, "mode": "read_write"}
    for data in (collected, local):  # the plain run had no store: only its cache facts differ
        for r in data["extractor_results"]:
            r["embedding"].pop("cache_status")
            r["embedding"].pop("footprint", None)
            if r.get("compression"):
                r["compression"].pop("cache_status")
    assert collected == local


def test_rerunning_a_phase_reuses_the_store(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    assert main(["embed", "plan.json"]) == 0
    assert "6 job(s)" in capsys.readouterr().out  # 3 extractions, 3 PCA variants
    assert main(["embed", "plan.json"]) == 0
    assert "(0 computed, 6 already there)" in capsys.readouterr().out


def _embedded_with_metrics(project: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Plan and embed the project with a fresh metrics module (METRICS_MODULE) importable; returns its name."""
    monkeypatch.chdir(project)
    module = f"staged_metrics_{uuid.uuid4().hex[:8]}"
    (project / f"{module}.py").write_text(METRICS_MODULE)
    monkeypatch.syspath_prepend(str(project))
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    assert main(["embed", "plan.json", "-q"]) == 0
    return module


def test_a_plan_without_the_json_suffix_is_still_scored_as_a_plan(project, monkeypatch, capsys):
    """`score` told a plan from a run config by the suffix only: a plan saved as `plan` was read as a config
    ("config must be .toml ...")."""
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-o", "plan", "-q"]) == 0
    assert main(["embed", "plan", "-q"]) == 0
    assert main(["score", "plan", "-q"]) == 0
    assert main(["collect", "plan", "-q"]) == 0


def test_score_metric_is_fixed_for_the_plan(project, monkeypatch, capsys):
    module = _embedded_with_metrics(project, monkeypatch)
    assert main(["score", "plan.json", "--shard", "1/2", "--metric", f"{module}:spread", "-q"]) == 0
    capsys.readouterr()
    assert main(["score", "plan.json", "--shard", "2/2", "--metric", f"{module}:other", "-q"]) == 2
    assert "scored with --metric" in capsys.readouterr().err
    assert main(["score", "plan.json", "--shard", "2/2", "-q"]) == 0  # the recorded metric applies
    assert main(["collect", "plan.json", "-q"]) == 0
    result = load_result(project / "result.json")
    narrow = np.load(project / "narrow.npy")
    assert result["narrow"].metrics["spread"].score == pytest.approx(np.linalg.norm(narrow, axis=1).mean())
    assert all("spread" in r.metrics for r in result.extractor_results)  # both shards scored it


METRIC_READER = '''
from vertebrae.artifacts.codecs import document_codec
from vertebrae.execution.registry import SCORE, stage


@stage("benchmark", "{name}", version=1, reads=("embedding",), optional_reads=("metrics",),
       codec=document_codec("{name}", lambda n: {{"n": n}}, lambda document: document["n"]), phase=SCORE)
def {name}(job, inputs, context, timings):
    """How many metrics a chain has: a user stage whose key moves with the metric settings."""
    return len(inputs["metrics"].results) if "metrics" in inputs else 0
'''


def test_score_metric_with_a_user_stage_that_reads_the_metrics(project, monkeypatch):
    """A user's stage reading `metrics` depends on the metric settings too (derived from its declaration, not a
    hand list of stage names): `vertebrae score --metric` must not refuse the plan for its changed key."""
    from vertebrae.execution.registry import _REGISTRY

    monkeypatch.chdir(project)
    suffix = uuid.uuid4().hex[:8]
    stage_module, metrics_module, name = f"metric_reader_{suffix}", f"staged_metrics_{suffix}", "metric_count"
    (project / f"{stage_module}.py").write_text(METRIC_READER.format(name=name))
    (project / f"{metrics_module}.py").write_text(METRICS_MODULE)
    (project / "run.toml").write_text(CONFIG + f'\n[benchmark]\nstage_modules = ["{stage_module}"]\n')
    monkeypatch.syspath_prepend(str(project))
    try:
        assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
        assert main(["embed", "plan.json", "-q"]) == 0
        assert main(["score", "plan.json", "--metric", f"{metrics_module}:spread", "-q"]) == 0
        planned = {job["key"] for job in PlanFile.load(project / "plan.json").jobs if job["stage"] == name}
        store = FsspecStore(str(project / "store"))
        scored = [store.read(key).document["n"] for key in store.keys() if key.startswith(f"{name}/")]
        assert planned and set(scored) == {1} and not planned & set(store.keys())  # its keys moved with --metric
        assert main(["collect", "plan.json", "-q"]) == 0
        assert all("spread" in r.metrics for r in load_result(project / "result.json").extractor_results)
    finally:
        _REGISTRY["benchmark"].pop(name, None)
        sys.modules.pop(stage_module, None)


def test_collect_before_score_names_the_missing_phase(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    assert main(["score", "plan.json", "-q"]) == 2
    assert "run `vertebrae embed PLAN` first" in capsys.readouterr().err
    assert main(["embed", "plan.json", "--shard", "1/2", "-q"]) == 0
    assert main(["score", "plan.json", "-q"]) == 2  # shard 2/2 of embed (the second extractor) has not run
    assert "extract artifact of 'narrow'" in capsys.readouterr().err
    assert main(["embed", "plan.json", "--shard", "2/2", "-q"]) == 0
    assert main(["collect", "plan.json", "-q"]) == 2
    assert "run `vertebrae score PLAN` first" in capsys.readouterr().err
    assert not (project / "result.json").exists()


def test_changed_input_file_is_refused(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    np.save(project / "narrow.npy", np.zeros((120, 2), dtype=np.float32))
    assert main(["embed", "plan.json", "-q"]) == 2
    err = capsys.readouterr().err
    assert "'narrow.npy' changed since the plan was written" in err and "vertebrae plan" in err
    assert not (project / "store").exists() or not any((project / "store").rglob("manifest.json"))


def test_edited_or_foreign_plan_files_are_refused(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    data = json.loads((project / "plan.json").read_text())
    data["config"]["scoring"]["k"] = 5
    (project / "edited.json").write_text(json.dumps(data))
    (project / "other.json").write_text(json.dumps({"extractor_results": []}))
    assert main(["embed", "edited.json", "-q"]) == 2
    assert "was edited after it was written" in capsys.readouterr().err
    assert main(["embed", "other.json", "-q"]) == 2
    assert "is not a vertebrae plan file" in capsys.readouterr().err
    assert main(["collect", "missing.json", "-q"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["embed", "plan.json", "--shard", "0/2"], "i must be between 1 and n"),
    (["embed", "plan.json", "--shard", "two"], "--shard must read i/n"),
    (["score", "plan.json", "--cache", "elsewhere"], "--cache applies to a run config"),
    (["score", "plan.json", "--cache", "elsewhere", "--probe"], "--cache, --probe apply to a run config"),
    (["score", "plan.json", "--dask-timeout", "3"], "--dask-timeout applies to a run config"),
    (["embed", "plan.json", "--shard", "1/0"], "--shard 1/0: n (the number of shards) must be at least 1"),
    (["report", "plan.json"], "plan.json is a plan, not a result: run its jobs (vertebrae embed / score) and turn "
                              "it into a result with `vertebrae collect plan.json --output result.json`"),
    (["score", "run.toml", "--shard", "1/2"], "--shard applies to a plan file"),
    (["plan", "run.toml", "--store", "store", "--storage-options", "[1]"], "must be a JSON object"),
])
def test_bad_staged_arguments(project, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    capsys.readouterr()
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_shards_partition_the_results():
    owners = [[Shard(i, 3).owns(position) for i in (1, 2, 3)] for position in range(7)]
    assert all(sum(row) == 1 for row in owners)
    assert [row.index(True) + 1 for row in owners] == [1, 2, 3, 1, 2, 3, 1]


def test_failed_extractor_is_recorded_through_the_phases(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    np.save(project / "noise.npy", np.full((120, 4), 7.0, dtype=np.float32))  # constant: cannot be scored
    assert main(["plan", "run.toml", "--store", "store", "--on-error", "record", "-q"]) == 0
    assert main(["embed", "plan.json", "-q"]) == 1  # the other two embeddings are stored
    assert "'noise' failed in the extract stage: ExtractorError" in capsys.readouterr().err
    assert main(["score", "plan.json", "-q"]) == 1
    assert "6 job(s) not run because their inputs failed in an earlier phase" in capsys.readouterr().err
    assert main(["collect", "plan.json", "-q"]) == 1
    err = capsys.readouterr().err
    assert "extractor 'noise' failed" in err
    result = load_result(project / "result.json")
    assert result["noise"].error is not None and result["wide"].error is None
    assert PlanFile.load(project / "plan.json").config["benchmark"]["on_error"] == "record"


@pytest.mark.parametrize("command", ["plan", "embed", "score", "collect"])
def test_staged_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "vertebrae collect plan.json --output result.json" in capsys.readouterr().out


def _block_entry(project: pathlib.Path, stage: str, extractor: str) -> str:
    """Put a link out of the store where the store folder of one planned job goes, so that job's write really fails:
    the store never follows such a link, nor removes it (a plain file there is cleared by the write itself)."""
    key = next(job["key"] for job in PlanFile.load(project / "plan.json").jobs
               if job["stage"] == stage and job["extractor"] == extractor)
    blocker = project / "store" / key
    blocker.parent.mkdir(parents=True, exist_ok=True)
    outside = project / "outside.txt"
    outside.write_text("not a folder")
    blocker.symlink_to(outside)
    return key


@pytest.mark.parametrize("on_error, code", [("raise", 2), ("record", 1)])
def test_embed_that_cannot_store_its_artifact_fails(project, monkeypatch, capsys, on_error, code):
    """A staged phase exists to fill the store: a write that fails is the job's failure, named, never
    "in the store ... 0 failed" with exit 0 (the next phase would then find nothing)."""
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "--on-error", on_error, "-q"]) == 0
    _block_entry(project, "extract", "narrow")
    assert main(["embed", "plan.json"]) == code
    captured = capsys.readouterr()
    assert "could not store the extract artifact of 'narrow'" in captured.err
    assert "0 failed" not in captured.out
    # The warning raised before the error (its lookup could not read the entry) is shown even when the run stops.
    assert "ArtifactWarning" in captured.err and "cannot be read" in captured.err


def test_misspelt_score_metric_does_not_bind_the_plan(project, monkeypatch, capsys):
    """A `--metric` that does not load is refused before it is recorded: the plan is then scored with the right one
    (before: every later score and collect of the plan repeated the typo's error, and a new plan has the same id)."""
    module = _embedded_with_metrics(project, monkeypatch)
    assert main(["score", "plan.json", "--metric", f"{module}:sprad", "-q"]) == 2
    assert "sprad" in capsys.readouterr().err
    assert main(["score", "plan.json", "--metric", f"{module}:spread", "-q"]) == 0
    assert main(["collect", "plan.json", "-q"]) == 0
    assert all("spread" in r.metrics for r in load_result(project / "result.json").extractor_results)


FLAKY_EXTRACTOR = '''
import os

import numpy as np


def third(X):
    """Fails while $VERTEBRAE_TEST_FAIL is set: the same job, first failing, then succeeding."""
    if os.environ.get("VERTEBRAE_TEST_FAIL"):
        raise ValueError("boom in third")
    return np.asarray(X)[:, :3] * 2.0
'''


def test_collect_uses_an_artifact_stored_after_its_failure(project, monkeypatch, capsys):
    """A failure record only speaks for an artifact that is absent: once the same extraction is in the store (here
    from `run --cache`), `collect` uses it instead of reporting the old failure."""
    monkeypatch.chdir(project)
    module = f"flaky_{uuid.uuid4().hex[:8]}"
    (project / f"{module}.py").write_text(FLAKY_EXTRACTOR)
    monkeypatch.syspath_prepend(str(project))
    (project / "raw.toml").write_text(f'''
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"
audio = "wide.npy"
sampling_rate = 16000

[[extractors]]
name = "wide"
embeddings = "wide.npy"
[[extractors]]
name = "third"
kind = "callable"
model = "{module}:third"
''')
    monkeypatch.setenv("VERTEBRAE_TEST_FAIL", "1")
    assert main(["plan", "raw.toml", "--store", "store", "--on-error", "record", "-q"]) == 0
    assert main(["embed", "plan.json", "-q"]) == 1
    assert "'third' failed in the extract stage" in capsys.readouterr().err
    monkeypatch.delenv("VERTEBRAE_TEST_FAIL")
    assert main(["run", "raw.toml", "--cache", "store", "-o", "ref", "-q"]) == 0
    assert main(["score", "plan.json", "-q"]) == 0
    assert main(["collect", "plan.json", "-q"]) == 0, capsys.readouterr().err
    result = load_result(project / "result.json")
    assert result["third"].error is None and result["third"].overlap is not None


def test_a_corrupt_artifact_of_an_earlier_phase_is_named_as_corrupt(project, monkeypatch, capsys):
    """A corrupt entry is not an absent one: `score` names the entry and the failed check (before: "not in the store
    ... run `vertebrae embed PLAN` first"), and the `embed` it points to replaces the entry."""
    monkeypatch.chdir(project)
    assert main(["plan", "run.toml", "--store", "store", "-q"]) == 0
    assert main(["embed", "plan.json", "-q"]) == 0
    key = next(job["key"] for job in PlanFile.load(project / "plan.json").jobs
               if job["stage"] == "extract" and job["extractor"] == "narrow")
    data = next((project / "store" / key).glob("*.npy"))
    content = bytearray(data.read_bytes())
    content[-1] ^= 0xFF
    data.write_bytes(bytes(content))
    assert main(["score", "plan.json", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"cache entry {key}" in err and "is corrupt" in err and f"{data.name} fails its sha256 check" in err
    assert "not in the store" not in err and "Run `vertebrae embed PLAN` again" in err
    assert main(["embed", "plan.json", "-q"]) == 0
    assert main(["score", "plan.json", "-q"]) == 0


@pytest.mark.parametrize("argv, kept", [
    (["plan", "run.toml", "--store", "store", "--output", "run.toml"], "run.toml"),
    (["plan", "run.toml", "--store", "store", "--output", "./labels.npy"], "labels.npy"),
    (["collect", "plan.json", "--output", "plan.json"], "plan.json"),
    (["collect", "plan.json", "--output", "wide.npy"], "wide.npy"),
    (["report", "result.json", "--output", "result.json"], "result.json"),
    (["compare", "result.json", "linked.json", "--output", "result.json"], "result.json"),
])
def test_output_that_is_an_input_file_is_refused(project, monkeypatch, capsys, argv, kept):
    """Nothing already written is lost: an --output naming one of the command's inputs (by any path, a link
    included) is refused in one line, and the input is left as it was."""
    monkeypatch.chdir(project)
    for step in (["plan", "run.toml", "--store", "store", "-q"], ["embed", "plan.json", "-q"],
                 ["score", "plan.json", "-q"], ["collect", "plan.json", "-q"]):
        assert main(step) == 0
    (project / "linked.json").symlink_to(project / "result.json")
    before = (project / kept).read_bytes()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is the input file" in err and len(err.strip().splitlines()) == 1
    assert (project / kept).read_bytes() == before


@pytest.mark.parametrize("argv, option", [
    (["run", "run.toml", "--cache", "", "-o", "out", "-q"], "--cache"),
    (["run", "run.toml", "--cache", "file://", "-o", "out", "-q"], "--cache"),
    (["score", "run.toml", "--cache", " ", "-o", "out", "-q"], "--cache"),
    (["plan", "run.toml", "--store", "", "-q"], "--store"),
    (["plan", "run.toml", "--store", "file://", "-q"], "--store"),
    (["cache", "list", "--store", ""], "--store"),
])
def test_an_empty_store_path_is_refused(project, monkeypatch, capsys, argv, option):
    """An empty store (an unset variable: `--cache "$CACHE"`) is refused in one line naming the option, not taken as
    the current folder, where the run would have written its artifacts."""
    monkeypatch.chdir(project)
    before = sorted(project.iterdir())
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {argv[argv.index(option) + 1]!r} is an empty path" in err and len(err.strip().splitlines()) == 1
    assert sorted(project.iterdir()) == before or sorted(project.iterdir()) == sorted([*before, project / "out"])


@pytest.mark.parametrize("argv, option", [
    (["run", "run.toml", "--cache", "s3://", "-o", "out", "-q"], "--cache"),
    (["plan", "run.toml", "--store", "gs:///prefix", "-q"], "--store"),
    (["cache", "list", "--store", "s3:///x"], "--store"),
])
def test_an_object_store_url_without_a_bucket_is_refused(project, monkeypatch, capsys, argv, option):
    """``s3://$BUCKET/x`` with the variable unset went to fsspec, which took it as the account's root."""
    monkeypatch.chdir(project)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {argv[argv.index(option) + 1]!r} names no bucket" in err and len(err.strip().splitlines()) == 1


def test_a_file_url_without_a_path_is_no_store():
    """The library refuses it too (a `[cache] store = "file://"`, or a store opened directly)."""
    from vertebrae.artifacts.cache import CacheConfig
    from vertebrae.errors import ArtifactError, ConfigError

    with pytest.raises(ConfigError, match="empty path"):
        CacheConfig(store="file://")
    with pytest.raises(ArtifactError, match="empty path"):
        FsspecStore("file://")

"""The "Adding a stage" example of docs/architecture.md, executed as written (issue 25, item 5).

The example module is cut from the docs and imported from a temporary folder. It must run in this
process, on a 2-worker LocalCluster (the workers import the module themselves: the job names it by
import path), and through `vertebrae plan/embed/score/collect` in separate processes (each reads
`stage_modules` from the config). Each check recomputes the norm by hand.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, PrecomputedExtractor, SeparatixConfig
from vertebrae.artifacts import FsspecStore
from vertebrae.errors import ConfigError
from vertebrae.execution import DaskRunner
from vertebrae.execution.context import Chain, RunContext
from vertebrae.execution.plan import build_plan
from vertebrae.execution.registry import _REGISTRY, pipeline_stages, stage
from vertebrae._base.fingerprint import content_sha256

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
MODULE = "norms_stage"


def example_source() -> str:
    """The code block that starts with ``# norms_stage.py`` in docs/architecture.md."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    [block] = [b for b in blocks if b.startswith(f"# {MODULE}.py")]
    return block


@pytest.fixture
def norms_module(tmp_path, monkeypatch):
    """The example module importable from ``tmp_path``; unregistered afterwards so no other test plans it."""
    path = tmp_path / f"{MODULE}.py"
    path.write_text(example_source(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield path
    _REGISTRY["benchmark"].pop("norms", None)
    sys.modules.pop(MODULE, None)


def data():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 30)
    X = rng.normal(size=(labels.size, 5)) + labels[:, None]
    return X, labels


def benchmark() -> Benchmark:
    X, labels = data()
    dataset = BenchmarkDataset.from_arrays(X, labels, identity=DatasetIdentity.declared("norms", "1"))
    return Benchmark(dataset, [PrecomputedExtractor("raw", X), PrecomputedExtractor("half", X / 2)],
                     separatix_config=SeparatixConfig(enabled=False), progress=False)


def test_the_example_joins_every_chain_and_runs_in_process(norms_module):
    import importlib

    importlib.import_module(MODULE)
    assert "norms" in [d.name for d in pipeline_stages("benchmark")]
    plan = benchmark().plan()
    jobs = [job for job in plan.jobs if job.stage == "norms"]
    assert len(jobs) == 2 and {job.function for job in jobs} == {f"{MODULE}:norms"}
    result = benchmark().run()
    assert all(isinstance(r.runtime["norms"], float) for r in result.extractor_results)


def test_the_example_runs_on_a_local_cluster_whose_workers_import_it(norms_module, dask_client):
    import importlib

    importlib.import_module(MODULE)
    dask_client.upload_file(str(norms_module))  # the workers import the module by the job's path, not by pickle
    run = benchmark()
    plan = run.plan()
    outcome = DaskRunner(client=dask_client, progress=False).run(plan.jobs, run._context())
    norms = [job.key for job in plan.jobs if job.stage == "norms"]
    assert len(norms) == 2 and all(key in outcome.timings for key in norms) and not outcome.failures
    result = run.run(DaskRunner(client=dask_client, progress=False))
    assert all("norms" in r.runtime for r in result.extractor_results)


CONFIG = """
[dataset]
id = "norms"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "raw"
embeddings = "raw.npy"

[separatix]
enabled = false

[benchmark]
stage_modules = ["norms_stage"]
"""


def test_the_example_runs_through_the_staged_cli(norms_module, tmp_path):
    X, labels = data()
    np.save(tmp_path / "raw.npy", X)
    np.save(tmp_path / "labels.npy", labels)
    (tmp_path / "run.toml").write_text(CONFIG)
    env = {**{k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"},
           "PYTHONPATH": str(tmp_path)}

    def cli(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "vertebrae.cli.main", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr

    cli("plan", "run.toml", "--store", "store", "--output", "plan.json", "-q")
    plan = json.loads((tmp_path / "plan.json").read_text())
    [job] = [j for j in plan["jobs"] if j["stage"] == "norms"]
    assert job["phase"] == "score"
    cli("embed", "plan.json", "-q")
    cli("score", "plan.json", "-q")
    stored = FsspecStore(str(tmp_path / "store")).read(job["key"])
    assert stored.kind == "norm" and stored.document["norm"] == pytest.approx(np.linalg.norm(X))
    cli("collect", "plan.json", "--output", "result.json", "-q")
    assert json.loads((tmp_path / "result.json").read_text())["extractor_results"][0]["name"] == "raw"


# ----------------------------------------------------------------------------- a fact of a new family's dataset
@dataclasses.dataclass(frozen=True)
class WeightedDataset(BenchmarkDataset):
    """A new family's dataset: it holds per-row weights and answers the ``weights`` fact its stage declares."""

    weights: Any = None

    def fact(self, name: str, view: Any, extractor: Any) -> Any:
        if name == "weights":
            return "weights", lambda: content_sha256(np.asarray(self.weights))
        return super().fact(name, view, extractor)


def weighted_norm(job, inputs, context, timings):
    return float(np.linalg.norm(context.dataset.embeddings * context.dataset.weights[:, None]))


def test_a_stage_declares_a_fact_its_dataset_holds():
    """Context facts are not a closed list in the core: a stage of a new pipeline declares `weights`, its dataset
    answers it, and the weights enter the stage's key; a fact no one holds fails when the plan is built."""
    X, labels = data()
    base = BenchmarkDataset.from_arrays(X, labels, identity=DatasetIdentity.declared("weights", "1"))
    stage("weighted", "weighted_norm", version=1, context=("weights", "extractor"))(weighted_norm)
    try:
        def key(weights: np.ndarray) -> str:
            dataset = WeightedDataset(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                                      weights=weights)
            context = RunContext(None, [PrecomputedExtractor("raw", X)], dataset)
            chain = Chain("raw", context.extractor_ids()[0], "raw")
            [job] = build_plan("weighted", [chain], context).jobs
            assert job.cache_eligible
            return job.key

        ones = np.ones(len(labels))
        assert key(ones) == key(ones.copy()) != key(np.arange(len(labels), dtype=float))
        context = RunContext(None, [PrecomputedExtractor("raw", X)], base)  # a dataset without weights
        with pytest.raises(ConfigError, match=r"BenchmarkDataset\) has no 'weights' fact"):
            build_plan("weighted", [Chain("raw", context.extractor_ids()[0], "raw")], context)
    finally:
        _REGISTRY.pop("weighted", None)

"""`vertebrae run` with custom metrics: --metric / --primary-metric and [[metrics]] in the config."""

from __future__ import annotations

import sys
import uuid

import numpy as np
import pytest

from vertebrae import BenchmarkResult
from vertebrae.cli.main import main

from .conftest import gaussian_classes

METRICS_MODULE = '''
import numpy as np


def centroid_gap(embeddings, labels, *, target_metadata=None, groups=None, seed=None):
    """Distance between the first two class centroids (labels arrive as marked keys)."""
    first, second = sorted(set(labels.tolist()))[:2]
    gap = np.linalg.norm(embeddings[labels == first].mean(0) - embeddings[labels == second].mean(0))
    return {"score": float(gap), "diagnostics": {"classes": [first, second]}}


def width(embeddings, labels, *, target_metadata=None, groups=None, seed=None, power=1):
    return {"score": float(embeddings.shape[1]) ** power}
'''

CONFIG = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "full"
embeddings = "full.npy"
[[extractors]]
name = "half"
embeddings = "half.npy"

[scoring]
k = 3
"""


def write_project(tmp_path, monkeypatch, metrics_module: str, prefix: str) -> str:
    """The blob dataset (full and half-width embeddings, labels) plus an importable metrics module; its name."""
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=6, seed=2)
    np.save(tmp_path / "full.npy", X)
    np.save(tmp_path / "half.npy", X[:, :3])
    np.save(tmp_path / "labels.npy", y)
    module = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(metrics_module)
    monkeypatch.syspath_prepend(str(tmp_path))
    return module


@pytest.fixture
def project(tmp_path, monkeypatch):
    module = write_project(tmp_path, monkeypatch, METRICS_MODULE, "vertebrae_cli_metrics")
    yield tmp_path, module
    sys.modules.pop(module, None)


def _result(folder) -> BenchmarkResult:
    return BenchmarkResult.load(folder / "report.json")


def test_metric_options_add_metrics_and_choose_the_primary(project, capsys):
    folder, module = project
    (folder / "run.toml").write_text(CONFIG)
    argv = ["run", str(folder / "run.toml"), "-o", str(folder / "out"), "--metric", f"{module}:centroid_gap",
            "--metric", f"{module}:width:dims", "--primary-metric", "dims"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[2] == "dims"
    result = _result(folder / "out")
    assert [r.name for r in result.ranked_results()] == ["full", "half"]
    assert result["full"].metrics["dims"].score == 6.0 and result["half"].primary_score == 3.0
    assert result["full"].metrics["centroid_gap"].diagnostics["classes"] == ["vk:int:0", "vk:int:1"]
    assert result.metadata["primary_metric"] == "dims"
    assert "| dims (primary) | 6.0000 | higher is better | yes |" in (folder / "out" / "report.md").read_text()


def test_config_metrics_entries_with_direction_and_params(project):
    folder, module = project
    (folder / "run.toml").write_text(CONFIG + f"""
[benchmark]
primary_metric = "squared"

[[metrics]]
path = "{module}:width"
name = "squared"
higher_is_better = false
params = {{power = 2}}
""")
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--metric",
                 f"{module}:centroid_gap"]) == 0
    result = _result(folder / "out")
    assert [r.name for r in result.ranked_results()] == ["half", "full"]
    assert result["half"].metrics["squared"].score == 9.0 and not result["half"].metrics["squared"].higher_is_better
    assert set(result["full"].metrics) == {"overlap", "squared", "centroid_gap"}
    identity = result.metadata["settings"]["metrics"][0]
    assert identity["callable"] == f"{module}:width" and identity["params"] == {"power": 2}


@pytest.mark.parametrize("extra, config_tail, message", [
    (["--metric", "no_colon"], "", "metric path 'no_colon' is malformed"),
    (["--metric", "vertebrae_missing_module_q:fn"], "", "module 'vertebrae_missing_module_q' cannot be found"),
    (["--metric", "{module}:nope"], "", "has no attribute 'nope'"),
    (["--metric", "{module}:np"], "", "names a module, not a metric"),
    (["--primary-metric", "ghost"], "", "primary_metric 'ghost' is not a configured metric"),
    (["--metric", "{module}:width", "--metric", "{module}:centroid_gap:width"], "", "two metrics named 'width'"),
    ([], '\n[[metrics]]\nname = "x"\n', "must be a table with path"),
    ([], '\n[[metrics]]\npath = "{module}:width"\ndirection = "up"\n', "unknown key(s) ['direction']"),
    (["--metric", "sklearn.metrics:accuracy_score"], "",
     "metric 'accuracy_score' (sklearn.metrics._classification:accuracy_score(y_true, y_pred, *, normalize=True, "
     "sample_weight=None)) cannot be called the way vertebrae calls metrics: got an unexpected keyword argument "
     "'target_metadata'; it needs the signature fn(embeddings, labels, *, target_metadata=None, groups=None, "
     "seed=None, **params)"),
    ([], '\n[[metrics]]\npath = "{module}:width"\nparams = {{exponent = 2}}\n',
     "got an unexpected keyword argument 'exponent'"),
])
def test_metric_errors_exit_2_with_one_line(project, capsys, extra, config_tail, message):
    folder, module = project
    (folder / "run.toml").write_text(CONFIG + config_tail.format(module=module))
    argv = ["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", *(a.format(module=module) for a in extra)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("vertebrae run: error:")
    assert not (folder / "out" / "report.json").exists()


def test_run_help_documents_the_metric_options(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "--metric MODULE:FUNCTION[:NAME]" in text and "--primary-metric NAME" in text

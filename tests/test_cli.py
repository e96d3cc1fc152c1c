"""The `vertebrae` command: demo, run (TOML/YAML, every embedding format), report, --help, exit codes."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from vertebrae.cli.main import main

from .conftest import gaussian_classes


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["run", "--help"], ["score", "--help"],
                                  ["report", "--help"], ["compare", "--help"]])
def test_help_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert "usage: vertebrae" in capsys.readouterr().out


def test_demo_prints_ranking_and_writes_reports(tmp_path, capsys):
    assert main(["demo", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "raw_pixels" in out and "pca_2" in out and "report.json" in out
    data = json.loads((tmp_path / "report.json").read_text())
    assert len(data["extractor_results"]) == 5
    ranking = out.splitlines()[2:7]  # header, rule, five rows
    assert ranking[-1].split()[1] == "pca_2"  # two PCA components separate ten digits worst
    assert (tmp_path / "report.md").read_text().startswith("# vertebrae benchmark report")
    assert "Top candidate: raw_pixels" in out and str(tmp_path / "report.html") in out
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    # the README shows this very output and a new user compares them: the same text, the same numbers (to 2e-3:
    # another CPU's BLAS may round a neighbour distance the other way)
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    shown = "rank  extractor" + readme.split("rank  extractor", 1)[1].split("```", 1)[0]
    printed = out.split("\nWrote ", 1)[0].rstrip() + "\n"
    number = r"\d+\.\d{4}"
    assert re.sub(number, "#", shown) == re.sub(number, "#", printed)
    np.testing.assert_allclose([float(v) for v in re.findall(number, shown)],
                               [float(v) for v in re.findall(number, printed)], atol=2e-3)


@pytest.fixture
def project(tmp_path):
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=5, seed=9)
    np.save(tmp_path / "a.npy", X)
    sparse.save_npz(tmp_path / "b.npz", sparse.csr_matrix(np.where(np.abs(X) > 1, X, 0)))
    np.savez(tmp_path / "c.npz", embeddings=X[:, :3])
    pd.DataFrame(X[:, ::-1], columns=[f"f{i}" for i in range(5)]).to_parquet(tmp_path / "d.parquet")
    np.savetxt(tmp_path / "e.csv", X[:, :2], delimiter=",", header="u,v", comments="")
    pd.DataFrame({"id": range(len(y)), "label": [f"class-{c}" for c in y]}).to_csv(tmp_path / "labels.csv", index=False)
    return tmp_path


TOML = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.csv"
labels_column = "label"

[[extractors]]
name = "dense"
embeddings = "a.npy"
[[extractors]]
name = "sparse"
embeddings = "b.npz"
[[extractors]]
name = "archive"
embeddings = "c.npz"
[[extractors]]
name = "parquet"
embeddings = "d.parquet"
[[extractors]]
name = "csv"
embeddings = "e.csv"

[scoring]
k = 4
"""


def test_run_toml_with_every_embedding_format(project, capsys):
    (project / "run.toml").write_text(TOML)
    out = project / "out"
    assert main(["run", str(project / "run.toml"), "--output", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    data = json.loads((out / "report.json").read_text())
    results = {r["name"]: r for r in data["extractor_results"]}
    assert set(results) == {"dense", "sparse", "archive", "parquet", "csv"}
    assert results["sparse"]["embedding"]["sparse"] is True
    assert results["archive"]["embedding"]["embedding_dim"] == 3 and results["csv"]["embedding"]["embedding_dim"] == 2
    assert results["dense"]["overlap"]["k_per_class"] == {"str:class-0": 4, "str:class-1": 4, "str:class-2": 4}


def test_run_with_stability_and_separatix_sections(project):
    config = TOML + "\n[stability]\nrepeats = 3\n\n[separatix]\nenabled = false\n"
    (project / "run.toml").write_text(config)
    assert main(["run", str(project / "run.toml"), "-o", str(project / "s"), "-q"]) == 0
    data = json.loads((project / "s" / "report.json").read_text())
    assert all(len(r["stability"]["repeat_scores"]["score"]) == 3 for r in data["extractor_results"])
    assert all(r["separatix"] is None for r in data["extractor_results"])
    (project / "run.toml").write_text(TOML + "\n[stability]\nstratified = true\n")
    assert main(["run", str(project / "run.toml"), "-o", str(project / "s2"), "-q"]) == 2


def test_score_is_an_alias_of_run(project):
    (project / "run.toml").write_text(TOML)
    assert main(["score", str(project / "run.toml"), "-o", str(project / "sc"), "-q"]) == 0
    assert (project / "sc" / "report.json").exists()


def test_run_yaml(project):
    import yaml

    config = {"dataset": {"id": "blobs", "revision": "1", "labels": "labels.csv", "labels_column": "label"},
              "extractors": [{"name": "dense", "embeddings": "a.npy"}]}
    (project / "run.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", str(project / "run.yaml"), "-o", str(project / "y"), "-q"]) == 0
    assert (project / "y" / "report.md").exists()


@pytest.mark.parametrize("config, message", [
    (TOML.replace("[scoring]", "[scorin]"), "unknown section(s) ['scorin']"),
    (TOML.replace("k = 4", "k = 4\nmodel_type = 'KMeans'"), "unknown field 'model_type'"),
    (TOML.replace('revision = "1"\n', ""), "revision"),
    (TOML.replace('"a.npy"', '"missing.npy"'), "does not exist"),
    (TOML.replace('labels_column = "label"', 'labels_column = "nope"'), "column(s) ['nope'] not found"),
    (TOML.replace('name = "sparse"', 'name = "dense"'), "both named 'dense'"),
    (TOML.replace("k = 4", "k = 0"), "k must be"),
])
def test_run_bad_input_gives_one_line_error_and_exit_2(project, capsys, config, message):
    (project / "run.toml").write_text(config)
    assert main(["run", str(project / "run.toml"), "-o", str(project / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("vertebrae run: error:")
    assert not (project / "out" / "report.json").exists()


def test_report_regenerates_markdown_from_json(project, capsys):
    (project / "run.toml").write_text(TOML)
    main(["run", str(project / "run.toml"), "-o", str(project / "out"), "-q"])
    assert main(["report", str(project / "out" / "report.json"), "-o", str(project / "again.md")]) == 0
    assert (project / "again.md").read_text() == (project / "out" / "report.md").read_text()
    assert main(["report", str(project / "out" / "report.json")]) == 0
    assert capsys.readouterr().out == (project / "out" / "report.md").read_text()
    (project / "bad.json").write_text('{"x": 1}')
    assert main(["report", str(project / "bad.json")]) == 2
    assert main(["report", str(project / "nothing.json")]) == 2


def test_console_script_exit_code_on_usage_error():
    proc = subprocess.run([sys.executable, "-m", "vertebrae.cli.main", "run"], capture_output=True, text=True)
    assert proc.returncode == 2 and "the following arguments are required: config" in proc.stderr


def test_import_is_light():
    code = ("import sys, vertebrae; heavy = [m for m in ('pandas', 'sklearn', 'overlapindex', 'separatix', 'torch', "
            "'scipy', 'tqdm', 'matplotlib', 'dask', 'distributed', 'fsspec', 's3fs', 'gcsfs', 'transformers', "
            "'sentence_transformers', 'onnxruntime') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_parquet_without_pyarrow_names_the_extra(project, monkeypatch):
    # pyarrow is installed in the test environment; hiding it is the only way to cause this failure for real
    import builtins

    from vertebrae.errors import DependencyError
    from vertebrae.inputs.io import load_matrix

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith(("pyarrow", "fastparquet")):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(DependencyError, match=r'pip install "pyarrow>=14"'):
        load_matrix(project / "d.parquet")


def test_csv_readers_keep_text_labels_and_detect_numeric_headers(tmp_path):
    from vertebrae.inputs.io import load_column, load_matrix

    X = np.arange(12.0).reshape(4, 3) + 0.5
    pd.DataFrame(X).to_csv(tmp_path / "unnamed.csv", index=False)  # header line "0,1,2"
    np.savetxt(tmp_path / "plain.csv", X, delimiter=",")
    assert np.array_equal(load_matrix(tmp_path / "unnamed.csv"), X)
    assert np.array_equal(load_matrix(tmp_path / "plain.csv"), X)
    pd.DataFrame({"label": ["NA", "None", "cat", ""]}).to_csv(tmp_path / "labels.csv", index=False)
    values = load_column(tmp_path / "labels.csv", "label", "labels")
    assert values[:3] == ["NA", "None", "cat"] and np.isnan(values[3])  # only the empty cell is missing


@pytest.mark.parametrize("name, text, message", [
    ("labels.txt", "a\nb\n\na\nb\n", "line(s) 3 of the labels file are blank (1 line(s)); every line (a .txt file "
                                    "has no header) must hold one row"),
    ("labels.txt", "a\nb\na\nb\n  \n", "line(s) 5 of the labels file are blank"),
    ("labels.csv", "label\na\nb\n\na\nb\n", "line(s) 4 of the labels file are blank"),
    ("labels.csv", "id,label\n0,a\n1,b\n2,a,extra\n3,b\n", "line(s) 4 of the labels file have a field count other "
                                                          "than the header's 2 (line 4 has 3)"),
])
def test_blank_or_malformed_label_lines_are_named_by_line_number(tmp_path, capsys, name, text, message):
    """Issue 11 item 7: not dropped silently (which surfaced as a row-count mismatch)."""
    from vertebrae.inputs.io import load_column

    (tmp_path / name).write_text(text)
    with pytest.raises(Exception, match=re.escape(message)):
        load_column(tmp_path / name, "label" if name.endswith(".csv") else None, "labels")
    np.save(tmp_path / "emb.npy", np.random.default_rng(0).normal(size=(text.count("\n") - 1, 3)))
    column = 'labels_column = "label"' if name.endswith(".csv") else ""
    (tmp_path / "run.toml").write_text(f'[dataset]\nid = "x"\nrevision = "1"\nlabels = "{name}"\n{column}\n'
                                       '[[extractors]]\nname = "e"\nembeddings = "emb.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert message in capsys.readouterr().err


def test_run_records_file_provenance(project, monkeypatch):
    """Issue 11 item 6: config, labels and embedding files as given, with sizes and content hashes."""
    import hashlib
    import os

    from vertebrae import BenchmarkResult

    (project / "run.toml").write_text(TOML + f'\n[[extractors]]\nname = "absolute"\nembeddings = "{project / "a.npy"}"\n')
    monkeypatch.chdir(project)
    assert main(["run", "run.toml", "-o", "out", "-q"]) == 0
    result = BenchmarkResult.load(project / "out" / "report.json")
    files = result.metadata["input_files"]
    given = [(f["role"], f["path"], f.get("extractor")) for f in files]
    assert given == [("config", "run.toml", None), ("labels", "labels.csv", None), ("embeddings", "a.npy", "dense"),
                     ("embeddings", "b.npz", "sparse"), ("embeddings", "c.npz", "archive"),
                     ("embeddings", "d.parquet", "parquet"), ("embeddings", "e.csv", "csv"),
                     ("embeddings", str(project / "a.npy"), "absolute")]
    for record in files:
        path = project / record["path"]
        assert record["size_bytes"] == os.path.getsize(path)
        assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert files[2]["sha256"] == files[-1]["sha256"]  # the same file under two spellings
    assert f"| file labels labels.csv | sha256 {files[1]['sha256']} ({files[1]['size_bytes']} bytes) |" in \
        (project / "out" / "report.md").read_text()


@pytest.mark.parametrize("quiet", [False, True])
def test_run_shows_each_distinct_warning_once_and_quiet_silences_them(project, capsys, quiet):
    """Issue 11 item 5: no source lines, one line per distinct warning; results keep them.
    Issue 26 item 11: each extractor's warning is named and shown once (not once per stage or repeat).
    Issue 37 item 13: a warning all five results share is one line saying so."""
    (project / "run.toml").write_text(TOML.replace("k = 4", "k = 10") + "\n[separatix]\nenabled = false\n")
    argv = ["run", str(project / "run.toml"), "-o", str(project / "w")] + (["-q"] if quiet else [])
    assert main(argv) == 0
    err = capsys.readouterr().err
    message = ("every class (3 classes): k reduced from 10 (fixed) to 6 because each has only 30 sample(s) "
               "(min_samples_per_cluster=5)")
    data = json.loads((project / "w" / "report.json").read_text())
    assert all(message in r["warnings"] for r in data["extractor_results"])  # five extractors, each records it
    if quiet:
        assert err == ""
    else:
        assert err.count(f"vertebrae run: ScoringWarning: {message} (in all 5 results)\n") == 1
        assert err.count(message) == 1 and ".py:" not in err and "scorer.score" not in err


def test_run_help_summarizes_the_config_format_and_points_to_the_docs(capsys):
    """Issue 11 item 12."""
    from vertebrae.cli.run_config import DATASET_KEYS, SECTIONS

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "docs/cli.md" in text and "vertebrae.cli.run_config" not in text
    listed = set(re.findall(r"^  \[\[?(\w+)\]\]?  ", text, flags=re.MULTILINE))  # issue 37 item 19: [cache] too
    assert listed == SECTIONS
    assert all(key in text for key in DATASET_KEYS - {"identity"})  # identity appears as identity = "content"


def test_on_error_record_prints_each_failure_once(project, capsys):
    """Issue 37 item 12: the failure was on stderr twice, as a ScoringWarning and as the failure line."""
    np.save(project / "const.npy", np.ones((90, 4), dtype=np.float32))
    (project / "run.toml").write_text(TOML + '\n[[extractors]]\nname = "collapsed"\nembeddings = "const.npy"\n')
    assert main(["run", str(project / "run.toml"), "-o", str(project / "r"), "--on-error", "record"]) == 1
    err = capsys.readouterr().err
    assert err.count("returned the same embedding for every row") == 1, err
    assert "vertebrae run: extractor 'collapsed' failed in the extract stage: ExtractorError: " in err


def test_on_error_record_writes_the_reports_and_exits_1(project, capsys):
    np.save(project / "const.npy", np.ones((90, 4), dtype=np.float32))
    config = TOML + '\n[[extractors]]\nname = "collapsed"\nembeddings = "const.npy"\n'
    (project / "run.toml").write_text(config.replace("[scoring]", "[benchmark]\non_error = \"raise\"\n\n[scoring]"))
    assert main(["run", str(project / "run.toml"), "-o", str(project / "r"), "-q"]) == 2
    assert not (project / "r" / "report.json").exists()
    capsys.readouterr()
    assert main(["run", str(project / "run.toml"), "-o", str(project / "r"), "-q", "--on-error", "record"]) == 1
    assert "extractor 'collapsed' failed in the extract stage" in capsys.readouterr().err
    data = json.loads((project / "r" / "report.json").read_text())
    failed = next(r for r in data["extractor_results"] if r["name"] == "collapsed")
    assert failed["error"]["stage"] == "extract" and failed["primary_score"] is None

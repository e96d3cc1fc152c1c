"""What a new user meets on the command line, second pass (issue 37 items 9, 10, 11, 14, 22, 26): YAML errors in
one line, label errors naming the file, column, row and editor line, a failing extractor of the user's own is not
bad input, an unusable cache store is refused before work, the console says whether the cache hit, and the demo
takes --cache."""

from __future__ import annotations

import json
import pathlib
import sys
import uuid

import numpy as np
import pandas as pd
import pytest

from vertebrae.cli.main import main
from vertebrae.scoring.overlap import OverlapScoringConfig

from .conftest import gaussian_classes


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vertebrae {command}: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _precomputed_project(folder: pathlib.Path, labels: list, suffix: str = ".csv") -> pathlib.Path:
    """A run config over one precomputed matrix and a labels file (one column named ``label``)."""
    np.save(folder / "x.npy", np.random.default_rng(0).normal(size=(len(labels), 3)))
    if suffix == ".csv":
        pd.DataFrame({"label": labels}).to_csv(folder / "y.csv", index=False)
    else:
        (folder / "y.txt").write_text("\n".join(map(str, labels)) + "\n")
    config = folder / "run.toml"
    config.write_text(f'[dataset]\nid = "d"\nrevision = "1"\nlabels = "y{suffix}"\n'
                      '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n[separatix]\nenabled = false\n')
    return config


# ------------------------------------------------------------------ 9. YAML syntax errors in one line
def test_yaml_syntax_error_is_one_line_with_the_file_line_and_column(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("dataset:\n  id: d\n  labels: [a, b\nextractors:\n  - name: raw\n")
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = _one_line_error(capsys, "run")
    assert "<unicode string>" not in err and "^" not in err
    assert err == (f"vertebrae run: error: {config}: invalid YAML: expected ',' or ']', but got ':' (at line 4, "
                   "column 11; while parsing a flow sequence started at line 3, column 11)")
    (tmp_path / "tab.yml").write_text("dataset:\n\tid: d\n")  # a tab, which YAML never allows as indentation
    assert main(["run", str(tmp_path / "tab.yml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert "(at line 2, column 1; while scanning for the next token)" in _one_line_error(capsys, "run")
    (tmp_path / "control.yaml").write_text('dataset:\n  id: "a\x01"\n')
    assert main(["run", str(tmp_path / "control.yaml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert "unacceptable character #x0001: special characters are not allowed (at line 2, column 9)" in \
        _one_line_error(capsys, "run")


def test_toml_and_yaml_errors_read_alike(tmp_path, capsys):
    (tmp_path / "run.toml").write_text("[dataset]\nid = \n")
    (tmp_path / "run.yaml").write_text("dataset:\n  id: a: b\n")
    for name in ("run.toml", "run.yaml"):
        assert main(["run", str(tmp_path / name), "-o", str(tmp_path / "out"), "-q"]) == 2
        err = _one_line_error(capsys, "run")
        assert f"{tmp_path / name}: invalid {name[4:].upper()}: " in err and "(at line 2, column " in err, err


# ------------------------------------------------------------------ 10. label errors name file, column, row, line
def test_missing_label_names_the_file_column_row_and_editor_line(tmp_path, capsys):
    labels = ["a", "b"] * 3 + ["a", ""] + ["a", "b"] * 2  # row 7 is empty: line 9 under the header
    config = _precomputed_project(tmp_path, labels)
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert _one_line_error(capsys, "run") == (
        "vertebrae run: error: the labels file 'y.csv', column 'label' has missing labels (None/NaN) at rows 7 "
        "(0-based; 1 row(s); line(s) 9 in an editor); drop those rows or assign them a class")
    assert (tmp_path / "y.csv").read_text().splitlines()[9 - 1] == '""'  # line 9 is the one an editor shows


def test_a_quoted_multi_line_cell_keeps_the_editor_lines_right(tmp_path, capsys):
    labels = ["a\nstill a", "b"] * 3 + ["c"] + ["a\nstill a", "b"]  # 'c' once, at row 6
    config = _precomputed_project(tmp_path, labels)
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = _one_line_error(capsys, "run")
    assert ("the labels file 'y.csv', column 'label': class(es) 'c' (1 sample) have fewer than 2 samples, at rows 6 "
            "(0-based; 1 row(s); line(s) 11 in an editor)") in err
    assert (tmp_path / "y.csv").read_text().splitlines()[11 - 1] == "c"


def test_a_one_sample_class_in_a_text_file_names_its_line(tmp_path, capsys):
    config = _precomputed_project(tmp_path, ["x", "y"] * 4 + ["z"], suffix=".txt")
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert ("the labels file 'y.txt': class(es) 'z' (1 sample) have fewer than 2 samples, at rows 8 (0-based; 1 "
            "row(s); line(s) 9 in an editor)") in _one_line_error(capsys, "run")


def test_audio_labels_of_the_wrong_length_name_the_labels_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "clips.npz", *[rng.normal(size=800).astype(np.float32) for _ in range(10)])
    pd.DataFrame({"label": ["a", "b"] * 6}).to_csv(tmp_path / "labels.csv", index=False)  # 12 labels, 10 clips
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "clips"\nrevision = "1"\naudio = "clips.npz"\nsampling_rate = 8000\nlabels = "labels.csv"\n'
        '[[extractors]]\nname = "mean"\nkind = "callable"\nmodel = "numpy:vstack"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert ("the labels file 'labels.csv', column 'label' has 12 rows but the embeddings/inputs have 10"
            in _one_line_error(capsys, "run"))


def test_text_table_labels_name_the_texts_file_and_its_column(tmp_path, capsys):
    pd.DataFrame({"text": [f"t{i}" for i in range(9)], "topic": ["a", "b"] * 4 + [None]}).to_csv(
        tmp_path / "texts.csv", index=False)
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "t"\nrevision = "1"\ntexts = "texts.csv"\ninput_column = "text"\nlabels_column = "topic"\n'
        '[[extractors]]\nname = "len"\nkind = "callable"\nmodel = "numpy:vstack"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert ("the texts file 'texts.csv', column 'topic' has missing labels (None/NaN) at rows 8 (0-based; 1 row(s); "
            "line(s) 10 in an editor)") in _one_line_error(capsys, "run")


# ------------------------------------------------------------------ 11. a failure in the user's own extractor
USER_MODULE = '''
def embed(texts):
    return _model(texts)


def _model(texts):
    raise ValueError("my checkpoint has the wrong shape")
'''


@pytest.fixture
def failing_extractor(tmp_path, monkeypatch):
    module = f"new_user_extractor_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pd.DataFrame({"text": [f"text {i}" for i in range(12)], "label": [0, 1] * 6}).to_csv(tmp_path / "texts.csv",
                                                                                          index=False)
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "t"\nrevision = "1"\ntexts = "texts.csv"\ninput_column = "text"\nlabels_column = "label"\n'
        f'[[extractors]]\nname = "mine"\nkind = "callable"\nmodel = "{module}:embed"\n')
    monkeypatch.delenv("VERTEBRAE_TRACEBACK", raising=False)
    yield tmp_path, module
    sys.modules.pop(module, None)


def test_a_failing_user_extractor_exits_1_naming_it_not_2(failing_extractor, capsys):
    folder, _ = failing_extractor
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err == ("vertebrae run: extractor 'mine' failed during fit/transform: ValueError: my checkpoint has the "
                   "wrong shape (the error is raised by the extractor's own code: --traceback or VERTEBRAE_TRACEBACK=1 "
                   "shows where)\n")


def test_a_user_extractor_calling_sys_exit_exits_1_naming_it(failing_extractor, capsys):
    """sys.exit(3) in the user's code made ``vertebrae run`` exit 3: SystemExit passed every handler."""
    from vertebrae.extractors.user_code import user_code

    folder, module = failing_extractor
    (folder / f"{module}.py").write_text("import sys\n\n\ndef embed(texts):\n    sys.exit(3)\n")
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 1
    assert capsys.readouterr().err == (
        "vertebrae run: extractor 'mine' failed during fit/transform: it called sys.exit(3); raise an exception "
        "instead (the error is raised by the extractor's own code: --traceback or VERTEBRAE_TRACEBACK=1 shows where)\n")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C still stops the run (exit 130)
        with user_code("extractor 'x' failed in transform"):
            raise KeyboardInterrupt


@pytest.mark.parametrize("ask", ["flag", "env"])
def test_traceback_shows_the_users_frames(failing_extractor, capsys, monkeypatch, ask):
    folder, module = failing_extractor
    argv = ["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]
    if ask == "flag":
        argv.append("--traceback")
    else:
        monkeypatch.setenv("VERTEBRAE_TRACEBACK", "1")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    user_file = str(folder / f"{module}.py")
    assert f'File "{user_file}", line 3, in embed' in err and f'File "{user_file}", line 7, in _model' in err
    assert err.endswith("vertebrae run: extractor 'mine' failed during fit/transform: ValueError: my checkpoint has "
                        "the wrong shape\n")


def test_the_user_code_error_keeps_its_traceback_through_pickling():
    """A dask worker's exception reaches the client pickled: the user's frames travel as text."""
    import pickle

    from vertebrae import ExtractorError, UserCodeError
    from vertebrae.extractors.user_code import user_code

    with pytest.raises(UserCodeError) as info:
        with user_code("extractor 'x' failed in transform"):
            {}["missing"]
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, ExtractorError) and str(copy) == "extractor 'x' failed in transform: KeyError: 'missing'"
    assert copy.user_traceback == info.value.user_traceback and "{}[\"missing\"]" in copy.user_traceback


# ------------------------------------------------------------------ 14. an unusable cache store, before work
def _blob_project(folder: pathlib.Path) -> pathlib.Path:
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=4, seed=1)
    np.save(folder / "x.npy", X)
    np.save(folder / "y.npy", y)
    (folder / "run.toml").write_text('[dataset]\nid = "blobs"\nrevision = "1"\nlabels = "y.npy"\n'
                                     '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n'
                                     '[[extractors]]\nname = "half"\nembeddings = "x.npy"\n'
                                     '[scoring]\nk = 3\n[separatix]\nenabled = false\n')
    return folder / "run.toml"


def test_an_unwritable_cache_is_refused_before_work(tmp_path, capsys):
    config = _blob_project(tmp_path)
    (tmp_path / "afile").write_text("not a folder")
    for store, why in (("/proc/vertebrae-cache", "cannot be created (No such file or directory)"),
                       (str(tmp_path / "afile"), "cannot be created (a file is in the way)"),
                       (str(tmp_path / "afile" / "below"), "cannot be created (Not a directory)")):
        assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q", "--cache", store]) == 2
        err = _one_line_error(capsys, "run")
        assert err == (f"vertebrae run: error: the cache store {store} {why}; give a folder that can be written, or "
                       'mode = "read_only" to only read an existing cache')
        assert not (tmp_path / "out" / "report.json").exists()  # refused before the run, not after it


def test_a_read_only_cache_is_not_created(tmp_path, capsys):
    config = _blob_project(tmp_path)
    text = config.read_text() + '[cache]\nstore = "never"\nmode = "read_only"\n'
    config.write_text(text)
    assert main(["run", str(config), "-o", str(tmp_path / "out"), "-q"]) == 0
    assert not (tmp_path / "never").exists()


# ------------------------------------------------------------------ 22 and 26. did the cache hit? demo --cache
def _cache_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("cache: "))


def test_the_console_says_whether_the_cache_hit(tmp_path, capsys):
    config = _blob_project(tmp_path)
    cache = tmp_path / "cache"
    argv = ["run", str(config), "-o", str(tmp_path / "out"), "--cache", str(cache)]
    assert main(argv) == 0
    assert _cache_line(capsys.readouterr().out) == (f"cache: 0 of 2 extraction(s) reused; computed: raw, half "
                                                    f"(store {cache}, read_write)")
    assert main(argv) == 0
    assert _cache_line(capsys.readouterr().out) == f"cache: 2 of 2 extraction(s) reused (store {cache}, read_write)"
    statuses = [r["embedding"]["cache_status"] for r in
                json.loads((tmp_path / "out" / "report.json").read_text())["extractor_results"]]
    assert statuses == ["hit", "hit"]  # what the line counts, as the result records it
    assert main(argv[:-2]) == 0  # no cache: no cache line
    assert "cache: " not in capsys.readouterr().out


def test_demo_takes_a_cache_and_reuses_it(tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = ["demo", "-o", str(tmp_path / "out"), "--cache", str(cache)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert _cache_line(first).startswith("cache: 0 of 5 extraction(s) reused; computed: raw_pixels, pca_16, ")
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert _cache_line(second) == f"cache: 5 of 5 extraction(s) reused (store {cache}, read_write)"
    ranking = [line for line in first.splitlines() if line.strip()[:1].isdigit()]
    assert ranking == [line for line in second.splitlines() if line.strip()[:1].isdigit()]


@pytest.mark.filterwarnings("ignore::vertebrae.errors.ScoringWarning")  # small classes: k is reduced
def test_text_demo_reuses_its_cache(tmp_path, monkeypatch, capsys, minilm_path):
    from vertebrae.cli import text_demo

    monkeypatch.setattr(text_demo, "N_TEXTS", 60)  # the shipped demo uses 600; the code path is the same
    cache = tmp_path / "cache"
    argv = ["demo", "--text", "-o", str(tmp_path / "out"), "--cache", str(cache), "-q"]
    assert main(argv) == 0
    first = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["embedding"]["cache_status"] for r in first["extractor_results"]} == {"miss"}
    assert main(argv) == 0
    second = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {r["embedding"]["cache_status"] for r in second["extractor_results"]} == {"hit"}
    assert [r["primary_score"] for r in first["extractor_results"]] == \
        [r["primary_score"] for r in second["extractor_results"]]


# ------------------------------------------------------------------ 13. one line for a warning every result shares
def test_a_warning_every_result_shares_is_one_line(tmp_path, capsys):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=8, seed=3)
    np.save(tmp_path / "y.npy", y)
    entries = []
    for width in range(2, 9):  # seven candidates: the first 2..8 columns
        np.save(tmp_path / f"x{width}.npy", X[:, :width])
        entries.append(f'[[extractors]]\nname = "first{width}"\nembeddings = "x{width}.npy"\n')
    (tmp_path / "run.toml").write_text('[dataset]\nid = "blobs"\nrevision = "1"\nlabels = "y.npy"\n' + "".join(entries)
                                       + "[scoring]\nk = 10\n[separatix]\nenabled = false\n")
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    note = ("every class (3 classes): k reduced from 10 (fixed) to 4 because each has only 20 sample(s) "
            "(min_samples_per_cluster=5)")
    assert err == f"vertebrae run: ScoringWarning: {note} (in all 7 results)\n"
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert all(r["warnings"] == [note] for r in data["extractor_results"])  # each result still records it


def test_a_warning_some_results_share_names_them(tmp_path, capsys):
    X, y = gaussian_classes(n_per_class=20, n_classes=3, dim=4, seed=3)
    X = np.vstack([X, X[:6] + 0.01])
    y = np.concatenate([y, [3] * 6])  # a fourth class of 6 rows: its k is reduced, the others' are not
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "blobs"\nrevision = "1"\nlabels = "y.npy"\n'
        + "".join(f'[[extractors]]\nname = "{name}"\nembeddings = "x.npy"\n' for name in ("a", "b", "c"))
        + '[scoring]\nk = 4\n[separatix]\nenabled = false\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err == ("vertebrae run: ScoringWarning: class '3': k reduced from 4 (fixed) to 2 because it has only 6 "
                   "sample(s) (min_samples_per_cluster=5) (in all 3 results)\n")


def test_grouped_notes_name_the_classes_reduced_alike():
    from vertebrae.inputs.labels import LabelCatalog
    from vertebrae.scoring.overlap import resolve_k

    catalog = LabelCatalog(["a", "b", "c", "d", "e"])
    counts = dict(zip(catalog.keys, [20, 20, 20, 12, 100]))
    k, _, notes = resolve_k(counts, OverlapScoringConfig(k=10), catalog)
    assert list(k.values()) == [4, 4, 4, 2, 10]  # capacity min(n, max(2, n // 5)), the rule of docs/scoring.md
    assert notes == ["classes 'a', 'b', 'c' (3 of 5): k reduced from 10 (fixed) to 4 because each has only 20 "
                     "sample(s) (min_samples_per_cluster=5)",
                     "class 'd': k reduced from 10 (fixed) to 2 because it has only 12 sample(s) "
                     "(min_samples_per_cluster=5)"]

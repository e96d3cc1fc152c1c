"""What a new user meets on the command line (issue 26, items 1-9): every mistake is exit 2 and one line,
checked before the work; a run that ranks nothing exits 1; quiet is quiet; hints and messages use the CLI's words."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import time
import tomllib

import numpy as np
import pandas as pd
import pytest

from vertebrae.cli.main import main

from .test_cli_metrics import CONFIG as METRICS_CONFIG, write_project

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The metric-option tests' run config, without Separatix (these tests only look at exit codes and messages).
CONFIG = METRICS_CONFIG + """
[separatix]
enabled = false
"""

METRICS_MODULE = '''
def nan_score(embeddings, labels, **kwargs):
    return {"score": float("nan")}


def broken(embeddings, labels, **kwargs):
    raise TypeError("broken needs a fitted model")


def spread(embeddings, labels, **kwargs):
    import numpy as np
    return {"score": float(np.linalg.norm(np.asarray(embeddings), axis=1).mean())}


def interrupt(texts):
    raise KeyboardInterrupt  # as Ctrl-C inside a user's extractor
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    module = write_project(tmp_path, monkeypatch, METRICS_MODULE, "cli_rejection_metrics")
    (tmp_path / "run.toml").write_text(CONFIG)
    yield tmp_path, module
    sys.modules.pop(module, None)


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vertebrae {command}: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ 1. output paths, before any work
def test_report_folder_that_is_a_file_or_cannot_exist_is_refused_before_the_run(project, capsys):
    folder, _ = project
    (folder / "afile").write_text("keep me")
    for command in (["demo"], ["run", str(folder / "missing.toml")]):  # the config is never read
        assert main([*command, "-o", str(folder / "afile"), "-q"]) == 2
        assert "is a file, not a folder" in _one_line_error(capsys, command[0])
    assert (folder / "afile").read_text() == "keep me"
    assert main(["run", str(folder / "run.toml"), "-o", "/proc/nope", "-q"]) == 2
    assert "'/proc/nope': cannot create this folder" in _one_line_error(capsys, "run")


@pytest.mark.parametrize("report", ["report.json", "report.md", "report.html"])
def test_a_folder_where_a_report_goes_is_refused_before_the_run(project, capsys, report):
    """A finished run used to end in a traceback (IsADirectoryError) at its last write, with report.json written."""
    folder, _ = project
    (folder / "out" / report).mkdir(parents=True)
    for command in (["demo"], ["run", str(folder / "run.toml")]):
        assert main([*command, "-o", str(folder / "out"), "-q"]) == 2
        assert f"{report} there is not a file" in _one_line_error(capsys, command[0])
    assert sorted(path.name for path in (folder / "out").iterdir()) == [report]  # nothing was written
    (folder / "dangling").symlink_to(folder / "nowhere")
    assert main(["demo", "-o", str(folder / "dangling"), "-q"]) == 2
    assert "is a link to a missing folder" in _one_line_error(capsys, "demo")


@pytest.mark.parametrize("input_name", ["run.toml", "labels.npy"])
@pytest.mark.parametrize("report", ["report.json", "report.md", "report.html"])
def test_a_report_that_is_an_input_file_is_refused_before_the_run(project, capsys, input_name, report):
    """``run -o out`` replaced out/report.* even when that file was the run's own config or a data file (here reached
    by a link), and the input was lost; now that --output is refused, naming the file, and the input is intact."""
    folder, _ = project
    (folder / "out").mkdir()
    real = folder / "out" / report
    source = folder / input_name
    if input_name == "run.toml":  # out/report.* holds the config; its paths are relative to out/
        real.write_text(CONFIG.replace('"labels.npy"', '"../labels.npy"').replace('"full.npy"', '"../full.npy"')
                        .replace('"half.npy"', '"../half.npy"'))
        source.unlink()
    else:
        source.replace(real)
    source.symlink_to(real)
    kept = real.read_bytes()
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 2
    err = _one_line_error(capsys, "run")
    assert f"{report} there is the input file" in err and input_name in err and "give another --output folder" in err
    assert real.read_bytes() == kept
    assert sorted(path.name for path in (folder / "out").iterdir()) == [report]  # nothing was written


@pytest.mark.parametrize("argv, says", [
    (["run"], "vertebrae run: error: the following arguments are required: config (see vertebrae run --help)"),
    (["run", "x.toml", "--finalists"], "vertebrae run: error: argument --finalists: expected one argument"),
    (["run", "x.toml", "--on-error", "ignore"], "vertebrae run: error: argument --on-error: invalid choice"),
    (["run", "x.toml", "--referee", "knn"], "argument --referee: invalid choice: 'knn' (choose from 'probe')"),
    (["compare", "a.json", "b.json", "--tolerance", "abc"], "vertebrae compare: error: argument --tolerance"),
    (["report", "r.json", "--format", "pdf"], "vertebrae report: error: argument --format/-f: invalid choice"),
    (["run", "x.toml", "--frobnicate"], "vertebrae run: error: unrecognized arguments: --frobnicate (see vertebrae "
                                        "run --help)"),
    (["run", "x.toml", "--prob"], "vertebrae run: error: unrecognized arguments: --prob"),  # no abbreviations
    (["cache", "list", "--secret-env", "X"], "vertebrae cache list: error: unrecognized arguments: --secret-env X"),
    (["nosuch"], "vertebrae: error: argument COMMAND: invalid choice: 'nosuch'"),
])
def test_usage_mistakes_are_one_line_naming_the_command(argv, says, capsys):
    """argparse prints its usage block before the error; the CLI's contract is one line and exit 2."""
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("vertebrae") and says in err, err


def test_file_outputs_create_missing_folders_and_refuse_impossible_ones(project, capsys):
    folder, _ = project
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 0
    result = str(folder / "out" / "report.json")
    assert main(["report", result, "-o", str(folder / "nodir" / "sub" / "x.md")]) == 0
    assert (folder / "nodir" / "sub" / "x.md").read_text().startswith("# vertebrae benchmark report")
    assert main(["compare", result, result, "-o", str(folder / "other" / "x.md")]) == 0
    assert (folder / "other" / "x.md").is_file()
    (folder / "afile").write_text("")
    for command in (["report", result], ["compare", result, result]):
        assert main([*command, "-o", str(folder / "afile" / "x.md")]) == 2  # not 1, which compare means "regressed"
        assert "--output's folder" in _one_line_error(capsys, command[0])
        assert main([*command, "-o", str(folder / "out")]) == 2
        assert "is a folder; give a file path" in _one_line_error(capsys, command[0])


# ------------------------------------------------------------------ 2. dask addresses
@pytest.mark.parametrize("address", ["localhost:8786x", "tcp://", "tcp://host:0", "scheduler"])
def test_malformed_dask_address_is_exit_2_at_once(project, capsys, address):
    folder, _ = project
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--dask-address", address]) == 2
    assert "is not a scheduler address; use [tcp://]HOST:PORT" in _one_line_error(capsys, "run")


def test_unreachable_dask_scheduler_is_one_line_after_the_timeout(project, capsys):
    pytest.importorskip("distributed")
    folder, _ = project
    start = time.monotonic()
    argv = ["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--dask-address", "tcp://127.0.0.1:1",
            "--dask-timeout", "1"]
    assert main(argv) == 2
    assert time.monotonic() - start < 20  # dask's own default waits 30 s
    assert "tcp://127.0.0.1:1: no dask scheduler answered within 1 s" in _one_line_error(capsys, "run")
    assert not (folder / "out" / "report.json").exists()


def test_a_dask_timeout_without_an_address_is_refused(project, capsys):
    """It waited for nothing: the run went local and the flag was silently ignored."""
    folder, _ = project
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--dask-timeout", "3"]) == 2
    assert "--dask-timeout is how long to wait for --dask-address, which is not given" in _one_line_error(capsys, "run")
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--dask-address", "tcp://h:1",
                 "--dask-timeout", "0"]) == 2
    assert "--dask-timeout must be a number of seconds > 0, got 0" in _one_line_error(capsys, "run")


# ------------------------------------------------------------------ 3. a primary metric that fails everywhere
@pytest.mark.parametrize("function, reason", [("nan_score", "returned score=nan"),
                                              ("broken", "TypeError: broken needs a fitted model")])
@pytest.mark.parametrize("quiet", [False, True])
def test_failed_primary_metric_exits_1_with_the_reason(project, capsys, function, reason, quiet):
    folder, module = project
    argv = ["run", str(folder / "run.toml"), "-o", str(folder / "out"), "--metric", f"{module}:{function}",
            "--primary-metric", function] + (["-q"] if quiet else [])
    assert main(argv) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "nothing is ranked" in line]
    assert len(lines) == 1 and lines[0].startswith(f"vertebrae run: no extractor has a valid {function!r} score")
    assert reason in lines[0]
    assert (folder / "out" / "report.json").is_file()  # the reports are still written


# ------------------------------------------------------------------ 4. --quiet silences transformers
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny_bert")
    config = transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


def test_quiet_silences_transformers_progress_bars_and_logs(tiny_bert, capfd):
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    from vertebrae.cli.main import third_party_output

    hf_logging.enable_progress_bar()
    level = hf_logging.get_verbosity()
    BertModel.from_pretrained(tiny_bert)
    assert "Loading weights" in capfd.readouterr().err  # the control: transformers does print a bar here
    with third_party_output(quiet=True):
        BertModel.from_pretrained(tiny_bert)
        assert hf_logging.get_verbosity() == hf_logging.ERROR  # its warnings and infos are held back
    assert capfd.readouterr().err == ""
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == level  # restored afterwards
    with third_party_output(quiet=False):  # stderr is not a terminal here: no bars, logs unchanged
        BertModel.from_pretrained(tiny_bert)
        assert hf_logging.get_verbosity() == level
    assert "Loading weights" not in capfd.readouterr().err


@pytest.mark.slow
def test_text_demo_quiet_prints_nothing(tmp_path, capfd):
    assert main(["demo", "--text", "-q", "-o", str(tmp_path)]) == 0
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


# ------------------------------------------------------------------ 5. integer regression targets
def test_integer_valued_regression_targets_point_to_target_type_regression(tmp_path, capsys):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    np.save(tmp_path / "x.npy", X)
    np.savetxt(tmp_path / "y.txt", y)  # "1.510000000000000000e+02": integer values as text
    (tmp_path / "run.toml").write_text('[dataset]\nid = "diabetes"\nrevision = "1"\nlabels = "y.txt"\n'
                                       '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = _one_line_error(capsys, "run")
    assert "looks continuous (214 distinct numbers in 442 rows, 84 of them in a single row)" in err
    assert 'target_type = "regression"' in err


def test_integer_class_ids_with_a_rare_class_keep_the_class_message():
    from vertebrae import InputValidationError
    from vertebrae.inputs.targets import build_targets

    y = np.repeat(np.arange(12), 5)[:-4]  # 12 classes, the last one with a single row
    with pytest.raises(InputValidationError, match=r"class\(es\) '11.0' \(1 sample\) have fewer than 2 samples"):
        build_targets(y.astype(float))


# ------------------------------------------------------------------ 6. multi-label CSV column names
def test_multi_label_csv_columns_name_the_labels(tmp_path):
    n = np.arange(60)
    table = pd.DataFrame({"id": n, "even": n % 2 == 0, "big": n >= 30, "prime": np.isin(n % 10, [2, 3, 5, 7]),
                          "small": n < 30}).astype({c: int for c in ("even", "big", "prime", "small")})
    table.to_csv(tmp_path / "y.csv", index=False)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", table[["even", "big", "prime", "small"]].to_numpy() + rng.normal(0, .3, (60, 4)))
    (tmp_path / "run.toml").write_text(
        '[dataset]\nid = "numbers"\nrevision = "1"\nlabels = "y.csv"\n'
        'labels_column = ["even", "big", "prime", "small"]\ntarget_type = "multi_label"\n'
        '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n[separatix]\nenabled = false\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert set(data["extractor_results"][0]["overlap"]["labels"].values()) == {"even", "big", "prime", "small"}


def test_several_columns_without_labels_column_say_a_list_is_accepted(tmp_path, capsys):
    pd.DataFrame({"a": [0, 1] * 5, "b": [1, 0] * 5}).to_csv(tmp_path / "y.csv", index=False)
    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    (tmp_path / "run.toml").write_text('[dataset]\nid = "d"\nrevision = "1"\nlabels = "y.csv"\n'
                                       '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert 'labels_column = "...", or a list of them (0/1 multi-label indicators' in _one_line_error(capsys, "run")


# ------------------------------------------------------------------ 7. messages in the CLI's words
def test_cache_commands_speak_in_flags_and_refuse_a_missing_store(tmp_path, capsys):
    # Without --older-than / --max-bytes, prune reclaims only the leftovers of interrupted writes (issue 28, item 11),
    # and says so in the CLI's words.
    assert main(["cache", "prune", "--store", str(tmp_path)]) == 0
    assert "0 leftover file(s) of interrupted writes" in capsys.readouterr().out
    for action in ("list", "verify"):
        assert main(["cache", action, "--store", str(tmp_path / "typo_dir")]) == 2
        assert "typo_dir' does not exist" in _one_line_error(capsys, "cache")
    assert not (tmp_path / "typo_dir").exists()
    assert main(["cache", "list", "--store", str(tmp_path)]) == 0  # an existing, empty store
    assert "0 artifact(s)" in capsys.readouterr().out


def test_row_count_error_names_the_labels_file(project, capsys):
    folder, _ = project
    np.save(folder / "labels.npy", np.load(folder / "labels.npy")[:-2])
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 2
    assert ("the labels file 'labels.npy' has 58 rows but extractors[0] 'full.npy' has 60"
            in _one_line_error(capsys, "run"))


def test_a_labels_file_holding_a_column_of_class_names_says_to_flatten_it(project, capsys):
    """An (n, 1) array of class names was read as a multi-label indicator and failed inside scipy.sparse."""
    folder, _ = project
    np.save(folder / "labels.npy", np.load(folder / "labels.npy").astype(str).reshape(-1, 1))
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 2
    error = _one_line_error(capsys, "run")
    assert "the labels file 'labels.npy' is a 2-D array of string values such as " in error
    assert error.endswith("it has a single column: for one class label per row pass it 1-D (y.ravel())")
    assert not (folder / "out" / "report.json").exists()


def test_missing_labels_say_their_rows_are_0_based(tmp_path, capsys):
    pd.DataFrame({"label": ["a", "b", ""] * 4}).to_csv(tmp_path / "y.csv", index=False)
    np.save(tmp_path / "x.npy", np.zeros((12, 2)))
    (tmp_path / "run.toml").write_text('[dataset]\nid = "d"\nrevision = "1"\nlabels = "y.csv"\n'
                                       '[[extractors]]\nname = "raw"\nembeddings = "x.npy"\n')
    assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert "at rows 2, 5, 8, 11 (0-based; 4 row(s); line(s) 4, 7, 10, 13 in an editor)" in _one_line_error(capsys, "run")


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_texts_say_what_each_command_writes(capsys):
    for command in ("demo", "run"):
        assert "report.json, report.md and report.html" in _help([command], capsys)
    assert "--format {markdown,html,json}, -f {markdown,html,json} markdown (default)" in _help(["compare"], capsys)
    embed = _help(["embed"], capsys)
    assert "a failing job is recorded in the store" in embed and "report" not in embed.lower()


def test_model_not_found_hint_names_the_hf_command(tmp_path):
    pytest.importorskip("huggingface_hub")
    from vertebrae import InputValidationError
    from vertebrae.extractors.huggingface import local_model_dir

    with pytest.raises(InputValidationError, match=r"hf download no-such-org/no-such-model") as info:
        local_model_dir("no-such-org/no-such-model", where="test")
    assert "huggingface-cli" not in str(info.value)


# ------------------------------------------------------------------ 8. compare across unrelated runs
def test_compare_refuses_runs_of_different_datasets_or_target_types(project, tmp_path, capsys):
    folder, _ = project
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "a"), "-q"]) == 0
    targets = np.load(folder / "full.npy")[:, 0] * 3 + 1
    np.save(folder / "targets.npy", targets)
    for replacement, field in [('id = "other"', "dataset id 'blobs' vs 'other'"),
                               ('id = "blobs"\ntarget_type = "regression"\nlabels = "targets.npy"',
                                "target type 'single_label' vs 'regression'")]:
        config = CONFIG.replace('id = "blobs"', replacement)
        if "labels = \"targets.npy\"" in replacement:
            config = config.replace('labels = "labels.npy"\n', "", 1)
        (folder / "b.toml").write_text(config)
        assert main(["run", str(folder / "b.toml"), "-o", str(folder / "b"), "-q"]) == 0
        argv = ["compare", str(folder / "a" / "report.json"), str(folder / "b" / "report.json")]
        assert main(argv) == 2  # not 1 ("regressed") nor 0
        err = _one_line_error(capsys, "compare")
        assert f"do not measure the same thing: {field}" in err and "{" not in err


def test_the_same_metric_given_to_plan_and_score_is_one_metric(project, monkeypatch):
    folder, module = project
    monkeypatch.chdir(folder)
    spec = f"{module}:spread"
    assert main(["plan", "run.toml", "--store", "store", "--metric", spec, "--metric", spec, "-q"]) == 0
    assert main(["embed", "plan.json", "-q"]) == 0
    assert main(["score", "plan.json", "--metric", spec, "-q"]) == 0
    assert main(["collect", "plan.json", "-q"]) == 0
    result = json.loads((folder / "result.json").read_text())
    full = np.load(folder / "full.npy")
    assert result["extractor_results"][0]["metrics"]["spread"]["score"] == pytest.approx(
        np.linalg.norm(full, axis=1).mean())


# ------------------------------------------------------------------ 9. install hints
def test_install_hints_name_packages_never_the_registrys_vertebrae(capsys):
    from vertebrae._base.extras import EXTRAS, install_hint

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {name: tuple(packages) for name, packages in declared.items() if name != "test"} == EXTRAS
    assert install_hint("plots") == 'pip install "matplotlib>=3.7,<4" (in a vertebrae checkout: pip install ".[plots]")'
    texts = [path.read_text() for folder in ("src", "docs") for path in (ROOT / folder).rglob("*.[pm][yd]")]
    texts += [(ROOT / "README.md").read_text(), _help(["demo"], capsys), _help(["run"], capsys)]
    assert not [m for text in texts for m in re.findall(r"vertebrae\[\w+\]", text)]


# ------------------------------------------------------------------ issue 37, items 21 and 24
@pytest.mark.parametrize("command, text, needle", [
    ("report", "# Benchmark report\n", " is not valid JSON ("),
    ("embed", "# Benchmark report\n", " is not valid JSON ("),
    ("report", '{"result_type": "benchmark", "schema_version": 1}', ": $: "),  # the place inside the file stays
])
def test_a_file_that_cannot_be_read_is_one_line_naming_it_once(tmp_path, capsys, command, text, needle):
    """`vertebrae report out/report.md` named the path twice with a stray `$:`; a plan file did the same."""
    path = tmp_path / "out" / "report.md"
    path.parent.mkdir()
    path.write_text(text)
    assert main([command, str(path)]) == 2
    err = _one_line_error(capsys, command)
    assert err.count(str(path)) == 1 and f"{path}{needle}" in err, err


def test_ctrl_c_inside_a_run_names_the_subcommand(project, capsys):
    """Issue 37 item 24: the interrupt line was `vertebrae: interrupted`."""
    folder, module = project
    pd.DataFrame({"text": [f"text {i}" for i in range(12)], "label": [0, 1] * 6}).to_csv(folder / "texts.csv",
                                                                                          index=False)
    (folder / "texts.toml").write_text(f"""
[dataset]
id = "texts"
revision = "1"
texts = "texts.csv"
input_column = "text"
labels_column = "label"

[[extractors]]
name = "stops"
kind = "callable"
model = "{module}:interrupt"
""")
    assert main(["run", str(folder / "texts.toml"), "-o", str(folder / "out"), "-q"]) == 130
    assert capsys.readouterr().err == "vertebrae run: interrupted\n"


def test_a_folder_given_for_a_file_and_a_missing_section_say_so(project, capsys):
    """A folder where a file belongs was reported as missing, and an empty config as "got NoneType"."""
    folder, _ = project
    (folder / "adir.toml").mkdir()
    assert main(["run", str(folder / "adir.toml")]) == 2
    assert "config file" in (err := _one_line_error(capsys, "run")) and "is a folder, not a file" in err
    assert main(["report", str(folder / "adir.toml")]) == 2
    assert "is a folder, not a file" in _one_line_error(capsys, "report")
    (folder / "afile").write_text("")
    assert main(["cache", "list", "--store", str(folder / "afile")]) == 2
    assert "is a file, not a folder" in _one_line_error(capsys, "cache")
    for name, text in (("empty.toml", ""), ("nodata.yaml", "extractors: []\n")):
        (folder / name).write_text(text)
        assert main(["run", str(folder / name), "-q"]) == 2
        assert "config section [dataset] is missing or empty" in _one_line_error(capsys, "run")


def test_a_sections_own_validation_names_the_section(project, capsys):
    """The classes' messages name their fields (StabilityConfig.repeats); the CLI adds the section they came from."""
    folder, _ = project
    base = (folder / "run.toml").read_text()
    for extra, says in (("\n[stability]\nrepeats = -1\n", "config [stability]: StabilityConfig.repeats must be >= 2"),
                        ('\n[benchmark]\nreferee = "probe"\nreferee_finalists = "auto"\nreferee_share = 3\n',
                         "config [benchmark]: Benchmark.referee_share must be in (0.0, 1.0]"),
                        ('\n[benchmark]\nreferee = "probe"\nreferee_share = 0.5\n',
                         "config [benchmark]: Benchmark.referee_share=0.5 is the budget of the 'auto' finalist "
                         "policy, but referee_finalists is 'overlap': pass referee_finalists='auto' (--finalists "
                         "auto)")):
        (folder / "bad.toml").write_text(base + extra)
        assert main(["run", str(folder / "bad.toml"), "-o", str(folder / "out"), "-q"]) == 2
        assert says in _one_line_error(capsys, "run")


def test_the_finalist_policy_is_benchmarks_own_check_before_any_file(project, capsys):
    """Before: the CLI restated Benchmark's finalist rules; it left the share's range to Benchmark (after the data
    files were read) and refused an explicit 'overlap' without a referee that Benchmark accepts."""
    folder, _ = project
    entry = '[[extractors]]\nname = "a"\nembeddings = "missing.npy"\n'
    (folder / "bad.toml").write_text(f'[dataset]\nid = "t"\nrevision = "1"\nlabels = "missing.txt"\n\n{entry}'
                                     '\n[benchmark]\nreferee = "probe"\nreferee_finalists = "auto"\n'
                                     'referee_share = 3\n')
    assert main(["run", str(folder / "bad.toml"), "-o", str(folder / "out"), "-q"]) == 2
    assert "config [benchmark]: Benchmark.referee_share must be in (0.0, 1.0]" in _one_line_error(capsys, "run")
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q", "--finalists", "overlap"]) == 0


def test_row_level_errors_name_the_file_they_come_from(project, capsys):
    """A NaN row or a short groups file is the file's mistake: the message names the entry and the file."""
    folder, _ = project
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(30, 3))
    matrix[4] = np.nan
    np.save(folder / "nan.npy", matrix)
    (folder / "y.txt").write_text("".join(f"{i % 3}\n" for i in range(30)))
    (folder / "g.txt").write_text("g1\ng2\n")
    entry = '[[extractors]]\nname = "a"\nembeddings = "nan.npy"\n'
    (folder / "nan.toml").write_text(f'[dataset]\nid = "t"\nrevision = "1"\nlabels = "y.txt"\n\n{entry}')
    assert main(["run", str(folder / "nan.toml"), "-o", str(folder / "out"), "-q"]) == 2
    err = _one_line_error(capsys, "run")
    assert f"config extractors[0] ('a', kind 'precomputed') (embeddings = '{folder / 'nan.npy'}')" in err
    assert "has NaN or infinite values in rows 4" in err
    np.save(folder / "ok.npy", rng.normal(size=(30, 3)))
    (folder / "groups.toml").write_text(f'[dataset]\nid = "t"\nrevision = "1"\nlabels = "y.txt"\ngroups = "g.txt"\n\n'
                                        f'{entry.replace("nan.npy", "ok.npy")}')
    assert main(["run", str(folder / "groups.toml"), "-o", str(folder / "out"), "-q"]) == 2
    assert "config [dataset] groups = 'g.txt': groups has 2 entries but the dataset has 30 rows" in _one_line_error(
        capsys, "run")


@pytest.mark.parametrize("quiet", [False, True])
def test_a_warning_about_the_configuration_joins_the_digest(project, capsys, quiet):
    """Screening's small-rung warning is raised while the benchmark is built, before the digest collected warnings:
    it was printed with a source line even under --quiet."""
    folder, _ = project
    (folder / "screen.toml").write_text((folder / "run.toml").read_text() + "\n[screening]\nstart_rows = 30\neta = 2\n")
    assert main(["run", str(folder / "screen.toml"), "-o", str(folder / "out"), *(["-q"] if quiet else [])]) == 0
    err = capsys.readouterr().err
    assert "run_config.py" not in err and "return Benchmark" not in err
    digest = [line for line in err.splitlines() if "first rung holds 30 of 60 rows" in line]
    assert len(digest) == (0 if quiet else 1)
    assert all(line.startswith("vertebrae run: DataWarning: screening's first rung") for line in digest)

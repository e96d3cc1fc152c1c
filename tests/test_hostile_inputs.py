"""Extreme and hostile input (issue 28, items 7 and 8): plan files and run configs are refused field by field,
before any work, with exit 2 and one line; YAML alias bombs, huge repeat counts and files that are not what their
suffix says fail fast; names that matplotlib or Markdown would read as markup are shown literally.

The fuzzers are seeded loops with bounded example counts (hypothesis is not a dependency of this project).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pathlib
import re
import time
import tracemalloc
import warnings

import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, OverlapScoringConfig, SeparatixConfig,
                           StabilityConfig)
from vertebrae.artifacts.cache import CacheConfig
from vertebrae.cli.main import main
from vertebrae.extractors.compression import EmbeddingCompressionConfig
from vertebrae.errors import ConfigError, InputValidationError, VertebraeError
from vertebrae.extractors import PrecomputedExtractor
from vertebrae._base.fingerprint import content_sha256
from vertebrae.inputs.io import MAX_CONFIG_BYTES, load_column, load_config_file, load_matrix
from vertebrae.reports import figures
from vertebrae.cli.run_config import DATASET_FIELDS, benchmark_from_config
from vertebrae.scoring.overlap import ContinuousOverlapScoringConfig
from vertebrae.cli.staged_workflow import PlanFile

#: Names matplotlib reads as mathtext (the first two do not even parse) or Markdown as a link or an image.
HOSTILE_NAMES = ["$\\frac{$", "tier_$x^2^3$", "cost $5 and $6", "[link](http://evil.example)",
                 "![img](http://evil.example/x.png)"]

CONFIG = """
dataset:
  id: hostile
  revision: "1"
  labels: labels.npy
extractors:
  - {name: a, embeddings: a.npy}
  - {name: b, embeddings: b.npy}
scoring: {k: 3}
separatix: {enabled: false}
"""


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(5)
    labels = np.repeat(np.arange(3), 15)
    X = rng.normal(size=(labels.size, 4)) + labels[:, None]
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "a.npy", X.astype(np.float32))
    np.save(tmp_path / "b.npy", X[:, :2].astype(np.float32))
    (tmp_path / "run.yaml").write_text(CONFIG)
    return tmp_path


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vertebrae {command}: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def refused(project: pathlib.Path, capsys, text: str, *, command: str = "run") -> str:
    """``vertebrae run`` of a config with this text: exit 2, one line, no report written."""
    path = project / "bad.yaml"
    path.write_text(text)
    assert main([command, str(path), "-o", str(project / "out"), "-q"]) == 2
    assert not (project / "out" / "report.json").exists()
    return one_line_error(capsys, command)


# ------------------------------------------------------------------ item 7: run configs
@pytest.mark.parametrize("change, key", [
    ("labels: labels.npy", "labels: 5"), ("id: hostile", "id: [1, 2]"), ("revision: \"1\"", "revision: 1.10"),
    ("{name: a, embeddings: a.npy}", "{name: [a], embeddings: a.npy}"),
    ("{name: a, embeddings: a.npy}", "{name: a, embeddings: 7}"),
])
def test_wrong_field_types_are_one_line_naming_the_key(project, capsys, change, key):
    err = refused(project, capsys, CONFIG.replace(change, key))
    field = re.search(r"(\w+): (?:5|\[1, 2\]|1\.10|\[a\]|7)", key).group(1)
    assert f" {field} must be " in err, err
    if "id:" in key:
        assert "[1, 2]" in err  # not silently the string "[1, 2]"


def test_yaml_alias_bomb_is_refused_fast_and_small(project, capsys):
    """A 1 KB 'billion laughs' under [cache] storage_options: 9**9 values once expanded (it ran 86 s to 5.8 GB)."""
    levels = ["      l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = CONFIG + "cache:\n  store: cache\n  storage_options:\n    nested:\n" + "\n".join(levels) + "\n"
    (project / "bomb.yaml").write_text(bomb)
    assert len(bomb) < 2000
    with pytest.raises(InputValidationError, match="more than 100000 values"):
        load_config_file(project / "bomb.yaml")
    tracemalloc.start()
    started = time.perf_counter()
    try:
        assert main(["run", str(project / "bomb.yaml"), "-o", str(project / "out"), "-q"]) == 2
        seconds, (_, peak) = time.perf_counter() - started, tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seconds < 5 and peak < 50 * 2**20, (seconds, peak)
    assert "aliases" in one_line_error(capsys, "run")


def test_recursive_aliases_deep_nesting_and_huge_configs_are_refused(project, capsys):
    assert "refers to itself" in refused(project, capsys, CONFIG + "benchmark: &b {stage_modules: [*b]}\n")
    assert "nested too deeply" in refused(project, capsys, CONFIG + "metrics: " + "[" * 5000 + "]" * 5000 + "\n")
    (project / "deep.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InputValidationError, match="nested too deeply"):
        load_config_file(project / "deep.toml")
    big = CONFIG + "# " + "x" * MAX_CONFIG_BYTES + "\n"
    assert f"more than the {MAX_CONFIG_BYTES}" in refused(project, capsys, big)
    anchors = CONFIG.replace("scoring: {k: 3}", "scoring: &s {k: 3}\ncontinuous: {}\n")  # an ordinary alias is fine
    (project / "anchors.yaml").write_text(anchors + "x_shared: *s\n")
    assert load_config_file(project / "anchors.yaml")["x_shared"] == {"k": 3}


def test_a_billion_stability_repeats_is_refused_before_any_work(project, capsys):
    with pytest.raises(ConfigError, match="repeats must be <= 10000"):
        StabilityConfig(repeats=10**9)
    assert StabilityConfig(repeats=10_000).repeats == 10_000
    started = time.perf_counter()
    err = refused(project, capsys, CONFIG + "stability: {repeats: 1000000000}\n")
    assert "StabilityConfig.repeats must be <= 10000" in err and time.perf_counter() - started < 5


@pytest.mark.parametrize("suffix, content", [(".npy", b"just text\n"), (".npz", b"just text\n"),
                                             (".npy", None), (".npz", "npy")])
def test_a_file_that_is_not_what_its_suffix_says_is_named(project, capsys, suffix, content):
    path = project / f"fake{suffix}"
    if content is None:  # an object array: numpy would need pickle to read it
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif content == "npy":  # a .npy saved under a .npz name
        path.write_bytes((project / "a.npy").read_bytes())
    else:
        path.write_bytes(content)
    err = refused(project, capsys, CONFIG.replace("a.npy", path.name))
    assert str(path) in err and "pickled (object) data" not in err and "the embeddings file" in err
    if suffix == ".npy":
        with pytest.raises(InputValidationError, match="the labels file"):
            load_column(path, None, "labels")


HOSTILE_VALUES = [5, -1, 0, 10**12, 1e300, float("nan"), True, None, "", "x", "auto", [], [1, 2], ["x"], {"a": 1},
                  {}, 1.5, "../../../etc/passwd", "$\\frac{$"]
#: Every key of every table a run config may hold (the config classes' fields and the plain tables' keys).
SECTION_KEYS = {
    "dataset": sorted(DATASET_FIELDS), "extractors": ["name", "embeddings"],
    "scoring": [f.name for f in dataclasses.fields(OverlapScoringConfig)],
    "continuous": [f.name for f in dataclasses.fields(ContinuousOverlapScoringConfig)],
    "stability": [f.name for f in dataclasses.fields(StabilityConfig)],
    "separatix": [f.name for f in dataclasses.fields(SeparatixConfig)],
    "cache": [f.name for f in dataclasses.fields(CacheConfig)],
    "compression": [f.name for f in dataclasses.fields(EmbeddingCompressionConfig)],
    "benchmark": ["primary_metric", "quality_tolerance", "on_error"],
    "metrics": ["path", "name", "higher_is_better", "aggregate_valid", "params"],
}


def test_config_fuzz_every_field_is_validated_or_accepted_never_a_raw_error(project):
    """Seeded: one hostile value in one field (or a whole section) per example; building the benchmark (validation
    and file loading, no scoring) either works or raises a vertebrae error, within a second or two."""
    import yaml

    base = yaml.safe_load(CONFIG)
    rng = np.random.default_rng(28)
    pairs = [(section, key) for section, keys in SECTION_KEYS.items() for key in keys]
    examples = [(pairs[i % len(pairs)], HOSTILE_VALUES[int(rng.integers(len(HOSTILE_VALUES)))])
                for i in range(2 * len(pairs))]
    examples += [((section, None), value) for section in SECTION_KEYS for value in (5, "x", [1], None)]
    for (section, key), value in examples:
        config = copy.deepcopy(base)
        if key is None:
            config[section] = value
        elif section == "extractors":
            config["extractors"][0][key] = value
        elif section in ("compression", "metrics"):
            config[section] = [{"method": "pca", "n_components": 2} if section == "compression"
                               else {"path": "numpy:mean"}]
            config[section][0][key] = value
        else:
            config.setdefault(section, {})[key] = value
        if section == "cache" and key is not None:
            config["cache"].setdefault("store", str(project / "cache"))
        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                benchmark_from_config(config, project, progress=False)
        except VertebraeError as exc:
            assert "\n" not in str(exc), (section, key, value, exc)
        except Exception as exc:  # a raw error is the bug this fuzz is for
            pytest.fail(f"{section}.{key} = {value!r}: raw {type(exc).__name__}: {exc}")
        assert time.perf_counter() - started < 5, (section, key, value)


# ------------------------------------------------------------------ item 7: plan files
def _write(path: pathlib.Path, data: dict, *, recompute_id: bool = True) -> pathlib.Path:
    """A plan file as someone edited it, with its plan_id recomputed so only the new checks can refuse it."""
    if recompute_id:
        try:
            data["plan_id"] = content_sha256({"config": data["config"], "base_dir": data["base_dir"],
                                              "jobs": [j["key"] for j in data["jobs"]]})
        except (KeyError, TypeError, AttributeError):
            pass  # a plan too broken to hash keeps its old id; the field checks come first anyway
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def plan(project, capsys) -> dict:
    assert main(["plan", str(project / "run.yaml"), "--store", str(project / "store"), "-o",
                 str(project / "plan.json"), "-q"]) == 0
    capsys.readouterr()
    return json.loads((project / "plan.json").read_text())


EDITS = {
    "jobs is a string": (lambda d: d.update(jobs="x"), "'jobs' must be a list"),
    "base_dir is a number": (lambda d: d.update(base_dir=5), "'base_dir' must be a folder path"),
    "a job without phase": (lambda d: d["jobs"][0].pop("phase"), "jobs[0].phase must be"),
    "config is a list": (lambda d: d.update(config=[1]), "'config' must be a table"),
    "no cache": (lambda d: d["config"].pop("cache"), "config.cache must be"),
    "no jobs": (lambda d: d.update(jobs=[]), "does not list 8 job(s)"),
    "dropped jobs": (lambda d: d.update(jobs=d["jobs"][:3]), "does not list 5 job(s)"),
    "an extra job": (lambda d: d["jobs"].append({**d["jobs"][0], "extractor": "c"}), "job key(s) differ"),
    "a job twice": (lambda d: d["jobs"].append(dict(d["jobs"][0])), "each stage of each extractor once"),
    "input_files is a string": (lambda d: d.update(input_files="x"), "'input_files' must be"),
    "a bad input file": (lambda d: d["input_files"][1].pop("sha256"), "input_files[1] must be"),
    "no plan_id": (lambda d: d.pop("plan_id"), "lacks the field 'plan_id'"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_edited_plan_files_are_refused_with_one_line(project, plan, capsys, edit):
    change, message = EDITS[edit]
    data = copy.deepcopy(plan)
    change(data)
    path = _write(project / "edited.json", data, recompute_id=edit != "no plan_id")
    assert main(["embed", str(path), "-q"]) == 2
    assert message in one_line_error(capsys, "embed")
    assert not (project / "store").exists() or not any((project / "store").rglob("manifest.json"))


def test_plan_fuzz_is_refused_or_runs_never_a_raw_error(project, plan, capsys):
    """Seeded single-field mutations of a plan file (plan_id recomputed): PlanFile.load and the phase's checks refuse
    them with a vertebrae error (exit 2, one line) or the plan still means the same run (exit 0)."""
    rng = np.random.default_rng(7)
    paths = [("config",), ("base_dir",), ("input_files",), ("jobs",), ("vertebrae_version",), ("config", "cache"),
             ("config", "cache", "store"), ("config", "dataset"), ("config", "dataset", "labels"),
             ("config", "extractors"), ("jobs", 0), ("jobs", 0, "key"), ("jobs", 0, "stage"), ("jobs", 1, "phase"),
             ("input_files", 0), ("input_files", 1, "path"), ("input_files", 1, "sha256")]
    for example in range(40):
        data = copy.deepcopy(plan)
        where = paths[example % len(paths)]
        parent = data
        for part in where[:-1]:
            parent = parent[part]
        value = HOSTILE_VALUES[int(rng.integers(len(HOSTILE_VALUES)))]
        if isinstance(value, float) and math.isnan(value):  # NaN cannot go into strict JSON
            value = "nan"
        parent[where[-1]] = value
        path = _write(project / f"fuzz{example}.json", data)
        code = main(["embed", str(path), "-q"])
        err = capsys.readouterr().err.strip()
        assert code in (0, 2), (where, value, code, err)
        if code == 2:
            assert "\n" not in err and err.startswith("vertebrae embed: error: "), (where, value, err)


def test_a_plan_file_that_is_not_json_or_too_deep_is_a_serialization_error(project):
    (project / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(VertebraeError, match="not a JSON plan file"):
        PlanFile.load(project / "deep.json")


def test_a_folder_or_a_run_config_given_as_the_plan_says_so(project):
    """A folder was "does not exist"; a run config was only "not valid JSON"."""
    (project / "plans").mkdir()
    with pytest.raises(VertebraeError, match="plan file '.*plans' is a folder, not a file; write one with"):
        PlanFile.load(project / "plans")
    (project / "run.toml").write_text('[dataset]\nid = "x"\n')
    with pytest.raises(VertebraeError, match="not valid JSON .*; a run config goes to `vertebrae plan CONFIG --store"):
        PlanFile.load(project / "run.toml")


# ------------------------------------------------------------------ item 8: names shown literally
def _hostile_result():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.array(HOSTILE_NAMES[:3]), 20)
    X = rng.normal(size=(60, 4)) + np.repeat(np.arange(3), 20)[:, None]
    dataset = BenchmarkDataset.from_embeddings(X, labels, identity=DatasetIdentity.declared("hostile", "1"))
    extractors = [PrecomputedExtractor(name, X + i * rng.normal(size=X.shape)) for i, name in enumerate(HOSTILE_NAMES)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Benchmark(dataset, extractors, scoring_config=OverlapScoringConfig(k=3),
                         separatix_config=SeparatixConfig(enabled=False), progress=False).run()


def _svg_texts(svg: str) -> list[str]:
    """The text elements of an SVG written with svg.fonttype none (text kept as text), XML entities decoded."""
    import html

    return [html.unescape(t) for t in re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)]


def test_figures_show_names_and_labels_literally():
    pytest.importorskip("matplotlib")
    data = _hostile_result().serialized()
    ranking = _svg_texts(figures.svg_or_none(figures.ranking_figure(data)))
    assert all(name in ranking for name in HOSTILE_NAMES), ranking  # each name is one text element, as written
    per_class = _svg_texts(figures.svg_or_none(figures.per_class_figure(data)))
    assert all(label in per_class for label in HOSTILE_NAMES[:3]), per_class
    heatmap = _svg_texts(figures.svg_or_none(figures.pairwise_figure(data)))
    assert all(label in heatmap for label in HOSTILE_NAMES[:3]), heatmap


def _rendered_markdown(markdown: str) -> str:
    """The HTML a CommonMark renderer (with GFM tables and strikethrough) makes of a Markdown report."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def test_markdown_shows_names_literally_never_as_links_images_or_emphasis():
    result = _hostile_result()
    page = _rendered_markdown(result.to_markdown())
    assert "<a " not in page and "<img" not in page and "<em>" not in page and "<s>" not in page
    for name in ("cost $5 and $6", "[link](http://evil.example)", "![img](http://evil.example/x.png)"):
        assert name in page, name
    from vertebrae.reports.markdown_table import cell, line_start

    cases = {"_private_": "_private_", "a*b*c": "a*b*c", "~~gone~~": "~~gone~~", "[x]: http://evil.example": None,
             "# heading": "# heading", "- item": "- item", "1. one": "1. one", "raw_pixels": "raw_pixels"}
    for raw, shown in cases.items():
        html = _rendered_markdown(f"{line_start(cell(raw))}\n\n[x]\n")
        assert "<a " not in html and "<em>" not in html and "<h1>" not in html and "<li>" not in html, (raw, html)
        assert shown is None or f"<p>{shown}</p>" in html, (raw, html)
    assert cell("raw_pixels") == "raw_pixels" and cell("[0.19, 0.25]") == "[0.19, 0.25]"  # as written


def test_cli_run_with_hostile_names_writes_every_report(tmp_path, capsys):
    """`vertebrae run` wrote JSON and Markdown and then exited 1 with matplotlib's ParseSyntaxException, no HTML."""
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(3), 15)
    (tmp_path / "labels.txt").write_text("\n".join(HOSTILE_NAMES[i] for i in labels) + "\n")
    extractors = []
    for i, name in enumerate(HOSTILE_NAMES):
        np.save(tmp_path / f"e{i}.npy", rng.normal(size=(labels.size, 4)) + labels[:, None])
        extractors.append({"name": name, "embeddings": f"e{i}.npy"})
    config = {"dataset": {"id": "hostile", "revision": "1", "labels": "labels.txt"}, "extractors": extractors,
              "scoring": {"k": 3}, "separatix": {"enabled": False}}
    (tmp_path / "run.yaml").write_text(json.dumps(config))  # JSON is YAML; the names need no quoting rules
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", str(tmp_path / "run.yaml"), "-o", str(tmp_path / "out"), "-q"]) == 0
    page = (tmp_path / "out" / "report.html").read_text()
    texts = _svg_texts(page)
    assert all(name in texts for name in HOSTILE_NAMES)
    rendered = _rendered_markdown((tmp_path / "out" / "report.md").read_text())
    assert "<a " not in rendered and "<img" not in rendered and "cost $5 and $6" in rendered


def test_load_matrix_names_a_truncated_npy(tmp_path):
    np.save(tmp_path / "full.npy", np.ones((50, 4)))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "full.npy").read_bytes()[:200])
    with pytest.raises(InputValidationError, match="cut.npy: the embeddings file cannot be read as a .npy file"):
        load_matrix(tmp_path / "cut.npy")

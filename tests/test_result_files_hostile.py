"""Hostile result files (issue 28, items 5 and 6): bounded reads, and whatever loads renders.

Item 5: a result file is untrusted input. Deep nesting, an integer beyond Python's digit limit and an
``__ndarray__`` whose dtype, shape and data disagree (or would allocate gigabytes) are a
SerializationError naming the path, and ``vertebrae report`` exits 2 with one line.

Item 6: loading validates every field a renderer reads. A seeded mutation fuzz changes one field of a
valid benchmark, retrieval and zero-shot result at a time (delete it, null, a wrong type, a huge number,
the string "NaN", an empty list or object): either loading refuses it with a SerializationError, or the
Markdown, the HTML, the DataFrames and ``compare`` all work.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, OverlapScoringConfig, RetrievalBenchmark,
                           RetrievalConfig, RetrievalDataset, StabilityConfig)
from vertebrae._base import json_codec
from vertebrae.cli.main import main
from vertebrae.reports.compare import compare_results
from vertebrae.errors import InputValidationError, SerializationError
from vertebrae.extractors import PrecomputedExtractor, SklearnExtractor
from vertebrae.reports import figures
from vertebrae.reports.compare_report import render_comparison_html, render_comparison_markdown
from vertebrae.families.result_protocol import result_from_dict

from .conftest import gaussian_classes
from .test_zero_shot_benchmark import Shuffled, WordCounter, run as run_zero_shot, text_dataset

IDENTITY = DatasetIdentity.declared("hostile", "1")


# ----------------------------------------------------------------------------- valid documents
@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    """A demo-like benchmark result (stability and the default Separatix gate), a retrieval and a zero-shot
    result, each as the JSON document ``save_json`` writes."""
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, seed=4)
    dataset = BenchmarkDataset.from_embeddings(X, np.array(["cat", "dog", "eel"])[y], identity=IDENTITY,
                                               name="hostile")
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        benchmark = Benchmark(dataset, [PrecomputedExtractor("clean", X),
                                        SklearnExtractor("pca_2", PCA(n_components=2, random_state=0)),
                                        PrecomputedExtractor("noisy", X + rng.normal(0, 4, X.shape))],
                              scoring_config=OverlapScoringConfig(k=3), stability_config=StabilityConfig(repeats=3),
                              progress=False).run()
        queries, gallery = rng.normal(size=(10, 4)), rng.normal(size=(30, 4))
        gallery[:10] = queries + 0.4 * rng.normal(size=(10, 4))
        retrieval_data = RetrievalDataset.from_embeddings(queries, gallery, relevance=[(i, i, 1) for i in range(10)],
                                                          identity=IDENTITY)
        retrieval = RetrievalBenchmark(retrieval_data, [PrecomputedExtractor("own")],
                                       retrieval_config=RetrievalConfig(cutoffs=[1, 3], bidirectional=True),
                                       progress=False).run()
        zero_shot = run_zero_shot(text_dataset(), {"counts": WordCounter(), "bad": Shuffled()})
    documents = {name: json.loads(result.to_json())
                 for name, result in (("benchmark", benchmark), ("retrieval", retrieval), ("zero_shot", zero_shot))}
    _without_separatix_reports(documents["benchmark"])
    return documents


def _without_separatix_reports(data: dict) -> None:
    """Drop Separatix's complete terse report (no renderer reads it; it is most of the document), so each
    mutation renders in milliseconds; the fields the reports read stay."""
    for result in data["extractor_results"]:
        if result.get("separatix"):
            result["separatix"]["report"] = None
    timings = data["timing"]["separatix"]
    for name in timings:
        timings[name] = [t for t in timings[name] if t[0][0] != "report"]


# ----------------------------------------------------------------------------- item 5: bounded reads
def _report(path: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "vertebrae.cli.main", "report", str(path)], capture_output=True,
                          text=True, env=env, timeout=120)


def _one_line_exit_2(path: pathlib.Path, *needles: str) -> None:
    done = _report(path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_huge_string_dtype_is_refused_before_allocating(documents, tmp_path):
    """The issue's file: 'U100000000' made `vertebrae report` use 3.1 GB and exit 0."""
    data = copy.deepcopy(documents["benchmark"])
    data["metadata"]["evil"] = {"__ndarray__": {"dtype": "U100000000", "shape": [8], "data": ["a"] * 8}}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    _one_line_exit_2(path, "$.metadata.evil.__ndarray__", "bytes")


def test_deep_nesting_and_a_5000_digit_integer_exit_2_with_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _one_line_exit_2(deep, "nests too deeply")
    big = tmp_path / "big.json"
    big.write_text('{"result_type": "benchmark", "schema_version": ' + "7" * 5000 + "}")
    _one_line_exit_2(big, "more than", "digits")
    overflowing = tmp_path / "inf.json"  # 1e999 parses to infinity: NaN's back door past the strict parser
    overflowing.write_text('{"result_type": "benchmark", "schema_version": 1e999}')
    _one_line_exit_2(overflowing, "the number 1e999 overflows to infinity")


@pytest.mark.parametrize("payload, needle", [
    ({"dtype": "U100000000", "shape": [8], "data": ["a"] * 8}, "bytes"),
    ({"dtype": "float64", "shape": [100_000, 100_000], "data": []}, "bytes"),
    ({"dtype": "float64", "shape": [3], "data": [1.0, 2.0]}, "needs 3 items"),
    ({"dtype": "float64", "shape": [2, 2], "data": [[1.0, 2.0], [3.0]]}, "needs 2 items"),
    ({"dtype": "float64", "shape": [2], "data": [[1.0], [2.0]]}, "not a scalar"),
    ({"dtype": "object", "shape": [1], "data": [1]}, "dtype"),
    ({"dtype": "V8", "shape": [1], "data": [1]}, "dtype"),
    ({"dtype": "no such dtype", "shape": [1], "data": [1]}, "dtype"),
    ({"dtype": "float64", "shape": [-1], "data": [1.0]}, "shape"),
    ({"dtype": "float64", "shape": "3", "data": [1.0]}, "shape"),
    ({"dtype": "int8", "shape": [1], "data": [1000]}, "malformed array"),
    ({"dtype": "float64", "shape": [1], "data": ["x"]}, "malformed array"),
    ({"dtype": "float64", "shape": [1]}, "exactly the fields"),
    ("not an object", "exactly the fields"),
])
def test_a_bad_ndarray_is_a_serialization_error_naming_its_path(payload, needle):
    with pytest.raises(SerializationError, match=r"\$\.a\[1\]\.__ndarray__") as caught:
        json_codec.decode({"a": [0, {"__ndarray__": payload}]})
    assert needle in str(caught.value)


@pytest.mark.parametrize("payload", [
    {"format": "csr", "shape": [2, 2], "dtype": "float64", "data": [1.0], "indices": [0, 1], "indptr": [0, 1, 1]},
    {"format": "csr", "shape": [2, 2], "dtype": "float64", "data": [1.0], "indices": [0], "indptr": [0, 1]},
    {"format": "csr", "shape": [2, 2], "dtype": "float64", "data": [1.0], "indices": [5], "indptr": [0, 1, 1]},
    {"format": "csc", "shape": [2, 2], "dtype": "float64", "data": [], "indices": [], "indptr": [0, 0, 0]},
    {"format": "csr", "shape": [2, 2], "dtype": "U3", "data": [], "indices": [], "indptr": [0, 0, 0]},
])
def test_a_bad_sparse_matrix_is_a_serialization_error(payload):
    with pytest.raises(SerializationError, match=r"\$\.m\.__sparse__"):
        json_codec.decode({"m": {"__sparse__": payload}})


def test_bad_mappings_sets_and_depth_are_serialization_errors():
    with pytest.raises(SerializationError, match=r"\$\.m\.__mapping__"):
        json_codec.decode({"m": {"__mapping__": [[1]]}})
    with pytest.raises(SerializationError, match=r"cannot be a key"):
        json_codec.decode({"m": {"__mapping__": [[{"a": 1}, 2]]}})
    with pytest.raises(SerializationError, match=r"\$\.s\.__set__"):
        json_codec.decode({"s": {"__set__": 5}})
    nested: list = []
    for _ in range(json_codec.MAX_DEPTH + 5):
        nested = [nested]
    with pytest.raises(SerializationError, match="nested deeper"):
        json_codec.decode(nested)
    with pytest.raises(SerializationError, match="NaN"):
        json_codec.loads('{"a": NaN}')


def test_valid_arrays_still_round_trip():
    values = {"f": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array(["a", "bcd"]),
              "padded": np.array(["a"], dtype="U10"), "b": np.array([True, False]), "empty": np.zeros((0, 4)),
              "scalar": np.array(3, dtype=np.int16)}
    decoded = json_codec.decode(json.loads(json_codec.dumps(values)))
    for name, array in values.items():
        assert decoded[name].dtype == array.dtype and decoded[name].shape == array.shape
        np.testing.assert_array_equal(decoded[name], array)


# ----------------------------------------------------------------------------- item 6: whatever loads renders
def _paths(value, path=()):
    """Every path in the document (the root excluded), parents before children."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*path, key)
        yield from _paths(child, (*path, key))


def _replacements(value):
    """The single-field mutations of the issue: delete, null, wrong type, huge number, "NaN", empty containers."""
    wrong = 5 if isinstance(value, str) else "x"
    return [("delete", None), ("set", None), ("set", wrong), ("set", 1e308), ("set", 10 ** 40), ("set", "NaN"),
            ("set", []), ("set", {})]


def mutations(document: dict):
    for path in _paths(document):
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        for action, value in _replacements(parent[path[-1]]):
            if action == "delete" and not isinstance(parent, dict):
                continue
            yield path, action, value


def mutated(document: dict, path: tuple, action: str, value) -> dict:
    data = copy.deepcopy(document)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


def renders(base: dict, data: dict) -> str | None:
    """Load ``data``; None when loading refuses it or every renderer works, else what broke.

    ``base`` is the serialized valid result that ``compare`` sets against the mutated one, both ways.
    """
    step = "load"
    try:
        try:
            result = load_result_from(data)
        except SerializationError:
            return None
        step = "to_markdown"
        result.to_markdown()
        step = "to_html"
        result.to_html()
        step = "to_dataframe"
        result.to_dataframe()
        result.to_dataframe(include_invalid=True)
        repr(result)
        serialized = result.serialized()
        for a, b in ((base, serialized), (serialized, base)):
            step = "compare"
            try:
                comparison = compare_results(a, b, names=("a.json", "b.json"))
            except InputValidationError:  # different datasets or target types: refused, exit 2
                continue
            step = "compare report"
            render_comparison_markdown(comparison)
            render_comparison_html(comparison)
    except Exception as exc:  # noqa: BLE001 - any raw error is the finding
        return f"{step}: {type(exc).__name__}: {exc}"
    return None


@pytest.fixture
def no_figures(monkeypatch):
    """Figures are matplotlib's work, tested in tests/test_reports.py; the fuzz checks the pages around them."""
    monkeypatch.setattr(figures, "available", lambda: False)


def _fuzz(document: dict, count: int, seed: int) -> list:
    """A seeded sample of ``count`` single-field mutations (every path x every replacement) that broke a renderer."""
    every = list(mutations(document))
    chosen = random.Random(seed).sample(every, min(count, len(every)))
    base = load_result_from(document).serialized()
    return [(".".join(map(str, path)), action, value, broke) for path, action, value in chosen
            if (broke := renders(base, mutated(document, path, action, value)))]


#: Mutations per family in the fast fuzz (a few seconds each; a benchmark mutation renders in about 80 ms).
SAMPLED = {"benchmark": 100, "retrieval": 200, "zero_shot": 150}


@pytest.mark.parametrize("family", ["benchmark", "retrieval", "zero_shot"])
def test_seeded_mutations_either_refuse_to_load_or_render(documents, family, no_figures):
    failures = _fuzz(documents[family], SAMPLED[family], seed=28)
    assert not failures, failures[:10]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("VERTEBRAE_LONG_FUZZ") != "1",
                    reason="about 5 minutes on 2 cores, beyond CI's budget: the suite runs the seeded sample above and "
                           "tests/test_result_fuzz.py's stratified one; VERTEBRAE_LONG_FUZZ=1 runs this one too")
@pytest.mark.parametrize("family", ["benchmark", "retrieval", "zero_shot"])
def test_many_more_mutations_either_refuse_to_load_or_render(documents, family, no_figures):
    """Every retrieval and zero-shot mutation (about 1,300 and 3,500) and 2,500 of the benchmark's 10,000
    (241, 11 and 59 s on 2 cores)."""
    failures = _fuzz(documents[family], 4000 if family != "benchmark" else 2500, seed=7)
    assert not failures, (len(failures), failures[:20])


@pytest.mark.parametrize("family", ["benchmark", "retrieval", "zero_shot"])
@pytest.mark.parametrize("path, value, where", [
    (("metadata", "run_key"), 5, "$.metadata.run_key"),
    (("metadata", "versions"), ["numpy"], "$.metadata.versions"),
    (("metadata", "versions", "numpy"), 2, "$.metadata.versions.numpy"),
    (("metadata", "plan"), {}, "$.metadata.plan"),
    (("metadata", "plan", 0, "key"), None, "$.metadata.plan[0].key"),
    (("metadata", "cache"), "here", "$.metadata.cache"),
    (("metadata", "cache"), {"store": 5, "mode": "read_write"}, "$.metadata.cache.store"),
    (("timing", "started_at"), 5, "$.timing.started_at"),
    (("timing", "host"), "x", "$.timing.host"),
    (("timing", "runs"), [{"started_at": "now"}], "$.timing.runs[0]"),
])
def test_a_malformed_run_envelope_is_refused_on_load_in_every_family(documents, family, path, value, where):
    """The envelope (issue 35, item 6) is one schema for the three families: a wrong type is refused, named."""
    with pytest.raises(SerializationError, match=re.escape(where)):
        load_result_from(mutated(documents[family], path, "set", value))


def test_null_scores_do_not_crash_compare(documents, tmp_path, capsys):
    """The issue's example: a null score made `vertebrae compare` exit 1 with `TypeError: bad operand type for
    unary -`. A null primary score (an invalid aggregate) is a regression (exit 1, a report); a null overlap score
    of a scored result cannot render and is refused on load (exit 2, one line naming the field)."""
    base = tmp_path / "a.json"
    base.write_text(json.dumps(documents["benchmark"]))
    invalid = copy.deepcopy(documents["benchmark"])
    invalid["extractor_results"][0]["primary_score"] = None
    invalid["extractor_results"][0]["metrics"]["overlap"].update(score=None, aggregate_valid=False)
    (tmp_path / "b.json").write_text(json.dumps(invalid))
    assert main(["compare", str(base), str(tmp_path / "b.json"), "--format", "json"]) == 1
    comparison = json.loads(capsys.readouterr().out)
    assert comparison["regressed"] == [invalid["extractor_results"][0]["name"]]
    for field in ("primary_score", "overlap"):
        broken = copy.deepcopy(documents["benchmark"])
        first = broken["extractor_results"][0]
        (first if field == "primary_score" else first["overlap"])["score" if field == "overlap" else field] = None
        (tmp_path / "c.json").write_text(json.dumps(broken))
        assert main(["compare", str(base), str(tmp_path / "c.json")]) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and "$.extractor_results[0]" in error, error


def test_a_file_that_loads_renders_with_figures(documents):
    """A sample of mutations that load, rendered with matplotlib's figures too."""
    for family, document in documents.items():
        every = list(mutations(document))
        for path, action, value in random.Random(6).sample(every, 3):
            data = mutated(document, path, action, value)
            try:
                result = load_result_from(data)
            except SerializationError:
                continue
            assert result.to_html().startswith("<!DOCTYPE html>")


def load_result_from(data: dict):
    return result_from_dict(json_codec.decode(json.loads(json.dumps(data))))


def test_loading_a_path_that_is_no_result_file_names_it(tmp_path):
    """A missing file, a folder and a FIFO raised FileNotFoundError / IsADirectoryError (or blocked forever on the
    FIFO) from the standard library; now one SerializationError names the path."""
    from vertebrae import BenchmarkResult
    from vertebrae.families.result_protocol import load_result

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for path, words in ((tmp_path / "missing.json", "does not exist"), (tmp_path, "is a folder, not a JSON file"),
                        (fifo, "cannot be read: a FIFO")):
        for load in (BenchmarkResult.load, load_result):
            with pytest.raises(SerializationError, match=words) as refused:
                load(path)
            assert str(path) in str(refused.value)

"""RepresentationMonitor: rows, error policies, the JSONL history (manifest, resume, torn lines), reports, bad input."""

from __future__ import annotations

import datetime as dt
import json
import re

import numpy as np
import pytest
from overlapindex import OverlapIndex
from sklearn.preprocessing import normalize

from vertebrae import (Benchmark, BenchmarkDataset, CallableMetric, ConfigError, ConsoleReporter,
                           DatasetIdentity, ExtractorError, HistoryError, HistoryLockedError, HistoryWarning,
                           InputTypeError, InputValidationError, OverlapScoringConfig, PrecomputedExtractor,
                           RepresentationMonitor, SeparatixConfig, StabilityConfig, read_history)
from vertebrae.reports.markdown_trend import render_trend

from .conftest import gaussian_classes

FAST = {"scoring_config": OverlapScoringConfig(k=4), "separatix_config": SeparatixConfig(enabled=False)}


@pytest.fixture
def data():
    X, y = gaussian_classes(n_per_class=30, n_classes=3, dim=6, seed=5)
    return X, y, BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("monitor-test", "1"))


def noisy(X, scale, seed=0):
    return X + np.random.default_rng(seed).normal(0.0, scale, X.shape).astype(X.dtype)


def boom(X):
    raise RuntimeError("checkpoint is corrupt")


def mean_norm(embeddings, labels, **_):
    return {"score": float(np.linalg.norm(embeddings, axis=1).mean())}


def monitor(dataset, **kwargs):
    return RepresentationMonitor(dataset, **{"reporters": [], **FAST, **kwargs})


# ------------------------------------------------------------------ rows
def test_row_is_the_benchmark_row_plus_monitor_fields(data):
    X, y, ds = data
    before = dt.datetime.now(dt.timezone.utc)
    row = monitor(ds).evaluate(PrecomputedExtractor("snap", X), snapshot_id="epoch-3", epoch=3, step=120,
                               timestamp="2026-01-02T03:04:05+00:00", context_metadata={"lr": 0.01, "tag": "a"})
    reference = Benchmark(ds, [PrecomputedExtractor("snap", X)], **FAST).run().rows(include_invalid=True)[0]
    assert {k: v for k, v in row.items() if not k.startswith("runtime.")} == {
        "evaluation_index": 0, "status": "ok", "snapshot_id": "epoch-3", "epoch": 3, "step": 120,
        "timestamp": "2026-01-02T03:04:05+00:00", "recorded_at": row["recorded_at"],
        **{k: v for k, v in reference.items() if not k.startswith("runtime.")},
        "context_metadata.lr": 0.01, "context_metadata.tag": "a",
        "error_stage": None, "error_type": None, "error_message": None, "error_traceback": None}
    assert sorted(k for k in row if k.startswith("runtime.")) == ["runtime.extract", "runtime.score"]
    assert before <= dt.datetime.fromisoformat(row["recorded_at"]) <= dt.datetime.now(dt.timezone.utc)
    # independent reference: OverlapIndex itself on the same (L2-normalised) matrix and seed
    direct = OverlapIndex(kmeans_k=4, kmeans_kwargs={"random_state": 0}).fit(normalize(X.astype(np.float64)), y)
    assert row["overlap_score"] == row["primary_score"] == row["metric.overlap"] == direct.index


def test_continue_records_a_failed_snapshot_with_the_same_columns_and_goes_on(data):
    X, _, ds = data
    metric = CallableMetric("mean_norm", mean_norm)
    m = monitor(ds, error_policy="continue", metrics=[metric], stability_config=StabilityConfig(repeats=2),
                separatix_config=SeparatixConfig())
    ok = m.evaluate(PrecomputedExtractor("snap", X), snapshot_id="good")
    failed = m.evaluate(boom, snapshot_id="bad", epoch=1)
    after = m.evaluate(lambda A: noisy(A, 0.5), snapshot_id="good-again")
    assert list(failed) == list(ok) and list(after) == list(ok)  # same columns, same order
    assert {"metric.overlap", "metric.mean_norm", "runtime.extract", "runtime.score", "runtime.stability",
            "runtime.metrics", "runtime.metric.mean_norm", "runtime.separatix"} <= set(failed)
    assert failed["status"] == "failed" and failed["evaluation_index"] == 1 and after["evaluation_index"] == 2
    scores = [k for k in failed if k.startswith(("metric.", "runtime.", "overlap_", "stability_"))
              and k != "stability_mode"]
    assert all(failed[k] is None for k in [*scores, "primary_score", "rank", "weakest_class"])
    assert (failed["error_stage"], failed["error_type"]) == ("extract", "UserCodeError")
    assert "RuntimeError: checkpoint is corrupt" in failed["error_message"]
    assert "Traceback" in failed["error_traceback"] and "boom" in failed["error_traceback"]
    assert ok["error_type"] is None and ok["metric.mean_norm"] == pytest.approx(mean_norm(X, None)["score"])
    assert [r["status"] for r in m.history] == ["ok", "failed", "ok"]


@pytest.mark.parametrize("repeats", [2, "auto"])
def test_a_failed_row_has_the_runtime_columns_a_snapshot_reports(data, repeats):
    """A failed row's runtime columns come from the declarations of the stages a snapshot's plan holds: with
    adaptive repeats that is `stability_round`, never a `stability` column no snapshot reports."""
    X, _, ds = data
    options = {"metrics": [CallableMetric("mean_norm", mean_norm)], "stability_config": StabilityConfig(repeats=repeats),
               "separatix_config": SeparatixConfig()}
    failed = monitor(ds, error_policy="continue", **options).evaluate(boom, snapshot_id="bad")
    [reported] = Benchmark(ds, [PrecomputedExtractor("snap", X)], **{**FAST, **options}).run().rows(include_invalid=True)
    assert [k for k in failed if k.startswith("runtime.")] == [k for k in reported if k.startswith("runtime.")]


def test_raise_writes_the_failure_row_then_reraises(data, tmp_path):
    _, _, ds = data
    path = tmp_path / "h.jsonl"
    m = monitor(ds, history=path)
    with pytest.raises(ExtractorError, match="checkpoint is corrupt") as info:
        m.evaluate(boom, snapshot_id="bad")
    assert isinstance(info.value.__cause__, RuntimeError)
    _, rows = read_history(path)
    assert [(r["status"], r["snapshot_id"], r["error_type"]) for r in rows] == [("failed", "bad", "UserCodeError")]
    assert m.history == rows


def test_a_callable_model_is_wrapped_and_named_by_its_snapshot(data):
    X, _, ds = data
    m = monitor(ds)
    assert m.evaluate(lambda A: A[:, :3], snapshot_id="head")["extractor"] == "head"
    assert m.evaluate(lambda A: A[:, :3])["extractor"] == "evaluation-1"
    row = m.evaluate(PrecomputedExtractor("snap", X), epoch=np.int64(4), context_metadata={"acc": np.float32(0.5)})
    assert (row["epoch"], row["context_metadata.acc"]) == (4, 0.5) and type(row["epoch"]) is int


# ------------------------------------------------------------------ history file
def test_each_evaluation_is_on_disk_when_evaluate_returns(data, tmp_path):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    m = monitor(ds, history=path)
    for i in range(3):
        row = m.evaluate(lambda A, s=i: noisy(A, 0.5 * s), snapshot_id=f"s{i}")
        lines = path.read_bytes().split(b"\n")
        assert lines[-1] == b"" and len(lines) == i + 3  # manifest + i+1 rows, newline-terminated
        assert json.loads(lines[-2]) == {"record": "evaluation", "row": row}
    manifest = json.loads(lines[0])
    assert manifest["record"] == "manifest" and manifest["format"] == "vertebrae-monitor-history"
    assert manifest["schema_version"] == 1 and dt.datetime.fromisoformat(manifest["created_at"]).tzinfo is not None
    assert manifest["dataset"] == {"identity_kind": "declared", "dataset_id": "monitor-test", "revision": "1",
                                   "n_samples": 90, "target_type": "single_label",
                                   "targets_sha256": ds.targets_fingerprint(), "groups_sha256": None}
    assert manifest["configuration"]["scoring_config"]["k"] == 4
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["dataset_fingerprint"])
    assert m.manifest == manifest


def test_reopening_resumes_rows_and_the_evaluation_index(data, tmp_path):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    with monitor(ds, history=path) as first:
        first.evaluate(PrecomputedExtractor("snap", X), snapshot_id="a")
        first.evaluate(lambda A: noisy(A, 1.0), snapshot_id="b")
        rows = first.history
    with monitor(ds, history=path) as second:
        assert second.history == rows
        assert second.evaluate(lambda A: noisy(A, 2.0), snapshot_id="c")["evaluation_index"] == 2
    assert [r["snapshot_id"] for r in read_history(path)[1]] == ["a", "b", "c"]


@pytest.mark.parametrize("change, named", [
    ("targets", "dataset.targets_sha256"), ("revision", "dataset.revision"),
    ("k", "configuration.scoring_config.k"), ("stability", "configuration.stability_config"),
])
def test_reopening_with_other_data_or_settings_names_the_difference(data, tmp_path, change, named):
    X, y, ds = data
    path = tmp_path / "h.jsonl"
    with monitor(ds, history=path) as m:
        m.evaluate(PrecomputedExtractor("snap", X))
    before = path.read_bytes()
    kwargs = {}
    if change == "targets":
        ds = BenchmarkDataset.from_embeddings(X, np.roll(y, 1), identity=DatasetIdentity.declared("monitor-test", "1"))
    elif change == "revision":
        ds = BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.declared("monitor-test", "2"))
    elif change == "k":
        kwargs["scoring_config"] = OverlapScoringConfig(k=5)
    else:
        kwargs["stability_config"] = StabilityConfig(repeats=3)
    with pytest.raises(HistoryError, match=re.escape(named)):
        monitor(ds, history=path, **kwargs)
    assert path.read_bytes() == before
    monitor(data[2], history=path).close()  # the refused open released the lock


def test_stability_n_jobs_does_not_change_the_configuration(data, tmp_path):
    _, _, ds = data
    path = tmp_path / "h.jsonl"
    monitor(ds, history=path, stability_config=StabilityConfig(repeats=2)).close()
    monitor(ds, history=path, stability_config=StabilityConfig(repeats=2, n_jobs=2)).close()


def test_an_ephemeral_dataset_is_identified_by_its_content(data, tmp_path):
    X, y, _ = data
    path = tmp_path / "h.jsonl"
    monitor(BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.ephemeral()), history=path).close()
    monitor(BenchmarkDataset.from_embeddings(X, y, identity=DatasetIdentity.ephemeral()), history=path).close()
    with pytest.raises(HistoryError, match="dataset.inputs_sha256"):
        monitor(BenchmarkDataset.from_embeddings(X * 2, y, identity=DatasetIdentity.ephemeral()), history=path)


def test_a_second_writer_in_the_same_process_is_refused(data, tmp_path):
    _, _, ds = data
    path = tmp_path / "h.jsonl"
    first = monitor(ds, history=path)
    with pytest.raises(HistoryLockedError, match="locked by another writer"):
        monitor(ds, history=path)
    first.close()
    with pytest.raises(HistoryError, match="closed"):
        first.evaluate(lambda A: A)
    monitor(ds, history=path).close()


def test_a_torn_last_line_is_set_aside_with_a_warning(data, tmp_path):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    with monitor(ds, history=path) as m:
        m.evaluate(PrecomputedExtractor("snap", X), snapshot_id="a")
        m.evaluate(lambda A: noisy(A, 1.0), snapshot_id="b")
    for n, fragment in enumerate([b'{"record":"evaluation","row":{"evaluation_ind', b'{"record":"evalu']):
        complete, rows = path.read_bytes(), read_history(path)[1]
        with open(path, "ab") as handle:
            handle.write(fragment)  # what a crash in the middle of a write leaves behind
        with pytest.warns(HistoryWarning, match=rf"incomplete .* {len(rows)} complete evaluation\(s\) were kept"):
            m = monitor(ds, history=path)
        with m:
            assert m.history == rows
            assert path.read_bytes() == complete
            aside = tmp_path / ("h.jsonl.torn" if n == 0 else "h.jsonl.torn.1")
            assert aside.read_bytes() == fragment
            assert m.evaluate(lambda A: noisy(A, 2.0), snapshot_id=f"c{n}")["evaluation_index"] == len(rows)
    assert [r["snapshot_id"] for r in read_history(path)[1]] == ["a", "b", "c0", "c1"]


def test_a_torn_manifest_starts_the_history_afresh(data, tmp_path):
    _, _, ds = data
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"record":"manifest","format":"vertebrae-mon')
    with pytest.warns(HistoryWarning, match="0 complete evaluation"):
        m = monitor(ds, history=path)
    with m:
        assert m.history == [] and m.manifest["record"] == "manifest"
        assert json.loads(path.read_bytes().splitlines()[0]) == m.manifest


@pytest.mark.parametrize("content, message", [
    (b'{"hello": 1}\n', "line 1 is not a vertebrae monitor manifest"),
    (b"not json\n", "line 1 is complete .* but not a JSON object"),
])
def test_a_file_that_is_not_a_history_is_refused(data, tmp_path, content, message):
    path = tmp_path / "h.jsonl"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=message):
        monitor(data[2], history=path)
    assert path.read_bytes() == content


def test_corruption_inside_a_history_is_refused_with_its_line_number(data, tmp_path):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    with monitor(ds, history=path) as m:
        for i in range(3):
            m.evaluate(lambda A, s=i: noisy(A, s), snapshot_id=f"s{i}")
    lines = path.read_bytes().split(b"\n")
    good = b"\n".join(lines)
    path.write_bytes(b"\n".join([*lines[:2], b'{"record":"evaluation","ro', *lines[3:]]))
    with pytest.raises(HistoryError, match="line 3 is complete"):
        monitor(ds, history=path)
    path.write_bytes(b"\n".join([lines[0], lines[1], lines[3], lines[2], b""]))
    with pytest.raises(HistoryError, match="line 3 is not evaluation 1 \\(got evaluation_index 2\\)"):
        monitor(ds, history=path)
    first = json.loads(lines[1])  # false == 0 and 0.0 == 0 in Python: both were read as evaluation 0
    for index in (False, 0.0):
        path.write_bytes(b"\n".join([lines[0], json.dumps({**first, "row": {**first["row"],
                                                                             "evaluation_index": index}}).encode(),
                                     b""]))
        with pytest.raises(HistoryError, match=f"line 2 is not evaluation 0 \\(got evaluation_index {index!r}\\)"):
            monitor(ds, history=path)
    manifest = json.loads(lines[0])
    path.write_bytes(b"\n".join([json.dumps({**manifest, "schema_version": 99}).encode(), *lines[1:]]))
    with pytest.raises(HistoryError, match="schema_version 99"):
        monitor(ds, history=path)
    path.write_bytes(good)
    monitor(ds, history=path).close()


def score_as(text: bytes):
    return lambda line: re.sub(rb'"primary_score":[-0-9.e]+', b'"primary_score":' + text, line)


@pytest.mark.parametrize("edit, message", [
    # a hand-inserted NaN (or an overflowing number) was accepted on resume; the writer never writes one
    (score_as(b"NaN"), "line 3 holds the non-finite number NaN"),
    (score_as(b"1e999"), "line 3 holds the non-finite number 1e999"),
    (score_as(b"-Infinity"), "line 3 holds the non-finite number -Infinity"),
    # 200,000 nested arrays raised a raw RecursionError on open
    (lambda line: b"[" * 200_000 + b"]" * 200_000, "line 3 is nested too deeply"),
])
def test_hand_edited_lines_are_refused_with_their_line_number(data, tmp_path, edit, message):
    _, _, ds = data
    path = tmp_path / "h.jsonl"
    with monitor(ds, history=path) as m:
        for i in range(3):
            m.evaluate(lambda A, s=i: noisy(A, s), snapshot_id=f"s{i}")
    lines = path.read_bytes().split(b"\n")
    edited = edit(lines[2])
    assert edited != lines[2]
    path.write_bytes(b"\n".join([*lines[:2], edited, *lines[3:]]))
    with pytest.raises(HistoryError, match=re.escape(f"{path}: {message}")):
        monitor(ds, history=path)
    with pytest.raises(HistoryError, match=re.escape(message)):
        read_history(path)


def test_read_history_reads_without_the_lock_and_skips_a_torn_line(data, tmp_path):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    m = monitor(ds, history=path)
    row = m.evaluate(PrecomputedExtractor("snap", X))
    manifest, rows = read_history(path)  # while the writer holds the lock
    assert rows == [row] and manifest == m.manifest
    m.close()
    with open(path, "ab") as handle:
        handle.write(b'{"rec')
    size = path.stat().st_size
    with pytest.warns(HistoryWarning, match="skipped an incomplete last line"):
        assert read_history(path)[1] == [row]
    assert path.stat().st_size == size  # the reader changes nothing
    with pytest.raises(InputValidationError, match="does not exist"):
        read_history(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------ reporting
def test_console_reporter_prints_one_line_per_evaluation(data, capsys):
    X, _, ds = data
    m = monitor(ds, reporters=[ConsoleReporter()], error_policy="continue",
                stability_config=StabilityConfig(repeats=2))
    ok = m.evaluate(PrecomputedExtractor("snap", X), snapshot_id="e0", epoch=0)
    m.evaluate(boom, snapshot_id="e1", epoch=1)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"[vertebrae monitor] #0 snapshot_id=e0 epoch=0 overlap={ok['primary_score']:.4f} "
        f"interval=[{ok['stability_interval_low']:.4f}, {ok['stability_interval_high']:.4f}] "
        f"weakest={ok['weakest_class']}",
        "[vertebrae monitor] #1 snapshot_id=e1 epoch=1 FAILED in extract: UserCodeError: extractor 'e1' failed "
        "during fit/transform: RuntimeError: checkpoint is corrupt"]


def test_the_default_reporter_is_the_console(data, capsys):
    X, _, ds = data
    RepresentationMonitor(ds, **FAST).evaluate(PrecomputedExtractor("snap", X))
    assert capsys.readouterr().out.startswith("[vertebrae monitor] #0 overlap=")


def test_markdown_trend_table(data):
    X, _, ds = data
    m = monitor(ds, error_policy="continue", stability_config=StabilityConfig(repeats=2))
    rows = [m.evaluate(lambda A, s=s: noisy(A, s), snapshot_id=f"e|{i}", epoch=i) for i, s in enumerate((3.0, 0.0))]
    m.evaluate(boom, snapshot_id="e2", epoch=2)
    text = m.to_markdown()
    first, second = rows[0]["primary_score"], rows[1]["primary_score"]
    assert text.startswith("# Representation trend\n")
    assert (f"3 evaluation(s), 1 failed. Primary metric: **overlap**; first scored snapshot e\\|0 {first:.4f}, "
            f"latest e\\|1 {second:.4f} ({second - first:+.4f}).") in text
    assert "| # | snapshot | epoch | status | overlap | change | overlap_score | stability_interval |" in text
    interval = f"[{rows[1]['stability_interval_low']:.4f}, {rows[1]['stability_interval_high']:.4f}]"
    assert (f"| 1 | e\\|1 | 1 | ok | {second:.4f} | {second - first:+.4f} | {second:.4f} | {interval} |") in text
    assert "| 2 | e2 | 2 | failed | – | – | – | – | – | UserCodeError in extract: extractor 'e2'" in text
    assert render_trend(m.history) == text
    plain = monitor(ds).to_markdown()
    assert plain == "# Representation trend\n\nNo evaluations recorded yet.\n"


def test_to_dataframe(data):
    X, _, ds = data
    m = monitor(ds, error_policy="continue")
    assert list(m.to_dataframe().columns[:7]) == ["evaluation_index", "status", "snapshot_id", "epoch", "step",
                                                   "timestamp", "recorded_at"]
    m.evaluate(PrecomputedExtractor("snap", X), epoch=0)
    m.evaluate(boom)
    frame = m.to_dataframe()
    assert list(frame["status"]) == ["ok", "failed"] and str(frame["epoch"].dtype) == "Int64"
    assert frame["overlap_score"].iloc[0] == m.history[0]["overlap_score"] and np.isnan(frame["overlap_score"].iloc[1])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs, error, message", [
    ({"error_policy": "ignore"}, ConfigError, "error_policy must be one of"),
    ({"reporters": ConsoleReporter()}, InputTypeError, "reporters must be a list"),
    ({"reporters": [object()]}, InputTypeError, r"reporters\[0\] \(object\) has no report"),
    ({"history": 3}, InputTypeError, "history must be None or a path"),
    ({"scoring_config": "k=4"}, ConfigError, "scoring_config must be an OverlapScoringConfig"),
    ({"primary_metric": "accuracy"}, ConfigError, "accuracy"),
])
def test_bad_monitor_arguments_are_rejected(data, kwargs, error, message):
    with pytest.raises(error, match=message):
        monitor(data[2], **kwargs)


def test_bad_history_paths_are_rejected(data, tmp_path):
    with pytest.raises(InputValidationError, match="is a directory"):
        monitor(data[2], history=tmp_path)
    with pytest.raises(InputValidationError, match="does not exist; create it first"):
        monitor(data[2], history=tmp_path / "missing" / "h.jsonl")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"snapshot_id": ""}, InputValidationError, "snapshot_id must be None or a non-empty string"),
    ({"epoch": -1}, InputValidationError, "epoch must be between 0 and 9223372036854775807"),
    ({"epoch": 2**70}, InputValidationError, "epoch must be between 0 and"),  # to_dataframe's Int64 overflowed
    ({"context_metadata": {"big": 10**5000}}, InputValidationError, r"context_metadata\['big'\] is an integer beyond "
                                                                    "64 bits"),  # failed at the write, after the run
    ({"epoch": 1.5}, InputTypeError, "epoch must be None or an integer"),
    ({"step": True}, InputTypeError, "step must be None or an integer"),
    ({"timestamp": "yesterday"}, InputValidationError, "timestamp must be None, a datetime or an ISO-8601"),
    ({"timestamp": 1700000000}, InputValidationError, "fromtimestamp"),
    ({"context_metadata": [("lr", 1)]}, InputTypeError, "context_metadata must be a mapping"),
    ({"context_metadata": {"cfg": {"lr": 1}}}, InputValidationError, r"context_metadata\['cfg'\].*flatten"),
    ({"context_metadata": {"loss": float("nan")}}, InputValidationError, "not a finite JSON scalar"),
    ({"context_metadata": {1: "a"}}, InputValidationError, "key 1 must be a non-empty string"),
])
def test_bad_evaluate_arguments_are_rejected_before_any_work(data, tmp_path, kwargs, error, message):
    X, _, ds = data
    path = tmp_path / "h.jsonl"
    m = monitor(ds, history=path)
    before = path.read_bytes()
    with pytest.raises(error, match=message):
        m.evaluate(PrecomputedExtractor("snap", X), **kwargs)
    with pytest.raises(InputTypeError, match="extractor_or_model must be an extractor"):
        m.evaluate(np.zeros(3))
    assert path.read_bytes() == before and m.history == []


# ------------------------------------------------------------------ real use
def test_training_an_mlp_on_digits_improves_its_hidden_layer(capsys, tmp_path):
    """A scikit-learn MLP trained epoch by epoch; the monitor watches its hidden-layer activations."""
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    from sklearn.utils import check_random_state

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    ds = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("sklearn-digits", "1"))
    m = RepresentationMonitor(ds, scoring_config=OverlapScoringConfig(k=8),
                              separatix_config=SeparatixConfig(enabled=False), history=tmp_path / "digits.jsonl")

    def hidden(W, b):
        return lambda A: np.maximum(A @ W + b, 0.0)  # the ReLU layer the MLP computes

    # The untrained network: scikit-learn's own initialisation of layer 1 (Glorot-uniform, factor 6 for ReLU,
    # drawn first from RandomState(random_state)), i.e. the weights partial_fit starts from.
    rng, bound = check_random_state(0), np.sqrt(6.0 / (64 + 16))
    W0, b0 = rng.uniform(-bound, bound, (64, 16)), rng.uniform(-bound, bound, 16)
    rows = [m.evaluate(hidden(W0, b0), snapshot_id="untrained", epoch=0)]
    mlp = MLPClassifier(hidden_layer_sizes=(16,), learning_rate_init=0.01, random_state=0)
    for epoch in range(1, 6):
        mlp.partial_fit(X, y, classes=np.arange(10))  # one pass over the data
        W, b = mlp.coefs_[0].copy(), mlp.intercepts_[0].copy()
        rows.append(m.evaluate(hidden(W, b), snapshot_id=f"epoch-{epoch}", epoch=epoch,
                               context_metadata={"train_accuracy": mlp.score(X, y), "loss": mlp.loss_}))
    m.close()
    scores = [r["overlap_score"] for r in rows]
    assert scores[-1] > scores[0] + 0.1
    direct = OverlapIndex(kmeans_k=8, kmeans_kwargs={"random_state": 0}).fit(normalize(hidden(W, b)(X)), y)
    assert scores[-1] == direct.index
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6
    assert all(line.startswith(f"[vertebrae monitor] #{i} snapshot_id=") for i, line in enumerate(out))
    assert read_history(tmp_path / "digits.jsonl")[1] == rows


def test_html_trend_page(data, tmp_path):
    X, _, ds = data
    m = monitor(ds)
    for i, s in enumerate((3.0, 0.0)):
        m.evaluate(lambda A, s=s: noisy(A, s), snapshot_id=f"e{i}", epoch=i)
    page = m.save_html(tmp_path / "trend.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page  # the trend figure, inline
    assert page.count("<tr>") >= 3 and "e1" in page and "http" not in page.split("<svg")[0]


def test_a_monitor_nobody_holds_releases_its_history_with_a_resource_warning(data, tmp_path):
    """Issue 26 item 10: re-running a notebook cell that opens the monitor must not find the history locked."""
    import gc

    _, _, ds = data
    path = tmp_path / "h.jsonl"
    first = monitor(ds, history=path)
    first.evaluate(lambda A: A, snapshot_id="s0")
    with pytest.warns(ResourceWarning, match="unclosed monitor history"):
        del first
        gc.collect()
    with monitor(ds, history=path) as again:  # the lock is free again; the row was kept
        assert [row["snapshot_id"] for row in again.history] == ["s0"]

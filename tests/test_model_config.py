"""Models from the command line (issue 29, item 7): a run config names model extractors and raw inputs.

`vertebrae run models.toml` on a CSV of texts with a real (tiny, randomly initialized, saved to disk) BERT and a
scikit-learn pipeline by import path equals the same Benchmark written in Python; every mistake is exit 2 and one
line before any model loads; the staged commands accept the same config.
"""

from __future__ import annotations

import inspect
import json
import pathlib
import sys
import uuid

import numpy as np
import pandas as pd
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, DatasetIdentity, HFTextExtractor, SeparatixConfig,
                           SklearnExtractor)
from vertebrae.cli.main import main
from vertebrae.errors import DependencyError
from vertebrae.cli.model_config import KINDS, SET_BY_VERTEBRAE, allowed_options, extractor_class

PIPELINES = '''
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_pipeline


def tfidf_svd():
    return make_pipeline(TfidfVectorizer(), TruncatedSVD(n_components=8, random_state=0))
'''

CONFIG = '''
[dataset]
id = "tweets"
revision = "1"
texts = "tweets.csv"
input_column = "text"
labels_column = "label"

[[extractors]]
name = "bert"
kind = "hf_text"
model = "tiny_bert"
layers = [1, -1]
poolings = ["mean", "cls"]
batch_size = 8
device = "cpu"

[[extractors]]
name = "tfidf"
kind = "sklearn"
model = "{module}:tfidf_svd"

[separatix]
enabled = false
'''


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, minilm_path):
    """A 2-layer BERT from a small config (random weights) with MiniLM's tokenizer, saved like a user's checkpoint."""
    import torch
    import transformers

    folder = tmp_path_factory.mktemp("models") / "tiny_bert"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_path))
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture
def project(tmp_path, monkeypatch, tiny_bert, tweets):
    """tweets.csv (text, label), the model folder beside it, an importable pipelines module and models.toml."""
    import shutil

    shutil.copytree(tiny_bert, tmp_path / "tiny_bert")
    pd.DataFrame({"text": tweets.texts, "label": tweets.labels}).to_csv(tmp_path / "tweets.csv", index=False)
    module = f"vertebrae_test_pipelines_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(PIPELINES)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "models.toml").write_text(CONFIG.format(module=module))
    yield tmp_path, module
    sys.modules.pop(module, None)


def report_without_timing(path: pathlib.Path) -> dict:
    """A written report.json without what changes run to run (timing) or with the config's folder (input files)."""
    data = json.loads(path.read_text())
    data.pop("timing")
    data["metadata"].pop("input_files", None)
    return data


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and ": error: " in err, err
    return err


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")  # k reduced for 12 tweets per class
def test_run_on_a_csv_equals_the_python_benchmark(project, tweets, tiny_bert):
    folder, module = project
    assert main(["run", str(folder / "models.toml"), "-o", str(folder / "out"), "-q"]) == 0
    pipelines = __import__(module)
    dataset = BenchmarkDataset.from_arrays(tweets.texts, tweets.labels, identity=DatasetIdentity.declared("tweets", "1"))
    extractors = [HFTextExtractor("bert", folder / "tiny_bert", layers=[1, -1], poolings=["mean", "cls"],
                                  batch_size=8, device="cpu", progress=False),
                  SklearnExtractor("tfidf", pipelines.tfidf_svd())]
    expected = Benchmark(dataset, extractors, separatix_config=SeparatixConfig(enabled=False), progress=False).run()
    expected.save_json(folder / "expected.json")
    ran = report_without_timing(folder / "out" / "report.json")
    assert ran == report_without_timing(folder / "expected.json")
    names = sorted(r["name"] for r in ran["extractor_results"])
    assert names == ["bert:layer1_cls", "bert:layer1_mean", "bert:layer2_cls", "bert:layer2_mean", "tfidf"]
    files = json.loads((folder / "out" / "report.json").read_text())["metadata"]["input_files"]
    assert [(f["role"], f["path"]) for f in files] == [("config", str(folder / "models.toml")),
                                                      ("inputs", "tweets.csv")]


def test_staged_commands_accept_the_same_config(project, monkeypatch):
    folder, _ = project
    monkeypatch.chdir(folder)
    assert main(["run", "models.toml", "--cache", str(folder / "ref_store"), "-o", "ref", "-q"]) == 0
    store = folder / "store"
    assert main(["plan", "models.toml", "--store", str(store), "--output", "plan.json", "-q"]) == 0
    for phase in ("embed", "score"):
        assert main([phase, "plan.json", "-q"]) == 0
    assert main(["collect", "plan.json", "--output", "collected.json", "-q"]) == 0
    collected, ran = report_without_timing(folder / "collected.json"), report_without_timing(folder / "ref" / "report.json")
    for data in (collected, ran):
        data["metadata"].pop("cache", None)  # the two stores differ
    assert collected == ran


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")
def test_the_old_option_spelling_runs_the_same_and_says_the_new_one(project):
    """``hidden_layer`` / ``pooling`` in a config: one release of grace, a DeprecationWarning on the terminal."""
    folder, _ = project
    assert main(["run", str(folder / "models.toml"), "-o", str(folder / "new"), "-q"]) == 0
    config = folder / "models.toml"
    config.write_text(config.read_text().replace("layers = [", "hidden_layer = [").replace("poolings = [", "pooling = ["))
    with pytest.warns(DeprecationWarning) as caught:  # (pytest records them; a terminal run prints them)
        assert main(["run", str(config), "-o", str(folder / "old"), "-q"]) == 0
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)
                and w.filename.endswith("model_config.py")]
    assert messages == [f"config extractors[0] ('bert', kind 'hf_text'): HFTextExtractor 'bert': {old}= is deprecated "
                        f"and will be removed in the next release; spell it {new}= (the spelling of every extractor "
                        "and run config)" for old, new in (("hidden_layer", "layers"), ("pooling", "poolings"))]
    assert report_without_timing(folder / "old" / "report.json") == report_without_timing(folder / "new" / "report.json")


@pytest.mark.parametrize("edit, message", [
    (("kind = \"sklearn\"", "kind = \"sklearn_pipeline\""), "config extractors[1] kind 'sklearn_pipeline' is unknown"),
    (("layers = [1, -1]", "layer = [1, -1]"), "config section extractors[0] has unknown key(s) ['layer'] for "
                                              "kind 'hf_text'; allowed: ['batch_size', 'cache_identity', 'device', "
                                              "'hidden_layer', 'kind', 'layers', 'max_length', 'model', 'name', "
                                              "'padding_side', 'pooling', 'poolings']"),
    (("input_column = \"text\"", "input_column = \"body\""), "tweets.csv: column 'body' not found; columns are "
                                                             "['text', 'label']"),
    (("labels_column = \"label\"", "labels_column = \"sentiment\""), "labels column(s) ['sentiment'] not found"),
    (("model = \"tiny_bert\"", "model = \"tiny_bert\"\nmax_length = 0"), "config extractors[0] ('bert', kind "
                                                                          "'hf_text'): HFTextExtractor 'bert': "
                                                                          "max_length must be a positive integer"),
    (("texts = \"tweets.csv\"\ninput_column = \"text\"", "labels = \"tweets.csv\""), "config extractors[0] ('bert', kind 'hf_text') embeds "
                                                             "raw inputs: name them in [dataset]"),
])
def test_config_mistakes_exit_2_with_one_line(project, capsys, edit, message):
    folder, _ = project
    config = folder / "models.toml"
    config.write_text(config.read_text().replace(*edit))
    assert main(["run", str(config), "-o", str(folder / "out"), "-q"]) == 2
    assert message in _one_line_error(capsys)


def test_a_missing_model_is_named_before_any_model_loads(project, capsys):
    folder, module = project
    loader = f"vertebrae_test_loader_{uuid.uuid4().hex[:8]}"
    (folder / f"{loader}.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.loaded').touch()\n"
                                         "def build():\n    raise AssertionError('never built')\n")
    config = folder / "models.toml"
    config.write_text(config.read_text().replace("[[extractors]]\nname = \"bert\"", f'''[[extractors]]
name = "first"
kind = "torch"
model = "{loader}:build"
cache_identity = "v1"

[[extractors]]
name = "second"
kind = "hf_text"
model = "models/bert-base"

[[extractors]]
name = "bert"''', 1))
    assert main(["run", str(config), "-o", str(folder / "out"), "-q"]) == 2
    err = _one_line_error(capsys)
    assert ("config extractors[1] ('second', kind 'hf_text'): model 'models/bert-base' does not exist (no folder "
            f"{folder / 'models' / 'bert-base'}") in err
    assert f"`hf download REPO_ID --local-dir {folder / 'models' / 'bert-base'}`" in err
    assert loader not in sys.modules and not (folder / f"{loader}.loaded").exists()  # the first model never loaded
    assert not (folder / "out" / "report.json").exists()


@pytest.mark.parametrize("texts, message", [
    (["good day", "", "bad day"], "tweets.csv: row 1 of column 'text' is empty, not a text; fix or delete that row"),
    (["good day", "   ", "bad day"], "tweets.csv: row 1 of column 'text' is blank"),
])
def test_a_bad_row_is_named(project, capsys, texts, message):
    folder, _ = project
    frame = pd.DataFrame({"text": texts * 4, "label": ["a", "b", "a"] * 4})
    frame.to_csv(folder / "tweets.csv", index=False)
    assert main(["run", str(folder / "models.toml"), "-o", str(folder / "out"), "-q"]) == 2
    assert message in _one_line_error(capsys)


def test_raw_input_sources_name_the_file_and_row(tmp_path, capsys):
    """Audio and image sources are checked before their dataset is built (rows 0-based)."""
    head = '[dataset]\nid = "d"\nrevision = "1"\n'
    tail = '\n[[extractors]]\nname = "s"\nkind = "sklearn"\nmodel = "sklearn.decomposition:PCA"\n'
    clips = [np.zeros(100), np.ones(80), np.array([0.0, np.nan, 1.0])]
    np.savez(tmp_path / "clips.npz", *clips)
    np.savez(tmp_path / "pcm.npz", np.zeros(100, dtype=np.int16), np.ones(80, dtype=np.int16))
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    (tmp_path / "photos" / "stray.png").write_bytes(b"")
    pd.DataFrame({"path": ["a.png"], "label": ["cat"]}).to_csv(tmp_path / "images.csv", index=False)
    for body, message in [
        ('audio = "clips.npz"\nsampling_rate = 16000\nlabels = "labels.txt"\n',
         "clips.npz: row 2 (array 'arr_2') has NaN or infinite samples; clean or drop that row"),
        ('audio = "pcm.npz"\nsampling_rate = 16000\nlabels = "labels.txt"\n',  # as from_audio_arrays refuses it
         "pcm.npz: row 0 (array 'arr_0') has dtype int16; pass float samples (int16 PCM: divide by 32768.0)"),
        ('audio = "clips.npz"\nlabels = "labels.txt"\n', "config [dataset] audio needs sampling_rate = 16000"),
        ('audio = "clips.npz"\nsampling_rate = true\nlabels = "labels.txt"\n', "config [dataset] sampling_rate must"),
        ('images = "photos"\n', "photos: image 'stray.png' is not in a class subfolder"),
        ('images = "images.csv"\ninput_column = "path"\nlabels_column = "label"\n',
         f"images.csv: row 0: image 'a.png' does not exist (no file {tmp_path / 'a.png'})"),
        ('texts = "tweets.csv"\naudio = "clips.npz"\n', "give one raw-input source"),
    ]:
        (tmp_path / "labels.txt").write_text("a\nb\na\n")
        (tmp_path / "run.toml").write_text(head + body + tail)
        assert main(["run", str(tmp_path / "run.toml"), "-o", str(tmp_path / "out"), "-q"]) == 2
        assert message in _one_line_error(capsys), body


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_accepts_exactly_its_constructor_options(kind):
    """The table names options of the real signature only; a kind whose module is not installed says so."""
    try:
        cls = extractor_class(kind, "test")
    except DependencyError as exc:
        assert f"kind {kind!r} is not available in this installation" in str(exc)
        pytest.skip(f"{KINDS[kind].target} is not on this branch")
    spec = KINDS[kind]
    parameters = [name for name in inspect.signature(cls).parameters if name not in SET_BY_VERTEBRAE]
    expected = {"model" if name == spec.model else name for name in parameters} | {"name", "kind"}
    assert set(allowed_options(kind)) == expected
    declared = {*spec.hub_models, *spec.paths, *spec.imports, *spec.path_or_import, *spec.factories, *spec.matrices,
                *spec.required}
    assert declared <= expected, declared - expected
    assert spec.model is None or spec.model in parameters


FEATURES = '''
import numpy as np


def mean_rgb(images):
    return np.stack([np.asarray(image, dtype=np.float32).mean(axis=(0, 1)) for image in images])


def audio_stats(waveforms):
    assert waveforms.sampling_rate == 8000  # the dataset's waveforms carry the config's rate
    return np.stack([[float(np.mean(w)), float(np.std(w)), float(np.abs(w).max())] for w in waveforms])
'''


@pytest.fixture
def features(tmp_path, monkeypatch):
    module = f"vertebrae_test_features_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(FEATURES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield __import__(module)
    sys.modules.pop(module, None)


def _run_equals_python(folder: pathlib.Path, body: str, dataset, extractor) -> dict:
    (folder / "run.toml").write_text('[dataset]\nid = "d"\nrevision = "1"\n' + body +
                                     '\n[separatix]\nenabled = false\n')
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 0
    Benchmark(dataset, [extractor], separatix_config=SeparatixConfig(enabled=False),
              progress=False).run().save_json(folder / "expected.json")
    ran = report_without_timing(folder / "out" / "report.json")
    assert ran == report_without_timing(folder / "expected.json")
    return json.loads((folder / "out" / "report.json").read_text())


def _photos(folder: pathlib.Path) -> tuple[list[str], list[str]]:
    """photos/blue and photos/red: 8 noisy PNGs each, of different sizes."""
    from PIL import Image

    rng = np.random.default_rng(0)
    paths, labels = [], []
    for label, channel in (("blue", 2), ("red", 0)):
        (folder / "photos" / label).mkdir(parents=True)
        for i in range(8):
            pixels = rng.integers(0, 120, size=(6 + i, 5, 3), dtype=np.uint8)
            pixels[..., channel] += 120
            path = folder / "photos" / label / f"{i}.png"
            Image.fromarray(pixels).save(path)
            paths.append(str(path))
            labels.append(label)
    return paths, labels


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")
def test_image_folder_and_image_table_sources(tmp_path, features):
    from vertebrae import CallableExtractor

    paths, labels = _photos(tmp_path)
    module = features.__name__
    extractor = f'[[extractors]]\nname = "rgb"\nkind = "callable"\nmodel = "{module}:mean_rgb"\n'
    dataset = BenchmarkDataset.from_image_paths(paths, labels, identity=DatasetIdentity.declared("d", "1"))
    ran = _run_equals_python(tmp_path, 'images = "photos"\n' + extractor, dataset,
                             CallableExtractor("rgb", features.mean_rgb))
    assert [f["path"] for f in ran["metadata"]["input_files"]][1:3] == ["photos/blue/0.png", "photos/blue/1.png"]

    pd.DataFrame({"file": [str(pathlib.Path(p).relative_to(tmp_path / "photos")) for p in paths],
                  "label": labels}).to_csv(tmp_path / "photos" / "index.csv", index=False)
    ran = _run_equals_python(tmp_path, 'images = "photos/index.csv"\ninput_column = "file"\nlabels_column = "label"\n'
                             + extractor, dataset, CallableExtractor("rgb", features.mean_rgb))
    assert [f["path"] for f in ran["metadata"]["input_files"]][1:3] == ["photos/index.csv", "photos/blue/0.png"]


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")
def test_audio_source(tmp_path, features):
    from vertebrae import CallableExtractor

    rng = np.random.default_rng(0)
    clips = [np.sin(np.arange(400 + 37 * i) * (0.05 if i % 2 else 0.4)).astype(np.float32)
             + rng.normal(0, 0.01 * (1 + i % 2), 400 + 37 * i).astype(np.float32) for i in range(16)]
    labels = ["low" if i % 2 else "high" for i in range(16)]
    np.savez(tmp_path / "clips.npz", *clips)
    (tmp_path / "labels.txt").write_text("\n".join(labels) + "\n")
    dataset = BenchmarkDataset.from_audio_arrays(clips, labels, sampling_rate=8000,
                                                 identity=DatasetIdentity.declared("d", "1"))
    body = ('audio = "clips.npz"\nsampling_rate = 8000\nlabels = "labels.txt"\n'
            f'[[extractors]]\nname = "stats"\nkind = "callable"\nmodel = "{features.__name__}:audio_stats"\n')
    ran = _run_equals_python(tmp_path, body, dataset, CallableExtractor("stats", features.audio_stats))
    assert [(f["role"], f["path"]) for f in ran["metadata"]["input_files"][1:]] == [("inputs", "clips.npz"),
                                                                                   ("labels", "labels.txt")]


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")
def test_hf_vision_on_an_image_folder(tmp_path):
    """A tiny ViT from a small config, saved with its image processor, named in the config like a user's checkpoint."""
    import torch
    import transformers

    from vertebrae.extractors.hf_vision import HFVisionExtractor

    torch.manual_seed(0)
    transformers.ViTModel(transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=32)
                          ).save_pretrained(tmp_path / "vit")
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "vit")
    paths, labels = _photos(tmp_path)
    body = ('images = "photos"\n[[extractors]]\nname = "vit"\nkind = "hf_vision"\nmodel = "vit"\nlayers = [1, -1]\n'
            'poolings = ["cls", "mean"]\nbatch_size = 4\ndevice = "cpu"\n')
    dataset = BenchmarkDataset.from_image_paths(paths, labels, identity=DatasetIdentity.declared("d", "1"))
    extractor = HFVisionExtractor("vit", tmp_path / "vit", layers=[1, -1], poolings=["cls", "mean"], batch_size=4,
                                  device="cpu", progress=False)
    ran = _run_equals_python(tmp_path, body, dataset, extractor)
    assert sorted(r["name"] for r in ran["extractor_results"]) == ["vit:layer1_cls", "vit:layer1_mean",
                                                                  "vit:layer2_cls", "vit:layer2_mean"]


@pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning")
def test_hf_audio_takes_the_dataset_sampling_rate(tmp_path, capsys):
    """A tiny wav2vec2 saved with its feature extractor; sampling_rate comes from [dataset] when the entry leaves
    it out."""
    pytest.importorskip("vertebrae.extractors.hf_audio", reason="HFAudioExtractor comes with branch audio")
    import torch
    import transformers

    from vertebrae.extractors.hf_audio import HFAudioExtractor

    torch.manual_seed(0)
    transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, conv_dim=(8, 8),
        conv_stride=(4, 2), conv_kernel=(8, 4), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer")).save_pretrained(tmp_path / "w2v")
    transformers.Wav2Vec2FeatureExtractor(sampling_rate=16000, return_attention_mask=True).save_pretrained(
        tmp_path / "w2v")
    rng = np.random.default_rng(0)
    clips = [rng.normal(scale=0.1 + 0.4 * (i % 2), size=800 + 97 * i).astype(np.float32) for i in range(12)]
    labels = ["loud" if i % 2 else "quiet" for i in range(12)]
    np.savez(tmp_path / "clips.npz", *clips)
    (tmp_path / "labels.txt").write_text("\n".join(labels) + "\n")
    body = ('audio = "clips.npz"\nsampling_rate = 16000\nlabels = "labels.txt"\n[[extractors]]\nname = "w2v"\n'
            'kind = "hf_audio"\nmodel = "w2v"\nlayers = [-1]\npoolings = ["mean"]\nbatch_size = 4\ndevice = "cpu"\n')
    dataset = BenchmarkDataset.from_audio_arrays(clips, labels, sampling_rate=16000,
                                                 identity=DatasetIdentity.declared("d", "1"))
    extractor = HFAudioExtractor("w2v", tmp_path / "w2v", sampling_rate=16000, layers=[-1], poolings=["mean"],
                                 batch_size=4, device="cpu", progress=False)
    _run_equals_python(tmp_path, body, dataset, extractor)
    # Issue 37 item 4: an entry that sets the model's rate over an 8 kHz [dataset] is refused before the model loads
    (tmp_path / "rate.toml").write_text('[dataset]\nid = "d"\nrevision = "1"\n' + body.replace(
        "sampling_rate = 16000", "sampling_rate = 8000") + "sampling_rate = 16000\n")
    assert main(["run", str(tmp_path / "rate.toml"), "-o", str(tmp_path / "rate"), "--quiet"]) == 2
    assert ("extractors[0] ('w2v') expects audio at 16000 Hz, but the dataset's waveforms are 8000 Hz; resample them "
            "first (e.g. scipy.signal.resample_poly(w, 2, 1)") in capsys.readouterr().err

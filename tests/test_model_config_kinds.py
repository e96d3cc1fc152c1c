"""`vertebrae run CONFIG` end to end for the kinds that take arrays: keras, jax, torch, onnx and sklearn.

Each run config names a real model — a ``.keras`` file, an ``apply``/``params`` pair and a torch factory from a
module made importable the way the config's module rules say (on ``sys.path``), an ``.onnx`` file exported from a
scikit-learn pipeline, a scikit-learn factory — over fixed-length clips (an audio ``.npy`` of clips x samples, the
raw-input source that hands extractors arrays). The report must equal the same Benchmark written in Python (JSON
minus timing and file records), and each extractor's own recipe must show the options the config gave.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import uuid

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: no TensorFlow needed

import numpy as np
import pytest

from vertebrae import Benchmark, BenchmarkDataset, DatasetIdentity, SeparatixConfig
from vertebrae.cli.main import main

from .test_model_config import report_without_timing

from .conftest import gaussian_classes

pytestmark = [pytest.mark.filterwarnings("ignore::vertebrae.ScoringWarning"),  # k reduced for 10 rows per class
              # Keras's predict on the torch backend converts tensors with np.array(copy=False) (numpy 2 deprecation)
              pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")]

X, Y = gaussian_classes(n_per_class=10, n_classes=2, dim=6, spread=1.5)  # overlapping: scores below 1
X = X.astype(np.float32)
RATE = 1000

MODELS = '''
import numpy as np

rng = np.random.default_rng(7)
params = {"w": rng.normal(size=(6, 4)).astype(np.float32), "b": rng.normal(size=4).astype(np.float32)}


def apply(params, x):
    import jax.numpy as jnp

    return jnp.tanh(x @ params["w"] + params["b"])


def build_torch():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh())


def scaled_pca():
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), PCA(n_components=3, random_state=0))
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """clips.npy (20 clips x 6 samples), labels.txt and an importable models module on sys.path."""
    np.save(tmp_path / "clips.npy", X)
    (tmp_path / "labels.txt").write_text("\n".join(str(y) for y in Y) + "\n")
    module = f"vertebrae_test_models_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, module
    sys.modules.pop(module, None)


def _run_equals_python(folder: pathlib.Path, entry: str, extractor) -> dict:
    """Run ``entry`` (one [[extractors]] table) over the clips and compare with the Python Benchmark."""
    (folder / "run.toml").write_text(f'[dataset]\nid = "clips"\nrevision = "1"\naudio = "clips.npy"\n'
                                     f'sampling_rate = {RATE}\nlabels = "labels.txt"\n\n[[extractors]]\n{entry}\n'
                                     '[separatix]\nenabled = false\n')
    assert main(["run", str(folder / "run.toml"), "-o", str(folder / "out"), "-q"]) == 0
    dataset = BenchmarkDataset.from_audio_arrays(list(X), [str(y) for y in Y], sampling_rate=RATE,
                                                 identity=DatasetIdentity.declared("clips", "1"))
    Benchmark(dataset, [extractor], separatix_config=SeparatixConfig(enabled=False),
              progress=False).run().save_json(folder / "expected.json")
    assert report_without_timing(folder / "out" / "report.json") == report_without_timing(folder / "expected.json")
    (result,) = json.loads((folder / "out" / "report.json").read_text())["extractor_results"]
    assert 0 < result["primary_score"] < 1  # a score that another embedding would change
    return result


def test_keras_file_and_layer(project):
    import keras

    from vertebrae import KerasExtractor

    folder, _ = project
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(6,))
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
    keras.Model(inputs, keras.layers.Dense(4, name="out")(hidden)).save(folder / "model.keras")
    result = _run_equals_python(folder, 'name = "k"\nkind = "keras"\nmodel = "model.keras"\nlayer = "hidden"\n'
                                'batch_size = 7\n',
                                KerasExtractor("k", folder / "model.keras", layer="hidden", batch_size=7,
                                               progress=False))
    assert result["embedding"]["embedding_dim"] == 8  # the named layer's width, not the model output's 4
    assert result["recipe"]["layer"] == "hidden"


def test_jax_apply_and_params_by_import_path(project):
    from vertebrae import JAXExtractor

    folder, module = project
    models = __import__(module)
    result = _run_equals_python(folder, f'name = "j"\nkind = "jax"\nmodel = "{module}:apply"\n'
                                        f'params = "{module}:params"\nbatch_size = 6\njit = false\n',
                                JAXExtractor("j", models.apply, models.params, batch_size=6, jit=False,
                                             progress=False))
    assert result["embedding"]["embedding_dim"] == 4
    assert result["recipe"]["jit"] is False and result["recipe"]["apply"]["callable"] == f"{module}.apply"


def test_torch_factory_by_import_path(project):
    from vertebrae import TorchExtractor

    folder, module = project
    models = __import__(module)
    result = _run_equals_python(folder, f'name = "t"\nkind = "torch"\nmodel = "{module}:build_torch"\n'
                                        'cache_identity = "linear-tanh-v1"\ndevice = "cpu"\nbatch_size = 8\n',
                                TorchExtractor("t", models.build_torch, cache_identity="linear-tanh-v1",
                                               device="cpu", batch_size=8, progress=False))
    assert result["embedding"]["embedding_dim"] == 5
    assert result["recipe"]["cache_identity"] == "linear-tanh-v1"
    assert result["recipe"]["model"]["factory"]["callable"] == f"{module}.build_torch"


def test_onnx_file_exported_from_sklearn(project):
    from skl2onnx import to_onnx
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from vertebrae import ONNXExtractor

    folder, _ = project
    pipeline = make_pipeline(StandardScaler(), PCA(n_components=3, random_state=0)).fit(X)
    (folder / "pca.onnx").write_bytes(to_onnx(pipeline, X[:1], target_opset=17).SerializeToString())
    result = _run_equals_python(folder, 'name = "o"\nkind = "onnx"\nmodel = "pca.onnx"\nbatch_size = 5\n',
                                ONNXExtractor("o", folder / "pca.onnx", batch_size=5, progress=False))
    assert result["embedding"]["embedding_dim"] == 3
    assert result["recipe"]["type"] == "onnx"


def test_sklearn_factory_by_import_path(project):
    from vertebrae import SklearnExtractor

    folder, module = project
    models = __import__(module)
    result = _run_equals_python(folder, f'name = "s"\nkind = "sklearn"\nmodel = "{module}:scaled_pca"\n',
                                SklearnExtractor("s", models.scaled_pca()))
    assert result["embedding"]["embedding_dim"] == 3
    assert result["recipe"]["params"]["pca__n_components"] == 3 and result["recipe"]["params"]["standardscaler__with_std"]

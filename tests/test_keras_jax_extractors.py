"""KerasExtractor (Keras 3 on the torch backend, no TensorFlow) and JAXExtractor (CPU jax), on real models.

References: ``keras.Model.predict`` (of the model, or of a sub-model ending at the
named layer) and the plain ``apply(params, x)``; weights and params counted directly.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported: no TensorFlow needed

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest

from vertebrae import (Benchmark, BenchmarkDataset, CacheConfig, DatasetIdentity, JAXExtractor, KerasExtractor,
                           ResourceProfilingConfig, SeparatixConfig)
from vertebrae.errors import ConfigError, InputTypeError, InputValidationError

from .conftest import gaussian_classes

# Keras's own predict on the torch backend converts tensors with np.array(copy=False) (a numpy 2 deprecation).
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")

X, Y = gaussian_classes(n_per_class=15, n_classes=2, dim=6)
X = X.astype(np.float32)


def _run(extractor, cache_dir=None):
    dataset = BenchmarkDataset.from_arrays(X, Y, identity=DatasetIdentity.declared("blobs", "1"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache = None if cache_dir is None else CacheConfig(store=str(cache_dir))
        return Benchmark(dataset, [extractor], cache_config=cache, resource_profiling=ResourceProfilingConfig(),
                         separatix_config=SeparatixConfig(enabled=False), progress=False).run().extractor_results[0]


# ----------------------------------------------------------------------------- Keras
@pytest.fixture(scope="module")
def keras_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(6,))
    hidden = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
    normed = keras.layers.BatchNormalization(name="bn")(hidden)
    return keras.Model(inputs, keras.layers.Dense(4, name="out")(normed))


@pytest.fixture(scope="module")
def keras_file(keras_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("keras") / "model.keras"
    keras_model.save(path)
    return path


def test_keras_output_equals_predict_for_the_model_a_layer_and_a_saved_file(keras_model, keras_file):
    expected = keras_model.predict(X, verbose=0)
    for model in (keras_model, keras_file):
        np.testing.assert_allclose(KerasExtractor("k", model, batch_size=7, progress=False).transform(X), expected,
                                   rtol=1e-6, atol=1e-6)
    sub = keras.Model(keras_model.inputs, keras_model.get_layer("hidden").output)
    np.testing.assert_allclose(KerasExtractor("k", keras_model, layer="hidden", progress=False).transform(X),
                               sub.predict(X, verbose=0), rtol=1e-6, atol=1e-6)


def test_keras_batched_equals_unbatched(keras_model):
    one = KerasExtractor("k", keras_model, batch_size=1, progress=False).transform(X)
    np.testing.assert_allclose(KerasExtractor("k", keras_model, batch_size=len(X), progress=False).transform(X), one,
                               rtol=1e-6, atol=1e-6)


def test_keras_recipe_follows_the_weights_and_a_file_needs_no_keras(keras_model, keras_file):
    before = KerasExtractor("k", keras_model).recipe()
    assert before == KerasExtractor("other name", keras_model).recipe()
    kernel = keras_model.get_layer("out").kernel
    original = keras.ops.convert_to_numpy(kernel)
    changed = original.copy()
    changed[0, 0] += 1e-3
    kernel.assign(changed)
    try:
        assert KerasExtractor("k", keras_model).recipe()["model"]["weights_sha256"] != before["model"]["weights_sha256"]
    finally:
        kernel.assign(original)
    assert KerasExtractor("k", keras_model).recipe() == before
    assert KerasExtractor("k", keras_model, layer="hidden").recipe() != before
    code = (f"import sys; from vertebrae import KerasExtractor; KerasExtractor('k', {str(keras_file)!r}).recipe(); "
            "assert 'keras' not in sys.modules and 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_keras_rejections(keras_model, tmp_path):
    with pytest.raises(ConfigError, match=r"layer 'nope' is not a layer of the model; its layers are \['input_layer"):
        KerasExtractor("k", keras_model, layer="nope")
    (tmp_path / "model.h5").write_bytes(b"")
    with pytest.raises(InputValidationError, match=r"is not a \.keras file"):
        KerasExtractor("k", tmp_path / "model.h5")
    with pytest.raises(InputValidationError, match="does not exist"):
        KerasExtractor("k", tmp_path / "missing.keras")
    with pytest.raises(InputTypeError, match="must be a keras.Model or a path"):
        KerasExtractor("k", object())


def test_keras_profile_counts_every_weight_and_leaves_buffers_unavailable(keras_file):
    extractor = KerasExtractor("k", keras_file, batch_size=8, progress=False)
    model = _run(extractor).resource_profile["model"]
    loaded = extractor.keras_model_
    trainable = sum(int(np.prod(w.shape)) for w in loaded.trainable_weights)
    assert model["parameter_count"] == loaded.count_params() == 6 * 8 + 8 + 4 * 8 + 8 * 4 + 4
    assert model["trainable_parameter_count"] == trainable == model["parameter_count"] - 16  # bn moving mean, var
    assert model["parameter_bytes"] == model["in_memory_bytes"] == 4 * model["parameter_count"]
    assert model["buffer_bytes"] is None and "cannot be told apart" in model["buffer_reason"]
    assert model["checkpoint_status"] == "measured" and model["checkpoint_bytes"] == keras_file.stat().st_size
    assert model["status"] == "measured"


def test_keras_cache_statuses(keras_model, tmp_path):
    assert _run(KerasExtractor("k", keras_model, progress=False), tmp_path).embedding["cache_status"] == "miss"
    assert _run(KerasExtractor("k", keras_model, progress=False), tmp_path).embedding["cache_status"] == "hit"


# ----------------------------------------------------------------------------- JAX
def mlp_apply(params, x):
    """A two-layer MLP: the pure apply function of the JAX tests."""
    return jnp.tanh(x @ params["dense"]["w"] + params["dense"]["b"]) @ params["out"]


@pytest.fixture(scope="module")
def params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"dense": {"w": jax.random.normal(k1, (6, 10)), "b": jnp.zeros(10)}, "out": jax.random.normal(k2, (10, 3))}


def test_jax_output_equals_the_plain_apply_batched_or_not(params):
    expected = np.asarray(mlp_apply(params, X))
    np.testing.assert_array_equal(JAXExtractor("j", mlp_apply, params, batch_size=len(X), jit=False,
                                               progress=False).transform(X), expected)
    for batch_size in (1, 7):
        np.testing.assert_allclose(JAXExtractor("j", mlp_apply, params, batch_size=batch_size,
                                                progress=False).transform(X), expected, rtol=1e-5, atol=1e-6)


def test_used_extractors_pickle_for_staged_and_distributed_runs(keras_model, params):
    for extractor in (KerasExtractor("k", keras_model, layer="hidden", progress=False),
                      JAXExtractor("j", mlp_apply, params, progress=False)):
        before = extractor.transform(X)  # loaded: a compiled function or a sub-model is held
        copy = pickle.loads(pickle.dumps(extractor))
        np.testing.assert_allclose(copy.transform(X), before, rtol=1e-6, atol=1e-6)
        assert copy.recipe() == extractor.recipe()


def test_jax_recipe_follows_params_and_function(params):
    recipe = JAXExtractor("j", mlp_apply, params).recipe()
    assert recipe["apply"]["callable"].endswith("mlp_apply") and "source_sha256" in recipe["apply"]
    changed = {**params, "out": params["out"].at[0, 0].add(1e-3)}
    assert JAXExtractor("j", mlp_apply, changed).recipe()["params_sha256"] != recipe["params_sha256"]
    assert JAXExtractor("j", mlp_apply, jax.tree_util.tree_map(np.asarray, params)).recipe() == recipe
    renamed = {"dense": params["dense"], "head": params["out"]}  # same bytes under another path
    assert JAXExtractor("j", lambda p, x: x, renamed).recipe()["params_sha256"] != recipe["params_sha256"]
    assert not JAXExtractor("j", lambda p, x: x, params).cache_eligible
    assert JAXExtractor("j", lambda p, x: x, params, cache_identity="identity-v1").cache_eligible
    with pytest.raises(InputTypeError, match="apply must be callable"):
        JAXExtractor("j", "mlp_apply", params)


def test_jax_cache_statuses(params, tmp_path):
    assert _run(JAXExtractor("j", mlp_apply, params, progress=False), tmp_path).embedding["cache_status"] == "miss"
    assert _run(JAXExtractor("j", mlp_apply, params, progress=False), tmp_path).embedding["cache_status"] == "hit"
    unsafe = _run(JAXExtractor("j", lambda p, x: mlp_apply(p, x), params, progress=False), tmp_path)
    assert unsafe.embedding["cache_status"] == "bypassed_unsafe_identity"


def test_jax_profile_on_cpu_says_what_is_measured(params):
    profile = _run(JAXExtractor("j", mlp_apply, params, batch_size=8, progress=False)).resource_profile
    model = profile["model"]
    assert model["parameter_count"] == 6 * 10 + 10 + 10 * 3
    assert model["parameter_bytes"] == model["in_memory_bytes"] == 4 * model["parameter_count"]
    assert model["trainable_parameter_count"] is None and model["buffer_bytes"] is None
    assert "pytree" in model["buffer_reason"] and model["weight_dtypes"] == ["float32"]
    assert model["checkpoint_status"] == "unavailable" and model["status"] == "partial"
    device = profile["device_memory"]
    assert (device["status"], device["device"], device["peak_allocated_bytes"]) == ("not_applicable", "cpu:0", None)
    assert profile["context"]["device"] == "cpu:0" and profile["latency"]["calls"] == 4  # 30 rows in batches of 8
    assert profile["context"]["framework_versions"]["jax"] == jax.__version__


class _AcceleratorLeaf:
    """A params leaf that says it lives on a GPU. A stand-in: this machine's jax is the CPU build, so an
    accelerator placement cannot be caused for real; only the profile's reading of the placement is tested."""

    dtype, size, nbytes = np.dtype("float32"), 6, 24

    def devices(self):
        return {"cuda:0"}


def test_jax_on_an_accelerator_keeps_null_peaks_with_the_reason():
    facts = JAXExtractor("j", mlp_apply, {"w": _AcceleratorLeaf()}).profile_facts()
    assert facts["device_memory"]["status"] == "unavailable" and facts["device_memory"]["device"] == "cuda:0"
    assert "JAX accelerators keep null peaks" in facts["device_memory"]["reason"]
    assert facts["model"]["parameter_count"] == 6 and facts["context"]["device"] == "cuda:0"

"""ONNXExtractor on real exported models (skl2onnx from scikit-learn, a hand-built two-output graph)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vertebrae import ONNXExtractor
from vertebrae.errors import ConfigError, ExtractorError, InputTypeError, InputValidationError

X = np.random.default_rng(0).normal(size=(300, 6)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from skl2onnx import to_onnx

    pipeline = make_pipeline(StandardScaler(), PCA(n_components=3, random_state=0)).fit(X)
    path = tmp_path_factory.mktemp("onnx") / "pca.onnx"
    path.write_bytes(to_onnx(pipeline, X[:1], target_opset=17).SerializeToString())
    return pipeline, path


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory):
    """y = x * 2 and z = x + 1 from one graph."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["double"]), helper.make_node("Add", ["x", "one"], ["plus_one"])],
        "two_outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
        [helper.make_tensor_value_info("double", TensorProto.FLOAT, [None, 6]),
         helper.make_tensor_value_info("plus_one", TensorProto.FLOAT, [None, 6])],
        [numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(1.0), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "two.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_equals_the_source_sklearn_pipeline(exported):
    pipeline, path = exported
    extractor = ONNXExtractor("pca", path, batch_size=64, progress=False)
    assert extractor.session_ is None  # loaded on first transform
    out = extractor.transform(X)
    assert out.shape == (300, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, pipeline.transform(X), rtol=1e-4, atol=1e-5)


def test_named_outputs_from_one_run(two_outputs):
    extractor = ONNXExtractor("two", two_outputs, outputs=("double", "plus_one"), batch_size=128, progress=False)
    out = extractor.transform_many(X)
    np.testing.assert_array_equal(out["double"], X * 2)
    np.testing.assert_array_equal(out["plus_one"], X + 1)
    post = ONNXExtractor("post", two_outputs, output_fn=difference, progress=False).transform(X)
    np.testing.assert_allclose(post, X * 2 - (X + 1), rtol=1e-6)


def difference(outputs):
    return outputs["double"] - outputs["plus_one"]


def test_recipe_is_the_file_contents_and_needs_no_onnxruntime(exported, two_outputs):
    _, path = exported
    code = ("import sys, json; from vertebrae import ONNXExtractor; "
            f"print(json.dumps(ONNXExtractor('m', {str(path)!r}).recipe())); print('onnxruntime' in sys.modules)")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert json.loads(lines[0]) == ONNXExtractor("other", path).recipe() and lines[1] == "False"
    assert ONNXExtractor("m", two_outputs).recipe() != ONNXExtractor("m", path).recipe()
    assert not ONNXExtractor("m", path, input_fn=lambda rows: {"X": rows}).cache_eligible


def test_rejections(exported, two_outputs, tmp_path):
    _, path = exported
    with pytest.raises(InputValidationError, match="model_path .* does not exist"):
        ONNXExtractor("m", tmp_path / "missing.onnx")
    with pytest.raises(ExtractorError, match=r"outputs \['nope'\] are not model outputs \['double', 'plus_one'\]"):
        ONNXExtractor("m", two_outputs, outputs=("nope",), progress=False).transform_many(X)


def test_a_file_that_is_not_onnx_and_inputs_of_the_wrong_width_are_named(exported, tmp_path):
    """Both used to surface onnxruntime's own words: "INVALID_PROTOBUF : Load model from ... failed: Protobuf parsing
    failed" and "Got invalid dimensions for input: X for the following indices index: 1 Got: 4 Expected: 6"."""
    _, path = exported
    garbage = tmp_path / "model.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(InputValidationError, match=r"model_path '.*model\.onnx' is not an ONNX model"):
        ONNXExtractor("g", garbage, progress=False).transform(X)
    with pytest.raises(InputValidationError, match=r"input 'X' takes arrays of shape \(\?, 6\), but X rows 0\.\.63 give "
                                                   r"\(64, 4\); it takes rows of width 6, not 4"):
        ONNXExtractor("w", path, batch_size=64, progress=False).transform(X[:, :4])


def test_rows_that_are_not_numbers_are_named(exported):
    """Before: NumPy's own ValueError ("could not convert string to float: 'a tweet'"), naming no row; a text in the
    first row now fails before the model loads."""
    _, path = exported
    extractor = ONNXExtractor("t", path, batch_size=64, progress=False)
    with pytest.raises(InputTypeError, match=r"X\[0\] is 'a tweet' \(str\); without input_fn the model takes "
                                             "numeric arrays .*ONNXTextExtractor"):
        extractor.transform(["a tweet", "another"])
    assert extractor.session_ is None
    rows = [list(row) for row in X]
    rows[70] = "late text"
    with pytest.raises(InputTypeError, match=r"X\[70\] is 'late text'"):
        extractor.transform(rows)
    rows[70] = list(X[70, :4])
    with pytest.raises(InputValidationError, match=r"X rows 64\.\.127 have different shapes"):
        extractor.transform(rows)


def test_providers_are_a_list_this_machine_runs(exported):
    """A string was read letter by letter (providers ['C', 'P', 'U', ...], in the key too), and an unavailable or
    misspelt provider fell back to CPU with only a log line while the identity named the asked one."""
    import onnxruntime

    _, path = exported
    with pytest.raises(ConfigError, match="providers must be a non-empty list .* got 'CPUExecutionProvider'"):
        ONNXExtractor("m", path, providers="CPUExecutionProvider")
    missing = next(p for p in ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider")
                   if p not in onnxruntime.get_available_providers())
    extractor = ONNXExtractor("m", path, providers=[missing], progress=False)
    with pytest.raises(ConfigError, match=rf"execution provider\(s\) \['{missing}'\] are not available here"):
        extractor.transform(X)


def test_external_data_files_are_part_of_the_identity(tmp_path):
    """Models over 2 GB (and many exports) keep their weights beside the .onnx file: new weights must move the key,
    and a missing weights file is named before any run."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from vertebrae.extractors.profiling import checkpoint_files

    weights = numpy_helper.from_array(np.arange(18, dtype=np.float32).reshape(6, 3), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    extractor = ONNXExtractor("m", path, progress=False)
    assert extractor.model_files == (path, tmp_path / "m.onnx.data")
    assert set(checkpoint_files(extractor)) == {path, tmp_path / "m.onnx.data"}
    before, out = extractor.recipe(), extractor.transform(X)
    np.testing.assert_allclose(out, X @ np.arange(18, dtype=np.float32).reshape(6, 3), rtol=1e-5)
    data = np.fromfile(tmp_path / "m.onnx.data", dtype=np.float32)
    (data * 2).tofile(tmp_path / "m.onnx.data")  # same .onnx file, new weights
    rebuilt = ONNXExtractor("m", path, progress=False)
    assert rebuilt.recipe() != before
    np.testing.assert_allclose(rebuilt.transform(X), 2 * out, rtol=1e-5)
    (tmp_path / "m.onnx.data").unlink()
    with pytest.raises(InputValidationError, match="external-data file 'm.onnx.data', which is not beside it"):
        ONNXExtractor("m", path)

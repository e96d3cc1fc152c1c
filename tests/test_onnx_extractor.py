"""ONNXExtractor on real exported models (skl2onnx from scikit-learn, a hand-built two-output graph)."""

from __future__ import annotations

import json
import os
import socket
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


def test_a_file_that_is_not_an_onnx_model_is_named_at_construction(exported, tmp_path):
    """A folder, an empty file, a text, a torch checkpoint or a .ort file were accepted, and failed when the session
    started, after the candidates before it had been embedded (onnxruntime's words for an empty file: "No graph was
    found in the protobuf")."""
    _, path = exported
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "pca.onnx").write_bytes(path.read_bytes())
    with pytest.raises(InputValidationError, match=r"model_path '.*folder' is a folder; pass the \.onnx file in it "
                                                   r"\(\['pca\.onnx'\]\)"):
        ONNXExtractor("f", tmp_path / "folder")
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(2)}, tmp_path / "weights.onnx")
    for name, content, why in (("empty.onnx", b"", "the file is empty"),
                               ("model.onnx", b"not a model", "its bytes are not ONNX's protobuf encoding"),
                               ("config.onnx", b'{"layers": 2}', "its bytes are not ONNX's protobuf encoding"),
                               ("truncated.onnx", path.read_bytes()[:-7], "its bytes are not ONNX's protobuf"),
                               ("weights.onnx", None, "its bytes are not ONNX's protobuf encoding")):
        if content is not None:
            (tmp_path / name).write_bytes(content)
        with pytest.raises(InputValidationError, match=rf"ONNXExtractor 'g': model_path '.*{name}' is not an ONNX "
                                                       rf"model \({why}.*; pass the \.onnx file that torch\.onnx\.export"):
            ONNXExtractor("g", tmp_path / name)
    (tmp_path / "mobile.ort").write_bytes(path.read_bytes())
    with pytest.raises(InputValidationError, match=r"'.*mobile\.ort' is an ORT-format model; pass the \.onnx file"):
        ONNXExtractor("o", tmp_path / "mobile.ort")


def test_a_file_that_cannot_be_read_is_named_at_construction(exported, tmp_path):
    """Open failed mid-run in onnxruntime (or, for the external-data scan, as a bare OSError at construction).  A unix
    socket cannot be opened even by root; a file without read permission can, by root only."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "socket.onnx"))
    try:
        with pytest.raises(InputValidationError, match=r"model_path '.*socket\.onnx' cannot be read \(.*\); make it "
                                                       "readable"):
            ONNXExtractor("s", tmp_path / "socket.onnx")
    finally:
        server.close()
    if os.geteuid() == 0:
        pytest.skip("root reads a file without read permission")
    locked = tmp_path / "locked.onnx"
    locked.write_bytes(exported[1].read_bytes())
    locked.chmod(0)
    with pytest.raises(InputValidationError, match=r"'.*locked\.onnx' cannot be read \(Permission denied\)"):
        ONNXExtractor("l", locked)


def test_arguments_the_graph_does_not_fit_are_named_at_construction(exported, two_outputs, tmp_path):
    """An output the graph lacks, a second input without input_fn, and a double input fed float32 rows were named
    (or, for the last, came as onnxruntime's "Unexpected input data type") only once the session started."""
    from onnx import TensorProto, helper

    with pytest.raises(ConfigError, match=r"outputs \['doubled'\] are not outputs of two\.onnx \('doubled': closest "
                                          r"\['double'.*its outputs are \['double', 'plus_one'\]; name outputs"):
        ONNXExtractor("m", two_outputs, outputs=("double", "doubled"))
    assert ONNXExtractor("m", two_outputs, outputs=("doubled",), output_fn=difference).outputs == ("doubled",)
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"])], "add",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 6]) for n in ("a", "b")],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [None, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "add.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ConfigError, match=r"the model has inputs \['a', 'b'\]; pass input_fn=\.\.\. returning a dict"):
        ONNXExtractor("m", tmp_path / "add.onnx")
    from skl2onnx import to_onnx

    doubles = tmp_path / "pca64.onnx"
    doubles.write_bytes(to_onnx(exported[0], X[:1].astype(np.float64), target_opset=17).SerializeToString())
    with pytest.raises(ConfigError, match=r"input 'X' takes tensor\(double\), and without input_fn the rows are fed "
                                          r"as tensor\(float\); pass input_fn=\.\.\. returning \{'X': array\}"):
        ONNXExtractor("m", doubles)
    out = ONNXExtractor("m", doubles, input_fn=as_double, progress=False).transform(X)
    np.testing.assert_allclose(out, exported[0].transform(X), rtol=1e-6, atol=1e-6)


def as_double(rows):
    return {"X": np.asarray(rows, dtype=np.float64)}


def wrong_feed(rows):
    return {"x ": np.asarray(rows, dtype=np.float32)}


def test_an_input_fn_feed_the_graph_lacks_is_named_before_the_session_starts(two_outputs):
    """onnxruntime's "Required inputs (['x']) are missing from input feed (['x '])" came after the session started,
    as a failure of user code."""
    extractor = ONNXExtractor("m", two_outputs, input_fn=wrong_feed, progress=False)
    with pytest.raises(ExtractorError, match=r"input_fn returned feeds \['x '\], but the model takes inputs \['x'\] "
                                             r"\(not model inputs: \['x '\]; missing: \['x'\]\); return a dict"):
        extractor.transform(X)
    assert extractor.session_ is None


def test_inputs_of_the_wrong_width_are_named(exported):
    """It used to surface onnxruntime's own words: "Got invalid dimensions for input: X for the following indices
    index: 1 Got: 4 Expected: 6"."""
    _, path = exported
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

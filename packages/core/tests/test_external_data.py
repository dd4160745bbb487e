"""Models whose weights live in external data files load from a path (found beside the file),
and from bytes or a ModelProto when the folder is given; without it, one clear error naming a
tensor and the fix. Compared with onnxruntime loading the same files."""

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug.session import EXTERNAL_DATA_FOLDER

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(5)


@pytest.fixture
def numpy_runtime():
    r = make_runtime(NumpyBackend())
    yield r
    r.close()


@pytest.fixture
def saved(tmp_path):
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return path, x, want


def _run(rt, model, x, **kw):
    with rt.load(model, **kw) as net:
        return net.run({"x": x})["y"]


def test_a_path_finds_its_external_data_beside_the_file(saved, numpy_runtime):
    path, x, want = saved
    np.testing.assert_allclose(_run(numpy_runtime, str(path), x), want, rtol=1e-5, atol=1e-5)


def test_bytes_load_their_external_data_from_the_folder_given(saved, numpy_runtime):
    path, x, want = saved
    got = _run(numpy_runtime, path.read_bytes(), x, external_data_dir=path.parent)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    proto = onnx.load(str(path), load_external_data=False)
    got = _run(numpy_runtime, proto, x, external_data_dir=str(path.parent))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL  # left as it was


def test_bytes_without_the_folder_name_a_tensor_and_the_fix(saved, numpy_runtime):
    path, x, _ = saved
    with pytest.raises(nnplug.ModelError, match=r"external data.*'w'.*external_data_dir"):
        numpy_runtime.load(path.read_bytes())
    with pytest.raises(nnplug.ModelError, match="not a folder"):
        numpy_runtime.load(path.read_bytes(), external_data_dir=path)


def test_session_from_bytes_takes_onnxruntimes_config_entry(saved, numpy_runtime):
    path, x, want = saved
    so = nnplug.SessionOptions()
    so.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(path.parent))
    sess = nnplug.InferenceSession(path.read_bytes(), so, runtime=numpy_runtime)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)

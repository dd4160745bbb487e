"""A model read from a path or bytes gets its weights as read-only views of the serialized
bytes (nnplug.raw_weights; a copy where the bytes are not aligned to the element size), not
copies out of the parsed ModelProto; each equals what onnx's
own reader gives, for every type numpy holds at its width. What cannot be viewed (strings,
4-bit types, data in the typed fields, external data, a truncated or malformed file) is read
from the ModelProto as before, or refused as before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug.raw_weights import initializer_views
from nnplug.stages.loader import load

KINDS = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "f64": np.linspace(-1, 1, 5),
    "f16": np.array([[0.5, -2.0], [65504, 1e-4]], np.float16),
    "i64": np.array([2**40, -3, 7], np.int64),
    "i8": np.array([-128, 0, 127], np.int8),
    "u16": np.array([0, 65535], np.uint16),
    "bool": np.array([True, False, True]),
    "scalar": np.array(3.25, np.float32),
    "empty": np.zeros((0, 4), np.float32),
}


def model_with(inits: list[TensorProto]) -> onnx.ModelProto:
    """y = x + the f32 weight; every other initializer is carried along unread."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "f32"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_each_viewable_weight_is_a_view_equal_to_onnxs_array():
    inits = [numpy_helper.from_array(a, k) for k, a in KINDS.items()]
    import ml_dtypes

    bf16 = helper.make_tensor("bf16", TensorProto.BFLOAT16, [2],
                              np.array([1.5, -3.0], ml_dtypes.bfloat16).tobytes(), raw=True)
    inits.append(bf16)
    data = model_with(inits).SerializeToString()
    views = initializer_views(data)
    assert sorted(views) == sorted([*KINDS, "bf16"])
    for init in inits:
        v = views[init.name]
        want = numpy_helper.to_array(init)
        assert v.dtype == want.dtype and v.shape == want.shape, init.name
        assert v.tobytes() == want.tobytes(), init.name
        assert not v.flags.writeable and v.ctypes.data % v.dtype.itemsize == 0


def test_a_loaded_model_holds_views_of_the_file_and_runs(tmp_path):
    inits = [numpy_helper.from_array(a, k) for k, a in KINDS.items()]
    path = tmp_path / "m.onnx"
    onnx.save(model_with(inits), str(path))
    m = load(str(path))
    for k, a in KINDS.items():
        c = m.constants[k]
        np.testing.assert_array_equal(c, a)
        assert not c.flags.writeable
        assert c.ctypes.data % c.dtype.itemsize == 0, k  # kernels read whole elements
        root = c
        while isinstance(root, np.ndarray):
            root = root.base
        if c.dtype.itemsize == 1:  # never misaligned: a view of the file's bytes
            assert isinstance(root, bytes) and len(root) == path.stat().st_size, k
    x = np.ones((3, 4), np.float32)
    with make_runtime(NumpyBackend()) as rt:
        for source in (str(path), path.read_bytes()):
            with rt.load(source) as net:
                np.testing.assert_array_equal(net.run({"x": x})["y"], x + KINDS["f32"])


def test_what_cannot_be_viewed_is_read_from_the_proto():
    strings = helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"])
    int4 = helper.make_tensor("i4", TensorProto.INT4, [3], [1, -2, 7])
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2], [1.0, 2.0])  # float_data
    f32 = numpy_helper.from_array(KINDS["f32"], "f32")
    model = model_with([f32, strings, int4, typed])
    views = initializer_views(model.SerializeToString())
    assert sorted(views) == ["f32"]
    m = load(model.SerializeToString())
    np.testing.assert_array_equal(m.constants["s"], np.array(["a", "bc"], dtype=object))
    np.testing.assert_array_equal(m.constants["i4"], numpy_helper.to_array(int4))
    np.testing.assert_array_equal(m.constants["typed"], np.array([1, 2], np.float32))


def test_external_data_is_read_from_its_file(tmp_path):
    big = np.arange(4096, dtype=np.float32).reshape(1024, 4)
    model = model_with([numpy_helper.from_array(KINDS["f32"], "f32"),
                        numpy_helper.from_array(big, "big")])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.bin",
              size_threshold=1024)
    assert "big" not in initializer_views(path.read_bytes())
    np.testing.assert_array_equal(load(str(path)).constants["big"], big)


def test_a_name_given_twice_is_left_to_the_proto():
    a = numpy_helper.from_array(np.zeros(3, np.float32), "w")
    b = numpy_helper.from_array(np.ones(3, np.float32), "w")
    assert "w" not in initializer_views(model_with([a, b]).SerializeToString())


@pytest.mark.parametrize("cut", [1, 7, 100, -5])
def test_truncated_or_malformed_bytes_give_no_views_and_a_clear_error(cut):
    data = model_with([numpy_helper.from_array(KINDS["f32"], "f32")]).SerializeToString()
    bad = data[:cut] if cut > 0 else data[:cut] + b"\xff\xff"
    assert initializer_views(bad) == {} or all(
        v.nbytes <= len(bad) for v in initializer_views(bad).values())
    with pytest.raises(nnplug.NnplugError):
        load(bad)


def test_a_session_reads_the_file_once_and_an_added_initializer_wins(tmp_path):
    """InferenceSession parses the file once and hands Runtime.load the parsed model with its
    bytes; an initializer given in SessionOptions replaces the file's, never a stale view."""
    path = tmp_path / "m.onnx"
    onnx.save(model_with([numpy_helper.from_array(KINDS["f32"], "f32")]), str(path))
    x = np.ones((3, 4), np.float32)
    with make_runtime(NumpyBackend()) as rt:
        sess = nnplug.InferenceSession(str(path), runtime=rt)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + KINDS["f32"])
        so = nnplug.SessionOptions()
        other = np.full((3, 4), -2.5, np.float32)
        so.add_initializer("f32", other)
        sess = nnplug.InferenceSession(str(path), so, runtime=rt)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + other)

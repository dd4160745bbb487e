"""Feeds and outputs as onnxruntime takes and gives them, side by side with onnxruntime on
the same model and inputs (nnplug's own session, on the core's test backend)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nnplug

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _both(model, rt, feeds, names=None):
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(names, feeds)
    got = nnplug.InferenceSession(model, runtime=rt).run(names, feeds)
    return want, got


def mul_model():
    w = onnx.numpy_helper.from_array(np.array([[1, 2], [3, 4], [5, 6]], np.float32), "w")
    return _model([h.make_node("Mul", ["x", "w"], ["y"])],
                  [h.make_tensor_value_info("x", T.FLOAT, [3, 2])],
                  [h.make_tensor_value_info("y", T.FLOAT, [3, 2])], [w])


def test_nested_lists_take_the_model_inputs_dtype(rt):
    feeds = {"x": [[1.5, 2], [3, 4], [5, 6.7]]}  # numpy alone would make float64
    want, got = _both(mul_model(), rt, feeds)
    assert got[0].dtype == want[0].dtype == np.float32
    np.testing.assert_array_equal(got[0], want[0])


def test_a_list_that_is_no_array_of_the_models_type_names_the_input(rt):
    with pytest.raises(nnplug.InputError, match=r"input 'x': the list cannot be converted to a "
                                                r"float32 array"):
        nnplug.InferenceSession(mul_model(), runtime=rt).run(None, {"x": [["a", "b"]] * 3})


def identity_strings():
    return _model([h.make_node("Identity", ["s"], ["t"])],
                  [h.make_tensor_value_info("s", T.STRING, [2, 2])],
                  [h.make_tensor_value_info("t", T.STRING, [2, 2])])


@pytest.mark.parametrize("form", ["str", "bytes", "void", "object", "list"])
def test_strings_in_every_form_onnxruntime_takes_come_back_as_str(rt, form):
    words = [["must", "have"], ["same", "size"]]  # np.void needs equal lengths
    if form == "bytes":
        words = [["this", "is"], ["a", "tést"]]
    make = {"str": lambda: np.array(words),
            # wider than the longest item: onnxruntime reads past an item that fills its width
            # (past the array's end for the last one), so its answer would be undefined
            "bytes": lambda: np.char.encode(np.array(words), "utf-8").astype("S8"),
            "void": lambda: np.array([w.encode() for r in words for w in r], np.void).reshape(2, 2),
            "object": lambda: np.array(words, object), "list": lambda: words}
    x = make[form]()
    want, got = _both(identity_strings(), rt, {"s": x})
    assert got[0].dtype == want[0].dtype == object
    assert got[0].tolist() == want[0].tolist() == words


def test_an_output_that_is_a_graph_input_is_a_copy_not_the_callers_array(rt):
    model = _model([h.make_node("Relu", ["x"], ["r"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [2])],
                   [h.make_tensor_value_info("r", T.FLOAT, [2]),
                    h.make_tensor_value_info("x", T.FLOAT, [2])])
    x = np.array([-1, 2], np.float32)
    want, got = _both(model, rt, {"x": x})
    np.testing.assert_array_equal(got[1], want[1])
    assert not np.shares_memory(got[1], x) and not np.shares_memory(want[1], x)
    got[1][:] = 7
    assert x.tolist() == [-1, 2]


def test_run_with_an_empty_output_list_returns_every_output(rt):
    model = _model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Sigmoid", ["x"], ["s"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [3])],
                   [h.make_tensor_value_info("r", T.FLOAT, [3]),
                    h.make_tensor_value_info("s", T.FLOAT, [3])])
    want, got = _both(model, rt, {"x": np.array([-1, 0, 1], np.float32)}, names=[])
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)

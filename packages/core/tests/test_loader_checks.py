"""The loader accepts what onnxruntime accepts: findings only the strict ONNX checker makes
are warnings; a model that is really invalid is one clear error naming node and field."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

import nnplug


def _relu(outputs, inputs=None, **attrs):
    inputs = inputs or [h.make_tensor_value_info("x", T.FLOAT, [2, 3])]
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="act", **attrs)], "g", inputs,
                     outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("output", [
    h.make_tensor_value_info("y", T.FLOAT, None),  # type without shape
    h.make_value_info("y", onnx.TypeProto()),  # no type at all
], ids=["no-shape", "no-type"])
def test_output_the_strict_checker_refuses_loads_with_a_warning(output):
    model = _relu([output])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with make_runtime(NumpyBackend()) as rt:
        with pytest.warns(nnplug.ModelWarning, match="onnxruntime accepts it"):
            net = rt.load(model)
        with net:
            np.testing.assert_array_equal(net.run({"x": x})["y"], want)


def test_a_valid_model_loads_without_warnings():
    model = _relu([h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    with make_runtime(NumpyBackend()) as rt, warnings.catch_warnings():
        warnings.simplefilter("error")
        rt.load(model).close()


def test_a_real_finding_behind_a_lenient_one_is_still_an_error_naming_the_node():
    model = _relu([h.make_tensor_value_info("y", T.FLOAT, None)], foo=1)
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(nnplug.ModelError,
                           match=r"Unrecognized attribute: foo for operator Relu \(node 'act', "
                                 r"op Relu\)"):
            rt.load(model)


def test_warnings_can_be_made_errors_for_a_strict_load():
    model = _relu([h.make_tensor_value_info("y", T.FLOAT, None)])
    with make_runtime(NumpyBackend()) as rt, warnings.catch_warnings():
        warnings.simplefilter("error", nnplug.ModelWarning)
        with pytest.raises(nnplug.ModelWarning):
            rt.load(model)


def test_an_ir3_model_whose_initializer_is_not_a_graph_input_loads_as_in_onnxruntime():
    # onnxruntime.datasets' mul_1.onnx is such a model: IR 3 asks every initializer to be a
    # graph input too; onnxruntime loads it anyway, with the initializer as a constant
    w = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    g = h.make_graph([h.make_node("Mul", ["x", "w"], ["y"], name="mul")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 2])],
                     [onnx.numpy_helper.from_array(w, "w")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 7)], ir_version=3)
    with pytest.raises(onnx.checker.ValidationError, match="in initializer but not in graph input"):
        onnx.checker.check_model(model)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with make_runtime(NumpyBackend()) as rt:
        with pytest.warns(nnplug.ModelWarning, match="initializer 'w' is not a graph input"):
            net = rt.load(model)
        with net:
            assert [i.name for i in net.inputs] == ["x"]
            np.testing.assert_array_equal(net.run({"x": x})["y"], want)


def _weighted(corrupt=False):
    """x[2,8] @ w[8,1024] (8192 elements: more than the checks read) -> Reshape(shape) -> y."""
    w = np.arange(8 * 1024, dtype=np.float32).reshape(8, 1024) / 1e4
    wt = onnx.numpy_helper.from_array(w, "w")
    if corrupt:
        wt.raw_data = wt.raw_data[:-4]  # one element short
    shape = onnx.numpy_helper.from_array(np.array([4, 512], np.int64), "shape")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                      h.make_node("Reshape", ["m", "shape"], ["y"], name="rs")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [wt, shape])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), w


def test_large_weights_keep_their_values_and_their_consumers_their_shapes():
    from nnplug.inference import skeleton
    from nnplug.stages.loader import load

    model, w = _weighted()
    bare = skeleton(model)
    assert [t.name for t in bare.graph.initializer] == ["shape"]  # the weight's bytes stay out
    m = load(model)
    np.testing.assert_array_equal(m.constants["w"], w)
    assert m.values["y"].shape == (4, 512)  # the small shape input still reached inference
    assert [i.name for i in m.inputs] == ["x"]  # a weight is no input of the model
    x = np.ones((2, 8), np.float32)
    with make_runtime(NumpyBackend()) as rt:
        np.testing.assert_allclose(rt.load(model).run({"x": x})["y"], (x @ w).reshape(4, 512),
                                   rtol=1e-6)


def test_a_weight_whose_data_does_not_fit_its_dims_is_named():
    model, _ = _weighted(corrupt=True)
    with make_runtime(NumpyBackend()) as rt, \
            pytest.raises(nnplug.ModelError, match="initializer 'w' cannot be read.*\\[8, 1024\\]"):
        rt.load(model)


def test_an_empty_graph_is_named_and_a_named_empty_one_goes_to_the_checker():
    """Only a graph with nothing set is 'empty' (the check reads which fields are set, not
    the serialized size, which walks every weight); one with just a name is the checker's."""
    from nnplug.stages.loader import load

    empty = h.make_model(onnx.GraphProto(), opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(nnplug.ModelError, match="the model has an empty graph"):
        load(empty)
    named = h.make_model(onnx.GraphProto(name="g"), opset_imports=[h.make_opsetid("", 17)])
    try:
        load(named)
    except nnplug.ModelError as e:
        assert "empty graph" not in str(e)

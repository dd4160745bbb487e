"""The host checks what custom ops report and return against the model: shape_infer results
against declared shapes, compute results against the inferred ones; and a node with an
output nothing reads still runs (the op returns all its outputs, the unused one is dropped)."""

from __future__ import annotations

import numpy as np
import pytest
from models import single_op
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper

from nnplug import CustomOpError


class Scale:
    op_type = "cstScale"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [in_shapes[0]], [in_dtypes[0]]

    def compute(self, node, inputs):
        return [inputs[0] * np.float32(2)]


class ShapeInferSaysOne(Scale):
    def shape_infer(self, node, in_shapes, in_dtypes):
        return [[1]], [in_dtypes[0]]


class ComputeReturnsTheWrongShape(Scale):
    def compute(self, node, inputs):
        return [np.zeros((1,), np.float32)]


class ComputeReturnsTheWrongDtype(Scale):
    def compute(self, node, inputs):
        return [inputs[0].astype(np.float64)]


def scale_model(shape):
    return single_op("cstScale", [list(shape)], domain="com.example")


def test_shape_infer_disagreeing_with_the_declared_shape_names_op_node_and_shapes():
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(ShapeInferSaysOne())
        with pytest.raises(CustomOpError) as info:
            rt.load(scale_model([3, 4]))
    text = str(info.value)
    for needle in ("'cstScale'", "shape_infer()", "'node'", "[1]", "[3, 4]", "'out'"):
        assert needle in text, f"{needle!r} not in: {text}"


@pytest.mark.parametrize("op,words", [(ComputeReturnsTheWrongShape, ["[1]", "[3, 4]"]),
                                      (ComputeReturnsTheWrongDtype, ["float64", "float32"])])
def test_compute_returning_another_shape_or_dtype_is_an_error(op, words):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(op())
        net = rt.load(scale_model([3, 4]))
        with pytest.raises(CustomOpError) as info:
            net.run({"in0": np.ones((3, 4), np.float32)})
    text = str(info.value)
    for needle in ["'cstScale'", "compute()", "'node'", *words]:
        assert needle in text, f"{needle!r} not in: {text}"


def test_symbolic_dims_are_checked_against_their_size_in_the_run():
    class Doubles(Scale):
        def compute(self, node, inputs):
            return [np.concatenate([inputs[0], inputs[0]], axis=1)]

    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Doubles())
        net = rt.load(scale_model([2, "C"]))
        with pytest.raises(CustomOpError, match=r"C is 3 in this run"):
            net.run({"in0": np.ones((2, 3), np.float32)})


def two_output_model(used: list[str]):
    node = helper.make_node("cstSplit2", ["x"], ["a", "b"], name="split2", domain="com.example")
    relu = [helper.make_node("Relu", [o], [f"{o}_relu"], name=f"relu_{o}") for o in used]
    g = helper.make_graph([node, *relu], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(f"{o}_relu", TensorProto.FLOAT, [2, 3])
                           for o in used])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.example", 1)])


class Split2:
    op_type = "cstSplit2"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [in_shapes[0], in_shapes[0]], [in_dtypes[0], in_dtypes[0]]

    def compute(self, node, inputs):
        return [inputs[0], -inputs[0]]


@pytest.mark.parametrize("used", [["a"], ["b"], ["a", "b"]])
def test_a_node_with_an_unused_output_runs_and_the_used_ones_are_right(used):
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    want = {"a_relu": np.maximum(x, 0), "b_relu": np.maximum(-x, 0)}
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Split2())
        with rt.load(two_output_model(used)) as net:
            out = net.run({"x": x})
    assert sorted(out) == sorted(f"{o}_relu" for o in used)
    for name, got in out.items():
        np.testing.assert_array_equal(got, want[name])

"""PRelu before opset 7 had no broadcasting rule; models exported then (PyTorch's converted
ones, onnx's test_PReLU_*_multiparam) give one slope per channel as a slope of shape [C] for
x [N, C, ...]. The OpenCL backend reads it as [C, 1, ...], as backend-cpu does and onnx's
expected outputs hold (onnxruntime has no PRelu before opset 7). From opset 7 on a slope
broadcasts as numpy does."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


def prelu(x_shape, slope, opset, *, const):
    node = helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inits = [numpy_helper.from_array(slope, "slope")] if const else []
    if not const:
        inputs.append(helper.make_tensor_value_info("slope", TensorProto.FLOAT, slope.shape))
    g = helper.make_graph([node], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("const", [False, True], ids=["fed", "initializer"])
@pytest.mark.parametrize("x_shape", [(2, 3, 4), (2, 3, 4, 5)], ids=["1d", "2d"])
def test_an_opset_6_slope_of_shape_c_is_one_slope_per_channel(rt, x_shape, const):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(x_shape).astype(np.float32)
    slope = rng.uniform(0.1, 0.9, 3).astype(np.float32)
    feeds = {"x": x} if const else {"x": x, "slope": slope}
    with rt.load(prelu(x_shape, slope, 6, const=const), backends=["opencl"]) as net:
        assert net.assignment["prelu"] == "opencl"
        got = net.run(feeds)["y"]
    per_channel = slope.reshape((3,) + (1,) * (len(x_shape) - 2))
    np.testing.assert_array_equal(got, np.where(x < 0, x * per_channel, x))


def test_from_opset_7_a_slope_broadcasts_as_numpy_does(rt):
    x = np.random.default_rng(7).standard_normal((2, 3, 3)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    with rt.load(prelu(x.shape, slope, 9, const=False), backends=["opencl"]) as net:
        got = net.run({"x": x, "slope": slope})["y"]
    np.testing.assert_array_equal(got, np.where(x < 0, x * slope, x))  # along the last axis

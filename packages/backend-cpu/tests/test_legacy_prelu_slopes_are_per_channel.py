"""PRelu before opset 7 had no broadcasting rule, and the models exported then (PyTorch's
converted ones; onnx's test_PReLU_{1d,2d,3d}_multiparam) give one slope per channel as a slope
of shape [C] for x [N, C, ...]. onnxruntime has no PRelu before opset 7; the cpu backend reads
such a slope as [C, 1, ...], which is what onnx's expected outputs hold. From opset 7 on a slope
broadcasts as numpy does (a [C] slope meets x's last axis)."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

CONVERTED = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                         "pytorch-converted")


def prelu(x_shape, slope_shape, opset):
    node = helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                      helper.make_tensor_value_info("slope", TensorProto.FLOAT, slope_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("x_shape", [(2, 3, 4), (2, 3, 4, 5), (2, 3, 4, 5, 6)],
                         ids=["1d", "2d", "3d"])
def test_an_opset_6_slope_of_shape_c_is_one_slope_per_channel(rt, x_shape):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(x_shape).astype(np.float32)
    slope = rng.uniform(0.1, 0.9, 3).astype(np.float32)
    with rt.load(prelu(x_shape, [3], 6), backends=["cpu"]) as net:
        got = net.run({"x": x, "slope": slope})["y"]
    per_channel = slope.reshape((3,) + (1,) * (len(x_shape) - 2))
    np.testing.assert_array_equal(got, np.where(x < 0, x * per_channel, x))


def test_from_opset_7_a_slope_broadcasts_as_numpy_does(rt):
    x = np.random.default_rng(7).standard_normal((2, 3, 3)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    model = prelu(x.shape, [3], 9)
    want = onnxruntime_run(model, {"x": x, "slope": slope})[0]
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run({"x": x, "slope": slope})["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.where(x < 0, x * slope, x))  # the last axis


@pytest.mark.parametrize("case", ["test_PReLU_1d_multiparam", "test_PReLU_2d_multiparam",
                                  "test_PReLU_3d_multiparam"])
def test_onnx_converted_multiparam_prelu_cases_pass(rt, case):
    d = os.path.join(CONVERTED, case)
    if not os.path.isdir(d):
        pytest.skip(f"this onnx wheel ships no {case}")
    model = onnx.load(os.path.join(d, "model.onnx"))
    assert model.opset_import[0].version < 7
    names = [i.name for i in model.graph.input]
    with rt.load(model, backends=["cpu"]) as net:
        for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*"))):
            ins = [numpy_helper.to_array(onnx.load_tensor(p))
                   for p in sorted(glob.glob(os.path.join(ds, "input_*.pb")))]
            (want,) = [numpy_helper.to_array(onnx.load_tensor(p))
                       for p in sorted(glob.glob(os.path.join(ds, "output_*.pb")))]
            got = net.run(dict(zip(names, ins)))[net.outputs[0].name]
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

"""Shapes no kernel can run, known only at run time: onnxruntime refuses each of them, and so
does the OpenCL backend, with nnplug's error naming the node and op, never a raw numpy error or
a NaN:

- a pool over an input whose channel or spatial dims are 0 (onnxruntime: "Only N can be zero");
- a Conv or pool whose window is larger than the padded input;
- a ConstantOfShape whose shape asks for more bytes than the device (or any address space) has;
- a Concat whose inputs differ on an axis other than the concatenated one (their dims are
  different symbols, equal only if the feeds make them so).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnplug

F = TensorProto.FLOAT


def model(nodes, inputs, inits=()):
    out = helper.make_tensor_value_info("y", F, None)
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [out], list(inits)),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def onnxruntime_refuses(m, feeds, match):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=match):
        sess.run(None, feeds)


def refused(rt, m, feeds, node, op, why):
    with pytest.warns(nnplug.ModelWarning):  # the output has no shape: nnplug infers it
        net = rt.load(m, backends=["opencl"])
    with net:
        assert net.assignment[node] == "opencl"
        with pytest.raises(nnplug.BackendError) as e:
            net.run(feeds)
    text = str(e.value)
    assert f"'{node}'" in text and f"op {op}" in text and why in text, text


def x_nchw(name="x"):
    return helper.make_tensor_value_info(name, F, ["N", 3, "H", "W"])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "MaxPool", "AveragePool"])
def test_a_pool_over_empty_spatial_dims_is_refused(rt, op):
    attrs = {} if op.startswith("Global") else {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}
    m = model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], [x_nchw()])
    feeds = {"x": np.zeros((1, 3, 0, 0), np.float32)}
    onnxruntime_refuses(m, feeds, "Only N can be zero")
    refused(rt, m, feeds, "pool", op, "empty channel or spatial axis has no value")


def test_a_global_pool_over_an_empty_batch_runs(rt):
    m = model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="pool")], [x_nchw()])
    with pytest.warns(nnplug.ModelWarning), rt.load(m, backends=["opencl"]) as net:
        assert net.run({"x": np.zeros((0, 3, 0, 0), np.float32)})["y"].shape == (0, 3, 1, 1)


@pytest.mark.parametrize("op", ["Conv", "MaxPool"])
def test_a_window_larger_than_the_padded_input_is_refused(rt, op):
    if op == "Conv":
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="win", pads=[1, 1, 1, 1])
        inits = [numpy_helper.from_array(np.ones((2, 3, 6, 6), np.float32), "w")]
    else:
        # (onnxruntime gives an empty output where the window overshoots by less than a
        # stride, kernel 6 here; nnplug's backends refuse that too)
        node = helper.make_node("MaxPool", ["x"], ["y"], name="win", kernel_shape=[7, 7],
                                pads=[1, 1, 1, 1])
        inits = []
    m = model([node], [x_nchw()], inits)
    feeds = {"x": np.ones((1, 3, 3, 3), np.float32)}
    onnxruntime_refuses(m, feeds, "Invalid input shape|negative")
    refused(rt, m, feeds, "win", op, "kernel window")


@pytest.mark.parametrize("shape", [[2**62, 4], [2**32, 2**32], [-1, 4]],
                         ids=["2^62x4", "2^32x2^32", "negative"])
def test_a_constant_of_shape_no_memory_holds_is_refused(rt, shape):
    m = model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
              [helper.make_tensor_value_info("s", TensorProto.INT64, [2])])
    feeds = {"s": np.array(shape, np.int64)}
    onnxruntime_refuses(m, feeds, "overflow|must be >= 0")
    refused(rt, m, feeds, "fill", "ConstantOfShape", "would have shape" if shape[0] < 0
            else "bytes of global memory")


def test_a_concat_of_inputs_differing_off_its_axis_is_refused(rt):
    m = model([helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=1)],
              [helper.make_tensor_value_info("a", F, ["N", 3]),
               helper.make_tensor_value_info("b", F, ["M", 4])])
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((5, 4), np.float32)}
    onnxruntime_refuses(m, feeds, "Non concat axis dimensions must match")
    refused(rt, m, feeds, "cat", "Concat", "may differ only on axis 1")
    # the same model where the symbols agree runs
    with pytest.warns(nnplug.ModelWarning), rt.load(m, backends=["opencl"]) as net:
        got = net.run({"a": np.ones((2, 3), np.float32), "b": np.zeros((2, 4), np.float32)})["y"]
    np.testing.assert_array_equal(got, np.concatenate([np.ones((2, 3)), np.zeros((2, 4))], 1))

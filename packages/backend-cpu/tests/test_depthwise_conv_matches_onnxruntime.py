"""Depthwise convolutions (group == channels == output channels) match onnxruntime on random
weights and inputs over kernel sizes, strides, dilations, pads (asymmetric and auto_pad), odd
widths, channel counts off the vector width, batches, fused activations and residuals, at 1
and 3 threads; and the same answer comes back at every thread count."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import first_inferred_shape, one_node_model, onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

# name: (N, C, H, W, kernel, strides, dilations, pads or auto_pad)
SHAPES = {
    "3x3s1": (1, 16, 20, 20, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3s2": (1, 24, 21, 23, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    "3x3s2-wide": (1, 3, 9, 131, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    "3x3s1-wide": (2, 5, 7, 77, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "5x5s1": (1, 13, 15, 17, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    "5x5s2": (2, 7, 19, 18, (5, 5), (2, 2), (1, 1), [2, 2, 2, 2]),
    "7x7s1": (1, 9, 14, 14, (7, 7), (1, 1), (1, 1), [3, 3, 3, 3]),
    "7x7-tiny-image": (1, 11, 7, 7, (7, 7), (1, 1), (1, 1), [3, 3, 3, 3]),
    "3x3-dilated": (1, 6, 16, 19, (3, 3), (1, 1), (2, 3), [2, 3, 2, 3]),
    "3x3s2-dilated": (1, 6, 17, 40, (3, 3), (2, 2), (2, 2), [2, 2, 2, 2]),
    "asymmetric-pads": (1, 10, 13, 33, (3, 3), (2, 2), (1, 1), [0, 1, 2, 0]),
    "no-pads": (1, 8, 12, 45, (3, 3), (1, 1), (1, 1), [0, 0, 0, 0]),
    "same-upper": (1, 5, 11, 12, (5, 5), (2, 2), (1, 1), "SAME_UPPER"),
    "same-lower": (1, 5, 11, 12, (4, 4), (1, 1), (1, 1), "SAME_LOWER"),
    "3x5-stride3": (1, 7, 20, 26, (3, 5), (3, 3), (1, 1), [1, 2, 1, 2]),
    "stride-2x1": (1, 4, 18, 37, (3, 3), (2, 1), (1, 1), [1, 1, 1, 1]),
    "1x1": (1, 12, 9, 10, (1, 1), (1, 1), (1, 1), [0, 0, 0, 0]),
    "1x1-padded": (1, 3, 5, 6, (1, 1), (2, 2), (1, 1), [1, 0, 0, 1]),
    "width-1": (1, 9, 12, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
}

# name: (activation nodes after the Conv, opset)
ACTS = {
    "none": [],
    "relu": [("Relu", {})],
    "relu6": [("Clip", {})],
    "leaky": [("LeakyRelu", {"alpha": 0.1})],
    "hardswish": [("HardSwish", {})],
    "silu": [("Sigmoid", {}), ("Mul", {})],  # x * Sigmoid(x), as exporters write SiLU
}


def activation_nodes(act: str, x: str) -> list:
    """The nodes of activation act on value x, ending in value "act" (Clip reads "lo", "hi")."""
    if act == "silu":
        return [helper.make_node("Sigmoid", [x], ["sig"], name="sigmoid"),
                helper.make_node("Mul", [x, "sig"], ["act"], name="mul")]
    if not ACTS[act]:
        return [helper.make_node("Identity", [x], ["act"], name="same")]
    ((op, a),) = ACTS[act]
    return [helper.make_node(op, [x, "lo", "hi"] if op == "Clip" else [x], ["act"], name=op, **a)]


def depthwise_model(case: str, act: str, *, bias=True, residual=False, const_weights=True,
                    seed=0):
    n, c, h, w, k, s, d, pads = SHAPES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, *k), dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32)
    attrs = dict(group=c, kernel_shape=list(k), strides=list(s), dilations=list(d))
    if isinstance(pads, str):
        attrs["auto_pad"] = pads
    else:
        attrs["pads"] = pads
    inits = [numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    if const_weights:
        inits.append(numpy_helper.from_array(wt, "w"))
        if bias:
            inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, wt.shape))
        feeds["w"] = wt
        if bias:
            inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape))
            feeds["b"] = b
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["conv"],
                              name="dw", **attrs)]
    last = "conv"
    if residual:
        shape = first_inferred_shape(nodes, inputs, inits)
        r = rng.standard_normal(shape, dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, r.shape))
        feeds["r"] = r
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"], name="res"))
        last = "sum"
    nodes += activation_nodes(act, last)
    last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(nodes, "dw", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), feeds


def check_against_onnxruntime(rt, model, feeds, what):
    want = onnxruntime_run(model, feeds)[0]
    lib = rt.backends["cpu"].backend
    results = []
    try:
        with rt.load(model, backends=["cpu"]) as net:
            assert all(b == "cpu" for b in net.assignment.values()), net.assignment
            for threads in (1, 3):
                lib.set_num_threads(threads)
                results.append(net.run(feeds)["y"])
    finally:
        lib.set_num_threads(0)
    scale = max(float(np.abs(want).max()), 1.0)
    for threads, got in zip((1, 3), results):
        assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale,
                                   err_msg=f"{what} at {threads} threads")
    np.testing.assert_array_equal(results[1], results[0], err_msg=f"{what}: 3 threads vs 1")


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_depthwise_conv_matches_onnxruntime(rt, case):
    model, feeds = depthwise_model(case, "none")
    check_against_onnxruntime(rt, model, feeds, case)


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("case", ["3x3s1", "3x3s2-wide", "5x5s2", "7x7-tiny-image"])
def test_depthwise_conv_with_fused_activation_matches_onnxruntime(rt, case, act):
    model, feeds = depthwise_model(case, act, seed=1)
    check_against_onnxruntime(rt, model, feeds, f"{case} + {act}")


@pytest.mark.parametrize("case", ["3x3s1", "3x3s1-wide", "7x7s1"])
def test_depthwise_conv_with_residual_and_activation_matches_onnxruntime(rt, case):
    model, feeds = depthwise_model(case, "relu6", residual=True, seed=2)
    check_against_onnxruntime(rt, model, feeds, f"{case} + residual")


@pytest.mark.parametrize("case", ["3x3s2", "5x5s1", "asymmetric-pads"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_depthwise_conv_with_weights_given_at_run_time_matches_onnxruntime(rt, case, bias):
    model, feeds = depthwise_model(case, "relu", bias=bias, const_weights=False, seed=3)
    check_against_onnxruntime(rt, model, feeds, f"{case} run-time weights")


def test_depthwise_conv_without_bias_matches_onnxruntime(rt):
    model, feeds = depthwise_model("5x5s2", "none", bias=False, seed=4)
    check_against_onnxruntime(rt, model, feeds, "no bias")


@pytest.mark.parametrize("stride", [1, 2])
def test_one_dimensional_depthwise_conv_matches_onnxruntime(rt, stride):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 11, 41), dtype=np.float32)
    w = rng.standard_normal((11, 1, 5), dtype=np.float32)
    b = rng.standard_normal(11, dtype=np.float32)
    model, feeds = one_node_model("Conv", [x, w, b], dict(group=11, strides=[stride], pads=[2, 1]),
                                  const_inputs=(1, 2))
    model.graph.output[0].name = "y"
    model.graph.node[0].output[0] = "y"
    check_against_onnxruntime(rt, model, feeds, f"1-D stride {stride}")

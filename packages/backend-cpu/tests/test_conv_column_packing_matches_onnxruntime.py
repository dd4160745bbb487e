"""Ordinary (non-depthwise) convolutions with constant weights match onnxruntime on random
weights and inputs at 1 and 3 threads, with the same answer at both: shapes around the edges of
the column packing (stride 1 along the width writes the packed GEMM panels straight from the
input rows; narrower rows go through a row buffer), depths Cin*kh*kw on and off the GEMM's
256-deep blocks, output widths 7, 14, 28, 56 and 57, output channels 32, 48, 64, 96 and odd
counts, pads, dilations, strides along the height only, batches, bias-free, residual and
activation epilogues, and 1-D convolutions."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_depthwise_conv_matches_onnxruntime import check_against_onnxruntime

# name: (N, C, H, W, M, kernel, strides, dilations, pads)
SHAPES = {
    "3x3-w56-m64": (1, 16, 56, 56, 64, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w57-m35": (1, 29, 9, 57, 35, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w28-m32-deep": (1, 128, 28, 28, 32, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w14-m48": (1, 40, 14, 14, 48, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w7-m96": (1, 33, 7, 7, 96, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w16-m7": (2, 5, 11, 16, 7, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    "3x3-w17-no-pads": (1, 12, 10, 19, 13, (3, 3), (1, 1), (1, 1), [0, 0, 0, 0]),
    "3x3-asymmetric-pads": (1, 9, 12, 40, 17, (3, 3), (1, 1), (1, 1), [0, 2, 2, 0]),
    "3x3-dilated": (1, 11, 15, 33, 19, (3, 3), (1, 1), (2, 3), [2, 3, 2, 3]),
    "3x3-stride-2x1": (1, 10, 21, 37, 24, (3, 3), (2, 1), (1, 1), [1, 1, 1, 1]),
    "5x5-w30": (1, 7, 13, 30, 20, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    "3x1-w45": (1, 30, 8, 45, 33, (3, 1), (1, 1), (1, 1), [1, 0, 1, 0]),
    "1x3-w64-wider-pads": (1, 6, 5, 64, 9, (1, 3), (1, 1), (1, 1), [0, 3, 0, 3]),
    "3x3s2-w29": (1, 14, 29, 29, 22, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
}


def conv_model(case: str, *, bias=True, residual=False, act=None, seed=0):
    n, c, h, w, m, k, s, d, pads = SHAPES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((m, c, *k), dtype=np.float32) / np.float32(np.sqrt(c * k[0] * k[1]))
    inits = [numpy_helper.from_array(wt, "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m, dtype=np.float32), "b"))
    oh = (h + pads[0] + pads[2] - (k[0] - 1) * d[0] - 1) // s[0] + 1
    ow = (w + pads[1] + pads[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["conv"], name="conv",
                              kernel_shape=list(k), strides=list(s), dilations=list(d), pads=pads)]
    last = "conv"
    if residual:
        feeds["r"] = rng.standard_normal((n, m, oh, ow), dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, feeds["r"].shape))
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"], name="res"))
        last = "sum"
    if act:
        nodes.append(helper.make_node(act, [last], ["act"], name="act"))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(nodes, "conv", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), feeds


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_conv_matches_onnxruntime(rt, case):
    model, feeds = conv_model(case)
    check_against_onnxruntime(rt, model, feeds, case)


@pytest.mark.parametrize("case", ["3x3-w57-m35", "3x3-w16-m7", "3x3-w7-m96"])
def test_conv_with_residual_and_relu_matches_onnxruntime(rt, case):
    model, feeds = conv_model(case, residual=True, act="Relu", seed=1)
    check_against_onnxruntime(rt, model, feeds, f"{case} + residual + relu")


@pytest.mark.parametrize("case", ["3x3-asymmetric-pads", "5x5-w30"])
def test_conv_without_bias_matches_onnxruntime(rt, case):
    model, feeds = conv_model(case, bias=False, act="HardSwish", seed=2)
    check_against_onnxruntime(rt, model, feeds, f"{case} without bias")


@pytest.mark.parametrize("width", [15, 16, 100])
def test_one_dimensional_conv_matches_onnxruntime(rt, width):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 13, width), dtype=np.float32)
    wt = rng.standard_normal((21, 13, 3), dtype=np.float32)
    b = rng.standard_normal(21, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 2])], "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    check_against_onnxruntime(rt, model, {"x": x}, f"1-D width {width}")

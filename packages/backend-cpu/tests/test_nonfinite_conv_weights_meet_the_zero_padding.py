"""A convolution whose weights hold an infinity or a NaN: the padding is zeros, so such a weight
on the padding adds 0 * inf = NaN, as ONNX defines Conv (onnx.reference) and as onnxruntime's
own convolution kernels give (ORT_ENABLE_BASIC). onnxruntime's default ORT_ENABLE_ALL rewrites
convolutions with 8k channels into its NCHWc layout, whose kernels skip padded taps and give the
infinity there instead: a shortcut of one kernel, not the operator's meaning, which nnplug
follows. Constant weights, folded BatchNormalization, bias, residual and activation, and
weights fed at run time; at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import for_onnxruntime, onnxruntime_run, reference
from onnx import TensorProto, helper, numpy_helper
from test_winograd_convolutions_match_onnxruntime import assert_same_nonfinite

# name: (N, C, H, W, M, kernel, attributes)
SHAPES = {
    "1x1-padded": (1, 3, 6, 7, 4, (1, 1), {"pads": [1, 1, 1, 1]}),
    "3x3-padded": (2, 8, 9, 8, 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3-winograd-sized": (1, 32, 8, 8, 64, (3, 3), {"pads": [1, 1, 1, 1]}),
    "5x5-stride-2-asymmetric": (1, 4, 11, 10, 6, (5, 5), {"pads": [2, 1, 0, 2], "strides": [2, 2]}),
    "3x3-dilation-2": (1, 4, 9, 9, 5, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "grouped": (1, 8, 7, 7, 12, (3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
    "depthwise": (1, 16, 10, 9, 16, (3, 3), {"pads": [1, 1, 1, 1], "group": 16}),
    "same-upper": (1, 4, 6, 5, 4, (2, 2), {"auto_pad": "SAME_UPPER"}),
    "1-d": (2, 4, 1, 12, 6, (3,), {"pads": [2, 1]}),
}
EPILOGUES = ["plain", "bias-residual-relu", "batchnorm"]
POISONS = ["inf", "-inf", "nan"]


def poisoned_weights(case, poison, seed):
    n, c, h, w, m, kernel, attrs = SHAPES[case]
    rng = np.random.default_rng(seed)
    cg = c // attrs.get("group", 1)
    weights = rng.standard_normal((m, cg, *kernel), dtype=np.float32) / np.float32(cg * np.prod(kernel))
    value = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}[poison]
    flat = weights.reshape(m, -1)
    flat[0, 0] = value  # the first tap of channel 0: on the padding of the top-left outputs
    flat[m - 1, -1] = value  # the last tap of the last channel: on the bottom-right padding
    return weights


def conv_model(case, poison, epilogue, *, weights_fed=False, seed=0):
    n, c, h, w, m, kernel, attrs = SHAPES[case]
    rng = np.random.default_rng(seed)
    shape = (n, c, w) if len(kernel) == 1 else (n, c, h, w)
    x = rng.standard_normal(shape, dtype=np.float32)
    weights = poisoned_weights(case, poison, seed + 1)
    feeds = {"x": x}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    inits = []
    if weights_fed:
        feeds["w"] = weights
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, weights.shape))
    else:
        inits.append(numpy_helper.from_array(weights, "w"))
    conv_inputs = ["x", "w"]
    if epilogue == "bias-residual-relu":
        inits.append(numpy_helper.from_array(rng.standard_normal(m, dtype=np.float32), "b"))
        conv_inputs.append("b")
    nodes = [helper.make_node("Conv", conv_inputs, ["conv"], name="conv", kernel_shape=list(kernel), **attrs)]
    last = "conv"
    if epilogue == "batchnorm":
        for name, v in (("scale", rng.uniform(0.5, 2, m)), ("shift", rng.standard_normal(m)),
                        ("mean", rng.standard_normal(m)), ("var", rng.uniform(0.1, 3, m))):
            inits.append(numpy_helper.from_array(v.astype(np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", [last, "scale", "shift", "mean", "var"], ["bn"],
                                      name="bn"))
        last = "bn"
    if epilogue == "bias-residual-relu":
        out_shape = onnxruntime_run(_graph(nodes, inputs, inits, last), feeds)[0].shape
        feeds["r"] = rng.standard_normal(out_shape, dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
        nodes += [helper.make_node("Add", [last, "r"], ["sum"], name="residual"),
                  helper.make_node("Relu", ["sum"], ["act"], name="act")]
        last = "act"
    return _graph(nodes, inputs, inits, last), feeds


def _graph(nodes, inputs, inits, last):
    nodes = [*nodes, helper.make_node("Identity", [last], ["y"], name="out")]
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime_basic_run(model, feeds):
    """onnxruntime with its own kernels: no layout rewrites (ORT_ENABLE_BASIC)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def check(rt, model, feeds, what):
    with rt.load(model, backends=["cpu"]) as net:
        assert all(b == "cpu" for b in net.assignment.values()), net.assignment
        got = net.run(feeds)["y"]
    want = onnxruntime_basic_run(model, feeds)
    assert not np.isfinite(want).all(), "the poisoned weights must reach the output"
    assert_same_nonfinite(got, want, f"{what} against onnxruntime")
    assert_same_nonfinite(got, reference(model, feeds)[0], f"{what} against onnx.reference")


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_constant_nonfinite_weights_meet_the_zero_padding(rt, threads, case, poison, epilogue):
    model, feeds = conv_model(case, poison, epilogue)
    check(rt, model, feeds, f"{case} {poison} {epilogue}")


@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("case", ["1x1-padded", "3x3-padded", "depthwise", "1-d"])
def test_fed_nonfinite_weights_meet_the_zero_padding(rt, threads, case, poison):
    model, feeds = conv_model(case, poison, "plain", weights_fed=True)
    check(rt, model, feeds, f"{case} {poison} fed")

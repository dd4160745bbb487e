"""Conv followed by an activation the planner fuses into it (Relu, Clip, LeakyRelu, HardSwish,
and SiLU written as x * Sigmoid(x)), with and without a residual Add, matches onnxruntime on
random weights and inputs for 1x1, 3x3 and 5x5, grouped and plain convolutions, at 1 and 3
threads; and where the pattern is not fusable (the Sigmoid's output also read elsewhere) the
answer is the same."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import first_inferred_shape, onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

# name: (N, C, H, W, M, group, kernel, strides, pads)
SHAPES = {
    "1x1": (1, 24, 14, 15, 40, 1, (1, 1), (1, 1), [0, 0, 0, 0]),
    "1x1-batch2": (2, 13, 9, 11, 7, 1, (1, 1), (1, 1), [0, 0, 0, 0]),
    "1x1s2": (1, 16, 15, 15, 20, 1, (1, 1), (2, 2), [0, 0, 0, 0]),
    "3x3-few-outputs": (1, 40, 12, 13, 8, 1, (3, 3), (1, 1), [1, 1, 1, 1]),
    "3x3s2": (1, 3, 33, 31, 16, 1, (3, 3), (2, 2), [1, 1, 1, 1]),
    "7x7s2-stem": (1, 3, 29, 31, 8, 1, (7, 7), (2, 2), [3, 3, 3, 3]),
    "3x3s3-asymmetric": (1, 5, 17, 20, 7, 1, (3, 3), (3, 3), [0, 2, 1, 0]),
    "5x5-grouped": (1, 12, 10, 11, 18, 3, (5, 5), (1, 1), [2, 1, 2, 1]),
    "depthwise": (1, 21, 13, 13, 21, 21, (3, 3), (1, 1), [1, 1, 1, 1]),
}
ACTS = ["none", "relu", "relu6", "leaky", "hardswish", "silu"]


def conv_model(case: str, act: str, *, residual=False, sigmoid_also_output=False,
               const_weights=True, seed=0):
    n, c, h, w, m, group, k, s, pads = SHAPES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((m, c // group, *k), dtype=np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal(m, dtype=np.float32), "b"),
             numpy_helper.from_array(np.array(-1, np.float32), "lo"),
             numpy_helper.from_array(np.array(2, np.float32), "hi")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    if const_weights:
        inits.append(numpy_helper.from_array(wt, "w"))
    else:  # the weights given at run time take the Conv's unpacked path
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, wt.shape))
        feeds["w"] = wt
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", group=group,
                              kernel_shape=list(k), strides=list(s), pads=pads)]
    last = "conv"
    if residual:
        shape = first_inferred_shape(nodes, inputs, inits)
        r = rng.standard_normal(shape, dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, r.shape))
        feeds["r"] = r
        nodes.append(helper.make_node("Add", ["r", last], ["sum"], name="res"))
        last = "sum"
    ops = {"relu": ("Relu", [last], {}), "relu6": ("Clip", [last, "lo", "hi"], {}),
           "leaky": ("LeakyRelu", [last], {"alpha": 0.2}), "hardswish": ("HardSwish", [last], {})}
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", [last], ["sig"], name="sigmoid"),
                  helper.make_node("Mul", ["sig", last], ["act"], name="mul")]
        if sigmoid_also_output:
            outputs.append(helper.make_tensor_value_info("sig", TensorProto.FLOAT, None))
    elif act in ops:
        op, ins, a = ops[act]
        nodes.append(helper.make_node(op, ins, ["act"], name=op, **a))
    else:
        nodes.append(helper.make_node("Identity", [last], ["act"], name="same"))
    nodes.append(helper.make_node("Identity", ["act"], ["y"], name="out"))
    graph = helper.make_graph(nodes, "conv", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), feeds


def check_against_onnxruntime(rt, model, feeds, what):
    want = onnxruntime_run(model, feeds)
    lib = rt.backends["cpu"].backend
    results = []
    try:
        with rt.load(model, backends=["cpu"]) as net:
            assert all(b == "cpu" for b in net.assignment.values()), net.assignment
            names = [o.name for o in net.outputs]
            for threads in (1, 3):
                lib.set_num_threads(threads)
                out = net.run(feeds)
                results.append([out[nm] for nm in names])
    finally:
        lib.set_num_threads(0)
    for threads, got in zip((1, 3), results):
        for g, w, nm in zip(got, want, names):
            scale = max(float(np.abs(w).max()), 1.0)
            assert g.shape == w.shape, f"{what} {nm}: shape {g.shape} != {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * scale,
                                       err_msg=f"{what} {nm} at {threads} threads")
    for a, b in zip(results[1], results[0]):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: 3 threads vs 1")


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_conv_with_fused_activation_matches_onnxruntime(rt, case, act):
    model, feeds = conv_model(case, act)
    check_against_onnxruntime(rt, model, feeds, f"{case} + {act}")


@pytest.mark.parametrize("act", ["relu", "hardswish", "silu"])
@pytest.mark.parametrize("case", ["1x1-batch2", "3x3-few-outputs", "depthwise"])
def test_conv_with_residual_and_fused_activation_matches_onnxruntime(rt, case, act):
    model, feeds = conv_model(case, act, residual=True, seed=1)
    check_against_onnxruntime(rt, model, feeds, f"{case} + residual + {act}")


@pytest.mark.parametrize("act", ["hardswish", "silu"])
@pytest.mark.parametrize("case", ["1x1", "3x3s2", "5x5-grouped"])
def test_conv_with_run_time_weights_and_fused_activation_matches_onnxruntime(rt, case, act):
    model, feeds = conv_model(case, act, const_weights=False, seed=4)
    check_against_onnxruntime(rt, model, feeds, f"{case} run-time weights + {act}")


def test_silu_whose_sigmoid_is_also_an_output_matches_onnxruntime(rt):
    model, feeds = conv_model("3x3s2", "silu", sigmoid_also_output=True, seed=2)
    check_against_onnxruntime(rt, model, feeds, "sigmoid also an output")


@pytest.mark.parametrize("act", ["silu", "hardswish"])
def test_fused_activation_agrees_with_the_separate_kernels(rt, monkeypatch, act):
    """HardSwish in the epilogue computes what the separate kernel computes, bit for bit; SiLU
    (its own x / (1 + e^-x) on AVX2) within a few ulp of Sigmoid then Mul. NNPLUG_CPU_FUSION=0,
    read when a model is loaded, turns the fusion off."""
    model, feeds = conv_model("1x1", act, seed=3)
    with rt.load(model, backends=["cpu"]) as net:
        fused = net.run(feeds)["y"]
    monkeypatch.setenv("NNPLUG_CPU_FUSION", "0")
    with rt.load(model, backends=["cpu"]) as net:
        plain = net.run(feeds)["y"]
    if act == "hardswish":
        np.testing.assert_array_equal(fused, plain)
    else:
        np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-37)


def test_fused_silu_of_extreme_values_is_what_sigmoid_then_mul_give(rt, monkeypatch):
    """Infinities, NaN, values past exp's range and subnormal territory: a 1x1 identity Conv
    passes them to the fused SiLU; the separate kernels (fusion off) are the reference."""
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.0, 89.0, 100.0, -87.0, -87.3,
                        -87.4, -88.0, -89.0, -100.0, -1e30, 1e30, 1e-30, -1e-30, 20.0, -20.0,
                        0.5, -0.5, 3.0], np.float32)
    x = np.concatenate([special, np.random.default_rng(6).uniform(-100, 100, 100)]).astype(np.float32)
    x = x.reshape(1, 1, 1, -1)
    inits = [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], name="conv"),
             helper.make_node("Sigmoid", ["conv"], ["sig"], name="sigmoid"),
             helper.make_node("Mul", ["conv", "sig"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with rt.load(model, backends=["cpu"]) as net:
        fused = net.run({"x": x})["y"]
    monkeypatch.setenv("NNPLUG_CPU_FUSION", "0")
    with rt.load(model, backends=["cpu"]) as net:
        plain = net.run({"x": x})["y"]
    np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-37)
    np.testing.assert_array_equal(np.signbit(fused), np.signbit(plain))

"""QuantizeLinear -> DequantizeLinear (QDQ models' activations, onnxruntime's quantize_static)
runs on this backend as one float32 step, y = (saturate(round(x / s0) + z0) - z1) * s1 (graph.c
fake_quant, plan_loops.c build_qdq), so the convolutions around it stay in one partition. Its
results are onnxruntime's two ops' bit for bit (onnxruntime without graph optimisations, which
runs the two as written): uint8 and int8, zero points at the ends of their range, different
parameters on the two sides, ties, saturation, NaN, infinities, -0, in nhwc, blocked and plain
layouts, small and large (threaded) tensors, at 1 and 2 threads. Other uses of the two ops are
left to the cpu backend."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import BACKENDS
from onnx import TensorProto, helper, numpy_helper

RANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127)}
NP = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def ort_plain(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def qdq_model(shape, qt, s0, z0, s1, z1, conv=True, channels=8, extra_reader=False):
    """x -> [Conv 3x3 -> ] QuantizeLinear -> DequantizeLinear -> Relu -> y."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    src = "x"
    if conv:
        # small integers: every sum exact in any order, so the QuantizeLinear reads the same
        # numbers on both engines (their convolutions otherwise round differently)
        w = rng.integers(-2, 3, (channels, shape[1], 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]))
        src = "c"
    inits += [numpy_helper.from_array(np.float32(s0), "s0"),
              numpy_helper.from_array(np.array(z0, NP[qt]), "z0"),
              numpy_helper.from_array(np.float32(s1), "s1"),
              numpy_helper.from_array(np.array(z1, NP[qt]), "z1")]
    nodes.append(helper.make_node("QuantizeLinear", [src, "s0", "z0"], ["q"], name="quant"))
    nodes.append(helper.make_node("DequantizeLinear", ["q", "s1", "z1"], ["d"], name="dequant"))
    nodes.append(helper.make_node("Relu", ["d"], ["y"], name="relu"))
    yshape = [shape[0], channels if conv else shape[1], *shape[2:]]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, yshape)]
    if extra_reader:
        outs.append(helper.make_tensor_value_info("q", qt, yshape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         shape)], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def awkward(rng, shape, scale):
    n = int(np.prod(shape))
    x = rng.uniform(-300, 300, n).astype(np.float32) * np.float32(scale)
    ties = (rng.integers(-300, 300, n) + np.float32(0.5)).astype(np.float32) * np.float32(scale)
    x = np.where(rng.random(n) < 0.3, ties, x)
    x[:8] = [np.nan, np.inf, -np.inf, -0.0, 1e30, -1e30, 0.5 * scale, -0.5 * scale]
    return x.reshape(shape)


def run(rt, model, feeds, threads):
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=BACKENDS) as net:
            return dict(net.assignment), net.run(feeds)
    finally:
        lib.set_num_threads(0)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("qt", [TensorProto.UINT8, TensorProto.INT8], ids=["uint8", "int8"])
@pytest.mark.parametrize("shape,conv", [((1, 3, 5, 7), False), ((1, 16, 9, 11), True),
                                        ((2, 3, 96, 96), True), ((1, 1, 300, 300), False)],
                         ids=["plain_odd", "nhwc", "first_conv_large", "large_threaded"])
def test_quantize_dequantize_pairs_match_exactly(rt, qt, shape, conv, threads):
    lo, hi = RANGE[qt]
    rng = np.random.default_rng(7)
    for s0, z0, s1, z1 in [(0.05, lo, 0.05, lo), (0.5, hi, 0.5, hi), (0.02, 0, 0.03, hi),
                           (2.0, (lo + hi) // 2, 0.1, lo + 1)]:
        model = qdq_model(shape, qt, s0, z0, s1, z1, conv=conv)
        x = awkward(rng, shape, 0.05)
        if conv:  # integers (exact sums, see qdq_model) giving ties and saturation after it
            x = rng.integers(-4, 5, shape).astype(np.float32)
        assignment, got = run(rt, model, {"x": x}, threads)
        assert assignment["quant"] == assignment["dequant"] == "onednn", assignment
        want = ort_plain(model, {"x": x})[0]
        np.testing.assert_array_equal(got["y"].view(np.uint32), want.view(np.uint32),
                                      err_msg=f"{s0} {z0} {s1} {z1}")


def test_other_uses_are_left_to_the_cpu_backend(rt):
    """A QuantizeLinear whose 8-bit result is also a graph output, and a DequantizeLinear of a
    graph input, run on cpu (the backend holds float32 values only)."""
    model = qdq_model((1, 3, 5, 7), TensorProto.UINT8, 0.05, 3, 0.05, 3, conv=False,
                      extra_reader=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 7)).astype(np.float32)
    assignment, got = run(rt, model, {"x": x}, 1)
    assert assignment["quant"] == "cpu" and assignment["dequant"] == "cpu", assignment
    want = ort_plain(model, {"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["q"], want[1])
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("q", TensorProto.UINT8, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(9), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    q = np.arange(20, dtype=np.uint8).reshape(4, 5) * 12
    assignment, got = run(rt, model, {"q": q}, 1)
    assert assignment["dequant"] == "cpu", assignment
    np.testing.assert_array_equal(got["y"], ort_plain(model, {"q": q})[0])

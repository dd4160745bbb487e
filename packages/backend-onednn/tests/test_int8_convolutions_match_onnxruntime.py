"""QDQ convolutions (onnxruntime's quantize_static, QDQ format) run on oneDNN's int8
convolution: the fold stage leaves DequantizeLinear(int8 weights) unfolded because this backend
claims it together with its Conv, and the Conv, whose input is a QuantizeLinear ->
DequantizeLinear in the same kernel, sums its integers exactly (plan_conv.c). Its results are
onnxruntime's within one quantization step of the output (onnxruntime requantizes the int32 sum
in one multiply, this backend the float32 sum as the float convolution gives it): plain,
depthwise, with Relu, strided, 1x1, with and without bias, weights per channel and per tensor,
uint8 and int8 activations, at 1 and 2 threads. A backend that does not claim the pair sees the
folded float32 weights, as before."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import BACKENDS
from onnx import TensorProto, helper, numpy_helper

quantization = pytest.importorskip("onnxruntime.quantization")

SHAPE = (1, 8, 14, 14)
KINDS = ["plain", "depthwise", "grouped", "relu", "relu_kept", "clip_kept", "strided", "no_bias",
         "pointwise", "chain"]
KEEP_ACTIVATIONS = ("relu_kept", "clip_kept")  # quantize_static leaves Relu / Clip before the Q


def float_model(kind: str, seed: int = 0) -> onnx.ModelProto:
    """A small random conv net of one kind (``chain``: every kind in a row)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x, cin, cout, k=3, group=1, stride=1, bias=True, relu=False, clip=False):
        name = f"conv{len(inits)}"
        w = (rng.standard_normal((cout, cin // group, k, k)) * 0.4).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name + "_w"))
        ins = [x, name + "_w"]
        if bias:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(cout) * 0.2).astype(np.float32), name + "_b"))
            ins.append(name + "_b")
        nodes.append(helper.make_node("Conv", ins, [name + "_y"], name=name, group=group,
                                      strides=[stride, stride], pads=[k // 2] * 4))
        out = name + "_y"
        if relu:
            nodes.append(helper.make_node("Relu", [out], [name + "_r"], name=name + "_relu"))
            out = name + "_r"
        if clip:  # MobileNet's ReLU6
            nodes.append(helper.make_node("Clip", [out, "lo", "hi"], [name + "_c"],
                                          name=name + "_clip"))
            out = name + "_c"
        return out

    c = SHAPE[1]
    parts = {
        "plain": lambda x: conv(x, c, c),
        "depthwise": lambda x: conv(x, c, c, group=c),
        "grouped": lambda x: conv(x, c, c, group=2),
        "relu": lambda x: conv(x, c, c, relu=True),
        "relu_kept": lambda x: conv(x, c, c, relu=True),
        "clip_kept": lambda x: conv(x, c, c, clip=True),
        "strided": lambda x: conv(x, c, c, stride=2),
        "no_bias": lambda x: conv(x, c, c, bias=False),
        "pointwise": lambda x: conv(x, c, 2 * c, k=1),
    }
    if kind == "clip_kept":
        inits += [numpy_helper.from_array(np.float32(0), "lo"),
                  numpy_helper.from_array(np.float32(1), "hi")]
    x = "x"
    if kind == "chain":
        x = conv(x, c, c, relu=True)
        x = conv(x, c, c, group=c, stride=2, relu=True)
        x = conv(x, c, 2 * c, k=1, bias=False)
        x = conv(x, 2 * c, 2 * c, stride=2)
    else:
        x = conv(parts[kind](x), c if kind != "pointwise" else 2 * c, c)  # two in a row
    graph = helper.make_graph(
        nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Calibration(quantization.CalibrationDataReader):
    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.standard_normal(SHAPE).astype(np.float32)}
                             for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


@functools.cache
def qdq_model(kind: str, per_channel: bool, activations: str, tmp: str) -> bytes:
    src, dst = os.path.join(tmp, f"{kind}.onnx"), os.path.join(
        tmp, f"{kind}-{per_channel}-{activations}.qdq.onnx")
    onnx.save(float_model(kind), src)
    quantization.quantize_static(
        src, dst, Calibration(1), quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel, weight_type=quantization.QuantType.QInt8,
        activation_type=(quantization.QuantType.QUInt8 if activations == "uint8"
                         else quantization.QuantType.QInt8),
        extra_options={"QDQKeepRemovableActivations": kind in KEEP_ACTIVATIONS})
    with open(dst, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return str(tmp_path_factory.mktemp("qdq"))


def weight_dequantizers(model: onnx.ModelProto) -> list[str]:
    """The DequantizeLinear nodes of int8 initializers (the weights)."""
    inits = {i.name: i for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "DequantizeLinear"
            and n.input[0] in inits and inits[n.input[0]].data_type == TensorProto.INT8]


def output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear making the graph's output."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    last = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    assert last.op_type == "DequantizeLinear"
    return float(inits[last.input[1]])


def onednn_run(rt, model_bytes, feeds, threads):
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model_bytes, backends=BACKENDS) as net:
            return dict(net.assignment), dict(net.constants), net.run(feeds)
    finally:
        lib.set_num_threads(0)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("activations", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("kind", KINDS)
def test_qdq_convolutions_run_int8_within_one_step_of_onnxruntime(rt, tmp, kind, per_channel,
                                                                   activations, threads):
    data = qdq_model(kind, per_channel, activations, tmp)
    model = onnx.load_from_string(data)
    x = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32) * 1.5
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assignment, constants, got = onednn_run(rt, data, {"x": x}, threads)
    weights = weight_dequantizers(model)
    assert weights and all(assignment[n] == "onednn" for n in weights), assignment
    assert all(assignment[n.name] == "onednn" for n in model.graph.node
               if n.op_type in ("Conv", "Relu", "Clip")), assignment
    if kind in KEEP_ACTIVATIONS:
        assert {"Relu", "Clip"} & {n.op_type for n in model.graph.node}
    w_inits = {n.input[0] for n in model.graph.node if n.name in weights}
    assert w_inits <= set(constants) and all(constants[w].dtype == np.int8 for w in w_inits)
    step = output_step(model)
    diff = np.abs(got[model.graph.output[0].name] - want[0])
    assert diff.max() <= step * (1 + 1e-5), (diff.max() / step, kind)
    assert np.mean(diff > step / 2) < 0.02  # off by a step only where a rounding tips it


def test_a_backend_that_does_not_claim_the_pair_sees_folded_float_weights(rt, tmp):
    data = qdq_model("chain", True, "uint8", tmp)
    model = onnx.load_from_string(data)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weights = [n for n in model.graph.node if n.name in weight_dequantizers(model)]
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    for backends in (["cpu"], ["cpu", "onednn"]):  # the cpu backend runs every Conv
        with rt.load(data, backends=backends) as net:
            for n in weights:
                assert net.assignment[n.name] == "cpu (folded)", net.assignment
                w = net.constants[n.output[0]]
                assert w.dtype == np.float32
                np.testing.assert_array_equal(
                    w, inits[n.input[0]].astype(np.float32) * np.expand_dims(
                        inits[n.input[1]], (1, 2, 3)))
            net.run({"x": x})
    with rt.load(data, backends=BACKENDS, optimization="basic") as net:  # no fusing: folded
        assert all(net.assignment[n.name].endswith("(folded)") for n in weights), net.assignment


def test_weights_no_conv_reads_stay_folded(rt):
    """A DequantizeLinear of int8 weights read by a MatMul is folded: only a Conv takes them."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 4)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], name="dq"),
             helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.02), "ws")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 8)).astype(np.float32)
    with rt.load(model, backends=BACKENDS) as net:
        assert net.assignment["dq"].endswith("(folded)"), net.assignment
        np.testing.assert_allclose(net.run({"x": x})["y"],
                                   x @ (w.astype(np.float32) * np.float32(0.02)), rtol=1e-5)


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from conftest import BACKENDS, make_runtime
data = open(sys.argv[2], "rb").read()
x = np.random.default_rng(0).standard_normal((1, 8, 14, 14)).astype(np.float32)
with make_runtime().load(data, backends=BACKENDS) as net:
    net.run({"x": x})
"""

STEP = re.compile(r"^nnplug-onednn: step +\d+ \| (.+?) *\| (.+?) *\| (.+?) *\|")


def test_each_convolution_runs_on_int8_sums(tmp):
    """The profile (NNPLUG_ONEDNN_PROFILE=1) of four QDQ convolutions in a row: each is one of
    oneDNN's int8 convolutions (VNNI, or AMX); the model's input is quantized to int8 once and the
    integers go from one convolution to the next as they are: the only float32
    quantize-dequantize steps left are the input's and the output's."""
    path = os.path.join(tmp, "chain-profiled.onnx")
    with open(path, "wb") as f:
        f.write(qdq_model("chain", True, "uint8", tmp))
    env = {**os.environ, "NNPLUG_ONEDNN_PROFILE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__), path], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    steps = [m.groups() for m in map(STEP.match, out.stderr.splitlines()) if m]
    convs = [(node, impl) for node, what, impl in steps if what == "convolution"]
    assert len(convs) == 4 and all(node.endswith("(Conv)") for node, _ in convs), steps
    for node, impl in convs:
        # int8 products: VNNI's dot products, or AMX's tiles where the CPU has them
        assert impl.startswith(("jit", "brg", "brdgmm")) and ("vnni" in impl or "amx" in impl), \
            (node, impl)
    kinds = [what for _, what, _ in steps]
    assert kinds.count("quantize to int8") == 1, steps
    assert kinds.count("quantize-dequantize") == 2, steps


def test_a_convolution_of_a_float_input_rounds_its_result_to_the_grid(rt):
    """A Conv of int8 weights whose input is not quantized (weights-only) runs in float and
    rounds its result to the grid of the QuantizeLinear -> DequantizeLinear after it, which the
    int8 Conv after it and a Relu read. Small integers and a power-of-two scale: every float sum is exact,
    so both engines give the same bits."""
    rng = np.random.default_rng(5)
    w1 = rng.integers(-3, 4, (8, 4, 3, 3)).astype(np.int8)
    w2 = rng.integers(-3, 4, (8, 8, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.float32(0.5), "ws"),
             numpy_helper.from_array(np.float32(0.75), "s"),
             numpy_helper.from_array(np.uint8(100), "z"),
             numpy_helper.from_array(np.float32(3.0), "so"),
             numpy_helper.from_array(np.uint8(128), "zo")]
    nodes = [helper.make_node("DequantizeLinear", ["w1", "ws"], ["w1f"], name="dq_w1"),
             helper.make_node("DequantizeLinear", ["w2", "ws"], ["w2f"], name="dq_w2"),
             helper.make_node("Conv", ["x", "w1f"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c1", "s", "z"], ["q1"], name="q1"),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"], name="d1"),
             helper.make_node("Conv", ["d1", "w2f"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c2", "so", "zo"], ["q2"], name="q2"),
             helper.make_node("DequantizeLinear", ["q2", "so", "zo"], ["d2"], name="d2"),
             helper.make_node("Relu", ["d1"], ["r1"], name="relu"),  # reads the grid as float
             helper.make_node("Add", ["d2", "r1"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = rng.integers(-4, 5, (1, 4, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for threads in (1, 2):
        assignment, _, got = onednn_run(rt, model.SerializeToString(), {"x": x}, threads)
        assert all(assignment[n.name] == "onednn" for n in nodes), assignment
        np.testing.assert_array_equal(got["y"], want)

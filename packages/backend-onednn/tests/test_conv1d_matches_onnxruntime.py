"""1-D convolutions (audio front ends: wav2vec2's feature extractor, Whisper's two convolutions)
on oneDNN, run as 2-D convolutions of height 1 (graph.c parse_conv, plan_conv.c line_input):
strides, pads, dilations, groups and SAME padding, with a fused GELU, a residual Add, a folded
per-channel Mul/Add, the Transpose an encoder reads them through, and a length known only at
run time, each against onnxruntime at 1 and 2 threads, all of it on onednn."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches, graph_model, onnxruntime_run, run_both
from onnx import TensorProto, helper, numpy_helper

CASES = {
    # name: (input channels, output channels, kernel, length, attributes)
    "wav2vec2-first": (1, 32, 10, 403, {"strides": [5]}),  # raw samples in
    "wav2vec2-k3-s2": (32, 32, 3, 80, {"strides": [2]}),
    "whisper-pads": (20, 24, 3, 60, {"pads": [1, 1]}),
    "whisper-s2-pads": (24, 24, 3, 61, {"strides": [2], "pads": [1, 1]}),
    "uneven-pads-dilated": (16, 16, 3, 40, {"pads": [2, 0], "dilations": [2]}),
    "grouped-positional": (32, 32, 8, 30, {"group": 4, "pads": [4, 4]}),  # wav2vec2's
    "depthwise": (16, 16, 5, 33, {"group": 16, "pads": [2, 2]}),
    "same-upper": (8, 16, 4, 21, {"auto_pad": "SAME_UPPER", "strides": [2]}),
    "kernel-shape-given": (8, 8, 3, 17, {"kernel_shape": [3], "auto_pad": "VALID"}),
}


def gelu(x: str, y: str) -> list:
    """The erf GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    return [helper.make_node("Div", [x, "sqrt2"], [f"{y}_d"]),
            helper.make_node("Erf", [f"{y}_d"], [f"{y}_e"]),
            helper.make_node("Add", [f"{y}_e", "one"], [f"{y}_a"]),
            helper.make_node("Mul", [x, f"{y}_a"], [f"{y}_m"]),
            helper.make_node("Mul", [f"{y}_m", "half"], [y])]


GELU_CONSTANTS = {"sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}


def conv_model(case: str, after: str, seed: int = 0):
    c, oc, k, n, attrs = CASES[case]
    rng = np.random.default_rng(seed)
    g = attrs.get("group", 1)
    x = rng.standard_normal((2, c, n)).astype(np.float32)
    inits = {"w": (rng.standard_normal((oc, c // g, k)) / np.sqrt(c // g * k)).astype(np.float32),
             "b": rng.standard_normal(oc).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if after else "y"], **attrs)]
    if after == "gelu":
        nodes += gelu("c", "y")
        inits.update(GELU_CONSTANTS)
    elif after == "residual":  # the residual has the result's shape: a conv of the same input
        nodes += [helper.make_node("Conv", ["x", "w2"], ["r"], **attrs),
                  helper.make_node("Add", ["c", "r"], ["y"])]
        inits["w2"] = rng.standard_normal((oc, c // g, k)).astype(np.float32)
    return graph_model(nodes, {"x": x}, inits), {"x": x}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("after", ["", "gelu", "residual"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv1d_matches_onnxruntime(rt, case, after, threads):
    model, feeds = conv_model(case, after)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], what=f"{case} {after}")


def feature_extractor(length: int | str = "W", channels=24, seed=1):
    """wav2vec2's pattern: conv -> GELU -> conv -> GELU, a per-channel Mul and Add (a norm's
    affine, which fold into the convolution), then Transpose to (N, T, C) for the encoder."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = {"w1": (rng.standard_normal((c, 1, 10)) / 3).astype(np.float32),
             "w2": (rng.standard_normal((c, c, 3)) / np.sqrt(3 * c)).astype(np.float32),
             "scale": rng.uniform(0.5, 2, (c, 1)).astype(np.float32),
             "shift": rng.standard_normal((c, 1)).astype(np.float32), **GELU_CONSTANTS}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[5]), *gelu("c1", "g1"),
             helper.make_node("Conv", ["g1", "w2"], ["c2"], strides=[2]),
             helper.make_node("Mul", ["c2", "scale"], ["m"]),
             helper.make_node("Add", ["m", "shift"], ["a"]), *gelu("a", "g2"),
             helper.make_node("Transpose", ["g2"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(
        nodes, "extractor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, c])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_feature_extractor_runs_on_onednn(rt, threads):
    model = feature_extractor(length=1603)
    x = np.random.default_rng(threads).standard_normal((1, 1, 1603)).astype(np.float32)
    placed, got, want = run_both(rt, model, {"x": x}, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_convolutions_of_a_length_known_at_run_time_run_on_onednn(rt, threads):
    """Audio of any length: the convolutions stay on onednn (a plan per length; the light
    nodes between them, whose shapes change too, go to cpu: kernels.c
    changing_shape_not_worth_a_plan)."""
    model = feature_extractor()
    rng = np.random.default_rng(threads)
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=["onednn", "cpu"]) as net:
            convs = [n for n, op in net.op_types.items() if op == "Conv"]
            assert {net.assignment[n] for n in convs} == {"onednn"}, net.assignment
            for n in (400, 1603, 30):
                x = rng.standard_normal((1, 1, n)).astype(np.float32)
                got = net.run({"x": x})["y"]
                assert_matches(got, onnxruntime_run(model, {"x": x})[0], what=f"length {n}")
    finally:
        lib.set_num_threads(0)


def test_a_constant_that_broadcasts_over_the_batch_is_not_taken_per_channel(rt):
    """A (C, 1, 1) constant times a (N, C, W) result with N == C scales each batch entry, not
    each channel: folding it into the weights as one value per output channel (as a 2-D
    convolution's (C, 1, 1) constant would be) gives wrong answers."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 4, 12)).astype(np.float32)
    inits = {"w": rng.standard_normal((4, 4, 3)).astype(np.float32),
             "s": np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1)}
    model = graph_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                         helper.make_node("Mul", ["c", "s"], ["y"])], {"x": x}, inits)
    placed, got, want = run_both(rt, model, {"x": x}, 1)
    assert placed["Conv_0"] == "onednn", placed
    assert_matches(got[0], want[0])


def test_a_quantized_1d_convolution_matches_onnxruntime(rt):
    """A QDQ Conv1d: its int8 weights are dequantized once at load (oneDNN's 1-D path is
    float; graph.c declines int8 weights on it) and its input goes through the quantization
    grid as onnxruntime's does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 20)).astype(np.float32)
    inits = {"wq": rng.integers(-100, 100, (8, 8, 3)).astype(np.int8),
             "ws": np.float32(0.01), "wz": np.int8(0), "xs": np.float32(0.05),
             "xz": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1])]
    model = graph_model(nodes, {"x": x}, inits)
    placed, got, want = run_both(rt, model, {"x": x}, 1)
    assert placed["Conv_3"] == "onednn", placed
    assert_matches(got[0], want[0])


def test_bf16_hint_takes_1d_convolutions_within_its_bound(rt):
    """Under the bf16 hint a 1-D convolution's products are bf16 where the CPU has AMX: within
    the hint's bound of onnxruntime's float32 (2e-2 of the output's range, see
    test_precision_hint_sets_bf16_products.py)."""
    model, feeds = conv_model("whisper-pads", "gelu")
    want = onnxruntime_run(model, feeds)[0]
    targets = {"onednn": {"kind": "onednn", "precision": "bf16"}}
    with rt.load(model, backends=["onednn", "cpu"], targets=targets) as net:
        assert set(net.assignment.values()) == {"onednn"}, net.assignment
        got = net.run(feeds)["y"]
    assert_matches(got, want, rtol=2e-2)

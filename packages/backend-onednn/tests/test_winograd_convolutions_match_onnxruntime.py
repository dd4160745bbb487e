"""3x3 stride-1 convolutions of 64 or more channels run as Winograd F(2x2, 3x3) (a batched
matmul between two transforms, see docs/backends/onednn.md): against onnxruntime with random
weights, bias and inputs, over the paddings, odd planes, batches and post-ops that change the
transforms' code paths, at 1 and 2 threads; a NaN or infinity in the input gives what the direct
convolution gives; NNPLUG_ONEDNN_WINOGRAD=0 turns it off."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches, graph_model, onednn_log, run_both
from onnx import helper

R = np.random.default_rng(2024)


def rand(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def conv_model(shape, oc, pads=(1, 1, 1, 1), auto_pad=None, bias="const", after=(), residual=None, bn=False):
    """x (shape) -> Conv 3x3 (oc) [-> BatchNormalization] [+ residual] -> the ops `after`.
    bias: "const", "input" (a graph input) or None; residual: "input" (x itself, oc == C) or
    "conv" (the result of a first 3x3 convolution that the second one also reads)."""
    c = shape[1]
    feeds = {"x": rand(*shape)}
    inits = {"w": rand(oc, c, 3, 3, scale=1 / np.sqrt(9 * c))}
    nodes, x = [], "x"
    if residual == "conv":
        inits["w0"] = rand(c, c, 3, 3, scale=1 / np.sqrt(9 * c))
        nodes.append(node("Conv", ["x", "w0"], ["x0"], "conv0", pads=[1, 1, 1, 1]))
        x = "x0"
    ins = [x, "w"]
    if bias == "const":
        inits["b"] = rand(oc)
        ins.append("b")
    elif bias == "input":
        feeds["b"] = rand(oc)
        ins.append("b")
    kw = {"auto_pad": auto_pad} if auto_pad else {"pads": list(pads)}
    nodes.append(node("Conv", ins, ["y0"], "conv", **kw))
    y = "y0"
    if bn:
        inits.update(s=rand(oc), sh=rand(oc), m=rand(oc), v=(np.abs(rand(oc)) + 0.1).astype(np.float32))
        nodes.append(node("BatchNormalization", [y, "s", "sh", "m", "v"], ["yb"], "bn"))
        y = "yb"
    if residual:
        nodes.append(node("Add", [y, x], ["ya"], "add"))
        y = "ya"
    for i, (op, attrs, extra) in enumerate(after):
        for k, v in extra.items():
            inits[k] = np.asarray(v, np.float32)
        nodes.append(node(op, [y, *extra], [f"p{i}"], f"post{i}", **attrs))
        y = f"p{i}"
    return graph_model(nodes, feeds, inits, opset=17), feeds


RELU = ("Relu", {}, {})
CASES = {
    "pad1_relu": dict(shape=(1, 64, 28, 28), oc=64, after=[RELU]),
    "no_padding_odd_plane": dict(shape=(1, 64, 15, 13), oc=72, pads=(0, 0, 0, 0)),
    "asymmetric_padding": dict(shape=(1, 72, 12, 11), oc=64, pads=(0, 1, 2, 1), after=[RELU]),
    "same_upper_odd": dict(shape=(1, 64, 11, 11), oc=64, auto_pad="SAME_UPPER"),
    "batch2_no_bias_leaky_relu": dict(shape=(2, 80, 10, 12), oc=96, bias=None, after=[("LeakyRelu", {"alpha": 0.1}, {})]),
    "runtime_bias_clip": dict(shape=(1, 64, 14, 14), oc=128, bias="input",
                              after=[("Clip", {}, {"lo": 0.0, "hi": 0.5})]),
    "folded_batch_norm_relu": dict(shape=(1, 128, 16, 16), oc=64, bn=True, after=[RELU]),
    "residual_input_relu": dict(shape=(1, 64, 13, 13), oc=64, residual="input", after=[RELU]),
    "residual_conv_relu": dict(shape=(1, 64, 14, 14), oc=64, residual="conv", after=[RELU]),
    "wide_256_to_256": dict(shape=(1, 256, 14, 14), oc=256, after=[RELU]),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_winograd_convolution_matches_onnxruntime(rt, case, threads):
    model, feeds = conv_model(**CASES[case])
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert assignment["conv"] == "onednn", assignment
    assert_matches(got[0], want[0], what=f"{case}, {threads} thread(s)")


@pytest.mark.parametrize("threads", [1, 2])
def test_nan_and_infinity_in_the_input_give_the_direct_convolutions_answer(rt, threads):
    """A NaN and an infinity in the input: the outputs that read them are NaN or infinite
    exactly where onnxruntime's are (Winograd's tiles would spread them wider), the rest match."""
    model, feeds = conv_model((1, 64, 12, 12), 64)
    feeds["x"][0, 3, 2, 2] = np.nan
    feeds["x"][0, 9, 8, 5] = np.inf
    _, got, want = run_both(rt, model, feeds, threads)
    g, w = got[0], want[0]
    assert np.array_equal(np.isnan(g), np.isnan(w)), "NaN positions differ"
    assert np.array_equal(np.isposinf(g), np.isposinf(w)) and np.array_equal(np.isneginf(g), np.isneginf(w))
    fin = np.isfinite(w)
    assert fin.sum() > 0.8 * w.size  # 2 x 9 pixels x 64 channels are not
    assert_matches(g[fin], w[fin], what="finite outputs")


SETUP = """
from test_winograd_convolutions_match_onnxruntime import CASES, conv_model
import numpy as np
model, feeds = conv_model(**CASES[sys.argv[2]])
if len(sys.argv) > 3:
    feeds["x"][0, 0, 0, 0] = np.nan
"""


def kinds(*args, env=None):
    return [ln.split(",")[3] for ln in onednn_log(SETUP, *args, env=env)]


def test_the_convolution_runs_as_one_batched_matmul():
    """With every input finite the direct convolution is not run: one matmul, no convolution."""
    k = kinds("pad1_relu")
    assert k.count("matmul") == 1 and "convolution" not in k, k


def test_a_nan_in_the_input_runs_the_direct_convolution_instead():
    k = kinds("pad1_relu", "nan")
    assert "matmul" not in k and k.count("convolution") == 1, k


def test_winograd_can_be_turned_off():
    k = kinds("pad1_relu", env={"NNPLUG_ONEDNN_WINOGRAD": "0"})
    assert "matmul" not in k and k.count("convolution") == 1, k


def test_concurrent_runs_of_one_network_match_onnxruntime(rt):
    """Four host threads run one loaded network at once, each its own input: every transform
    runs in a team of its own and every result is its own input's."""
    from concurrent.futures import ThreadPoolExecutor

    from conftest import BACKENDS, onnxruntime_run

    model, feeds = conv_model(**CASES["residual_conv_relu"])
    inputs = [rand(*feeds["x"].shape) for _ in range(8)]
    want = [onnxruntime_run(model, {"x": x})[0] for x in inputs]
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(2)
        with rt.load(model, backends=BACKENDS) as net:
            name = net.outputs[0].name
            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(lambda x: net.run({"x": x})[name], inputs * 3))
    finally:
        lib.set_num_threads(0)
    for i, g in enumerate(got):
        assert_matches(g, want[i % len(inputs)], what=f"run {i}")

"""3x3 stride-1 convolutions with 32+ input and 64+ output channels run as Winograd F(2x2, 3x3)
(conv_winograd.c) and match onnxruntime on random weights and inputs at 1 and 3 threads, with
the same answer at both: odd output sizes (partial tiles), no pads and asymmetric pads, batches,
bias, residual and activation epilogues, a folded BatchNormalization, and NaN and infinity in
the input or the weights (which take the direct convolution, so they land where onnxruntime's
do). NNPLUG_CPU_WINOGRAD=0 gives the direct convolution."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper, numpy_helper
from test_depthwise_conv_matches_onnxruntime import check_against_onnxruntime

# name: (N, C, H, W, M, pads)
SHAPES = {
    "56x56-64": (1, 64, 56, 56, 64, [1, 1, 1, 1]),
    "28x28-128-96": (1, 128, 28, 28, 96, [1, 1, 1, 1]),
    "7x7-256-512": (1, 256, 7, 7, 512, [1, 1, 1, 1]),
    "13x11-batch-2": (2, 32, 13, 11, 64, [1, 1, 1, 1]),
    "no-pads-odd": (1, 40, 9, 15, 70, [0, 0, 0, 0]),
    "asymmetric-pads": (1, 33, 10, 12, 64, [2, 0, 1, 2]),
    "smallest-6x6": (1, 32, 6, 6, 64, [1, 1, 1, 1]),
}
EPILOGUES = ["plain", "bias-relu", "bias-residual-relu", "sigmoid"]


def winograd_model(case, epilogue="bias-relu", *, seed=0, bn=False, x=None, w=None):
    n, c, h, wd, m, pads = SHAPES[case]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd), dtype=np.float32) if x is None else x
    w = rng.standard_normal((m, c, 3, 3), dtype=np.float32) / np.float32(np.sqrt(9 * c)) if w is None else w
    inits = [numpy_helper.from_array(w, "w")]
    bias = epilogue.startswith("bias")
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m, dtype=np.float32), "b"))
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["conv"], name="conv",
                              kernel_shape=[3, 3], pads=pads)]
    last = "conv"
    if bn:  # folded into the convolution's weights and bias
        for name, v in (("scale", rng.uniform(0.5, 2, m)), ("shift", rng.standard_normal(m)),
                        ("mean", rng.standard_normal(m)), ("var", rng.uniform(0.1, 3, m))):
            inits.append(numpy_helper.from_array(v.astype(np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", [last, "scale", "shift", "mean", "var"], ["bn"], name="bn"))
        last = "bn"
    if "residual" in epilogue:
        feeds["r"] = rng.standard_normal((n, m, oh, ow), dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, feeds["r"].shape))
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"], name="res"))
        last = "sum"
    act = {"bias-relu": "Relu", "bias-residual-relu": "Relu", "sigmoid": "Sigmoid"}.get(epilogue)
    if act or bn:
        nodes.append(helper.make_node(act or "Relu", [last], ["act"], name="act"))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_winograd_convolution_matches_onnxruntime(rt, case, epilogue):
    model, feeds = winograd_model(case, epilogue)
    check_against_onnxruntime(rt, model, feeds, f"{case} {epilogue}")


@pytest.mark.parametrize("case", ["56x56-64", "13x11-batch-2"])
def test_folded_batch_normalization_matches_onnxruntime(rt, case):
    model, feeds = winograd_model(case, "plain", bn=True)
    check_against_onnxruntime(rt, model, feeds, f"{case} with BatchNormalization")


def run(rt, model, feeds):
    with rt.load(model, backends=["cpu"]) as net:
        return net.run(feeds)["y"]


def test_winograd_is_the_path_taken_and_can_be_turned_off(rt, monkeypatch):
    """Winograd's sums round differently from the direct convolution's: the two results are
    both within onnxruntime's tolerance and not equal bit for bit."""
    model, feeds = winograd_model("28x28-128-96", "bias-relu")
    want = onnxruntime_run(model, feeds)[0]
    fast = run(rt, model, feeds)
    monkeypatch.setenv("NNPLUG_CPU_WINOGRAD", "0")  # read when the network is loaded
    direct = run(rt, model, feeds)
    for got in (fast, direct):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * float(np.abs(want).max()))
    assert not np.array_equal(fast, direct)


def assert_same_nonfinite(got, want, what):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=f"{what}: -inf positions")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=2e-6 * float(np.abs(want[finite]).max()),
                               err_msg=what)


@pytest.mark.parametrize("where", ["nan-inside", "inf-last-row-and-column", "-inf-first-pixel"])
def test_nonfinite_input_lands_where_onnxruntime_puts_it(rt, threads, where):
    """A NaN or infinity would reach all four outputs of a tile through the transform; the run
    that finds one computes the direct convolution instead."""
    n, c, h, w, m, pads = SHAPES["13x11-batch-2"]
    x = np.random.default_rng(3).standard_normal((n, c, h, w), dtype=np.float32)
    if where == "nan-inside":
        x[1, 5, 6, 4] = np.nan
    elif where == "inf-last-row-and-column":  # under a partial tile: 13 x 11 is odd both ways
        x[0, 2, h - 1, w - 1] = np.inf
    else:
        x[0, 0, 0, 0] = -np.inf
    model, feeds = winograd_model("13x11-batch-2", "plain", x=x)
    want = onnxruntime_run(model, feeds)[0]
    assert_same_nonfinite(run(rt, model, feeds), want, where)
    clean = {"x": np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)}  # the next run is Winograd again
    np.testing.assert_allclose(run(rt, model, clean), onnxruntime_run(model, clean)[0], rtol=1e-5, atol=1e-5)


def test_nonfinite_weight_takes_the_direct_convolution(rt, threads, monkeypatch):
    """The same bits as NNPLUG_CPU_WINOGRAD=0 gives. (Where such a weight meets the zero padding,
    the direct convolution's 0 * inf is NaN, as onnx.reference has it; onnxruntime skips the
    padded taps and gives the infinity.)"""
    w = np.random.default_rng(4).standard_normal((64, 32, 3, 3), dtype=np.float32) / 20
    w[7, 3, 1, 2] = np.inf
    w[9, 0, 1, 1] = np.nan
    model, feeds = winograd_model("smallest-6x6", "plain", w=w)
    got = run(rt, model, feeds)
    assert np.isinf(got[0, 7]).any() and np.isnan(got[0, 9]).all()
    monkeypatch.setenv("NNPLUG_CPU_WINOGRAD", "0")
    np.testing.assert_array_equal(got, run(rt, model, feeds))

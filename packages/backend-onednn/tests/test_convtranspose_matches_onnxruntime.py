"""ConvTranspose on oneDNN's deconvolution (plan_conv.c build_deconv): strides, pads (which
crop the result), output padding, dilations, groups, a constant or run-time bias and a fused
Relu, each against onnxruntime at 1 and 2 threads, all of it on onednn; what the backend
leaves to cpu (output_shape, SAME padding, weights that are not finite) is left there and
still right."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import graph_model, run_both
from onnx import helper

CASES = {
    # name: (input channels, output channels, kernel, attributes)
    "stride2-k2": (16, 8, 2, {"strides": [2, 2]}),  # a U-Net's up-sampling
    "stride2-k3-pads-outpad": (8, 8, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                         "output_padding": [1, 1]}),
    "stride2-k4-pads": (16, 16, 4, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # a GAN's
    "stride1-k3-pads": (8, 4, 3, {"pads": [1, 0, 1, 2]}),
    "rgb-in": (3, 16, 2, {"strides": [2, 2]}),
}
"""Shapes oneDNN 3.2 has a jit or brgemm deconvolution for: the backend takes them."""

LEFT = {
    "dilated": (16, 16, 3, {"dilations": [2, 2], "strides": [1, 2]}),
    "grouped": (16, 16, 3, {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise": (16, 16, 4, {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "valid-uneven-strides": (16, 16, 3, {"auto_pad": "VALID", "strides": [2, 1]}),
    "few-channels": (4, 6, 3, {"strides": [2, 2]}),
}
"""Shapes it has only its reference kernel for (slower than the cpu backend's): declined
when the plan is checked, so cpu runs them."""

def deconv_model(case: str, bias: str | None, relu: bool, seed: int = 0):
    c, oc, k, attrs = {**CASES, **LEFT}[case]
    rng = np.random.default_rng(seed)
    g = attrs.get("group", 1)
    x = rng.standard_normal((2, c, 7, 9)).astype(np.float32)
    w = (rng.standard_normal((c, oc // g, k, k)) / np.sqrt(c * k)).astype(np.float32)
    inputs, inits = {"x": x}, {"w": w}
    names = ["x", "w"]
    if bias == "constant":
        inits["b"] = rng.standard_normal(oc).astype(np.float32)
        names.append("b")
    elif bias == "input":
        inputs["b"] = rng.standard_normal(oc).astype(np.float32)
        names.append("b")
    nodes = [helper.make_node("ConvTranspose", names, ["t" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    return graph_model(nodes, inputs, inits), inputs


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias,relu", [(None, False), ("constant", True), ("input", False)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_convtranspose_matches_onnxruntime(rt, case, bias, relu, threads):
    model, feeds = deconv_model(case, bias, relu)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", sorted(LEFT))
def test_shapes_without_a_fast_kernel_run_on_cpu_and_right(rt, case):
    model, feeds = deconv_model(case, "constant", True)
    placed, got, want = run_both(rt, model, feeds, 1)
    assert placed["ConvTranspose_0"] == "cpu", placed
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_what_it_does_not_take_runs_on_cpu_and_right(rt):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    shaped = graph_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2],
                                           output_shape=[10, 10])], {"x": x}, {"w": w})
    same = graph_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2],
                                         auto_pad="SAME_UPPER")], {"x": x}, {"w": w})
    w_inf = w.copy()
    w_inf[1, 0, 2, 2] = np.inf
    nonfinite = graph_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"])], {"x": x},
                            {"w": w_inf})
    for model in (shaped, same, nonfinite):
        placed, got, want = run_both(rt, model, {"x": x}, 1)
        assert list(placed.values()) == ["cpu"], placed
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_bf16_hint_stays_within_its_bound(rt):
    """With the precision hint the deconvolution's products may be bf16 (on AMX): 2e-2 of the
    output's range, the bound test_precision_hint_sets_bf16_products.py explains."""
    model, feeds = deconv_model("stride2-k2", "constant", True)
    with rt.load(model, backends=["onednn", "cpu"],
                 targets={"onednn": {"kind": "onednn", "precision": "bf16"}}) as net:
        assert set(net.assignment.values()) == {"onednn"}, net.assignment
        got = net.run(feeds)["y"]
    _, _, want = run_both(rt, model, feeds, 1)
    assert np.abs(got - want[0]).max() <= 2e-2 * np.abs(want[0]).max()


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("case", ["stride2-k2", "stride2-k3-pads-outpad"])
def test_a_nonfinite_input_reaches_the_outputs_onnxruntimes_does(rt, case, special):
    model, feeds = deconv_model(case, "constant", True)
    feeds["x"][0, 1, 3, 4] = special
    _, got, want = run_both(rt, model, feeds, 2)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    np.testing.assert_array_equal(np.isinf(got[0]), np.isinf(want[0]))
    finite = np.isfinite(want[0])
    np.testing.assert_allclose(got[0][finite], want[0][finite], rtol=1e-4, atol=1e-5)

"""A convolution whose constant weights hold an infinity or a NaN is declined (the cpu backend
runs it): oneDNN's kernels, and this backend's Winograd transform most of all, spread such a
weight over outputs that ONNX's zero padding leaves alone. The answer is then the one ONNX
defines (onnx.reference) and onnxruntime's own kernels give (ORT_ENABLE_BASIC; see the cpu
backend's test_nonfinite_conv_weights_meet_the_zero_padding.py for why not ORT_ENABLE_ALL). The
same convolution with finite weights stays on onednn."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, graph_model
from onnx import helper
from onnx.reference import ReferenceEvaluator

# name: (C, H, OC, kernel, group): Winograd-sized, 1x1 padded, depthwise, grouped 5x5
SHAPES = {"winograd-3x3": (64, 16, 64, 3, 1), "1x1-padded": (16, 8, 16, 1, 1),
          "depthwise": (32, 12, 32, 3, 32), "grouped-5x5": (8, 12, 8, 5, 2)}


def conv(case, poison):
    c, h, oc, k, group = SHAPES[case]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((oc, c // group, k, k)).astype(np.float32) / np.float32(c * k)
    if poison is not None:
        w[0, 0, 0, 0] = w[oc - 1, -1, -1, -1] = poison
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[max(k // 2, 1)] * 4, group=group)]
    return graph_model(nodes, {"x": x}, {"w": w, "b": rng.standard_normal(oc).astype(np.float32)}), {"x": x}


def onnxruntime_basic_run(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("poison", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_nonfinite_weights_are_declined_and_meet_the_zero_padding(rt, case, poison):
    model, feeds = conv(case, poison)
    with rt.load(model, backends=BACKENDS) as net:
        assert net.assignment == {"conv": "cpu"}, net.assignment
        got = net.run(feeds)["y"]
    for want, who in ((onnxruntime_basic_run(model, feeds), "onnxruntime"),
                      (ReferenceEvaluator(model).run(None, feeds)[0], "onnx.reference")):
        assert not np.isfinite(want).all()
        for same in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(same(got), same(want), err_msg=f"{case}: {same.__name__} against {who}")
        ok = np.isfinite(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5, err_msg=f"{case} against {who}")


@pytest.mark.parametrize("case", sorted(set(SHAPES) - {"1x1-padded"}))  # oneDNN wants pads under the kernel
def test_finite_weights_stay_on_onednn(rt, case):
    model, feeds = conv(case, None)
    with rt.load(model, backends=BACKENDS) as net:
        assert net.assignment == {"conv": "onednn"}, net.assignment

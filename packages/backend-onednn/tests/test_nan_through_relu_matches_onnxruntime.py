"""A NaN that reaches a Relu stays NaN, as onnxruntime and the cpu backend have it: oneDNN's own
relu is max(x, 0) and turns it into 0, so Relu runs as elu(alpha 0) then linear(1, 0) (plan_steps.c
is_relu), alone and fused into a convolution, a matrix product, a binary op and a
BatchNormalization; negative inputs still give +0 (not elu's -0). At 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, graph_model, onnxruntime_run
from onnx import helper


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=outs[0], **attrs)


def case_model(case, rng):
    c = 64
    x = rng.standard_normal((1, c, 12, 12)).astype(np.float32)
    x[0, 3, 5, 5] = np.nan
    x[0, 7, 0, 0] = -np.inf
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) / 24
    bn = {"s": rng.uniform(0.5, 2, c).astype(np.float32), "t": rng.standard_normal(c).astype(np.float32),
          "m": rng.standard_normal(c).astype(np.float32), "v": rng.uniform(0.5, 2, c).astype(np.float32)}
    if case == "relu":
        return graph_model([node("Relu", ["x"], ["y"])], {"x": x}), {"x": x}
    if case == "conv-relu":  # 3x3, 64 channels, 12x12: Winograd-sized, so the NaN input takes the direct kernel
        return graph_model([node("Conv", ["x", "w"], ["c"], pads=[1] * 4), node("Relu", ["c"], ["y"])],
                           {"x": x}, {"w": w}), {"x": x}
    if case == "conv-1x1-residual-relu":
        w1 = rng.standard_normal((c, c, 1, 1)).astype(np.float32) / 8
        r = rng.standard_normal(x.shape).astype(np.float32)
        return graph_model([node("Conv", ["x", "w"], ["c"]), node("Add", ["c", "r"], ["a"]), node("Relu", ["a"], ["y"])],
                           {"x": x, "r": r}, {"w": w1}), {"x": x, "r": r}
    if case == "matmul-relu":
        a = rng.standard_normal((8, 32)).astype(np.float32)
        a[2, 5] = np.nan
        b = rng.standard_normal((32, 16)).astype(np.float32)
        return graph_model([node("MatMul", ["a", "b"], ["p"]), node("Relu", ["p"], ["y"])], {"a": a}, {"b": b}), {"a": a}
    if case == "add-relu":
        return graph_model([node("Add", ["x", "x"], ["a"]), node("Relu", ["a"], ["y"])], {"x": x}), {"x": x}
    if case == "batchnorm-relu":
        return graph_model([node("BatchNormalization", ["x", "s", "t", "m", "v"], ["b"]), node("Relu", ["b"], ["y"])],
                           {"x": x}, bn), {"x": x}
    if case == "batchnorm-fed-relu":  # parameters at run time: oneDNN's own BatchNormalization primitive
        feeds = {"x": x, **bn}
        return graph_model([node("BatchNormalization", ["x", "s", "t", "m", "v"], ["b"]), node("Relu", ["b"], ["y"])],
                           feeds), feeds
    raise AssertionError(case)


CASES = ["relu", "conv-relu", "conv-1x1-residual-relu", "matmul-relu", "add-relu", "batchnorm-relu",
         "batchnorm-fed-relu"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_nan_through_relu_matches_onnxruntime(rt, case, threads):
    model, feeds = case_model(case, np.random.default_rng(5))
    want = onnxruntime_run(model, feeds)[0]
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=BACKENDS) as net:
            assert set(net.assignment.values()) == {"onednn"}, net.assignment
            got = net.run(feeds)["y"]
    finally:
        lib.set_num_threads(0)
    assert np.isnan(want).any(), "the NaN must reach the output"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{case}: NaN positions")
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"{case}: signs of zeros")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4 * float(np.abs(want[ok]).max()), err_msg=case)

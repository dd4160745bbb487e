"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear to and from uint8 / int8 with
float32 scales, per tensor and per axis, run as branch-free loops (op_quant.c quant8, dequant8:
QDQ models spent most of their time in the per-element generic path). Their results equal
onnxruntime's bit for bit: ties rounded to even, saturation at both ends, zero points at the
ends of their range, NaN and infinities, -0, values far past the range, odd lengths (the
vector loops' tails) and axis runs of one element."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import one_node_model

RANGE = {np.uint8: (0, 255), np.int8: (-128, 127)}


def onnxruntime(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def awkward(rng, n, scale):
    """n floats: random ones, exact ties (k + 0.5 steps), far past the range, and specials."""
    x = rng.uniform(-300, 300, n).astype(np.float32) * np.float32(scale)
    ties = (rng.integers(-200, 200, n).astype(np.float32) + np.float32(0.5)) * np.float32(scale)
    x = np.where(rng.random(n) < 0.3, ties, x)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 2.5 * scale,
                        -2.5 * scale, 127.5 * scale, -128.5 * scale, 255.5 * scale], np.float32)
    x[:len(special)] = special[:n]
    return x


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("n", [1, 7, 33, 1000, 20001])
def test_per_tensor_quantize_and_dequantize_match_exactly(rt, dt, n):
    rng = np.random.default_rng(n)
    for zp in (*RANGE[dt], 0, 3):
        for scale in (np.float32(0.25), np.float32(0.0137)):
            x = awkward(rng, n, scale)
            model, feeds = one_node_model("QuantizeLinear", [x, scale, dt(zp)], opset=19,
                                          const_inputs=(1, 2))
            with rt.load(model) as net:
                q = net.run(feeds)["out0"]
            want = onnxruntime(model, feeds)[0]
            np.testing.assert_array_equal(q, want, err_msg=f"zp={zp} scale={scale}")
            model, feeds = one_node_model("DequantizeLinear", [want, scale, dt(zp)], opset=19,
                                          const_inputs=(1, 2))
            with rt.load(model) as net:
                got = net.run(feeds)["out0"]
            np.testing.assert_array_equal(got.view(np.uint32),
                                          onnxruntime(model, feeds)[0].view(np.uint32))


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("shape,axis", [((3, 5, 7), 1), ((4, 9), 1), ((6, 2, 3, 3), 0),
                                        ((5, 17), 0)], ids=["middle", "last", "weights", "rows"])
def test_per_axis_quantize_and_dequantize_match_exactly(rt, dt, shape, axis):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    c = shape[axis]
    scale = rng.uniform(0.01, 0.5, c).astype(np.float32)
    lo, hi = RANGE[dt]
    zp = np.array([[lo, hi, 0, 1][i % 4] for i in range(c)], dt)
    x = awkward(rng, int(np.prod(shape)), 0.1).reshape(shape)
    model, feeds = one_node_model("QuantizeLinear", [x, scale, zp], dict(axis=axis), opset=19,
                                  const_inputs=(1, 2))
    with rt.load(model) as net:
        q = net.run(feeds)["out0"]
    want = onnxruntime(model, feeds)[0]
    np.testing.assert_array_equal(q, want)
    model, feeds = one_node_model("DequantizeLinear", [want, scale, zp], dict(axis=axis),
                                  opset=19, const_inputs=(1, 2))
    with rt.load(model) as net:
        got = net.run(feeds)["out0"]
    np.testing.assert_array_equal(got.view(np.uint32), onnxruntime(model, feeds)[0].view(np.uint32))


@pytest.mark.parametrize("n", [1, 31, 4096])
def test_dynamic_quantize_linear_matches_exactly(rt, n):
    rng = np.random.default_rng(n)
    for lo, hi in ((-3, 5), (0.5, 9), (-7, -1), (-1e-3, 1e-3)):
        x = rng.uniform(lo, hi, n).astype(np.float32)
        model, feeds = one_node_model("DynamicQuantizeLinear", [x], outputs=3, opset=11)
        with rt.load(model) as net:
            got = net.run(feeds)
        want = onnxruntime(model, feeds)
        for k, w in enumerate(want):
            np.testing.assert_array_equal(got[f"out{k}"], w)

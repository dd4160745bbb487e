"""Dilated convolutions whose outer taps read only padding for every output (DeepLabV3's atrous
convolutions: dilation 24 and 36 over a 20 x 20 map) run with the taps that read the input,
which gives the same sums; these cases hold them to onnxruntime at 1 and 2 threads: every tap
dropped, one side's dropped, along one axis, with strides, 1-D, none dropped; and an infinite weight on a tap that
reads only padding (0 * inf is NaN, which ONNX's definition keeps: nothing is dropped then)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, one_node_model, onnxruntime_run, run_cpu

R = np.random.default_rng(2406)


def f32(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


# name: (input shape, weight shape, attributes)
CASES = {
    "deeplab_dilation_24_centre_only": ((1, 32, 20, 20), (16, 32, 3, 3),
                                        dict(dilations=[24, 24], pads=[24, 24, 24, 24])),
    "deeplab_dilation_36_with_bias_and_relu_after": ((1, 24, 20, 20), (8, 24, 3, 3),
                                                     dict(dilations=[36, 36], pads=[36, 36, 36, 36])),
    "dilation_12_every_tap_reads": ((1, 8, 20, 20), (8, 8, 3, 3),
                                    dict(dilations=[12, 12], pads=[12, 12, 12, 12])),
    "only_rows_trimmed": ((1, 8, 5, 30), (4, 8, 3, 3),
                          dict(dilations=[8, 2], pads=[8, 2, 8, 2])),
    "one_side_only": ((1, 6, 9, 9), (4, 6, 3, 3),
                      dict(dilations=[10, 10], pads=[20, 20, 0, 0])),
    "five_taps_three_live": ((1, 4, 12, 12), (4, 4, 5, 5),
                             dict(dilations=[7, 7], pads=[14, 14, 14, 14])),
    "strided": ((2, 6, 11, 13), (5, 6, 3, 3),
                dict(dilations=[16, 16], pads=[16, 16, 16, 16], strides=[2, 3])),
    "grouped": ((1, 8, 10, 10), (8, 2, 3, 3),
                dict(dilations=[12, 12], pads=[12, 12, 12, 12], group=4)),
    "one_dimensional": ((1, 6, 15), (4, 6, 3), dict(dilations=[20], pads=[20, 20])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dilated_convolution_matches_onnxruntime(rt, threads, case):
    xs, ws, attrs = CASES[case]
    bias = "bias" in case
    inputs = [f32(*xs), f32(*ws)] + ([f32(ws[0])] if bias else [])
    model, feeds = one_node_model("Conv", inputs, attrs, opset=17,
                                  const_inputs=(1, 2) if bias else (1,))
    want = onnxruntime_run(model, feeds)[0]
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}
    assert_close(got[0], want, rtol=1e-5, atol=1e-5, what=case)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_a_nonfinite_weight_on_a_tap_that_reads_padding_makes_nan_as_the_definition(rt, bad):
    """ONNX pads with zeros, and 0 * inf is NaN: so nothing is dropped when a weight is not
    finite, and the channel is NaN as in ONNX's reference implementation. (onnxruntime skips
    the padding there and gives numbers: the other channels are compared with it.)"""
    from onnx.reference import ReferenceEvaluator

    x, w = f32(1, 4, 20, 20), f32(4, 4, 3, 3)
    w[1, 2, 0, 0] = bad  # a corner tap: at dilation 24 it reads only padding
    model, feeds = one_node_model("Conv", [x, w], dict(dilations=[24, 24], pads=[24, 24, 24, 24]),
                                  opset=17, const_inputs=(1,))
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    got = run_cpu(rt, model, feeds)[0][0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(reference))
    assert np.isnan(got[0, 1]).all()
    ok = ~np.isnan(reference)
    assert_close(got[ok], onnxruntime_run(model, feeds)[0][ok], rtol=1e-5, atol=1e-5,
                 what="the other channels")

"""InstanceNormalization, GroupNormalization, LayerNormalization and MeanVarianceNormalization of
channels whose mean is large against their spread (a constant channel of 1e4 to 1e20 included)
give the formula's answer, taken in float64: a constant channel gives exactly the bias (0 for
MeanVarianceNormalization). onnxruntime 1.32 does not here (a constant InstanceNormalization
channel of 1e4 gives 2x the bias, of 1e5 or more 0; GroupNormalization gives NaN from 1e8;
MeanVarianceNormalization NaN for any constant channel), so the reference is the formula."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_node_model, run_cpu

SCALE = np.float32([1.5, 2.0])
BIAS = np.float32([0.25, -0.5])


def formula(x, scale, bias, eps=1e-5):
    xd = x.astype(np.float64)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    return (xd - mu) / np.sqrt(var + eps) * scale[None, :, None] + bias[None, :, None]


@pytest.mark.parametrize("op", ["InstanceNormalization", "GroupNormalization", "LayerNormalization"])
@pytest.mark.parametrize("value", [1.0, 1e4, 1e8, 1e20])
def test_large_channels_match_the_formula(rt, op, value):
    rng = np.random.default_rng(3)
    x = np.full((1, 2, 64), value, np.float32)  # channel 0 constant, channel 1 spread by 1e-3
    x[0, 1] = rng.standard_normal(64).astype(np.float32) * np.float32(max(value * 1e-3, 1e-3)) + np.float32(value)
    if op == "LayerNormalization":  # over the last axis, one scale and bias per element
        inputs, attrs = [x, np.full(64, 1.5, np.float32), np.full(64, 0.25, np.float32)], {"axis": -1}
        want = formula(x, np.float32([1.5, 1.5]), np.float32([0.25, 0.25]))
    else:
        inputs, attrs = [x, SCALE, BIAS], ({"num_groups": 2} if op == "GroupNormalization" else {})
        want = formula(x, SCALE, BIAS)
    model, feeds = one_node_model(op, inputs, attrs, opset=21, const_inputs=(1, 2))
    got = run_cpu(rt, model, feeds)[0][0]
    assert (got[0, 0] == want[0, 0, 0]).all(), f"{op} of a constant channel of {value:g}: {got[0, 0, :4]}"
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max(), err_msg=f"{op} at {value:g}")


@pytest.mark.parametrize("value", [0.0, 1.0, 1e4, 1e8])
def test_mean_variance_normalization_matches_the_formula(rt, value):
    """(x - mean) / (std + 1e-9): the function body's E[x^2] - E[x]^2 cancels in float32 (17% off
    for a channel of mean 1 and spread 1e-3), so the backend takes the variance in two passes."""
    rng = np.random.default_rng(5)
    x = np.full((2, 3, 4, 5), value, np.float32)
    x[:, 1:] = (rng.standard_normal((2, 2, 4, 5)) * max(value * 1e-3, 1e-3) + value).astype(np.float32)
    model, feeds = one_node_model("MeanVarianceNormalization", [x], {"axes": [0, 2, 3]}, opset=13)
    got = run_cpu(rt, model, feeds)[0][0]
    xd = x.astype(np.float64)
    want = (xd - xd.mean((0, 2, 3), keepdims=True)) / (xd.std((0, 2, 3), keepdims=True) + 1e-9)
    assert (got[:, 0] == 0).all(), got[:, 0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=f"MeanVarianceNormalization at {value:g}")

"""The vectorised Exp, Sigmoid, Tanh, Erf and Softmax (vmath.c) agree with float64 math to a few
ulp over the whole float range, propagate NaN and saturate at +-inf like onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from conftest import one_node_model, run_cpu

RNG = np.random.default_rng(11)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 88.72, 88.73, -87.3,
                    -103.0, -104.5, 0.6249, 0.6251, 9.0, -9.2, 20.0, 0.921875, -0.921875,
                    0.9218749, 3.925, 3.9249999, -3.925, 1e-45], np.float32)


def wide_inputs():
    # every binade that matters for these functions, both signs, plus the edge cases
    mags = np.exp(RNG.uniform(np.log(1e-8), np.log(120.0), 20000)).astype(np.float32)
    signs = RNG.choice([-1.0, 1.0], mags.size).astype(np.float32)
    return np.concatenate([mags * signs, SPECIAL]).astype(np.float32)


EXACT = {
    "Exp": np.exp,
    "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "Tanh": np.tanh,
    "Erf": np.vectorize(math.erf, otypes=[np.float64]),
}


@pytest.mark.parametrize("op", sorted(EXACT))
def test_unary_transcendental_is_within_a_few_ulp(rt, op):
    x = wide_inputs()
    model, feeds = one_node_model(op, [x])
    (got,), _ = run_cpu(rt, model, feeds)
    with np.errstate(over="ignore"):
        want = EXACT[op](x.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{op}: NaN pattern differs"
    g, w = got[~nan], want[~nan]
    assert np.array_equal(np.isinf(g), np.isinf(w)) and np.array_equal(g[np.isinf(g)], w[np.isinf(w)])
    finite = np.isfinite(w)
    tiny = np.abs(w[finite]) < np.finfo(np.float32).tiny  # subnormal answers: absolute error
    ulps = np.abs(g[finite] - w[finite]) / np.spacing(np.abs(w[finite]))
    assert ulps[~tiny].max() <= 4, f"{op}: {ulps[~tiny].max()} ulp at {x[~nan][finite][~tiny][ulps[~tiny].argmax()]}"
    assert np.abs(g[finite][tiny] - w[finite][tiny]).max(initial=0) <= np.finfo(np.float32).tiny


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_matches_onnxruntime(rt, op, axis):
    x = (RNG.standard_normal((3, 37, 129)) * 8).astype(np.float32)
    model, feeds = one_node_model(op, [x], dict(axis=axis))
    (got,), _ = run_cpu(rt, model, feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""Pow with a constant scalar exponent: squares and cubes are products (GPT-2's GELU cubes every
activation), square roots sqrt with pow's answers at -0 and -inf, the rest powf; each gives
onnxruntime's bits on random values and the edge values (signed zeros, infinities, NaN,
values whose cube overflows or underflows), with a constant and with a fed exponent."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_node_model, onnxruntime_run, run_cpu

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e13, -1e13, 1e-15, -1e-15, 1.0, -1.0,
                  3.4e38, 7.0e12, -7.0e12], np.float32)


@pytest.mark.parametrize("const", [True, False], ids=["constant", "fed"])
@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, 1.5, -1.0, 4.0])
def test_power_matches_onnxruntime_to_the_bit(rt, threads, exponent, const):
    x = np.concatenate([
        np.random.default_rng(7).standard_normal(4093).astype(np.float32) * 5, EDGES])
    model, feeds = one_node_model("Pow", [x, np.array(exponent, np.float32)],
                                  const_inputs=(1,) if const else ())
    (got,), assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, assignment
    want = onnxruntime_run(model, feeds)[0]
    # to the bit, NaN payloads aside: the same NaN positions, equal numbers elsewhere
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"x^{exponent}: NaN positions differ"
    ok = ~np.isnan(want)
    bad = np.flatnonzero(got[ok].view(np.uint32) != want[ok].view(np.uint32))
    assert bad.size == 0, (f"x^{exponent}: {bad.size} values differ from onnxruntime's, e.g. "
                           f"x={x[ok][bad[:3]]} got {got[ok][bad[:3]]} want {want[ok][bad[:3]]}")

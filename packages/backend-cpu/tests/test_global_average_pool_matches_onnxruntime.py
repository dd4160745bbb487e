"""GlobalAveragePool matches onnxruntime on random inputs (plane sizes under, at and off the
summing lanes, 1-D to 3-D, a large offset where a float32 sum would lose digits), at 1 and 3
threads, with the same bits at both."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_node_model, onnxruntime_run

SHAPES = {"1x1": (2, 13, 1, 1), "7x7": (1, 37, 7, 7), "odd": (3, 5, 9, 11), "1-D": (1, 6, 29),
          "3-D": (1, 3, 4, 5, 6), "large": (1, 4, 112, 112)}


@pytest.mark.parametrize("offset", [0.0, 1e4], ids=["centred", "offset"])
@pytest.mark.parametrize("case", sorted(SHAPES))
def test_global_average_pool_matches_onnxruntime(rt, case, offset):
    x = (np.random.default_rng(8).standard_normal(SHAPES[case]) + offset).astype(np.float32)
    model, feeds = one_node_model("GlobalAveragePool", [x])
    want = onnxruntime_run(model, feeds)[0]
    lib = rt.backends["cpu"].backend
    got = []
    try:
        with rt.load(model, backends=["cpu"]) as net:
            for threads in (1, 3):
                lib.set_num_threads(threads)
                got.append(net.run(feeds)["out0"])
    finally:
        lib.set_num_threads(0)
    # the mean of float32 values summed in double: within an ulp or two of onnxruntime's
    for g in got:
        np.testing.assert_allclose(g, want, rtol=3e-7, atol=1e-7)
    np.testing.assert_array_equal(got[1], got[0])
    # and within half an ulp of the exact mean
    exact = x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    np.testing.assert_allclose(got[0], exact, rtol=6e-8, atol=1e-30)

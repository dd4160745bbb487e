"""MaxPool 3x3 (the vectorised interior columns and the edge columns around them) matches
onnxruntime on random inputs over strides, pads (asymmetric too), ceil_mode and widths from
narrower than the window to odd and wide, at 1 and 3 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_node_model, onnxruntime_run

# name: (input shape, attributes)
CASES = {
    "resnet": ((1, 8, 112, 112), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stride1": ((2, 3, 17, 19), dict(strides=[1, 1], pads=[1, 1, 1, 1])),
    "no-pads": ((1, 5, 15, 21), dict(strides=[2, 2])),
    "ceil": ((1, 4, 14, 14), dict(strides=[2, 2], ceil_mode=1)),
    "asymmetric": ((1, 3, 13, 16), dict(strides=[2, 2], pads=[0, 1, 1, 0])),
    "wide-pads": ((1, 2, 9, 10), dict(strides=[3, 3], pads=[1, 2, 1, 2])),
    "narrow": ((1, 6, 5, 2), dict(strides=[1, 1], pads=[1, 1, 1, 1])),
    "stride3": ((1, 3, 20, 31), dict(strides=[3, 3], pads=[1, 1, 1, 1])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_3x3_matches_onnxruntime(rt, case):
    shape, attrs = CASES[case]
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    model, feeds = one_node_model("MaxPool", [x], dict(kernel_shape=[3, 3], **attrs))
    want = onnxruntime_run(model, feeds)[0]
    lib = rt.backends["cpu"].backend
    try:
        with rt.load(model, backends=["cpu"]) as net:
            for threads in (1, 3):
                lib.set_num_threads(threads)
                np.testing.assert_array_equal(net.run(feeds)["out0"], want,
                                              err_msg=f"{case} at {threads} threads")
    finally:
        lib.set_num_threads(0)

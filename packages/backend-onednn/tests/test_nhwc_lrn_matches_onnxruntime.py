"""An LRN (beta 0.75) of an nhwc value runs as the backend's own step on the threads of
oneDNN's pool (see docs/backends/onednn.md): against onnxruntime with random weights at 1 and
2 threads, over channel counts that leave a tail after the 8-lane vectors and windows wider
than the channels; an LRN with another beta stays oneDNN's."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_all_on_onednn_and_matching, onednn_log
from test_partitions_match_onnxruntime import Builder, rand


def lrn_net(c=20, size=5, beta=0.75, alpha=1e-2, bias=1.0, hw=(9, 11)):
    """conv (3 -> c) + Relu -> LRN -> MaxPool: the LRN reads the convolution's nhwc result."""
    b = Builder()
    y = b.conv("x", 3, c)
    y = b.op("LRN", [y], size=size, alpha=alpha, beta=beta, bias=bias)
    b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    return b, {"x": (rand(1, 3, *hw) * np.float32(3)).astype(np.float32)}


CASES = {
    "lrn_20_channels_size_5": (lrn_net, dict()),
    "lrn_96_channels_size_5": (lrn_net, dict(c=96, hw=(13, 12))),
    "lrn_window_wider_than_channels": (lrn_net, dict(c=4, size=9, alpha=0.5, bias=2.0)),
    "lrn_size_1": (lrn_net, dict(c=16, size=1)),
    "lrn_beta_half_stays_onednn": (lrn_net, dict(beta=0.5)),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_nhwc_lrn_matches_onnxruntime(rt, case, threads):
    make, kw = CASES[case]
    b, feeds = make(**kw)
    assert_all_on_onednn_and_matching(rt, b.nodes, feeds, b.inits, 17, threads, case)


SETUP = """
from conftest import graph_model
from test_nhwc_lrn_matches_onnxruntime import CASES
make, kw = CASES[sys.argv[2]]
b, feeds = make(**kw)
model = graph_model(b.nodes, feeds, b.inits, opset=17)
"""


def kinds(case):
    return [ln.split(",")[3] for ln in onednn_log(SETUP, case)]


def test_lrn_runs_without_a_onednn_primitive_or_reorders():
    k = kinds("lrn_96_channels_size_5")
    assert "lrn" not in k and k.count("reorder") == 2, k  # the input's and the output's


def test_lrn_with_another_beta_is_onednns():
    assert "lrn" in kinds("lrn_beta_half_stays_onednn")

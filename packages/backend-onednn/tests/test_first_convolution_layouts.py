"""A network's first convolution (up to 4 input channels, read from the kernel's plain nchw
input) whose only reader is a pool runs from the nchw input into oneDNN's blocked layout, the
pool in that layout, and the ops after the pool in nhwc again: against onnxruntime with random
weights at 1 and 2 threads, and in oneDNN's log (no reorder of the input; one after the pool)."""

from __future__ import annotations

import pytest
from conftest import assert_all_on_onednn_and_matching, onednn_log
from test_partitions_match_onnxruntime import Builder, rand


def stem(tail="two_branches", pool="MaxPool", cin=3):
    """conv (cin -> 32, 3x3 stride 2) + Relu -> pool 3x3 stride 2 -> tail."""
    b = Builder()
    y = b.conv("x", cin, 32, stride=2)
    y = b.op(pool, [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    if tail == "two_branches":  # two readers of the pool's result, then a Concat of both
        a = b.conv(y, 32, 16, k=1)
        c = b.conv(y, 32, 16, k=3)
        b.op("Concat", [a, c, y], axis=1)
    elif tail == "concat_first":  # DenseNet: the pool's result is a Concat's first input
        a = b.conv(y, 32, 8, k=1)
        b.op("Concat", [y, a], axis=1)
    return b, {"x": rand(1, cin, 33, 30)}


CASES = {
    "max_pool_two_branches": dict(),
    "average_pool_two_branches": dict(pool="AveragePool"),
    "max_pool_concat_first": dict(tail="concat_first"),
    "max_pool_is_the_output": dict(tail=None),
    "four_channels": dict(cin=4),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_first_convolution_matches_onnxruntime(rt, case, threads):
    b, feeds = stem(**CASES[case])
    assert_all_on_onednn_and_matching(rt, b.nodes, feeds, b.inits, 17, threads, case)


SETUP = """
from conftest import graph_model
from test_first_convolution_layouts import CASES, stem
b, feeds = stem(**CASES[sys.argv[2]])
model = graph_model(b.nodes, feeds, b.inits, opset=17)
"""


def test_input_is_read_as_it_is_and_the_pool_result_goes_back_to_nhwc():
    lines = [ln.split(",") for ln in onednn_log(SETUP, "max_pool_two_branches")]
    kinds = [ln[3] for ln in lines]
    assert kinds[:3] == ["convolution", "pooling", "reorder"], kinds
    assert "src_f32::blocked:abcd" in lines[0][6], lines[0]
    assert "dst_f32::blocked:acdb" in lines[2][6], lines[2]
    # the rest in nhwc: the reorder after the pool, and the output's back to row-major
    assert kinds.count("reorder") == 2 and kinds[-1] == "reorder", kinds

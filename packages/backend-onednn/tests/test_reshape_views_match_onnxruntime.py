"""Reshapes of values in oneDNN's nhwc layout, with random weights against onnxruntime at 1 and 2
threads: a channel shuffle (Reshape, Transpose, Reshape between convolutions, as ShuffleNet
writes it) is read through strides with one reorder instead of three; reshapes the layout
cannot be read through fall back to row-major bytes; a reshape as the kernel's output is
row-major."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_all_on_onednn_and_matching, onednn_log
from test_partitions_match_onnxruntime import Builder, rand


def shuffle(b, x, n, c, h, w, groups):
    s1 = f"shape_split{b.n}"
    b.inits[s1] = np.array([n, groups, c // groups, h, w], np.int64)
    y = b.op("Reshape", [x, s1])
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    s2 = f"shape_merge{b.n}"
    b.inits[s2] = np.array([n, c, h, w], np.int64)
    return b.op("Reshape", [y, s2])


def reshape(b, x, shape):
    s = f"shape{b.n}"
    b.inits[s] = np.array(shape, np.int64)
    return b.op("Reshape", [x, s])


def shuffle_net(n, groups, h=9, w=7, c=12):
    """conv 8->c -> shuffle -> grouped 1x1 conv -> shuffle -> depthwise 3x3 -> 1x1 conv."""
    b = Builder()
    y = b.conv("x", 8, c)
    y = shuffle(b, y, n, c, h, w, groups)
    y = b.conv(y, c, c, k=1, group=groups)
    y = shuffle(b, y, n, c, h, w, groups)
    y = b.conv(y, c, c, group=c, act=None)
    b.conv(y, c, 6, k=1)
    return b, {"x": rand(n, 8, h, w)}


def check(rt, b, feeds, threads, what):
    assert_all_on_onednn_and_matching(rt, b.nodes, feeds, b.inits, 18, threads, what)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,groups,c", [(1, 2, 12), (2, 3, 12), (1, 4, 12), (1, 12, 12), (1, 3, 48)])
def test_channel_shuffle_between_convolutions(rt, n, groups, c, threads):
    b, feeds = shuffle_net(n, groups, c=c)
    check(rt, b, feeds, threads, f"shuffle, batch {n}, {groups} groups")


# After a 3x3 convolution 8 -> 12 on 1 x 8 x 6 x 5: reshapes its nhwc layout can be read
# through, and ones it cannot (row-major bytes then), each followed by a reader
RESHAPES = {
    "merge_hw_then_softmax": ([1, 12, 30], lambda b, y: b.op("Softmax", [y], axis=-1)),
    "flatten_then_gemm": ([1, 360], None),
    "split_channels_then_relu": ([1, 3, 4, 6, 5], lambda b, y: b.op("Relu", [y])),
    "channels_into_rows_then_conv": ([1, 6, 12, 5], lambda b, y: b.conv(y, 6, 4)),
    "rows_into_channels_then_conv": ([1, 24, 3, 5], lambda b, y: b.conv(y, 24, 4, k=1)),
    "split_channels_as_output": ([1, 4, 3, 6, 5], None),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(RESHAPES))
def test_reshape_of_an_nhwc_value(rt, case, threads):
    shape, reader = RESHAPES[case]
    b = Builder()
    y = reshape(b, b.conv("x", 8, 12), shape)
    if case == "flatten_then_gemm":
        b.inits["fc_w"] = rand(360, 10)
        b.op("Gemm", [y, "fc_w"])
    elif reader is not None:
        reader(b, y)
    check(rt, b, {"x": rand(1, 8, 6, 5)}, threads, case)


SETUP = """
from conftest import graph_model
from test_reshape_views_match_onnxruntime import shuffle_net
b, feeds = shuffle_net(1, 3, h=14, w=14, c=48)
model = graph_model(b.nodes, feeds, b.inits, opset=18)
"""


def test_channel_shuffle_is_one_reorder():
    """In oneDNN's log: each shuffle between two nhwc convolutions is one reorder of the 5-D
    transposed view straight into the next convolution's layout (it was three: to row-major,
    the transpose, back to nhwc); besides them only the kernel input's and output's."""
    lines = [ln.split(",") for ln in onednn_log(SETUP)]
    kinds = [ln[3] for ln in lines]
    assert kinds.count("convolution") == 4 and kinds.count("reorder") == 4, kinds
    shuffles = [i for i, ln in enumerate(lines) if ln[3] == "reorder" and ln[-2].count("x") == 4]
    assert len(shuffles) == 2, kinds
    for i in shuffles:
        assert kinds[i - 1] == kinds[i + 1] == "convolution", kinds
        assert "acdb" in ",".join(lines[i + 1]), lines[i + 1]

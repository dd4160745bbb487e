"""A partition longer than the first run of nodes the core offers to fuse (64) is one kernel
when its values are read only inside it: a DenseNet block, whose every layer's output is read
by every later Concat, kept nhwc from its input to its output (with random weights, against
onnxruntime at 1 and 2 threads; and in oneDNN's log, no reorder between its primitives)."""

from __future__ import annotations

import pytest
from conftest import assert_all_on_onednn_and_matching, onednn_log
from test_partitions_match_onnxruntime import Builder, rand

LAYERS = 14  # 6 nodes a layer: 84 nodes


def dense_block(layers=LAYERS, c0=8, growth=4):
    b = Builder()
    feats = [b.conv("x", 3, c0)]
    for _ in range(layers):
        c = c0 + growth * (len(feats) - 1)
        y = b.op("Concat", feats, axis=1) if len(feats) > 1 else feats[0]
        y = b.op("Relu", [b.bn(y, c)])
        y = b.conv(y, c, 2 * growth, k=1)
        feats.append(b.conv(y, 2 * growth, growth, act=None))
    b.op("Concat", feats, axis=1)
    return b, {"x": rand(1, 3, 10, 9)}


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_block_matches_onnxruntime(rt, threads):
    b, feeds = dense_block()
    assert len(b.nodes) > 64
    assert_all_on_onednn_and_matching(rt, b.nodes, feeds, b.inits, 15, threads, "dense block")


SETUP = """
from conftest import graph_model
from test_large_partitions_match_onnxruntime import dense_block
b, feeds = dense_block()
model = graph_model(b.nodes, feeds, b.inits, opset=15)
"""


def test_dense_block_is_one_kernel_in_nhwc():
    kinds = [ln.split(",")[3] for ln in onednn_log(SETUP)]
    assert kinds.count("convolution") == 1 + 2 * LAYERS, kinds
    # the input into nhwc and the output back to row-major; nothing in between
    assert kinds.count("reorder") == 2 and kinds[0] == kinds[-1] == "reorder", kinds

"""Under the bf16 hint on AMX, a grouped convolution of fewer than 16 channels a group (RegNetY's
8) runs on oneDNN's AMX kernel with k of its groups merged into one of block-diagonal weights:
oneDNN 3.2 has no AMX kernel for it as it is, and its avx512 kernel was 2-4x slower than AMX
doing k times the products. k is the fewest groups merged that AMX takes.

Tolerance: 3e-2 of the output's range against onnxruntime's float32, the bound of the hint's
other tests: the merged groups add only exact zeros to each sum."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import AMX, assert_matches, onednn_log, run_both
from onnx import TensorProto, helper, numpy_helper

BF16 = {"onednn": {"kind": "onednn", "precision": "bf16"}}

# (channels, groups, spatial size, stride, the merged groups oneDNN runs on AMX)
CASES = {
    "6 groups of 8, stride 2": (48, 6, 28, 2, 3),
    "13 groups of 8 (prime: one group)": (104, 13, 14, 1, 1),
    "55 groups of 8": (440, 55, 7, 1, 11),
    "4 groups of 4": (16, 4, 10, 1, 1),
}


def grouped_model(c, groups, size, stride):
    """A 1x1 convolution, a grouped 3x3 with its bias and Relu, a 1x1 convolution."""
    rng = np.random.default_rng(c + groups)
    inits = {"w1": rng.standard_normal((c, c, 1, 1)) * (2.0 / c) ** 0.5,
             "wg": rng.standard_normal((c, c // groups, 3, 3)) * (2.0 / (9 * c / groups)) ** 0.5,
             "bg": rng.standard_normal(c) * 0.1,
             "w2": rng.standard_normal((8, c, 1, 1)) * (1.0 / c) ** 0.5}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["a", "wg", "bg"], ["g"], group=groups, pads=[1] * 4,
                              strides=[stride] * 2),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    out = (size + 2 - 3) // stride + 1
    graph = helper.make_graph(
        nodes, "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, out, out])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, size, size)).astype(np.float32)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_convolutions_under_the_bf16_hint_stay_within_their_bound(rt, case, threads):
    model, feeds = grouped_model(*CASES[case][:4])
    placed, got, want = run_both(rt, model, feeds, threads, targets=BF16)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=3e-2, what=f"{case} under the bf16 hint")


@pytest.mark.parametrize("case", list(CASES))
def test_a_grouped_convolution_of_narrow_groups_runs_on_amx_with_groups_merged(case):
    """oneDNN's log: the grouped convolution runs on an AMX kernel, in the merged groups
    expected (its descriptor's g), or none (a single group); without AMX, as it is."""
    c, groups, size, stride, merged = CASES[case]
    lines = onednn_log("from test_bf16_grouped_convolutions import grouped_model\n"
                       f"model, feeds = grouped_model({c}, {groups}, {size}, {stride})",
                       env={"NNPLUG_PRECISION": "bf16"})
    convs = [ln.split(",") for ln in lines if ",convolution," in ln]
    assert len(convs) == 3, lines
    impl, shape = convs[1][4], convs[1][-2]
    g = re.match(r"g(\d+)", shape)
    if not AMX:
        assert g and int(g[1]) == groups, shape
        return
    assert "amx" in impl, convs[1]
    assert (int(g[1]) if g else 1) == merged, shape

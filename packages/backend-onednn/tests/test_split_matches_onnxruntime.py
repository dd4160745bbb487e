"""Split on the oneDNN backend against onnxruntime: inside a group each part is a view of the
input (GPT-2's Q, K and V out of one projection, which on the CPU backend cut the layer's
partition in two); a group never ends at a Split (a group has one output), and a Split whose
parts leave the backend runs as a kernel of its own that copies them out. The parts' sizes
come from a constant input (opset 13 on), the `split` attribute (before) or equal parts
(opset 18's num_outputs, the last part smaller)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches, run_both
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(31)


def model_of(nodes, inits, x_shape, outputs, opset):
    graph = helper.make_graph(
        nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def split_node(sizes, axis, opset, outs):
    """A Split of "p" into outs: sizes as an input (opset 13+), an attribute, or None (equal)."""
    ins, attrs, inits = ["p"], {"axis": axis}, {}
    if sizes is not None and opset >= 13:
        inits["sizes"] = np.array(sizes, np.int64)
        ins.append("sizes")
    elif sizes is not None:
        attrs["split"] = sizes
    elif opset >= 18:
        attrs["num_outputs"] = len(outs)
    return helper.make_node("Split", ins, outs, **attrs), inits


def attention_split_model(sizes, axis, opset, hidden=48):
    """x [1, 10, 32] -> MatMul (32 -> hidden) -> Split into three along `axis` -> each part
    through a Relu, the parts' MatMul q k^T and a MatMul by v."""
    node, inits = split_node(sizes, axis, opset, ["q", "k", "v"])
    inits["w"] = (R.standard_normal((32, hidden)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), node,
             helper.make_node("Relu", ["q"], ["qr"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["qr", "kt"], ["s"]),
             helper.make_node("MatMul", ["s", "v"], ["y"])]
    return model_of(nodes, inits, [1, 10, 32], ["y"], opset)


# (sizes or None for equal parts, axis, opset)
INSIDE = {
    "sizes input": ([16, 16, 16], 2, 13),
    "negative axis": ([16, 16, 16], -1, 17),
    "split attribute": ([16, 16, 16], 2, 11),
    "equal parts": (None, 2, 13),
    "num_outputs": (None, 2, 18),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(INSIDE))
def test_a_split_inside_a_group_runs_on_onednn_and_matches(rt, case, threads):
    model = attention_split_model(*INSIDE[case])
    feeds = {"x": R.standard_normal((1, 10, 32)).astype(np.float32)}
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what=case)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("axis, sizes, opset", [(1, [3, 5, 2], 13), (0, None, 18), (2, [4, 4], 11),
                                                 (1, None, 13)])
def test_a_split_whose_parts_are_the_outputs_is_a_kernel_of_its_own(rt, axis, sizes, opset,
                                                                    threads):
    """A Relu then a Split whose parts are the graph's outputs: the group ends before the
    Split, which copies its parts out (opset 18's uneven equal parts: 10 rows as 4, 4, 2)."""
    k = len(sizes) if sizes else 3
    outs = [f"y{j}" for j in range(k)]
    node, inits = split_node(sizes, axis, opset, outs)
    model = model_of([helper.make_node("Relu", ["x"], ["p"]), node], inits, [10, 10, 8], outs,
                     opset)
    if opset == 13 and sizes is None:  # equal parts must divide the axis before opset 18
        model = model_of([helper.make_node("Relu", ["x"], ["p"]), split_node(None, axis, 13,
                          outs[:2])[0]], {}, [10, 10, 8], outs[:2], 13)
    feeds = {"x": R.standard_normal((10, 10, 8)).astype(np.float32)}
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"part {j}")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_slice_read_by_a_matmul_matches(rt, threads):
    """A part of a row (a Slice at a nonzero offset, as a Split's V) read by a MatMul: oneDNN's
    gemm matmul read such a view from its buffer's start, so it is copied out first."""
    inits = {"w": (R.standard_normal((32, 48)) * 0.2).astype(np.float32),
             "s0": np.array([0]), "e0": np.array([16]), "s2": np.array([32]),
             "e2": np.array([48]), "ax": np.array([2])}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Slice", ["p", "s0", "e0", "ax"], ["q"]),
             helper.make_node("Slice", ["p", "s2", "e2", "ax"], ["v"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "qt"], ["s"]),
             helper.make_node("MatMul", ["s", "v"], ["y"])]
    model = model_of(nodes, inits, [1, 10, 32], ["y"], 13)
    feeds = {"x": R.standard_normal((1, 10, 32)).astype(np.float32)}
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0])


def test_a_split_of_sizes_known_only_at_run_time_is_left_to_another_backend(rt):
    """Sizes from a graph input: not a constant, so the part boundaries are unknown at load."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["p"]),
         helper.make_node("Split", ["p", "sizes"], ["a", "b"], axis=1, name="split"),
         helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])],
        "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                  helper.make_tensor_value_info("sizes", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("ya", "yb")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": R.standard_normal((2, 6)).astype(np.float32), "sizes": np.array([2, 4])}
    assignment, got, want = run_both(rt, model, feeds, 1)
    assert assignment["split"] != "onednn", assignment
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_split_of_a_constant_is_folded_and_its_parts_used(rt, threads):
    """A bias split in three (onnxruntime's contrib attention bodies do this): the backend
    keeps no copy of a constant for a Split alone, so it declines it and the parts are folded
    elsewhere; the Adds reading them run here (a crash in constant folding before)."""
    inits = {"bias": R.standard_normal(12).astype(np.float32), "sizes": np.array([4, 4, 4])}
    nodes = [helper.make_node("Split", ["bias", "sizes"], ["b0", "b1", "b2"], axis=0),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "b0"], ["y0"]), helper.make_node("Add", ["r", "b2"],
                                                                            ["y1"])]
    model = model_of(nodes, inits, [3, 4], ["y0", "y1"], 13)
    feeds = {"x": R.standard_normal((3, 4)).astype(np.float32)}
    _, got, want = run_both(rt, model, feeds, threads)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)

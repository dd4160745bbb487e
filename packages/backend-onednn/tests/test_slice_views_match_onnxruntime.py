"""Slice along one axis with step 1 is a view on the oneDNN backend (a submemory of the layout
its input is in, or of the input's plain bytes): ShuffleNet's channel split, negative and
out-of-range bounds, an empty slice, a slice as the kernel's result, a symbolic batch; all
against onnxruntime at 1 and 2 threads. Steps other than 1 stay on the next backend."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches, graph_model, run_both
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(1234)
BIG = np.iinfo(np.int64).max


def rand(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def bounds(prefix, start, end, axis=None, step=None, dtype=np.int64):
    """Slice's inputs as initializers: (names, arrays)."""
    vals = [start, end] + ([axis] if axis is not None or step is not None else []) + \
        ([step] if step is not None else [])
    names = [f"{prefix}_{k}" for k in ("starts", "ends", "axes", "steps")[:len(vals)]]
    if axis is None and step is not None:
        names[2] = ""  # axes omitted, steps given
        vals = vals[:2] + vals[3:]
        return names, dict(zip([n for n in names if n], [np.array([v], dtype) for v in vals]))
    return names, dict(zip(names, [np.array([v], dtype) for v in vals]))


def slice_then_relu(shape, start, end, axis=None, step=None, dtype=np.int64):
    names, inits = bounds("s", start, end, axis, step, dtype)
    nodes = [node("Slice", ["x", *names], ["s"], "slice"), node("Relu", ["s"], ["y"], "relu")]
    return graph_model(nodes, {"x": rand(*shape)}, inits, opset=13), {"x": None}


CASES = {
    "channels_of_a_plain_input": ((1, 8, 5, 5), 2, 6, 1),
    "negative_bounds": ((1, 8, 5, 5), -6, -1, 1),
    "end_past_the_dim": ((2, 6, 3, 4), 1, BIG, 1),
    "start_before_the_dim": ((2, 6, 3, 4), -100, 3, 1),
    "rows": ((1, 4, 9, 7), 3, 8, 2),
    "last_axis_negative": ((3, 10), 4, 9, -1),
    "axes_omitted": ((6, 4), 1, 5, None),
    "int32_bounds": ((1, 8, 5, 5), 0, 4, 1, None, np.int32),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_slice_matches_onnxruntime(rt, case, threads):
    shape, start, end, axis, *rest = CASES[case]
    step, dtype = (rest + [None, np.int64])[:2] if rest else (None, np.int64)
    model, _ = slice_then_relu(shape, start, end, axis, step, dtype)
    feeds = {"x": rand(*shape)}
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert assignment["slice"] == "onednn", assignment
    assert_matches(got[0], want[0], what=case)


def shuffle_block(c=16, hw=7):
    """ShuffleNetV2's unit after a Conv: Concat of the two halves, channel shuffle (Reshape,
    Transpose, Reshape), then the split in two Slices, one half through a 1x1 Conv."""
    inits = {"w0": rand(c, c, 3, 3, scale=0.2), "w1": rand(c // 2, c // 2, 1, 1, scale=0.3),
             "w2": rand(c // 2, c // 2, 1, 1, scale=0.3),
             "g": np.array([1, 2, c // 2, hw, hw], np.int64),
             "flat": np.array([1, c, hw, hw], np.int64)}
    lo, lo_inits = bounds("lo", 0, c // 2, 1)
    hi, hi_inits = bounds("hi", c // 2, c, 1)
    inits.update(lo_inits)
    inits.update(hi_inits)
    nodes = [node("Conv", ["x", "w0"], ["c0"], "conv0", pads=[1, 1, 1, 1]),
             node("Relu", ["c0"], ["r0"], "relu0"),
             node("Slice", ["r0", *lo], ["a"], "split_lo"),
             node("Slice", ["r0", *hi], ["b"], "split_hi"),
             node("Conv", ["b", "w1"], ["b1"], "conv1"),
             node("Relu", ["b1"], ["b2"], "relu1"),
             node("Conv", ["b2", "w2"], ["b3"], "conv2"),
             node("Concat", ["a", "b3"], ["cat"], "cat", axis=1),
             node("Reshape", ["cat", "g"], ["g5"], "shuffle_reshape"),
             node("Transpose", ["g5"], ["t5"], "shuffle_transpose", perm=[0, 2, 1, 3, 4]),
             node("Reshape", ["t5", "flat"], ["sh"], "shuffle_flatten"),
             node("Slice", ["sh", *hi], ["y"], "split_out")]
    return graph_model(nodes, {"x": rand(1, c, hw, hw)}, inits, opset=13)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c", [16, 58])
def test_shufflenets_channel_split_stays_on_onednn(rt, c, threads):
    """58 channels halve to 29: a cut inside a blocked layout's block falls back to the plain
    bytes; the slice is also the kernel's result here."""
    model = shuffle_block(c)
    feeds = {"x": rand(1, c, 7, 7)}
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what=f"{c} channels")


def test_an_empty_slice_gives_an_empty_result(rt):
    model, _ = slice_then_relu((1, 8, 3, 3), 5, 2, 1)
    feeds = {"x": rand(1, 8, 3, 3)}
    assignment, got, want = run_both(rt, model, feeds, 1)
    assert got[0].shape == want[0].shape == (1, 0, 3, 3)


def test_a_symbolic_batch_is_sliced_per_shape(rt):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4, 4])
    names, inits = bounds("s", 1, 4, 1)
    nodes = [node("Slice", ["x", *names], ["s"], "slice"), node("Relu", ["s"], ["y"], "relu")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(v, k)
                                                 for k, v in inits.items()]),
        opset_imports=[helper.make_opsetid("", 13)])
    for batch in (1, 3):
        feeds = {"x": rand(batch, 8, 4, 4)}
        assignment, got, want = run_both(rt, model, feeds, 2)
        assert_matches(got[0], want[0], what=f"batch {batch}")


def test_a_step_other_than_one_goes_to_the_next_backend(rt):
    model, _ = slice_then_relu((1, 8, 5, 5), 0, 8, 1, 2)
    feeds = {"x": rand(1, 8, 5, 5)}
    assignment, got, want = run_both(rt, model, feeds, 1)
    assert assignment["slice"] == "cpu", assignment
    assert_matches(got[0], want[0], what="step 2")

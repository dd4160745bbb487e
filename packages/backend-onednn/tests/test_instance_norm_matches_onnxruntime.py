"""InstanceNormalization on the oneDNN backend against onnxruntime, random parameters: one image
in a convolution's blocked layout runs as oneDNN's batch normalization (each channel's own
statistics); plain values (the GroupNorm pattern torch exports: Reshape to (N, groups, -1),
InstanceNormalization, Reshape back, Mul, Add) and batches other than one run as the backend's
own loop. Either way the nodes stay on oneDNN, where a switch to the CPU backend costs a
reorder each way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_matches, graph_model, onednn_log, run_both
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(29)


def rand(*shape, scale=1.0, offset=0.0):
    return (R.standard_normal(shape) * scale + offset).astype(np.float32)


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def in_model(shape, conv_before=False, eps=1e-5, offset=0.0):
    """x (shape) -> [Conv 3x3] -> InstanceNormalization -> Relu."""
    c = shape[1]
    inits = {"s": rand(c), "b": rand(c)}
    feeds = {"x": rand(*shape, offset=offset)}
    nodes, x = [], "x"
    if conv_before:  # the Conv's result is in oneDNN's blocked layout when the norm reads it
        inits["w"] = rand(c, c, 3, 3, scale=0.2)
        nodes.append(node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]))
        x = "c"
    nodes += [node("InstanceNormalization", [x, "s", "b"], ["n"], "in", epsilon=eps),
              node("Relu", ["n"], ["y"], "relu")]
    return graph_model(nodes, feeds, inits, opset=17), feeds


def group_norm_model(n, c, h, w, groups):
    """torch's GroupNorm export after a Conv: Reshape (n, groups, -1), InstanceNormalization with
    ones and zeros, Reshape to the Conv's shape, Mul and Add per channel, Relu."""
    inits = {"w": rand(c, c, 3, 3, scale=0.2), "g": np.array([n, groups, -1], np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
             "shape": np.array([n, c, h, w], np.int64),
             "mul": rand(c, 1, 1), "add": rand(c, 1, 1)}
    feeds = {"x": rand(n, c, h, w)}
    nodes = [node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
             node("Reshape", ["c", "g"], ["r"], "reshape"),
             node("InstanceNormalization", ["r", "ones", "zeros"], ["i"], "in"),
             node("Reshape", ["i", "shape"], ["b"], "back"),
             node("Mul", ["b", "mul"], ["m"], "mul"),
             node("Add", ["m", "add"], ["a"], "add"),
             node("Relu", ["a"], ["y"], "relu")]
    return graph_model(nodes, feeds, inits, opset=17), feeds


CASES = {
    "after_conv_one_image": dict(shape=(1, 32, 17, 13), conv_before=True),
    "after_conv_24_channels": dict(shape=(1, 24, 9, 9), conv_before=True),
    "after_conv_two_images": dict(shape=(2, 16, 7, 7), conv_before=True),
    "plain_rank4": dict(shape=(1, 8, 9, 9)),
    "plain_rank3_long_rows": dict(shape=(1, 4, 70001)),
    "plain_rank5_three_images": dict(shape=(3, 4, 3, 4, 5)),
    "large_epsilon": dict(shape=(1, 16, 5, 5), conv_before=True, eps=0.5),
    "mean_far_from_zero": dict(shape=(1, 8, 16, 16), offset=300.0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_instance_normalization_matches_onnxruntime(rt, case, threads):
    model, feeds = in_model(**CASES[case])
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what=case)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 2])
def test_the_exported_group_norm_pattern_matches_onnxruntime(rt, n, threads):
    model, feeds = group_norm_model(n, 32, 20, 18, groups=8)
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what=f"batch {n}")


def test_a_symbolic_batch_is_claimed_and_each_batch_matches(rt):
    """The batch is known only at run time: each shape's plan picks its own way (one image in
    the primitive, three in the loop), and both match onnxruntime."""
    c = 16
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", c, 6, 6])
    inits = [numpy_helper.from_array(rand(c, c, 3, 3, scale=0.2), "w"),
             numpy_helper.from_array(rand(c), "s"), numpy_helper.from_array(rand(c), "b")]
    nodes = [node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]),
             node("InstanceNormalization", ["c", "s", "b"], ["y"], "in")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    for batch in (1, 3):
        feeds = {"x": rand(batch, c, 6, 6)}
        assignment, got, want = run_both(rt, model, feeds, 2)
        assert assignment["in"] == "onednn", assignment
        assert_matches(got[0], want[0], what=f"batch {batch}")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_nan_or_an_infinity_spoils_only_its_own_channel(rt, bad):
    """A NaN or an infinity in one channel makes that channel's statistics NaN, as in
    onnxruntime; the other channels are untouched by it."""
    model, feeds = in_model((1, 8, 6, 6))
    feeds["x"][0, 3, 2, 2] = bad
    _, got, want = run_both(rt, model, feeds, 1)
    got, want = got[0], want[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 3]).all() and not np.isnan(np.delete(got, 3, axis=1)).any()
    ok = ~np.isnan(want)
    assert_matches(got[ok], want[ok], what="the other channels")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_value_in_the_blocked_layout_matches_onnxruntime(rt, bad):
    """The same through oneDNN's batch normalization: the convolution before it spreads the
    value over every channel near it, and the NaNs fall where onnxruntime's do."""
    model, feeds = in_model((1, 16, 6, 6), conv_before=True)
    feeds["x"][0, 3, 2, 2] = bad
    _, got, want = run_both(rt, model, feeds, 1)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert_matches(got[0][ok], want[0][ok], what=str(bad))


def test_one_image_after_a_convolution_runs_as_onednns_batch_normalization():
    """The blocked layout the convolution wrote is normalised where it lies: oneDNN's batch
    normalization primitive runs, and no reorder comes between it and the convolution."""
    log = onednn_log(
        "import numpy as np\n"
        "import test_instance_norm_matches_onnxruntime as t\n"
        "model, feeds = t.in_model((1, 32, 17, 13), conv_before=True)\n")
    kinds = [ln.split(",")[3] for ln in log]
    assert "batch_normalization" in kinds, log
    at = kinds.index("batch_normalization")
    assert kinds[at - 1] == "convolution", kinds


def test_instance_normalization_is_among_the_declared_ops():
    import nnplug_backend_onednn

    assert "InstanceNormalization" in nnplug_backend_onednn.OPS
    onnx.checker.check_model(in_model((1, 4, 3, 3))[0])

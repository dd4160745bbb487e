"""InstanceNormalization on the oneDNN backend against onnxruntime, random parameters: one image
in a convolution's blocked layout runs as oneDNN's batch normalization (each channel's own
statistics); plain values and batches other than one run as the backend's own loop. The
GroupNorm pattern torch exports (Reshape to (N, groups, -1), InstanceNormalization with ones
and zeros, Reshape back, [Mul, Add] per channel, [Relu]) runs as one group normalization of
the backend's own on the layout the convolution before it wrote (blocked, channels-last or
plain), with no reorder around it. Either way the nodes stay on oneDNN, where a switch to the
CPU backend costs a reorder each way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_matches, graph_model, onednn_log, profiled_steps, run_both
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


def group_norm_model(n, c, h, w, groups, affine=True, relu=True, conv_before=True, offset=0.0,
                     conv_after=False):
    """torch's GroupNorm export, after a Conv (or on the input): Reshape (n, groups, -1),
    InstanceNormalization with ones and zeros, Reshape to the Conv's shape, [Mul and Add per
    channel], [Relu], [a Conv reading it]."""
    inits = {"g": np.array([n, groups, -1], np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
             "shape": np.array([n, c, h, w], np.int64)}
    feeds = {"x": rand(n, c, h, w, offset=offset)}
    nodes, x = [], "x"
    if conv_before:
        inits["w"] = rand(c, c, 3, 3, scale=0.2)
        nodes.append(node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]))
        x = "c"
    nodes += [node("Reshape", [x, "g"], ["r"], "reshape"),
              node("InstanceNormalization", ["r", "ones", "zeros"], ["i"], "in"),
              node("Reshape", ["i", "shape"], ["b"], "back")]
    last = "b"
    if affine:
        inits.update(mul=rand(c, 1, 1), add=rand(c, 1, 1))
        nodes += [node("Mul", ["b", "mul"], ["m"], "mul"), node("Add", ["m", "add"], ["a"], "add")]
        last = "a"
    if relu:
        nodes.append(node("Relu", [last], ["rl"], "relu"))
        last = "rl"
    if conv_after:
        inits["w2"] = rand(4, c, 3, 3, scale=0.2)
        nodes.append(node("Conv", [last, "w2"], ["y"], "conv_after", pads=[1, 1, 1, 1]))
    else:
        nodes.append(node("Identity", [last], ["y"], "out"))
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


GROUP_NORMS = {
    "batch_1": dict(n=1, c=32, h=20, w=18, groups=8),
    "batch_2": dict(n=2, c=32, h=20, w=18, groups=8),
    "channels_off_the_16_block": dict(n=1, c=24, h=9, w=31, groups=6),
    "groups_across_blocks": dict(n=1, c=48, h=11, w=10, groups=3),
    "a_group_per_channel": dict(n=1, c=64, h=8, w=8, groups=64),
    "one_group": dict(n=1, c=20, h=7, w=7, groups=1),
    "no_affine": dict(n=2, c=20, h=9, w=8, groups=4, affine=False),
    "no_relu_conv_after": dict(n=1, c=32, h=12, w=12, groups=4, relu=False, conv_after=True),
    "plain_input": dict(n=1, c=12, h=10, w=9, groups=3, conv_before=False),
    "mean_far_from_zero": dict(n=1, c=16, h=16, w=16, groups=4, conv_before=False, offset=300.0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(GROUP_NORMS))
def test_the_exported_group_norm_pattern_matches_onnxruntime(rt, case, threads):
    model, feeds = group_norm_model(**GROUP_NORMS[case])
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what=case)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_nonfinite_value_spoils_only_its_own_group(rt, bad):
    """A NaN or an infinity in one group makes that group's statistics NaN, as in onnxruntime
    (the fused Relu keeps a NaN one); the other groups are untouched by it."""
    model, feeds = group_norm_model(1, 16, 6, 6, groups=4, conv_before=False)
    feeds["x"][0, 5, 2, 2] = bad  # channel 5: group 1 (channels 4-7)
    _, got, want = run_both(rt, model, feeds, 1)
    got, want = got[0], want[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 4:8]).all() and not np.isnan(np.delete(got, range(4, 8), axis=1)).any()
    ok = ~np.isnan(want)
    assert_matches(got[ok], want[ok], what="the other groups")


def test_a_group_norm_after_a_convolution_is_one_step_with_no_reorder():
    """The profile of a run names one 'group normalization' step right after the convolution
    (no reorder between them, no binary or eltwise primitive for its Mul, Add and Relu)."""
    steps = [ln.split("|")[2].strip() for ln in profiled_steps(
        "from test_instance_norm_matches_onnxruntime import group_norm_model\n"
        "model, feeds = group_norm_model(1, 32, 40, 40, groups=8, conv_after=True)")]
    at = steps.index("group normalization")
    assert steps[at - 1] == "convolution" and steps.count("group normalization") == 1, steps
    assert "binary" not in steps and "eltwise" not in steps, steps


def test_a_group_norm_under_the_bf16_hint_stays_within_its_tolerance(rt):
    """The convolutions around it in bfloat16 (channels-last on AMX), the normalisation in
    float32: within the hint's 2e-2 of the output's largest magnitude."""
    model, feeds = group_norm_model(1, 32, 24, 24, groups=8, conv_after=True)
    want = run_both(rt, model, feeds, 2)[2][0]
    import nnplug

    so = nnplug.SessionOptions()
    so.add_session_config_entry("nnplug.precision", "bf16")
    sess = nnplug.InferenceSession(model, so, providers=["onednn", "cpu"], runtime=rt)
    got = sess.run(None, feeds)[0]
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


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

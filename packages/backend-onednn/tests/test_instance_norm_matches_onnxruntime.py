"""InstanceNormalization on the oneDNN backend against onnxruntime, random parameters: a group
normalization of the backend's own with one channel a group, on the layout the convolution
before it wrote (blocked, channels-last or plain), a Relu after it fused; more channels than
its arrays hold run as a loop on the plain layout. The GroupNorm pattern torch exports
(Reshape to (N, groups, -1), InstanceNormalization with ones and zeros, Reshape back, [Mul,
Add] per channel, [Relu]) runs as one such step too, with no reorder around it. Under the
bf16 hint on AMX both read and write bf16 where their producer and readers are convolutions.
Either way the nodes stay on oneDNN, where a switch to the CPU backend costs a reorder each
way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import AMX, assert_matches, graph_model, onednn_log, profiled_steps, run_both
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(29)


def rand(*shape, scale=1.0, offset=0.0):
    return (R.standard_normal(shape) * scale + offset).astype(np.float32)


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def in_model(shape, conv_before=False, eps=1e-5, offset=0.0, conv_after=False):
    """x (shape) -> [Conv 3x3] -> InstanceNormalization -> Relu [-> Conv 3x3]."""
    c = shape[1]
    inits = {"s": rand(c), "b": rand(c)}
    feeds = {"x": rand(*shape, offset=offset)}
    nodes, x = [], "x"
    if conv_before:  # the Conv's result is in oneDNN's blocked layout when the norm reads it
        inits["w"] = rand(c, c, 3, 3, scale=0.2)
        nodes.append(node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]))
        x = "c"
    nodes += [node("InstanceNormalization", [x, "s", "b"], ["n"], "in", epsilon=eps),
              node("Relu", ["n"], ["r" if conv_after else "y"], "relu")]
    if conv_after:
        inits["w2"] = rand(4, c, 3, 3, scale=0.2)
        nodes.append(node("Conv", ["r", "w2"], ["y"], "conv_after", pads=[1, 1, 1, 1]))
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
    "more_channels_than_the_step_holds": dict(shape=(1, 2100, 3, 3)),
    "conv_after": dict(shape=(1, 16, 8, 8), conv_before=True, conv_after=True),
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


BF16_CASES = {
    "group norm, batch 2": lambda: group_norm_model(2, 32, 12, 10, groups=8, conv_after=True),
    "group norm, 24 channels": lambda: group_norm_model(1, 24, 9, 11, groups=6, conv_after=True),
    "group norm, groups across blocks": lambda: group_norm_model(1, 48, 11, 10, groups=3,
                                                                 conv_after=True),
    "group norm, no Relu": lambda: group_norm_model(1, 32, 24, 24, groups=8, relu=False,
                                                    conv_after=True),
    "group norm, pixel ranges": lambda: group_norm_model(1, 40, 64, 40, groups=4,
                                                         conv_after=True),
    "instance norm": lambda: in_model((1, 32, 17, 13), conv_before=True, conv_after=True),
    "instance norm, mean far from zero": lambda: in_model((1, 16, 9, 9), conv_before=True,
                                                          conv_after=True, offset=300.0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(BF16_CASES))
def test_norms_between_convolutions_under_the_bf16_hint_stay_within_its_tolerance(
        rt, case, threads):
    """Between two convolutions in bfloat16 (channels-last on AMX) the normalisation reads and
    writes bfloat16, its statistics in double: within the hint's 2e-2 of the output's largest
    magnitude (16 channels of a block and the 8 after them; a channel's mean 300 from 0, where
    bf16's step is 2: the statistics see the rounded values the convolution wrote; 2,560
    channels-last pixels of 40 channels, 16 + 16 + 8, whose sums add over 4 ranges of pixels)."""
    model, feeds = BF16_CASES[case]()
    _, got, want = run_both(rt, model, feeds, threads,
                            targets={"onednn": {"kind": "onednn", "precision": "bf16"}})
    assert np.abs(got[0] - want[0]).max() <= 2e-2 * np.abs(want[0]).max(), case


@pytest.mark.parametrize("norm", ["group", "instance"])
def test_under_the_bf16_hint_a_norm_between_convolutions_keeps_bf16(norm):
    """oneDNN's log under the hint on AMX: the convolution before the norm writes bf16 and the
    one after reads bf16, with no reorder of a bf16 value or into one but the input's (the
    norm's result was float32, and reordered to bf16 for the convolution after it)."""
    setup = ("from test_instance_norm_matches_onnxruntime import group_norm_model, in_model\n" +
             ("model, feeds = group_norm_model(1, 32, 24, 24, groups=8, conv_after=True)\n"
              if norm == "group" else
              "model, feeds = in_model((1, 32, 24, 24), conv_before=True, conv_after=True)\n"))
    lines = onednn_log(setup, env={"NNPLUG_PRECISION": "bf16"})
    convs = [ln for ln in lines if ",convolution," in ln]
    assert len(convs) == 2, lines
    if not AMX:
        assert not any("src_bf16" in ln or "dst_bf16" in ln for ln in lines), lines
        return
    assert "dst_bf16" in convs[0] and "src_bf16" in convs[1], convs
    reorders = [ln for ln in lines if ",reorder," in ln and "bf16" in ln]
    assert len(reorders) == 1 and "1x32x24x24" in reorders[0] and "src_f32" in reorders[0], \
        reorders


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


def test_an_instance_norm_after_a_convolution_is_one_step_with_its_relu():
    """The profile of a run names one 'instance normalization' step right after the
    convolution: no reorder between them, no eltwise primitive for the Relu."""
    steps = [ln.split("|")[2].strip() for ln in profiled_steps(
        "from test_instance_norm_matches_onnxruntime import in_model\n"
        "model, feeds = in_model((1, 32, 17, 13), conv_before=True, conv_after=True)")]
    at = steps.index("instance normalization")
    assert steps[at - 1] == "convolution" and steps[at + 1] == "convolution", steps
    assert steps.count("instance normalization") == 1 and "eltwise" not in steps, steps


def test_instance_normalization_is_among_the_declared_ops():
    import nnplug_backend_onednn

    assert "InstanceNormalization" in nnplug_backend_onednn.OPS
    onnx.checker.check_model(in_model((1, 4, 3, 3))[0])

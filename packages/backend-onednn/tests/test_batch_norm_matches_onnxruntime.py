"""A BatchNormalization that no Conv before it absorbs (DenseNet's norm of each Concat, a
pre-activation block) against onnxruntime, with random parameters: with constant parameters it
runs as one per-channel multiply-add in its input's layout, taking the element-wise ops after
it as post-ops; with a parameter given at run time it stays oneDNN's batch normalization."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_matches, graph_model, onednn_log, run_both
from onnx import helper

R = np.random.default_rng(77)


def rand(*shape):
    return R.standard_normal(shape).astype(np.float32)


def bn_params(c):
    return {"s": rand(c), "sh": rand(c), "m": rand(c), "v": (np.abs(rand(c)) + 0.05).astype(np.float32)}


def node(op, ins, outs, name, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def bn_model(shape, after=(), conv_before=False, runtime_param=None, eps=1e-5):
    """x (shape) -> [Conv 3x3 + Relu] -> BatchNormalization -> the element-wise ops `after`."""
    c = shape[1]
    inits = bn_params(c)
    feeds = {"x": rand(*shape)}
    nodes, x = [], "x"
    if conv_before:  # the Conv's output is in oneDNN's layout (nhwc) when the norm reads it
        inits["w"] = rand(c, c, 3, 3) * np.float32(0.2)
        nodes += [node("Conv", ["x", "w"], ["c"], "conv", pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"], "relu0")]
        x = "r"
    if runtime_param:
        feeds[runtime_param] = inits.pop(runtime_param)
    nodes.append(node("BatchNormalization", [x, "s", "sh", "m", "v"], ["n0"], "bn", epsilon=eps))
    for i, (op, kw) in enumerate(after):
        nodes.append(node(op, [f"n{i}"], [f"n{i + 1}"], f"post{i}", **kw))
    return graph_model(nodes, feeds, inits, opset=15), feeds, [n.name for n in nodes]


CASES = {
    # 224 channels: oneDNN's own batch normalization has no nhwc kernel there (plain + slow)
    "after_conv_224_channels_relu": dict(shape=(1, 224, 9, 9), after=[("Relu", {})], conv_before=True),
    "after_conv_40_channels_sigmoid": dict(shape=(2, 40, 7, 5), after=[("Sigmoid", {})], conv_before=True),
    "plain_input_clip_then_tanh": dict(shape=(2, 12, 6, 6), after=[("Clip", {}), ("Tanh", {})]),
    "plain_input_leaky_relu": dict(shape=(1, 5, 4, 4), after=[("LeakyRelu", {"alpha": 0.3})]),
    "rank2": dict(shape=(7, 33), after=[("Relu", {})]),
    "rank3": dict(shape=(2, 16, 11), after=[]),
    "rank5": dict(shape=(1, 8, 3, 4, 5), after=[("Relu", {})]),
    "large_epsilon": dict(shape=(1, 24, 5, 5), eps=0.5),
    "runtime_scale": dict(shape=(1, 16, 5, 5), after=[("Relu", {})], runtime_param="s"),
    "runtime_variance": dict(shape=(2, 8, 5, 5), runtime_param="v"),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_normalization_matches_onnxruntime(rt, case, threads):
    model, feeds, names = bn_model(**CASES[case])
    assignment, got, want = run_both(rt, model, feeds, threads)
    for n in names:
        assert assignment[n] == "onednn", f"{case}: node {n} went to {assignment[n]}"
    for g, w in zip(got, want):
        assert_matches(g, w, what=case)


def test_zero_variance_channel_matches_onnxruntime(rt):
    """var = 0 with a small epsilon: the largest scale the multiply-add meets."""
    model, feeds, _ = bn_model((1, 16, 5, 5), after=[("Relu", {})])
    var = {i.name: i for i in model.graph.initializer}["v"]
    var.CopyFrom(helper.make_tensor("v", var.data_type, var.dims, np.zeros(16, np.float32)))
    _, got, want = run_both(rt, model, feeds, 1)
    assert_matches(got[0], want[0], what="zero variance")


SETUP = """
from test_batch_norm_matches_onnxruntime import CASES, bn_model
model, feeds, _ = bn_model(**CASES[sys.argv[2]])
"""


def executed_primitives(case):
    return [ln.split(",") for ln in onednn_log(SETUP, case)]


def test_norm_after_conv_is_one_binary_primitive_in_the_conv_layout():
    """Conv + Relu, then BatchNormalization + Relu over 224 channels: the convolution, then one
    binary primitive (multiply, add of the shift and relu as post-ops) on the nhwc values the
    convolution wrote; no batch normalization primitive and no reorder between the two."""
    lines = executed_primitives("after_conv_224_channels_relu")
    kinds = [ln[3] for ln in lines]
    assert "batch_normalization" not in kinds, kinds
    conv, binary = kinds.index("convolution"), kinds.index("binary")
    assert binary == conv + 1, kinds
    desc = ",".join(lines[binary])
    assert "binary_add" in desc and "eltwise_relu" in desc and "acdb" in desc, desc
    assert not lines[binary][4].startswith("ref"), desc


def test_norm_with_runtime_parameter_stays_batch_normalization():
    kinds = [ln[3] for ln in executed_primitives("runtime_scale")]
    assert "batch_normalization" in kinds and "binary" not in kinds, kinds


def caffe2_norm_model(shape=(1, 24, 6, 6)):
    """Caffe2's form (the light zoo's DenseNet-121): BatchNormalization, then a Mul and an Add
    of one value per channel (the Add's constant first, of rank 3), then Relu."""
    c = shape[1]
    inits = {**bn_params(c), "k": rand(1, c, 1, 1), "a": rand(c, 1, 1)}
    nodes = [node("BatchNormalization", ["x", "s", "sh", "m", "v"], ["n"], "bn"),
             node("Mul", ["n", "k"], ["p"], "mul"), node("Add", ["a", "p"], ["q"], "add"),
             node("Relu", ["q"], ["y"], "relu")]
    feeds = {"x": rand(*shape)}
    return graph_model(nodes, feeds, inits, opset=15), feeds


@pytest.mark.parametrize("threads", [1, 2])
def test_per_channel_mul_and_add_after_a_norm_match_onnxruntime(rt, threads):
    model, feeds = caffe2_norm_model()
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], what="norm, mul, add, relu")


def test_per_channel_mul_and_add_fold_into_the_norms_multiply_add():
    """The Mul and the Add fold into the norm's scales and shifts: one binary primitive (the
    multiply, the shift's add and the Relu as post-ops), where there were three."""
    lines = [ln.split(",") for ln in onednn_log(
        "from test_batch_norm_matches_onnxruntime import caffe2_norm_model\n"
        "model, feeds = caffe2_norm_model()")]
    binary = [ln for ln in lines if ln[3] == "binary"]
    assert len(binary) == 1, [ln[3:6] for ln in lines]
    assert "binary_add" in ",".join(binary[0]) and "eltwise_relu" in ",".join(binary[0]), binary

"""Whole partitions as one kernel: activations kept in oneDNN's blocked layouts between nodes,
the residual Add as a `sum` post-op, symbolic (dynamic) dimensions planned per shape at run
time; each against onnxruntime on random weights, at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    assert_all_on_onednn_and_matching,
    assert_matches,
    graph_model,
    onednn_log,
    onnxruntime_run,
    run_both,
)
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(77)


def rand(*shape):
    return R.standard_normal(shape).astype(np.float32)


def node(op, ins, out, name, **attrs):
    return helper.make_node(op, list(ins), [out], name=name, **attrs)


class Builder:
    """Nodes and random initializers of a small convnet."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], {}, 0

    def _name(self, op):
        self.n += 1
        return f"{op.lower()}{self.n}"

    def conv(self, x, cin, cout, k=3, stride=1, group=1, bias=True, bn=False, act="Relu"):
        name = self._name("conv")
        w = f"{name}_w"
        self.inits[w] = (rand(cout, cin // group, k, k) / np.sqrt(cin * k * k / group)).astype(np.float32)
        ins = [x, w]
        if bias:
            self.inits[f"{name}_b"] = rand(cout)
            ins.append(f"{name}_b")
        self.nodes.append(node("Conv", ins, name, name, pads=[k // 2] * 4, strides=[stride, stride], group=group))
        y = name
        if bn:
            y = self.bn(y, cout)
        if act:
            y = self.op(act, [y])
        return y

    def bn(self, x, c):
        name = self._name("bn")
        params = [f"{name}_{p}" for p in ("s", "b", "m", "v")]
        self.inits.update({params[0]: rand(c), params[1]: rand(c), params[2]: rand(c),
                           params[3]: np.abs(rand(c)) + 0.5})
        self.nodes.append(node("BatchNormalization", [x, *params], name, name, epsilon=1e-5))
        return name

    def op(self, op, ins, **attrs):
        name = self._name(op)
        self.nodes.append(node(op, ins, name, name, **attrs))
        return name


def blocked_chain():
    """Conv (C=3 input) -> Relu -> MaxPool -> 1x1 and 3x3 branches -> Concat -> BN+Relu ->
    depthwise Conv -> Sigmoid -> Mul (broadcast constant) -> AveragePool -> LRN -> Softmax
    over channels -> GlobalAveragePool: layouts change at every kind of node."""
    b = Builder()
    y = b.conv("x", 3, 16)
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    left = b.conv(y, 16, 16, k=1, act="LeakyRelu")
    right = b.conv(y, 16, 32, k=3, act="Clip")
    y = b.op("Concat", [left, right], axis=1)
    y = b.op("Relu", [b.bn(y, 48)])
    y = b.conv(y, 48, 48, group=48, act="Sigmoid")
    b.inits["scale"] = rand(1, 48, 1, 1)
    y = b.op("Mul", [y, "scale"])
    y = b.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("LRN", [y], size=3, alpha=1e-3, beta=0.75, bias=1.0)
    y = b.op("Softmax", [y], axis=1)
    b.op("GlobalAveragePool", [y])
    return b


def residual_net(batch=2):
    """Two ResNet blocks: an identity shortcut (the sum accumulates in place into the
    shortcut's buffer), a projection shortcut computed after the main branch in node order,
    and a shortcut that is the kernel's input (copied into the Conv's destination first)."""
    b = Builder()
    x = b.conv("x", 8, 16, bn=True)
    # block 1: identity shortcut
    y = b.conv(x, 16, 16, bn=True)
    y = b.conv(y, 16, 16, bn=True, act=None)
    x = b.op("Relu", [b.op("Add", [y, x])])
    # block 2: stride 2, projection shortcut after the main branch in node order
    y = b.conv(x, 16, 32, stride=2, bn=True)
    y = b.conv(y, 32, 32, bn=True, act=None)
    proj = b.conv(x, 16, 32, k=1, stride=2, bn=True, act=None)
    x = b.op("Relu", [b.op("Add", [proj, y])])
    return b


@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_layouts_across_a_partition(rt, threads):
    b = blocked_chain()
    assert_all_on_onednn_and_matching(rt, b.nodes, {"x": rand(2, 3, 17, 17)}, b.inits, 18, threads, "blocked chain")


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_add_as_sum_post_op(rt, threads):
    b = residual_net()
    assert_all_on_onednn_and_matching(rt, b.nodes, {"x": rand(2, 8, 12, 12)}, b.inits, 15, threads, "residual blocks")


@pytest.mark.parametrize("threads", [1, 2])
def test_sum_post_op_with_the_kernel_input_as_shortcut(rt, threads):
    b = Builder()
    y = b.conv("x", 16, 16, bn=True)
    y = b.conv(y, 16, 16, bn=True, act=None)
    b.op("Relu", [b.op("Add", ["x", y])])
    feeds = {"x": rand(1, 16, 9, 9)}
    before = feeds["x"].copy()
    model = graph_model(b.nodes, feeds, b.inits, opset=15)
    assignment, outs, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(outs[0], want[0], what="shortcut from the input")
    np.testing.assert_array_equal(feeds["x"], before)  # the input is read, never written


def dynamic_model(b: Builder, dims: list):
    """b's nodes with graph input x of dims (symbolic names allowed), output typed as ONNX
    infers it (with the symbolic batch)."""
    import onnx

    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    ini = [numpy_helper.from_array(v, k) for k, v in b.inits.items()]
    probe = helper.make_model(helper.make_graph(b.nodes, "g", gin, [], ini),
                              opset_imports=[helper.make_opsetid("", 15)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    out = b.nodes[-1].output[0]
    return helper.make_model(helper.make_graph(b.nodes, "g", gin, [inferred[out]], ini),
                             opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_batch_is_planned_per_shape(rt, threads):
    b = residual_net()
    b.op("GlobalAveragePool", [b.nodes[-1].output[0]])
    model = dynamic_model(b, ["N", 8, 12, 12])
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=BACKENDS) as net:
            assert set(net.assignment.values()) == {"onednn"}, net.assignment
            for batch in (1, 3, 1, 2):
                feeds = {"x": rand(batch, 8, 12, 12)}
                got = net.run(feeds)[net.outputs[0].name]
                assert_matches(got, onnxruntime_run(model, feeds)[0], what=f"batch {batch}")
    finally:
        lib.set_num_threads(0)


def test_dynamic_spatial_dims(rt):
    b = Builder()
    y = b.conv("x", 3, 8, stride=2)
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    b.op("Relu", [b.op("Add", [b.conv(y, 8, 8, act=None), y])])
    model = dynamic_model(b, ["N", 3, "H", "W"])
    with rt.load(model, backends=BACKENDS) as net:
        # convolutions and pools are planned per shape; the light Add and Relu, whose shapes
        # may change at every run, are left to cpu (kernels.c, changing_shape_not_worth_a_plan)
        kinds = {n.name: n.op_type for n in model.graph.node}
        assert {kinds[k] for k, v in net.assignment.items() if v == "onednn"} == \
            {"Conv", "MaxPool"}, net.assignment
        assert {kinds[k] for k, v in net.assignment.items() if v == "cpu"} == \
            {"Add", "Relu"}, net.assignment
        for shape in ((1, 3, 16, 16), (2, 3, 21, 13)):
            feeds = {"x": rand(*shape)}
            got = net.run(feeds)[net.outputs[0].name]
            assert_matches(got, onnxruntime_run(model, feeds)[0], what=f"shape {shape}")


def test_wrong_input_shape_for_a_dynamic_kernel_is_a_clear_error(rt):
    import nnplug

    b = Builder()
    b.conv("x", 3, 8)
    model = dynamic_model(b, ["N", 3, 8, 8])
    with rt.load(model, backends=BACKENDS) as net:
        with pytest.raises(nnplug.NnplugError, match="input 'x' has shape"):
            net.run({"x": rand(1, 3, 9, 8)})


SETUP = """
from conftest import graph_model
from test_partitions_match_onnxruntime import blocked_chain, rand
b = blocked_chain()
feeds = {"x": rand(2, 3, 17, 17)}
model = graph_model(b.nodes, feeds, b.inits, opset=18)
"""


def test_activations_stay_in_blocked_layouts_inside_a_partition():
    """oneDNN's own log of one run: reorders only where a node needs another layout than its
    producer's and at the edges, far fewer than one per node (what plain layouts at every
    node's edges cost), and convolutions on its blocked (not reference or gemm) kernels."""
    execs = [f[f.index("exec") + 2:] for f in (ln.split(",") for ln in onednn_log(SETUP))]
    kinds = [e[0] for e in execs]
    assert kinds.count("convolution") == 4, kinds
    assert kinds.count("reorder") <= 3, [",".join(e[:4]) for e in execs]
    for e in execs:
        if e[0] == "convolution":
            assert not e[1].startswith(("ref", "gemm")), ",".join(e)


@pytest.mark.parametrize("threads", [1, 2])
def test_batchnorm_exported_as_mul_add_is_folded_into_the_conv(rt, threads):
    """Conv -> Mul by per-channel constant -> Add per-channel constant -> Relu (how some
    exporters write BatchNormalization), a scalar Mul, and a Mul by a runtime value, which is
    not folded."""
    b = Builder()
    y = b.conv("x", 3, 8, act=None)
    b.inits.update(scale=rand(8, 1, 1), shift=rand(1, 8, 1, 1), half=np.float32(0.5))
    y = b.op("Relu", [b.op("Add", ["shift", b.op("Mul", [y, "scale"])])])
    y = b.conv(y, 8, 8, bias=False, act=None)
    y = b.op("Mul", ["half", y])
    b.op("Mul", [b.conv(y, 8, 8, act=None), "g"])
    feeds = {"x": rand(2, 3, 10, 10), "g": rand(2, 8, 10, 10)}
    model = graph_model(b.nodes, feeds, b.inits, opset=15)
    assignment, outs, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(outs[0], want[0], what=f"folded Mul/Add, {threads} thread(s)")

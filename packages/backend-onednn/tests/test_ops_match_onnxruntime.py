"""Each op the backend claims, on random inputs and random weights, against onnxruntime; the
nodes a case expects the backend to claim must be assigned to it (a decline fails the case)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, assert_matches, graph_model, onnxruntime_run
from onnx import helper

R = np.random.default_rng(1234)


def rand(*shape):
    return R.standard_normal(shape).astype(np.float32)


def node(op, ins, outs=("y",), name=None, **attrs):
    return helper.make_node(op, list(ins), list(outs), name=name or op.lower(), **attrs)


def conv_case(x, w, bias=True, post=(), name="conv", **attrs):
    inits = {"w": rand(*w)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rand(w[0])
        ins.append("b")
    out = "c" if post else "y"
    nodes = [node("Conv", ins, [out], **attrs)]
    for i, (op, extra_inits, kw) in enumerate(post):
        last = i == len(post) - 1
        o = "y" if last else f"p{i}"
        nodes.append(node(op, [out, *extra_inits], [o], name=f"post{i}", **kw))
        out = o
    for (_, extra, _) in post:
        for k in extra:
            inits[k] = {"lo": np.float32(-0.5), "hi": np.float32(0.7)}[k]
    return nodes, {"x": rand(*x)}, inits, [n.name for n in nodes]


def unary(op, shape=(2, 3, 5, 7), opset=18, positive=False, **attrs):
    x = rand(*shape)
    if positive:
        x = np.abs(x) + 0.1
    return [node(op, ["x"], **attrs)], {"x": x}, {}, [op.lower()], opset


CASES = {
    "conv_3x3_pad_bias": conv_case((2, 3, 9, 9), (8, 3, 3, 3), pads=[1, 1, 1, 1]),
    "conv_stride2_nobias": conv_case((1, 4, 10, 11), (6, 4, 3, 3), bias=False, strides=[2, 2]),
    "conv_dilated_asym_pads": conv_case((1, 3, 12, 12), (5, 3, 3, 3), dilations=[2, 2], pads=[1, 0, 2, 1]),
    "conv_groups": conv_case((1, 8, 7, 7), (8, 2, 3, 3), group=4, pads=[1, 1, 1, 1]),
    "conv_depthwise": conv_case((2, 6, 8, 8), (6, 1, 3, 3), group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
    "conv_1x1": conv_case((1, 16, 5, 5), (8, 16, 1, 1)),
    "conv_same_upper": conv_case((1, 3, 8, 8), (4, 3, 4, 4), auto_pad="SAME_UPPER", strides=[2, 2]),
    "conv_relu": conv_case((1, 3, 8, 8), (4, 3, 3, 3), post=[("Relu", [], {})]),
    "conv_leakyrelu": conv_case((1, 3, 8, 8), (4, 3, 3, 3), post=[("LeakyRelu", [], {"alpha": 0.2})]),
    "conv_clip": conv_case((1, 3, 8, 8), (4, 3, 3, 3), post=[("Clip", ["lo", "hi"], {})]),
    "conv_sigmoid_tanh": conv_case((1, 3, 8, 8), (4, 3, 3, 3), post=[("Sigmoid", [], {}), ("Tanh", [], {})]),
}
CASES = {k: (*v, 18) for k, v in CASES.items()}


def conv_bn_case(bias, relu):
    oc = 6
    inits = {"w": rand(oc, 3, 3, 3), "s": rand(oc), "sh": rand(oc), "m": rand(oc),
             "v": np.abs(rand(oc)) + 0.2}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rand(oc)
        ins.append("b")
    nodes = [node("Conv", ins, ["c"], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["n" if relu else "y"], epsilon=1e-3)]
    if relu:
        nodes.append(node("Relu", ["n"]))
    return nodes, {"x": rand(2, 3, 7, 7)}, inits, [n.name for n in nodes], 15


def conv_residual_case(op, swap=False, bn=False, other_shape=(2, 6, 7, 7)):
    oc = 6
    inits = {"w": rand(oc, 3, 3, 3), "b": rand(oc)}
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    if bn:
        inits.update(s=rand(oc), sh=rand(oc), m=rand(oc), v=np.abs(rand(oc)) + 0.2)
        nodes.append(node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["n"]))
    last = nodes[-1].output[0]
    nodes += [node(op, ["r", last] if swap else [last, "r"], ["a"], name="res"), node("Relu", ["a"])]
    return nodes, {"x": rand(2, 3, 7, 7), "r": rand(*other_shape)}, inits, [n.name for n in nodes], 15


CASES["conv_add_relu_residual"] = conv_residual_case("Add")
CASES["conv_bn_add_relu_residual_swapped"] = conv_residual_case("Add", swap=True, bn=True)
CASES["conv_mul_broadcast"] = conv_residual_case("Mul", other_shape=(1, 6, 1, 1))
CASES["conv_sub_residual"] = conv_residual_case("Sub")
CASES["conv_sum_residual"] = conv_residual_case("Sum")
CASES["conv_bn_folded"] = conv_bn_case(bias=True, relu=False)
CASES["conv_nobias_bn_relu_folded"] = conv_bn_case(bias=False, relu=True)

CASES.update({
    "gemm_transB_bias": ([node("Gemm", ["a", "w", "c"], transB=1)], {"a": rand(4, 32)},
                         {"w": rand(10, 32), "c": rand(10)}, ["gemm"], 18),
    "gemm_transA_matrix_bias": ([node("Gemm", ["a", "w", "c"], transA=1)], {"a": rand(32, 4)},
                                {"w": rand(32, 10), "c": rand(4, 10)}, ["gemm"], 18),
    "gemm_relu": ([node("Gemm", ["a", "w", "c"], ["g"], transB=1), node("Relu", ["g"], name="relu")],
                  {"a": rand(3, 16)}, {"w": rand(5, 16), "c": rand(5)}, ["gemm", "relu"], 18),
    "gemm_runtime_b": ([node("Gemm", ["a", "b"])], {"a": rand(3, 7), "b": rand(7, 4)}, {}, ["gemm"], 18),
    "matmul_2d_const": ([node("MatMul", ["a", "w"])], {"a": rand(5, 12)}, {"w": rand(12, 9)}, ["matmul"], 18),
    "matmul_batched": ([node("MatMul", ["a", "b"])], {"a": rand(2, 3, 4, 6), "b": rand(2, 3, 6, 5)}, {},
                       ["matmul"], 18),
    "matmul_broadcast_batch": ([node("MatMul", ["a", "w"])], {"a": rand(2, 3, 4, 6)}, {"w": rand(6, 5)},
                               ["matmul"], 18),
    "maxpool_3x3_s2_pad": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                           {"x": rand(2, 4, 11, 11)}, {}, ["maxpool"], 18),
    "maxpool_ceil": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                     {"x": rand(1, 3, 10, 10)}, {}, ["maxpool"], 18),
    "maxpool_dilated": ([node("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2])],
                        {"x": rand(1, 3, 9, 9)}, {}, ["maxpool"], 18),
    "avgpool_exclude_pad": ([node("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                            {"x": rand(1, 3, 7, 7)}, {}, ["averagepool"], 18),
    "avgpool_include_pad": ([node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1], count_include_pad=1)],
                            {"x": rand(1, 3, 9, 9)}, {}, ["averagepool"], 18),
    "avgpool_ceil": ([node("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
                     {"x": rand(1, 2, 7, 7)}, {}, ["averagepool"], 18),
    "globalavgpool": ([node("GlobalAveragePool", ["x"])], {"x": rand(2, 5, 6, 7)}, {}, ["globalaveragepool"], 18),
    "globalmaxpool": ([node("GlobalMaxPool", ["x"])], {"x": rand(2, 5, 6, 7)}, {}, ["globalmaxpool"], 18),
    "relu": unary("Relu"),
    "leakyrelu": unary("LeakyRelu", alpha=0.3),
    "sigmoid": unary("Sigmoid", shape=(4, 1000)),
    "tanh": unary("Tanh", shape=(3, 17)),
    "elu": unary("Elu", alpha=0.7),
    "abs": unary("Abs"),
    "neg": unary("Neg"),
    "exp": unary("Exp"),
    "sqrt": unary("Sqrt", positive=True),
    "log": unary("Log", positive=True),
    "hardsigmoid": unary("HardSigmoid", alpha=0.3, beta=0.4),
    "hardswish": unary("HardSwish"),
    "clip_opset6": unary("Clip", opset=6, min=-0.3, max=0.4),
    "softmax_last": unary("Softmax", shape=(3, 4, 10)),
    "softmax_axis1": unary("Softmax", shape=(3, 4, 10), axis=1),
    "logsoftmax": unary("LogSoftmax", shape=(5, 9)),
    "softmax_opset11_last": unary("Softmax", shape=(2, 7), opset=11, axis=1),
    "add_same": ([node("Add", ["a", "b"])], {"a": rand(2, 3, 4), "b": rand(2, 3, 4)}, {}, ["add"], 18),
    "add_broadcast_channel": ([node("Add", ["a", "b"])], {"a": rand(2, 3, 4, 5)}, {"b": rand(3, 1, 1)}, ["add"], 18),
    "mul_broadcast_first": ([node("Mul", ["a", "b"])], {"a": rand(5), "b": rand(2, 4, 5)}, {}, ["mul"], 18),
    "sub_broadcast": ([node("Sub", ["a", "b"])], {"a": rand(2, 4, 5), "b": rand(4, 1)}, {}, ["sub"], 18),
    "sum_two_inputs_broadcast": ([node("Sum", ["a", "b"])], {"a": rand(2, 3, 4), "b": rand(3, 1)}, {}, ["sum"], 18),
    "div": ([node("Div", ["a", "b"])], {"a": rand(3, 6), "b": np.abs(rand(3, 6)) + 0.5}, {}, ["div"], 18),
    # declined (oneDNN's max and min drop a NaN): the cpu backend runs both
    "max_min": ([node("Max", ["a", "b"], ["m"]), node("Min", ["m", "c"], name="min")],
                {"a": rand(4, 6), "b": rand(4, 6), "c": rand(1, 6)}, {}, [], 18),
    "add_relu": ([node("Add", ["a", "b"], ["s"]), node("Relu", ["s"], name="relu")],
                 {"a": rand(2, 8, 3, 3), "b": rand(2, 8, 3, 3)}, {}, ["add", "relu"], 18),
    "concat_channels": ([node("Concat", ["a", "b", "c"], axis=1)],
                        {"a": rand(2, 3, 4, 4), "b": rand(2, 5, 4, 4), "c": rand(2, 1, 4, 4)}, {}, ["concat"], 18),
    "concat_negative_axis": ([node("Concat", ["a", "b"], axis=-1)], {"a": rand(3, 2), "b": rand(3, 4)}, {},
                             ["concat"], 18),
    "lrn": ([node("LRN", ["x"], size=5, alpha=1e-3, beta=0.75, bias=2.0)], {"x": rand(2, 7, 5, 5)}, {},
            ["lrn"], 18),
    "batchnorm": ([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], {"x": rand(2, 4, 5, 5)},
                  {"s": rand(4), "b": rand(4), "m": rand(4), "v": np.abs(rand(4)) + 0.5}, ["batchnormalization"], 15),
    # inference Dropout and Identity pass their input through as a view: the partition is not cut
    "conv_dropout_unread_mask_relu": ([node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                                       node("Dropout", ["c"], ["d", "mask"], ratio=0.5), node("Relu", ["d"])],
                                      {"x": rand(1, 3, 8, 8)}, {"w": rand(16, 3, 3, 3), "b": rand(16)},
                                      ["conv", "dropout", "relu"], 9),
    "dropout_training_false_maxpool": ([node("Dropout", ["x", "r", "t"], ["d"]),
                                        node("MaxPool", ["d"], kernel_shape=[2, 2])],
                                       {"x": rand(1, 4, 6, 6)}, {"r": np.float32(0.3), "t": np.bool_(False)},
                                       ["dropout", "maxpool"], 13),
    "relu_identity_sigmoid": ([node("Relu", ["x"], ["a"]), node("Identity", ["a"], ["b"]), node("Sigmoid", ["b"])],
                              {"x": rand(2, 3, 4, 5)}, {}, ["relu", "identity", "sigmoid"], 18),
    "softmax_opset11_axis1_ones_after": unary("Softmax", shape=(3, 10, 1, 1), opset=11, axis=1),
})


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(rt, case):
    nodes, feeds, inits, claimed, opset = CASES[case]
    model = graph_model(nodes, feeds, inits, opset=opset)
    want = onnxruntime_run(model, feeds)
    with rt.load(model, backends=BACKENDS) as net:
        assignment = dict(net.assignment)
        got = net.run(feeds)
        outs = [got[o.name] for o in net.outputs]
    for name in claimed:
        assert assignment[name] == "onednn", f"{case}: node {name} went to {assignment[name]}"
    for g, w in zip(outs, want):
        assert_matches(g, w, what=case)


def test_thread_count_does_not_change_results_beyond_tolerance(rt):
    nodes, feeds, inits, _, opset = CASES["conv_3x3_pad_bias"]
    model = graph_model(nodes, feeds, inits, opset=opset)
    lib = rt.backends["onednn"].backend
    with rt.load(model, backends=BACKENDS) as net:
        base = net.run(feeds)["y"]
        try:
            lib.set_num_threads(1)
            one = net.run(feeds)["y"]
        finally:
            lib.set_num_threads(0)
    assert_matches(one, base, what="1 thread vs default")


DECLINED = {
    "conv_1d_runtime_weights": ([node("Conv", ["x", "w"])], {"x": rand(1, 3, 10), "w": rand(4, 3, 3)}, {}),
    "conv_runtime_weights": ([node("Conv", ["x", "w"])], {"x": rand(1, 3, 6, 6), "w": rand(4, 3, 3, 3)}, {}),
    "add_int64": ([node("Add", ["a", "b"])], {"a": np.arange(6).reshape(2, 3), "b": np.arange(3)}, {}),
    "gemm_alpha": ([node("Gemm", ["a", "b"], alpha=2.0)], {"a": rand(3, 4), "b": rand(4, 5)}, {}),
    "sum_three_inputs": ([node("Sum", ["a", "b", "c"])], {"a": rand(2, 3), "b": rand(2, 3), "c": rand(2, 3)}, {}),
    "sub_broadcast_first": ([node("Sub", ["a", "b"])], {"a": rand(5), "b": rand(2, 5)}, {}),
    "concat_int64": ([node("Concat", ["a", "b"], axis=0)], {"a": np.arange(6).reshape(2, 3), "b": np.arange(3).reshape(1, 3)}, {}),
    "softmax_opset11_not_last_axis": ([node("Softmax", ["x"], axis=1)], {"x": rand(2, 3, 4)}, {}, 11),
    "dropout_mask_read": ([node("Dropout", ["x"], ["y", "mask"])], {"x": rand(2, 3)}, {}, 13),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_unhandled_nodes_are_declined_to_the_cpu_backend(rt, case):
    nodes, feeds, inits, *opset = DECLINED[case]
    model = graph_model(nodes, feeds, inits, opset=opset[0] if opset else 18)
    with rt.load(model, backends=BACKENDS) as net:
        assert set(net.assignment.values()) == {"cpu"}, net.assignment
        got = net.run(feeds)
        outs = [got[o.name] for o in net.outputs]
    for g, w in zip(outs, onnxruntime_run(model, feeds)):
        assert_matches(g, w, what=case)


INVALID = {
    "conv_kernel_shape_differs_from_weights": ([node("Conv", ["x", "w"], kernel_shape=[2, 2])], {"w": rand(4, 3, 3, 3)}),
    "conv_channels_do_not_match_group": ([node("Conv", ["x", "w"], group=2)], {"w": rand(4, 3, 3, 3)}),
    "conv_negative_pads": ([node("Conv", ["x", "w"], pads=[-1, 0, 0, 0])], {"w": rand(4, 3, 3, 3)}),
    "maxpool_no_kernel_shape": ([node("MaxPool", ["x"])], {}),
    "lrn_even_size": ([node("LRN", ["x"], size=4)], {}),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_nodes_are_rejected_before_onednn_sees_them(rt, case):
    """Nodes ONNX rejects are refused by nnplug's validation or declined by the backend's own
    checks (an even LRN size passes the former): a clear load error, never a kernel built from
    them (a BackendError) or a crash."""
    from onnx import TensorProto

    import nnplug

    nodes, inits = INVALID[case]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [
        helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.flatten().tolist()) for k, v in inits.items()]),
        opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(nnplug.NnplugError) as raised:
        with rt.load(model, backends=["onednn"]) as net:
            net.run({"x": rand(1, 3, 8, 8)})
    assert not isinstance(raised.value, nnplug.BackendError), raised.value
    assert "node '" in str(raised.value), raised.value


def test_pools_it_has_no_primitive_for_are_not_claimed(rt):
    import nnplug

    model = graph_model([node("LpPool", ["x"], kernel_shape=[2, 2])], {"x": rand(1, 2, 5, 5)})
    with pytest.raises(nnplug.UnsupportedNodeError, match="no backend can run node 'lppool'"):
        rt.load(model, backends=["onednn"])

"""Every operator, in the configurations the kernels distinguish, against onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from nnplug_conformance.fixtures import for_onnxruntime

RNG = np.random.default_rng(1234)
F = TensorProto.FLOAT


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def single_node_model(op, inputs: dict, attrs=None, opset=13, n_outputs=1, initializers=None,
                      output_types=None):
    """A model with one node; ``inputs`` name -> array (graph inputs), ``initializers``
    name -> array (constants)."""
    initializers = initializers or {}
    names = list(inputs) + list(initializers)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **(attrs or {}))
    g_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for n, a in inputs.items()]
    types = output_types or [F] * n_outputs
    g_outputs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types)]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in initializers.items()]
    graph = helper.make_graph([node], "single", g_inputs, g_outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def with_output_types(model, feeds):
    """The model with its outputs' types and shapes set from onnx.reference's results (the
    checker wants them)."""
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.output[:]
    bare.graph.output.extend(helper.make_empty_tensor_value_info(o.name)
                             for o in model.graph.output)
    results = ReferenceEvaluator(bare).run(None, feeds)
    del bare.graph.output[:]
    bare.graph.output.extend(
        helper.make_tensor_value_info(o.name, helper.np_dtype_to_tensor_dtype(np.asarray(r).dtype),
                                      np.asarray(r).shape)
        for o, r in zip(model.graph.output, results))
    return bare


def reference(model, feeds, ref):
    if ref == "ort":
        import onnxruntime as ort

        sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def check(rt, model, feeds, rtol=1e-4, atol=1e-5, ref="onnx"):
    """Run ``model`` on opencl only and compare with ``onnx.reference`` (or onnxruntime where
    onnx.reference departs from the spec: LRN sums channels only up to the batch size, and
    Softmax before opset 13 ignores the 2-D coercion)."""
    model = with_output_types(model, feeds)
    net = rt.load(model, backends=["opencl"])
    try:
        assert set(net.assignment.values()) <= {"opencl", "opencl (folded)"}, net.assignment
        got = net.run(feeds)
    finally:
        net.close()
    want = reference(model, feeds, ref)
    for name, w in zip([o.name for o in model.graph.output], want):
        g = got[name]
        assert g.shape == np.asarray(w).shape, (name, g.shape, np.asarray(w).shape)
        assert g.dtype == np.asarray(w).dtype, (name, g.dtype, np.asarray(w).dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {name}")


CONV_CASES = [
    dict(x=(1, 3, 9, 9), w=(8, 3, 3, 3), attrs={}),
    dict(x=(2, 4, 10, 7), w=(10, 4, 3, 2), attrs=dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    dict(x=(1, 6, 11, 11), w=(9, 2, 3, 3), attrs=dict(group=3, dilations=[2, 2], pads=[2, 2, 2, 2])),
    dict(x=(1, 8, 8, 8), w=(8, 1, 3, 3), attrs=dict(group=8, pads=[1, 1, 1, 1])),  # depthwise
    dict(x=(1, 5, 9, 8), w=(17, 5, 1, 1), attrs=dict(strides=[2, 2])),
    dict(x=(1, 3, 10, 9), w=(4, 3, 4, 3), attrs=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    dict(x=(1, 3, 10, 9), w=(4, 3, 4, 4), attrs=dict(auto_pad="SAME_LOWER")),
    dict(x=(1, 3, 10, 9), w=(4, 3, 3, 3), attrs=dict(auto_pad="VALID", strides=[3, 2])),
    dict(x=(2, 3, 20), w=(5, 3, 4), attrs=dict(pads=[1, 2], strides=[2])),  # 1-D
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"x{c['x']}w{c['w']}{c['attrs']}")
def test_conv(rt, case, bias):
    w = rand(*case["w"])
    inits = {"w": w}
    if bias:
        inits["b"] = rand(case["w"][0])
    x = rand(*case["x"])
    check(rt, single_node_model("Conv", {"x": x}, case["attrs"], initializers=inits), {"x": x})


def test_conv_with_runtime_weights_and_bias(rt):
    # weights that are model inputs are repacked on the device, not on the host
    x, w, b = rand(1, 4, 7, 7), rand(6, 2, 3, 3), rand(6)
    model = single_node_model("Conv", {"x": x, "w": w, "b": b}, dict(group=2, pads=[1, 1, 1, 1]))
    check(rt, model, {"x": x, "w": w, "b": b})


def _chain(nodes, inputs, output, inits, opset=13):
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info(n, F, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(output, F, None)],
        [onnx.numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("act", ["Relu", "LeakyRelu", "Sigmoid", "Clip"])
def test_conv_batchnorm_activation_fused(rt, act):
    c = 6
    inits = {"w": rand(c, 3, 3, 3), "b": rand(c), "s": rand(c), "bb": rand(c), "m": rand(c),
             "v": np.abs(rand(c)) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"],
                              epsilon=1e-3)]
    if act == "Clip":
        inits["lo"], inits["hi"] = np.array(-0.5, np.float32), np.array(0.7, np.float32)
        nodes.append(helper.make_node("Clip", ["n", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(act, ["n"], ["y"], **({"alpha": 0.2} if act == "LeakyRelu"
                                                            else {})))
    x = rand(2, 3, 8, 8)
    # opset 15: onnx.reference's opset 9-13 BatchNormalization blends in batch statistics
    check(rt, _chain(nodes, {"x": x}, "y", inits, opset=15), {"x": x})


def test_batchnorm_standalone(rt):
    x = rand(2, 5, 4, 3)
    inits = {"s": rand(5), "b": rand(5), "m": rand(5), "v": np.abs(rand(5)) + 0.1}
    check(rt, single_node_model("BatchNormalization", {"x": x}, dict(epsilon=1e-4), opset=15,
                                initializers=inits), {"x": x})


def test_batchnorm_with_runtime_statistics(rt):
    feeds = {"x": rand(2, 3, 5), "s": rand(3), "b": rand(3), "m": rand(3),
             "v": np.abs(rand(3)) + 0.1}
    check(rt, single_node_model("BatchNormalization", feeds, opset=15), feeds)


GEMM_CASES = [
    dict(a=(5, 7), b=(7, 9), c=(9,), attrs={}),
    dict(a=(7, 5), b=(9, 7), c=(5, 9), attrs=dict(transA=1, transB=1, alpha=0.5, beta=2.0)),
    dict(a=(6, 4), b=(3, 4), c=(6, 1), attrs=dict(transB=1)),
    dict(a=(1, 30), b=(11, 30), c=(1, 11), attrs=dict(transB=1)),
    dict(a=(3, 4), b=(4, 2), c=None, attrs=dict(alpha=3.0)),
    dict(a=(3, 4), b=(4, 2), c=(), attrs=dict(beta=0.0)),
]


@pytest.mark.parametrize("b_const", [True, False])
@pytest.mark.parametrize("case", GEMM_CASES, ids=str)
def test_gemm(rt, case, b_const):
    a, b = rand(*case["a"]), rand(*case["b"])
    feeds = {"a": a}
    inits = {}
    (inits if b_const else feeds)["b"] = b
    if case["c"] is not None:
        inits["c"] = rand(*case["c"])
    model = single_node_model("Gemm", feeds, case["attrs"], initializers=inits)
    if not b_const:  # keep the input order A, B, C
        model = single_node_model("Gemm", {"a": a, "b": b}, case["attrs"], initializers=inits)
    check(rt, model, feeds)


@pytest.mark.parametrize("sa,sb", [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((2, 1, 4, 5), (3, 5, 6)),
                                   ((5,), (5, 3)), ((4, 5), (5,)), ((2, 3, 4), (2, 4, 5))])
def test_matmul(rt, sa, sb):
    feeds = {"a": rand(*sa), "b": rand(*sb)}
    check(rt, single_node_model("MatMul", feeds), feeds)


def test_matmul_fused_relu(rt):
    x = rand(3, 8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    check(rt, _chain(nodes, {"x": x}, "y", {"w": rand(8, 5)}), {"x": x})


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Sigmoid", {})])
def test_activation(rt, op, attrs):
    x = rand(3, 4, 5)
    check(rt, single_node_model(op, {"x": x}, attrs), {"x": x})


def test_clip_opset6_attributes(rt):
    x = rand(4, 6)
    check(rt, single_node_model("Clip", {"x": x}, dict(min=-0.3, max=0.4), opset=6), {"x": x})


@pytest.mark.parametrize("bounds", [(-0.2, 0.5), (-0.2, None), (None, 0.1)])
def test_clip_opset13_inputs(rt, bounds):
    x = rand(4, 6)
    lo, hi = bounds
    node = helper.make_node("Clip", ["x", "lo" if lo is not None else "", "hi" if hi is not None
                                     else ""], ["y0"])
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("lo", lo), ("hi", hi)) if v is not None]
    graph = helper.make_graph([node], "clip", [helper.make_tensor_value_info("x", F, x.shape)],
                              [helper.make_tensor_value_info("y0", F, None)], inits)
    check(rt, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), {"x": x})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa,sb", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4, 5), (3, 1, 1)),
                                   ((2, 3, 4), (1,)), ((1, 4), (3, 1)), ((5, 1, 3), (2, 1))])
def test_binary_broadcasting(rt, op, sa, sb):
    feeds = {"a": rand(*sa), "b": rand(*sb) + (3.0 if op == "Div" else 0.0)}
    check(rt, single_node_model(op, feeds), feeds)


@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (2, 3), (2, 3)], [(4, 1, 3), (2, 1), (3,)]])
def test_sum(rt, shapes):
    feeds = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    check(rt, single_node_model("Sum", feeds), feeds)


POOL_CASES = [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 0]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", POOL_CASES, ids=str)
def test_maxpool(rt, attrs):
    x = rand(2, 3, 9, 10)
    check(rt, single_node_model("MaxPool", {"x": x}, attrs, opset=12), {"x": x})


def test_maxpool_dilations_and_1d(rt):
    x = rand(1, 2, 11, 11)
    check(rt, single_node_model("MaxPool", {"x": x}, dict(kernel_shape=[2, 2], dilations=[2, 2]),
                                opset=12), {"x": x})
    x1 = rand(2, 3, 15)
    check(rt, single_node_model("MaxPool", {"x": x1}, dict(kernel_shape=[3], strides=[2],
                                                           pads=[1, 1])), {"x": x1})


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", POOL_CASES, ids=str)
def test_averagepool(rt, attrs, count_include_pad):
    x = rand(2, 3, 9, 10)
    a = dict(attrs, count_include_pad=count_include_pad)
    check(rt, single_node_model("AveragePool", {"x": x}, a, opset=11), {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 7, 5), (1, 4, 9)])
def test_global_average_pool(rt, shape):
    x = rand(*shape)
    check(rt, single_node_model("GlobalAveragePool", {"x": x}), {"x": x})


@pytest.mark.parametrize("size", [3, 5])
def test_lrn(rt, size):
    x = rand(2, 7, 4, 5)
    check(rt, single_node_model("LRN", {"x": x}, dict(size=size, alpha=2e-3, beta=0.6, bias=1.5)),
          {"x": x}, ref="ort")


def test_lrn_even_size_against_the_spec_formula(rt):
    # onnxruntime takes odd sizes only; the spec sums channels [c - 1, c + 2] for size 4
    x = rand(1, 6, 3, 2)
    model = with_output_types(single_node_model("LRN", {"x": x}, dict(size=4, alpha=0.1)),
                              {"x": x})
    net = rt.load(model, backends=["opencl"])
    got = net.run({"x": x})["y0"]
    net.close()
    sq = np.zeros_like(x)
    for c in range(6):
        sq[:, c] = (x[:, max(0, c - 1):min(6, c + 3)] ** 2).sum(axis=1)
    np.testing.assert_allclose(got, x / (1.0 + 0.1 / 4 * sq) ** 0.75, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_concat(rt, axis, dtype):
    feeds = {"a": (rand(2, 3, 4) * 10).astype(dtype), "b": (rand(2, 3, 4) * 10).astype(dtype)}
    shp = [2, 3, 4]
    shp[axis] = 5
    feeds["c"] = (rand(*shp) * 10).astype(dtype)
    model = single_node_model("Concat", feeds, dict(axis=axis),
                              output_types=[helper.np_dtype_to_tensor_dtype(np.dtype(dtype))])
    check(rt, model, feeds)


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (13, 1), (13, -1), (13, 0)])
def test_softmax(rt, opset, axis):
    x = rand(3, 4, 5) * 3
    check(rt, single_node_model("Softmax", {"x": x}, dict(axis=axis), opset=opset), {"x": x},
          ref="ort" if opset < 13 else "onnx")


@pytest.mark.parametrize("shape", [[0, -1], [4, 0, 3], [-1], [2, 2, 3, 2]])
def test_reshape(rt, shape):
    x = rand(4, 2, 3)
    model = single_node_model("Reshape", {"x": x},
                              initializers={"s": np.array(shape, np.int64)})
    check(rt, model, {"x": x})


def test_reshape_shape_fed_at_run_time(rt):
    feeds = {"x": rand(4, 6), "s": np.array([3, -1], np.int64)}
    check(rt, single_node_model("Reshape", feeds), feeds)
    feeds["s"] = np.array([-1, 2, 2], np.int64)  # a different value means a different plan
    check(rt, single_node_model("Reshape", feeds), feeds)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(rt, axis):
    x = rand(2, 3, 4)
    check(rt, single_node_model("Flatten", {"x": x}, dict(axis=axis)), {"x": x})


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 3, 2]])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_transpose(rt, perm, dtype):
    x = (rand(2, 3, 4, 5) * 10).astype(dtype)
    if perm and len(perm) == 3:
        x = x[0]
    attrs = {} if perm is None else {"perm": perm}
    check(rt, single_node_model("Transpose", {"x": x}, attrs,
                                output_types=[helper.np_dtype_to_tensor_dtype(x.dtype)]), {"x": x})


def test_unsqueeze_opset11_and_13(rt):
    x = rand(3, 4)
    check(rt, single_node_model("Unsqueeze", {"x": x}, dict(axes=[0, -1]), opset=11), {"x": x})
    check(rt, single_node_model("Unsqueeze", {"x": x}, opset=13,
                                initializers={"axes": np.array([1, 3], np.int64)}), {"x": x})


def test_squeeze(rt):
    x = rand(3, 1, 4, 1)
    check(rt, single_node_model("Squeeze", {"x": x}, opset=13,
                                initializers={"axes": np.array([-1], np.int64)}), {"x": x})
    check(rt, single_node_model("Squeeze", {"x": x}, opset=11), {"x": x})


def test_dropout_inference_with_mask(rt):
    x = rand(3, 5)
    check(rt, single_node_model("Dropout", {"x": x}, dict(ratio=0.3), opset=9), {"x": x})
    check(rt, single_node_model("Dropout", {"x": x}, opset=13, n_outputs=2,
                                output_types=[F, TensorProto.BOOL]), {"x": x})


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], np.int64),
                                   np.array([1], np.int32)])
def test_constant_of_shape(rt, value):
    shape = np.array([2, 3, 4], np.int64)
    attrs = {} if value is None else {"value": onnx.numpy_helper.from_array(value)}
    out_type = F if value is None else helper.np_dtype_to_tensor_dtype(value.dtype)
    check(rt, single_node_model("ConstantOfShape", {"s": shape}, attrs, opset=9,
                                output_types=[out_type]), {"s": shape})


def test_identity_output_is_its_own_buffer(rt):
    # an output that is just an input is copied, so the caller never shares the feed's buffer
    x = rand(3, 3)
    check(rt, single_node_model("Identity", {"x": x}), {"x": x})

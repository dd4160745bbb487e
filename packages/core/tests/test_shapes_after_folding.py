"""Shapes that ONNX's shape inference loses behind a constant subgraph are found again once
the fold stage has computed it (nnplug.stages.folding), so backends get static subgraphs; symbolic
input dims stay symbolic."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

from nnplug.stages.loader import load

OPS = ["Constant", "ConstantOfShape", "Mul", "Equal", "Where", "Expand", "Add", "Relu",
       "Shape", "MatMul"]


def expand_by_computed_shape(batch=1, seed=0) -> onnx.ModelProto:
    """x [batch, 4] expanded to [3, 4] (or [batch, 4] when batch is symbolic) by a shape
    computed as BERT exports compute theirs: Where(Equal(c, Mul(ConstantOfShape(r), -1)),
    ConstantOfShape(r), c), then a Shape of the result feeding ConstantOfShape."""
    rng = np.random.default_rng(seed)
    symbolic = isinstance(batch, str)

    def const(name, value):
        return helper.make_node("Constant", [], [name], name=name,
                                value=numpy_helper.from_array(np.asarray(value, np.int64)))

    nodes = [const("rank", [2]),
             helper.make_node("ConstantOfShape", ["rank"], ["ones"], name="ones",
                              value=numpy_helper.from_array(np.array([1], np.int64))),
             const("minus_one", -1),
             helper.make_node("Mul", ["ones", "minus_one"], ["neg"], name="neg")]
    if symbolic:  # the wanted shape comes from the input: [N, 4]
        nodes.append(helper.make_node("Shape", ["x"], ["want"], name="want"))
    else:
        nodes.append(const("want", [3, 4]))
    nodes += [helper.make_node("Equal", ["want", "neg"], ["is_neg"], name="is_neg"),
              helper.make_node("Where", ["is_neg", "ones", "want"], ["shape"], name="shape"),
              helper.make_node("Expand", ["x", "shape"], ["wide"], name="expand"),
              helper.make_node("Add", ["wide", "bias"], ["biased"], name="add"),
              helper.make_node("Relu", ["biased"], ["act"], name="relu"),
              helper.make_node("Shape", ["act"], ["act_shape"], name="act_shape"),
              helper.make_node("ConstantOfShape", ["act_shape"], ["half"], name="half",
                               value=numpy_helper.from_array(np.array([0.5], np.float32))),
              helper.make_node("Mul", ["act", "half"], ["scaled"], name="scale"),
              helper.make_node("MatMul", ["scaled", "w"], ["y"], name="matmul")]
    inits = [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w")]
    graph = helper.make_graph(nodes, "computed_shape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 5])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime_result(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def built_values(backend):
    return {name: v for sg, _ in backend.builds for name, v in sg.values.items()}


def test_shape_from_constant_subgraph_becomes_static_and_matches_onnxruntime():
    model = expand_by_computed_shape()
    lost = load(model).values
    assert not lost["wide"].is_static and not lost["act"].is_static  # what ONNX leaves
    backend = NumpyBackend(ops=OPS)
    x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
    with make_runtime(backend) as rt:
        net = rt.load(model)
        values = built_values(backend)
        for name in ("wide", "biased", "act", "scaled", "y"):
            assert values[name].is_static, (name, values[name])
        assert values["y"].shape == (3, 5)
        assert net.assignment["expand"] == "numpy"
        for name in ("rank", "ones", "neg", "want", "is_neg", "shape", "half"):
            assert net.assignment[name] == "numpy (folded)", name
        assert net.assignment["act_shape"] == "numpy (folded)"
        np.testing.assert_allclose(net.run({"x": x})["y"], onnxruntime_result(model, x),
                                   rtol=1e-6, atol=1e-6)


def test_symbolic_batch_stays_dynamic_and_runs_at_two_batch_sizes():
    model = expand_by_computed_shape(batch="N")
    backend = NumpyBackend(ops=OPS)
    rng = np.random.default_rng(2)
    with make_runtime(backend) as rt:
        net = rt.load(model)
        values = built_values(backend)
        for name in ("wide", "act", "y"):
            assert not values[name].is_static, (name, values[name])
        assert net.assignment["want"] == "numpy" and net.assignment["act_shape"] == "numpy"
        for n in (2, 7):
            x = rng.standard_normal((n, 4)).astype(np.float32)
            out = net.run({"x": x})["y"]
            assert out.shape == (n, 5)
            np.testing.assert_allclose(out, onnxruntime_result(model, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_folding_never_changes_results(seed):
    model = expand_by_computed_shape(seed=seed)
    x = np.random.default_rng(100 + seed).standard_normal((1, 4)).astype(np.float32)
    want = onnxruntime_result(model, x)
    for level in ("all", "basic", "disable"):
        with make_runtime(NumpyBackend(ops=OPS)) as rt:
            got = rt.load(model, optimization=level).run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=level)


def test_shape_of_a_static_value_is_folded_when_every_shape_is_known():
    # GroupNorm as torch exports it: Reshape back to Shape(x). x's shape is static from the
    # start, so the Shape node is a constant: no run-time node (and no partition of its own
    # between a backend's nodes)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["r_shape"], name="shape"),
             helper.make_node("ConstantOfShape", ["r_shape"], ["half"], name="half",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Mul", ["r", "half"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "static_shape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    backend = NumpyBackend(ops=OPS)
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run({"x": x})["y"]
        assert net.assignment["shape"].endswith("(folded)")
        assert net.assignment["half"].endswith("(folded)")
        ran = [n.name for sg, _ in backend.builds for n in sg.nodes]
    assert "shape" not in ran, ran  # computed from the shape (half ran once, at load)
    np.testing.assert_array_equal(got, onnxruntime_result(model, x))

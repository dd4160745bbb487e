"""Nodes the OpenCL backend leaves out fall back per node to the next backend, data crosses
devices only at partition boundaries, and the mixed result equals the CPU-only result."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import onnx
import pytest
from conftest import LimitedOpenCL, ReferenceCPUBackend, new_runtime, zoo_case
from onnx import TensorProto, helper

from nnplug_backend_opencl import OpenCLBackend

RNG = np.random.default_rng(7)


def cpu_backends():
    """The test's reference CPU backend, and nnplug-backend-cpu when it is installed."""
    out = [pytest.param(lambda: ReferenceCPUBackend(), "refcpu", id="refcpu")]
    cpu = [ep for ep in entry_points(group="nnplug.backends") if ep.name == "cpu"]
    if cpu:
        out.append(pytest.param(lambda: _resolve(cpu[0].load()), "cpu", id="nnplug-backend-cpu"))
    return out


def _resolve(obj):
    """An entry point's object as register_backend takes it: a Backend class or instance, or
    the path of a native backend (entry points may hold a zero-argument callable for either)."""
    import inspect

    from nnplug import Backend

    if callable(obj) and not inspect.isclass(obj) and not isinstance(obj, Backend):
        obj = obj()
    return obj


def small_net() -> onnx.ModelProto:
    """conv -> tanh (no OpenCL kernel) -> conv+relu -> maxpool -> concat with a branch ->
    softmax: the device hands over to the CPU and back twice."""
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w2 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2"),
             onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Tanh", ["c1"], ["t1"], name="tanh"),
        helper.make_node("Conv", ["t1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu"),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
        helper.make_node("AveragePool", ["t1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                         name="avg"),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1, name="concat"),
        helper.make_node("Reshape", ["cat", "shape"], ["flat"], name="reshape"),
        helper.make_node("Softmax", ["flat"], ["y"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("make_cpu,cpu_id", cpu_backends())
def test_mixed_partitions_equal_cpu_alone(make_cpu, cpu_id):
    model = small_net()
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    with new_runtime(OpenCLBackend, make_cpu()) as rt:
        with rt.load(model, backends=[cpu_id]) as net:
            cpu_only = net.run({"x": x})["y"]
        with rt.load(model, backends=["opencl", cpu_id]) as net:
            assert net.assignment["tanh"] == cpu_id
            assert net.assignment["conv1"] == net.assignment["conv2"] == "opencl"
            assert net.assignment["concat"] == "opencl"
            mixed = net.run({"x": x})["y"]
    np.testing.assert_allclose(mixed, cpu_only, rtol=1e-4, atol=1e-6)


def test_zoo_model_with_ops_left_to_cpu_matches_expected():
    # squeezenet with Concat and MaxPool left to the CPU: the data crosses devices many times
    path, feeds, expected = zoo_case("squeezenet")
    limited = LimitedOpenCL.make({"Concat", "MaxPool"})
    with new_runtime(limited, ReferenceCPUBackend(only={"Concat", "MaxPool"})) as rt:
        with rt.load(path, backends=["opencl", "refcpu"]) as net:
            placed = set(net.assignment.values())
            assert "refcpu" in placed and "opencl" in placed
            (out,) = net.run(feeds).values()
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-7)


def test_unsupported_nodes_fall_back(rt):
    """What supports() turns down: wrong dtype, 3-D conv, MaxPool indices, training BN."""
    cpu = ReferenceCPUBackend()
    rt.register_backend(cpu)
    a = RNG.standard_normal((2, 3)).astype(np.float64)
    nodes = [helper.make_node("Add", ["a", "a"], ["s"], name="add64"),
             helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Relu", ["f"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "fallback",
                              [helper.make_tensor_value_info("a", TensorProto.DOUBLE, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with rt.load(model, backends=["opencl", "refcpu"]) as net:
        assert net.assignment == {"add64": "refcpu", "cast": "refcpu", "relu": "opencl"}
        y = net.run({"a": a})["y"]
    np.testing.assert_allclose(y, np.maximum(2 * a, 0).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("op,inputs,attrs,n_out", [
    ("Conv", {"x": (1, 2, 4, 4, 4), "w": (2, 2, 1, 1, 1)}, {}, 1),
    ("MaxPool", {"x": (1, 2, 4, 4)}, {"kernel_shape": [2, 2]}, 2),
    ("Softmax", {"x": (2, 3)}, {}, 1),
])
def test_supports_is_honest(op, inputs, attrs, n_out):
    from nnplug.graph import Node, SubGraph, ValueInfo

    dtype = np.float64 if op == "Softmax" else np.float32
    values = {n: ValueInfo(n, np.dtype(dtype), s) for n, s in inputs.items()}
    outs = [f"o{i}" for i in range(n_out)]
    node = Node("n", op, "", list(inputs), outs, attrs, opset=13)
    graph = SubGraph([node], list(inputs), outs, {}, values)
    b = OpenCLBackend()
    assert not b.supports(node, graph)
    assert b.why_not(node, graph)


def test_reshape_to_a_computed_shape_is_left_to_the_next_backend():
    # Reshape(x, Concat(Shape(x)[0:1], [-1])): the shape is computed by nodes, so it might be
    # computed on the device, where the OpenCL planner cannot read it. The backend declines
    # the Reshape (it falls back) instead of claiming it and failing at build time.
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="computed_reshape"),
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]),
             helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["n", 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = new_runtime(OpenCLBackend, ReferenceCPUBackend())
    try:
        with rt.load(model, backends=["opencl", "refcpu"]) as net:
            y = net.run({"x": x})["y"]
            assert net.assignment["computed_reshape"] == "refcpu"
    finally:
        rt.close()
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(2, -1))

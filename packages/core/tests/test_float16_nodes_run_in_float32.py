"""float16 nodes no backend runs natively are computed in float32 between Cast nodes, as
onnxruntime's CPU provider does (nnplug.stages.precision): a float16 model loads on backends that
claim only float32, consecutive widened nodes share their casts, and a backend that declares
float16 native keeps the nodes as written."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from reference_backend import ReferenceBackend

import nnplug
from nnplug.stages.precision import reduced_name


class Float32Only(ReferenceBackend):
    """Claims a node only when none of its values is float16 (Cast excepted), like the CPU
    backends that decline float16 GlobalAveragePool and Gemm."""

    id = "float32only"

    def supports(self, node, graph):
        if node.op_type == "Cast":
            return True
        names = [x for x in [*node.inputs, *node.outputs] if x]
        types = [graph.constants[x].dtype if x in graph.constants else graph.value(x).dtype
                 for x in names]
        return super().supports(node, graph) and not any(reduced_name(t) for t in types)


class Float16Native(ReferenceBackend):
    id = "float16native"
    reduced_precision = ("float16",)


def fp16_model():
    """float32 in and out, float16 inside (as convert_float_to_float16(keep_io_types=True)
    writes): Cast -> MatMul -> Add -> Relu -> Reshape -> Cast."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(np.float16)
    b = rng.standard_normal(8).astype(np.float16)
    nodes = [helper.make_node("Cast", ["x"], ["x16"], "in_cast", to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x16", "w"], ["mm"], "matmul"),
             helper.make_node("Add", ["mm", "b"], ["add"], "add"),
             helper.make_node("Relu", ["add"], ["relu"], "relu"),
             helper.make_node("Reshape", ["relu", "shape"], ["r"], "reshape"),
             helper.make_node("Cast", ["r"], ["y"], "out_cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "fp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([32], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def runtime():
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(Float32Only)
    r.register_backend(Float16Native)
    yield r
    r.close()


def test_float16_nodes_load_on_a_float32_backend_and_match_onnxruntime(runtime):
    model = fp16_model()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with runtime.load(model, backends=["float32only"]) as net:
        got = net.run({"x": x})["y"]
        placed = list(net.assignment)
    # both compute the chain in float32 and round its result to float16 once: equal to an ulp
    ulp = float(np.spacing(np.float16(np.abs(want).max())))
    np.testing.assert_allclose(got, want, rtol=0, atol=ulp)
    # one cast into float32 after the model's own, one back before its last: none between, so
    # a backend's partition is not cut between every two nodes
    added = [n for n in placed if n not in {"in_cast", "matmul", "add", "relu", "reshape",
                                            "out_cast"}]
    assert added == ["x16/to_float32", "r/to_float16"], placed


def test_a_backend_that_runs_float16_natively_keeps_the_nodes(runtime):
    model = fp16_model()
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    with runtime.load(model, backends=["float16native", "float32only"]) as net:
        assert set(net.assignment) == {"in_cast", "matmul", "add", "relu", "reshape", "out_cast"}
        assert set(net.assignment.values()) == {"float16native"}
        net.run({"x": x})


def test_a_float32_model_is_left_as_it_is(runtime):
    from nnplug.graph import Model
    from nnplug.stages.loader import load
    from nnplug.stages.precision import widen_reduced_precision

    model = fp16_model()
    for n in model.graph.node:
        if n.op_type == "Cast":
            n.attribute[0].i = TensorProto.FLOAT
    for t in model.graph.initializer:
        if t.data_type == TensorProto.FLOAT16:
            t.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float32), t.name))
    m = load(model)
    assert isinstance(m, Model)
    assert widen_reduced_precision(m, [Float32Only()], {}) is m

"""An op plugin registers the function body of an op ONNX does not define
(Runtime.register_function); nodes of that op no backend claims run as the body."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

import nnplug

DOMAIN = "com.example.fn"


def _swish_body(opset=18):
    """Swish2(x) = x * sigmoid(x) + x, as a FunctionProto of DOMAIN."""
    return h.make_function(DOMAIN, "Swish2", ["x"], ["y"], [
        h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Mul", ["x", "s"], ["m"]),
        h.make_node("Add", ["m", "x"], ["y"])], [h.make_opsetid("", opset)])


def _model(nodes, opset=18):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("z", T.FLOAT, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(DOMAIN, 1)])


def _x():
    return np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


def _swish(x):
    return x / (1 + np.exp(-x)) + x


def test_a_registered_function_proto_runs_as_its_body():
    model = _model([h.make_node("Swish2", ["x"], ["z"], name="act", domain=DOMAIN)])
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        fdef = rt.register_function(_swish_body())
        assert rt.functions[(DOMAIN, "Swish2")] is fdef
        with rt.load(model) as net:
            assert all(k.startswith("act/") for k in net.assignment), net.assignment
            np.testing.assert_allclose(net.run({"x": _x()})["z"], _swish(_x()), rtol=1e-6)


def test_a_builder_is_asked_again_once_the_input_types_are_known():
    """Two chained nodes of the op: the second's input has a type only after the first is
    expanded; its builder answers None until then."""
    asked = []

    def build(node, inputs, opsets):
        asked.append((node.name, inputs[0] is not None and inputs[0].dtype is not None))
        if inputs[0] is None or inputs[0].dtype is None:
            return None
        assert opsets[""] == 18
        return _swish_body()

    model = _model([h.make_node("Swish2", ["x"], ["y"], name="a", domain=DOMAIN),
                    h.make_node("Swish2", ["y"], ["z"], name="b", domain=DOMAIN)])
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(build, domain=DOMAIN, op_type="Swish2")
        with rt.load(model) as net:
            np.testing.assert_allclose(net.run({"x": _x()})["z"], _swish(_swish(_x())),
                                       rtol=1e-5)
    assert ("b", False) in asked and ("b", True) in asked


def test_a_backend_that_claims_the_op_keeps_it_whole():
    class WithSwish2(NumpyBackend):
        def supports(self, node, graph):
            return node.op_type == "Swish2" or super().supports(node, graph)

        def build(self, subgraph, target):
            return nnplug.Module({"run": lambda inputs: [nnplug.Tensor.from_numpy(
                _swish(inputs[0].numpy()))]})

    model = _model([h.make_node("Swish2", ["x"], ["z"], name="act", domain=DOMAIN)])
    with make_runtime(WithSwish2(ops=set(KERNELS))) as rt:
        rt.register_function(_swish_body())
        with rt.load(model) as net:
            assert net.assignment == {"act": "numpy"}


def test_a_second_function_for_the_same_op_is_refused_naming_the_first():
    with make_runtime() as rt:
        rt.register_function(_swish_body(), source="first-plugin")
        with pytest.raises(nnplug.PluginError, match="already registered from first-plugin"):
            rt.register_function(_swish_body())


def test_a_builder_that_cannot_write_the_body_is_a_model_error_naming_node_and_plugin():
    def build(node, inputs, opsets):
        raise ValueError("num_heads must divide the hidden size")

    model = _model([h.make_node("Swish2", ["x"], ["z"], name="act", domain=DOMAIN)])
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(build, domain=DOMAIN, op_type="Swish2", source="my-plugin")
        with pytest.raises(nnplug.ModelError, match=r"node 'act' \(op Swish2.*my-plugin.*"
                                                    r"num_heads must divide"):
            rt.load(model)


def test_a_body_written_for_another_opset_whose_ops_differ_there_is_refused():
    """The body is inlined into the model, so its ops take the model's opset: a body written
    for opset 18 whose ReduceMean takes axes as an input means something else at 13."""
    body = h.make_function(DOMAIN, "Swish2", ["x"], ["y"], [
        h.make_node("Constant", [], ["ax"], value_ints=[1]),
        h.make_node("ReduceMean", ["x", "ax"], ["y"])], [h.make_opsetid("", 18)])
    model = _model([h.make_node("Swish2", ["x"], ["z"], name="act", domain=DOMAIN)], opset=13)
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(body, source="my-plugin")
        with pytest.raises(nnplug.ModelError, match="opset 18 of ai.onnx.*imports opset 13"):
            rt.load(model)


def test_a_registered_function_never_replaces_what_onnx_defines():
    """Relu is ONNX's (with a body of its own, Max(x, 0)): a body registered for it is not
    used."""
    body = h.make_function("", "Relu", ["x"], ["y"], [h.make_node("Identity", ["x"], ["y"])],
                           [h.make_opsetid("", 18)])
    g = h.make_graph([h.make_node("Relu", ["x"], ["z"], name="r")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("z", T.FLOAT, [2, 3])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    with make_runtime(NumpyBackend(ops=set(KERNELS) - {"Relu"})) as rt:
        rt.register_function(body)
        with rt.load(model) as net:
            assert any("Max" in k for k in net.assignment), net.assignment
            np.testing.assert_array_equal(net.run({"x": _x()})["z"], np.maximum(_x(), 0))


def _ai_onnx_model(op_type):
    g = h.make_graph([h.make_node(op_type, ["x"], ["z"], name="n")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("z", T.FLOAT, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def test_an_ai_onnx_op_onnx_does_not_define_loads_when_a_plugin_gives_its_body():
    """onnxruntime puts SimplifiedLayerNormalization in the ai.onnx domain: the ONNX checker
    would refuse it; with a registered body it is the body's to run."""
    body = h.make_function("", "DoubleIt", ["x"], ["y"], [h.make_node("Add", ["x", "x"], ["y"])],
                           [h.make_opsetid("", 18)])
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        with pytest.raises(nnplug.ModelError, match="No Op registered for DoubleIt"):
            rt.load(_ai_onnx_model("DoubleIt"))
        rt.register_function(body)
        with rt.load(_ai_onnx_model("DoubleIt")) as net:
            np.testing.assert_array_equal(net.run({"x": _x()})["z"], 2 * _x())
        with pytest.raises(nnplug.ModelError, match="No Op registered for Triple"):
            rt.load(_ai_onnx_model("Triple"))  # only the ops with a body are let through


def test_a_chain_longer_than_the_nesting_limit_of_ops_waiting_for_types_expands():
    """Each node's builder needs its input's type, known only once the node before is
    expanded: one node per round, more rounds than the nesting limit (16), no nesting."""
    def build(node, inputs, opsets):
        return None if inputs[0] is None or inputs[0].dtype is None else _swish_body()

    n = 24
    nodes = [h.make_node("Swish2", ["x" if k == 0 else f"y{k - 1}"],
                         ["z" if k == n - 1 else f"y{k}"], name=f"s{k}", domain=DOMAIN)
             for k in range(n)]
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(build, domain=DOMAIN, op_type="Swish2")
        with rt.load(_model(nodes)) as net:
            want = _x() * 0.01
            for _ in range(n):
                want = _swish(want)
            np.testing.assert_allclose(net.run({"x": _x() * 0.01})["z"], want, rtol=1e-4)


def test_a_function_that_calls_itself_is_a_model_error():
    body = h.make_function(DOMAIN, "Swish2", ["x"], ["y"],
                           [h.make_node("Swish2", ["x"], ["y"], domain=DOMAIN)],
                           [h.make_opsetid("", 18), h.make_opsetid(DOMAIN, 1)])
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(body)
        with pytest.raises(nnplug.ModelError, match="16 function bodies deep: a function calls itself"):
            rt.load(_model([h.make_node("Swish2", ["x"], ["z"], name="act", domain=DOMAIN)]))

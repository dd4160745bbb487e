"""Nodes no backend claims whose op is an ONNX function run as their function body;
a backend that claims the op keeps it whole."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

import nnplug

ALL = set(KERNELS)


def _model(nodes, inputs, outputs, opset=18, functions=(), extra_opsets=()):
    g = h.make_graph(nodes, "g", inputs, outputs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), *extra_opsets],
                        functions=list(functions))


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op,attrs", [("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                      ("HardSwish", {}), ("Elu", {"alpha": 0.7}),
                                      ("Mish", {}), ("Celu", {})])
def test_standard_function_runs_as_its_body_and_matches_onnxruntime(op, attrs):
    model = _model([h.make_node(op, ["x"], ["y"], name="act", **attrs)],
                   [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                   [h.make_tensor_value_info("y", T.FLOAT, [3, 4])])
    x = _x(3, 4) * 4
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run({"x": x})["y"]
        assert "act" not in net.assignment
        assert all(name.startswith("act/") for name in net.assignment), net.assignment
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_backend_that_claims_the_op_keeps_it_whole():
    class WithHardSigmoid(NumpyBackend):
        def supports(self, node, graph):
            return node.op_type == "HardSigmoid" or super().supports(node, graph)

        def build(self, subgraph, target):
            assert [n.op_type for n in subgraph.nodes] == ["HardSigmoid"]
            a = subgraph.nodes[0].attr("alpha")
            b = subgraph.nodes[0].attr("beta")

            def run(inputs):
                x = inputs[0].numpy()
                return [nnplug.Tensor.from_numpy(np.clip(a * x + b, 0, 1).astype(x.dtype))]

            return nnplug.Module({"run": run})

    model = _model([h.make_node("HardSigmoid", ["x"], ["y"], name="hs", alpha=0.5, beta=0.5)],
                   [h.make_tensor_value_info("x", T.FLOAT, [5])],
                   [h.make_tensor_value_info("y", T.FLOAT, [5])])
    with make_runtime(WithHardSigmoid(ops=ALL)) as rt, rt.load(model) as net:
        assert net.assignment == {"hs": "numpy"}
        x = _x(5)
        np.testing.assert_allclose(net.run({"x": x})["y"], _ort(model, {"x": x})[0], rtol=1e-6)


def test_model_local_function_is_expanded_with_attribute_references_resolved():
    # local.ScaledSwish(x) = x * Sigmoid(x * scale), scale an attribute of the call
    scale = h.make_node("Constant", [], ["s"], value_float=0.0)
    scale.attribute[0].ref_attr_name = "scale"
    body = [scale,
            h.make_node("Mul", ["X", "s"], ["xs"]),
            h.make_node("Sigmoid", ["xs"], ["g"]),
            h.make_node("Mul", ["X", "g"], ["Y"])]
    fn = h.make_function("local", "ScaledSwish", ["X"], ["Y"], body,
                         [h.make_opsetid("", 18)], attributes=["scale"])
    model = _model([h.make_node("ScaledSwish", ["x"], ["y"], name="swish", domain="local",
                                scale=1.5)],
                   [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                   functions=[fn], extra_opsets=[h.make_opsetid("local", 1)])
    x = _x(2, 3)
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run({"x": x})["y"]
        assert {k.split("/")[0] for k in net.assignment} == {"swish"}
    np.testing.assert_allclose(got, x / (1 + np.exp(-1.5 * x)), rtol=1e-6)
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-5)


def test_expanded_body_that_no_backend_runs_names_the_piece_and_the_original_node():
    model = _model([h.make_node("Mish", ["x"], ["y"], name="mish")],
                   [h.make_tensor_value_info("x", T.FLOAT, [2])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with make_runtime(NumpyBackend()) as rt:  # no Softplus/Tanh
        with pytest.raises(nnplug.UnsupportedNodeError, match=r"'mish/Softplus_0.*function body of node 'mish' \(op Mish"):
            rt.load(model)


def test_op_without_function_body_is_still_declined_by_name():
    model = _model([h.make_node("Erf", ["x"], ["y"], name="erf")],
                   [h.make_tensor_value_info("x", T.FLOAT, [2])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with make_runtime(NumpyBackend(ops=ALL)) as rt:
        with pytest.raises(nnplug.UnsupportedNodeError, match=r"node 'erf' \(op Erf"):
            rt.load(model)


def test_expansion_leaves_the_model_unchanged():
    model = _model([h.make_node("HardSwish", ["x"], ["y"], name="a")],
                   [h.make_tensor_value_info("x", T.FLOAT, [2])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2])])
    before = model.SerializeToString()
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model):
        pass
    assert model.SerializeToString() == before
    onnx.checker.check_model(model)


@pytest.mark.parametrize("opset", [17, 18])
def test_a_newer_body_is_used_when_its_ops_mean_the_same_at_the_models_opset(opset):
    # HardSigmoid-6 has a body only from opset 18 on; its ops (CastLike-15, Mul, Add, Min,
    # Max, Constant) are defined the same at opset 17
    model = _model([h.make_node("HardSigmoid", ["x"], ["y"], name="hs")],
                   [h.make_tensor_value_info("x", T.FLOAT, [6])],
                   [h.make_tensor_value_info("y", T.FLOAT, [6])], opset=opset)
    x = _x(6) * 5
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        np.testing.assert_allclose(net.run({"x": x})["y"], _ort(model, {"x": x})[0], rtol=1e-6)


def test_a_newer_body_with_ops_the_model_opset_lacks_is_not_used():
    # at opset 13 there is no CastLike (opset 15): HardSigmoid stays whole and is declined
    model = _model([h.make_node("HardSigmoid", ["x"], ["y"], name="hs")],
                   [h.make_tensor_value_info("x", T.FLOAT, [6])],
                   [h.make_tensor_value_info("y", T.FLOAT, [6])], opset=13)
    with make_runtime(NumpyBackend(ops=ALL)) as rt:
        with pytest.raises(nnplug.UnsupportedNodeError, match=r"node 'hs' \(op HardSigmoid"):
            rt.load(model)

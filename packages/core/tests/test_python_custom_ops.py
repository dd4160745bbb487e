"""Python custom ops (RKNN toolkit semantics) beside Python backends."""

import numpy as np
import pytest
from models import single_op, with_custom_op
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper

import nnplug
from nnplug import CustomOpError, PluginError


class Scale:
    op_type = "cstScale"

    def __init__(self):
        self.computed = 0

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [in_shapes[0]], [in_dtypes[0]]

    def compute(self, node, inputs):
        self.computed += 1
        return [inputs[0] * np.float32(nnplug.get_node_attr(node, "scale", 1.0))]


def expected(x):
    return 1 / (1 + np.exp(-2.0 * np.maximum(x, 0)))


def test_custom_op_in_a_custom_domain_runs_between_backend_nodes():
    op = Scale()
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(op)
        assert rt.ops["cstScale"].op_type == "cstScale"
        net = rt.load(with_custom_op(domain="my.vendor.ops"))
        assert net.assignment == {"relu": "numpy", "custom": "op:cstScale@cpu", "sigmoid": "numpy"}
        x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
        np.testing.assert_allclose(net.run({"x": x})["y"], expected(x), rtol=1e-6)
        assert op.computed == 1


def test_shape_infer_feeds_the_shapes_of_later_nodes():
    class Widen(Scale):
        def shape_infer(self, node, in_shapes, in_dtypes):
            return [[in_shapes[0][0], 6]], [in_dtypes[0]]

        def compute(self, node, inputs):
            return [np.concatenate([inputs[0], inputs[0]], axis=1)]

    seen = {}

    class Spy(NumpyBackend):
        def build(self, subgraph, target):
            for name, v in subgraph.values.items():
                seen[name] = v.shape
            return super().build(subgraph, target)

    with make_runtime(Spy()) as rt:
        rt.register_custom_op(Widen())
        net = rt.load(with_custom_op())
        assert seen["c"] == (2, 6)  # the Sigmoid partition sees the custom op's output shape
        assert net.run({"x": np.ones((2, 3), np.float32)})["y"].shape == (2, 6)


def test_unregistered_custom_op_error_names_it_and_the_fix():
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(nnplug.UnsupportedNodeError,
                           match="'cstScale' is a custom op of domain 'com.example'.*register_custom_op"):
            rt.load(with_custom_op())


def test_standard_op_name_needs_explicit_override():
    class MyRelu(Scale):
        op_type = "Relu"

        def compute(self, node, inputs):
            return [np.maximum(inputs[0], 0) + 100]

    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(PluginError, match="standard ONNX operator.*override=True"):
            rt.register_custom_op(MyRelu())
        rt.register_custom_op(MyRelu(), override=True)
        net = rt.load(single_op("Relu", [[3]]))
        assert net.assignment["node"] == "op:Relu@cpu"
        assert net.run({"in0": np.zeros(3, np.float32)})["out"].tolist() == [100, 100, 100]
    with make_runtime(NumpyBackend(), disable_op_overrides=True) as rt:
        rt.register_custom_op(MyRelu(), override=True)
        net = rt.load(single_op("Relu", [[3]]))
        assert net.assignment["node"] == "numpy"


def test_each_op_type_registers_once():
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Scale())
        with pytest.raises(PluginError, match="'cstScale' is already registered"):
            rt.register_custom_op(Scale())


def test_a_failing_compute_names_op_node_and_callback_and_runtime_stays_usable():
    class Broken(Scale):
        def compute(self, node, inputs):
            raise RuntimeError("kernel exploded")

    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Broken())
        net = rt.load(with_custom_op())
        with pytest.raises(CustomOpError, match="'cstScale' failed in compute.*'custom'.*kernel exploded"):
            net.run({"x": np.ones((2, 2), np.float32)})
        # the runtime still loads and runs other models
        out = rt.load(single_op("Relu", [[2]])).run({"in0": np.array([-1, 1], np.float32)})
        assert out["out"].tolist() == [0, 1]


def test_compute_returning_the_wrong_count_is_an_error():
    class Wrong(Scale):
        def compute(self, node, inputs):
            return [inputs[0], inputs[0]]

    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Wrong())
        with pytest.raises(CustomOpError, match="must return a list of 1"):
            rt.load(with_custom_op()).run({"x": np.ones((2, 2), np.float32)})


def test_objects_missing_the_protocol_are_refused():
    class NoCompute:
        op_type = "cstNope"

        def shape_infer(self, *a):
            return [], []

    with make_runtime() as rt:
        with pytest.raises(PluginError, match="no method compute"):
            rt.register_custom_op(NoCompute())
        with pytest.raises(PluginError, match="no 'op_type'"):
            rt.register_custom_op(object())


def test_get_node_attr_types():
    node = nnplug.Node("n", "X", "d", [], [], {"i": 3, "f": 0.5, "ints": [1, 2], "floats": [0.5, 1.0],
                                              "s": "abc"})
    assert nnplug.get_node_attr(node, "i") == 3
    assert nnplug.get_node_attr(node, "f") == 0.5
    ints = nnplug.get_node_attr(node, "ints")
    assert ints.dtype == np.int64 and ints.tolist() == [1, 2]
    assert nnplug.get_node_attr(node, "floats").dtype == np.float32
    assert nnplug.get_node_attr(node, "s") == "abc"
    assert nnplug.get_node_attr(node, "missing", 7) == 7


def test_an_unrun_op_of_a_standard_onnx_domain_is_not_called_a_custom_op():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", name="le",
                            keys_int64s=[1], values_int64s=[2])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 2)])
    with make_runtime(NumpyBackend(ops=set())) as rt:
        with pytest.raises(nnplug.UnsupportedNodeError) as e:
            rt.load(model)
    assert "no backend can run node 'le' (op LabelEncoder, domain ai.onnx.ml" in str(e.value)
    assert "custom op" not in str(e.value)

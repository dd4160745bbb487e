"""Small real ONNX models built with onnx.helper for the core's tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(batch="N", seed=0) -> onnx.ModelProto:
    """x[N,4] -> MatMul(w) -> Add(b from ConstantOfShape) -> Relu -> y[N,3]."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, 3], np.int64), "b_shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["b_shape"], ["b"], name="bias",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])),
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [w, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def with_custom_op(op_type="cstScale", domain="com.example") -> onnx.ModelProto:
    """x -> Relu -> <custom op, attr scale=2.0> -> Sigmoid -> y, all [2, 'C']."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(op_type, ["r"], ["c"], name="custom", domain=domain, scale=2.0),
        helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
    ]
    g = helper.make_graph(
        nodes, "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "C"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "C"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)])


def single_op(op_type, shapes, attrs=None, opset=17, domain="", out_shape=None) -> onnx.ModelProto:
    """One node; the output's declared shape defaults to the first input's."""
    names = [f"in{i}" for i in range(len(shapes))]
    node = helper.make_node(op_type, names, ["out"], name="node", domain=domain, **(attrs or {}))
    g = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape or shapes[0])])
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(g, opset_imports=imports)

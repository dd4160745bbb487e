"""Small real ONNX models with random weights, made here (no files to ship)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IN_SHAPE = (2, 8)  # one sample
HIDDEN = 4


def mlp(batch: int | str = "N", seed: int = 0) -> bytes:
    """x [batch, 2, 8] -> y = relu(flatten(x) @ W + b) [batch, 4], score = sum(y) [batch]."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((int(np.prod(IN_SHAPE)), HIDDEN)).astype(np.float32)
    b = rng.standard_normal(HIDDEN).astype(np.float32)
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["score"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *IN_SHAPE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, HIDDEN]),
         helper.make_tensor_value_info("score", TensorProto.FLOAT, [batch])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
         numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()

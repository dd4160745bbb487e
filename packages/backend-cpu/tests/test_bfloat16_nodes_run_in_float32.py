"""bfloat16 nodes are computed in float32 between casts, as float16 ones are
(nnplug.stages.precision): a bfloat16 MatMul -> Relu chain, which onnxruntime's CPU provider does not
run at all, gives the float32 products of the bfloat16 operands rounded once to bfloat16."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def test_bfloat16_chain_is_computed_in_float32_and_rounded_once(rt):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], "in_cast", to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["xb", "w"], ["mm"], "matmul"),
             helper.make_node("Relu", ["mm"], ["r"], "relu"),
             helper.make_node("Cast", ["r"], ["y"], "out_cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((4, 16)).astype(np.float32)
    with rt.load(model, backends=["cpu"]) as net:
        y = net.run({"x": x})["y"]
        assert list(net.assignment) == ["in_cast", "xb/to_float32", "matmul", "relu",
                                        "r/to_bfloat16", "out_cast"]
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    want = np.maximum(xb @ w.astype(np.float64), 0)
    got_ulps = np.abs(y - want) / np.spacing(np.abs(want).astype(ml_dtypes.bfloat16)).astype(
        np.float64)
    assert got_ulps.max() <= 0.5 + 1e-3  # one rounding, of a float32 sum within float32 error

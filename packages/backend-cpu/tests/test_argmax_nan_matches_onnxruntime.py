"""ArgMax and ArgMin on rows holding NaN and infinities give onnxruntime's indices, with and
without select_last_index, along the last axis and a strided one, at 1 and 2 threads."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

ROWS = np.array([
    [1, np.nan, 3, np.nan],   # a NaN later in the row is never picked
    [np.nan, 1, 2, 3],        # a NaN that comes first stays
    [np.nan] * 4,
    [1, 5, np.nan, 5],        # ties around a NaN
    [-np.inf, np.nan, np.inf, 1],
    [-np.inf, np.nan, -np.inf, np.nan],
], np.float32)


def model(op, axis, last):
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=0, select_last_index=last)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ROWS.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_of_rows_with_nan_is_onnxruntimes(rt, threads, op, axis, last):
    m = model(op, axis, last)
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": ROWS})[0]
    net = rt.load(m, backends=["cpu"])
    assert list(net.assignment.values()) == ["cpu"]
    np.testing.assert_array_equal(net.run({"x": ROWS})["y"], want)

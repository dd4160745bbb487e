"""Concat, Sum, Max, Min and Mean with more inputs than a backend node holds (64 here; the
90-input Concat of SSDlite's heads) load and give onnxruntime's answer, bit for bit: the core
splits them into nodes of at most 32 inputs, Sum and Mean in onnxruntime's order."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

RNG = np.random.default_rng(5)


def model(op, shapes, **attrs):
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], name="wide", **attrs)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("count", [65, 90, 300])
@pytest.mark.parametrize("op", ["Concat", "Sum", "Max", "Min", "Mean"])
def test_a_wide_variadic_node_matches_onnxruntime_exactly(rt, threads, op, count):
    if op == "Concat":
        shapes, attrs = [[2, 1 + i % 3, 4] for i in range(count)], {"axis": 1}
    else:  # some inputs broadcast
        shapes, attrs = [[2, 1, 4] if i % 7 == 3 else [2, 3, 4] for i in range(count)], {}
    feeds = {f"x{i}": (RNG.standard_normal(s) * 1e3).astype(np.float32)
             for i, s in enumerate(shapes)}
    feeds["x5"][0, 0, 0] = np.nan  # NaN goes through the split the same way
    m = model(op, shapes, **attrs)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    net = rt.load(m, backends=["cpu"])
    assert len(net.assignment) > 1  # the node was split ...
    assert all(name.startswith("wide/") for name in net.assignment)  # ... and named after it
    np.testing.assert_array_equal(net.run(feeds)["y"], want)

"""A pool over an input whose channel or spatial dims are 0 has no value: onnxruntime refuses
it at run time ("Only N can be zero"), and so does the cpu backend, naming the node, where the
shapes are known only then (static ones are refused at load by nnplug.stages.validate). A batch of 0
runs and gives an empty output, as in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper

import nnplug

POOLS = {
    "GlobalAveragePool": {},
    "GlobalMaxPool": {},
    "MaxPool": {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]},
    "AveragePool": {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]},
}


def symbolic_pool(op: str) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="pool", **POOLS[op])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "OH", "OW"])
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("shape", [(1, 3, 0, 0), (2, 3, 4, 0)], ids=["0x0", "4x0"])
@pytest.mark.parametrize("op", sorted(POOLS))
def test_a_pool_over_empty_spatial_dims_is_refused_naming_the_node(rt, op, shape):
    model = symbolic_pool(op)
    feeds = {"x": np.zeros(shape, np.float32)}
    with pytest.raises(Exception, match="Only N can be zero"):
        onnxruntime_run(model, feeds)
    with rt.load(model, backends=["cpu"]) as net:
        with pytest.raises(nnplug.BackendError) as e:
            net.run(feeds)
    text = str(e.value)
    assert "'pool'" in text and f"op {op}" in text, text
    assert "empty channel or spatial axis has no value" in text, text


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_a_global_pool_over_an_empty_batch_gives_an_empty_output(rt, op):
    model = symbolic_pool(op)
    feeds = {"x": np.zeros((0, 3, 0, 0), np.float32)}
    want = onnxruntime_run(model, feeds)[0]
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run(feeds)["y"]
    assert got.shape == want.shape == (0, 3, 1, 1)

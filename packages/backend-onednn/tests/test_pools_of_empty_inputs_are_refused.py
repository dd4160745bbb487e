"""A pool over an input whose channel or spatial dims turn out 0 at run time has no value:
onnxruntime refuses it ("Only N can be zero"), and so does this backend (it takes no empty
input), naming the node, rather than giving NaN (a 0x0 mean) as backend-cpu and backend-opencl
once did. Static shapes are refused at load by nnplug.stages.validate."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper

import nnplug


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "MaxPool", "AveragePool"])
def test_a_pool_over_empty_spatial_dims_is_refused_naming_the_node(rt, op):
    attrs = {} if op.startswith("Global") else {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "OH", "OW"])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    feeds = {"x": np.zeros((1, 3, 0, 0), np.float32)}
    with pytest.raises(Exception, match="Only N can be zero"):
        onnxruntime_run(model, feeds)
    with rt.load(model, backends=["onednn"]) as net:
        assert net.assignment["pool"] == "onednn"
        with pytest.raises(nnplug.BackendError) as e:
            net.run(feeds)
    text = str(e.value)
    assert "'pool' (op " + op + ")" in text and "size 0" in text, text

"""An output whose size in bytes passes int64 (a ConstantOfShape of [2**62, 4] or [2**32, 2**32]
float32, its shape fed at run time) cannot be allocated anywhere: onnxruntime refuses it
("Integer overflow"), and the cpu backend reports it, naming the node, before the host tries to
allocate it (which failed with numpy's "array is too big")."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper

import nnplug


@pytest.mark.parametrize("shape", [[2**62, 4], [2**32, 2**32]], ids=["2^62x4", "2^32x2^32"])
def test_a_constant_of_shape_past_int64_bytes_is_refused_naming_the_node(rt, shape):
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])
    model = helper.make_model(helper.make_graph([node], "g", [s], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    feeds = {"s": np.array(shape, np.int64)}
    with pytest.raises(Exception, match="overflow"):
        onnxruntime_run(model, feeds)
    with rt.load(model, backends=["cpu"]) as net:
        with pytest.raises(nnplug.BackendError) as e:
            net.run(feeds)
    text = str(e.value)
    assert "'fill' (op ConstantOfShape)" in text, text
    assert "more bytes than any memory holds" in text, text

"""A kernel's outputs are its last node's, an omitted optional one passed with data NULL (the
ABI): a LayerNormalization writing a graph output itself, its Mean and InvStdDev omitted, ends
a oneDNN kernel with three outputs. It runs, with static and symbolic shapes, and matches
onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(21)


def layer_norm_model(batch):
    h = 16
    nodes = [helper.make_node("Add", ["x", "s"], ["sum"], name="add"),
             helper.make_node("LayerNormalization", ["sum", "g", "b"], ["y", "", ""], name="ln",
                              axis=-1, epsilon=1e-5)]
    inits = [numpy_helper.from_array(R.standard_normal(h).astype(np.float32) + 1, "g"),
             numpy_helper.from_array(R.standard_normal(h).astype(np.float32), "b")]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 5, h]) for n in "xs"]
    graph = helper.make_graph(nodes, "ln", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5, h])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [3, "N"])
def test_layer_norm_with_omitted_outputs_ends_a_kernel(rt, batch):
    model = layer_norm_model(batch)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with rt.load(model, backends=["onednn", "cpu"]) as net:
        assert net.assignment["ln"] == "onednn", net.assignment
        for n in (3, 1, 4) if batch == "N" else (3,):
            feeds = {k: R.standard_normal((n, 5, 16)).astype(np.float32) for k in "xs"}
            np.testing.assert_allclose(net.run(feeds)["y"], ref.run(None, feeds)[0],
                                       rtol=1e-5, atol=1e-5)

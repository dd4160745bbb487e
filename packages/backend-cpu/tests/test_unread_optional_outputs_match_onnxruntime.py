"""Optional outputs a model lists but nothing reads reach the backend as omitted (the loader
blanks them): the outputs that are read must still match onnxruntime, and the node must see
the blanks (recurrent nets' Y, MaxPool's Indices, LayerNormalization's statistics)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as h
from onnx import numpy_helper as nh

from nnplug.stages.loader import load

R = np.random.default_rng(20261202)
T, B, IN, H = 5, 2, 4, 3


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


CASES = {
    "lstm_y_unread": ([h.make_node("LSTM", ["x", "w", "r"], ["y", "yh"], hidden_size=H)], "yh",
                      {"w": f32(1, 4 * H, IN), "r": f32(1, 4 * H, H)}, (T, B, IN), ["", "yh"]),
    "gru_y_unread": ([h.make_node("GRU", ["x", "w", "r"], ["y", "yh"], hidden_size=H)], "yh",
                     {"w": f32(1, 3 * H, IN), "r": f32(1, 3 * H, H)}, (T, B, IN), ["", "yh"]),
    "lstm_states_unread": ([h.make_node("LSTM", ["x", "w", "r"], ["y", "yh", "yc"], hidden_size=H)], "y",
                           {"w": f32(1, 4 * H, IN), "r": f32(1, 4 * H, H)}, (T, B, IN), ["y", "", ""]),
    "maxpool_indices_unread": ([h.make_node("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2])], "p", {},
                               (1, 2, 5, 5), ["p", ""]),
    "layernorm_statistics_unread": ([h.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "isd"])], "y",
                                    {"s": f32(5)}, (1, 2, 5, 5), ["y", "", ""]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_read_outputs_match_onnxruntime_when_unread_ones_are_omitted(rt, case):
    nodes, read, inits, shape, seen = CASES[case]
    nodes = nodes + [h.make_node("Relu", [read], ["out"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", 1, list(shape))],
                     [h.make_tensor_value_info("out", 1, None)], [nh.from_array(v, k) for k, v in inits.items()])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    assert load(model).nodes[0].outputs == seen
    feeds = {"x": f32(*shape)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run(feeds)["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

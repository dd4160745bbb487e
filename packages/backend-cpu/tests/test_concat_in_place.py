"""Concat inputs written in place (the planner makes an input a slice of the Concat's output)
give onnxruntime's answers in the cases that stress the planner: a value in several Concats and
read again after them, the same value twice in one Concat, a chain of Concats, a Concat output
that leaves the kernel, a Reshape of a placed value, a Relu fused into a Concat (not placed),
and batch 2 (inputs are not contiguous slabs there, so they are copied). Each case is placed
where the host's grouping puts producer and Concat in one kernel; the light zoo's DenseNet and
Inception (test_zoo_models.py) run the long chains, where nearly every Concat input is placed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(11)


def concat_model(batch: int):
    C, H = 5, 6
    x = RNG.standard_normal((batch, C, H, H), dtype=np.float32)
    inits = [numpy_helper.from_array(RNG.standard_normal((4, C, 3, 3), dtype=np.float32), "wa"),
             numpy_helper.from_array(RNG.standard_normal((3, C, 1, 1), dtype=np.float32), "wb"),
             numpy_helper.from_array(np.array([batch, -1], np.int64), "flat")]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "wb"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),          # a, b placed in c1 ...
        helper.make_node("Concat", ["c1", "a"], ["c2"], axis=1),         # ... c1 in c2, a again
        helper.make_node("Concat", ["b", "b"], ["c3"], axis=1),          # the same value twice
        helper.make_node("Relu", ["a"], ["d"]),                          # a read after the Concats
        helper.make_node("Reshape", ["b", "flat"], ["br"]),              # a view of a placed value
        helper.make_node("Sigmoid", ["c2"], ["e"]),
        helper.make_node("Concat", ["e", "x"], ["c4"], axis=1),          # a kernel input copied
        helper.make_node("Concat", ["c4", "d"], ["c5"], axis=1),
        helper.make_node("Relu", ["c5"], ["f"]),                         # fused into the Concat
        helper.make_node("Concat", ["br", "br"], ["g"], axis=1),
        helper.make_node("Concat", ["c3", "f"], ["h"], axis=1),            # the one output
    ]
    outs = {"g": None, "h": 6 + 11 + C + 4}
    vis = []
    for name, ch in outs.items():
        shape = (batch, 6 * H * H) if ch is None else (batch, ch, H, H)
        vis.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              vis, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"x": x}


@pytest.mark.parametrize("batch", [1, 2])
def test_concat_in_place_matches_onnxruntime_at_every_thread_count(rt, batch):
    model, feeds = concat_model(batch)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    lib = rt.backends["cpu"].backend
    with rt.load(model, backends=["cpu"]) as net:
        first = None
        try:
            for threads in (1, 2, 3):
                lib.set_num_threads(threads)
                got = net.run(feeds)
                for k, w in want.items():
                    np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, err_msg=k)
                if first is None:
                    first = got
                for k in want:
                    assert np.array_equal(got[k], first[k]), k
        finally:
            lib.set_num_threads(0)

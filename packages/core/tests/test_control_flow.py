"""If, Loop and Scan run by the core, with subgraphs that read outer-scope values; each
subgraph's nodes are placed on the backends like the main graph's."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import nnplug

ALL = set(KERNELS)


def _vi(name, elem=T.FLOAT, shape=None):
    return h.make_tensor_value_info(name, elem, shape)


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _if_model():
    # y = cond ? (x + w) * x : x * w, both branches reading outer x and the weight w
    then = h.make_graph([h.make_node("Add", ["x", "w"], ["t"], name="add"),
                         h.make_node("Mul", ["t", "x"], ["then_y"], name="mul")],
                        "then", [], [_vi("then_y", shape=[2, 3])])
    other = h.make_graph([h.make_node("Mul", ["x", "w"], ["else_y"], name="mul")],
                         "else", [], [_vi("else_y", shape=[2, 3])])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    g = h.make_graph([h.make_node("Relu", ["x0"], ["x"], name="relu"),
                      h.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                                  else_branch=other)],
                     "g", [_vi("x0", shape=[2, 3]), _vi("c", T.BOOL, [])], [_vi("y", shape=[2, 3])],
                     [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("cond", [True, False])
def test_if_picks_the_branch_and_reads_outer_values(cond):
    model = _if_model()
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    feeds = {"x0": x, "c": np.array(cond)}
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        np.testing.assert_allclose(net.run(feeds)["y"], _ort(model, feeds)[0], rtol=1e-6)
        assert net.assignment["if"] == "core"
        assert net.assignment["if/then_branch/add"] == "numpy"
        assert net.assignment["if/else_branch/mul"] == "numpy"


def test_subgraph_nodes_no_backend_runs_are_declined_by_name():
    with make_runtime(NumpyBackend(ops={"Relu", "Mul"})) as rt:
        with pytest.raises(nnplug.UnsupportedNodeError, match=r"node 'add' \(op Add"):
            rt.load(_if_model())


def _loop_model():
    # for i < M while acc < limit: acc = acc + x * i; scan output acc each step
    body = h.make_graph(
        [h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT, name="cast"),
         h.make_node("Mul", ["x", "fi"], ["step"], name="mul"),
         h.make_node("Add", ["acc_in", "step"], ["acc_out"], name="add"),
         h.make_node("Less", ["acc_out", "limit"], ["c_out"], name="less"),
         h.make_node("Identity", ["acc_out"], ["scan"], name="id")],
        "body", [_vi("i", T.INT64, []), _vi("c_in", T.BOOL, []), _vi("acc_in", shape=[])],
        [_vi("c_out", T.BOOL, []), _vi("acc_out", shape=[]), _vi("scan", shape=[])])
    g = h.make_graph([h.make_node("Loop", ["M", "c", "acc0"], ["acc", "accs"], name="loop",
                                  body=body)],
                     "g", [_vi("M", T.INT64, []), _vi("c", T.BOOL, []), _vi("acc0", shape=[]),
                           _vi("x", shape=[]), _vi("limit", shape=[])],
                     [_vi("acc", shape=[]), _vi("accs", shape=[None])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("trips,limit", [(5, 100.0), (10, 7.0), (0, 100.0)])
def test_loop_runs_until_trip_count_or_condition_and_stacks_scan_outputs(trips, limit):
    model = _loop_model()
    feeds = {"M": np.array(trips, np.int64), "c": np.array(True), "acc0": np.float32(0.5),
             "x": np.float32(1.5), "limit": np.float32(limit)}
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run(feeds)
        assert net.assignment["loop/body/add"] == "numpy"
    want = _ort(model, feeds)
    np.testing.assert_allclose(got["acc"], want[0], rtol=1e-6)
    assert got["accs"].shape == want[1].shape
    np.testing.assert_allclose(got["accs"], want[1], rtol=1e-6)


def test_scan_with_state_and_reversed_input_matches_onnxruntime():
    # running sum over the rows of x, read last row first
    body = h.make_graph([h.make_node("Add", ["s_in", "row"], ["s_out"], name="add"),
                         h.make_node("Mul", ["s_out", "k"], ["out"], name="mul")],
                        "body", [_vi("s_in", shape=[3]), _vi("row", shape=[3])],
                        [_vi("s_out", shape=[3]), _vi("out", shape=[3])])
    g = h.make_graph([h.make_node("Scan", ["s0", "x"], ["s", "ys"], name="scan", body=body,
                                  num_scan_inputs=1, scan_input_directions=[1],
                                  scan_output_axes=[1])],
                     "g", [_vi("s0", shape=[3]), _vi("x", shape=[4, 3]), _vi("k", shape=[3])],
                     [_vi("s", shape=[3]), _vi("ys", shape=[3, 4])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(2)
    feeds = {"s0": rng.standard_normal(3).astype(np.float32),
             "x": rng.standard_normal((4, 3)).astype(np.float32),
             "k": rng.standard_normal(3).astype(np.float32)}
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run(feeds)
    want = _ort(model, feeds)
    np.testing.assert_allclose(got["s"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["ys"], want[1], rtol=1e-6)


@pytest.mark.parametrize("lens", [None, [4, 2, 3]], ids=["full", "sequence_lens"])
def test_scan_8_batch_form_matches_onnxruntime(lens):
    # Scan-8: a batch axis 0 on every state and scan input, the sequence on axis 1,
    # sequence_lens per batch entry (shorter entries' scan outputs padded with zeros)
    body = h.make_graph([h.make_node("Add", ["s_in", "row"], ["s_out"], name="add"),
                         h.make_node("Mul", ["s_out", "k"], ["out"], name="mul")],
                        "body", [_vi("s_in", shape=[2]), _vi("row", shape=[2])],
                        [_vi("s_out", shape=[2]), _vi("out", shape=[2])])
    ins = ["lens" if lens else "", "s0", "x"]
    g = h.make_graph([h.make_node("Scan", ins, ["s", "ys"], name="scan", body=body,
                                  num_scan_inputs=1, directions=[1])],
                     "g", ([_vi("lens", T.INT64, [3])] if lens else [])
                     + [_vi("s0", shape=[3, 2]), _vi("x", shape=[3, 4, 2]), _vi("k", shape=[2])],
                     [_vi("s", shape=[3, 2]), _vi("ys", shape=[3, 4, 2])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 8)])
    model.ir_version = 8
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal((3, 2)).astype(np.float32),
             "x": rng.standard_normal((3, 4, 2)).astype(np.float32),
             "k": rng.standard_normal(2).astype(np.float32)}
    if lens:
        feeds["lens"] = np.array(lens, np.int64)
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run(feeds)
    want = _ort(model, feeds)
    np.testing.assert_allclose(got["s"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["ys"], want[1], rtol=1e-6)


def test_control_flow_network_runs_from_many_threads():
    model = _if_model()
    rng = np.random.default_rng(3)
    cases = [{"x0": rng.standard_normal((2, 3)).astype(np.float32), "c": np.array(k % 2 == 0)}
             for k in range(8)]
    wants = [_ort(model, f)[0] for f in cases]
    errors = []
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        def work(k):
            for _ in range(20):
                try:
                    np.testing.assert_allclose(net.run(cases[k])["y"], wants[k], rtol=1e-6)
                except Exception as e:  # collected: an assert in a thread is not seen
                    errors.append(e)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_condition_that_is_not_one_value_is_a_clear_error():
    model = _if_model()
    model.graph.input[1].type.tensor_type.shape.dim.add().dim_value = 2
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        with pytest.raises(nnplug.NnplugError, match=r"node 'if'.*condition must hold one value"):
            net.run({"x0": np.zeros((2, 3), np.float32), "c": np.array([True, False])})

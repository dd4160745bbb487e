"""Sequence and optional values: the core runs their ops (when no backend claims them),
networks take and give them (lists of arrays; None for an empty optional)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

import nnplug

ALL = set(KERNELS)


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _seq_type(elem=T.FLOAT):
    return h.make_sequence_type_proto(h.make_tensor_type_proto(elem, None))


def test_sequence_ops_build_edit_and_concatenate_like_onnxruntime():
    # s = [a, b] ; s.insert(0, relu(c)) ; s.erase(-1) ; y = concat(s, axis 0) ; n = len(s)
    nodes = [h.make_node("SequenceConstruct", ["a", "b"], ["s0"], name="construct"),
             h.make_node("Relu", ["c"], ["rc"], name="relu"),
             h.make_node("SequenceInsert", ["s0", "rc", "zero"], ["s1"], name="insert"),
             h.make_node("SequenceErase", ["s1", "minus1"], ["s2"], name="erase"),
             h.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0, name="concat"),
             h.make_node("SequenceLength", ["s2"], ["n"], name="len"),
             h.make_node("SequenceAt", ["s2", "zero"], ["first"], name="at")]
    inits = [h.make_tensor("zero", T.INT64, [], [0]), h.make_tensor("minus1", T.INT64, [], [-1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(x, T.FLOAT, [2, 3]) for x in "abc"],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 3]),
                      h.make_tensor_value_info("n", T.INT64, []),
                      h.make_tensor_value_info("first", T.FLOAT, [2, 3])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((2, 3)).astype(np.float32) for x in "abc"}
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run(feeds)
        assert net.assignment["relu"] == "numpy"
        assert net.assignment["construct"] == "core"
    for (name, g_), w in zip(got.items(), _ort(model, feeds)):
        np.testing.assert_array_equal(g_, w, err_msg=name)


def test_sequence_input_and_output_are_lists_of_arrays():
    g = h.make_graph([h.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0,
                                  name="split"),
                      h.make_node("SequenceInsert", ["parts", "x0"], ["out"], name="insert")],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                           h.make_tensor_value_info("x0", T.FLOAT, [2])],
                     [h.make_value_info("out", _seq_type())])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    x0 = np.array([7, 8], np.float32)
    with make_runtime(NumpyBackend()) as rt, rt.load(model) as net:
        got = net.run({"x": x, "x0": x0})["out"]
    want = _ort(model, {"x": x, "x0": x0})[0]
    assert isinstance(got, list) and len(got) == len(want) == 4
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)


@pytest.mark.parametrize("given", [True, False])
def test_optional_has_element_and_get_element(given):
    opt = h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [3]))
    g = h.make_graph([h.make_node("OptionalHasElement", ["o"], ["has"], name="has"),
                      h.make_node("Identity", ["o"], ["same"], name="id")],
                     "g", [h.make_value_info("o", opt)],
                     [h.make_tensor_value_info("has", T.BOOL, []), h.make_value_info("same", opt)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    value = np.array([1, 2, 3], np.float32) if given else None
    with make_runtime(NumpyBackend()) as rt, rt.load(model) as net:
        got = net.run({"o": value})
    assert bool(got["has"]) is given
    if given:
        np.testing.assert_array_equal(got["same"], value)
    else:
        assert got["same"] is None


def test_getting_the_element_of_an_empty_optional_is_a_clear_error():
    opt = h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [3]))
    g = h.make_graph([h.make_node("OptionalGetElement", ["o"], ["v"], name="get")],
                     "g", [h.make_value_info("o", opt)], [h.make_tensor_value_info("v", T.FLOAT, [3])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    with make_runtime(NumpyBackend()) as rt, rt.load(model) as net:
        with pytest.raises(nnplug.NnplugError, match=r"node 'get'.*optional input is empty"):
            net.run({"o": None})


def test_a_sequence_input_given_an_array_is_a_clear_error():
    g = h.make_graph([h.make_node("SequenceLength", ["s"], ["n"], name="len")],
                     "g", [h.make_value_info("s", _seq_type())],
                     [h.make_tensor_value_info("n", T.INT64, [])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with make_runtime(NumpyBackend()) as rt, rt.load(model) as net:
        assert int(net.run({"s": [np.zeros(2, np.float32)] * 3})["n"]) == 3
        with pytest.raises(nnplug.InputError, match=r"input 's' is a sequence: give a list"):
            net.run({"s": np.zeros((3, 2), np.float32)})


def _zipmap_model(labels: dict, x_shape):
    node = h.make_node("ZipMap", ["X"], ["Y"], domain="ai.onnx.ml", name="zm", **labels)
    key = T.INT64 if "classlabels_int64s" in labels else T.STRING
    out = h.make_value_info("Y", h.make_sequence_type_proto(
        h.make_map_type_proto(key, h.make_tensor_type_proto(T.FLOAT, []))))
    g = h.make_graph([node], "g", [h.make_tensor_value_info("X", T.FLOAT, x_shape)], [out])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 1)],
                        ir_version=9)


@pytest.mark.parametrize("labels,x_shape", [
    (dict(classlabels_int64s=[3, 1, 7]), [4, 3]),
    (dict(classlabels_strings=["cat", "dog"]), [5, 2]),
    (dict(classlabels_int64s=[0, 1]), [2]),      # one row given as a vector
])
def test_zipmap_gives_the_sequence_of_maps_onnxruntime_gives(labels, x_shape):
    model = _zipmap_model(labels, x_shape)
    x = np.random.default_rng(3).random(x_shape, dtype=np.float32)
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        got = net.run({"X": x})["Y"]
        assert net.assignment["zm"] == "core"
    (want,) = _ort(model, {"X": x})
    assert got == want  # same keys (types too), the same float values, the same order
    assert [type(k) for k in got[0]] == [type(k) for k in want[0]]


def test_zipmap_with_the_wrong_column_count_names_node_and_labels():
    model = _zipmap_model(dict(classlabels_int64s=[0, 1, 2]), ["N", "C"])
    with make_runtime(NumpyBackend(ops=ALL)) as rt, rt.load(model) as net:
        with pytest.raises(nnplug.NnplugError, match=r"'zm'.*must be \[N, 3\] or \[3\]"):
            net.run({"X": np.zeros((2, 4), np.float32)})

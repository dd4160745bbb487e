"""A classifier ending in ZipMap (skl2onnx's default export: probabilities as one
{label: probability} dict per row) runs on the host path: the core's ZipMap takes the array the
cpu partition made, with a symbolic batch, and the answers are onnxruntime's (int and string
labels, several batch sizes, Network.run and run_tensors)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug.values import MapSequence

ort = pytest.importorskip("onnxruntime")


def classifier(labels):
    w = numpy_helper.from_array(
        np.random.default_rng(3).standard_normal((4, len(labels))).astype(np.float32), "w")
    key = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    attr = {"classlabels_strings": labels} if key == TensorProto.STRING else \
        {"classlabels_int64s": labels}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
             helper.make_node("ZipMap", ["probabilities"], ["maps"], domain="ai.onnx.ml", **attr)]
    maps = helper.make_tensor_sequence_value_info("maps", 0, None)
    maps.type.sequence_type.elem_type.map_type.key_type = key
    maps.type.sequence_type.elem_type.map_type.value_type.tensor_type.elem_type = \
        TensorProto.FLOAT
    g = helper.make_graph(nodes, "clf", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["N", 4])],
                          [maps, helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                                               ["N", len(labels)])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.ml", 1)])


def assert_same_maps(got, want):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)  # the labels, in order
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("labels", [[3, 7, 11], ["no", "maybe", "yes"], [0, 1]])
def test_zipmap_runs_on_the_host_path_with_onnxruntime_answers(rt, labels):
    model = classifier(labels)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with rt.load(model, backends=["cpu"]) as net:
        assert net._host_path is not None, "a ZipMap classifier left the host path"
        for batch in (1, 5, 1):
            x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
            want_maps, want_p = ref.run(None, {"x": x})
            got = net.run({"x": x})
            assert_same_maps(got["maps"], want_maps)
            np.testing.assert_allclose(got["probabilities"], want_p, rtol=1e-5, atol=1e-6)
            tensors = net.run_tensors({"x": x})
            assert isinstance(tensors["maps"], MapSequence)
            assert_same_maps(tensors["maps"].numpy(), want_maps)
        sess = nnplug.InferenceSession(model.SerializeToString(), providers=["cpu"], runtime=rt)
        x = np.ones((2, 4), np.float32)
        assert_same_maps(sess.run(["maps"], {"x": x})[0], ref.run(["maps"], {"x": x})[0])


def test_maps_given_as_two_outputs_are_separate_dicts(rt):
    # ZipMap's dicts are handed out without a copy the first time; a second output of the same
    # value (an Identity to another graph output) gets copies: changing one changes not the other
    model = classifier([3, 7, 11])
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),  # its Identity takes no maps
                                providers=["CPUExecutionProvider"]).run(["maps"], {"x": x})[0]
    model.graph.node.append(helper.make_node("Identity", ["maps"], ["maps_too"]))
    twin = helper.make_tensor_sequence_value_info("maps_too", 0, None)
    twin.type.CopyFrom(model.graph.output[0].type)
    model.graph.output.append(twin)
    with rt.load(model, backends=["cpu"]) as net:
        for run in (net.run, lambda f: {k: v.numpy() for k, v in net.run_tensors(f).items()}):
            got = run({"x": x})
            assert_same_maps(got["maps"], want)
            assert_same_maps(got["maps_too"], want)
            got["maps"][0][3] = 42.0
            assert got["maps_too"][0][3] != 42.0
            assert all(a is not b for a, b in zip(got["maps"], got["maps_too"]))

"""A model file's large weights are read straight into arrays (nnplug.model_file): the same
values onnx's own reader gives for every element type, the proto keeps their names, types
and dims without bytes, and whatever the fast reader does not walk still loads (or fails with
nnplug's error naming the file)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug import model_file
from nnplug.errors import ModelError

RNG = np.random.default_rng(7)
OPS = ["MatMul", "Add", "Reshape", "Identity", "Cast", "Constant"]


@pytest.fixture
def rt():
    with make_runtime(NumpyBackend(ops=OPS)) as runtime:
        yield runtime


def _weights_model(float_data_weight: bool = False) -> onnx.ModelProto:
    """y = x @ W + b (W large float32), plus large weights of other element types read by
    nodes whose outputs are graph outputs, and a small shape constant."""
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(RNG.standard_normal(96).astype(np.float32), "b"),
        numpy_helper.from_array(RNG.standard_normal((70, 80)).astype(np.float16), "H"),
        numpy_helper.from_array(RNG.integers(-9, 9, (5000,), dtype=np.int64), "I"),
        numpy_helper.from_array(RNG.integers(0, 2, (5001,)).astype(bool), "B"),
        numpy_helper.from_array(RNG.integers(0, 255, (4100,), dtype=np.uint8), "U8"),
        numpy_helper.from_array(np.array([-1, 96], np.int64), "shape"),
    ]
    bf = helper.make_tensor("BF", TensorProto.BFLOAT16, [4200],
                            RNG.standard_normal(4200).astype(np.float32).tolist())
    inits.append(bf)
    if float_data_weight:  # values in float_data, not raw_data
        inits.append(helper.make_tensor("F", TensorProto.FLOAT, [5000],
                                        RNG.standard_normal(5000).astype(np.float32).tolist()))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["xwb"]),
             helper.make_node("Reshape", ["xwb", "shape"], ["y"]),
             helper.make_node("Identity", ["H"], ["h"]),
             helper.make_node("Identity", ["I"], ["i"]),
             helper.make_node("Identity", ["B"], ["bo"]),
             helper.make_node("Identity", ["U8"], ["u"]),
             helper.make_node("Cast", ["BF"], ["bf"], to=TensorProto.FLOAT)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("h", TensorProto.FLOAT16, None),
               helper.make_tensor_value_info("i", TensorProto.INT64, None),
               helper.make_tensor_value_info("bo", TensorProto.BOOL, None),
               helper.make_tensor_value_info("u", TensorProto.UINT8, None),
               helper.make_tensor_value_info("bf", TensorProto.FLOAT, None)]
    if float_data_weight:
        nodes.append(helper.make_node("Identity", ["F"], ["f"]))
        outputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "weights",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _arrays(read: model_file.ModelFile) -> dict[str, np.ndarray]:
    out = {}
    for t in read.proto.graph.initializer:
        w = model_file.weight_of(t, read.weights)
        out[t.name] = w if w is not None else numpy_helper.to_array(t)
    return out


@pytest.mark.parametrize("copy", ["one thread", "threads"])
@pytest.mark.parametrize("source", ["file", "bytes"])
def test_every_element_type_reads_as_onnx_reads_it(tmp_path, source, copy, monkeypatch):
    """(Weights of 64 MB and more in all are copied by several threads: "threads" lowers that
    bound to 0, so these small ones are too.)"""
    if copy == "threads":
        monkeypatch.setattr(model_file, "PARALLEL_COPY_BYTES", 0)
        monkeypatch.setattr(model_file, "available_cores", lambda: 2)
    proto = _weights_model(float_data_weight=True)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    read = (model_file.read_file(str(path)) if source == "file"
            else model_file.read_bytes(path.read_bytes()))
    want = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    got = _arrays(read)
    assert list(got) == list(want)
    for name, a in want.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape, name
        np.testing.assert_array_equal(got[name], a, err_msg=name)
    # the large plain-typed ones were cut: no bytes in the proto, read-only arrays beside it
    assert list(read.weights) == ["W", "H", "I", "B", "U8"]  # in the file's order
    for t in read.proto.graph.initializer:
        if t.name in read.weights:
            assert not t.HasField("raw_data"), t.name
        assert list(t.dims) == list(want[t.name].shape)
    assert all(not w.flags.writeable for w in read.weights.values())
    cut = sum(w.nbytes for w in read.weights.values())
    assert proto.ByteSize() - read.proto.ByteSize() >= cut


def test_a_session_on_the_file_and_on_its_bytes_matches_onnxruntime(tmp_path, rt):
    ort = pytest.importorskip("onnxruntime")
    proto = _weights_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for source in (str(path), path.read_bytes()):
        got = nnplug.InferenceSession(source, runtime=rt).run(None, {"x": x})
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def test_a_session_keeps_its_weights_when_the_file_is_written_again(tmp_path, rt):
    proto = _weights_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    session = nnplug.InferenceSession(str(path), runtime=rt)
    before = session.run(["y"], {"x": x})[0]
    other = _weights_model()  # new random weights, same names
    path.write_bytes(b"")  # truncated first, as an export rewriting the file does
    onnx.save(other, path)
    np.testing.assert_array_equal(session.run(["y"], {"x": x})[0], before)


def test_an_initializer_given_in_the_session_options_replaces_a_cut_one(tmp_path, rt):
    proto = _weights_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    so = nnplug.SessionOptions()
    w = np.ones((64, 96), np.float32)
    so.add_initializer("W", w)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    b = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "b"))
    got = nnplug.InferenceSession(str(path), so, runtime=rt).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)


def test_external_data_beside_the_file_is_read(tmp_path):
    proto = _weights_model()
    want = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    path = tmp_path / "m.onnx"
    onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=1024)
    read = model_file.read_file(str(path))
    for name, a in _arrays(read).items():
        np.testing.assert_array_equal(a, want[name], err_msg=name)


def test_a_graph_given_in_two_pieces_is_merged_as_protobuf_merges_it(tmp_path):
    # protobuf merges a message field that appears twice: the second piece adds its nodes and
    # initializers. The fast reader leaves that to protobuf and gets the same model.
    proto = _weights_model()
    first = onnx.ModelProto()
    first.CopyFrom(proto)
    del first.graph.node[4:]
    second = onnx.GraphProto()
    second.node.extend(proto.graph.node[4:])
    data = first.SerializeToString() + onnx.ModelProto(graph=second).SerializeToString()
    assert onnx.load_from_string(data).graph.node == proto.graph.node
    read = model_file.read_bytes(data)
    assert list(read.proto.graph.node) == list(proto.graph.node)
    for name, a in _arrays(read).items():
        want = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))
        np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("cut", [10, 1000, -7])
def test_a_truncated_file_is_an_error_naming_it(tmp_path, cut, rt):
    data = _weights_model().SerializeToString()
    path = tmp_path / "broken.onnx"
    path.write_bytes(data[:cut])
    with pytest.raises(ModelError, match="broken.onnx"):
        nnplug.InferenceSession(str(path), runtime=rt)


def test_an_empty_file_is_an_error_naming_it(tmp_path, rt):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelError, match="empty.onnx"):
        nnplug.InferenceSession(str(path), runtime=rt)


def test_a_weight_whose_bytes_do_not_match_its_dims_is_named(tmp_path, rt):
    proto = _weights_model()
    w = next(t for t in proto.graph.initializer if t.name == "W")
    w.raw_data = w.raw_data[:-4]  # one float short
    path = tmp_path / "short.onnx"
    onnx.save(proto, path)
    with pytest.raises(ModelError, match="'W'"):
        nnplug.InferenceSession(str(path), runtime=rt)


def test_external_data_of_a_constant_node_is_read_beside_a_cut_weight(tmp_path, rt):
    # W stays in the file (and is cut by the reader); the Constant node's value is in an
    # external file, as onnx.save(convert_attribute=True) writes it: both are read
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    c = RNG.standard_normal((2, 96)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(c, "c")),
             helper.make_node("Add", ["xw", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 96])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=256, convert_attribute=True)
    mixed = onnx.load(str(path), load_external_data=False)  # W back inline, c external
    mixed.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    onnx.save(mixed, path)
    read = model_file.read_file(str(path))
    assert set(read.weights) == {"W"}
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    got = nnplug.InferenceSession(str(path), runtime=rt).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, x @ w + c, rtol=1e-5, atol=1e-5)


def test_weights_left_in_a_file_that_changes_before_they_are_read_are_an_error(tmp_path):
    # a plan cache reads the graph first and the weights only on a miss: the file must still
    # be the one whose graph was read
    path = tmp_path / "m.onnx"
    onnx.save(_weights_model(), path)
    read = model_file.read_file(str(path), lazy=True)
    assert read.weights._arrays is None  # nothing copied yet
    onnx.save(_weights_model(), path)  # written again: same graph, new weights
    with pytest.raises(ModelError, match="m.onnx.*changed while it was being loaded"):
        read.weights["W"]
    eager = model_file.read_file(str(path))
    assert eager.weights._arrays is not None  # copied at once without a cache

"""nnplug.onnxruntime's session side by side with onnxruntime's: provider names, errors at
onnxruntime's paths, SessionOptions that change the model, the optimized model file, traces."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nnplug
import nnplug.onnxruntime as nort
from nnplug.onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument

ort = pytest.importorskip("onnxruntime")


def matmul_model(batch="N", ir=8, meta=None):
    w = onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    x = h.make_tensor_value_info("x", T.FLOAT, [batch, 2])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                      h.make_node("Relu", ["m"], ["y"], name="relu")], "g", [x],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 3])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=ir)
    if meta:
        h.set_model_props(m, meta)
    return m


def pair(model, rt, so_ort=None, so_nn=None, **kw):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return (ort.InferenceSession(data, so_ort, providers=["CPUExecutionProvider"]),
            nort.InferenceSession(data, so_nn, runtime=rt, **kw))


X = np.array([[1, -2], [3, 4]], np.float32)


def test_provider_names_are_onnxruntimes(rt):
    want, got = pair(matmul_model(), rt, providers=["CPUExecutionProvider"])
    assert got.get_providers() == want.get_providers() == ["CPUExecutionProvider"]
    assert got.get_provider_options() == want.get_provider_options()
    assert nort.get_all_providers()[-1] == ort.get_all_providers()[-1] == "CPUExecutionProvider"
    np.testing.assert_allclose(got.run(None, {"x": X})[0], want.run(None, {"x": X})[0])


def test_a_provider_nothing_runs_is_skipped_with_onnxruntimes_warning(rt):
    with pytest.warns(UserWarning, match="Specified provider 'CUDAExecutionProvider' is not in "
                                         "available provider names"):
        sess = nort.InferenceSession(matmul_model().SerializeToString(), runtime=rt,
                                     providers=["CUDAExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]  # the CPU is always the fallback


def test_an_unknown_provider_is_onnxruntimes_runtime_error(rt):
    want, got = pair(matmul_model(), rt)
    for sess in (want, got):
        with pytest.raises(RuntimeError, match="Unknown Provider Type: Nope"):
            sess.set_providers(["Nope"])


def test_errors_are_onnxruntimes_classes_and_still_nnplugs(rt):
    want, got = pair(matmul_model(batch=2), rt)
    for sess in (want, got):
        with pytest.raises(InvalidArgument if sess is got else
                           ort.capi.onnxruntime_pybind11_state.InvalidArgument):
            sess.run(None, {"x": np.ones((3, 2), np.float32)})
    with pytest.raises(nnplug.NnplugError, match=r"^\[ONNXRuntimeError\] : 2 : INVALID_ARGUMENT"):
        got.run(None, {"x": np.ones((2, 2), np.float64)})
    with pytest.raises(nort.capi.onnxruntime_pybind11_state.NoSuchFile):
        nort.InferenceSession("no/such/model.onnx", runtime=rt)


def test_missing_inputs_are_onnxruntimes_value_error(rt):
    want, got = pair(matmul_model(), rt)
    texts = []
    for sess in (want, got):
        with pytest.raises(ValueError) as e:
            sess.run([], {})
        texts.append(str(e.value))
    assert texts[0] == texts[1]


def test_config_entries_fail_as_in_onnxruntime():
    for so in (ort.SessionOptions(), nort.SessionOptions()):
        so.add_session_config_entry("k", "v")
        assert so.get_session_config_entry("k") == "v"
        with pytest.raises(RuntimeError, match="SessionOptions does not have configuration "
                                               "with key: nokey"):
            so.get_session_config_entry("nokey")
        with pytest.raises(RuntimeError, match="Config key is empty or longer than maximum "
                                               "length 1024"):
            so.add_session_config_entry("k" * 1025, "v")


@pytest.mark.parametrize("how", ["name", "denotation"])
def test_free_dimension_overrides_fix_the_input_shape(rt, how):
    sos = ort.SessionOptions(), nort.SessionOptions()
    for so in sos:
        if how == "name":
            so.add_free_dimension_override_by_name("N", 4)
        else:
            so.add_free_dimension_override_by_denotation("DATA_BATCH", 4)
    want, got = pair(matmul_model(), rt, *sos)
    assert got.get_inputs()[0].shape == want.get_inputs()[0].shape == [4, 2]


def test_add_initializer_replaces_the_models(rt):
    sos = ort.SessionOptions(), nort.SessionOptions()
    w = np.ones((2, 3), np.float32)
    values = ort.OrtValue.ortvalue_from_numpy(w), nort.OrtValue.ortvalue_from_numpy(w)
    for so, value in zip(sos, values):  # onnxruntime needs the value alive while it runs
        so.add_initializer("w", value)
    want, got = pair(matmul_model(), rt, *sos)
    np.testing.assert_array_equal(got.run(None, {"x": X})[0], want.run(None, {"x": X})[0])


def external_model(tmp_path):
    m = matmul_model()
    from onnx.external_data_helper import convert_model_to_external_data

    convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    path = tmp_path / "ext.onnx"
    onnx.save(m, path)  # the model names w.bin; the data stays in memory only
    os.remove(tmp_path / "w.bin")
    return str(path)


def test_external_initializers_given_in_memory(rt, tmp_path):
    path = external_model(tmp_path)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ort.InferenceSession(matmul_model().SerializeToString()).run(None, {"x": X})[0]
    by_name, by_file = nort.SessionOptions(), nort.SessionOptions()
    by_name.add_external_initializers(["w"], [nort.OrtValue.ortvalue_from_numpy(w)])
    by_file.add_external_initializers_from_files_in_memory(["w.bin"], [w.tobytes()],
                                                           [w.nbytes])
    for so in (by_name, by_file):
        got = nort.InferenceSession(path, so, runtime=rt).run(None, {"x": X})[0]
        np.testing.assert_array_equal(got, want)


def test_config_from_the_model_when_the_environment_asks(rt, monkeypatch):
    cfg = {"session_options": {"intra_op_num_threads": 2, "enable_profiling": 1,
                               "graph_optimization_level": 1}}
    model = matmul_model(meta={"ort_config": json.dumps(cfg)})
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    want, got = pair(model, rt)
    for sess in (want, got):
        so = sess.get_session_options()
        assert so.intra_op_num_threads == 2 and so.enable_profiling
        assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        os.remove(sess.end_profiling())


def test_the_optimized_model_loads_in_onnxruntime_with_the_same_outputs(rt, tmp_path):
    # a constant subgraph nnplug folds: the file holds its value, not its nodes
    c = onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "c")
    g = h.make_graph([h.make_node("ConstantOfShape", ["c"], ["k"], name="fill",
                                  value=h.make_tensor("v", T.FLOAT, [1], [0.5])),
                      h.make_node("Add", ["x", "k"], ["y"], name="add")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])], [c])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    so = nort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                "opt.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                "8")
    got = nort.InferenceSession(model.SerializeToString(), so, runtime=rt)
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written)
    assert [n.op_type for n in written.graph.node] == ["Add"]
    assert (tmp_path / "opt.bin").is_file()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        ort.InferenceSession(so.optimized_model_filepath).run(None, {"x": x})[0],
        got.run(None, {"x": x})[0])


def test_traces_have_onnxruntimes_layout(rt):
    sos = ort.SessionOptions(), nort.SessionOptions()
    for so in sos:
        so.enable_profiling = True
    for sess in pair(matmul_model(), rt, *sos):
        sess.run(None, {"x": X})
        path = sess.end_profiling()
        assert os.path.basename(path).startswith("onnxruntime_profile__")
        lines = open(path).read().splitlines()
        os.remove(path)
        assert lines[0] == "[" and lines[-1] == "]"
        for line in lines[1:-1]:
            event = json.loads(line.rstrip(","))
            assert {"pid", "dur", "ts", "ph", "name", "args"} <= set(event)


def test_graph_assignment_needs_the_config_entry_and_names_every_node(rt):
    _, got = pair(matmul_model(), rt)
    with pytest.raises(Fail, match="session.record_ep_graph_assignment_info"):
        got.get_provider_graph_assignment_info()
    so = nort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    _, got = pair(matmul_model(), rt, None, so)
    parts = got.get_provider_graph_assignment_info()
    assert {p.ep_name for p in parts} == {"CPUExecutionProvider"}
    assert sorted(f"{n.domain}:{n.op_type}/{n.name}" for p in parts for n in p.get_nodes()) == \
        [":MatMul/mm", ":Relu/relu"]


def test_check_and_normalize_provider_args():
    from onnxruntime.capi.onnxruntime_inference_collection import (
        check_and_normalize_provider_args as theirs,
    )

    from nnplug.onnxruntime.capi.onnxruntime_inference_collection import (
        check_and_normalize_provider_args as ours,
    )

    for args in [(None, None), (["a", ("b", {1: 2})], None), (["a"], [{"k": 1}])]:
        assert ours(*args, ["a", "b"]) == theirs(*args, ["a", "b"])
    for bad in [(3, None), ([3], None), (["a"], 3), (["a", "b"], [{}])]:
        for fn in (ours, theirs):
            with pytest.raises(ValueError):
                fn(*bad, ["a", "b"])

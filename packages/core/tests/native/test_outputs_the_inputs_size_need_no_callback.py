"""A dynamic partition's output whose shape the inputs decide (a decoder's logits and caches:
every dim fixed or a symbol of an input) gets its memory from the host before the one
``run_dynamic`` call (ABI 1.8.1), so the backend asks no callback for it; an output whose
shape only the kernels find (a Reshape to a run-time shape) is still asked for. A backend
built before 1.8.1 (it asks for every output) gets the preset memory back from the callback:
the same answers either way, and an output bound to the caller's array written in place."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from nativelib import bare_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug.runcontext import RunContext, running


def _model() -> onnx.ModelProto:
    """x[N, T, 8] -> MatMul -> Add -> Relu -> h[N, T, 16] (its shape the input's), and h
    reshaped to a run-time shape -> y[r, c] (a shape only the kernels know)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["h"], name="relu"),
             helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape")]
    g = helper.make_graph(
        nodes, "sized_by_inputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 8]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", "T", 16]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", "c"])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n, t):
    x = np.random.default_rng(n * 10 + t).standard_normal((n, t, 8)).astype(np.float32)
    return {"x": x, "shape": np.array([-1, 8], np.int64)}


@pytest.mark.parametrize("lib, asked_per_run", [("testcpu", 1), ("ask_every_output", 2)])
def test_only_outputs_the_kernels_size_are_asked_for(libs, stats, lib, asked_per_run):
    model = _model()
    with bare_runtime() as rt:
        rt.register_backend(libs[lib])
        with rt.load(model) as net:
            for n, t in ((1, 3), (2, 1), (1, 7), (3, 0)):
                before = stats(lib)
                out = net.run(_feeds(n, t))
                after = stats(lib)
                assert after["run_dynamic"] - before["run_dynamic"] == 1
                assert after["output_alloc"] - before["output_alloc"] == asked_per_run
                want = dict(zip(["h", "y"], ort_run(model, _feeds(n, t))))
                for name in ("h", "y"):
                    assert out[name].shape == want[name].shape
                    np.testing.assert_allclose(out[name], want[name], rtol=1e-5, atol=1e-5)


def ort_run(model, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("lib", ["testcpu", "ask_every_output"])
def test_a_bound_output_sized_by_the_inputs_is_written_in_place(libs, stats, lib):
    model = _model()
    with bare_runtime() as rt:
        rt.register_backend(libs[lib])
        with rt.load(model) as net:
            for n, t in ((2, 5), (1, 1)):
                feeds = _feeds(n, t)
                buf = np.full((n, t, 16), np.nan, np.float32)
                before = stats(lib)
                with running(RunContext(outputs={"h": buf})):  # what IO binding hands a run
                    out = net.run(feeds)
                assert stats(lib)["run_dynamic"] - before["run_dynamic"] == 1
                assert np.shares_memory(out["h"], buf)
                np.testing.assert_allclose(buf, ort_run(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_an_output_declared_with_a_size_the_kernels_do_not_make_is_named(libs):
    """The host presets what the model declares; a model declaring h wrongly gets the shape
    checker's error naming h before any kernel writes it."""
    model = _model()
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 15  # the kernels make 16
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net, pytest.raises(nnplug.NnplugError) as err:
            net.run(_feeds(2, 3))
    assert "'h'" in str(err.value) and "15" in str(err.value)

"""A partition with shapes known only at run time runs in ONE native call on a backend with
``run_dynamic`` (ABI 1.6): the same answers as kernel by kernel and as onnxruntime, failures
named as before, profiled runs still timed kernel by kernel, concurrent runs apart. A run with
numpy feeds and a symbolic batch takes the short way (nnplug.host_path) to that call, with the
general path's answers and errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from nativelib import bare_runtime
from onnx import TensorProto, helper
from test_a_static_host_run_has_a_small_fixed_cost import python_calls
from test_end_to_end import _x, mlp, reference

import nnplug
from nnplug.runcontext import RunContext, running


def _run_all(lib, model, feeds_list, **load):
    with bare_runtime() as rt:
        rt.register_backend(lib)
        with rt.load(model, **load) as net:
            return [net.run(feeds)["y"] for feeds in feeds_list]


def test_a_symbolic_batch_is_one_run_dynamic_call_per_run(libs, stats):
    model = mlp(batch="N")
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for batch in (1, 4, 0, 7):
                before = stats("testcpu")
                y = net.run({"x": _x(batch, seed=batch)})["y"]
                after = stats("testcpu")
                assert after["run_dynamic"] - before["run_dynamic"] == 1
                # mm1, add1+relu1 fused, mm2, add2, reshape: all inside that call
                assert after["kernel_run"] - before["kernel_run"] == 5
                np.testing.assert_allclose(y, reference(model, {"x": _x(batch, seed=batch)}),
                                           rtol=1e-5, atol=1e-5)


def test_one_call_and_kernel_by_kernel_give_the_same_bits(libs, stats):
    model = mlp(batch="N", runtime_shape=True)
    feeds = [{"x": _x(b, seed=b), "shape": np.array(s, np.int64)}
             for b, s in ((2, [-1, 3]), (3, [2, 9]), (1, [6, 1]), (4, [-1, 8]))]
    before = stats("testcpu_perkernel")
    one_call = _run_all(libs["testcpu"], model, feeds)
    per_kernel = _run_all(libs["testcpu_perkernel"], model, feeds)
    assert stats("testcpu_perkernel")["run_dynamic"] == before["run_dynamic"] == 0
    for a, b, f in zip(one_call, per_kernel, feeds):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, reference(model, f), rtol=1e-5, atol=1e-5)


def test_a_profiled_run_goes_kernel_by_kernel_and_agrees(libs, stats):
    model = mlp(batch="N")
    x = _x(3)
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        plain = nnplug.InferenceSession(model, providers=["testcpu"], runtime=rt)
        so = nnplug.SessionOptions()
        so.enable_profiling = True
        profiled = nnplug.InferenceSession(model, so, providers=["testcpu"], runtime=rt)
        want = plain.run(None, {"x": x})[0]
        before = stats("testcpu")
        got = profiled.run(None, {"x": x})[0]
        assert stats("testcpu")["run_dynamic"] == before["run_dynamic"]
        kernels = [e for e in profiled._profiler.events() if e["cat"] == "kernel"]
    np.testing.assert_array_equal(want, got)
    assert [e["args"]["nodes"] for e in kernels] == [
        ["mm1"], ["add1", "relu1"], ["mm2"], ["add2"], ["reshape"]]


def test_a_kernel_failing_inside_the_call_names_its_node_and_the_next_run_works(libs):
    fail = helper.make_node("TbFail", ["r"], ["y"], name="the_failing_node", domain="test.nnplug")
    relu = helper.make_node("Relu", ["x"], ["r"], name="first_relu")
    g = helper.make_graph([relu, fail], "f",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    bad = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                              helper.make_opsetid("test.nnplug", 1)])
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(bad) as net:
            with pytest.raises(nnplug.BackendError) as info:
                net.run({"x": np.ones(5, np.float32)})
        msg = str(info.value)
        assert "TbFail node the_failing_node refuses to run" in msg
        assert "node 'the_failing_node'" in msg and "testcpu" in msg
        with rt.load(mlp(batch="N")) as net:  # the same library goes on running
            y = net.run({"x": _x(2)})["y"]
    np.testing.assert_allclose(y, reference(mlp(batch="N"), {"x": _x(2)}), rtol=1e-5, atol=1e-5)


def test_concurrent_runs_of_one_dynamic_partition_keep_their_shapes_apart(libs):
    model = mlp(batch="N")
    want = {b: reference(model, {"x": _x(b, seed=b)}) for b in range(1, 7)}
    errors = []
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            def worker(first):
                try:
                    for i in range(60):
                        b = 1 + (first + i) % 6
                        y = net.run({"x": _x(b, seed=b)})["y"]
                        np.testing.assert_allclose(y, want[b], rtol=1e-5, atol=1e-5)
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert not errors, errors[0]


# -- the short way of a run (nnplug.host_path) with symbolic dims -----------------------------
def add_model():
    """z[N, 4] = Add(x[N, 4], y[N, 4]): one symbol over two inputs."""
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"], name="add")], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4])
                           for n in "xy"],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_symbolic_batch_takes_the_short_way_with_the_general_paths_answers(libs, stats):
    model = mlp(batch="N")
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for batch in (3, 1, 0):
                x = _x(batch, seed=batch)
                net.run({"x": x})
                short = python_calls(lambda x=x: net.run({"x": x}))
                with running(RunContext(tag="general")):  # a run context: the general path
                    general = python_calls(lambda x=x: net.run({"x": x}))
                    want = net.run({"x": x})["y"]
                assert short <= 30 and 2 * short < general, (short, general)
                before = stats("testcpu")
                got = net.run({"x": x})["y"]
                after = stats("testcpu")
                # one native call: run_dynamic, or a repeated shape's static plan (run_steps)
                assert sum(after[k] - before[k] for k in ("run_dynamic", "run_steps")) == 1
                np.testing.assert_array_equal(got, want)
                np.testing.assert_allclose(got, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feeds, message", [
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((3, 4), np.float32)}, "N"),
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((2, 5), np.float32)}, "input 'y'"),
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((2, 4), np.float64)}, "float64"),
    ({"x": np.ones((2, 4, 1), np.float32), "y": np.ones((2, 4), np.float32)}, "input 'x'"),
])
def test_feeds_that_do_not_fit_the_symbols_get_the_general_paths_error(libs, feeds, message):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(add_model()) as net:
            np.testing.assert_array_equal(
                net.run({"x": np.ones((2, 4), np.float32), "y": np.ones((2, 4), np.float32)})["z"],
                np.full((2, 4), 2, np.float32))
            with pytest.raises(nnplug.NnplugError) as short:
                net.run(feeds)
            with running(RunContext(tag="general")), pytest.raises(nnplug.NnplugError) as general:
                net.run(feeds)
    assert message in str(short.value)
    assert str(short.value) == str(general.value)

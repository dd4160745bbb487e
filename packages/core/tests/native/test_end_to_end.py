"""Real ONNX models through a Runtime on the native test backends, checked against
onnxruntime: the device flavour (every byte through the device API), the CPU flavour (one
run_steps call per run), dynamic shapes, partition boundaries, threads."""

import gc
import os
import threading

import numpy as np
import onnx
import pytest
from nativelib import bare_runtime
from numpy_backend import NumpyBackend
from onnx import TensorProto, helper, numpy_helper

import nnplug

ort = pytest.importorskip("onnxruntime")


def mlp(batch=2, runtime_shape=False, sigmoid=False, seed=0) -> onnx.ModelProto:
    """x[batch,8] -> MatMul -> Add -> Relu -> MatMul -> Add -> Reshape -> y.
    With runtime_shape the Reshape's target shape is a graph input; with sigmoid a Sigmoid
    (which the test backends do not run) sits in the middle."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 6)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal((1, 6)).astype(np.float32), "b2")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])]
    if runtime_shape:
        inputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    else:
        inits.append(numpy_helper.from_array(np.array([-1, 3], np.int64), "shape"))
    mid = "s" if sigmoid else "r1"
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1")]
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", ["r1"], ["s"], name="sigmoid"))
    nodes += [helper.make_node("MatMul", [mid, "w2"], ["m2"], name="mm2"),
              helper.make_node("Add", ["m2", "b2"], ["a2"], name="add2"),
              helper.make_node("Reshape", ["a2", "shape"], ["y"], name="reshape")]
    g = helper.make_graph(nodes, "mlp", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", "c"])],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _x(batch, seed=1):
    return np.random.default_rng(seed).standard_normal((batch, 8)).astype(np.float32)


@pytest.mark.parametrize("variant", ["testdev", "testcpu", "testnorun", "testown"])
def test_static_model_matches_onnxruntime(libs, variant, tmp_path):
    model = mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = _x(2)
    with bare_runtime() as rt:
        rt.register_backend(libs[variant])
        with rt.load(str(path)) as net:
            assert set(net.assignment.values()) == {variant}
            y = net.run({"x": x})["y"]
    np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)
    assert y.shape == (4, 3)


def test_static_cpu_run_is_one_native_call(libs, stats):
    model = mlp()
    with bare_runtime() as rt:
        b = rt.register_backend(libs["testcpu"]).backend
        with rt.load(model) as net:
            before = stats("testcpu")
            net.run({"x": _x(2)})
            after = stats("testcpu")
            assert after["run_steps"] - before["run_steps"] == 1
            # mm1, add1+relu1 fused, mm2, add2, reshape
            assert after["kernel_run"] - before["kernel_run"] == 5
            assert b.library.host_visible


def test_device_flavour_goes_through_the_whole_device_api(libs, stats):
    model = mlp(sigmoid=True)  # Sigmoid runs on the numpy backend: two boundary crossings
    x = _x(2)
    with bare_runtime() as rt:
        rt.register_backend(libs["testdev"])
        rt.register_backend(NumpyBackend())
        before = stats("testdev")
        with rt.load(model, backends=["testdev", "numpy"]) as net:
            assert net.assignment["sigmoid"] == "numpy"
            assert net.assignment["mm1"] == net.assignment["reshape"] == "testdev"
            y = net.run({"x": x})["y"]
            mid = stats("testdev")
        after = stats("testdev")
    np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)
    d = {k: mid[k] - before[k] for k in before}
    assert d["h2d"] >= 2 and d["d2h"] >= 2       # x in, r1 out, s in, y out
    assert d["ws_alloc"] >= 1                   # arena / MatMul scratch from alloc_workspace
    assert d["stream_sync"] >= 2                # one per partition run
    assert d["run_steps"] == 2 and d["kernels_live"] == 5
    assert after["kernels_live"] == before["kernels_live"]  # kernels destroyed on close
    assert after["live"] == before["live"]                  # and every buffer freed


@pytest.mark.parametrize("variant", ["testdev", "testcpu"])
def test_symbolic_batch_runs_the_dynamic_path(libs, variant):
    model = mlp(batch="N")
    with bare_runtime() as rt:
        rt.register_backend(libs[variant])
        with rt.load(model) as net:
            for batch in (1, 3, 5):
                x = _x(batch, seed=batch)
                y = net.run({"x": x})["y"]
                np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)
                assert y.shape == (batch * 2, 3)


@pytest.mark.parametrize("variant", ["testdev", "testcpu"])
def test_reshape_fed_at_run_time(libs, variant):
    model = mlp(runtime_shape=True)
    x = _x(2)
    with bare_runtime() as rt:
        rt.register_backend(libs[variant])
        with rt.load(model) as net:
            for shape in ([-1, 3], [3, 4], [12, 1]):
                feeds = {"x": x, "shape": np.array(shape, np.int64)}
                y = net.run(feeds)["y"]
                np.testing.assert_allclose(y, reference(model, feeds), rtol=1e-5, atol=1e-5)
            with pytest.raises(nnplug.BackendError) as info:
                net.run({"x": x, "shape": np.array([5, 5], np.int64)})
    msg = str(info.value)
    assert "12 elements cannot take shape with 25" in msg and "'reshape'" in msg
    assert variant in msg


def test_backend_error_names_the_node_and_carries_the_message(libs):
    node = helper.make_node("TbFail", ["x"], ["y"], name="the_failing_node", domain="test.nnplug")
    g = helper.make_graph([node], "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("test.nnplug", 1)])
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            with pytest.raises(nnplug.BackendError) as info:
                net.run({"x": np.ones(2, np.float32)})
    msg = str(info.value)
    assert "TbFail node the_failing_node refuses to run" in msg
    assert "node 'the_failing_node'" in msg and "testcpu" in msg and "status ERROR" in msg


def test_unsupported_nodes_are_not_claimed(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["testdev"])
        with pytest.raises(nnplug.UnsupportedNodeError, match="sigmoid"):
            rt.load(mlp(sigmoid=True))


def test_network_keeps_the_library_loaded_after_the_runtime_closes(libs, stats):
    # Networks of earlier tests kept alive only by reference cycles (tracebacks of the
    # errors they raised) still hold the library: collect them first.
    gc.collect()
    model = mlp()
    x = _x(2)
    rt = bare_runtime()
    lib = rt.register_backend(libs["testdev"]).backend.library
    net = rt.load(model)
    rt.close()
    assert lib.loaded
    y = net.run({"x": x})["y"]
    np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)
    before = stats("testdev")["shutdown"]
    net.close()
    assert not lib.loaded and stats("testdev")["shutdown"] == before + 1


@pytest.mark.parametrize("variant", ["testcpu", "testdev"])
def test_eight_threads_create_runtimes_and_run_one_network(libs, variant):
    model = mlp(batch="N")
    folder = os.path.dirname(libs[variant])
    xs = [_x(4, seed=s) for s in range(8)]
    expected = [reference(model, {"x": x}) for x in xs]
    shared_rt = bare_runtime(dynamic_backends_path=folder)
    shared = shared_rt.load(model)
    barrier = threading.Barrier(8)
    results, errors = {}, []

    def work(i):
        try:
            barrier.wait()
            with bare_runtime(dynamic_backends_path=folder) as rt:
                assert list(rt.backends) == [variant]
                with rt.load(model) as own:
                    for _ in range(20):
                        a = shared.run({"x": xs[i]})["y"]
                        b = own.run({"x": xs[i]})["y"]
                        assert np.array_equal(a, b)
            results[i] = a
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared.close()
    shared_rt.close()
    assert not errors, errors
    for i in range(8):
        np.testing.assert_allclose(results[i], expected[i], rtol=1e-5, atol=1e-5)
    assert len({results[i].tobytes() for i in range(8)}) == 8  # different inputs, own answers


@pytest.mark.parametrize("variant", ["testdev", "testcpu"])
def test_scalar_inputs_keep_rank_zero(libs, variant):
    g = helper.make_graph([helper.make_node("Add", ["x", "s"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with bare_runtime() as rt:
        rt.register_backend(libs[variant])
        with rt.load(model) as net:
            y = net.run({"x": np.arange(3, dtype=np.float32), "s": np.array(2, np.float32)})["y"]
    assert y.tolist() == [2, 3, 4]

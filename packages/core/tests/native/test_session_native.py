"""The session API on the compiled test backends: threads through the ABI, IO binding on a
device (no copies), copies and kernels in profiles, terminate inside a native partition."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from nativelib import bare_runtime
from numpy_backend import NumpyBackend
from onnx import TensorProto, helper, numpy_helper
from test_end_to_end import _x, mlp, reference

import nnplug
from nnplug import profiling
from nnplug.runcontext import RunContext, running

pytest.importorskip("onnxruntime")


def session(rt, model, providers, **options):
    so = nnplug.SessionOptions()
    for k, v in options.items():
        setattr(so, k, v)
    return nnplug.InferenceSession(model, so, providers=providers, runtime=rt)


def test_intra_op_num_threads_reaches_the_native_backend_through_the_abi(libs, stats):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        for n in (3, 1):
            session(rt, mlp(), ["testcpu"], intra_op_num_threads=n)
            assert stats("testcpu")["threads"] == n
        session(rt, mlp(), ["testcpu"])  # 0: the backend keeps what it has
        assert stats("testcpu")["threads"] == 1


def test_io_binding_keeps_device_data_on_the_device(libs, stats):
    model, x = mlp(), _x(2)
    want = reference(model, {"x": x})
    with bare_runtime() as rt:
        rt.register_backend(libs["testdev"])
        s = session(rt, model, ["testdev"])
        api = rt.backends["testdev"].backend.device_api()
        dev = nnplug.device("testdev")
        x_dev = nnplug.Tensor.from_numpy(x).to(dev, api)
        binding = s.io_binding()
        binding.bind_input("x", x_dev)
        binding.bind_output("y")
        before = stats("testdev")
        s.run_with_iobinding(binding)
        after = stats("testdev")
        assert after["h2d"] == before["h2d"]  # the bound device input was used in place
        assert after["d2h"] == before["d2h"]  # and the output left on the device
        (y,) = binding.get_outputs()
        assert isinstance(y, nnplug.Tensor) and y.device == dev and y.shape == want.shape
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], want, rtol=1e-5, atol=1e-5)
        assert stats("testdev")["d2h"] == after["d2h"] + 1

        # preallocated outputs: a host array and a device tensor, written in place
        host_buf = np.zeros(want.shape, np.float32)
        dev_buf = nnplug.Tensor.empty(want.shape, np.float32, dev, api)
        for buf in (host_buf, dev_buf):
            binding.bind_output("y", buffer=buf)
            s.run_with_iobinding(binding)
            assert binding.get_outputs()[0] is not None
        np.testing.assert_allclose(host_buf, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dev_buf.numpy(), want, rtol=1e-5, atol=1e-5)
        binding.bind_output("y", "cpu")
        s.run_with_iobinding(binding)
        assert binding.get_outputs()[0].is_host
        with pytest.raises(nnplug.InputError, match="buffer bound to it is float32 \\[3, 3\\]"):
            binding.bind_output("y", buffer=np.zeros((3, 3), np.float32))
            s.run_with_iobinding(binding)
        with pytest.raises(nnplug.InputError, match="'z' is not an output.*y"):
            binding.bind_output("z")


def test_profile_names_kernels_and_copies_at_partition_edges(libs, stats):
    model, x = mlp(sigmoid=True), _x(2)  # Sigmoid on numpy between two testdev partitions
    with bare_runtime() as rt:
        rt.register_backend(libs["testdev"])
        rt.register_backend(NumpyBackend())
        s = session(rt, model, ["testdev", "numpy"], enable_profiling=True)
        mid = stats("testdev")
        y = s.run(None, {"x": x})[0]
        ran = stats("testdev")["kernel_run"] - mid["kernel_run"]
        prof = s._profiler
        events = prof.events()
    np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-5, atol=1e-5)
    kernels = [e for e in events if e["cat"] == "kernel"]
    native = [e for e in kernels if e["args"]["backend"] == "testdev"]
    assert len(native) == ran == 5  # mm1, add1+relu1 | mm2, add2, reshape
    fused = [e for e in native if e["args"]["fused"]]
    assert [e["args"]["nodes"] for e in fused] == [["add1", "relu1"]]
    assert fused[0]["args"]["op_type"] == "Add+Relu"
    assert fused[0]["args"]["output_shapes"] == [[2, 16]]
    assert [e["args"]["nodes"] for e in kernels if e["args"]["backend"] == "numpy"] == [["sigmoid"]]
    copies = [e for e in events if e["cat"] == "copy"]
    assert [(c["args"]["value"], c["args"]["from"], c["args"]["to"]) for c in copies] == [
        ("x", "cpu:0", "testdev:0"), ("r1", "testdev:0", "cpu:0"), ("s", "cpu:0", "testdev:0")]
    assert copies[1]["args"]["bytes"] == 2 * 16 * 4


def test_backend_of_abi_1_0_loads_and_is_profiled_per_kernel(libs, stats):
    with bare_runtime() as rt:
        info = rt.register_backend(libs["abi10"])
        assert info.backend.abi_version[:2] == (1, 0)
        assert not info.backend.library.table.set_profile_hook  # beyond its table: NULL
        s = session(rt, mlp(), ["testabi10"], enable_profiling=True)
        before = stats("abi10")["kernel_run"]
        np.testing.assert_allclose(s.run(None, {"x": _x(2)})[0], reference(mlp(), {"x": _x(2)}),
                                   rtol=1e-5, atol=1e-5)
        kernels = [e for e in s._profiler.events() if e["cat"] == "kernel"]
        assert len(kernels) == stats("abi10")["kernel_run"] - before


def long_chain(depth=48, n=160, seed=0) -> onnx.ModelProto:
    """x[n,n] -> MatMul x depth: one partition of `depth` kernels, each a few ms."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32),
                                     "w")]
    nodes, prev = [], "x"
    for i in range(depth):
        out = "y" if i == depth - 1 else f"m{i}"
        nodes.append(helper.make_node("MatMul", [prev, "w"], [out], name=f"mm{i}"))
        prev = out
    g = helper.make_graph(nodes, "long",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_terminate_stops_a_native_partition_between_kernels(libs, stats):
    depth, n = 48, 160
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        s = session(rt, long_chain(depth, n), ["testcpu"])
        assert len(set(s.network.assignment.values())) == 1
        ro = nnplug.RunOptions()
        start = stats("testcpu")["kernel_run"]
        x = np.eye(n, dtype=np.float32)
        future = s.run_async(None, {"x": x}, run_options=ro)
        deadline = time.monotonic() + 30
        while stats("testcpu")["kernel_run"] == start and time.monotonic() < deadline:
            time.sleep(0.0005)
        ro.terminate = True
        with pytest.raises(nnplug.RunTerminatedError, match="before node 'mm\\d+'"):
            future.result(60)
        assert 1 <= stats("testcpu")["kernel_run"] - start < depth
        ro.terminate = False  # the same options run to the end again
        got = s.run(None, {"x": x}, ro)[0]
        np.testing.assert_allclose(got, reference(long_chain(depth, n), {"x": x}),
                                   rtol=1e-3, atol=1e-4)


def test_concurrent_profiled_runs_record_every_kernel(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        s = session(rt, mlp(batch="N"), ["testcpu"], enable_profiling=True)
        threads = [threading.Thread(target=s.run, args=(None, {"x": _x(b)})) for b in range(1, 7)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        rows = {r.op_type: r.count for r in profiling.by_op_type(s._profiler)}
    # dynamic shapes: every node its own kernel except the fused Add+Relu
    assert rows == {"MatMul": 12, "Add+Relu": 6, "Add": 6, "Reshape": 6}


def test_bound_host_buffers_are_written_in_place_by_a_static_native_partition(libs):
    model, x = mlp(), _x(2)
    want = reference(model, {"x": x})
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        net = rt.load(model)
        buf = np.full(want.shape, np.nan, np.float32)
        with running(RunContext(outputs={"y": buf})):
            (t,) = net.run_tensors({"x": x}).values()
        assert t.handle is buf  # the kernel wrote into the caller's array: no copy
        np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)
        s = session(rt, model, ["testcpu"])
        binding = s.io_binding()
        binding.bind_input("x", x)
        wrong = np.zeros((3, 3), np.float32)  # does not fit: the backend allocates, no error yet
        with running(RunContext(outputs={"y": wrong})):
            (t,) = net.run_tensors({"x": x}).values()
        assert t.handle is not wrong and not wrong.any()
        buf2 = np.zeros(want.shape, np.float32)
        binding.bind_output("y", buffer=buf2)
        s.run_with_iobinding(binding)
        assert binding.get_outputs()[0].handle is buf2
        np.testing.assert_allclose(buf2, want, rtol=1e-5, atol=1e-5)


def test_bound_host_buffers_are_written_in_place_by_a_dynamic_native_partition(libs):
    """A model with a symbolic batch runs kernel by kernel, its output shapes known only at run
    time (as a decoder's, whose cache grows every step): a bound array that fits is written by
    the kernel, not filled by a copy afterwards."""
    model, x = mlp(batch="N"), _x(3)
    want = reference(model, {"x": x})
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        net = rt.load(model)
        buf = np.full(want.shape, np.nan, np.float32)
        with running(RunContext(outputs={"y": buf})):
            (t,) = net.run_tensors({"x": x}).values()
        assert t.handle is buf  # the kernel wrote into the caller's array: no copy
        np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)
        wrong = np.zeros((4, 3), np.float32)  # does not fit: the backend allocates
        with running(RunContext(outputs={"y": wrong})):
            (t,) = net.run_tensors({"x": x}).values()
        assert t.handle is not wrong and not wrong.any()
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)

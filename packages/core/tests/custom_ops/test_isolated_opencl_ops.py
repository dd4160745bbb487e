"""Native custom ops with an OpenCL implementation in a worker process (``isolate_plugins``
naming their library): the op's kernel runs there, on the OpenCL handles of the backend's
class built again in the worker (an OpenCL context of its own on the same device), its
tensors crossing through shared memory; the results are the in-process ones. A crash in its
OpenCL compute is a PluginCrashed naming the library, the node and the signal, and the
Runtime goes on. Where the worker cannot get OpenCL handles, the op's CPU implementation runs
there and the placement says why.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from models import single_op, with_custom_op
from numpy_backend import NumpyBackend, make_runtime

from nnplug.native.isolated import IsolatedCustomOp, PluginCrashed

RNG = np.random.default_rng(11)
# The NULL store under the sanitize session's runtimes (preloaded) is UndefinedBehaviorSanitizer's
# report and exit(1) instead of a segfault (as in test_isolated_op_libraries.py).
UNDER_SANITIZERS = "libasan" in os.environ.get("LD_PRELOAD", "")


def expected(x):
    """with_custom_op's model: Sigmoid(2 * Relu(x))."""
    return 1 / (1 + np.exp(-2.0 * np.maximum(x, 0)))


def opencl_in(pid: int) -> bool:
    """Whether process ``pid`` has an OpenCL library (the ICD loader) mapped."""
    with open(f"/proc/{pid}/maps") as f:
        return "libOpenCL" in f.read()


@pytest.mark.opencl
@pytest.mark.parametrize("variant", ["good", "gpu_only"])
def test_the_opencl_kernel_runs_in_the_worker_as_it_does_in_process(op_libs, opencl_backend,
                                                                    variant):
    """``gpu_only`` has no CPU implementation: only its OpenCL kernel can give the result."""
    xs = [RNG.standard_normal((2, c)).astype(np.float32) for c in (3, 1000)]
    results = {}
    for isolate in ("", os.path.basename(op_libs[variant])):
        with make_runtime(opencl_backend(), NumpyBackend(), isolate_plugins=isolate) as rt:
            rt.register_custom_ops_library(op_libs[variant])
            op = rt.ops["cstScale"]
            assert isinstance(op, IsolatedCustomOp) == bool(isolate)
            assert op.targets == (("gpu", "cpu") if variant == "good" else ("gpu",))
            net = rt.load(with_custom_op(), backends=["opencl", "numpy"])
            assert net.assignment == {"relu": "opencl", "custom": "op:cstScale@gpu",
                                      "sigmoid": "opencl"}
            assert net.placement["custom"]["declined"] == {}
            results[bool(isolate)] = [net.run({"x": x})["y"] for x in xs]
            if isolate:  # the worker runs the kernel: it has OpenCL loaded
                assert opencl_in(op.library.worker.pid)
            net.close()
    for x, isolated, in_process in zip(xs, results[True], results[False]):
        np.testing.assert_allclose(isolated, expected(x), rtol=1e-5)
        np.testing.assert_array_equal(isolated, in_process)


@pytest.mark.opencl
@pytest.mark.parametrize("scale, signal", [(1001.0, "SIGSEGV"), (1006.0, "SIGABRT")])
def test_a_crash_in_the_opencl_compute_is_an_error_and_the_runtime_goes_on(
        op_libs, opencl_backend, scale, signal):
    lib = op_libs["crash"]
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    with make_runtime(opencl_backend(), NumpyBackend(), isolate_plugins="cstScale") as rt:
        rt.register_custom_ops_library(lib)
        good = rt.load(with_custom_op(), backends=["opencl", "numpy"])
        bad = rt.load(single_op("cstScale", [[3]], {"scale": scale}, domain="t"),
                      backends=["opencl", "numpy"])
        assert good.assignment["custom"] == bad.assignment["node"] == "op:cstScale@gpu"
        np.testing.assert_allclose(good.run({"x": x})["y"], expected(x), rtol=1e-5)
        with pytest.raises(PluginCrashed) as e:
            bad.run({"in0": np.array([1, 2, 3], np.float32)})
        text = str(e.value)
        assert f"native custom-op library ({os.path.realpath(lib)}, worker process " in text
        assert e.value.doing == "running custom op 'cstScale' (its OpenCL kernel) on node 'node'"
        if UNDER_SANITIZERS and signal == "SIGSEGV":
            assert e.value.exit_status == 1
        else:
            assert e.value.signal == signal and f"died of {signal}" in text
        # the same Runtime: the good network (bound again in a fresh worker), a new network
        # of the op, one of the library's CPU ops and a backend's own nodes run correctly
        np.testing.assert_allclose(good.run({"x": x})["y"], expected(x), rtol=1e-5)
        again = rt.load(single_op("cstScale", [[3]], {"scale": 3.0}, domain="t"),
                        backends=["opencl", "numpy"])
        assert again.assignment["node"] == "op:cstScale@gpu"
        np.testing.assert_allclose(again.run({"in0": x[0, :3]})["out"], 3 * x[0, :3], rtol=1e-6)
        copy = rt.load(single_op("cstFail", [[3]], domain="t"), backends=["opencl", "numpy"])
        np.testing.assert_array_equal(copy.run({"in0": abs(x[1, :3])})["out"], abs(x[1, :3]))
        relu = rt.load(single_op("Relu", [[2, 5]]), backends=["opencl"])
        np.testing.assert_array_equal(relu.run({"in0": x})["out"], np.maximum(x, 0))


class NoHandlesBackend(NumpyBackend):
    """A backend on an OpenCL device whose device API declares no OpenCL handles."""

    id = "nohandles"
    device_type = "opencl"


def test_without_opencl_handles_the_cpu_implementation_runs_and_the_placement_says_why(op_libs):
    with make_runtime(NoHandlesBackend(), NumpyBackend(), isolate_plugins=True) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(single_op("cstScale", [[2, 3]], {"scale": 2.0}, domain="t"),
                      backends=["nohandles", "numpy"])
        assert net.assignment["node"] == "op:cstScale@cpu"
        assert net.placement["node"]["declined"]["op:cstScale@gpu"] == (
            "backend 'nohandles' exposes no OpenCL handles (DeviceAPI.opencl_handles) for "
            "opencl:0; its CPU implementation runs in the worker process instead")
        x = RNG.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(net.run({"in0": x})["out"], 2 * x, rtol=1e-6)


@pytest.mark.opencl
def test_a_backend_the_worker_cannot_rebuild_leaves_the_op_on_its_cpu_implementation(
        op_libs, opencl_backend):
    opencl_backend()  # skips without a device

    from nnplug_backend_opencl import OpenCLBackend

    class Tuned(OpenCLBackend):  # a class of this function: the worker cannot import it
        id = "tuned"

    with make_runtime(Tuned(), NumpyBackend(), isolate_plugins=True) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(single_op("cstScale", [[3]], {"scale": 2.0}, domain="t"),
                      backends=["tuned", "numpy"])
        assert net.assignment["node"] == "op:cstScale@cpu"
        why = net.placement["node"]["declined"]["op:cstScale@gpu"]
        assert why.startswith(f"backend 'tuned' ({__name__}.test_a_backend_the_worker_cannot_"
                              f"rebuild_leaves_the_op_on_its_cpu_implementation.<locals>."
                              f"Tuned()), rebuilt in the worker process, failed: ")
        assert why.endswith("; its CPU implementation runs in the worker process instead")
        x = np.array([1, -2, 3], np.float32)
        np.testing.assert_allclose(net.run({"in0": x})["out"], 2 * x)

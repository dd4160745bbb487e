"""Fixtures for the cstSoftmax tests: runtimes that load nothing installed, a small numpy
backend for the standard ops around the custom op, and the OpenCL backend when present."""

import os

import numpy as np
import pytest

import nnplug
from nnplug import Backend, HostDeviceAPI, Module, Tensor


class ReferenceCpuBackend(Backend):
    """A few standard ops in numpy on the host (what a cpu backend would run)."""

    id = "npref"
    device_type = "cpu"
    KERNELS = {
        "ArgMax": lambda n, x: _argmax(x, n.attrs.get("axis", 0), n.attrs.get("keepdims", 1),
                                       n.attrs.get("select_last_index", 0)),
        "Relu": lambda n, x: np.maximum(x, 0),
        "Softmax": lambda n, x: _softmax(x, n.attrs.get("axis", -1)),
    }

    def __init__(self):
        self._api = HostDeviceAPI()

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        return node.domain in ("", "ai.onnx") and node.op_type in self.KERNELS

    def build(self, subgraph, target):
        def run(inputs):
            env = dict(zip(subgraph.inputs, (t.numpy() for t in inputs)))
            env.update(subgraph.constants)
            for n in subgraph.nodes:
                env[n.outputs[0]] = np.asarray(self.KERNELS[n.op_type](n, env[n.inputs[0]]))
            return [Tensor.from_numpy(env[o]) for o in subgraph.outputs]

        return Module({"run": run})


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _argmax(x, axis, keepdims, last):
    if last:
        r = x.shape[axis] - 1 - np.argmax(np.flip(x, axis), axis=axis)
    else:
        r = np.argmax(x, axis=axis)
    return (np.expand_dims(r, axis) if keepdims else r).astype(np.int64)


@pytest.fixture
def make_runtime():
    made = []

    def make(*backends, **options):
        opts = dict(entry_points=False, dynamic_backends_path="", custom_op_paths="")
        opts.update(options)
        rt = nnplug.Runtime(nnplug.CreationOptions(**opts))
        for b in backends:
            rt.register_backend(b)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.fixture
def library():
    import nnplug_ops_softmax

    path = nnplug_ops_softmax.library_path()
    if path is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("libnnplug_op_softmax.so is missing and NNPLUG_REQUIRE_NATIVE=1")
        pytest.skip("this install has no native library (built without a compiler)")
    return path


@pytest.fixture
def opencl_backend():
    """nnplug-backend-opencl with a device that hands custom ops its OpenCL handles; skipped
    otherwise, a failure under NNPLUG_REQUIRE_OPENCL=1."""
    required = os.environ.get("NNPLUG_REQUIRE_OPENCL") == "1"
    try:
        from nnplug_backend_opencl import OpenCLBackend

        backend = OpenCLBackend()
        api = backend.device_api()
        ok = hasattr(api, "native_handles") and api.get_attr(nnplug.device("opencl", 0), "exist")
        why = "the opencl backend exposes no OpenCL handles (native_handles) or sees no device"
    except Exception as e:  # noqa: BLE001
        ok, why = False, f"nnplug-backend-opencl unavailable: {type(e).__name__}: {e}"
    if not ok:
        if required:
            pytest.fail(f"NNPLUG_REQUIRE_OPENCL=1 but {why}")
        pytest.skip(why)
    return backend

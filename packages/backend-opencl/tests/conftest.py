"""Shared fixtures for the OpenCL backend's tests.

Without an OpenCL platform the tests skip, unless ``NNPLUG_REQUIRE_OPENCL=1`` (set in CI),
which makes a missing platform a failure: a CI machine that lost its driver must not pass
by skipping everything.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import nnplug
from nnplug_conformance.fixtures import ReferenceBackend

REQUIRE = os.environ.get("NNPLUG_REQUIRE_OPENCL", "") not in ("", "0")


def _devices():
    from nnplug_backend_opencl import devices

    return devices.visible_devices()


def pytest_collection_modifyitems(config, items):
    if _devices():
        return
    if REQUIRE:
        return  # the `cl_device` fixture fails each test with the reason
    skip = pytest.mark.skip(reason="no OpenCL platform/device found (install pocl-opencl-icd)")
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def cl_device():
    found = _devices()
    if not found:
        pytest.fail("NNPLUG_REQUIRE_OPENCL=1 but no OpenCL platform/device was found: install "
                    "pocl-opencl-icd and ocl-icd-libopencl1 (or a vendor driver)")
    return found[0]


@pytest.fixture(autouse=True)
def _private_kernel_cache(tmp_path_factory, monkeypatch):
    # one disk cache per test session, never the user's
    monkeypatch.setenv("NNPLUG_OPENCL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "clcache"))


class ReferenceCPUBackend(ReferenceBackend):
    """nnplug's reference host backend (``onnx.reference``) under the id these tests use. It
    stands in for nnplug-backend-cpu (plugins must not depend on each other) and runs every
    standard op, so it can take whatever the OpenCL backend is told to leave out."""

    id = "refcpu"


class LimitedOpenCL:
    """An OpenCL backend told to leave some op types to the next backend."""

    @staticmethod
    def make(exclude: set[str]):
        from nnplug_backend_opencl import OpenCLBackend

        class Limited(OpenCLBackend):
            def supports(self, node, graph):
                return node.op_type not in exclude and super().supports(node, graph)

        return Limited()


def new_runtime(*backends) -> nnplug.Runtime:
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    try:
        for b in backends:
            rt.register_backend(b)
    except BaseException:
        rt.close()  # never leave a half-registered Runtime holding backend leases
        raise
    return rt


@pytest.fixture
def rt():
    from nnplug_backend_opencl import OpenCLBackend

    r = new_runtime(OpenCLBackend)
    yield r
    r.close()


def zoo_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def zoo_names() -> list[str]:
    return sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(zoo_dir())
                  if f.startswith("light_") and f.endswith(".onnx"))


def zoo_case(name: str):
    """(model path, feeds, expected output) the way onnx's backend test builds them."""
    path = os.path.join(zoo_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    expected = onnx.numpy_helper.to_array(
        onnx.load_tensor(os.path.join(zoo_dir(), f"light_{name}_output_0.pb")))
    return path, feeds, expected

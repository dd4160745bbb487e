"""Fixtures and a reference backend for a plugin package's own tests (the conformance suite is
the rest of this package). A package's ``tests/conftest.py`` takes what it needs::

    import pytest

    from nnplug_conformance.fixtures import make_runtime, native_library, opencl_backend  # noqa: F401

    @pytest.fixture
    def library():
        import nnplug_ops_mine

        return native_library(nnplug_ops_mine.library_path)

and its tests run the standard ops around the op under test on :class:`ReferenceBackend`, so
they depend on no other plugin.
"""

from __future__ import annotations

import inspect
import os
import threading

import numpy as np
import pytest

from nnplug import (
    Backend,
    CreationOptions,
    HostDeviceAPI,
    Module,
    NativeLibraryMissingError,
    Runtime,
    Tensor,
    device,
)

REQUIRE_NATIVE_ENV = "NNPLUG_REQUIRE_NATIVE"
REQUIRE_OPENCL_ENV = "NNPLUG_REQUIRE_OPENCL"


@pytest.fixture
def make_runtime():
    """``make_runtime(*backends, **options)``: a Runtime that loads nothing installed
    (``CreationOptions.isolated(**options)``) with ``backends`` registered; closed after the
    test."""
    made = []

    def make(*backends, **options):
        rt = Runtime(CreationOptions.isolated(**options))
        for b in backends:
            rt.register_backend(b)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def native_library(library_path) -> str:
    """``library_path()``, the package's native library; the test is skipped when the install
    has none (built without a compiler), and fails instead under NNPLUG_REQUIRE_NATIVE=1."""
    try:
        return library_path()
    except NativeLibraryMissingError as e:
        if os.environ.get(REQUIRE_NATIVE_ENV) == "1":
            pytest.fail(f"{REQUIRE_NATIVE_ENV}=1 but {e}")
        pytest.skip(f"this install has no native library: {e.path}")


@pytest.fixture
def opencl_backend():
    """An installed backend of device type opencl whose device API hands custom ops its OpenCL
    handles (``DeviceAPI.opencl_handles``) and sees a device; skipped otherwise, a failure under
    NNPLUG_REQUIRE_OPENCL=1."""
    backend, why = _opencl_backend()
    if backend is None:
        if os.environ.get(REQUIRE_OPENCL_ENV) == "1":
            pytest.fail(f"{REQUIRE_OPENCL_ENV}=1 but {why}")
        pytest.skip(why)
    return backend


def _opencl_backend():
    """(backend, None), or (None, why there is none)."""
    from nnplug import discovery
    from nnplug.plugin_import import load_entry_point

    why = "no installed backend (nnplug.backends entry point) has device type opencl"
    for ep in discovery.entry_points(discovery.BACKENDS_GROUP):
        try:
            cls = load_entry_point(ep)
            if not (inspect.isclass(cls) and issubclass(cls, Backend)
                    and cls.device_type == "opencl"):
                continue
            backend = cls()
            api = backend.device_api()
            dev = device("opencl", 0)
            if api.get_attr(dev, "exist") and api.opencl_handles(dev) is not None:
                return backend, None
            why = (f"the opencl backend {ep.value} gives no OpenCL handles (opencl_handles) "
                   f"or sees no device")
        except Exception as e:  # noqa: BLE001 - any failure means: no usable backend
            why = f"the opencl backend {ep.value} is unavailable: {type(e).__name__}: {e}"
    return None, why


def run_from_threads(run, inputs: list, threads: int, rounds: int) -> list[tuple[int, object]]:
    """``run(inputs[k])`` from ``threads`` threads at once, ``rounds`` times each (thread t's
    round r takes input k = (t + r) % len(inputs)): the ``(k, result)`` pairs of every call,
    for comparing with one run per input. The first exception a thread raised is raised here,
    after every thread ended."""
    results, errors = [], []

    def work(t):
        try:
            for r in range(rounds):
                k = (t + r) % len(inputs)
                results.append((k, run(inputs[k])))
        except Exception as e:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(e)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return results


def for_onnxruntime(model):
    """A copy labelled IR 11 at most: onnxruntime builds for older Pythons (1.23 on 3.10) read
    no newer IR, and plugin tests' models use nothing newer."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 11)
    return m


class ReferenceBackend(Backend):
    """A host backend that runs standard ONNX ops with ``onnx.reference`` (numpy kernels):
    what a plugin's tests put around the op or backend under test instead of another plugin.

    ``only``: the op types it claims (every op of the default domain when None)."""

    id = "reference"
    device_type = "cpu"

    def __init__(self, only: set[str] | None = None):
        self.only = only
        self._api = HostDeviceAPI()

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        return node.domain in ("", "ai.onnx") and (self.only is None or node.op_type in self.only)

    def build(self, subgraph, target):
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(subgraph.to_model())
        inputs, outputs = list(subgraph.inputs), list(subgraph.outputs)

        def run(tensors):
            feeds = {n: t.numpy() for n, t in zip(inputs, tensors)}
            # np.array, not np.ascontiguousarray, which makes a 0-d result 1-d
            return [Tensor.from_numpy(np.array(r, order="C")) for r in ref.run(outputs, feeds)]

        return Module({"run": run})


__all__ = ["ReferenceBackend", "for_onnxruntime", "make_runtime", "native_library",
           "opencl_backend", "run_from_threads"]

"""Fixtures for the ArgMax override tests: runtimes that load nothing installed, the op library,
and the OpenCL backend when present."""

import os

import pytest

import nnplug


@pytest.fixture
def make_runtime():
    made = []

    def make(*backends, **options):
        rt = nnplug.Runtime(nnplug.CreationOptions.isolated(**options))
        for b in backends:
            rt.register_backend(b)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


@pytest.fixture
def library():
    import nnplug_ops_argmax

    path = nnplug_ops_argmax.library_path()
    if path is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("libnnplug_op_argmax.so is missing and NNPLUG_REQUIRE_NATIVE=1")
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
        dev = nnplug.device("opencl", 0)
        ok = bool(api.get_attr(dev, "exist")) and api.opencl_handles(dev) is not None
        why = "the opencl backend sees no device or gives no OpenCL handles (opencl_handles)"
    except Exception as e:  # noqa: BLE001
        ok, why = False, f"nnplug-backend-opencl unavailable: {type(e).__name__}: {e}"
    if not ok:
        if required:
            pytest.fail(f"NNPLUG_REQUIRE_OPENCL=1 but {why}")
        pytest.skip(why)
    return backend

"""Compiles the test op library (testops.c) and its broken variants with the system cc; the
opencl backend for the ops' GPU target."""

import ctypes
import os
import shlex
import shutil
import subprocess

import pytest

import nnplug

HERE = os.path.dirname(__file__)
VARIANTS = {
    "good": [],
    "bad_major": ["-DBAD_MAJOR"],
    "bad_minor": ["-DBAD_MINOR"],
    "bad_native": ["-DBAD_NATIVE"],
    "bad_no_compute": ["-DBAD_NO_COMPUTE"],
    "no_entry": ["-DNO_ENTRY"],
    "bad_shape": ["-DBAD_SHAPE"],
    "crash": ["-DCRASH_OPS"],
    "ctor_abort": ["-DCTOR_ABORT"],
    "gpu_only": ["-DGPU_ONLY"],
}


@pytest.fixture(scope="session")
def op_libs(tmp_path_factory):
    """variant -> path of a compiled libnnplug_op_<variant>.so (each in its own folder)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("no C compiler (cc) and NNPLUG_REQUIRE_NATIVE=1")
        pytest.skip("no C compiler (cc) to build the test op library")
    root = tmp_path_factory.mktemp("oplibs")
    out = {}
    for name, flags in VARIANTS.items():
        d = root / name
        d.mkdir()
        path = d / f"libnnplug_op_{name}.so"
        subprocess.run([cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
                        "-Wall", "-Wno-unused", f"-I{nnplug.get_include()}", *flags,
                        os.path.join(HERE, "testops.c"), "-o", str(path),
                        # sanitizer builds (nox -s sanitize) instrument the test ops too
                        *shlex.split(os.environ.get("NNPLUG_CFLAGS", "")),
                        *shlex.split(os.environ.get("NNPLUG_LDFLAGS", ""))], check=True)
        out[name] = str(path)
    return out


class Events:
    """The callback log kept by testops.c (same dlopen handle as the host's)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.testops_events.restype = ctypes.c_char_p

    def reset(self):
        self.lib.testops_reset()

    def __call__(self):
        return self.lib.testops_events().decode().split()


@pytest.fixture
def events(op_libs):
    import gc

    gc.collect()  # networks of earlier tests destroy their nodes now, not in this test's log
    ev = Events(op_libs["good"])
    ev.reset()
    return ev


def _opencl_backend():
    """The opencl backend when installed, with a device and the OpenCL handles custom ops
    need; skipped otherwise (a failure under NNPLUG_REQUIRE_OPENCL=1)."""
    required = os.environ.get("NNPLUG_REQUIRE_OPENCL") == "1"
    try:
        from nnplug_backend_opencl import OpenCLBackend
    except ImportError:
        # The core does not depend on the plugin; the op packages' tests, which install it,
        # cover the GPU target under NNPLUG_REQUIRE_OPENCL=1.
        pytest.skip("nnplug-backend-opencl is not installed")
    try:
        backend = OpenCLBackend()
        api = backend.device_api()
        dev = nnplug.device("opencl", 0)
        ok = bool(api.get_attr(dev, "exist")) and api.opencl_handles(dev) is not None
        why = "the opencl backend sees no device or gives no OpenCL handles"
    except Exception as e:  # noqa: BLE001
        ok, why = False, f"nnplug-backend-opencl unavailable: {type(e).__name__}: {e}"
    if not ok:
        if required:
            pytest.fail(f"NNPLUG_REQUIRE_OPENCL=1 but {why}")
        pytest.skip(why)
    return backend


@pytest.fixture
def opencl_backend():
    """Makes a new opencl backend (see _opencl_backend) per call."""
    return _opencl_backend

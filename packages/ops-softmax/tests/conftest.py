"""Fixtures for the cstSoftmax tests: runtimes that load nothing installed, the op library,
and the OpenCL backend when present (nnplug_conformance.fixtures)."""

import pytest

from nnplug_conformance.fixtures import make_runtime, native_library, opencl_backend  # noqa: F401


@pytest.fixture
def library():
    import nnplug_ops_softmax

    return native_library(nnplug_ops_softmax.library_path)

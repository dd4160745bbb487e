"""Fixtures for the ArgMax override tests: runtimes that load nothing installed, the op
library, and the OpenCL backend when present (nnplug_conformance.fixtures)."""

import pytest

from nnplug_conformance.fixtures import make_runtime, native_library, opencl_backend  # noqa: F401


@pytest.fixture
def library():
    import nnplug_ops_argmax

    return native_library(nnplug_ops_argmax.library_path)

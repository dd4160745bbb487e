"""nnplug-backend-opencl: an OpenCL backend for nnplug, on pyopencl.

Registered under the ``nnplug.backends`` entry point as ``opencl``.
"""

from ._version import __version__
from .backend import OpenCLBackend


def __getattr__(name):  # pyopencl is imported when the device is first used, not at Runtime()
    if name == "OpenCLDeviceAPI":
        from .device_api import OpenCLDeviceAPI

        return OpenCLDeviceAPI
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OpenCLBackend", "OpenCLDeviceAPI", "__version__"]

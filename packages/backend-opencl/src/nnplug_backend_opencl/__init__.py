"""nnplug-backend-opencl: an OpenCL backend for nnplug, on pyopencl.

Registered under the ``nnplug.backends`` entry point as ``opencl``.
"""

from ._version import __version__
from .backend import OpenCLBackend
from .device_api import OpenCLDeviceAPI

__all__ = ["OpenCLBackend", "OpenCLDeviceAPI", "__version__"]

"""The OpenCL objects of a device as raw handles, for native GPU custom ops
(``nnplug/custom_op.h``): what :meth:`OpenCLDeviceAPI.opencl_handles` returns."""

from __future__ import annotations

import ctypes
import threading

import pyopencl as cl

from nnplug.device import Device
from nnplug.device_api import OpenCLHandles, workspace_data

from . import devices

_library = None
_library_lock = threading.Lock()


def _opencl_library() -> ctypes.CDLL:
    """The OpenCL library pyopencl calls (a pyopencl wheel bundles its own ICD loader): a
    symbol looked up through pyopencl's extension module resolves in its dependencies."""
    global _library
    with _library_lock:
        if _library is None:
            from pyopencl import _cl

            _library = ctypes.CDLL(_cl.__file__)
        return _library


class DeviceHandles(OpenCLHandles):
    def __init__(self, api, dev: Device):
        st = devices.state(dev.index)
        self._api, self._dev, self._st = api, dev, st
        self.platform = st.device.platform.int_ptr
        self.device = st.device.int_ptr
        self.context = st.context.int_ptr
        self._kernels: dict[int, cl.Kernel] = {}
        self._lock = threading.Lock()

    def _queue(self) -> cl.CommandQueue:
        return self._api.current_stream(self._dev) or self._st.queue

    def queue(self) -> int:
        return self._queue().int_ptr

    def buffer(self, handle) -> int:
        return workspace_data(handle).int_ptr

    def function(self, name: str) -> int:
        return ctypes.cast(getattr(_opencl_library(), name), ctypes.c_void_p).value

    def build_program(self, source: bytes, options: str) -> cl.Program:
        prg = cl.Program(self._st.context, source.decode("utf-8", "replace"))
        return prg.build(options, devices=[self._st.device])

    def create_kernel(self, program: cl.Program, name: str) -> int:
        kernel = cl.Kernel(program, name)
        with self._lock:
            self._kernels[kernel.int_ptr] = kernel
        return kernel.int_ptr

    def release_kernel(self, kernel: int) -> None:
        with self._lock:
            self._kernels.pop(kernel, None)

    def finish(self) -> None:
        self._queue().finish()

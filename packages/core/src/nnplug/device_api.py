"""The device API every backend exposes (TVM's DeviceAPI semantics).

Handles are opaque to the core: whatever ``alloc_data_space`` returns is what the
other calls get back. Host memory on the CPU side of a copy is a writable numpy
array (``uint8`` or any dtype; offsets and sizes are in bytes).
"""

from __future__ import annotations

import enum
import threading
from collections import defaultdict

import numpy as np

from .device import Device
from .errors import InvalidArgumentError


class AttrKind(str, enum.Enum):
    """Device attribute kinds, after TVM's ``DeviceAttrKind``."""

    EXIST = "exist"
    MAX_THREADS_PER_BLOCK = "max_threads_per_block"
    WARP_SIZE = "warp_size"
    MAX_SHARED_MEMORY_PER_BLOCK = "max_shared_memory_per_block"
    COMPUTE_VERSION = "compute_version"
    DEVICE_NAME = "device_name"
    MAX_CLOCK_RATE = "max_clock_rate"
    MULTI_PROCESSOR_COUNT = "multi_processor_count"
    MAX_THREAD_DIMENSIONS = "max_thread_dimensions"
    API_VERSION = "api_version"
    DRIVER_VERSION = "driver_version"
    L2_CACHE_SIZE_BYTES = "l2_cache_size_bytes"
    TOTAL_GLOBAL_MEMORY = "total_global_memory"
    AVAILABLE_GLOBAL_MEMORY = "available_global_memory"
    VENDOR = "vendor"
    """The device's maker, e.g. "GenuineIntel", "NVIDIA Corporation" (backend ABI 1.5)."""
    DEVICE_CLASS = "device_class"
    """What kind of hardware it is: "cpu", "gpu", "npu" or "accelerator" (backend ABI 1.5)."""


def attr_kind(kind: str | AttrKind) -> AttrKind:
    try:
        return AttrKind(kind)
    except ValueError:
        raise InvalidArgumentError(
            f"unknown device attribute kind {kind!r}; kinds: {', '.join(k.value for k in AttrKind)}"
        ) from None


class DeviceAPI:
    """Base class. Subclasses implement the data-space calls and ``get_attr``;
    workspaces default to a reusable pool over the data space, streams to "one queue".
    All methods must be thread-safe."""

    def __init__(self):
        self._pool: dict[tuple[Device, int], list] = defaultdict(list)
        self._pool_lock = threading.Lock()

    # --- attributes -------------------------------------------------------------------
    def get_attr(self, dev: Device, kind: str | AttrKind):
        """The attribute's value, or ``None`` where the device cannot tell."""
        raise NotImplementedError

    def set_device(self, dev: Device) -> None:
        """Make ``dev`` current for the calling thread (no-op where meaningless)."""

    # --- memory -----------------------------------------------------------------------
    def alloc_data_space(self, dev: Device, nbytes: int, alignment: int = 64, dtype=None):
        raise NotImplementedError

    def free_data_space(self, dev: Device, handle) -> None:
        raise NotImplementedError

    def alloc_workspace(self, dev: Device, nbytes: int, dtype=None):
        """Scratch memory from a per-device pool; sizes round up to 4 KiB pages."""
        size = max(4096, (int(nbytes) + 4095) // 4096 * 4096)
        with self._pool_lock:
            free = self._pool[(dev, size)]
            if free:
                return free.pop()
        return _Workspace(self.alloc_data_space(dev, size), size)

    def free_workspace(self, dev: Device, handle) -> None:
        if not isinstance(handle, _Workspace):
            raise InvalidArgumentError("free_workspace: the handle did not come from alloc_workspace")
        with self._pool_lock:
            self._pool[(dev, handle.size)].append(handle)

    def release_workspaces(self, dev: Device | None = None) -> None:
        """Give every pooled workspace back to the data space."""
        with self._pool_lock:
            keys = [k for k in self._pool if dev is None or k[0] == dev]
            items = [(k[0], h) for k in keys for h in self._pool.pop(k)]
        for d, h in items:
            self.free_data_space(d, h.handle)

    # --- copies -----------------------------------------------------------------------
    def copy_data_from_to(self, src, src_offset: int, dst, dst_offset: int, nbytes: int,
                          dev_from: Device, dev_to: Device, stream=None) -> None:
        """Copy ``nbytes``: host->device, device->host or device->device."""
        raise NotImplementedError

    # --- streams ----------------------------------------------------------------------
    def create_stream(self, dev: Device):
        """A new stream, or ``None`` where the device has a single queue."""
        return None

    def free_stream(self, dev: Device, stream) -> None:
        pass

    def set_stream(self, dev: Device, stream) -> None:
        pass

    def stream_sync(self, dev: Device, stream) -> None:
        pass

    def sync_stream_from_to(self, dev: Device, event_src, event_dst) -> None:
        """Make work queued on ``event_dst`` after this call wait for ``event_src``."""

    # --- native handles ---------------------------------------------------------------
    def opencl_handles(self, dev: Device) -> OpenCLHandles | None:
        """The OpenCL objects of ``dev``, for native GPU custom ops (``nnplug/custom_op.h``);
        None (the default) where ``dev`` is not an OpenCL device. A backend whose device is
        one returns its :class:`OpenCLHandles`, so that ops' OpenCL kernels run on its
        context and queue, on its buffers."""
        return None


class OpenCLHandles:
    """What a native GPU custom op needs of an OpenCL device, from the backend that owns it
    (:meth:`DeviceAPI.opencl_handles`). Handles are the ``cl_*`` pointers as integers. The
    core makes no OpenCL call of its own: it builds, runs and waits through these methods.
    Methods may raise any exception; the core names the op and node around its message."""

    platform: int = 0
    """The ``cl_platform_id`` (0: not known)."""
    device: int = 0
    """The ``cl_device_id``."""
    context: int = 0
    """The ``cl_context`` buffers and programs belong to; programs are built once per context."""

    def queue(self) -> int:
        """The ``cl_command_queue`` the calling thread's work goes to (its current stream,
        else the device's default queue): the op enqueues its kernel there."""
        raise NotImplementedError

    def buffer(self, handle) -> int:
        """The ``cl_mem`` behind a data-space (or workspace) handle of this device API."""
        raise NotImplementedError

    def function(self, name: str) -> int:
        """The address of the OpenCL function ``name`` (``"clSetKernelArg"``, ...) in the
        OpenCL library the backend calls: the op calls it through its context's ``cl``
        table."""
        raise NotImplementedError

    def build_program(self, source: bytes, options: str):
        """A program built from OpenCL C ``source`` with compiler ``options`` for this device:
        any object, held by the core while it uses it (dropping it releases it). A failed
        build raises with the compiler's log in its message."""
        raise NotImplementedError

    def create_kernel(self, program, name: str) -> int:
        """A new ``cl_kernel`` for the ``__kernel`` ``name`` of ``program``, alive until
        :meth:`release_kernel`."""
        raise NotImplementedError

    def release_kernel(self, kernel: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Wait until the work on the calling thread's queue (:meth:`queue`) is done."""
        raise NotImplementedError


class _Workspace:
    __slots__ = ("handle", "size")

    def __init__(self, handle, size):
        self.handle = handle
        self.size = size


def workspace_data(handle):
    """The data-space handle inside a workspace handle."""
    return handle.handle if isinstance(handle, _Workspace) else handle


def host_view(buf) -> np.ndarray:
    """A flat writable ``uint8`` view of a host array (no copy)."""
    arr = np.asarray(buf)
    if not arr.flags.c_contiguous:
        raise InvalidArgumentError("host buffers must be C-contiguous")
    return arr.reshape(-1).view(np.uint8)


class HostDeviceAPI(DeviceAPI):
    """Device API for host memory, used by backends whose device is the CPU.

    Handles are ``uint8`` numpy arrays, aligned to 64 bytes.
    """

    def get_attr(self, dev: Device, kind):
        import os

        kind = attr_kind(kind)
        if kind is AttrKind.EXIST:
            return dev.index == 0
        if dev.index != 0:
            return None
        if kind is AttrKind.MULTI_PROCESSOR_COUNT:
            return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if kind is AttrKind.DEVICE_NAME:
            return _cpu_name()
        if kind is AttrKind.TOTAL_GLOBAL_MEMORY:
            return _meminfo("MemTotal")
        if kind is AttrKind.AVAILABLE_GLOBAL_MEMORY:
            return _meminfo("MemAvailable")
        if kind is AttrKind.VENDOR:
            return cpu_vendor()
        if kind is AttrKind.DEVICE_CLASS:
            return "cpu"
        return None

    def alloc_data_space(self, dev, nbytes, alignment=64, dtype=None):
        raw = np.empty(int(nbytes) + alignment, dtype=np.uint8)
        start = (-raw.ctypes.data) % alignment
        return raw[start:start + int(nbytes)]

    def free_data_space(self, dev, handle):
        pass  # numpy owns the memory; dropping the last reference frees it

    def copy_data_from_to(self, src, src_offset, dst, dst_offset, nbytes, dev_from, dev_to,
                          stream=None):
        s = host_view(workspace_data(src))
        d = host_view(workspace_data(dst))
        if src_offset + nbytes > s.size or dst_offset + nbytes > d.size:
            raise InvalidArgumentError(
                f"copy of {nbytes} bytes out of bounds (src {s.size} bytes at {src_offset}, "
                f"dst {d.size} bytes at {dst_offset})"
            )
        d[dst_offset:dst_offset + nbytes] = s[src_offset:src_offset + nbytes]


def cpu_vendor() -> str | None:
    """The host CPU's vendor as the kernel reports it (``vendor_id``, e.g. "GenuineIntel")."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("vendor_id", "CPU implementer")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None

"""nnplug's DeviceAPI over OpenCL: buffers, copies, command queues as streams.

Data-space handles are ``pyopencl.Buffer`` objects. Streams are command queues; the
``None`` stream is the device's default queue. Copies on the ``None`` stream, and every copy
touching host memory, have finished when the call returns; copies on an explicit stream are
only enqueued (order them with ``stream_sync`` / ``sync_stream_from_to``).
"""

from __future__ import annotations

import re
import threading

import pyopencl as cl

from nnplug.device import Device, device_type_of
from nnplug.device_api import AttrKind, DeviceAPI, attr_kind, host_view, workspace_data

from . import devices
from .native_handles import DeviceHandles

OPENCL = device_type_of("opencl")


def _is_host(dev: Device) -> bool:
    return dev.device_type != OPENCL


class OpenCLDeviceAPI(DeviceAPI):
    def __init__(self):
        super().__init__()
        self._current = threading.local()

    # --- attributes -------------------------------------------------------------------
    def get_attr(self, dev: Device, kind):
        kind = attr_kind(kind)
        found = devices.visible_devices()
        if kind is AttrKind.EXIST:
            return 0 <= dev.index < len(found)
        if not 0 <= dev.index < len(found):
            return None
        d = found[dev.index]
        if kind is AttrKind.MAX_THREADS_PER_BLOCK:
            return int(d.max_work_group_size)
        if kind is AttrKind.MAX_SHARED_MEMORY_PER_BLOCK:
            return int(d.local_mem_size)
        if kind is AttrKind.COMPUTE_VERSION:
            m = re.search(r"OpenCL C (\d+\.\d+)", d.opencl_c_version)
            return m.group(1) if m else None
        if kind is AttrKind.DEVICE_NAME:
            return d.name.strip()
        if kind is AttrKind.MAX_CLOCK_RATE:
            return int(d.max_clock_frequency)  # MHz, as OpenCL reports it
        if kind is AttrKind.MULTI_PROCESSOR_COUNT:
            return int(d.max_compute_units)
        if kind is AttrKind.MAX_THREAD_DIMENSIONS:
            return [int(s) for s in d.max_work_item_sizes]
        if kind is AttrKind.API_VERSION:
            m = re.search(r"OpenCL (\d+\.\d+)", d.version)
            return m.group(1) if m else None
        if kind is AttrKind.DRIVER_VERSION:
            return d.driver_version.strip()
        if kind is AttrKind.L2_CACHE_SIZE_BYTES:
            return int(d.global_mem_cache_size) or None
        if kind is AttrKind.TOTAL_GLOBAL_MEMORY:
            return int(d.global_mem_size)
        if kind is AttrKind.VENDOR:
            return d.vendor.strip()
        if kind is AttrKind.DEVICE_CLASS:
            return _device_class(int(d.type))
        # WARP_SIZE and AVAILABLE_GLOBAL_MEMORY: core OpenCL has no query for them.
        return None

    def set_device(self, dev: Device) -> None:
        devices.state(dev.index)  # validates the index and creates the context up front

    # --- memory -----------------------------------------------------------------------
    def alloc_data_space(self, dev: Device, nbytes: int, alignment: int = 64, dtype=None):
        st = devices.state(dev.index)
        return cl.Buffer(st.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 1))

    def free_data_space(self, dev: Device, handle) -> None:
        workspace_data(handle).release()

    # --- copies -----------------------------------------------------------------------
    def copy_data_from_to(self, src, src_offset, dst, dst_offset, nbytes, dev_from, dev_to,
                          stream=None):
        src, dst = workspace_data(src), workspace_data(dst)
        nbytes, src_offset, dst_offset = int(nbytes), int(src_offset), int(dst_offset)
        if nbytes == 0:
            return
        if _is_host(dev_from) and _is_host(dev_to):
            raise ValueError("copy_data_from_to: neither side is an OpenCL device")
        dev = dev_to if _is_host(dev_from) else dev_from
        queue = stream if stream is not None else devices.state(dev.index).queue
        if _is_host(dev_from):
            host = host_view(src)
            _check_bounds("source", host.size, src_offset, nbytes)
            _check_bounds("destination", dst.size, dst_offset, nbytes)
            cl.enqueue_copy(queue, dst, host[src_offset:src_offset + nbytes],
                            dst_offset=dst_offset, is_blocking=True)
        elif _is_host(dev_to):
            host = host_view(dst)
            _check_bounds("source", src.size, src_offset, nbytes)
            _check_bounds("destination", host.size, dst_offset, nbytes)
            cl.enqueue_copy(queue, host[dst_offset:dst_offset + nbytes], src,
                            src_offset=src_offset, is_blocking=True)
        else:
            _check_bounds("source", src.size, src_offset, nbytes)
            _check_bounds("destination", dst.size, dst_offset, nbytes)
            evt = cl.enqueue_copy(queue, dst, src, byte_count=nbytes, src_offset=src_offset,
                                  dst_offset=dst_offset)
            if stream is None:
                evt.wait()

    # --- streams ----------------------------------------------------------------------
    def create_stream(self, dev: Device):
        st = devices.state(dev.index)
        return cl.CommandQueue(st.context, st.device)

    def free_stream(self, dev: Device, stream) -> None:
        if stream is not None:
            stream.finish()

    def set_stream(self, dev: Device, stream) -> None:
        streams = getattr(self._current, "streams", None)
        if streams is None:
            streams = self._current.streams = {}
        streams[dev] = stream

    def current_stream(self, dev: Device):
        """The stream :meth:`set_stream` made current for this thread (None: the default)."""
        return getattr(self._current, "streams", {}).get(dev)

    # --- raw handles, for native GPU custom ops (nnplug/custom_op.h) ----------------------
    def opencl_handles(self, dev: Device) -> DeviceHandles:
        """The OpenCL objects of ``dev`` as integer handles (``context`` etc.); the queue is
        the calling thread's current stream, or the device's default queue."""
        return DeviceHandles(self, dev)

    def stream_sync(self, dev: Device, stream) -> None:
        (stream if stream is not None else devices.state(dev.index).queue).finish()

    def sync_stream_from_to(self, dev: Device, event_src, event_dst) -> None:
        st = devices.state(dev.index)
        src = event_src if event_src is not None else st.queue
        dst = event_dst if event_dst is not None else st.queue
        if src is dst:
            return  # an in-order queue already orders its own work
        marker = cl.enqueue_marker(src)
        src.flush()  # the marker must reach the device before dst can wait on it
        cl.enqueue_barrier(dst, wait_for=[marker])


def _check_bounds(side: str, size: int, offset: int, nbytes: int) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > size:
        raise ValueError(
            f"copy of {nbytes} bytes at offset {offset} is out of bounds of the {side} "
            f"({size} bytes)"
        )


def _device_class(cl_type: int) -> str:
    """CL_DEVICE_TYPE_* bits as nnplug's device classes (PoCL is a "cpu")."""
    if cl_type & 4:  # CL_DEVICE_TYPE_GPU
        return "gpu"
    if cl_type & 2:  # CL_DEVICE_TYPE_CPU
        return "cpu"
    return "accelerator"  # CL_DEVICE_TYPE_ACCELERATOR, CUSTOM

"""The OpenCL side of a native GPU custom op: what a node's context gets from the backend.

The core makes no OpenCL call of its own. The backend whose device runs the op hands over
its OpenCL objects through the declared ``DeviceAPI.opencl_handles``
(:class:`nnplug.device_api.OpenCLHandles`): the context, device and current queue as raw
handles, the ``cl_mem`` behind each buffer, the addresses of the OpenCL functions an op
calls (the context's ``cl`` table: the functions of the library the backend itself calls),
and the program and kernels it builds for the op.
"""

from __future__ import annotations

import ctypes as C

from ..device import Device
from ..errors import CustomOpError
from .op_abi import CL_FUNCTIONS, ClApi


class OpenCLBinding:
    """The OpenCL objects of one node's context: its kernel, and the backend's handles."""

    def __init__(self, state, backend):
        self.state = state
        self.api = backend.device_api()
        self.device = backend_device(backend)
        self.handles = self.api.opencl_handles(self.device)
        self.kernel = None

    @property
    def available(self) -> bool:
        return self.handles is not None

    def attach(self) -> None:
        """Fill the context's cl_* members and create the node's kernel."""
        st, h = self.state, self.handles
        what = f"op {st.op.op_type!r} node {st.node.name!r}"
        try:
            table = ClApi(C.sizeof(ClApi), *[h.function(n) for n in CL_FUNCTIONS])
        except Exception as e:  # noqa: BLE001 - the backend's error, named
            raise CustomOpError(f"{what}: the backend gave no address for an OpenCL function "
                                f"of the op's cl table: {e}") from None
        program = st.impl.program(h)
        name = st.impl.cl_kernel_name
        try:
            self.kernel = h.create_kernel(program, name)
        except Exception as e:  # noqa: BLE001 - the backend's error, named
            raise CustomOpError(f"{what}: creating kernel {name!r} failed ({e}); is "
                                f"cl_kernel_name the name of a __kernel in its source?") from None
        ctx = st.ctx
        ctx.cl_platform = h.platform or None
        ctx.cl_device = h.device
        ctx.cl_context = h.context
        ctx.cl_command_queue = h.queue()
        ctx.cl_kernel = self.kernel
        ctx.cl = C.pointer(table)

    def buffer(self, handle) -> int:
        """The cl_mem of a data-space handle of the backend."""
        return self.handles.buffer(handle)

    def refresh_queue(self) -> None:
        """The queue the backend uses for this thread (its current stream)."""
        self.state.ctx.cl_command_queue = self.handles.queue()

    def finish(self) -> None:
        """Wait for the work the op enqueued on the calling thread's queue."""
        try:
            self.handles.finish()
        except Exception as e:  # noqa: BLE001 - the backend's error, named
            raise self.state.error("compute", f"waiting for its queue failed: {e}") from None

    def release(self) -> None:
        kernel, self.kernel = self.kernel, None
        if kernel:
            self.state.ctx.cl_kernel = None
            self.handles.release_kernel(kernel)


def backend_device(backend) -> Device:
    from ..target import Target

    try:
        return Target(backend.target_kind_name).device
    except Exception:  # noqa: BLE001 - a kind that cannot be built alone: its first device
        return Device(backend.device_type_number, 0)

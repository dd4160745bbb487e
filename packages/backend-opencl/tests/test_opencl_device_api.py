"""The OpenCL DeviceAPI: attributes, buffers, copies with offsets, workspaces, streams."""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pyopencl as cl
import pytest

from nnplug import device
from nnplug.device_api import AttrKind, OpenCLHandles
from nnplug_backend_opencl import OpenCLDeviceAPI, devices

DEV = device("opencl", 0)
CPU = device("cpu", 0)


@pytest.fixture
def api():
    return OpenCLDeviceAPI()


def test_attributes_come_from_the_device(api, cl_device):
    assert api.get_attr(DEV, "exist") is True
    assert api.get_attr(device("opencl", 99), AttrKind.EXIST) is False
    assert api.get_attr(device("opencl", 99), AttrKind.DEVICE_NAME) is None
    assert api.get_attr(DEV, AttrKind.DEVICE_NAME) == cl_device.name.strip()
    assert api.get_attr(DEV, AttrKind.MULTI_PROCESSOR_COUNT) == cl_device.max_compute_units
    assert api.get_attr(DEV, AttrKind.MAX_THREADS_PER_BLOCK) == cl_device.max_work_group_size
    assert api.get_attr(DEV, AttrKind.TOTAL_GLOBAL_MEMORY) == cl_device.global_mem_size
    assert api.get_attr(DEV, AttrKind.MAX_CLOCK_RATE) == cl_device.max_clock_frequency
    assert api.get_attr(DEV, AttrKind.DRIVER_VERSION) == cl_device.driver_version.strip()
    assert api.get_attr(DEV, AttrKind.MAX_THREAD_DIMENSIONS) == list(cl_device.max_work_item_sizes)
    assert api.get_attr(DEV, AttrKind.API_VERSION) in cl_device.version
    # what core OpenCL cannot tell is None, not a guess
    assert api.get_attr(DEV, AttrKind.WARP_SIZE) is None
    assert api.get_attr(DEV, AttrKind.AVAILABLE_GLOBAL_MEMORY) is None
    with pytest.raises(ValueError, match="unknown device attribute"):
        api.get_attr(DEV, "bogus")


def test_copies_host_device_host_with_offsets(api):
    src = np.arange(64, dtype=np.uint8)
    buf = api.alloc_data_space(DEV, 64)
    assert isinstance(buf, cl.Buffer)
    api.copy_data_from_to(src, 0, buf, 0, 64, CPU, DEV)
    other = api.alloc_data_space(DEV, 64)
    api.copy_data_from_to(np.zeros(64, np.uint8), 0, other, 0, 64, CPU, DEV)
    api.copy_data_from_to(buf, 8, other, 32, 16, DEV, DEV)  # device -> device with offsets
    out = np.full(40, 255, np.uint8)
    api.copy_data_from_to(other, 24, out, 4, 32, DEV, CPU)
    want = np.full(40, 255, np.uint8)
    want[4:36] = np.concatenate([np.zeros(8, np.uint8), np.arange(8, 24, dtype=np.uint8),
                                 np.zeros(8, np.uint8)])
    np.testing.assert_array_equal(out, want)
    api.free_data_space(DEV, buf)
    api.free_data_space(DEV, other)


def test_out_of_bounds_copies_are_refused(api):
    buf = api.alloc_data_space(DEV, 16)
    with pytest.raises(ValueError, match="out of bounds of the destination"):
        api.copy_data_from_to(np.zeros(32, np.uint8), 0, buf, 0, 32, CPU, DEV)
    with pytest.raises(ValueError, match="out of bounds of the source"):
        api.copy_data_from_to(buf, 8, np.zeros(32, np.uint8), 0, 16, DEV, CPU)
    with pytest.raises(ValueError, match="out of bounds"):
        api.copy_data_from_to(buf, 0, buf, 12, 8, DEV, DEV)


def test_workspaces_are_pooled_and_usable(api):
    ws = api.alloc_workspace(DEV, 100)
    data = np.arange(25, dtype=np.float32)
    api.copy_data_from_to(data, 0, ws, 0, 100, CPU, DEV)
    back = np.empty_like(data)
    api.copy_data_from_to(ws, 0, back, 0, 100, DEV, CPU)
    np.testing.assert_array_equal(back, data)
    api.free_workspace(DEV, ws)
    assert api.alloc_workspace(DEV, 200) is ws  # same 4 KiB page class: reused
    api.free_workspace(DEV, ws)
    api.release_workspaces(DEV)


def test_tensor_round_trip_through_the_device(api):
    from nnplug import Tensor

    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    t = Tensor.from_numpy(x).to(DEV, api)
    assert t.device == DEV and isinstance(t.handle, cl.Buffer)
    np.testing.assert_array_equal(t.numpy(), x)


def test_sync_stream_from_to_orders_work_across_queues(api):
    """Queue A is held shut by a user event, then writes a buffer; queue B, made to wait for A,
    copies that buffer. B must not run before A's write: the copy sees the written data."""
    st = devices.state(0)
    a, b = api.create_stream(DEV), api.create_stream(DEV)
    assert a is not b
    n = 1 << 16
    src = api.alloc_data_space(DEV, n * 4)
    dst = api.alloc_data_space(DEV, n * 4)
    api.copy_data_from_to(np.zeros(n, np.float32), 0, src, 0, n * 4, CPU, DEV)
    api.copy_data_from_to(np.zeros(n, np.float32), 0, dst, 0, n * 4, CPU, DEV)

    gate = cl.UserEvent(st.context)
    cl.enqueue_barrier(a, wait_for=[gate])
    cl.enqueue_fill_buffer(a, src, np.float32(7.0), 0, n * 4)
    api.sync_stream_from_to(DEV, a, b)
    api.copy_data_from_to(src, 0, dst, 0, n * 4, DEV, DEV, stream=b)
    done = cl.enqueue_marker(b)
    a.flush()
    b.flush()
    time.sleep(0.2)
    assert done.command_execution_status != cl.command_execution_status.COMPLETE, \
        "queue B ran before the work it was told to wait for"
    gate.set_status(cl.command_execution_status.COMPLETE)
    api.stream_sync(DEV, b)
    out = np.empty(n, np.float32)
    api.copy_data_from_to(dst, 0, out, 0, n * 4, DEV, CPU)
    assert (out == 7.0).all()
    api.free_stream(DEV, a)
    api.free_stream(DEV, b)


def test_set_stream_is_per_thread(api):
    import threading

    s = api.create_stream(DEV)
    api.set_stream(DEV, s)
    seen = []
    t = threading.Thread(target=lambda: seen.append(api.current_stream(DEV)))
    t.start()
    t.join()
    assert api.current_stream(DEV) is s and seen == [None]
    api.set_stream(DEV, None)


def test_opencl_handles_for_gpu_custom_ops(api):
    """Native GPU custom ops get the raw cl_* handles of the device and of each buffer."""
    st = devices.state(0)
    h = api.opencl_handles(DEV)
    assert isinstance(h, OpenCLHandles)
    assert h.context == st.context.int_ptr
    assert h.device == st.device.int_ptr
    assert h.platform == st.device.platform.int_ptr
    assert h.queue() == st.queue.int_ptr
    s = api.create_stream(DEV)
    api.set_stream(DEV, s)
    try:
        assert api.opencl_handles(DEV).queue() == s.int_ptr  # this thread's stream
        assert h.queue() == s.int_ptr  # asked per call: it follows set_stream
    finally:
        api.set_stream(DEV, None)
    buf = api.alloc_data_space(DEV, 16)
    assert h.buffer(buf) == buf.int_ptr
    ws = api.alloc_workspace(DEV, 16)
    assert h.buffer(ws) == ws.handle.int_ptr
    api.free_workspace(DEV, ws)


def test_a_kernel_built_through_the_handles_runs_through_their_function_table(api):
    """What a GPU custom op does with the handles: the backend builds its program and kernel,
    the op calls OpenCL through the function addresses it was given, the host waits."""
    h = api.opencl_handles(DEV)
    program = h.build_program(
        b"__kernel void inc(__global float* x) { x[get_global_id(0)] += 1.0f; }", "")
    kernel = h.create_kernel(program, "inc")
    x = np.arange(4, dtype=np.float32)
    buf = api.alloc_data_space(DEV, x.nbytes)
    api.copy_data_from_to(x, 0, buf, 0, x.nbytes, CPU, DEV)
    vp, size_p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
    set_arg = ctypes.CFUNCTYPE(ctypes.c_int32, vp, ctypes.c_uint32, ctypes.c_size_t, vp)(
        h.function("clSetKernelArg"))
    enqueue = ctypes.CFUNCTYPE(ctypes.c_int32, vp, vp, ctypes.c_uint32, size_p, size_p, size_p,
                               ctypes.c_uint32, vp, vp)(h.function("clEnqueueNDRangeKernel"))
    mem = ctypes.c_void_p(h.buffer(buf))
    assert set_arg(kernel, 0, ctypes.sizeof(mem), ctypes.addressof(mem)) == 0
    assert enqueue(h.queue(), kernel, 1, None, (ctypes.c_size_t * 1)(4), None, 0, None,
                   None) == 0
    h.finish()
    out = np.empty_like(x)
    api.copy_data_from_to(buf, 0, out, 0, x.nbytes, DEV, CPU)
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    h.release_kernel(kernel)
    api.free_data_space(DEV, buf)
    with pytest.raises(cl.Error, match="undeclared_thing_42"):  # the compiler's log
        h.build_program(b"__kernel void k(__global float* x) { x[0] = undeclared_thing_42; }",
                        "")

"""The OpenCL backend's devices are listed with their class and vendor as OpenCL reports them."""

import pyopencl as cl
from conftest import new_runtime

import nnplug
from nnplug_backend_opencl import OpenCLBackend, devices


def test_each_opencl_device_is_listed_with_class_vendor_and_name():
    with new_runtime(OpenCLBackend) as rt:
        listed = [d for d in rt.devices() if d.backend == "opencl"]
    found = devices.visible_devices()
    assert len(listed) == len(found) >= 1
    first, cl_first = listed[0], found[0]
    assert first.device == nnplug.device("opencl:0")
    kind = int(cl_first.type)
    assert first.device_class == ("gpu" if kind & cl.device_type.GPU else
                                  "cpu" if kind & cl.device_type.CPU else "accelerator")
    assert first.vendor == cl_first.vendor.strip() and first.name == cl_first.name.strip()
    assert first.provider_names == ("OpenCLExecutionProvider",)

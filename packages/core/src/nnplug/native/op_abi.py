"""ctypes mirrors of ``nnplug/custom_op.h`` (custom-op ABI 1.1), and its constants.

Keep in step with the header: same members, same order. Structs only grow at the end.
"""

from __future__ import annotations

import ctypes as C

from . import abi

ABI_MAJOR, ABI_MINOR, ABI_PATCH = 1, 1, 0
ABI_VERSION = (ABI_MAJOR, ABI_MINOR, ABI_PATCH)
OVERRIDES_STANDARD = 1 << 0  # nnp_custom_op.flags (ABI 1.1)
ENTRY_SYMBOL = "nnp_custom_op_entry"
MAX_DIMS = 16
SKIP = -1  # NNP_OP_SKIP: init declines the node
TARGET_CPU, TARGET_GPU = 1, 2
TARGET_NAMES = {TARGET_CPU: "cpu", TARGET_GPU: "gpu"}
LAYOUT_NCHW = 1
MAX_OPS = 1024


class OpTensorAttr(C.Structure):
    _fields_ = [
        ("name", C.c_char_p),
        ("n_dims", C.c_uint32),
        ("dims", C.c_int64 * MAX_DIMS),
        ("n_elems", C.c_uint64),
        ("size", C.c_uint64),
        ("dtype", abi.DType),
        ("layout", C.c_int32),
    ]


class OpMem(C.Structure):
    _fields_ = [("base", C.c_void_p), ("offset", C.c_uint64), ("size", C.c_uint64)]


class OpTensor(C.Structure):
    _fields_ = [("attr", OpTensorAttr), ("mem", OpMem)]


CL_FUNCTIONS = ("clSetKernelArg", "clEnqueueNDRangeKernel", "clFinish",
                "clGetKernelWorkGroupInfo", "clGetDeviceInfo")
"""The OpenCL functions of ``nnp_cl_api``, in its order."""


class ClApi(C.Structure):
    _fields_ = [("struct_size", C.c_uint32)] + [(n, C.c_void_p) for n in CL_FUNCTIONS]


class OpContext(C.Structure):
    pass


# The plugin's strings arrive as raw pointers, read bounded (strings.py), never by strlen.
GET_ATTR = C.CFUNCTYPE(abi.status, C.POINTER(OpContext), C.c_void_p, C.POINTER(abi.Attr))
SET_ERROR = C.CFUNCTYPE(None, C.POINTER(OpContext), C.c_void_p)

OpContext._fields_ = [
    ("struct_size", C.c_uint32),
    ("target", C.c_int32),
    ("op_type", C.c_char_p),
    ("node_name", C.c_char_p),
    ("num_threads", C.c_int32),
    ("cl_platform", C.c_void_p),
    ("cl_device", C.c_void_p),
    ("cl_context", C.c_void_p),
    ("cl_command_queue", C.c_void_p),
    ("cl_kernel", C.c_void_p),
    ("cl", C.POINTER(ClApi)),
    ("priv_data", C.c_void_p),
    ("get_attr", GET_ATTR),
    ("set_error", SET_ERROR),
    ("host_data", C.c_void_p),
]

_TP = C.POINTER(OpTensor)
CALLBACK = C.CFUNCTYPE(C.c_int32, C.POINTER(OpContext), _TP, C.c_uint32, _TP, C.c_uint32)
DESTROY = C.CFUNCTYPE(C.c_int32, C.POINTER(OpContext))


class CustomOpStruct(C.Structure):
    _fields_ = [
        ("version", abi.Version),
        ("struct_size", C.c_uint32),
        ("target", C.c_int32),
        ("op_type", C.c_char_p),
        ("cl_kernel_name", C.c_char_p),
        ("cl_kernel_source", C.c_void_p),  # text or path: read with its size
        ("cl_source_size", C.c_uint64),
        ("cl_build_options", C.c_char_p),
        ("init", CALLBACK),
        ("prepare", CALLBACK),
        ("compute", CALLBACK),
        ("compute_native", C.c_void_p),
        ("destroy", DESTROY),
        ("shape_infer", CALLBACK),
        ("flags", C.c_uint32),  # ABI 1.1
    ]


class OpLibraryStruct(C.Structure):
    _fields_ = [
        ("abi_version", abi.Version),
        ("struct_size", C.c_uint32),
        ("name", C.c_char_p),
        ("num_ops", C.c_int32),
        ("ops", C.POINTER(C.c_void_p)),
    ]


# The smallest structs an ABI 1.0 library may hand over.
MIN_OP_SIZE = CustomOpStruct.shape_infer.offset
MIN_LIBRARY_SIZE = C.sizeof(OpLibraryStruct)


def read_struct(struct_type, address: int, size_field: str):
    """Copy a plugin struct into a zeroed mirror, up to its struct_size."""
    size = C.c_uint32.from_address(address + getattr(struct_type, size_field).offset).value
    out = struct_type()
    C.memmove(C.addressof(out), address, min(size, C.sizeof(struct_type)))
    return out, size


def returned(rc: int) -> str:
    """A callback's non-zero return value, with the nnp_status it is (nnplug/common.h)."""
    name = abi.STATUS_NAMES.get(rc)
    return f"returned {rc} (NNP_STATUS_{name})" if name else f"returned {rc} (not an nnp_status)"

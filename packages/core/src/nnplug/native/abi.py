"""ctypes mirrors of ``nnplug/common.h`` and ``nnplug/backend.h`` (backend ABI 1.6).

Keep in step with the headers: same members, same order. Structs only grow at the end.
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from ..plugins import RESERVED_IDS  # noqa: F401  (one set, for every kind of backend)

ABI_MAJOR = 1
ABI_MINOR = 8
ABI_PATCH = 1
ABI_VERSION = (ABI_MAJOR, ABI_MINOR, ABI_PATCH)
ENTRY_SYMBOL = "nnp_backend_entry"
MAX_NDIM = 16

# status codes
STATUS_NAMES = {
    0: "OK",
    1: "ERROR",
    2: "INVALID_ARGUMENT",
    3: "UNSUPPORTED",
    4: "OUT_OF_MEMORY",
    5: "DEVICE_ERROR",
    6: "SHAPE_ERROR",
    7: "INTERNAL",
}

# flags
HOST_VISIBLE = 1 << 0
KERNELS_OWN_CONSTANTS = 1 << 1

# copy kinds
COPY_HOST_TO_DEVICE = 1
COPY_DEVICE_TO_HOST = 2
COPY_DEVICE_TO_DEVICE = 3

# attribute value types (get_attr)
ATTR_VALUE_NONE = 0
ATTR_VALUE_INT = 1
ATTR_VALUE_STRING = 2

# device attribute kinds: AttrKind value -> TVM number
DEVICE_ATTR_NUMBERS = {
    "vendor": 16,
    "device_class": 17,
    "exist": 0,
    "max_threads_per_block": 1,
    "warp_size": 2,
    "max_shared_memory_per_block": 3,
    "compute_version": 4,
    "device_name": 5,
    "max_clock_rate": 6,
    "multi_processor_count": 7,
    "max_thread_dimensions": 8,
    "api_version": 11,
    "driver_version": 12,
    "l2_cache_size_bytes": 13,
    "total_global_memory": 14,
    "available_global_memory": 15,
}

# node attribute types (ONNX AttributeProto numbers)
ATTR_FLOAT, ATTR_INT, ATTR_STRING, ATTR_TENSOR, ATTR_GRAPH = 1, 2, 3, 4, 5
ATTR_FLOATS, ATTR_INTS, ATTR_STRINGS, ATTR_TENSORS, ATTR_GRAPHS = 6, 7, 8, 9, 10


class Version(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32), ("patch", C.c_uint32)]

    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


class Device(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class Tensor(C.Structure):
    """== DLTensor."""

    _fields_ = [
        ("data", C.c_void_p),
        ("device", Device),
        ("ndim", C.c_int32),
        ("dtype", DType),
        ("shape", C.POINTER(C.c_int64)),
        ("strides", C.POINTER(C.c_int64)),
        ("byte_offset", C.c_uint64),
    ]


class String(C.Structure):
    """nnp_string (ABI 1.3): one element of a string tensor."""

    _fields_ = [("data", C.c_void_p), ("size", C.c_uint64)]


DTYPE_STRING = 64  # NNP_DTYPE_STRING: elements are String, 128 bits


class Attr(C.Structure):
    _fields_ = [
        ("name", C.c_char_p),
        ("type", C.c_int32),
        ("dtype", DType),
        ("count", C.c_int64),
        ("data", C.c_void_p),
        ("ndim", C.c_int32),
        ("shape", C.POINTER(C.c_int64)),
    ]


class ValueDesc(C.Structure):
    _fields_ = [
        ("name", C.c_char_p),
        ("dtype", DType),
        ("ndim", C.c_int32),
        ("shape", C.POINTER(C.c_int64)),
        ("const_data", C.c_void_p),
        ("const_nbytes", C.c_uint64),
    ]


class NodeDesc(C.Structure):
    _fields_ = [
        ("name", C.c_char_p),
        ("op_type", C.c_char_p),
        ("domain", C.c_char_p),
        ("opset", C.c_int64),
        ("num_attrs", C.c_int32),
        ("attrs", C.POINTER(Attr)),
        ("num_inputs", C.c_int32),
        ("inputs", C.POINTER(ValueDesc)),
        ("num_outputs", C.c_int32),
        ("outputs", C.POINTER(ValueDesc)),
    ]


class InitOptions(C.Structure):
    _fields_ = [
        ("struct_size", C.c_uint32),
        ("host_abi", Version),
        ("num_threads", C.c_int32),
        ("config", C.c_char_p),
        ("host_flags", C.c_uint32),  # ABI 1.8
    ]


# InitOptions.host_flags: what the host promises (nnplug/backend.h NNP_HOST_*). plan.py keeps
# a module's constants until its kernels are destroyed (_State.constants).
HOST_KEEPS_CONSTANTS = 1 << 0


class AttrValue(C.Structure):
    _fields_ = [("type", C.c_int32), ("i", C.c_int64), ("s", C.c_char * 256)]


class Step(C.Structure):
    _fields_ = [
        ("kernel", C.c_void_p),
        ("num_inputs", C.c_int32),
        ("inputs", C.POINTER(Tensor)),
        ("input_slots", C.POINTER(C.c_int32)),
        ("num_outputs", C.c_int32),
        ("outputs", C.POINTER(Tensor)),
        ("output_slots", C.POINTER(C.c_int32)),
    ]


class DynamicStep(C.Structure):
    """nnp_dynamic_step (ABI 1.6)."""

    _fields_ = [
        ("kernel", C.c_void_p),
        ("num_inputs", C.c_int32),
        ("inputs", C.POINTER(Tensor)),
        ("input_values", C.POINTER(C.c_int32)),
        ("num_outputs", C.c_int32),
        ("output_values", C.POINTER(C.c_int32)),
        ("ask_shapes", C.c_int32),
        ("num_released", C.c_int32),
        ("released", C.POINTER(C.c_int32)),
    ]


class DynamicPlan(C.Structure):
    """nnp_dynamic_plan (ABI 1.6)."""

    _fields_ = [
        ("num_steps", C.c_int32),
        ("steps", C.POINTER(DynamicStep)),
        ("num_values", C.c_int32),
        ("value_kinds", C.POINTER(C.c_int32)),
        ("expect_ndims", C.POINTER(C.c_int32)),
        ("expect_dims", C.POINTER(C.c_int64)),
    ]


# nnp_dynamic_plan.value_kinds and nnp_dynamic_run.failure
VALUE_INPUT, VALUE_TEMP, VALUE_OUTPUT = 0, 1, 2
DYNAMIC_OK, DYNAMIC_KERNEL, DYNAMIC_BAD_SHAPE, DYNAMIC_NO_MEMORY = 0, 1, 2, 3
DYNAMIC_ALLOC_FAILED, DYNAMIC_MALFORMED = 4, 5

status = C.c_int32
_F = C.CFUNCTYPE  # foreign calls through these release the GIL
_p = C.c_void_p
_i32 = C.c_int32
_u64 = C.c_uint64
_TP = C.POINTER(Tensor)

INIT = _F(status, C.POINTER(InitOptions))
SHUTDOWN = _F(None)
LAST_ERROR = _F(C.c_char_p)
SET_NUM_THREADS = _F(status, _i32)
GET_ATTR = _F(status, Device, _i32, C.POINTER(AttrValue))
SET_DEVICE = _F(status, Device)
ALLOC_DATA_SPACE = _F(status, Device, _u64, _u64, DType, C.POINTER(_p))
FREE_DATA_SPACE = _F(status, Device, _p)
ALLOC_WORKSPACE = _F(status, Device, _u64, DType, C.POINTER(_p))
FREE_WORKSPACE = _F(status, Device, _p)
COPY_DATA_FROM_TO = _F(status, _p, _u64, _p, _u64, _u64, Device, Device, _i32, _p)
CREATE_STREAM = _F(status, Device, C.POINTER(_p))
STREAM_OP = _F(status, Device, _p)
SYNC_STREAM_FROM_TO = _F(status, Device, _p, _p)
SUPPORTS = _F(status, C.POINTER(NodeDesc), C.POINTER(_i32))
FUSE = _F(status, C.POINTER(NodeDesc), _i32, C.POINTER(_i32))
KERNEL_CREATE = _F(status, C.POINTER(NodeDesc), _i32, Device, C.POINTER(_p))
KERNEL_DESTROY = _F(status, _p)
KERNEL_OUTPUT_SHAPES = _F(status, _p, _TP, _i32, _i32, C.POINTER(_i32), C.POINTER(C.c_int64))
KERNEL_WORKSPACE_SIZE = _F(status, _p, _TP, _i32, _TP, _i32, C.POINTER(_u64))
KERNEL_RUN = _F(status, _p, _TP, _i32, _TP, _i32, _p, _u64, _p)
RUN_STEPS = _F(status, C.POINTER(Step), _i32, C.POINTER(_p), _i32, _p, _u64, _p, C.POINTER(_i32))
RELEASE_STRINGS = _F(None, _p, _u64)
OUTPUT_ALLOC = _F(status, _p, _i32, _TP)


def unprototyped(fn):
    """``fn`` (a function of the table) called with no argument conversion: every argument
    must already be a ctypes object of its C type, None (NULL) or an int that fits an int32.
    A prototyped call converts each argument on every call (about 1 us for run_steps' eight);
    run_arrays makes this call once per run. The GIL is released as through ``fn``."""
    return _F(status)(C.cast(fn, _p).value)


class DynamicRun(C.Structure):
    """nnp_dynamic_run (ABI 1.6)."""

    _fields_ = [
        ("values", C.POINTER(Tensor)),
        ("shapes", C.POINTER(C.c_int64)),
        ("symbols", C.POINTER(C.c_int64)),
        ("alloc", OUTPUT_ALLOC),
        ("user", C.c_void_p),
        ("stream", C.c_void_p),
        ("failed_step", C.c_int32),
        ("failed_value", C.c_int32),
        ("failure", C.c_int32),
    ]


RUN_DYNAMIC = _F(status, C.POINTER(DynamicPlan), C.POINTER(DynamicRun))
KERNEL_CREATE_FOR_TARGET = _F(status, C.POINTER(NodeDesc), _i32, Device, C.c_char_p, C.POINTER(_p))


class ProfileEvent(C.Structure):
    """nnp_profile_event (ABI 1.1)."""

    _fields_ = [
        ("struct_size", C.c_uint32),
        ("node_name", C.c_char_p),
        ("op_type", C.c_char_p),
        ("num_fused", C.c_int32),
        ("fused_names", C.POINTER(C.c_char_p)),
        ("fused_op_types", C.POINTER(C.c_char_p)),
        ("start_ns", C.c_int64),
        ("duration_ns", C.c_int64),
        ("num_inputs", C.c_int32),
        ("input_ndims", C.POINTER(C.c_int32)),
        ("input_shapes", C.POINTER(C.c_int64)),
        ("num_outputs", C.c_int32),
        ("output_ndims", C.POINTER(C.c_int32)),
        ("output_shapes", C.POINTER(C.c_int64)),
    ]


PROFILE_HOOK = _F(None, _p, C.POINTER(ProfileEvent))
SET_PROFILE_HOOK = _F(status, PROFILE_HOOK, _p)


class BackendV1(C.Structure):
    _fields_ = [
        ("abi_version", Version),
        ("struct_size", C.c_uint32),
        ("flags", C.c_uint32),
        ("id", C.c_char_p),
        ("version", C.c_char_p),
        ("device_type", C.c_int32),
        ("device_type_name", C.c_char_p),
        ("init", INIT),
        ("shutdown", SHUTDOWN),
        ("last_error", LAST_ERROR),
        ("set_num_threads", SET_NUM_THREADS),
        ("get_attr", GET_ATTR),
        ("set_device", SET_DEVICE),
        ("alloc_data_space", ALLOC_DATA_SPACE),
        ("free_data_space", FREE_DATA_SPACE),
        ("alloc_workspace", ALLOC_WORKSPACE),
        ("free_workspace", FREE_WORKSPACE),
        ("copy_data_from_to", COPY_DATA_FROM_TO),
        ("create_stream", CREATE_STREAM),
        ("free_stream", STREAM_OP),
        ("set_stream", STREAM_OP),
        ("stream_sync", STREAM_OP),
        ("sync_stream_from_to", SYNC_STREAM_FROM_TO),
        ("supports", SUPPORTS),
        ("fuse", FUSE),
        ("kernel_create", KERNEL_CREATE),
        ("kernel_destroy", KERNEL_DESTROY),
        ("kernel_output_shapes", KERNEL_OUTPUT_SHAPES),
        ("kernel_workspace_size", KERNEL_WORKSPACE_SIZE),
        ("kernel_run", KERNEL_RUN),
        ("run_steps", RUN_STEPS),
        # ABI 1.1
        ("set_profile_hook", SET_PROFILE_HOOK),
        # ABI 1.2
        ("target_attrs", C.c_char_p),
        ("kernel_create_for_target", KERNEL_CREATE_FOR_TARGET),
        # ABI 1.3
        ("release_strings", RELEASE_STRINGS),
        # ABI 1.4
        ("supports_fused", FUSE),
        # ABI 1.5
        ("priority", C.c_int32),
        ("provider_names", C.c_char_p),
        # ABI 1.6
        ("run_dynamic", RUN_DYNAMIC),
    ]


REQUIRED_ENTRIES = (
    "last_error", "get_attr", "alloc_data_space", "free_data_space", "copy_data_from_to",
    "supports", "kernel_create", "kernel_destroy", "kernel_run",
)
PAIRED_ENTRIES = (
    ("alloc_workspace", "free_workspace"),
    ("create_stream", "free_stream", "set_stream", "stream_sync", "sync_stream_from_to"),
)
# The smallest table a 1.0 backend may hand over: everything up to run_steps.
MIN_STRUCT_SIZE = BackendV1.set_profile_hook.offset
# Members added by a minor version: (minor, member). The host reads one only from a table of
# that minor or newer whose struct_size covers it.
SINCE_MINOR = {"set_profile_hook": 1, "target_attrs": 2, "kernel_create_for_target": 2,
               "release_strings": 3, "supports_fused": 4, "priority": 5, "provider_names": 5,
               "run_dynamic": 6}


def has_member(table: BackendV1, size: int, name: str) -> bool:
    """Whether a table of this version and struct_size carries ``name``."""
    field = getattr(BackendV1, name)
    return (table.abi_version.minor >= SINCE_MINOR.get(name, 0)
            and size >= field.offset + field.size)


def read_table(address: int) -> tuple[BackendV1, int]:
    """Copy a backend's table into a zeroed BackendV1: entries beyond its struct_size stay NULL,
    and so do members of minors newer than the table's own (whatever its struct_size says)."""
    size = C.c_uint32.from_address(address + BackendV1.struct_size.offset).value
    table = BackendV1()
    C.memmove(C.addressof(table), address, min(size, C.sizeof(BackendV1)))
    newer = [getattr(BackendV1, n).offset for n, minor in SINCE_MINOR.items()
             if minor > table.abi_version.minor]
    if newer:
        cut = min(newer)
        C.memset(C.addressof(table) + cut, 0, C.sizeof(BackendV1) - cut)
    return table, size


# -- dtypes -----------------------------------------------------------------------------------
_KIND_CODE = {"i": 0, "u": 1, "f": 2, "b": 6, "c": 5}
# ml_dtypes' types (numpy kind "V") by name: (code, bits) as nnplug/common.h gives them. The
# sub-byte ones take one byte per element in memory, as ml_dtypes holds them.
_NAMED = {
    "bfloat16": (4, 16), "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8), "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8),
    "float4_e2m1fn": (17, 4), "int4": (0, 4), "uint4": (1, 4), "int2": (0, 2), "uint2": (1, 2),
}
_BY_CODE = {v: k for k, v in _NAMED.items()}


_DL_OF: dict = {}  # numpy dtype -> (code, bits, lanes): descriptors ask thousands of times


def dtype_of(dt) -> DType:
    """numpy dtype -> DLDataType ({0,0,0} for None / unknown). A new struct each call."""
    if dt is None:
        return DType(0, 0, 0)
    dt = np.dtype(dt)
    fields = _DL_OF.get(dt)
    if fields is None:
        fields = _DL_OF[dt] = _dl_fields(dt)
    return DType(*fields)


def _dl_fields(dt: np.dtype) -> tuple[int, int, int]:
    if dt.kind in "OUS":  # ONNX STRING: numpy object (or fixed-width str/bytes) arrays
        return DTYPE_STRING, 128, 1
    if dt.name in _NAMED and dt.kind in "Vf":  # ml_dtypes (one of its kinds is "f")
        return (*_NAMED[dt.name], 1)
    code = _KIND_CODE.get(dt.kind)
    if code is None:
        return 0, 0, 0
    return code, dt.itemsize * 8, 1


def numpy_dtype(t: DType):
    """DLDataType -> numpy dtype, None when numpy has no such type."""
    named = _BY_CODE.get((t.code, t.bits))
    if named is not None and t.lanes in (0, 1):
        try:
            import ml_dtypes  # onnx depends on it

            return np.dtype(getattr(ml_dtypes, named))
        except (ImportError, AttributeError):
            return None
    kind = {0: "i", 1: "u", 2: "f", 6: "b", 5: "c"}.get(t.code)
    if kind is None or t.lanes not in (0, 1) or t.bits % 8:
        return None
    try:
        return np.dtype(f"{kind}{t.bits // 8}" if kind != "b" else "bool")
    except TypeError:
        return None


def is_known(t: DType) -> bool:
    return t.bits != 0

"""onnxruntime's C API (``OrtApi``), the part custom-op libraries call, served from Python.

A library built for onnxruntime's custom-op C API (``RegisterCustomOps(OrtSessionOptions*,
const OrtApiBase*)``, e.g. onnxruntime-extensions) gets ``OrtApiBase`` from here: its
``GetApi`` returns a table with every slot of onnxruntime's ``OrtApi`` in onnxruntime's order
(:mod:`._ort_api_slots`). The slots such libraries call (statuses, kernel info attributes,
kernel context inputs and outputs, tensor types, shapes and data, string tensors, custom op
domains, allocators, memory infos, loggers) are implemented here over numpy arrays; every
other slot returns an ``OrtStatus`` (``ORT_NOT_IMPLEMENTED``) that names it, and is logged.

Objects the library only holds (statuses, values, infos, contexts) are opaque handles: the
address of a small buffer of ours, mapped back to a Python object. ``OrtAllocator`` is a real
struct (libraries call its ``Alloc``/``Free`` members directly).
"""

from __future__ import annotations

import atexit
import ctypes as C
import logging
import threading

import numpy as np

from ._ort_api_slots import NOT_STATUS, SLOTS

log = logging.getLogger("nnplug.ops")

API_VERSION = 17
"""The API version this table is offered as: ``GetVersionString`` says 1.17.0, so libraries
that pick their version from it (onnxruntime-extensions) use the status-returning
``CreateKernelV2``/``KernelComputeV2`` callbacks. ``GetApi`` answers any version whose
table layout :mod:`._ort_api_slots` holds."""
VERSION_STRING = f"1.{API_VERSION}.0".encode()

# OrtErrorCode
ORT_OK, ORT_FAIL, ORT_INVALID_ARGUMENT = 0, 1, 2
ORT_RUNTIME_EXCEPTION, ORT_NOT_IMPLEMENTED = 6, 9
ERROR_NAMES = ("ORT_OK", "ORT_FAIL", "ORT_INVALID_ARGUMENT", "ORT_NO_SUCHFILE", "ORT_NO_MODEL",
               "ORT_ENGINE_ERROR", "ORT_RUNTIME_EXCEPTION", "ORT_INVALID_PROTOBUF",
               "ORT_MODEL_LOADED", "ORT_NOT_IMPLEMENTED", "ORT_INVALID_GRAPH", "ORT_EP_FAIL")

# ONNXTensorElementDataType (== TensorProto.DataType) <-> numpy
STRING_TYPE = 8
_NUMPY_OF = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
             7: np.int64, 8: object, 9: np.bool_, 10: np.float16, 11: np.float64,
             12: np.uint32, 13: np.uint64}
_TYPE_OF = {np.dtype(v): k for k, v in _NUMPY_OF.items()}


def numpy_dtype(element_type: int):
    """The numpy dtype of an ``ONNXTensorElementDataType``; None when nnplug has none."""
    t = _NUMPY_OF.get(int(element_type))
    return None if t is None else np.dtype(t)


def element_type(dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return STRING_TYPE
    return _TYPE_OF.get(dtype, 0)


# -- handles -------------------------------------------------------------------------------------
_objects: dict[int, object] = {}
_buffers: dict[int, object] = {}
_lock = threading.Lock()


def new_handle(obj) -> int:
    """An address the library holds for ``obj`` until :func:`drop_handle`."""
    buf = C.create_string_buffer(16)
    address = C.addressof(buf)
    with _lock:
        _objects[address] = obj
        _buffers[address] = buf
    return address


def drop_handle(address) -> None:
    with _lock:
        _objects.pop(address or 0, None)
        _buffers.pop(address or 0, None)


def get(address, kind=None):
    obj = _objects.get(address or 0)
    if obj is None or (kind is not None and not isinstance(obj, kind)):
        raise ApiError(ORT_INVALID_ARGUMENT,
                       f"{'NULL' if not address else hex(address)} is not a live "
                       f"{getattr(kind, 'what', 'nnplug object')}")
    return obj


class ApiError(Exception):
    """Raised inside an API function: becomes the OrtStatus it returns."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# -- objects behind the handles ------------------------------------------------------------------
class Status:
    what = "OrtStatus"

    def __init__(self, code: int, message: bytes):
        self.code = code
        self.message = C.create_string_buffer(message)


def make_status(code: int, message: str) -> int:
    return new_handle(Status(code, message.encode("utf-8", "replace")))


class Value:
    """An ``OrtValue``: a host tensor (numpy array; strings as an object array)."""

    what = "OrtValue"

    def __init__(self, array: np.ndarray | None, etype: int, shape=None):
        self.array = array
        self.etype = etype
        self.shape = tuple(array.shape) if array is not None else tuple(shape)
        self.string_buffers: dict[int, C.Array] = {}  # GetResizedStringTensorElementBuffer

    def settle(self) -> None:
        """Copy strings written through GetResizedStringTensorElementBuffer into the array."""
        for i, buf in self.string_buffers.items():
            self.array.reshape(-1)[i] = bytes(buf)
        self.string_buffers.clear()


class TypeShape:
    what = "OrtTensorTypeAndShapeInfo"

    def __init__(self, etype: int, shape):
        self.etype = etype
        self.shape = [int(d) for d in shape]


class MemoryInfo:
    what = "OrtMemoryInfo"

    def __init__(self, name: bytes = b"Cpu", alloc_type: int = 0, device_id: int = 0,
                 mem_type: int = 0):
        self.name = C.create_string_buffer(name)
        self.alloc_type, self.device_id, self.mem_type = alloc_type, device_id, mem_type


class Domain:
    what = "OrtCustomOpDomain"

    def __init__(self, name: str):
        self.name = name
        self.ops: list[int] = []  # OrtCustomOp addresses


class SessionOptions:
    """The ``OrtSessionOptions*`` handed to ``RegisterCustomOps``: collects its domains."""

    what = "OrtSessionOptions"

    def __init__(self):
        self.domains: list[Domain] = []


class Logger:
    what = "OrtLogger"


class KernelInfo:
    """What ``CreateKernel`` may ask about its node."""

    what = "OrtKernelInfo"

    def __init__(self, node, input_types: list[int], output_types: list[int]):
        self.node = node
        self.input_types = input_types
        self.output_types = output_types


class KernelContext:
    """One ``KernelCompute`` call: the node's inputs and the outputs the kernel allocates."""

    what = "OrtKernelContext"

    def __init__(self, inputs: list[Value | None], output_types: list[int], op_name: str):
        self.inputs = inputs
        self.input_handles = [new_handle(v) if v is not None else 0 for v in inputs]
        self.output_types = output_types
        self.outputs: list[Value | None] = [None] * len(output_types)
        self.output_handles = [0] * len(output_types)
        self.op_name = op_name

    def close(self) -> None:
        for h in self.input_handles + self.output_handles:
            if h:
                drop_handle(h)


# -- the allocator (a real struct: libraries call its members) -------------------------------------
class OrtAllocator(C.Structure):
    pass


_ALLOC = C.CFUNCTYPE(C.c_void_p, C.POINTER(OrtAllocator), C.c_size_t)
_FREE = C.CFUNCTYPE(None, C.POINTER(OrtAllocator), C.c_void_p)
_INFO = C.CFUNCTYPE(C.c_void_p, C.POINTER(OrtAllocator))
OrtAllocator._fields_ = [("version", C.c_uint32), ("Alloc", _ALLOC), ("Free", _FREE),
                         ("Info", _INFO)]

_libc = C.CDLL(None)
_libc.malloc.restype, _libc.malloc.argtypes = C.c_void_p, [C.c_size_t]
_libc.free.restype, _libc.free.argtypes = None, [C.c_void_p]


def _never_freed(ctype):
    """A ctypes object of ctype in memory of its own that nothing frees. A library keeps the
    addresses of the API table and the allocator and reads them in its static destructors,
    after Python has finalized and freed every ctypes object's own buffer (onnxruntime-
    extensions' domain deleters read the freed table at exit: a crash whenever that memory
    had been reused); _quiet_at_exit leaves them harmless, and they must still be there."""
    p = _libc.malloc(C.sizeof(ctype))
    if not p:
        raise MemoryError("nnplug: no memory for onnxruntime's custom-op API table")
    C.memset(p, 0, C.sizeof(ctype))
    return ctype.from_address(p)


_CPU_INFO = new_handle(MemoryInfo())
_alloc_cb = _ALLOC(lambda this, size: _libc.malloc(max(int(size), 1)))
_free_cb = _FREE(lambda this, p: _libc.free(p))
_info_cb = _INFO(lambda this: _CPU_INFO)
ALLOCATOR = _never_freed(OrtAllocator)
ALLOCATOR.version, ALLOCATOR.Alloc, ALLOCATOR.Free, ALLOCATOR.Info = (
    API_VERSION, _alloc_cb, _free_cb, _info_cb)
ALLOCATOR_ADDRESS = C.addressof(ALLOCATOR)


# -- the API functions -------------------------------------------------------------------------
_impls: dict[str, tuple] = {}  # slot name -> (restype, argtypes, function)

S = object()  # marks a slot returning OrtStatus* (a c_void_p made from what it raises)
P = C.c_void_p
SZ = C.c_size_t
PSZ = C.POINTER(C.c_size_t)
PP = C.POINTER(C.c_void_p)


def api(name: str, *argtypes, restype=S):
    """Implement slot ``name``. A status slot's function returns None (ok) or raises
    ApiError/any exception (an error status naming the slot); others return their value."""

    def register(fn):
        assert name in SLOTS, name
        _impls[name] = (restype, argtypes, fn)
        return fn

    return register


def _wrap(name: str, restype, fn):
    if restype is S:
        def call(*args):
            try:
                fn(*args)
                return None
            except ApiError as e:
                return make_status(e.code, f"{name}: {e}")
            except Exception as e:  # noqa: BLE001 - nothing may cross into C
                log.debug("OrtApi %s failed", name, exc_info=True)
                return make_status(ORT_FAIL, f"{name}: {type(e).__name__}: {e}")
    else:
        def call(*args):
            try:
                return fn(*args)
            except Exception:  # noqa: BLE001
                log.error("nnplug: OrtApi %s failed", name, exc_info=True)
                return None if restype is None else 0
    return call


def _cstr(address) -> str:
    return C.string_at(address).decode("utf-8") if address else ""


def _put_bytes(data: bytes, out, size_ptr) -> None:
    """onnxruntime's two-call buffer protocol: NULL ``out`` asks the size (with the NUL)."""
    need = len(data) + 1
    if not out:
        size_ptr[0] = need
        return
    if size_ptr[0] < need:
        size_ptr[0] = need
        raise ApiError(ORT_INVALID_ARGUMENT, f"Result buffer is not large enough: {need} bytes "
                                             f"needed")
    C.memmove(out, data + b"\0", need)
    size_ptr[0] = need


def _put_array(values, ctype, out, size_ptr) -> None:
    if not out:
        size_ptr[0] = len(values)
        return
    if size_ptr[0] < len(values):
        size_ptr[0] = len(values)
        raise ApiError(ORT_INVALID_ARGUMENT, f"Result buffer is not large enough: "
                                             f"{len(values)} elements needed")
    arr = (ctype * max(len(values), 1)).from_address(out)
    for i, v in enumerate(values):
        arr[i] = v
    size_ptr[0] = len(values)


# statuses
@api("CreateStatus", C.c_int, C.c_char_p, restype=P)
def _create_status(code, msg):
    return new_handle(Status(int(code), msg or b""))


@api("GetErrorCode", P, restype=C.c_int)
def _get_error_code(status):
    return get(status, Status).code if status else ORT_OK


@api("GetErrorMessage", P, restype=P)
def _get_error_message(status):
    return C.addressof(get(status, Status).message)


@api("ReleaseStatus", P, restype=None)
def _release_status(status):
    drop_handle(status)


# kernel info: attributes of the type asked for, as onnxruntime reads them from the node
_FLOAT, _INT, _STRING, _TENSOR, _FLOATS, _INTS = 1, 2, 3, 4, 6, 7  # AttributeProto.type


def _attr(info, name, want: int):
    """The node's attribute ``name`` as onnxruntime gives it: the raw AttributeProto field
    (bytes for strings), an error when it is missing or of another type."""
    node = get(info, KernelInfo).node
    key = _cstr(name)
    proto = next((a for a in node.proto.attribute if a.name == key), None) \
        if node.proto is not None else None
    if proto is None:
        if key not in node.attrs:
            raise ApiError(ORT_FAIL, f"No attribute with name:'{key}'is defined.")
        return _from_value(node.attrs[key], key, want)
    if proto.type != want:
        raise ApiError(ORT_FAIL, f"Attribute name and type don't match for '{key}'")
    if want == _TENSOR:
        from onnx import numpy_helper

        return numpy_helper.to_array(proto.t)
    return {_FLOAT: proto.f, _INT: proto.i, _STRING: proto.s, _FLOATS: list(proto.floats),
            _INTS: list(proto.ints)}[want]


def _from_value(v, key: str, want: int):
    """The same from a node without its proto (attributes as nnplug's plain values)."""
    ok = {_FLOAT: isinstance(v, float), _INT: isinstance(v, (int, np.integer)),
          _STRING: isinstance(v, (str, bytes)), _TENSOR: isinstance(v, np.ndarray),
          _FLOATS: isinstance(v, list) and all(isinstance(x, float) for x in v),
          _INTS: isinstance(v, list) and all(isinstance(x, int) for x in v)}[want]
    if not ok:
        raise ApiError(ORT_FAIL, f"Attribute name and type don't match for '{key}'")
    return v.encode() if isinstance(v, str) else v


@api("KernelInfoGetAttribute_float", P, C.c_char_p, C.POINTER(C.c_float))
def _attr_float(info, name, out):
    out[0] = _attr(info, name, _FLOAT)


@api("KernelInfoGetAttribute_int64", P, C.c_char_p, C.POINTER(C.c_int64))
def _attr_int(info, name, out):
    out[0] = _attr(info, name, _INT)


@api("KernelInfoGetAttribute_string", P, C.c_char_p, P, PSZ)
def _attr_string(info, name, out, size):
    _put_bytes(_attr(info, name, _STRING), out, size)


@api("KernelInfoGetAttributeArray_float", P, C.c_char_p, P, PSZ)
def _attr_floats(info, name, out, size):
    _put_array(_attr(info, name, _FLOATS), C.c_float, out, size)


@api("KernelInfoGetAttributeArray_int64", P, C.c_char_p, P, PSZ)
def _attr_ints(info, name, out, size):
    _put_array(_attr(info, name, _INTS), C.c_int64, out, size)


@api("KernelInfoGetAttribute_tensor", P, C.c_char_p, P, PP)
def _attr_tensor(info, name, allocator, out):
    v = _attr(info, name, _TENSOR)
    arr = np.array(v, dtype=object if v.dtype.kind in "OUS" else v.dtype, copy=True)
    out[0] = new_handle(Value(arr, element_type(arr.dtype)))


@api("KernelInfo_GetInputCount", P, PSZ)
def _info_inputs(info, out):
    out[0] = len(get(info, KernelInfo).node.inputs)


@api("KernelInfo_GetOutputCount", P, PSZ)
def _info_outputs(info, out):
    out[0] = len(get(info, KernelInfo).node.outputs)


@api("KernelInfo_GetInputName", P, SZ, P, PSZ)
def _info_input_name(info, index, out, size):
    _put_bytes(get(info, KernelInfo).node.inputs[index].encode(), out, size)


@api("KernelInfo_GetOutputName", P, SZ, P, PSZ)
def _info_output_name(info, index, out, size):
    _put_bytes(get(info, KernelInfo).node.outputs[index].encode(), out, size)


@api("KernelInfo_GetNodeName", P, P, PSZ)
def _info_node_name(info, out, size):
    _put_bytes((get(info, KernelInfo).node.name or "").encode(), out, size)


@api("KernelInfo_GetLogger", P, PP)
def _info_logger(info, out):
    out[0] = _LOGGER


@api("KernelInfoGetAllocator", P, C.c_int, PP)
def _info_allocator(info, mem_type, out):
    out[0] = ALLOCATOR_ADDRESS


# kernel context
@api("KernelContext_GetInputCount", P, PSZ)
def _ctx_inputs(ctx, out):
    out[0] = len(get(ctx, KernelContext).inputs)


@api("KernelContext_GetOutputCount", P, PSZ)
def _ctx_outputs(ctx, out):
    out[0] = len(get(ctx, KernelContext).outputs)


@api("KernelContext_GetInput", P, SZ, PP)
def _ctx_input(ctx, index, out):
    c = get(ctx, KernelContext)
    if index >= len(c.inputs):
        raise ApiError(ORT_INVALID_ARGUMENT, f"input index {index} out of range "
                                             f"({len(c.inputs)} inputs)")
    out[0] = c.input_handles[index] or None


@api("KernelContext_GetOutput", P, SZ, C.POINTER(C.c_int64), SZ, PP)
def _ctx_output(ctx, index, dims, count, out):
    c = get(ctx, KernelContext)
    if index >= len(c.outputs):
        raise ApiError(ORT_INVALID_ARGUMENT, f"output index {index} out of range "
                                             f"({len(c.outputs)} outputs)")
    shape = tuple(int(dims[i]) for i in range(count))
    if any(d < 0 for d in shape):
        raise ApiError(ORT_INVALID_ARGUMENT, f"output {index} shape {list(shape)} has a "
                                             f"negative dim")
    if c.outputs[index] is not None:  # asked again: the same tensor when the shape agrees
        if c.outputs[index].shape != shape:
            raise ApiError(ORT_FAIL, f"output {index} was already allocated with shape "
                                     f"{list(c.outputs[index].shape)}")
        out[0] = c.output_handles[index]
        return
    etype = c.output_types[index]
    dtype = numpy_dtype(etype)
    if dtype is None:
        raise ApiError(ORT_NOT_IMPLEMENTED, f"output {index} of {c.op_name} has element type "
                                            f"{etype}, which nnplug cannot hold")
    # zeros: deterministic where a kernel leaves elements unset
    arr = np.full(shape, "", dtype=object) if dtype.kind == "O" else np.zeros(shape, dtype)
    value = Value(arr, etype)
    c.outputs[index] = value
    c.output_handles[index] = new_handle(value)
    out[0] = c.output_handles[index]


@api("KernelContext_GetAllocator", P, P, PP)
def _ctx_allocator(ctx, mem_info, out):
    out[0] = ALLOCATOR_ADDRESS


@api("KernelContext_GetLogger", P, PP)
def _ctx_logger(ctx, out):
    out[0] = _LOGGER


_PARALLEL_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_size_t)


@api("KernelContext_ParallelFor", P, P, SZ, SZ, P)
def _ctx_parallel_for(ctx, fn, total, num_batch, usr_data):
    call = _PARALLEL_FN(fn)  # nnplug runs custom-op kernels on one thread each
    for i in range(total):
        call(usr_data, i)


@api("KernelContext_GetScratchBuffer", P, P, SZ, PP)
def _ctx_scratch(ctx, mem_info, size, out):
    out[0] = _libc.malloc(max(int(size), 1)) if size else None


@api("ReleaseAllocator", P, restype=None)
def _release_allocator(allocator):
    pass  # the one allocator lives as long as the process


# allocators and memory infos
@api("GetAllocatorWithDefaultOptions", PP)
def _default_allocator(out):
    out[0] = ALLOCATOR_ADDRESS


@api("AllocatorAlloc", P, SZ, PP)
def _allocator_alloc(allocator, size, out):
    out[0] = _libc.malloc(max(int(size), 1))


@api("AllocatorFree", P, P)
def _allocator_free(allocator, p):
    _libc.free(p)


@api("AllocatorGetInfo", P, PP)
def _allocator_info(allocator, out):
    out[0] = _CPU_INFO


@api("CreateCpuMemoryInfo", C.c_int, C.c_int, PP)
def _create_cpu_info(alloc_type, mem_type, out):
    out[0] = new_handle(MemoryInfo(b"Cpu", alloc_type, 0, mem_type))


@api("CreateMemoryInfo", C.c_char_p, C.c_int, C.c_int, C.c_int, PP)
def _create_info(name, alloc_type, device_id, mem_type, out):
    if (name or b"") != b"Cpu":
        raise ApiError(ORT_NOT_IMPLEMENTED, f"nnplug runs onnxruntime custom ops on the CPU "
                                            f"only, not on {(name or b'').decode()!r}")
    out[0] = new_handle(MemoryInfo(name, alloc_type, device_id, mem_type))


@api("ReleaseMemoryInfo", P, restype=None)
def _release_info(info):
    if info != _CPU_INFO:
        drop_handle(info)


@api("MemoryInfoGetName", P, PP)
def _info_name(info, out):
    out[0] = C.addressof(get(info, MemoryInfo).name)


@api("MemoryInfoGetId", P, C.POINTER(C.c_int))
def _info_id(info, out):
    out[0] = get(info, MemoryInfo).device_id


@api("MemoryInfoGetMemType", P, C.POINTER(C.c_int))
def _info_mem_type(info, out):
    out[0] = get(info, MemoryInfo).mem_type


@api("MemoryInfoGetType", P, C.POINTER(C.c_int))
def _info_type(info, out):
    out[0] = get(info, MemoryInfo).alloc_type


@api("MemoryInfoGetDeviceType", P, C.POINTER(C.c_int), restype=None)
def _info_device_type(info, out):
    out[0] = 0  # OrtMemoryInfoDeviceType_CPU


@api("CompareMemoryInfo", P, P, C.POINTER(C.c_int))
def _compare_info(a, b, out):
    x, y = get(a, MemoryInfo), get(b, MemoryInfo)
    out[0] = 0 if (x.name.value, x.device_id) == (y.name.value, y.device_id) else -1


@api("GetTensorMemoryInfo", P, PP)
def _tensor_info(value, out):
    get(value, Value)
    out[0] = _CPU_INFO


# values, types and shapes
@api("IsTensor", P, C.POINTER(C.c_int))
def _is_tensor(value, out):
    get(value, Value)
    out[0] = 1


@api("GetValueType", P, C.POINTER(C.c_int))
def _value_type(value, out):
    get(value, Value)
    out[0] = 1  # ONNX_TYPE_TENSOR


@api("GetTensorTypeAndShape", P, PP)
def _type_and_shape(value, out):
    v = get(value, Value)
    out[0] = new_handle(TypeShape(v.etype, v.shape))


@api("CreateTensorTypeAndShapeInfo", PP)
def _create_type_shape(out):
    out[0] = new_handle(TypeShape(0, []))


@api("SetTensorElementType", P, C.c_int)
def _set_type(info, etype):
    get(info, TypeShape).etype = int(etype)


@api("SetDimensions", P, C.POINTER(C.c_int64), SZ)
def _set_dims(info, dims, count):
    get(info, TypeShape).shape = [int(dims[i]) for i in range(count)]


@api("ReleaseTensorTypeAndShapeInfo", P, restype=None)
def _release_type_shape(info):
    drop_handle(info)


@api("GetTensorElementType", P, C.POINTER(C.c_int))
def _element_type(info, out):
    out[0] = get(info, TypeShape).etype


@api("GetDimensionsCount", P, PSZ)
def _dims_count(info, out):
    out[0] = len(get(info, TypeShape).shape)


@api("GetDimensions", P, C.POINTER(C.c_int64), SZ)
def _dims(info, out, count):
    shape = get(info, TypeShape).shape
    for i in range(min(int(count), len(shape))):
        out[i] = shape[i]


@api("GetSymbolicDimensions", P, PP, SZ)
def _symbolic_dims(info, out, count):
    for i in range(int(count)):
        out[i] = C.addressof(_EMPTY)


@api("GetTensorShapeElementCount", P, PSZ)
def _element_count(info, out):
    shape = get(info, TypeShape).shape
    out[0] = int(np.prod(shape, dtype=np.int64)) if all(d >= 0 for d in shape) else 0


@api("GetTensorMutableData", P, PP)
def _mutable_data(value, out):
    v = get(value, Value)
    if v.etype == STRING_TYPE:
        raise ApiError(ORT_NOT_IMPLEMENTED, "nnplug holds string tensors as Python objects, "
                                            "not std::string: read them with "
                                            "GetStringTensorContent/GetStringTensorElement and "
                                            "write them with FillStringTensor")
    out[0] = v.array.ctypes.data if v.array.size else None


@api("CreateTensorAsOrtValue", P, C.POINTER(C.c_int64), SZ, C.c_int, PP)
def _create_tensor(allocator, dims, count, etype, out):
    dtype = numpy_dtype(etype)
    if dtype is None:
        raise ApiError(ORT_NOT_IMPLEMENTED, f"element type {etype}")
    shape = tuple(int(dims[i]) for i in range(count))
    arr = np.full(shape, "", dtype=object) if dtype.kind == "O" else np.zeros(shape, dtype)
    out[0] = new_handle(Value(arr, int(etype)))


@api("CreateTensorWithDataAsOrtValue", P, P, SZ, C.POINTER(C.c_int64), SZ, C.c_int, PP)
def _create_tensor_with_data(info, data, length, dims, count, etype, out):
    dtype = numpy_dtype(etype)
    if dtype is None or dtype.kind == "O":
        raise ApiError(ORT_NOT_IMPLEMENTED, f"element type {etype} over caller memory")
    shape = tuple(int(dims[i]) for i in range(count))
    n = int(np.prod(shape, dtype=np.int64))
    if n * dtype.itemsize > length:
        raise ApiError(ORT_INVALID_ARGUMENT, f"{length} bytes hold fewer than {n} elements")
    raw = (C.c_char * max(n * dtype.itemsize, 1)).from_address(data) if data else None
    arr = np.frombuffer(raw, dtype=dtype, count=n).reshape(shape) if n else np.zeros(shape,
                                                                                     dtype)
    out[0] = new_handle(Value(arr, int(etype)))


@api("ReleaseValue", P, restype=None)
def _release_value(value):
    drop_handle(value)


# string tensors (UTF-8 bytes on the C side, str in the object arrays)
def _string_value(value) -> Value:
    v = get(value, Value)
    if v.etype != STRING_TYPE:
        raise ApiError(ORT_INVALID_ARGUMENT, "not a string tensor")
    return v


def _utf8(s) -> bytes:
    return s if isinstance(s, bytes) else str(s).encode("utf-8")


@api("GetStringTensorDataLength", P, PSZ)
def _string_length(value, out):
    v = _string_value(value)
    v.settle()
    out[0] = sum(len(_utf8(s)) for s in v.array.reshape(-1))


@api("GetStringTensorContent", P, P, SZ, PSZ, SZ)
def _string_content(value, s, s_len, offsets, offsets_len):
    v = _string_value(value)
    v.settle()
    items = [_utf8(x) for x in v.array.reshape(-1)]
    if offsets_len != len(items):
        raise ApiError(ORT_FAIL, f"offsets buffer is not equal to tensor size "
                                 f"({offsets_len} != {len(items)})")
    blob = b"".join(items)
    if s_len < len(blob):
        raise ApiError(ORT_FAIL, "output buffer is too small. Use GetStringTensorDataLength.")
    at = 0
    for i, item in enumerate(items):
        offsets[i] = at
        at += len(item)
    if blob:
        C.memmove(s, blob, len(blob))


@api("GetStringTensorElementLength", P, SZ, PSZ)
def _string_element_length(value, index, out):
    v = _string_value(value)
    v.settle()
    out[0] = len(_utf8(v.array.reshape(-1)[index]))


@api("GetStringTensorElement", P, SZ, SZ, P)
def _string_element(value, s_len, index, s):
    v = _string_value(value)
    v.settle()
    item = _utf8(v.array.reshape(-1)[index])
    if s_len < len(item):
        raise ApiError(ORT_FAIL, "buffer size is too small for string element")
    if item:
        C.memmove(s, item, len(item))


@api("FillStringTensor", P, C.POINTER(C.c_char_p), SZ)
def _fill_strings(value, s, count):
    v = _string_value(value)
    flat = v.array.reshape(-1)
    if count > flat.size:
        raise ApiError(ORT_INVALID_ARGUMENT, f"{count} strings for a tensor of {flat.size}")
    for i in range(count):
        flat[i] = s[i] or b""


@api("FillStringTensorElement", P, C.c_char_p, SZ)
def _fill_string(value, s, index):
    v = _string_value(value)
    v.string_buffers.pop(index, None)
    v.array.reshape(-1)[index] = s or b""


@api("GetResizedStringTensorElementBuffer", P, SZ, SZ, PP)
def _resized_string_buffer(value, index, length, out):
    v = _string_value(value)
    buf = (C.c_char * max(int(length), 1))()
    v.string_buffers[int(index)] = buf if length else (C.c_char * 0)()
    out[0] = C.addressof(buf)


# custom op domains
@api("CreateCustomOpDomain", C.c_char_p, PP)
def _create_domain(name, out):
    out[0] = new_handle(Domain((name or b"").decode()))


@api("CustomOpDomain_Add", P, P)
def _domain_add(domain, op):
    if not op:
        raise ApiError(ORT_INVALID_ARGUMENT, "NULL OrtCustomOp")
    get(domain, Domain).ops.append(op)


@api("AddCustomOpDomain", P, P)
def _add_domain(options, domain):
    get(options, SessionOptions).domains.append(get(domain, Domain))


@api("ReleaseCustomOpDomain", P, restype=None)
def _release_domain(domain):
    drop_handle(domain)  # its ops were copied out when the library registered


# logging
_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


@api("Logger_LogMessage", P, C.c_int, C.c_char_p, C.c_char_p, C.c_int, C.c_char_p)
def _log_message(logger, severity, message, file, line, func):
    level = _LEVELS[min(max(int(severity), 0), 4)]
    log.log(level, "%s (%s:%d %s)", (message or b"").decode("utf-8", "replace"),
            (file or b"").decode(), line, (func or b"").decode())


@api("Logger_GetLoggingSeverityLevel", P, C.POINTER(C.c_int))
def _log_level(logger, out):
    level = log.getEffectiveLevel()
    out[0] = next((i for i, lv in enumerate(_LEVELS) if lv >= level), 4)


@api("GetBuildInfoString", restype=P)
def _build_info():
    return C.addressof(_BUILD_INFO)


_LOGGER = new_handle(Logger())
_EMPTY = C.create_string_buffer(b"")
_BUILD_INFO = C.create_string_buffer(b"nnplug onnxruntime custom-op host, API " +
                                     VERSION_STRING)


# -- the table -----------------------------------------------------------------------------------
def _unimplemented(name: str, returns_status: bool):
    def call():
        log.error("nnplug: a custom-op library called OrtApi::%s, which nnplug does not "
                  "implement", name)
        called_unimplemented.append(name)
        if returns_status:
            return make_status(ORT_NOT_IMPLEMENTED,
                               f"OrtApi::{name} is not implemented by nnplug's onnxruntime "
                               f"custom-op host")
        return None
    return C.CFUNCTYPE(C.c_void_p)(call)


called_unimplemented: list[str] = []
"""Names of unimplemented slots called so far (newest last)."""

_callbacks = []
_table = _never_freed(C.c_void_p * len(SLOTS))
for _i, _name in enumerate(SLOTS):
    if _name in _impls:
        _restype, _argtypes, _fn = _impls[_name]
        _cb = C.CFUNCTYPE(C.c_void_p if _restype is S else _restype, *_argtypes)(
            _wrap(_name, _restype, _fn))
    else:
        _cb = _unimplemented(_name, _name not in NOT_STATUS)
    _callbacks.append(_cb)
    _table[_i] = C.cast(_cb, C.c_void_p).value
TABLE_ADDRESS = C.addressof(_table)
IMPLEMENTED = frozenset(_impls)


def _quiet_at_exit() -> None:
    """Point every slot (and the allocator's members) at a native function that does nothing
    and returns 0: a library's static destructors run after Python has finalized (releasing
    its domains, freeing what it allocated), when no Python callback may run."""
    nothing = C.cast(_libc.sched_yield, C.c_void_p).value
    for i in range(len(SLOTS)):
        _table[i] = nothing
    for member in (OrtAllocator.Free, OrtAllocator.Alloc, OrtAllocator.Info):
        C.c_void_p.from_address(ALLOCATOR_ADDRESS + member.offset).value = nothing


atexit.register(_quiet_at_exit)


def _get_api(version):
    if 1 <= version <= MAX_API_VERSION:
        return TABLE_ADDRESS
    log.error("nnplug: a custom-op library asked for OrtApi version %d; nnplug's table has "
              "onnxruntime's layout up to version %d", version, MAX_API_VERSION)
    return None


MAX_API_VERSION = 28  # the newest version whose slots _ort_api_slots lists


class OrtApiBase(C.Structure):
    _fields_ = [("GetApi", C.CFUNCTYPE(C.c_void_p, C.c_uint32)),
                ("GetVersionString", C.CFUNCTYPE(C.c_void_p))]


_VERSION = C.create_string_buffer(VERSION_STRING)
API_BASE = OrtApiBase(OrtApiBase._fields_[0][1](_get_api),
                      OrtApiBase._fields_[1][1](lambda: C.addressof(_VERSION)))


def status_result(status: int | None) -> tuple[int, str] | None:
    """``(code, message)`` of a status a library returned (released here); None for OK."""
    if not status:
        return None
    obj = _objects.get(status)
    if isinstance(obj, Status):
        drop_handle(status)
        return obj.code, obj.message.value.decode("utf-8", "replace")
    return ORT_FAIL, f"an OrtStatus at {hex(status)} that nnplug did not create"


__all__ = ["API_BASE", "API_VERSION", "KernelContext", "KernelInfo", "SessionOptions",
           "Value", "element_type", "numpy_dtype", "status_result"]

"""onnxruntime's ``OrtValue`` and ``OrtValueVector`` over nnplug's values.

An OrtValue holds an :class:`nnplug.Tensor` (host memory shared with the numpy array it
came from, as in onnxruntime; or memory on a backend's device), a list of OrtValues (a
sequence), a :class:`SparseTensor`, or nothing (an empty optional). One class serves both
onnxruntime layers: ``ortvalue._ortvalue`` and ``ortvalue._get_c_value()`` are the value
itself, and ``capi._pybind_state.OrtValue`` is this class.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..device import device as parse_device
from ..errors import NnplugError
from ..tensor import Tensor
from ..values import NONE, TensorSequence
from ._devices import OrtDevice
from ._errors import OrtRuntimeError
from ._sparse import SparseTensor
from ._types import element_type_of, np_dtype_of, type_name


def _tensor_on(array: np.ndarray, device_name: str, device_id: int) -> Tensor:
    t = Tensor.from_numpy(array)
    if device_name in ("cpu", None):
        return t
    try:
        return t.to(parse_device(device_name, device_id))
    except NnplugError:
        raise OrtRuntimeError(
            f"Can't allocate memory on the device using this package of OnnxRuntime: no "
            f"nnplug backend for device {device_name!r} is loaded (install one, or use 'cpu')"
        ) from None


def _device_args(device_type, device_id):
    if isinstance(device_type, OrtDevice):  # the capi layer's form
        return device_type.name, device_type.device_id()
    return str(device_type).lower(), int(device_id)


class OrtValue:
    """A value given to or returned by a session (see the module docstring)."""

    def __init__(self, ortvalue=None, numpy_obj=None):
        if isinstance(ortvalue, OrtValue):
            ortvalue = ortvalue._value
        self._value = NONE if ortvalue is None else ortvalue
        self._numpy_obj = numpy_obj  # keeps the memory of a shared array alive

    # -- construction ---------------------------------------------------------------------
    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id: int = 0,
                            vendor_id: int = -1) -> OrtValue:
        """A tensor sharing ``numpy_obj``'s memory (on the CPU), or a copy on a device."""
        arr = np.asarray(numpy_obj)
        if arr.dtype.kind in "USO":
            raise OrtRuntimeError("Creation of OrtValues is currently only supported from "
                                  "non-string numpy arrays")
        name, index = _device_args(device_type, device_id)
        return OrtValue(_tensor_on(arr, name, index), arr if name == "cpu" else None)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data, onnx_element_type: int) -> OrtValue:
        """``data``'s bytes as a tensor of the ONNX element type (e.g. float16 from uint16)."""
        arr = np.ascontiguousarray(data)
        dtype = np_dtype_of(onnx_element_type)
        if dtype.itemsize != arr.dtype.itemsize:
            raise OrtRuntimeError(f"ONNX element type {onnx_element_type} takes "
                                  f"{dtype.itemsize}-byte elements; the array has "
                                  f"{arr.dtype.itemsize}-byte {arr.dtype}")
        return OrtValue(Tensor.from_numpy(arr.view(dtype)), arr)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id: int = 0,
                                     vendor_id: int = -1) -> OrtValue:
        """An uninitialised tensor; ``element_type`` a numpy type or an ONNX element type."""
        dtype = np_dtype_of(element_type) if isinstance(element_type, int) else \
            np.dtype(element_type)
        name, index = _device_args(device_type, device_id)
        return OrtValue(_tensor_on(np.empty([int(d) for d in shape], dtype), name, index))

    ortvalue_from_shape_and_onnx_type = ortvalue_from_shape_and_type

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: SparseTensor) -> OrtValue:
        return OrtValue(sparse_tensor)

    @staticmethod
    def from_dlpack(data, is_bool_tensor: bool = False) -> OrtValue:
        """A tensor sharing a DLPack producer's (or capsule's) host memory."""
        arr = np.from_dlpack(data if hasattr(data, "__dlpack__") else _Capsule(data))
        if is_bool_tensor and arr.dtype == np.uint8:
            arr = arr.view(np.bool_)
        return OrtValue(Tensor.from_numpy(arr), arr)

    # -- the value ------------------------------------------------------------------------
    def _get_c_value(self) -> OrtValue:
        return self

    @property
    def _ortvalue(self) -> OrtValue:
        return self

    def _tensor(self) -> Tensor:
        if not isinstance(self._value, Tensor):
            raise OrtRuntimeError(f"the OrtValue is not a tensor (it is {self.data_type()})")
        return self._value

    def as_sparse_tensor(self) -> SparseTensor:
        if not isinstance(self._value, SparseTensor):
            raise OrtRuntimeError("the OrtValue is not a sparse tensor")
        return self._value

    def has_value(self) -> bool:
        return self._value is not NONE

    def is_tensor(self) -> bool:
        return isinstance(self._value, Tensor)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._value, SparseTensor)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list)

    def data_type(self) -> str:
        v = self._value
        if isinstance(v, SparseTensor):
            return v.data_type()
        if isinstance(v, list):
            return f"seq({v[0].data_type() if v else 'tensor(undefined)'})"
        if v is NONE:
            return "optional(undefined)"
        return f"tensor({type_name(v.dtype)})"

    def element_type(self) -> int:
        return element_type_of(self._tensor().dtype)

    def shape(self) -> list[int]:
        if isinstance(self._value, SparseTensor):
            return self._value.dense_shape()
        return list(self._tensor().shape)

    def device_name(self) -> str:
        if isinstance(self._value, SparseTensor):
            return self._value.device_name()
        t = self._tensor()
        return "cpu" if t.is_host else t.device.type_name

    def data_ptr(self) -> int:
        t = self._tensor()
        if t.is_host:
            return int(t.handle.ctypes.data)
        return int(getattr(t.handle, "value", t.handle) or 0) + t.byte_offset

    def tensor_size_in_bytes(self) -> int:
        t = self._tensor()
        if t.dtype == object:
            raise OrtRuntimeError("tensor_size_in_bytes: a string tensor has no fixed size")
        return t.nbytes

    def numpy(self):
        """The data: a numpy array sharing the memory of a CPU tensor (a copy from a
        device); a list for a sequence; None for an empty optional."""
        v = self._value
        if isinstance(v, list):
            return [x.numpy() for x in v]
        if v is NONE:
            return None
        if isinstance(v, SparseTensor):
            raise OrtRuntimeError("numpy() of a sparse tensor: use as_sparse_tensor()")
        return v.numpy()

    def update_inplace(self, np_arr) -> None:
        """Copy ``np_arr`` (same shape and type) into the tensor's memory."""
        t = self._tensor()
        arr = np.ascontiguousarray(np_arr, dtype=t.dtype)
        if arr.shape != t.shape:
            raise OrtRuntimeError(f"update_inplace: shape {list(arr.shape)} differs from the "
                                  f"tensor's {list(t.shape)}")
        if t.is_host:
            np.copyto(t.handle, arr)
        else:
            t.api.copy_data_from_to(arr, 0, t.handle, t.byte_offset, t.nbytes,
                                    parse_device("cpu"), t.device)

    # -- DLPack ---------------------------------------------------------------------------
    def to_dlpack(self):
        return self._tensor().__dlpack__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._tensor().__dlpack__(stream=stream, max_version=max_version,
                                         dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._tensor().__dlpack_device__()

    # -- nnplug ---------------------------------------------------------------------------
    def feed(self):
        """What nnplug's Network takes for this value."""
        v = self._value
        if isinstance(v, list):
            return TensorSequence([x.feed() for x in v])
        if isinstance(v, SparseTensor):
            raise OrtRuntimeError("nnplug runs no sparse tensor inputs; densify it first")
        return None if v is NONE else v

    @staticmethod
    def of(value) -> OrtValue:
        """An nnplug result (Tensor, sequence, empty optional) as an OrtValue."""
        if isinstance(value, TensorSequence):
            return OrtValue([OrtValue(t) for t in value.items])
        return OrtValue(value)

    def __repr__(self):
        return f"<OrtValue {self.data_type()} {self.shape() if self.is_tensor() else ''}>"


class OrtValueVector(list):
    """A list of OrtValues (``run_with_ort_values`` returns one)."""

    def push_back(self, value: OrtValue) -> None:
        self.append(value)

    def reserve(self, n: int) -> None:
        """Nothing to reserve in a Python list."""

    def shrink_to_fit(self) -> None:
        """Nothing to shrink in a Python list."""

    def numpy_at(self, i: int):
        return self[i].numpy()

    def element_type_at(self, i: int) -> int:
        return self[i].element_type()

    def data_ptr(self, i: int) -> int:
        return self[i].data_ptr()

    def to_dlpacks(self) -> list:
        return [v.to_dlpack() for v in self]


# -- DLPack capsules -------------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                         ctypes.c_char_p]


def _dl_tensor(capsule) -> _DLTensor:
    name = _capsule_name(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise OrtRuntimeError(f"not an unconsumed DLPack capsule (its name is {name!r})")
    ptr = _capsule_pointer(capsule, name)
    if name == b"dltensor_versioned":  # DLManagedTensorVersioned: version, ctx, deleter, flags
        ptr += 8 + 2 * ctypes.sizeof(ctypes.c_void_p) + 8
    return _DLTensor.from_address(ptr)


def is_dlpack_uint8_tensor(capsule) -> bool:
    """Whether a DLPack capsule holds uint8 data (onnxruntime's check before a bool import)."""
    dt = _dl_tensor(capsule).dtype
    return dt.code == 1 and dt.bits == 8  # kDLUInt, 8 bits


class _Capsule:
    """A DLPack capsule as a producer numpy can import."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack_device__(self):
        d = _dl_tensor(self._capsule).device
        return (d.device_type, d.device_id)

    def __dlpack__(self, **kwargs):
        return self._capsule


__all__ = ["OrtValue", "OrtValueVector", "is_dlpack_uint8_tensor"]

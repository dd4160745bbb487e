"""Tensors: an n-d array on some device, with DLPack exchange.

Host tensors wrap a numpy array without copying; device tensors hold an opaque
data-space handle of the device API that allocated them.
"""

from __future__ import annotations

import numpy as np

from .device import CPU, Device
from .device_api import DeviceAPI, HostDeviceAPI
from .errors import ArgumentTypeError, InvalidArgumentError, TensorExportError

HOST_API = HostDeviceAPI()


def as_contiguous(array) -> np.ndarray:
    """A C-contiguous array, copying only when needed; unlike np.ascontiguousarray it
    keeps 0-d arrays 0-d."""
    arr = np.asarray(array)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class Tensor:
    __slots__ = ("handle", "shape", "dtype", "device", "api", "byte_offset", "__weakref__")

    def __init__(self, handle, shape, dtype, device: Device = CPU, api: DeviceAPI | None = None,
                 byte_offset: int = 0):
        self.handle = handle
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.api = api if api is not None else HOST_API
        self.byte_offset = byte_offset

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, array) -> Tensor:
        """Wrap a host array without copying (a copy only if it is not C-contiguous)."""
        arr = array if type(array) is np.ndarray else np.asarray(array)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        t = cls.__new__(cls)  # a numpy shape is a tuple of ints already: nothing to convert
        t.handle, t.shape, t.dtype, t.device, t.api, t.byte_offset = \
            arr, arr.shape, arr.dtype, CPU, HOST_API, 0
        return t

    @classmethod
    def empty(cls, shape, dtype, device: Device = CPU, api: DeviceAPI | None = None) -> Tensor:
        if device.device_type == CPU.device_type:  # host memory is always a numpy array
            return cls.from_numpy(np.empty(shape, dtype))
        if api is None:
            raise InvalidArgumentError(f"Tensor.empty on {device}: pass the device API that owns it")
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return cls(api.alloc_data_space(device, max(nbytes, 1), dtype=dtype), shape, dtype, device, api)

    # -- properties --------------------------------------------------------------------
    @property
    def is_host(self) -> bool:
        return isinstance(self.handle, np.ndarray)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    # -- data movement -----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a numpy array: a view for host tensors, a copy otherwise."""
        if self.is_host:
            return self.handle
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self.api.copy_data_from_to(self.handle, self.byte_offset, out, 0, self.nbytes,
                                       self.device, CPU)
        return out

    def to(self, device: Device | str, api: DeviceAPI | None = None) -> Tensor:
        """A copy on ``device`` (self when already there). For a non-host target pass its
        device API, or let the core find ``device_api.<type name>``."""
        from .device import device as parse_device

        device = parse_device(device)
        if device == self.device:
            return self
        if device.device_type == CPU.device_type:
            return Tensor.from_numpy(self.numpy())
        api = api or _lookup_api(device)
        out = Tensor.empty(self.shape, self.dtype, device, api)
        if self.nbytes:
            if self.is_host:
                api.copy_data_from_to(self.handle, 0, out.handle, 0, self.nbytes, CPU, device)
            elif self.api is api:
                api.copy_data_from_to(self.handle, self.byte_offset, out.handle, 0, self.nbytes,
                                      self.device, device)
            else:  # two different device APIs: stage through the host
                api.copy_data_from_to(self.numpy(), 0, out.handle, 0, self.nbytes, CPU, device)
        return out

    # -- DLPack ------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device.device_type, self.device.index)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if self.is_host:
            kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device),
                                        ("copy", copy)) if v is not None}
            return self.handle.__dlpack__(stream=stream, **kwargs)
        export = getattr(self.api, "dlpack_capsule", None)
        if export is None:
            raise TensorExportError(
                f"DLPack export from {self.device} is not supported by its backend; "
                f"use .numpy() or .to('cpu') first"
            )
        return export(self, stream=stream, max_version=max_version, dl_device=dl_device,
                      copy=copy)


def from_dlpack(obj) -> Tensor:
    """A Tensor sharing memory with any DLPack producer (numpy, torch, ...) on the host."""
    if isinstance(obj, Tensor):
        return obj
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        raise ArgumentTypeError(f"from_dlpack: {type(obj).__name__} does not implement __dlpack__")
    dev_type, _ = dev()
    if int(dev_type) != CPU.device_type:
        raise TensorExportError(
            f"from_dlpack: device type {int(dev_type)} is not host memory; copy it to the CPU "
            f"first (nnplug imports host tensors without a copy)"
        )
    arr = np.from_dlpack(obj)
    return Tensor(arr, arr.shape, arr.dtype)


def _lookup_api(device: Device) -> DeviceAPI:
    from .registry import get_func

    factory = get_func(f"device_api.{device.type_name}", allow_missing=True)
    if factory is None:
        raise InvalidArgumentError(
            f"no device API registered for {device}: load a Runtime with a backend for it first"
        )
    return factory()

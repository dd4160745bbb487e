"""Data-space and workspace handles of native backends (NativeBuffer) and the device struct
the ABI takes: shared by the device API (nnplug.native.backend) and the plans built on it
(nnplug.native.plan), and the tensor descriptions their calls take."""

from __future__ import annotations

import ctypes as C
import weakref

from ..device import Device
from ..errors import ArgumentTypeError, InvalidArgumentError
from . import abi


def cdev(dev: Device) -> abi.Device:
    return abi.Device(dev.device_type, dev.index)


_DL_DTYPES: dict = {}  # numpy dtype -> its abi.DType, found once (kernels are filled per run)


def fill_tensor(t: abi.Tensor, dev: Device, shape, dtype, keep: list) -> None:
    """Describe a compact tensor of ``shape`` and ``dtype`` on ``dev`` in ``t`` (its data is
    the caller's to set); ``keep`` holds the shape array for as long as ``t`` is used."""
    t.device = cdev(dev)
    t.ndim = len(shape)
    dl = _DL_DTYPES.get(dtype)
    if dl is None:
        dl = _DL_DTYPES[dtype] = abi.dtype_of(dtype)
    t.dtype = dl  # a ctypes structure member: assigned by value
    if shape:
        arr = (C.c_int64 * len(shape))(*shape)
        keep.append(arr)
        t.shape = arr


# An array's address through ctypes' view of its buffer is several times cheaper than
# ``a.ctypes.data``, which stays for read-only and empty arrays (no writable byte to view) and
# dtypes the buffer protocol lacks (bfloat16, float8 from ml_dtypes).
addressof = C.addressof
from_buffer = C.c_char.from_buffer


def address_of(a) -> int:
    """The address of a numpy array's first byte (see above)."""
    try:
        return addressof(from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _free_buffer(lib, ptr, dev, workspace, held):
    try:
        if lib.loaded:
            fn = lib.table.free_workspace if workspace else lib.table.free_data_space
            fn(abi.Device(dev.device_type, dev.index), ptr)
    finally:
        if held:
            lib.drop()


class NativeBuffer:
    """A data-space (or workspace) handle of a native backend. Freed by ``free_data_space``
    (``free_workspace``) or, failing that, when garbage-collected."""

    __slots__ = ("ptr", "nbytes", "device", "lib", "_finalizer", "__weakref__")

    def __init__(self, lib, ptr: int, nbytes: int, device: Device, workspace: bool = False,
                 held: bool = True):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.lib = lib
        if held:  # pooled workspaces do not keep the library loaded: the pool is emptied first
            lib.hold()
        self._finalizer = weakref.finalize(self, _free_buffer, lib, ptr, device, workspace, held)

    def free(self) -> None:
        self._finalizer()

    @property
    def freed(self) -> bool:
        return not self._finalizer.alive

    @property
    def __array_interface__(self):
        if not self.lib.host_visible:
            raise ArgumentTypeError(
                f"memory of backend {self.lib.id!r} is not host-visible; copy it to the host "
                f"with Tensor.numpy()"
            )
        if self.freed:
            raise InvalidArgumentError("buffer was freed")
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3}

    def __repr__(self):
        return f"NativeBuffer({self.lib.id}, {self.nbytes} bytes on {self.device})"

"""onnxruntime's ``SparseTensor`` (COO and CSR(C) formats) on the host. nnplug's backends
run dense tensors: a sparse tensor is a value to build, inspect and hand on."""

from __future__ import annotations

import enum

import numpy as np

from ._errors import OrtRuntimeError
from ._types import type_name


class OrtSparseFormat(enum.IntEnum):
    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


def _frozen(a, dtype=None) -> np.ndarray:
    out = np.array(a, dtype=dtype, copy=True)  # the tensor owns its data, read-only views out
    out.flags.writeable = False
    return out


class _IndicesView:
    def __init__(self, *arrays):
        self._arrays = arrays

    def indices(self) -> np.ndarray:
        return self._arrays[0]

    def inner(self) -> np.ndarray:
        return self._arrays[0]

    def outer(self) -> np.ndarray:
        return self._arrays[1]


class SparseTensor:
    """A sparse tensor: dense shape, non-zero values and their indices."""

    def __init__(self, fmt: OrtSparseFormat, dense_shape, values, *indices, device=None):
        self._format = OrtSparseFormat(fmt)
        self._shape = [int(d) for d in dense_shape]
        values = np.asarray(values)
        self._values = _frozen(values, object if values.dtype.kind in "US" else None)
        self._kind = values.dtype
        self._indices = [_frozen(i, np.int64) for i in indices]
        self._device = device

    @staticmethod
    def sparse_coo_from_numpy(dense_shape, values, coo_indices, ort_device=None) -> SparseTensor:
        """COO: ``coo_indices`` linear (one per value) or 2-D (one row per value)."""
        _on_cpu(ort_device)
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_COO, dense_shape, values, coo_indices,
                            device=ort_device)

    @staticmethod
    def sparse_csr_from_numpy(dense_shape, values, inner_indices, outer_indices,
                              ort_device=None) -> SparseTensor:
        """CSR: ``inner_indices`` the column of each value, ``outer_indices`` the row starts."""
        _on_cpu(ort_device)
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_CSRC, dense_shape, values, inner_indices,
                            outer_indices, device=ort_device)

    def format(self) -> OrtSparseFormat:
        return self._format

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def data_type(self) -> str:
        return f"sparse_tensor({type_name(self._kind)})"

    def device_name(self) -> str:
        return "cpu"

    def values(self) -> np.ndarray:
        return self._values

    def as_coo_view(self) -> _IndicesView:
        self._expect(OrtSparseFormat.ORT_SPARSE_COO)
        return _IndicesView(*self._indices)

    def as_csrc_view(self) -> _IndicesView:
        self._expect(OrtSparseFormat.ORT_SPARSE_CSRC)
        return _IndicesView(*self._indices)

    def as_blocksparse_view(self) -> _IndicesView:
        self._expect(OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE)
        return _IndicesView(*self._indices)

    def to_cuda(self, ort_device=None) -> SparseTensor:
        raise OrtRuntimeError("Cuda is not available in this build: nnplug has no CUDA "
                              "backend; sparse tensors stay on the CPU")

    def _expect(self, fmt: OrtSparseFormat) -> None:
        if self._format != fmt:
            raise OrtRuntimeError(f"the sparse tensor is {self._format.name}, not {fmt.name}")


def _on_cpu(ort_device) -> None:
    if ort_device is not None and ort_device.device_type() != 0:
        raise OrtRuntimeError("sparse tensors are built on the CPU here; use "
                              "OrtDevice.make('cpu', 0)")


__all__ = ["OrtSparseFormat", "SparseTensor"]

"""Node descriptors (``nnp_node_desc``) built from nnplug graph nodes.

A :class:`DescBuilder` owns every buffer its descriptors point to; keep it alive for as long
as the backend may read them (one call: the descriptors are valid during that call only).
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from ..graph import Node
from ..tensor import as_contiguous
from . import abi, string_tensors

_INT64 = abi.DType(0, 64, 1)
_FLOAT32 = abi.DType(2, 32, 1)
_UINT8 = abi.DType(1, 8, 1)
_HANDLE = abi.DType(3, 64, 1)


class DescBuilder:
    def __init__(self, values: dict, constants: dict):
        self.values = values
        self.constants = constants
        self._keep: list = []
        self._built: dict[int, tuple[Node, abi.NodeDesc]] = {}  # id(node) -> its descriptor

    def _hold(self, obj):
        self._keep.append(obj)
        return obj

    def _shape(self, dims) -> C.Array:
        return self._hold((C.c_int64 * max(len(dims), 1))(*dims))

    # -- values ----------------------------------------------------------------------------
    def value(self, name: str, out: abi.ValueDesc) -> None:
        out.name = self._hold(name.encode())
        if not name:
            out.ndim = 0
            return
        const = self.constants.get(name)
        if const is not None:
            arr = self._hold(as_contiguous(const))
            out.dtype = abi.dtype_of(arr.dtype)
            out.ndim = arr.ndim
            out.shape = self._shape(arr.shape)
            if string_tensors.is_string(arr.dtype):  # an nnp_string array (ABI 1.3)
                packed = self._hold(string_tensors.pack(arr, f"constant {name!r}"))
                out.const_data = packed.address if packed.nbytes else None
                out.const_nbytes = packed.nbytes
                return
            out.const_data = arr.ctypes.data if arr.nbytes else None
            out.const_nbytes = arr.nbytes
            return
        info = self.values.get(name)
        dtype = getattr(info, "dtype", None)
        shape = getattr(info, "shape", None)
        out.dtype = abi.dtype_of(dtype)
        if shape is None:
            out.ndim = -1
        else:
            out.ndim = len(shape)
            out.shape = self._shape([d if isinstance(d, int) and d >= 0 else -1 for d in shape])

    # -- attributes ------------------------------------------------------------------------
    def attr(self, name: str, value, type_: int | None, out: abi.Attr) -> None:
        out.name = self._hold(name.encode())
        if type_ is None:
            type_ = _infer_type(value)
        out.type = type_
        if type_ == abi.ATTR_INT:
            self._array(np.asarray([int(value)], np.int64), out, 0)
        elif type_ == abi.ATTR_FLOAT:
            self._array(np.asarray([float(value)], np.float32), out, 0)
        elif type_ == abi.ATTR_INTS:
            self._array(np.asarray(list(value), np.int64).reshape(-1), out, 1)
        elif type_ == abi.ATTR_FLOATS:
            self._array(np.asarray(list(value), np.float32).reshape(-1), out, 1)
        elif type_ == abi.ATTR_STRING:
            raw = value.encode() if isinstance(value, str) else bytes(value)
            buf = self._hold(C.create_string_buffer(raw))
            out.dtype, out.count, out.data = _UINT8, len(raw), C.addressof(buf)
            out.ndim, out.shape = 1, self._shape([len(raw)])
        elif type_ == abi.ATTR_STRINGS:
            items = self._hold([v.encode() if isinstance(v, str) else bytes(v) for v in value])
            arr = self._hold((C.c_char_p * max(len(items), 1))(*items))
            out.dtype, out.count = _HANDLE, len(items)
            out.data = C.addressof(arr) if items else None
            out.ndim, out.shape = 1, self._shape([len(items)])
        elif type_ == abi.ATTR_TENSOR and isinstance(value, np.ndarray) \
                and string_tensors.is_string(value.dtype):  # nnp_string elements (ABI 1.3)
            packed = self._hold(string_tensors.pack(value, f"attribute {name!r}"))
            out.dtype, out.count = abi.dtype_of(value.dtype), value.size
            out.data = packed.address if value.size else None
            out.ndim, out.shape = value.ndim, self._shape(value.shape) if value.ndim else None
        elif type_ == abi.ATTR_TENSOR and isinstance(value, np.ndarray) \
                and abi.is_known(abi.dtype_of(value.dtype)):
            arr = as_contiguous(value)
            self._array(arr, out, arr.ndim)
        else:  # graphs, lists of tensors: not passed
            out.count, out.data = 0, None

    def _array(self, arr: np.ndarray, out: abi.Attr, ndim: int) -> None:
        arr = self._hold(arr)
        out.dtype = abi.dtype_of(arr.dtype)
        out.count = arr.size
        out.data = arr.ctypes.data if arr.size else None
        out.ndim = ndim
        out.shape = self._shape(arr.shape) if ndim else None

    # -- nodes -----------------------------------------------------------------------------
    def node(self, node: Node, out: abi.NodeDesc) -> None:
        out.name = self._hold((node.name or "").encode())
        out.op_type = self._hold(node.op_type.encode())
        out.domain = self._hold(("" if node.domain in ("", "ai.onnx") else node.domain).encode())
        out.opset = int(node.opset or 0)
        types = {}
        if node.proto is not None:
            types = {a.name: int(a.type) for a in node.proto.attribute}
        names = list(node.attrs)
        attrs = self._hold((abi.Attr * max(len(names), 1))())
        for i, name in enumerate(names):
            self.attr(name, node.attrs[name], types.get(name), attrs[i])
        out.num_attrs, out.attrs = len(names), attrs
        ins = self._hold((abi.ValueDesc * max(len(node.inputs), 1))())
        for i, name in enumerate(node.inputs):
            self.value(name, ins[i])
        outs = self._hold((abi.ValueDesc * max(len(node.outputs), 1))())
        for i, name in enumerate(node.outputs):
            self.value(name, outs[i])
        out.num_inputs, out.inputs = len(node.inputs), ins
        out.num_outputs, out.outputs = len(node.outputs), outs

    def nodes(self, nodes: list[Node]):
        """An array of ``nodes``' descriptors. Each node's is built once per builder and
        copied into later arrays: the build stage offers overlapping runs of a partition to
        ``fuse`` from every node on, and building each anew made that quadratic."""
        arr = self._hold((abi.NodeDesc * max(len(nodes), 1))())
        for i, n in enumerate(nodes):
            built = self._built.get(id(n))
            if built is None:
                built = self._built[id(n)] = (n, self._hold(abi.NodeDesc()))  # n keeps its id
                self.node(n, built[1])
            arr[i] = built[1]  # a copy of the struct; what it points to the builder holds
        return arr


def _infer_type(value) -> int:
    if isinstance(value, (bool, int, np.integer)):
        return abi.ATTR_INT
    if isinstance(value, (float, np.floating)):
        return abi.ATTR_FLOAT
    if isinstance(value, (str, bytes)):
        return abi.ATTR_STRING
    if isinstance(value, np.ndarray):
        return abi.ATTR_TENSOR
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (bool, int, np.integer)) for v in value):
            return abi.ATTR_INTS
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
            return abi.ATTR_FLOATS
        if all(isinstance(v, (str, bytes)) for v in value):
            return abi.ATTR_STRINGS
        if all(isinstance(v, np.ndarray) for v in value):
            return abi.ATTR_TENSORS
    return abi.ATTR_GRAPH

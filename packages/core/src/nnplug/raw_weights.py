"""A serialized model's weights as arrays over its own bytes, without a copy.

protobuf hands a tensor's ``raw_data`` out only as a new ``bytes`` object, so reading every
weight through the parsed ModelProto copies the model a second time (a quarter of a second for
BERT-base's 437 MB). The initializers' ``raw_data`` fields sit in the serialized model as they
are, so their offsets are found by walking protobuf's wire format over the few fields that
lead to them (ModelProto.graph -> GraphProto.initializer -> TensorProto.raw_data), skipping
every other field by its length, and each weight becomes a read-only numpy view of the bytes.

Only what needs no conversion is viewed: raw little-endian data of a type numpy holds at its
own width, whose size matches its dims; one whose bytes are not aligned to its element size
(protobuf aligns nothing) is copied once, since kernels read whole elements. Anything else (string tensors, 4-bit and 2-bit types,
external data, data in the typed fields, an unexpected field) is left out, and the caller
reads it from the ModelProto as before."""

from __future__ import annotations

import sys

import numpy as np
import onnx

# Field numbers in onnx.proto3.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 8, 9
_TENSOR_DATA_LOCATION = 14

# Types whose raw bytes numpy reads at their own width (4- and 2-bit ones are packed).
_VIEWABLE = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16, onnx.TensorProto.INT8, onnx.TensorProto.UINT8,
    onnx.TensorProto.INT16, onnx.TensorProto.UINT16, onnx.TensorProto.INT32,
    onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2, onnx.TensorProto.FLOAT8E5M2FNUZ,
}


class _Malformed(Exception):
    pass


def _varint(b: memoryview, i: int) -> tuple[int, int]:
    r = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise _Malformed
        c = b[i]
        i += 1
        r |= (c & 0x7F) << shift
        if c < 0x80:
            return r, i
        shift += 7


def _fields(b: memoryview, start: int, end: int):
    """(field number, wire type, value or start, end or None) of each field in b[start:end]."""
    i = start
    while i < end:
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            yield field, wire, v, None
        elif wire == 2:
            n, i = _varint(b, i)
            if i + n > end:
                raise _Malformed
            yield field, wire, i, i + n
            i += n
        elif wire in (1, 5):
            yield field, wire, i, None
            i += 8 if wire == 1 else 4
        else:  # groups (3, 4) are not in ONNX's protos
            raise _Malformed
    if i != end:
        raise _Malformed


def _tensor(b: memoryview, data, start: int, end: int) -> tuple[str, np.ndarray] | None:
    dims: list[int] = []
    dtype = name = raw = None
    for field, wire, s, e in _fields(b, start, end):
        if field == _TENSOR_DIMS:
            if wire == 0:
                dims.append(s)
            elif wire == 2:  # packed
                i = s
                while i < e:
                    d, i = _varint(b, i)
                    dims.append(d)
        elif field == _TENSOR_DATA_TYPE and wire == 0:
            dtype = s
        elif field == _TENSOR_NAME and wire == 2:
            name = bytes(b[s:e]).decode("utf-8", "replace")
        elif field == _TENSOR_RAW_DATA and wire == 2:
            raw = (s, e)
        elif field == _TENSOR_DATA_LOCATION and wire == 0 and s != 0:
            return None  # external data
    if name is None or raw is None or dtype not in _VIEWABLE:
        return None
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if count * np_dtype.itemsize != raw[1] - raw[0]:
        return None  # the caller's reader says what is wrong with it
    view = np.frombuffer(data, np_dtype, count, raw[0]).reshape(dims)
    if view.ctypes.data % np_dtype.itemsize:  # protobuf aligns nothing: kernels read whole
        view = view.copy()  # elements, so a misaligned one is copied (one memcpy, aligned)
        view.flags.writeable = False
    return name, view


def initializer_views(data: bytes) -> dict[str, np.ndarray]:
    """{name: read-only array over ``data``} for the main graph's initializers that can be
    viewed as they are (see the module); {} where the bytes are not what was expected."""
    if sys.byteorder != "little":
        return {}  # raw_data is little-endian: a big-endian host converts
    b = memoryview(data)
    found: dict[str, np.ndarray] = {}
    twice: set[str] = set()
    try:
        for field, wire, s, e in _fields(b, 0, len(b)):
            if field != _MODEL_GRAPH or wire != 2:
                continue
            for f2, w2, s2, e2 in _fields(b, s, e):
                if f2 == _GRAPH_INITIALIZER and w2 == 2:
                    got = _tensor(b, data, s2, e2)
                    if got is not None:
                        if got[0] in found:
                            twice.add(got[0])
                        found[got[0]] = got[1]
    except _Malformed:
        return {}
    for name in twice:  # a name given twice: the ModelProto's reader says which one counts
        found.pop(name)
    return found

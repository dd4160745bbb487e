"""ONNX element types as onnxruntime names them (``tensor(float)``) and numbers them."""

from __future__ import annotations

import numpy as np

from ._errors import OrtRuntimeError

_NUMBERS = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
            np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
            np.dtype(np.int64): 7, np.dtype(object): 8, np.dtype(np.bool_): 9,
            np.dtype(np.float16): 10, np.dtype(np.float64): 11, np.dtype(np.uint32): 12,
            np.dtype(np.uint64): 13, np.dtype(np.complex64): 14, np.dtype(np.complex128): 15}
_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
          8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64",
          14: "complex64", 15: "complex128", 16: "bfloat16"}


def element_type_of(dtype) -> int:
    """The ONNX element type number of a numpy dtype (ml_dtypes' too, through onnx)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "US":
        return 8
    if dtype in _NUMBERS:
        return _NUMBERS[dtype]
    import onnx

    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(dtype))
    except (KeyError, TypeError, ValueError):
        raise OrtRuntimeError(f"numpy type {dtype} has no ONNX element type") from None


def np_dtype_of(element_type: int) -> np.dtype:
    for dtype, number in _NUMBERS.items():
        if number == element_type:
            return dtype
    import onnx

    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(element_type)))
    except (KeyError, TypeError, ValueError):
        raise OrtRuntimeError(f"unknown ONNX element type {element_type}") from None


def type_name(dtype) -> str:
    """``float`` for float32, ``string`` for str/object... (inside ``tensor(...)``)."""
    number = element_type_of(dtype)
    if number in _NAMES:
        return _NAMES[number]
    import onnx

    return onnx.TensorProto.DataType.Name(number).lower()


__all__ = ["element_type_of", "np_dtype_of", "type_name"]

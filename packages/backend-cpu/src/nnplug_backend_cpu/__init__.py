"""nnplug's native CPU backend.

The backend is the shared object ``libnnplug_backend_cpu.so`` in this package; nnplug loads
it through the ``nnplug.backends`` entry point (``cpu = "nnplug_backend_cpu:library_path"``).
The same file works copied into a dynamic-backends folder.

It depends on nothing but the C library: matrix products run on its own GEMM kernel
(``csrc/gemm.c``), whose results do not depend on the CPU model, the thread count or where an
element sits in its matrix.
"""

from __future__ import annotations

import os

from ._version import __version__

LIBRARY = "libnnplug_backend_cpu.so"

OPS = (
    "Abs", "Add", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip",
    "Concat", "Constant", "ConstantOfShape", "Conv", "Div", "Dropout", "Equal", "Erf", "Exp",
    "Expand", "Flatten", "Floor", "Gather", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "Greater", "Identity", "LRN", "LayerNormalization", "LeakyRelu", "Less", "Log", "LogSoftmax",
    "MatMul", "Max", "MaxPool", "Mean", "Min", "Mod", "Mul", "Neg", "Pad", "Pow", "Reciprocal",
    "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Shape", "Sigmoid", "Slice",
    "Softmax", "Softplus", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Transpose",
    "Unsqueeze", "Where",
)
"""The ONNX op types the backend runs (default domain; dtypes and attributes as documented in
docs/backends/cpu.md)."""

__all__ = ["LIBRARY", "OPS", "__version__", "library_path"]


def library_path() -> str:
    """Path of the backend's shared object (what the entry point hands to nnplug)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"nnplug-backend-cpu was installed without its native library {LIBRARY} (no C "
            f"compiler when it was built); install a C compiler and reinstall with "
            f"`pip install --force-reinstall --no-binary nnplug-backend-cpu nnplug-backend-cpu`"
        )
    return path

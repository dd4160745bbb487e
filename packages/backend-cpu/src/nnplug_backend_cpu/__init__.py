"""nnplug's native CPU backend.

The backend is the shared object ``libnnplug_backend_cpu.so`` in this package; nnplug loads
it through the ``nnplug.backends`` entry point (``cpu = "nnplug_backend_cpu:library_path"``).
The same file works copied into a dynamic-backends folder.

It needs OpenBLAS (``libscipy_openblas.so`` from the ``scipy-openblas32`` package) at run
time. :func:`library_path` points the backend at the installed copy through the
``NNPLUG_CPU_OPENBLAS`` environment variable (unless already set), so a pip install works
with no setup.
"""

from __future__ import annotations

import os

from ._version import __version__

LIBRARY = "libnnplug_backend_cpu.so"
OPENBLAS_ENV = "NNPLUG_CPU_OPENBLAS"

OPS = (
    "Abs", "Add", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip",
    "Col2Im", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose",
    "DFT", "DequantizeLinear", "Det", "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Equal",
    "Erf", "Exp", "Expand", "Flatten", "Floor", "GRU", "Gather", "Gelu", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GridSample", "GroupNormalization",
    "Identity", "InstanceNormalization", "LRN", "LSTM", "LayerNormalization", "LeakyRelu", "Less",
    "Log", "LogSoftmax", "LpNormalization", "MatMul", "MatMulInteger", "Max", "MaxPool",
    "MaxRoiPool", "MaxUnpool", "Mean", "Min", "Mod", "Mul", "Neg", "NonMaxSuppression", "Pad",
    "Pow", "QLinearConv", "QLinearMatMul", "QuantizeLinear", "RNN", "Reciprocal", "ReduceL1",
    "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "RoiAlign", "STFT", "Shape",
    "Sigmoid", "Slice", "Softmax", "Softplus", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh",
    "Transpose", "Unsqueeze", "Upsample", "Where",
)
"""The ONNX op types the backend runs (default domain; dtypes and attributes as documented in
docs/backends/cpu.md)."""

__all__ = ["LIBRARY", "OPENBLAS_ENV", "OPS", "__version__", "library_path", "openblas_path"]


def openblas_path() -> str | None:
    """The installed ``libscipy_openblas.so``, or None when scipy-openblas32 is missing."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    lib_dir = scipy_openblas32.get_lib_dir()
    name = scipy_openblas32.get_library(fullname=True)
    path = os.path.join(lib_dir, name)
    return path if os.path.isfile(path) else None


def library_path() -> str:
    """Path of the backend's shared object (what the entry point hands to nnplug)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"nnplug-backend-cpu was installed without its native library {LIBRARY} (no C "
            f"compiler when it was built); install a C compiler and reinstall with "
            f"`pip install --force-reinstall --no-binary nnplug-backend-cpu nnplug-backend-cpu`"
        )
    if not os.environ.get(OPENBLAS_ENV):
        blas = openblas_path()
        if blas:
            os.environ[OPENBLAS_ENV] = blas
    return path

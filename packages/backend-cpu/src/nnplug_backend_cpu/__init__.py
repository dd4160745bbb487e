"""nnplug's native CPU backend.

The backend is the shared object ``libnnplug_backend_cpu.so`` in this package; nnplug loads
it through the ``nnplug.backends`` entry point (``cpu = "nnplug_backend_cpu:library_path"``).
The same file works copied into a dynamic-backends folder.

It depends on nothing but the C library: matrix products run on its own GEMM kernel
(``csrc/gemm.c``), whose results do not depend on the CPU model, the thread count or where an
element sits in its matrix.
"""

from __future__ import annotations

from nnplug import packaged_library

from ._version import __version__

LIBRARY = "libnnplug_backend_cpu.so"

OPS = (
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
    "AveragePool", "BatchNormalization", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr",
    "BitwiseXor", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Col2Im", "Compress", "Concat",
    "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh",
    "CumProd", "CumSum", "DequantizeLinear", "Det", "DFT", "Div", "Dropout",
    "DynamicQuantizeLinear", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor",
    "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
    "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization", "GRU", "Hardmax",
    "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "IsInf", "IsNaN",
    "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax",
    "LpNormalization", "LRN", "LSTM", "MatMul", "MatMulInteger", "Max", "MaxPool", "MaxRoiPool",
    "MaxUnpool", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "NonMaxSuppression", "NonZero", "Not",
    "OneHot", "Or", "Pad", "Pow", "PRelu", "QLinearConv", "QLinearMatMul", "QuantizeLinear",
    "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape",
    "Resize", "ReverseSequence", "RNN", "RoiAlign", "Round", "ScatterElements", "ScatterND",
    "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax",
    "Softplus", "Softsign", "Split", "Sqrt", "Squeeze", "STFT", "Sub", "Sum", "Swish", "Tan",
    "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unique", "Unsqueeze",
    "Upsample", "Where", "Xor",
) + (  # the long tail of ONNX's node suite
    "DeformConv", "EyeLike", "LpPool", "MelWeightMatrix", "Scatter", "TensorScatter",
    "TfIdfVectorizer",
) + (  # the 8-, 4- and 2-bit types
    "BitCast",
) + (  # string tensors (backend ABI 1.3; Equal and ai.onnx.ml's LabelEncoder take them too)
    "RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit",
)
"""The ONNX op types the backend runs (default domain; dtypes and attributes as documented in
docs/backends/cpu.md)."""

__all__ = ["LIBRARY", "OPS", "__version__", "library_path"]


def library_path() -> str:
    """Path of the backend's shared object (what the entry point hands to nnplug); a
    nnplug.NativeLibraryMissingError saying how to rebuild when this install has none."""
    return packaged_library(__file__, LIBRARY)

"""The op types of ONNX's default domain (``ai.onnx``, every opset), known without importing
onnx, which takes longer than the rest of nnplug: registering a custom op asks whether it has
a standard op's name (:func:`nnplug.customop.is_standard_op`) while a Runtime starts.

Made from onnx 1.23 with :func:`from_onnx`; ``tests/test_standard_ops.py`` compares the two
and says when a newer onnx has ops this list lacks.
"""

STANDARD_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "AffineGrid", "And", "ArgMax", "ArgMin", "Asin", "Asinh",
    "Atan", "Atanh", "Attention", "AveragePool", "BatchNormalization", "Bernoulli",
    "BitCast", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor",
    "BlackmanWindow", "Cast", "CastLike", "CausalConvWithState", "Ceil", "Celu",
    "CenterCropPad", "Clip", "Col2Im", "Compress", "Concat", "ConcatFromSequence",
    "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh",
    "CumProd", "CumSum", "DFT", "DeformConv", "DepthToSpace", "DequantizeLinear", "Det",
    "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Elu", "Equal", "Erf", "Exp",
    "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather", "GatherElements", "GatherND",
    "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater",
    "GreaterOrEqual", "GridSample", "GroupNormalization", "HammingWindow", "HannWindow",
    "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If", "ImageDecoder",
    "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization",
    "LeakyRelu", "Less", "LessOrEqual", "LinearAttention", "Log", "LogSoftmax", "Loop",
    "LpNormalization", "LpPool", "MatMul", "MatMulInteger", "Max", "MaxPool", "MaxRoiPool",
    "MaxUnpool", "Mean", "MeanVarianceNormalization", "MelWeightMatrix", "Min", "Mish",
    "Mod", "Mul", "Multinomial", "Neg", "NegativeLogLikelihoodLoss", "NonMaxSuppression",
    "NonZero", "Not", "OneHot", "Optional", "OptionalGetElement", "OptionalHasElement",
    "Or", "PRelu", "Pad", "Pow", "QLinearConv", "QLinearMatMul", "QuantizeLinear",
    "RMSNormalization", "RNN", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "RegexFullMatch", "Relu", "Reshape", "Resize", "ReverseSequence",
    "RoiAlign", "RotaryEmbedding", "Round", "STFT", "Scan", "Scatter", "ScatterElements",
    "ScatterND", "Selu", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
    "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "Shape", "Shrink",
    "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "SoftmaxCrossEntropyLoss",
    "Softplus", "Softsign", "SpaceToDepth", "Split", "SplitToSequence", "Sqrt", "Squeeze",
    "StringConcat", "StringNormalizer", "StringSplit", "Sub", "Sum", "SwiGLU", "Swish",
    "Tan", "Tanh", "TensorScatter", "TfIdfVectorizer", "ThresholdedRelu", "Tile", "TopK",
    "Transpose", "Trilu", "Unique", "Unsqueeze", "Upsample", "Where", "Xor",
})


def from_onnx() -> frozenset[str]:
    """The same set from the installed onnx's schemas (imports onnx)."""
    import onnx.defs

    return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == "")

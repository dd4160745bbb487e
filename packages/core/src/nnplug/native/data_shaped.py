"""Whether a node's output shapes follow from its input shapes alone, or may depend on the
data it reads (a Reshape to a shape computed at run time, NonZero, TopK's k).

Used where a shape seen once is taken to hold for every run with the same input shapes (the
static plans of :class:`nnplug.native.plan.DynamicRunner`). Unknown ops, those of other
domains than ONNX's and ai.onnx.ml, count as data-shaped."""

from __future__ import annotations

from ..graph import Node

# Ops whose output shapes depend on the values of inputs after the first (a shape, axes,
# sizes, pads, k, depth, repeats): shape-following when those inputs are constants.
_BY_LATER_INPUTS = frozenset({
    "Reshape", "Expand", "Tile", "Slice", "Pad", "Resize", "Upsample", "Squeeze", "Unsqueeze",
    "OneHot", "Split", "TopK", "CenterCropPad", "Col2Im", "DFT", "STFT", "AffineGrid",
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
})
# Ops whose output shapes are made of their inputs' values: shape-following when all are
# constants (then they are folded before they reach a backend anyway).
_BY_ALL_INPUTS = frozenset({
    "ConstantOfShape", "Range", "MelWeightMatrix", "BlackmanWindow", "HammingWindow",
    "HannWindow",
})
# Ops whose output shapes depend on the data itself.
_BY_DATA = frozenset({
    "NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit", "Loop", "If", "Scan",
    "SplitToSequence", "SequenceAt", "SequenceConstruct", "ConcatFromSequence",
})


def shape_follows_input_shapes(node: Node, constants) -> bool:
    """Whether ``node``'s output shapes are the same for every run whose inputs have the same
    shapes (``constants``: names of the values fixed at load)."""
    domain = node.domain or ""
    if domain == "ai.onnx.ml":
        return True  # trees, linear models, scalers, encoders: batch in, batch out
    if domain not in ("", "ai.onnx") or node.op_type in _BY_DATA:
        return False
    if node.op_type in _BY_ALL_INPUTS:
        return all(not x or x in constants for x in node.inputs)
    if node.op_type in _BY_LATER_INPUTS:
        return all(not x or x in constants for x in node.inputs[1:])
    return True

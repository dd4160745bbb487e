"""Bodies for variadic ops with more inputs than backends take in one node.

Concat, Sum, Max, Min and Mean take any number of inputs; backends hold a node's inputs in
fixed tables (64 in nnplug's CPU and oneDNN backends), and exporters write more (the 90-input
Concat of SSDlite's heads). When no backend claims such a node, expansion replaces it with
this body: nodes of at most :data:`CHUNK` inputs each. Concat, Max and Min take a tree (each
element copied or compared once per level, the answer the same in any order); Sum and Mean
add in a chain from left to right, as onnxruntime's kernels add, so the rounding is the
same; Mean multiplies the sum by 1/n once at the end, as onnxruntime does.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

CHUNK = 32
"""Inputs per node of a body (a node with no more is left as it is)."""

TREE_OPS = frozenset({"Concat", "Max", "Min"})
CHAIN_OPS = frozenset({"Sum", "Mean"})
VARIADIC_OPS = TREE_OPS | CHAIN_OPS


def split_body(op_type: str, num_inputs: int, attrs: list[onnx.AttributeProto],
               dtype: np.dtype | None, opset: int) -> onnx.FunctionProto | None:
    """A body of nodes with at most CHUNK inputs each for a variadic node of ``op_type``
    with ``num_inputs`` inputs (attributes ``attrs``), or None when it needs none. ``dtype``:
    the inputs' element type (Mean's 1/n is rounded to it; None: unknown, no body)."""
    if num_inputs <= CHUNK or op_type not in VARIADIC_OPS:
        return None
    if op_type == "Mean" and dtype is None:
        return None
    xs = [f"x{i}" for i in range(num_inputs)]
    nodes: list[onnx.NodeProto] = []
    names = iter(f"t{i}" for i in range(num_inputs))

    def node(op, ins, out):
        nodes.append(helper.make_node(op, ins, [out], name=out))
        nodes[-1].attribute.extend(attrs if op == "Concat" else [])
        return out

    if op_type in TREE_OPS:
        level = xs
        while len(level) > CHUNK:
            level = [node(op_type, level[i:i + CHUNK], next(names))
                     for i in range(0, len(level), CHUNK)]
        node(op_type, level, "y")
    else:
        last = node("Sum", xs[:CHUNK], next(names))
        rest = xs[CHUNK:]
        while rest:
            take, rest = rest[:CHUNK - 1], rest[CHUNK - 1:]
            out = "y" if not rest and op_type == "Sum" else next(names)
            last = node("Sum", [last, *take], out)
        if op_type == "Mean":  # times 1/n, rounded to the type, as onnxruntime's Mean
            inverse = numpy_helper.from_array(np.array(1 / num_inputs, dtype), "inverse")
            nodes.append(helper.make_node("Constant", [], ["inv_n"], value=inverse))
            node("Mul", [last, "inv_n"], "y")
    return helper.make_function("", op_type, xs, ["y"], nodes,
                                [helper.make_opsetid("", opset)])

"""ReduceMean/Sum/Max/Min/SumSquare/L1/L2 over any set of axes (SE blocks, RMS norms)."""

from __future__ import annotations

import numpy as np

from .common import F32, i32, need_f32, rank_of

CODES = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3,
         "ReduceSumSquare": 4, "ReduceL1": 5, "ReduceL2": 6}
MAX_RANK = 6


def _axes_are_input(node) -> bool:
    return node.opset >= 18 or (node.op_type == "ReduceSum" and node.opset >= 13)


def supports_reduce(node, graph):
    why = need_f32(node, graph, node.inputs[:1])
    if why:
        return why
    r = rank_of(graph, node.inputs[0])
    if r is not None and r > MAX_RANK:
        return f"{node.op_type} of rank {r} (at most {MAX_RANK})"
    return None


def reduce_host_inputs(node):
    return [1] if _axes_are_input(node) and len(node.inputs) > 1 and node.inputs[1] else []


def lower_reduce(node, p):
    x = node.inputs[0]
    shape = list(p.shape(x))
    r = len(shape)
    if _axes_are_input(node):
        axes = [int(a) for a in p.host(node.inputs[1]).reshape(-1)] \
            if len(node.inputs) > 1 and node.inputs[1] else []
    else:
        axes = list(node.attr("axes") or [])
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            p.alias(node.outputs[0], x, shape)
            return
        axes = list(range(r))
    axes = sorted({a + r if a < 0 else a for a in axes})
    if any(not 0 <= a < r for a in axes):
        raise ValueError(f"{node.op_type} {node.name!r}: axes {axes} outside rank {r}")
    keep = int(node.attr("keepdims", 1))
    out = [1 if i in axes else d for i, d in enumerate(shape)] if keep else \
        [d for i, d in enumerate(shape) if i not in axes]
    y = p.define(node.outputs[0], out, F32)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(r)]
    kept = [i for i in range(r) if i not in axes]
    n = int(np.prod([shape[i] for i in kept], dtype=np.int64))
    count = int(np.prod([shape[i] for i in axes], dtype=np.int64))
    meta = ([len(kept)] + [shape[i] for i in kept] + [strides[i] for i in kept]
            + [len(axes)] + [shape[i] for i in axes] + [strides[i] for i in axes])
    p.launch("reduce.cl", "reduce", (n,), [x, y, i32(n), i32(count), i32(CODES[node.op_type]),
                                           p.meta(meta)])

"""Softmax and LRN."""

from __future__ import annotations

import numpy as np

from .common import F32, f32, i32, need_f32


def supports_softmax(node, graph):
    return need_f32(node, graph, node.inputs)


def lower_softmax(node, p):
    x = node.inputs[0]
    shape = p.shape(x)
    r = len(shape)
    y = p.define(node.outputs[0], shape, F32)
    if r == 0:
        p.fill(y, np.float32(1.0))
        return
    if node.opset < 13:
        # before opset 13: softmax of the 2-D [prod(:axis), prod(axis:)] view
        axis = int(node.attr("axis", 1))
        axis = axis + r if axis < 0 else axis
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        length, inner = int(np.prod(shape[axis:], dtype=np.int64)), 1
    else:
        axis = int(node.attr("axis", -1))
        axis = axis + r if axis < 0 else axis
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        length = shape[axis]
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    rows = outer * inner
    if length == 0:
        return
    p.launch("normalize.cl", "softmax", (rows,), [x, y, i32(length), i32(inner), i32(rows)])


def supports_lrn(node, graph):
    why = need_f32(node, graph, node.inputs)
    if why:
        return why
    if "size" not in node.attrs:
        return "LRN without the required 'size' attribute"
    return None


def lower_lrn(node, p):
    x = node.inputs[0]
    shape = p.shape(x)
    n, c = shape[0], shape[1]
    inner = int(np.prod(shape[2:], dtype=np.int64))
    y = p.define(node.outputs[0], shape, F32)
    p.launch("normalize.cl", "lrn", (inner, c, n),
             [x, y, i32(c), i32(inner), i32(node.attr("size")), f32(node.attr("alpha", 1e-4)),
              f32(node.attr("beta", 0.75)), f32(node.attr("bias", 1.0))])

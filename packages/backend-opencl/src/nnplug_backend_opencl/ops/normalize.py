"""Softmax, LRN, LayerNormalization and InstanceNormalization."""

from __future__ import annotations

import numpy as np

from .common import F32, f32, i32, need_f32, rank_of
from .elementwise import broadcast_to


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


def supports_layernorm(node, graph):
    why = need_f32(node, graph, [i for i in node.inputs if i])
    if why:
        return why
    if len([o for o in node.outputs if o]) > 1:
        return "LayerNormalization with its Mean or InvStdDev output"
    if int(node.attr("stash_type", 1)) != 1:
        return f"LayerNormalization with stash_type={node.attr('stash_type')}"
    r = rank_of(graph, node.inputs[0])
    if r is None:
        return "LayerNormalization of an input of unknown rank"
    axis = int(node.attr("axis", -1))
    if not -r <= axis < r:
        return f"LayerNormalization axis {axis} outside rank {r}"
    return None


def lower_layernorm(node, p):
    x, scale = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    shape = p.shape(x)
    axis = int(node.attr("axis", -1))
    axis = axis + len(shape) if axis < 0 else axis
    length = int(np.prod(shape[axis:], dtype=np.int64))
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    scale = _full(p, scale, tuple(shape[axis:]))
    bias = _full(p, bias, tuple(shape[axis:])) if bias else None
    y = p.define(node.outputs[0], shape, F32)
    if rows == 0 or length == 0:
        return
    p.launch("normalize.cl", "layernorm", (rows,),
             [x, scale, bias or scale, y, i32(length), i32(rows), f32(node.attr("epsilon", 1e-5)),
              i32(bias is not None), i32(0)])


def supports_instancenorm(node, graph):
    why = need_f32(node, graph, node.inputs)
    if why:
        return why
    r = rank_of(graph, node.inputs[0])
    if r is not None and r < 3:
        return f"InstanceNormalization of rank {r}"
    return None


def lower_instancenorm(node, p):
    x, scale, bias = node.inputs[:3]
    shape = p.shape(x)
    if len(shape) < 3:
        raise ValueError(f"InstanceNormalization {node.name!r}: input {shape} has no spatial axes")
    n, c = shape[0], shape[1]
    for name in (scale, bias):
        if tuple(p.shape(name)) != (c,):
            raise ValueError(f"InstanceNormalization {node.name!r}: {name!r} is {p.shape(name)}, "
                             f"not ({c},)")
    length = int(np.prod(shape[2:], dtype=np.int64))
    y = p.define(node.outputs[0], shape, F32)
    if n * c == 0 or length == 0:
        return
    p.launch("normalize.cl", "layernorm", (n * c,),
             [x, scale, bias, y, i32(length), i32(n * c), f32(node.attr("epsilon", 1e-5)), i32(1),
              i32(c)])


def _full(p, name, full):
    """``name`` as a buffer of the whole normalised shape (a copy only when it broadcasts)."""
    shape = tuple(p.shape(name))
    if shape == full:
        return name
    try:
        ok = tuple(np.broadcast_shapes(shape, full)) == full
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name!r} of shape {shape} does not broadcast to {full}")
    return broadcast_to(p, name, full)

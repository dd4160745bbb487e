"""Operators that move or reinterpret data, for any element type of 1, 2, 4 or 8 bytes.

Reshape, Flatten, Unsqueeze, Squeeze, Identity and Dropout (inference) alias their input:
no kernel runs, the output names the same buffer with another shape.
"""

from __future__ import annotations

import numpy as np

from .common import copy_options, dtype_of, i32


def _known_size(node, graph, names):
    for n in names:
        dt = dtype_of(graph, n)
        if dt is None or copy_options(dt) is None:
            return f"{node.op_type} on {n!r} of type {dt}: element size must be 1, 2, 4 or 8 bytes"
    return None


def supports_alias(node, graph):
    return _known_size(node, graph, node.inputs[:1])


def host_second_input(node):
    """Reshape's shape and opset-13 Unsqueeze/Squeeze axes: the host needs their values."""
    if node.op_type == "Reshape" or (node.op_type in ("Unsqueeze", "Squeeze") and node.opset >= 13):
        return [1] if len(node.inputs) > 1 and node.inputs[1] else []
    return []


def lower_reshape(node, p):
    x = node.inputs[0]
    xs = p.shape(x)
    if node.opset < 5:
        want = list(node.attr("shape"))
    else:
        want = [int(v) for v in p.host(node.inputs[1]).reshape(-1)]
    allowzero = int(node.attr("allowzero", 0))
    out = []
    for i, d in enumerate(want):
        out.append(xs[i] if d == 0 and not allowzero else d)
    if out.count(-1) > 1:
        raise ValueError(f"Reshape {node.name!r}: more than one -1 in {want}")
    total = int(np.prod(xs, dtype=np.int64))
    if -1 in out:
        rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = total // rest if rest else 0
    if int(np.prod(out, dtype=np.int64)) != total:
        raise ValueError(f"Reshape {node.name!r}: cannot reshape {xs} to {want}")
    p.alias(node.outputs[0], x, out)


def lower_flatten(node, p):
    x = node.inputs[0]
    xs = p.shape(x)
    axis = int(node.attr("axis", 1))
    axis = axis + len(xs) if axis < 0 else axis
    p.alias(node.outputs[0], x, (int(np.prod(xs[:axis], dtype=np.int64)),
                                 int(np.prod(xs[axis:], dtype=np.int64))))


def _axes(node, p):
    if node.opset >= 13:
        return [int(a) for a in p.host(node.inputs[1]).reshape(-1)] \
            if len(node.inputs) > 1 and node.inputs[1] else None
    return node.attr("axes")


def lower_unsqueeze(node, p):
    x = node.inputs[0]
    xs = list(p.shape(x))
    axes = _axes(node, p)
    rank = len(xs) + len(axes)
    axes = sorted(a + rank if a < 0 else a for a in axes)
    out = xs
    for a in axes:
        out.insert(a, 1)
    p.alias(node.outputs[0], x, out)


def lower_squeeze(node, p):
    x = node.inputs[0]
    xs = list(p.shape(x))
    axes = _axes(node, p)
    if axes is None:
        out = [d for d in xs if d != 1]
    else:
        drop = {a + len(xs) if a < 0 else a for a in axes}
        out = [d for i, d in enumerate(xs) if i not in drop]
    p.alias(node.outputs[0], x, out)


def lower_identity(node, p):
    p.alias(node.outputs[0], node.inputs[0], p.shape(node.inputs[0]))


def supports_dropout(node, graph):
    if len(node.inputs) > 2 and node.inputs[2]:
        t = graph.constants.get(node.inputs[2])
        if t is None or bool(np.asarray(t).reshape(-1)[0]):
            return "Dropout in training mode (or with a training_mode that is not a constant false)"
    if node.opset < 7 and node.attr("is_test", 0) == 0:
        return "Dropout opset < 7 without is_test"
    return _known_size(node, graph, node.inputs[:1])


def lower_dropout(node, p):
    x = node.inputs[0]
    p.alias(node.outputs[0], x, p.shape(x))
    if len(node.outputs) > 1 and node.outputs[1]:
        mask_type = np.bool_ if node.opset >= 10 else p.dtype(x)
        mask = p.define(node.outputs[1], p.shape(x), mask_type)
        p.fill(mask, np.ones(1, mask_type))  # inference: nothing is dropped


def supports_transpose(node, graph):
    return _known_size(node, graph, node.inputs)


def lower_transpose(node, p):
    x = node.inputs[0]
    xs = p.shape(x)
    r = len(xs)
    perm = list(node.attr("perm") or reversed(range(r)))
    out = [xs[i] for i in perm]
    y = p.define(node.outputs[0], out, p.dtype(x))
    strides = [int(np.prod(xs[i + 1:], dtype=np.int64)) for i in range(r)]
    # drop size-1 output axes; they never move an index
    dims = [(out[i], strides[perm[i]]) for i in range(r) if out[i] != 1] or [(1, 0)]
    n = int(np.prod(out, dtype=np.int64))
    if len(dims) > 6:
        raise ValueError(f"Transpose {node.name!r}: more than 6 non-unit axes")
    p.launch("copy.cl", "transpose", (n,),
             [x, y, i32(n), i32(len(dims)), p.meta([d for d, _ in dims] + [s for _, s in dims])],
             options=copy_options(p.dtype(x)))


def supports_concat(node, graph):
    return _known_size(node, graph, node.inputs)


def lower_concat(node, p):
    shapes = [p.shape(i) for i in node.inputs]
    r = len(shapes[0])
    axis = int(node.attr("axis"))
    axis = axis + r if axis < 0 else axis
    for k, s in enumerate(shapes[1:], 1):
        if len(s) != r or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ValueError(f"input {k} ({node.inputs[k]!r}) has shape {list(s)} and input 0 "
                             f"{list(shapes[0])}; they may differ only on axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    dtype = p.dtype(node.inputs[0])
    y = p.define(node.outputs[0], out, dtype)
    inner = int(np.prod(out[axis + 1:], dtype=np.int64))
    outer = int(np.prod(out[:axis], dtype=np.int64))
    dst_slab = out[axis] * inner
    offset = 0
    for name, s in zip(node.inputs, shapes):
        slab = s[axis] * inner
        n = outer * slab
        p.launch("copy.cl", "concat_copy", (n,),
                 [name, y, i32(slab), i32(dst_slab), i32(offset), i32(n)],
                 options=copy_options(dtype))
        offset += slab


def supports_constant_of_shape(node, graph):
    v = node.attr("value")
    dt = np.asarray(v).dtype if v is not None else np.dtype(np.float32)
    if copy_options(dt) is None:
        return f"ConstantOfShape of type {dt}"
    return None


def lower_constant_of_shape(node, p):
    shape = [int(d) for d in p.host(node.inputs[0]).reshape(-1)]
    v = node.attr("value")
    value = np.asarray(v).reshape(-1)[:1] if v is not None else np.zeros(1, np.float32)
    y = p.define(node.outputs[0], shape, value.dtype)
    p.fill(y, value)


def host_first_input(node):
    return [0]

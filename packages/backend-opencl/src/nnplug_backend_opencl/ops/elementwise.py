"""Activations and other element-wise functions, broadcasting arithmetic (Add ... Pow, PRelu),
Sum/Max/Min, Where, Expand, and BatchNormalization on its own."""

from __future__ import annotations

import numpy as np

from .common import (
    ACT_CLIP,
    ACT_GELU_TANH,
    ACT_LEAKY,
    ACT_RELU,
    ACT_SIGMOID,
    F32,
    UNARY_CODES,
    copy_options,
    dtype_of,
    f32,
    i32,
    merge_broadcast,
    need_f32,
)

OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Max": 5, "Min": 6, "PRelu": 7}
# (alpha, beta) attribute defaults of the parametrised functions, as the kernel takes them
UNARY_PARAMS = {
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Elu": (("alpha", 1.0),),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "Celu": (("alpha", 1.0),),
    "ThresholdedRelu": (("alpha", 1.0),),
}
FLT_MAX = float(np.finfo(np.float32).max)


def activation_of(node, host=None):
    """(code, a, b) of an activation node; ``host(name)`` reads Clip's bound inputs."""
    op = node.op_type
    if op == "Relu":
        return ACT_RELU, 0.0, 0.0
    if op == "LeakyRelu":
        return ACT_LEAKY, float(node.attr("alpha", 0.01)), 0.0
    if op == "Sigmoid":
        return ACT_SIGMOID, 0.0, 0.0
    if op == "Clip":
        if node.opset < 11:
            return ACT_CLIP, float(node.attr("min", -FLT_MAX)), float(node.attr("max", FLT_MAX))
        # an omitted bound is float32's lowest / largest value (ONNX; onnxruntime): +-inf clips to it
        lo = float(host(node.inputs[1]).reshape(-1)[0]) if len(node.inputs) > 1 and node.inputs[1] \
            else -FLT_MAX
        hi = float(host(node.inputs[2]).reshape(-1)[0]) if len(node.inputs) > 2 and node.inputs[2] \
            else FLT_MAX
        return ACT_CLIP, lo, hi
    if op == "Gelu" and node.attr("approximate", "none") == "tanh":
        return ACT_GELU_TANH, 0.0, 0.0
    params = [float(node.attr(k, d)) for k, d in UNARY_PARAMS.get(op, ())] + [0.0, 0.0]
    return UNARY_CODES[op], params[0], params[1]


def supports_unary(node, graph):
    if node.op_type == "Gelu" and node.attr("approximate", "none") not in ("none", "tanh"):
        return f"Gelu with approximate={node.attr('approximate')!r}"
    if node.op_type == "Celu" and float(node.attr("alpha", 1.0)) == 0.0:
        return "Celu with alpha=0"
    return need_f32(node, graph, [i for i in node.inputs if i])


def clip_host_inputs(node):
    return [i for i in (1, 2) if node.opset >= 11 and len(node.inputs) > i and node.inputs[i]]


def lower_unary(node, p):
    x = node.inputs[0]
    shape = p.shape(x)
    y = p.define(node.outputs[0], shape, F32)
    act, a, b = activation_of(node, p.host)
    n = int(np.prod(shape, dtype=np.int64))
    p.launch("elementwise.cl", "unary", (n,), [x, y, i32(n), i32(act), f32(a), f32(b)])


def supports_binary(node, graph):
    if node.opset < 7 and node.attr("broadcast", 0):
        return f"{node.op_type} opset {node.opset} with the legacy 'broadcast' attribute"
    return need_f32(node, graph, node.inputs)


def binary(p, op: int, a: str, b: str, y: str | None, node_out: str | None = None) -> str:
    sa, sb = p.shape(a), p.shape(b)
    try:
        out = tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        raise ValueError(f"shapes {sa} and {sb} do not broadcast") from None
    y = y or p.temp(out)
    if node_out is not None:
        y = p.define(node_out, out, F32)
    n = int(np.prod(out, dtype=np.int64))
    if tuple(sa) == tuple(sb):
        p.launch("elementwise.cl", "binary_same", (n,), [a, b, y, i32(n), i32(op)])
    else:
        dims, (st_a, st_b) = merge_broadcast(out, [sa, sb])
        p.launch("elementwise.cl", "binary_bcast", (n,),
                 [a, b, y, i32(n), i32(op), i32(len(dims)), p.meta(dims + st_a + st_b)])
    return y


def lower_binary(node, p):
    binary(p, OPS[node.op_type], node.inputs[0], node.inputs[1], None, node.outputs[0])


def lower_prelu(node, p):
    """PRelu before opset 7 had no broadcasting rule; its exporters (PyTorch's converted
    models) give a slope of shape [C] for x [N, C, ...]: one slope per channel, read here as
    [C, 1, ...] (an alias of the same buffer)."""
    x, slope = node.inputs[0], node.inputs[1]
    xs, ss = p.shape(x), p.shape(slope)
    if 1 <= node.opset < 7 and len(ss) == 1 and len(xs) >= 3 and ss[0] == xs[1] != 1:
        slope = p.alias(f"\0slope:{node.outputs[0]}", slope, (ss[0],) + (1,) * (len(xs) - 2))
    binary(p, OPS["PRelu"], x, slope, None, node.outputs[0])


def supports_sum(node, graph):
    if not node.inputs:
        return "Sum without inputs"
    return need_f32(node, graph, node.inputs)


def lower_sum(node, p):
    """Sum, Max and Min: a chain of broadcasting binary steps."""
    ins = node.inputs
    if len(ins) == 1:
        p.alias(node.outputs[0], ins[0], p.shape(ins[0]))  # a copy-free identity
        return
    op = OPS["Add" if node.op_type == "Sum" else node.op_type]
    acc = ins[0]
    for i, other in enumerate(ins[1:], 1):
        last = i == len(ins) - 1
        acc = binary(p, op, acc, other, None, node.outputs[0] if last else None)


def _same_size_types(node, graph, names) -> str | None:
    for n in names:
        dt = dtype_of(graph, n)
        if dt is None or copy_options(dt) is None:
            return f"{node.op_type} on {n!r} of type {dt}: element size must be 1, 2, 4 or 8 bytes"
    return None


def supports_where(node, graph):
    c, x, y = node.inputs
    if dtype_of(graph, c) != np.bool_:
        return f"Where with a condition of type {dtype_of(graph, c)}"
    if dtype_of(graph, x) != dtype_of(graph, y):
        return "Where with X and Y of different types"
    return _same_size_types(node, graph, [x])


def lower_where(node, p):
    c, a, b = node.inputs
    shapes = [p.shape(c), p.shape(a), p.shape(b)]
    try:
        out = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"shapes {shapes} do not broadcast") from None
    dtype = p.dtype(a)
    y = p.define(node.outputs[0], out, dtype)
    n = int(np.prod(out, dtype=np.int64))
    dims, strides = merge_broadcast(out, shapes)
    p.launch("copy.cl", "where_bcast", (n,),
             [c, a, b, y, i32(n), i32(len(dims)), p.meta(dims + sum(strides, []))],
             options=copy_options(dtype))


def supports_expand(node, graph):
    return _same_size_types(node, graph, node.inputs[:1])


def expand_host_inputs(node):
    return [1]


def lower_expand(node, p):
    x = node.inputs[0]
    want = tuple(int(d) for d in p.host(node.inputs[1]).reshape(-1))
    xs = p.shape(x)
    try:
        out = tuple(np.broadcast_shapes(xs, want))
    except ValueError:
        raise ValueError(f"shape {xs} does not expand to {want}") from None
    broadcast_to(p, x, out, node.outputs[0])


def broadcast_to(p, x, out, name=None) -> str:
    """A device copy of ``x`` broadcast to ``out`` (a temporary unless ``name`` is given)."""
    xs = p.shape(x)
    dtype = p.dtype(x)
    y = p.define(name, out, dtype) if name else p.temp(out, dtype)
    n = int(np.prod(out, dtype=np.int64))
    dims, (st,) = merge_broadcast(out, [xs])
    p.launch("copy.cl", "broadcast_copy", (n,), [x, y, i32(n), i32(len(dims)), p.meta(dims + st)],
             options=copy_options(dtype))
    return y


def supports_batchnorm(node, graph):
    if len([o for o in node.outputs if o]) > 1 or node.attr("training_mode", 0):
        return "BatchNormalization in training mode (running statistics outputs)"
    if node.opset < 9 and node.attr("spatial", 1) != 1:
        return "BatchNormalization with spatial=0"
    if node.opset < 7 and node.attr("is_test", 0) == 0:
        return "BatchNormalization opset < 7 without is_test"
    return need_f32(node, graph, node.inputs)


def lower_batchnorm(node, p):
    x, scale, bias, mean, var = node.inputs[:5]
    shape = p.shape(x)
    c = shape[1] if len(shape) > 1 else 1
    inner = int(np.prod(shape[2:], dtype=np.int64))
    n = int(np.prod(shape, dtype=np.int64))
    y = p.define(node.outputs[0], shape, F32)
    p.launch("elementwise.cl", "batchnorm", (n,),
             [x, y, scale, bias, mean, var, f32(node.attr("epsilon", 1e-5)), i32(c), i32(inner),
              i32(n)])

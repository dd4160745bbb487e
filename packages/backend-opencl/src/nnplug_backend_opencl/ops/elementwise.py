"""Activations, broadcasting arithmetic, Sum, and BatchNormalization on its own."""

from __future__ import annotations

import numpy as np

from .common import (
    ACT_CLIP,
    ACT_LEAKY,
    ACT_RELU,
    ACT_SIGMOID,
    F32,
    f32,
    i32,
    merge_broadcast,
    need_f32,
)

OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}
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
        lo = float(host(node.inputs[1]).reshape(-1)[0]) if len(node.inputs) > 1 and node.inputs[1] \
            else -np.inf
        hi = float(host(node.inputs[2]).reshape(-1)[0]) if len(node.inputs) > 2 and node.inputs[2] \
            else np.inf
        return ACT_CLIP, lo, hi
    raise KeyError(op)


def supports_unary(node, graph):
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


def supports_sum(node, graph):
    if not node.inputs:
        return "Sum without inputs"
    return need_f32(node, graph, node.inputs)


def lower_sum(node, p):
    ins = node.inputs
    if len(ins) == 1:
        p.alias(node.outputs[0], ins[0], p.shape(ins[0]))  # a copy-free identity
        return
    acc = ins[0]
    for i, other in enumerate(ins[1:], 1):
        last = i == len(ins) - 1
        acc = binary(p, OPS["Add"], acc, other, None, node.outputs[0] if last else None)


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

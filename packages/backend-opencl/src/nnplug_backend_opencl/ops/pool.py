"""MaxPool, AveragePool (1-D, 2-D) and GlobalAveragePool."""

from __future__ import annotations

import numpy as np

from .common import F32, check_pool_input, i32, need_f32, rank_of, spatial


def supports_pool(node, graph):
    why = need_f32(node, graph, node.inputs[:1])
    if why:
        return why
    if rank_of(graph, node.inputs[0]) not in (3, 4):
        return f"{node.op_type} on rank {rank_of(graph, node.inputs[0])}: only 1-D and 2-D pooling"
    if node.op_type == "MaxPool":
        if len(node.outputs) > 1 and node.outputs[1]:
            return "MaxPool with the Indices output"
        if node.attr("storage_order", 0):
            return "MaxPool with storage_order=1"
    return None


def lower_pool(node, p):
    x = node.inputs[0]
    xs = p.shape(x)
    check_pool_input(xs)
    one_d = len(xs) == 3
    n, c = xs[:2]
    h, w = (1, xs[2]) if one_d else xs[2:]
    kernel = list(node.attr("kernel_shape"))
    outs, pb, pe, strides, dil = spatial(node, [w] if one_d else [h, w], kernel,
                                         ceil_mode=bool(node.attr("ceil_mode", 0)))
    if one_d:
        kernel, outs, pb, pe, strides, dil = ([1] + kernel, [1] + outs, [0] + pb, [0] + pe,
                                              [1] + strides, [1] + dil)
    oh, ow = outs
    y = p.define(node.outputs[0], (n, c) + ((ow,) if one_d else (oh, ow)), F32)
    common = [x, y, i32(h), i32(w), i32(oh), i32(ow), i32(kernel[0]), i32(kernel[1]),
              i32(strides[0]), i32(strides[1]), i32(pb[0]), i32(pb[1])]
    if node.op_type == "MaxPool":
        p.launch("pool.cl", "maxpool2d", (oh * ow, n * c), common + [i32(dil[0]), i32(dil[1])])
    else:
        p.launch("pool.cl", "avgpool2d", (oh * ow, n * c),
                 common + [i32(pe[0]), i32(pe[1]), i32(dil[0]), i32(dil[1]),
                           i32(node.attr("count_include_pad", 0))])


def supports_global(node, graph):
    why = need_f32(node, graph, node.inputs)
    if why:
        return why
    r = rank_of(graph, node.inputs[0])
    if r is not None and r < 3:
        return "GlobalAveragePool needs [N, C, spatial...]"
    return None


def lower_global(node, p):
    x = node.inputs[0]
    xs = p.shape(x)
    check_pool_input(xs)
    rows = xs[0] * xs[1]
    inner = int(np.prod(xs[2:], dtype=np.int64))
    y = p.define(node.outputs[0], tuple(xs[:2]) + (1,) * (len(xs) - 2), F32)
    p.launch("pool.cl", "global_avgpool", (rows,), [x, y, i32(inner), i32(rows)])

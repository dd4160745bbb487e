"""Conv (1-D and 2-D, groups, strides, pads, dilations, auto_pad) with a fused bias,
folded BatchNormalization and fused activation (see rewrite.py)."""

from __future__ import annotations

import numpy as np

from .common import F32, activation, f32, i32, spatial, why_not_conv_like


def pack_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """[M, Cg, KH, KW] -> [groups][tiles][Cg*KH*KW][8], zero rows past each group's channels."""
    m = w.shape[0]
    mg = m // groups
    tiles = (mg + 7) // 8
    k = int(np.prod(w.shape[1:]))
    out = np.zeros((groups, tiles * 8, k), np.float32)
    out[:, :mg, :] = w.reshape(groups, mg, k)
    return np.ascontiguousarray(out.reshape(groups, tiles, 8, k).transpose(0, 1, 3, 2))


def pack_bias(b: np.ndarray | None, m: int, groups: int) -> np.ndarray:
    mg = m // groups
    tiles = (mg + 7) // 8
    out = np.zeros((groups, tiles * 8), np.float32)
    if b is not None:
        out[:, :mg] = b.reshape(groups, mg)
    return out.reshape(-1)


def supports(node, graph):
    return why_not_conv_like(node, graph, ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"))


def lower(node, p):
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    xs, ws = p.shape(x), p.shape(w)
    one_d = len(xs) == 3
    if one_d:
        xs, ws = (xs[0], xs[1], 1, xs[2]), (ws[0], ws[1], 1, ws[2])
    n, c, h, wd = xs
    m, cg, kh, kw = ws
    groups = int(node.attr("group", 1))
    if c != cg * groups or m % groups:
        raise ValueError(f"Conv {node.name!r}: input channels {c}, weight {ws}, group {groups} "
                         f"do not agree")
    kernel = [kh, kw] if not one_d else [kw]
    (outs, pb, pe, strides, dil) = spatial(node, [h, wd] if not one_d else [wd], kernel)
    if one_d:
        outs, pb, pe, strides, dil = [1] + outs, [0] + pb, [0] + pe, [1] + strides, [1] + dil
    oh, ow = outs
    y = p.define(node.outputs[0], (n, m) + ((ow,) if one_d else (oh, ow)), F32)
    tiles = (m // groups + 7) // 8

    if p.is_const(w):
        wp = p.derived_const(("convw", node.name),
                             lambda: pack_weights(np.asarray(p.const_array(w), np.float32), groups))
    else:
        wp = p.temp((groups * tiles * cg * kh * kw * 8,))
        p.launch("conv.cl", "pack_weights", (groups * tiles * cg * kh * kw * 8,),
                 [w, wp, i32(m), i32(groups), i32(cg * kh * kw)])
    if b is None or p.is_const(b):
        bp = p.derived_const(("convb", node.name), lambda: pack_bias(
            None if b is None else np.asarray(p.const_array(b), np.float32), m, groups))
    else:
        bp = p.temp((groups * tiles * 8,))
        p.launch("conv.cl", "pack_bias", (groups * tiles * 8,), [b, bp, i32(m), i32(groups)])
    act, a, bb = activation(node)
    p.launch("conv.cl", "conv2d", (oh * ow, groups * tiles, n),
             [x, wp, bp, y, i32(c), i32(h), i32(wd), i32(m), i32(oh), i32(ow), i32(kh), i32(kw),
              i32(strides[0]), i32(strides[1]), i32(pb[0]), i32(pb[1]), i32(dil[0]), i32(dil[1]),
              i32(groups), i32(act), f32(a), f32(bb)])

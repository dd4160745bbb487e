"""Resize (nearest and n-linear) through per-axis index tables built on the host.

For every axis the host lists, per output index, the two source indices and the weight of the
second: the kernel then only gathers. Axes whose output equals the input (a scale of 1 under
an identity mapping) take one source index, so resizing H and W of an NCHW tensor costs four
taps per output, as bilinear should.
"""

from __future__ import annotations

import math

import numpy as np

from .common import F32, dtype_of, i32, need_f32, rank_of

MODES = ("nearest", "linear")
TRANSFORMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
              "half_pixel_symmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MAX_RANK = 6


def _input(node, i):
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None


def supports_resize(node, graph):
    if node.opset < 11:
        return "Resize before opset 11 (its fixed coordinate rules are not implemented)"
    why = need_f32(node, graph, node.inputs[:1])
    if why:
        return why
    mode = node.attr("mode", "nearest")
    if mode not in MODES:
        return f"Resize mode {mode!r} (nearest and linear run here)"
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in TRANSFORMS:
        return f"Resize coordinate_transformation_mode {ctm!r}"
    if mode == "nearest" and node.attr("nearest_mode", "round_prefer_floor") not in NEAREST:
        return f"Resize nearest_mode {node.attr('nearest_mode')!r}"
    if int(node.attr("antialias", 0)):
        return "Resize with antialias=1"
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        return f"Resize keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')!r}"
    r = rank_of(graph, node.inputs[0])
    if r is not None and r > MAX_RANK:
        return f"Resize of rank {r} (at most {MAX_RANK})"
    scales, sizes = _input(node, 2), _input(node, 3)
    if scales is None and sizes is None:
        return "Resize without scales or sizes"
    if scales is not None and dtype_of(graph, scales) != F32:
        return "Resize scales that are not float32"
    if sizes is not None and dtype_of(graph, sizes) != np.int64:
        return "Resize sizes that are not int64"
    return None


def resize_host_inputs(node):
    return [i for i in (2, 3) if _input(node, i)]


def output_and_scales(node, p, shape):
    """The output shape and the per-axis scale factors the coordinate transforms use."""
    r = len(shape)
    axes = node.attr("axes")
    axes = list(range(r)) if axes is None else [a + r if a < 0 else a for a in axes]
    scales = _input(node, 2)
    sizes = _input(node, 3)
    sv = p.host(scales).reshape(-1) if scales else np.zeros(0, np.float32)
    out, sc = list(shape), [1.0] * r
    if sv.size:
        if sv.size != len(axes):
            raise ValueError(f"Resize {node.name!r}: {sv.size} scales for {len(axes)} axes")
        for a, s in zip(axes, sv):
            sc[a] = float(s)
            out[a] = int(math.floor(shape[a] * float(s)))
    else:
        zv = p.host(sizes).reshape(-1) if sizes else np.zeros(0, np.int64)
        if zv.size != len(axes):
            raise ValueError(f"Resize {node.name!r}: {zv.size} sizes for {len(axes)} axes")
        for a, z in zip(axes, zv):
            out[a] = int(z)
            sc[a] = float(np.float32(int(z)) / np.float32(shape[a])) if shape[a] else 1.0
    return out, sc


def axis_table(node, n_in, n_out, scale):
    """(i0, i1, w) per output index of one axis. The source coordinate is computed in float32,
    as onnxruntime computes it, so that ties of nearest rounding fall the same way."""
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    f = np.float32
    x = np.arange(n_out, dtype=f)
    s, half = f(scale), f(0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        if ctm == "asymmetric":
            xo = x / s
        elif ctm == "align_corners":
            # the spec's length_resized is input length * scale, which floor() made n_out
            length = f(n_in) * s
            xo = np.zeros_like(x) if n_out == 1 else x * f(n_in - 1) / (length - f(1))
        elif ctm == "pytorch_half_pixel":
            xo = (x + half) / s - half if n_out > 1 else np.zeros_like(x)
        elif ctm == "half_pixel_symmetric":
            adjustment = f(n_out) / (s * f(n_in))
            offset = f(n_in) / f(2) * (f(1) - adjustment)
            xo = offset + (x + half) / s - half
        else:
            xo = (x + half) / s - half
    hi = max(n_in - 1, 0)
    if node.attr("mode", "nearest") == "nearest":
        nm = node.attr("nearest_mode", "round_prefer_floor")
        if nm == "floor":
            i0 = np.floor(xo)
        elif nm == "ceil":
            i0 = np.ceil(xo)
        else:
            tie = xo == np.floor(xo) + half
            up = np.ceil(xo) if nm == "round_prefer_ceil" else np.floor(xo)
            i0 = np.where(tie, up, np.round(xo))
        i0 = np.clip(i0, 0, hi).astype(np.int64)
        return i0, i0, np.zeros(n_out)
    xo = np.clip(xo, 0, hi)
    i0 = np.floor(xo).astype(np.int64)
    i1 = np.minimum(i0 + 1, hi)
    # at the last index both taps are the same element: half each, as onnxruntime weighs them,
    # so an infinity there stays one (weights 1 and 0 would give inf + 0 * inf = NaN)
    return i0, i1, np.where(i1 == i0, 0.5, xo - i0)


def lower_resize(node, p):
    x = node.inputs[0]
    shape = tuple(p.shape(x))
    r = len(shape)
    if r > MAX_RANK:
        raise ValueError(f"Resize {node.name!r}: rank {r} is over {MAX_RANK}")
    out, sc = output_and_scales(node, p, shape)
    y = p.define(node.outputs[0], out, F32)
    n = int(np.prod(out, dtype=np.int64))
    if n == 0:
        return
    if any(d == 0 for d in shape):
        raise ValueError(f"Resize {node.name!r}: cannot resize the empty input {shape} to {out}")
    idx, wts, offsets, active = [], [], [], []
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(r)]
    for d in range(r):
        i0, i1, w = axis_table(node, shape[d], out[d], sc[d])
        offsets.append(sum(len(t) for t in wts))
        idx.append(np.stack([i0, i1], axis=1).reshape(-1))
        wts.append(w.astype(np.float32))
        if np.any((w != 0) & (i1 != i0)):  # it interpolates between two elements somewhere
            active.append(d)
    idx_arr = np.concatenate(idx).astype(np.int32)
    w_arr = np.ascontiguousarray(np.concatenate(wts))
    w_name = p.derived_const(("resize_w", w_arr.tobytes()), lambda: w_arr)
    p.launch("resize.cl", "resize", (n,),
             [x, y, i32(n), i32(r), i32(len(active)), p.meta(list(out) + strides + offsets + active),
              p.meta(idx_arr), w_name])

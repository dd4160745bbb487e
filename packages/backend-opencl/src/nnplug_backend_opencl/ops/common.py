"""Helpers shared by the operator lowerings."""

from __future__ import annotations

import math

import numpy as np

F32 = np.dtype(np.float32)

ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_SIGMOID, ACT_CLIP = range(5)
# element-wise functions only the `unary` kernel knows (never fused into a Conv/Gemm)
UNARY_CODES = {
    "Tanh": 5, "Exp": 6, "Log": 7, "Sqrt": 8, "Abs": 9, "Neg": 10, "Reciprocal": 11, "Erf": 12,
    "Gelu": 13, "HardSigmoid": 15, "HardSwish": 16, "Elu": 17, "Selu": 18, "Softplus": 19,
    "Softsign": 20, "Sin": 21, "Cos": 22, "Floor": 23, "Ceil": 24, "Round": 25, "Sign": 26,
    "Mish": 27, "Celu": 28, "ThresholdedRelu": 29,
}
ACT_GELU_TANH = 14
COPY_TYPES = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


def i32(v) -> np.int32:
    return np.int32(v)


def f32(v) -> np.float32:
    return np.float32(v)


def dtype_of(graph, name):
    if name in graph.constants:
        return np.asarray(graph.constants[name]).dtype
    return graph.value(name).dtype


def rank_of(graph, name):
    if name in graph.constants:
        return np.asarray(graph.constants[name]).ndim
    shape = graph.value(name).shape
    return None if shape is None else len(shape)


def need_f32(node, graph, names) -> str | None:
    for n in names:
        if n and dtype_of(graph, n) != F32:
            return f"{node.op_type} runs on float32 only; {n!r} is {dtype_of(graph, n)}"
    return None


def copy_options(dtype) -> str | None:
    t = COPY_TYPES.get(np.dtype(dtype).itemsize)
    return None if t is None else f"-DT={t}"


def activation(node) -> tuple[int, float, float]:
    """The activation fused into ``node`` by the rewrite pass (none by default)."""
    return node.attrs.get("_act", (ACT_NONE, 0.0, 0.0))


def check_pool_input(shape) -> None:
    """onnxruntime's rule for every pool: only the batch dim may be 0 (a mean or max over an
    empty channel or window has no value; a 0x0 GlobalAveragePool would give 0/0)."""
    if shape and shape[0] != 0 and 0 in shape[1:]:
        raise ValueError(f"the input has shape {list(shape)}; pooling over an empty channel or "
                         f"spatial axis has no value (only the batch dim may be 0)")


def spatial(node, in_spatial, kernel, *, ceil_mode=False):
    """Output sizes and (begin, end) pads per spatial axis, after ONNX's auto_pad rules."""
    n = len(in_spatial)
    strides = list(node.attr("strides") or [1] * n)
    dil = list(node.attr("dilations") or [1] * n)
    pads = list(node.attr("pads") or [0] * (2 * n))
    auto = node.attr("auto_pad", "NOTSET") or "NOTSET"
    out, begin, end = [], [], []
    for i in range(n):
        size, k, s, d = in_spatial[i], kernel[i], strides[i], dil[i]
        span = d * (k - 1) + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + span - size)
            small = total // 2
            pb, pe = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            o = (size - span) // s + 1
            pb = pe = 0
        else:
            pb, pe = pads[i], pads[i + n]
            exact = (size + pb + pe - span) / s + 1
            if ceil_mode:
                o = math.ceil(exact)
                if (o - 1) * s >= size + pb:
                    o -= 1  # the last window must start inside the input or its begin padding
            else:
                o = math.floor(exact)
        if o < 1:
            raise ValueError(
                f"the kernel window ({span} wide with dilation {d} on spatial axis {i}) is larger "
                f"than the padded input ({size} + pads {pb} and {pe}); the output would be "
                f"empty. Fix: use a smaller kernel_shape or larger pads, or feed a larger input")
        out.append(int(o))
        begin.append(int(pb))
        end.append(int(pe))
    return out, begin, end, strides, dil


def merge_broadcast(out_shape, shapes):
    """Broadcast strides of each input over ``out_shape``, with mergeable axes merged."""
    rank = len(out_shape)
    strides = []
    for shp in shapes:
        shp = (1,) * (rank - len(shp)) + tuple(shp)
        st, acc = [], 1
        for d in reversed(shp):
            st.append(0 if d == 1 else acc)
            acc *= d
        strides.append(list(reversed(st)))
    dims = list(out_shape)
    # drop size-1 axes, then merge neighbours that are contiguous for every operand
    keep = [i for i in range(rank) if dims[i] != 1]
    dims = [dims[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    md, ms = [], [[] for _ in strides]
    for i, d in enumerate(dims):
        if md and all(s[i] * d == m[-1] if m[-1] else s[i] == 0 for s, m in zip(strides, ms)) \
                and all((s[i] == 0) == (m[-1] == 0) for s, m in zip(strides, ms)):
            md[-1] *= d
            for s, m in zip(strides, ms):
                m[-1] = s[i]
        else:
            md.append(d)
            for s, m in zip(strides, ms):
                m.append(s[i])
    return md or [1], [m or [0] for m in ms]


def why_not_conv_like(node, graph, auto_pads: tuple[str, ...]) -> str | None:
    """The checks Conv and ConvTranspose share: float32 x/w/b, 1-D or 2-D (input rank 3 or
    4), and an auto_pad among ``auto_pads``."""
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    why = need_f32(node, graph, [x, w, b])
    if why:
        return why
    r = rank_of(graph, x)
    if r not in (3, 4):
        return (f"{node.op_type} with input rank {r}: only 1-D and 2-D (rank 3 or 4) run "
                f"here")
    pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    if pad not in auto_pads:
        return f"{node.op_type} with auto_pad={pad!r}"
    return None

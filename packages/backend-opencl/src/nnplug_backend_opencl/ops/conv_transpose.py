"""ConvTranspose (1-D and 2-D, groups, strides, pads, dilations, output_padding) as a gather:
each output element sums the inputs and weights that scatter onto it, so no atomics."""

from __future__ import annotations

from .common import F32, i32, rank_of, why_not_conv_like


def supports(node, graph):
    why = why_not_conv_like(node, graph, ("NOTSET", "VALID"))
    if why:
        return why
    w = node.inputs[1]
    if node.attr("output_shape") is not None:
        return "ConvTranspose with the output_shape attribute"
    if w not in graph.constants and rank_of(graph, w) is None:
        return "ConvTranspose with weights of unknown rank"
    return None


def lower(node, p):
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    xs, ws = list(p.shape(x)), list(p.shape(w))
    if len(xs) == 3:  # 1-D as 2-D with a height of 1
        xs, ws = xs[:2] + [1] + xs[2:], ws[:2] + [1] + ws[2:]
    n, c, h, wd = xs
    groups = int(node.attr("group", 1))
    if ws[0] != c or c % groups:
        raise ValueError(f"ConvTranspose {node.name!r}: weights {p.shape(w)} do not fit input "
                         f"{p.shape(x)} with group={groups}")
    mg, kh, kw = ws[1], ws[2], ws[3]
    m = mg * groups
    nsp = len(p.shape(x)) - 2

    def per_axis(name, default):
        v = list(node.attr(name) or [default] * nsp)
        return ([default] + v) if nsp == 1 else v

    strides, dil, outpad = per_axis("strides", 1), per_axis("dilations", 1), \
        per_axis("output_padding", 0)
    pads = list(node.attr("pads") or [0] * (2 * nsp))
    if (node.attr("auto_pad", "NOTSET") or "NOTSET") == "VALID":
        pads = [0] * (2 * nsp)
    pb, pe = pads[:nsp], pads[nsp:]
    if nsp == 1:
        pb, pe = [0] + pb, [0] + pe
    out = [strides[i] * ((h, wd)[i] - 1) + outpad[i] + (((kh, kw)[i] - 1) * dil[i] + 1)
           - pb[i] - pe[i] for i in range(2)]
    if min(out) < 0:
        raise ValueError(f"ConvTranspose {node.name!r}: negative output size {out}")
    shape = [n, m] + (out[1:] if nsp == 1 else out)
    y = p.define(node.outputs[0], shape, F32)
    total = n * m * out[0] * out[1]
    p.launch("conv_transpose.cl", "conv_transpose", (total,),
             [x, w, b or w, y, i32(c), i32(h), i32(wd), i32(m), i32(out[0]), i32(out[1]),
              i32(groups), i32(kh), i32(kw), i32(strides[0]), i32(strides[1]), i32(pb[0]),
              i32(pb[1]), i32(dil[0]), i32(dil[1]), i32(b is not None), i32(total)])




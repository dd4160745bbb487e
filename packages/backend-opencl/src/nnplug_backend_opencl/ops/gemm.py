"""Gemm and MatMul on one strided, batched kernel."""

from __future__ import annotations

import numpy as np

from .common import F32, activation, f32, i32, need_f32, rank_of

TM = 4


def _launch(p, node, a, b, c, y, batch_offsets, m, n, k, sa, sb, sc, alpha, beta):
    act, aa, ab = activation(node)
    kernel, rows = ("gemm_row", m) if m < TM else ("gemm", (m + TM - 1) // TM)
    p.launch("gemm.cl", kernel, (n, rows, len(batch_offsets) // 2),
             [a, b, c, y, p.meta(batch_offsets), i32(m), i32(n), i32(k), i32(sa[0]), i32(sa[1]),
              i32(sb[0]), i32(sb[1]), i32(sc[0]), i32(sc[1]), f32(alpha), f32(beta), i32(act),
              f32(aa), f32(ab)])


def supports_gemm(node, graph):
    why = need_f32(node, graph, [i for i in node.inputs if i])
    if why:
        return why
    for name in node.inputs[:2]:
        if rank_of(graph, name) not in (2, None):
            return "Gemm takes 2-D A and B"
    return None


def lower_gemm(node, p):
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    ta, tb = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    (am, ak), (bk, bn) = p.shape(a), p.shape(b)
    m, k = (ak, am) if ta else (am, ak)
    kb, n = (bn, bk) if tb else (bk, bn)
    if k != kb:
        raise ValueError(f"Gemm {node.name!r}: A {p.shape(a)} and B {p.shape(b)} do not agree")
    sa = (1, ak) if ta else (ak, 1)
    if p.is_const(b) and tb and m >= TM:
        # a constant B^T is stored as [K, N] once, so neighbouring work-items read neighbours
        b = p.derived_const(("gemmB", node.name),
                            lambda: np.ascontiguousarray(np.asarray(p.const_array(node.inputs[1])).T))
        sb = (n, 1)
    else:
        sb = (1, bn) if tb else (bn, 1)
    y = p.define(node.outputs[0], (m, n), F32)
    if c is None or beta == 0.0:
        c, sc, beta = y, (0, 0), 0.0
    else:
        cs = p.shape(c)
        full = (1,) * (2 - len(cs)) + tuple(cs)
        if any(d not in (1, want) for d, want in zip(full, (m, n))):
            raise ValueError(f"Gemm {node.name!r}: C {cs} does not broadcast to {(m, n)}")
        sc = (0 if full[0] == 1 else full[1], 0 if full[1] == 1 else 1)
    _launch(p, node, a, b, c, y, [0, 0], m, n, k, sa, sb, sc, alpha, beta)


def supports_matmul(node, graph):
    return need_f32(node, graph, node.inputs)


def lower_matmul(node, p):
    a, b = node.inputs
    ashape, bshape = list(p.shape(a)), list(p.shape(b))
    if not ashape or not bshape:
        raise ValueError(f"MatMul {node.name!r}: scalars are not matrices")
    a1, b1 = len(ashape) == 1, len(bshape) == 1
    if a1:
        ashape = [1] + ashape
    if b1:
        bshape = bshape + [1]
    m, k = ashape[-2:]
    kb, n = bshape[-2:]
    if k != kb:
        raise ValueError(f"MatMul {node.name!r}: {p.shape(a)} @ {p.shape(b)}: inner sizes differ")
    batch = list(np.broadcast_shapes(tuple(ashape[:-2]), tuple(bshape[:-2])))
    out = batch + ([] if a1 else [m]) + ([] if b1 else [n])
    y = p.define(node.outputs[0], out, F32)
    offsets = []
    abatch = [1] * (len(batch) - len(ashape[:-2])) + ashape[:-2]
    bbatch = [1] * (len(batch) - len(bshape[:-2])) + bshape[:-2]
    for idx in np.ndindex(*batch) if batch else [()]:
        ai = sum(((0 if d == 1 else i) * int(np.prod(abatch[j + 1:], dtype=np.int64)))
                 for j, (i, d) in enumerate(zip(idx, abatch)))
        bi = sum(((0 if d == 1 else i) * int(np.prod(bbatch[j + 1:], dtype=np.int64)))
                 for j, (i, d) in enumerate(zip(idx, bbatch)))
        offsets += [ai * m * k, bi * k * n]
    _launch(p, node, a, b, y, y, offsets, m, n, k, (k, 1), (n, 1), (0, 0), 1.0, 0.0)

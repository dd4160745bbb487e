"""Every body against onnxruntime's own kernel on random inputs.

Tolerances: float outputs within 2e-5 relative + 2e-5 absolute (values are O(1); the bodies
compute in float32 as onnxruntime does, and differ from it only in summation order and in
where a scale is applied: a few ulps per element, a few times that after a softmax or
LayerNorm); quantized outputs within one quantization step (onnxruntime's kernels round
through lookup tables or fused float math, which may land on the other side of a .5)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_of, run_ort

R = np.random.default_rng(2026)
F = np.float32


def f(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(F)


def const(name, a):
    return (name, a, True)


B, S, H, N = 2, 5, 16, 4


def attention_case(mask=None, past=False, unidirectional=0, qkv_sizes=None, attn_bias=False,
                   scale=None):
    sizes = qkv_sizes or [H, H, H]
    attrs = {"num_heads": N, "unidirectional": unidirectional}
    if qkv_sizes:
        attrs["qkv_hidden_sizes"] = qkv_sizes
    if scale:
        attrs["scale"] = scale
    P = 3 if past else 0
    ins = [("x", f(B, S, H)), const("w", f(H, sum(sizes), scale=0.3)),
           const("bias", f(sum(sizes), scale=0.1)),
           ("mask", mask(P) if mask else None) if mask else None,
           ("past", f(2, B, N, P, H // N)) if past else None,
           ("ab", f(B, N, S, S + P)) if attn_bias else None]
    while ins[-1] is None:
        ins.pop()
    outs = ["y", "present"] if past else ["y"]
    return model_of("Attention", ins, outs, attrs)


def _mask_1d(P):
    return np.array([S + P - 1, 2], np.int32)


def _mask_1d_start(P):
    return np.array([S + P, 4, 1, 2], np.int32)


def _mask_2d(P):
    m = np.ones((B, S + P), np.int32)
    m[0, -2:] = 0
    m[1, :1] = 0
    return m


def _mask_3d(P):
    return (R.random((B, S, S + P)) > 0.3).astype(np.int32)


def _rotary(interleaved, rank, offset=False):
    heads, head, seq, maxpos = 2, 8, 4, 16
    half = head // 2
    cos = np.cos(np.arange(maxpos)[:, None] * (0.3 + np.arange(half))[None]).astype(F)
    sin = np.sin(np.arange(maxpos)[:, None] * (0.3 + np.arange(half))[None]).astype(F)
    x = f(B, seq, heads * head) if rank == 3 else f(B, heads, seq, head)
    pos = np.array([3], np.int64) if offset else R.integers(0, maxpos, (B, seq)).astype(np.int64)
    attrs = {"interleaved": int(interleaved)}
    if rank == 3:
        attrs["num_heads"] = heads
    return model_of("RotaryEmbedding", [("x", x), ("pos", pos), const("cos", cos),
                                        const("sin", sin)], ["y"], attrs)


def _nbits(bits, zp, k=40, bias=True, float_zp=False, g_idx=False):
    n, block = 6, 16
    blocks = (k + block - 1) // block
    per = 8 // bits
    q = R.integers(0, 1 << bits, (n, blocks * block)).astype(np.uint8)
    packed = np.zeros((n, blocks * block // per), np.uint8)
    for j in range(per):
        packed |= (q[:, j::per] << (j * bits)).astype(np.uint8)
    ins = [("a", f(3, k)), const("b", packed.reshape(n, blocks, -1)),
           const("scales", (R.random(n * blocks) * 0.1 + 0.01).astype(F))]
    if zp and float_zp:
        ins.append(const("zp", (R.random(n * blocks) * 8).astype(F)))
    elif zp:
        zq = R.integers(0, 1 << bits, (n, blocks)).astype(np.uint8)
        zb = (blocks + per - 1) // per
        zpad = np.zeros((n, zb * per), np.uint8)
        zpad[:, :blocks] = zq
        zpk = np.zeros((n, zb), np.uint8)
        for j in range(per):
            zpk |= (zpad[:, j::per] << (j * bits)).astype(np.uint8)
        ins.append(const("zp", zpk.reshape(-1)))
    else:
        ins.append(None)
    if g_idx:  # act-order: each k's block given (a permutation of the plain k // block)
        ins.append(const("g", R.permutation(np.arange(k) // block).astype(np.int32)))
    elif bias:
        ins.append(None)
    if bias:
        ins.append(const("bias", f(n)))
    return model_of("MatMulNBits", ins, ["y"], {"K": k, "N": n, "bits": bits, "block_size": block})


def _u8(*shape):
    return R.integers(0, 256, shape).astype(np.uint8)


def _qscalar(v, dt=F):
    return np.array(v, dt)


def _qbinary(op):
    return model_of(op, [("a", _u8(2, 3, 4)), const("as", _qscalar(0.05)), const("az", _qscalar(120, np.uint8)),
                         ("b", _u8(2, 3, 4)), const("bs", _qscalar(0.03)), const("bz", _qscalar(130, np.uint8)),
                         const("cs", _qscalar(0.07)), const("cz", _qscalar(125, np.uint8))], ["y"])


def _qunary(op, **attrs):
    return model_of(op, [("x", _u8(2, 3, 4)), const("xs", _qscalar(0.05)), const("xz", _qscalar(128, np.uint8)),
                         const("ys", _qscalar(1 / 256 if op != "QLinearLeakyRelu" else 0.04)),
                         const("yz", _qscalar(0 if op != "QLinearLeakyRelu" else 128, np.uint8))],
                    ["y"], attrs)


def _embed(segment=True, mask=True, pos_ids=False, quant=False):
    vocab, maxpos = 30, 12
    ids = R.integers(0, vocab, (B, S)).astype(np.int32)
    seg = R.integers(0, 2, (B, S)).astype(np.int32)
    m = np.ones((B, S), np.int32)
    m[1, 3:] = 0
    ins = [("ids", ids), ("seg", seg) if segment else None]
    tables = [f(vocab, H), f(maxpos, H), f(2, H), f(H, scale=0.2) + 1, f(H, scale=0.2)]
    if not quant:
        ins += [const("word", tables[0]), const("pos", tables[1]),
                const("segt", tables[2]) if segment else None, const("gamma", tables[3]),
                const("beta", tables[4]), ("mask", m) if mask else None]
        if pos_ids:
            ins.append(("pos_ids", R.integers(0, maxpos, (B, S)).astype(np.int32)))
        while ins[-1] is None:
            ins.pop()
        return model_of("EmbedLayerNormalization", ins, ["y", "mask_index"], {"epsilon": 1e-5})
    scales = [float(np.abs(t).max() / 127) for t in tables]
    qt = [np.clip(np.round(t / s) + 128, 0, 255).astype(np.uint8) for t, s in zip(tables, scales)]
    ins += [const("word", qt[0]), const("pos", qt[1]), const("segt", qt[2]),
            const("gamma", qt[3]), const("beta", qt[4]), ("mask", m)]
    ins += [const(f"s{i}", _qscalar(s)) for i, s in enumerate(scales)]
    ins += [const(f"z{i}", _qscalar(128, np.uint8)) for i in range(5)]
    return model_of("QEmbedLayerNormalization", ins, ["y", "mask_index"], {"epsilon": 1e-5})


def _qattention(unidirectional=0, mask=False):
    x = _u8(B, S, H)
    w = R.integers(-127, 128, (H, 3 * H)).astype(np.int8)
    ins = [("x", x), const("w", w), const("bias", f(3 * H, scale=0.1)),
           const("xs", _qscalar(0.02)), const("ws", _qscalar(0.01)),
           ("mask", _mask_2d(0)) if mask else None, const("xz", _qscalar(128, np.uint8))]
    return model_of("QAttention", ins, ["y"], {"num_heads": N, "unidirectional": unidirectional})


def _mha(mask=False, past=False, bias=True, bnsh=False, unidirectional=0):
    L, P, hd = 6, 3, H // N
    if bnsh:
        ins = [("q", f(B, S, H)), ("k", f(B, N, L, hd)), ("v", f(B, N, L, hd))]
    else:
        ins = [("q", f(B, S, H)), ("k", f(B, L, H)), ("v", f(B, L, H))]
    ins.append(const("bias", f(3 * H, scale=0.1)) if bias and not bnsh else None)
    m = np.ones((B, L + (P if past else 0)), np.int32)
    m[0, -2:] = 0
    ins.append(("kpm", m) if mask else None)
    ins.append(None)
    if past:
        ins += [("pk", f(B, N, P, hd)), ("pv", f(B, N, P, hd))]
    while ins[-1] is None:
        ins.pop()
    outs = ["y", "present_k", "present_v"] if past else ["y"]
    return model_of("MultiHeadAttention", ins, outs, {"num_heads": N, "unidirectional": unidirectional})


def _gqa(step=False, buffer=0, rotary=None, window=-1, softcap=0.0, packed=False, heads=4,
         kv_heads=2):
    """A first prompt (total = S), or one decoding step (S = 1) after pasts of two lengths."""
    hd, maxpos = (16 if rotary is not None else 8), 32  # rotary: onnxruntime wants 16k heads
    seq = 1 if step else 4
    past_lens = [6, 3] if step else [0, 0]
    totals = [p + seq for p in past_lens]
    total = max(totals)
    ins = []
    if packed:
        ins += [("q", f(B, seq, (heads + 2 * kv_heads) * hd)), None, None]
    else:
        ins += [("q", f(B, seq, heads * hd)), ("k", f(B, seq, kv_heads * hd)),
                ("v", f(B, seq, kv_heads * hd))]
    pbuf = max(buffer, total - seq) if step else buffer
    if pbuf:
        ins += [("pk", f(B, kv_heads, pbuf, hd)), ("pv", f(B, kv_heads, pbuf, hd))]
    else:
        ins += [None, None]
    ins += [("seqlens_k", np.array([t - 1 for t in totals], np.int32)),
            ("total", np.array(total, np.int32))]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "local_window_size": window}
    if softcap:
        attrs["softcap"] = softcap
    if rotary is not None:
        half = hd // 2
        ang = np.arange(maxpos)[:, None] * (0.1 + np.arange(half))[None]
        ins += [const("cos", np.cos(ang).astype(F)), const("sin", np.sin(ang).astype(F))]
        attrs.update(do_rotary=1, rotary_interleaved=int(rotary))
    return model_of("GroupQueryAttention", ins, ["y", "present_k", "present_v"], attrs)


FLOAT_CASES = {
    "Gelu": lambda: model_of("Gelu", [("x", f(3, 7, scale=3))], ["y"]),
    "BiasGelu": lambda: model_of("BiasGelu", [("x", f(3, 7, scale=3)), const("b", f(7))], ["y"]),
    "FastGelu": lambda: model_of("FastGelu", [("x", f(3, 7, scale=3))], ["y"]),
    "FastGelu-bias": lambda: model_of("FastGelu", [("x", f(3, 7, scale=3)), const("b", f(7))], ["y"]),
    "QuickGelu": lambda: model_of("QuickGelu", [("x", f(3, 7, scale=3))], ["y"]),
    "QuickGelu-alpha": lambda: model_of("QuickGelu", [("x", f(3, 7, scale=3))], ["y"], {"alpha": 1.0}),
    "SkipLayerNormalization": lambda: model_of(
        "SkipLayerNormalization", [("x", f(B, S, H)), ("s", f(B, S, H)), const("g", f(H) + 1),
                                   const("be", f(H)), const("bi", f(H))],
        ["y", "", "", "sum"], {"epsilon": 1e-5}),
    "SkipLayerNormalization-nobeta": lambda: model_of(
        "SkipLayerNormalization", [("x", f(B, S, H)), ("s", f(B, S, H)), const("g", f(H) + 1)],
        ["y"], {"epsilon": 1e-6}),
    "SkipLayerNormalization-broadcast-skip": lambda: model_of(
        "SkipLayerNormalization", [("x", f(B, S, H)), ("s", f(1, S, H)), const("g", f(H) + 1),
                                   const("be", f(H))], ["y"]),
    "SkipSimplifiedLayerNormalization": lambda: model_of(
        "SkipSimplifiedLayerNormalization", [("x", f(B, S, H)), ("s", f(B, S, H)),
                                             const("g", f(H) + 1), const("bi", f(H))],
        ["y", "", "", "sum"], {"epsilon": 1e-5}),
    "SimplifiedLayerNormalization": lambda: model_of(
        "SimplifiedLayerNormalization", [("x", f(B, S, H)), const("g", f(H) + 1)], ["y"],
        {"epsilon": 1e-5, "axis": -1}, domain=""),
    "SimplifiedLayerNormalization-axis-1": lambda: model_of(
        "SimplifiedLayerNormalization", [("x", f(B, S, H)), const("g", f(S, H) + 1)], ["y"],
        {"epsilon": 1e-5, "axis": 1}, domain=""),
    "EmbedLayerNormalization": lambda: _embed(),
    "EmbedLayerNormalization-no-segment-no-mask": lambda: _embed(segment=False, mask=False),
    "EmbedLayerNormalization-position-ids": lambda: _embed(pos_ids=True),
    "EmbedLayerNormalization-mask-index-type-0": lambda: model_of(
        "EmbedLayerNormalization", [("ids", R.integers(0, 10, (B, S)).astype(np.int32)), None,
                                    const("w", f(10, H)), const("p", f(10, H)), None,
                                    const("g", f(H)), const("b", f(H)),
                                    ("m", np.ones((B, S), np.int32))], ["y"], {"mask_index_type": 0}),
    "EmbedLayerNormalization-mask-values-not-0-1": lambda: model_of(
        "EmbedLayerNormalization", [("ids", np.array([[1, 2, 3, 4]], np.int32)), None,
                                    const("w", f(10, H)), const("p", f(10, H)), None,
                                    const("g", f(H)), const("b", f(H)),
                                    ("mask", np.array([[1, 2, 0, 1]], np.int32))],
        ["y", "mask_index"], {"epsilon": 1e-5}),
    "SkipLayerNormalization-2d-skip": lambda: model_of(
        "SkipLayerNormalization", [("x", f(B, S, H)), ("s", f(S, H)), const("g", f(H) + 1)], ["y"]),
    "Attention": lambda: attention_case(),
    "Attention-no-bias": lambda: model_of("Attention", [("x", f(B, S, H)), const("w", f(H, 3 * H))],
                                          ["y"], {"num_heads": N}),
    "Attention-mask-1d-end-0": lambda: attention_case(lambda P: np.array([0, S + P], np.int32)),
    "Attention-mask-2d-row-of-zeros": lambda: attention_case(
        lambda P: np.array([[0] * (S + P), [1] * (S + P)], np.int32)),
    "Attention-mask-1d-end": lambda: attention_case(_mask_1d),
    "Attention-mask-1d-end-start": lambda: attention_case(_mask_1d_start),
    "Attention-mask-2d": lambda: attention_case(_mask_2d),
    "Attention-mask-3d": lambda: attention_case(_mask_3d),
    "Attention-unidirectional": lambda: attention_case(unidirectional=1),
    "Attention-unidirectional-mask-2d": lambda: attention_case(_mask_2d, unidirectional=1),
    "Attention-past-present": lambda: attention_case(_mask_2d, past=True, unidirectional=1),
    "Attention-qkv-hidden-sizes": lambda: attention_case(qkv_sizes=[H, H, 2 * H]),
    "Attention-attention-bias-scale": lambda: attention_case(attn_bias=True, scale=0.3),
    "MultiHeadAttention": lambda: _mha(),
    "MultiHeadAttention-mask-2d": lambda: _mha(mask=True),
    "MultiHeadAttention-past": lambda: _mha(past=True, mask=True),
    "MultiHeadAttention-bnsh-kv": lambda: _mha(bnsh=True, bias=False),
    "MultiHeadAttention-unidirectional": lambda: _mha(unidirectional=1),
    "MultiHeadAttention-mask-1d": lambda: model_of(
        "MultiHeadAttention", [("q", f(B, S, H)), ("k", f(B, 6, H)), ("v", f(B, 6, H)), None,
                               ("m", np.array([4, 6], np.int32))], ["y"], {"num_heads": N}),
    "MultiHeadAttention-mask-3d": lambda: model_of(
        "MultiHeadAttention", [("q", f(B, S, H)), ("k", f(B, 6, H)), ("v", f(B, 6, H)), None,
                               ("m", (R.random((B, S, 6)) > 0.3).astype(np.int32))], ["y"],
        {"num_heads": N}),
    "MultiHeadAttention-attention-bias-scale": lambda: model_of(
        "MultiHeadAttention", [("q", f(B, S, H)), ("k", f(B, 6, H)), ("v", f(B, 6, H)), None, None,
                               ("ab", f(1, N, S, 6))], ["y"], {"num_heads": N, "scale": 0.2}),
    "Attention-past-mask-1d-end-start": lambda: attention_case(_mask_1d_start, past=True,
                                                               unidirectional=1),
    "GroupQueryAttention-prompt": lambda: _gqa(),
    "GroupQueryAttention-prompt-in-a-longer-buffer": lambda: _gqa(buffer=8),
    "GroupQueryAttention-step": lambda: _gqa(step=True),
    "GroupQueryAttention-step-rotary": lambda: _gqa(step=True, rotary=False),
    "GroupQueryAttention-prompt-rotary-interleaved": lambda: _gqa(rotary=True),
    "GroupQueryAttention-window-softcap": lambda: _gqa(window=2, softcap=5.0),
    "GroupQueryAttention-step-window": lambda: _gqa(step=True, window=3),
    "GroupQueryAttention-packed-qkv": lambda: _gqa(packed=True),
    "GroupQueryAttention-mha-heads": lambda: _gqa(step=True, heads=2, kv_heads=2),
    "RotaryEmbedding-4d": lambda: _rotary(False, 4),
    "RotaryEmbedding-3d-interleaved": lambda: _rotary(True, 3),
    "RotaryEmbedding-offset": lambda: _rotary(False, 4, offset=True),
    "FusedMatMul": lambda: model_of("FusedMatMul", [("a", f(2, 4, 3)), ("b", f(2, 5, 3))], ["y"],
                                    {"transB": 1, "alpha": 0.5}),
    "FusedMatMul-transA": lambda: model_of("FusedMatMul", [("a", f(2, 3, 4)), ("b", f(2, 3, 5))], ["y"],
                                           {"transA": 1}),
    "FusedMatMul-transBatchA": lambda: model_of("FusedMatMul", [("a", f(4, 2, 6, 3)), ("b", f(2, 6, 3, 5))],
                                                ["y"], {"transBatchA": 1}),
    "FusedMatMul-transBatch-trans-both": lambda: model_of(
        "FusedMatMul", [("a", f(3, 2, 6, 4)), ("b", f(5, 2, 6, 3))], ["y"],
        {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1, "alpha": 0.7}),
    "FusedMatMul-broadcast": lambda: model_of("FusedMatMul", [("a", f(2, 1, 4, 3)), ("b", f(3, 3, 5))],
                                              ["y"], {"alpha": 2.0}),
    "MatMulNBits-4": lambda: _nbits(4, zp=False),
    "MatMulNBits-4-zp": lambda: _nbits(4, zp=True),
    "MatMulNBits-4-float-zp": lambda: _nbits(4, zp=True, float_zp=True, bias=False),
    "MatMulNBits-8-zp": lambda: _nbits(8, zp=True, k=32),
    "MatMulNBits-2": lambda: _nbits(2, zp=True),
    "MatMulNBits-4-g_idx-float-zp": lambda: _nbits(4, zp=True, float_zp=True, g_idx=True),
    "MatMulNBits-4-g_idx-no-zp": lambda: _nbits(4, zp=False, g_idx=True, bias=False),
    "DynamicQuantizeMatMul": lambda: model_of(
        "DynamicQuantizeMatMul", [("a", f(3, 8)), const("b", R.integers(-127, 128, (8, 5)).astype(np.int8)),
                                  const("bs", _qscalar(0.02)), None, const("bias", f(5))], ["y"]),
    "DynamicQuantizeMatMul-per-column": lambda: model_of(
        "DynamicQuantizeMatMul", [("a", f(3, 8)), const("b", _u8(8, 5)),
                                  const("bs", (R.random(5) * 0.02).astype(F)),
                                  const("bz", R.integers(100, 150, 5).astype(np.uint8))], ["y"]),
    "MatMulIntegerToFloat": lambda: model_of(
        "MatMulIntegerToFloat", [("a", _u8(3, 8)), const("b", R.integers(-127, 128, (8, 5)).astype(np.int8)),
                                 const("as", _qscalar(0.03)), const("bs", _qscalar(0.02)),
                                 const("az", _qscalar(120, np.uint8)), None, const("bias", f(5))], ["y"]),
    "QAttention": lambda: _qattention(),
    "QAttention-per-column-weight-scale": lambda: model_of(
        "QAttention", [("x", _u8(B, S, H)), const("w", R.integers(-127, 128, (H, 3 * H)).astype(np.int8)),
                       const("bias", f(3 * H)), const("xs", _qscalar(0.02)),
                       const("ws", (R.random(3 * H) * 0.02).astype(F)), None,
                       const("xz", _qscalar(128, np.uint8)),
                       const("wz", R.integers(-3, 4, 3 * H).astype(np.int8))], ["y"], {"num_heads": N}),
    "DynamicQuantizeMatMul-3d": lambda: model_of(
        "DynamicQuantizeMatMul", [("a", f(2, 3, 8)), const("b", R.integers(-127, 128, (8, 5)).astype(np.int8)),
                                  const("bs", _qscalar(0.02))], ["y"]),
    "QAttention-unidirectional-mask": lambda: _qattention(unidirectional=1, mask=True),
    "QEmbedLayerNormalization": lambda: _embed(quant=True),
}

def _i8(*shape):
    return R.integers(-128, 128, shape).astype(np.int8)


QUANT_CASES = {
    "QLinearSoftmax-opset-12": lambda: model_of(
        "QLinearSoftmax", [("x", _u8(2, 3, 4)), const("xs", _qscalar(0.05)), const("xz", _qscalar(128, np.uint8)),
                           const("ys", _qscalar(1 / 256)), const("yz", _qscalar(0, np.uint8))],
        ["y"], {"axis": 1, "opset": 12}),
    "QLinearSoftmax-int8": lambda: model_of(
        "QLinearSoftmax", [("x", _i8(2, 3, 4)), const("xs", _qscalar(0.05)), const("xz", _qscalar(0, np.int8)),
                           const("ys", _qscalar(1 / 256)), const("yz", _qscalar(-128, np.int8))],
        ["y"], {"axis": -1, "opset": 13}),
    "QLinearAdd-int8-broadcast": lambda: model_of(
        "QLinearAdd", [("a", _i8(2, 3)), const("as", _qscalar(0.05)), const("az", _qscalar(3, np.int8)),
                       ("b", _i8(3)), const("bs", _qscalar(0.03)), const("bz", _qscalar(-2, np.int8)),
                       const("cs", _qscalar(0.07)), const("cz", _qscalar(1, np.int8))], ["y"]),
    "QLinearSigmoid-int8": lambda: model_of(
        "QLinearSigmoid", [("x", _i8(2, 3)), const("xs", _qscalar(0.05)), const("xz", _qscalar(0, np.int8)),
                           const("ys", _qscalar(1 / 256)), const("yz", _qscalar(-128, np.int8))], ["y"]),
    "QLinearGlobalAveragePool-int8": lambda: model_of(
        "QLinearGlobalAveragePool", [("x", _i8(2, 3, 4, 4)), const("xs", _qscalar(0.05)),
                                     const("xz", _qscalar(0, np.int8)), const("ys", _qscalar(0.02)),
                                     const("yz", _qscalar(0, np.int8))], ["y"]),
    "QLinearAdd": lambda: _qbinary("QLinearAdd"),
    "QLinearMul": lambda: _qbinary("QLinearMul"),
    "QLinearSigmoid": lambda: _qunary("QLinearSigmoid"),
    "QLinearLeakyRelu": lambda: _qunary("QLinearLeakyRelu", alpha=0.1),
    "QLinearSoftmax": lambda: _qunary("QLinearSoftmax", axis=-1, opset=13),
    "QLinearConcat": lambda: model_of(
        "QLinearConcat", [const("ys", _qscalar(0.06)), const("yz", _qscalar(128, np.uint8)),
                          ("a", _u8(2, 3)), const("as", _qscalar(0.05)), const("az", _qscalar(120, np.uint8)),
                          ("b", _u8(2, 4)), const("bs", _qscalar(0.07)), const("bz", _qscalar(130, np.uint8))],
        ["y"], {"axis": 1}),
    "QLinearGlobalAveragePool": lambda: model_of(
        "QLinearGlobalAveragePool", [("x", _u8(2, 3, 4, 4)), const("xs", _qscalar(0.05)),
                                     const("xz", _qscalar(128, np.uint8)), const("ys", _qscalar(0.02)),
                                     const("yz", _qscalar(128, np.uint8))], ["y"]),
    "QLinearGlobalAveragePool-channels-last": lambda: model_of(
        "QLinearGlobalAveragePool", [("x", _u8(2, 4, 4, 3)), const("xs", _qscalar(0.05)),
                                     const("xz", _qscalar(128, np.uint8)), const("ys", _qscalar(0.02)),
                                     const("yz", _qscalar(128, np.uint8))], ["y"], {"channels_last": 1}),
}


@pytest.mark.parametrize("case", list(FLOAT_CASES))
def test_float_op_matches_onnxruntime(case, run_nnplug):
    model, feeds = FLOAT_CASES[case]()
    want = run_ort(model, feeds)
    got, where = run_nnplug(model, feeds)
    assert all("/" in k for k in where), f"the node was not expanded: {where}"
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("case", list(QUANT_CASES))
def test_quantized_op_within_one_step_of_onnxruntime(case, run_nnplug):
    model, feeds = QUANT_CASES[case]()
    want = run_ort(model, feeds)["y"]
    got, _ = run_nnplug(model, feeds)
    got = got["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"{case}: {int((diff > 1).sum())} values off by more than one step"


def test_bias_add_matches_numpy(run_nnplug):
    """onnxruntime runs BiasAdd on CUDA only: here numpy is the reference."""
    x, bias, skip = f(2, 3, 8), f(8), f(2, 3, 8)
    model, feeds = model_of("BiasAdd", [("x", x), const("b", bias), ("s", skip)], ["y"])
    got, _ = run_nnplug(model, feeds)
    np.testing.assert_allclose(got["y"], x + bias + skip, rtol=1e-6, atol=1e-6)

"""Matrix products: FusedMatMul, MatMulNBits (blockwise dequantization then MatMul),
DynamicQuantizeMatMul and MatMulIntegerToFloat (integer MatMul, then scales and bias)."""

from __future__ import annotations

import numpy as np

from .body import Body


def _transposed(b: Body, x: str, k: int, trans: bool, trans_batch: bool) -> str:
    if not trans and not trans_batch:
        return x
    r = b.rank(k)
    if trans_batch:  # stored (M, B.., K), or (K, B.., M) with trans: -> (B.., M, K)
        batch = list(range(1, r - 1))
        return b.op("Transpose", x, perm=[*batch, r - 1, 0] if trans else [*batch, 0, r - 1])
    perm = list(range(r - 2)) + [r - 1, r - 2]
    return b.op("Transpose", x, perm=perm)


def fused_matmul(b: Body) -> None:
    """alpha * op(A) @ op(B): transA/transB transpose the last two dims; transBatchA/B say
    the input is stored with its first dim (M, or K with trans) before the batch dims."""
    a = _transposed(b, b.input(0), 0, bool(b.attr("transA", 0)), bool(b.attr("transBatchA", 0)))
    c = _transposed(b, b.input(1), 1, bool(b.attr("transB", 0)), bool(b.attr("transBatchB", 0)))
    y = b.op("MatMul", a, c)
    alpha = float(b.attr("alpha", 1.0))
    b.output(0, y if alpha == 1.0 else b.op("Mul", y, b.fconst(alpha, y, 0)))


def matmul_nbits(b: Body) -> None:
    """A (.., K) @ W^T, W (N, K) dequantized from B (N, blocks, block_size*bits/8 bytes,
    low bits first), scales (N*blocks) and zero_points (packed like B, or of the scales'
    type; 2^(bits-1) when absent), plus bias (N)."""
    bits = int(b.attr("bits", 4))
    block = int(b.attr("block_size"))
    n, k = int(b.attr("N")), int(b.attr("K"))
    if bits not in (2, 4, 8):
        raise ValueError(f"bits={bits}: 2, 4 or 8 are supported")
    if b.has(4):
        raise ValueError("g_idx (input 4) is not supported")
    blocks = (k + block - 1) // block
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    q = b.op("Reshape", b.input(1), b.const([n, blocks, -1, 1]))
    if per_byte > 1:  # unpack: the value at position j of a byte is (byte >> j*bits) & mask
        shifts = b.const(np.arange(per_byte, dtype=np.uint8) * bits, np.uint8)
        q = b.op("BitShift", q, b.op("Reshape", shifts, b.const([1, 1, 1, per_byte])),
                 direction="RIGHT")
        q = _low_bits(b, q, mask)
    q = b.op("Reshape", q, b.const([n, blocks, block]))
    scales = b.op("Reshape", b.input(2), b.const([n, blocks, 1]))
    wq = b.cast(q, np.float32)
    if b.has(3) and b.dtype(3) == np.uint8:
        zq = b.op("Reshape", b.input(3), b.const([n, -1, 1]))
        if per_byte > 1:
            zq = b.op("BitShift", zq, b.op("Reshape", shifts, b.const([1, 1, per_byte])),
                      direction="RIGHT")
            zq = _low_bits(b, zq, mask)
        zq = b.op("Reshape", zq, b.const([n, -1]))
        zp = b.cast(b.unsqueeze(b.slice(zq, [0], [blocks], [1]), [2]), np.float32)
    elif b.has(3):
        zp = b.op("Reshape", b.cast(b.input(3), np.float32), b.const([n, blocks, 1]))
    else:
        zp = b.const(float(1 << (bits - 1)), np.float32)
    w = b.op("Mul", b.op("Sub", wq, zp), b.cast(scales, np.float32))
    w = b.slice(b.op("Reshape", w, b.const([n, blocks * block])), [0], [k], [1])
    w = b.op("Transpose", b.op("CastLike", w, b.input(0)) if b.opset >= 15
             else b.cast(w, b.dtype(0)), perm=[1, 0])
    y = b.op("MatMul", b.input(0), w)
    b.output(0, b.op("Add", y, b.input(5)) if b.has(5) else y)


def _low_bits(b: Body, x: str, mask: int) -> str:
    """x & mask (mask = 2^bits - 1): BitwiseAnd from opset 18, Mod before."""
    if b.opset >= 18:
        return b.op("BitwiseAnd", x, b.const(mask, np.uint8))
    return b.op("Mod", x, b.const(mask + 1, np.uint8))


def _scaled(b: Body, acc: str, scale: str, bias_input: int, like_input: int) -> None:
    y = b.op("Mul", b.cast(acc, b.dtype(like_input)), scale)
    b.output(0, b.op("Add", y, b.input(bias_input)) if b.has(bias_input) else y)


def dynamic_quantize_matmul(b: Body) -> None:
    """A quantized to uint8 per tensor at run time (DynamicQuantizeLinear), integer MatMul
    with B (b_scale, b_zero_point per tensor or per column), times a_scale*b_scale, + bias."""
    aq, a_scale, a_zp = b.op("DynamicQuantizeLinear", b.input(0), n_out=3)
    acc = b.op("MatMulInteger", aq, b.input(1), a_zp, *([b.input(3)] if b.has(3) else []))
    _scaled(b, acc, b.op("Mul", a_scale, b.input(2)), 4, 0)


def matmul_integer_to_float(b: Body) -> None:
    """(A - a_zero_point) @ (B - b_zero_point) * a_scale * b_scale + bias."""
    zps = [b.input(4) if b.has(4) else "", b.input(5) if b.has(5) else ""]
    while zps and not zps[-1]:
        zps.pop()
    acc = b.op("MatMulInteger", b.input(0), b.input(1), *zps)
    _scaled(b, acc, b.op("Mul", b.input(2), b.input(3)), 6, 2)


OPS = {"FusedMatMul": fused_matmul, "MatMulNBits": matmul_nbits,
       "DynamicQuantizeMatMul": dynamic_quantize_matmul,
       "MatMulIntegerToFloat": matmul_integer_to_float}

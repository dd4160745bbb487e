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
    low bits first): W[n, k] = (q[n, k] - zero_point[n, g(k)]) * scale[n, g(k)], where g(k)
    is k's block (k // block_size, or g_idx[k] when given), zero points packed like B or of
    the scales' type (2^(bits-1) when absent); plus bias (N). B is a constant in practice,
    so the fold stage dequantizes it once at load."""
    bits = int(b.attr("bits", 4))
    block = int(b.attr("block_size"))
    n, k = int(b.attr("N")), int(b.attr("K"))
    if bits not in (2, 4, 8):
        raise ValueError(f"bits={bits}: 2, 4 or 8 are supported")
    blocks = (k + block - 1) // block
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    shifts = b.const(np.arange(per_byte, dtype=np.uint8) * bits, np.uint8)

    def unpack(x: str, rank: int) -> str:
        """The ``bits``-wide values of each byte of x, (.., bytes) -> (.., bytes, per_byte)."""
        x = b.unsqueeze(x, [rank])
        if per_byte == 1:
            return x
        x = b.op("BitShift", x, b.op("Reshape", shifts, b.const([1] * rank + [per_byte])),
                 direction="RIGHT")
        return _low_bits(b, x, mask)

    q = unpack(b.op("Reshape", b.input(1), b.const([n, blocks, -1])), 3)
    q = b.slice(b.op("Reshape", q, b.const([n, blocks * block])), [0], [k], [1])   # (N, K)
    group = b.input(4) if b.has(4) else b.const(np.arange(k) // block)              # g(k)
    scale = b.op("Gather", b.op("Reshape", b.cast(b.input(2), np.float32), b.const([n, blocks])),
                 group, axis=1)                                                    # (N, K)
    if b.has(3) and b.dtype(3) == np.uint8:
        if b.has(4):
            raise ValueError(
                "g_idx (input 4) with packed uint8 zero_points (input 3) is refused: "
                "onnxruntime 1.32's CPU kernel ignores such zero points (uses 2^(bits-1)) while "
                "the op's definition applies them, so there is no one right answer; give the "
                "zero points in the scales' type, or drop g_idx")
        zq = b.op("Reshape", unpack(b.op("Reshape", b.input(3), b.const([n, -1])), 2),
                  b.const([n, -1]))
        zp = b.op("Gather", b.cast(b.slice(zq, [0], [blocks], [1]), np.float32), group, axis=1)
    elif b.has(3):
        zp = b.op("Gather", b.op("Reshape", b.cast(b.input(3), np.float32), b.const([n, blocks])),
                  group, axis=1)
    else:
        zp = b.const(float(1 << (bits - 1)), np.float32)
    w = b.op("Mul", b.op("Sub", b.cast(q, np.float32), zp), scale)
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

"""Normalizations: SkipLayerNormalization, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization (onnxruntime puts it in the ai.onnx domain),
EmbedLayerNormalization and its quantized form QEmbedLayerNormalization."""

from __future__ import annotations

import numpy as np

from .body import Body


def _skip_sum(b: Body, bias_input: int) -> str:
    s = b.op("Add", b.input(0), b.input(1))
    return b.op("Add", s, b.input(bias_input)) if b.has(bias_input) else s


def skip_layer_norm(b: Body) -> None:
    """LayerNorm(input + skip + bias) * gamma + beta over the hidden axis. Outputs: output,
    mean, inv_std_var, input_skip_bias_sum."""
    s = _skip_sum(b, 4)
    y, mean, inv = b.layer_norm(s, b.input(2), b.input(3) if b.has(3) else None,
                                float(b.attr("epsilon", 1e-12)), 0)
    b.output(0, y)
    if b.wants(1):
        b.output(1, mean)
    if b.wants(2):
        b.output(2, inv)
    if b.wants(3):
        b.output(3, s)


def skip_simplified_layer_norm(b: Body) -> None:
    """RMSNorm(input + skip + bias) * gamma. Outputs: output, mean (never computed),
    inv_std_var, input_skip_bias_sum."""
    s = _skip_sum(b, 3)
    y, inv = b.rms_norm(s, b.input(2), float(b.attr("epsilon", 1e-12)), like_input=0)
    b.output(0, y)
    if b.wants(2):
        b.output(2, inv)
    if b.wants(3):
        b.output(3, s)


def simplified_layer_norm(b: Body) -> None:
    """X / sqrt(mean(X^2 over axis..last) + epsilon) * scale. Outputs: Y, inv_std_var."""
    axis = int(b.attr("axis", -1))
    axes = [-1] if axis == -1 else list(range(axis % b.rank(0), b.rank(0)))
    x = b.input(0)
    stash = int(b.attr("stash_type", 1))
    low = stash == 1 and b.dtype(0) != np.float32
    if low:  # computed in float32, as onnxruntime does for float16/bfloat16
        x = b.cast(x, np.float32)
    y, inv = b.rms_norm(x, b.input(1) if not low else b.cast(b.input(1), np.float32),
                        float(b.attr("epsilon", 1e-5)), axes, like_input=None if low else 0)
    b.output(0, b.cast(y, b.dtype(0)) if low else y)
    if b.wants(1):
        b.output(1, inv)


def _embed(b: Body, ids: str, seg_ids: str | None, word: str, pos: str, seg: str | None,
           gamma: str, beta: str, mask: str | None, pos_ids: str | None) -> None:
    """The embedding sum and its LayerNorm; mask_index = the number of ones in each row of
    the mask (zeros without one)."""
    s = b.op("Gather", word, ids, axis=0)
    if pos_ids is None:
        length = b.squeeze(b.dim(ids, 1), [0])
        pos_ids = b.op("Range", b.const(0), length, b.const(1))
    s = b.op("Add", s, b.op("Gather", pos, pos_ids, axis=0))
    if seg is not None and seg_ids is not None:
        s = b.op("Add", s, b.op("Gather", seg, seg_ids, axis=0))
    y, _, _ = b.layer_norm(s, gamma, beta, float(b.attr("epsilon", 1e-12)))
    b.output(0, y)
    if b.wants(1):
        if mask is not None:
            ones = b.cast(b.op("Equal", mask, b.const(1, np.int32)), np.int32)
            b.output(1, b.reduce("ReduceSum", ones, [1], keepdims=0))
        else:
            b.output(1, b.op("ConstantOfShape", b.dim(ids, 0),
                             value=_zero(np.int32)))
    if b.wants(2):
        b.output(2, s)


def _zero(dtype):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.zeros(1, dtype))


def embed_layer_norm(b: Body) -> None:
    """Inputs: input_ids, segment_ids?, word_embedding, position_embedding,
    segment_embedding?, gamma, beta, mask?, position_ids?. Outputs: output, mask_index,
    embedding_sum."""
    opt = lambda k: b.input(k) if b.has(k) else None  # noqa: E731
    if int(b.attr("mask_index_type", 1)) == 0 and b.wants(1):
        raise ValueError("mask_index_type is 0 but output 1 (mask_index) is read")
    _embed(b, b.input(0), opt(1), b.input(2), b.input(3), opt(4), b.input(5), b.input(6),
           opt(7), opt(8))


def qembed_layer_norm(b: Body) -> None:
    """EmbedLayerNormalization of dequantized tables: inputs input_ids, segment_ids?,
    word/position/segment?/gamma/beta (quantized), mask?, their scales (8-12) and zero
    points (13-17)."""
    def deq(k, scale, zp):
        if not b.has(k):
            return None
        return b.op("DequantizeLinear", b.input(k), b.input(scale),
                    *([b.input(zp)] if b.has(zp) else []))

    _embed(b, b.input(0), b.input(1) if b.has(1) else None, deq(2, 8, 13), deq(3, 9, 14),
           deq(4, 10, 15), deq(5, 11, 16), deq(6, 12, 17), b.input(7) if b.has(7) else None,
           None)


OPS = {"SkipLayerNormalization": skip_layer_norm,
       "SkipSimplifiedLayerNormalization": skip_simplified_layer_norm,
       "EmbedLayerNormalization": embed_layer_norm,
       "QEmbedLayerNormalization": qembed_layer_norm}
ONNX_DOMAIN_OPS = {"SimplifiedLayerNormalization": simplified_layer_norm}

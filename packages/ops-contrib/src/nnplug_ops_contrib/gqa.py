"""GroupQueryAttention (com.microsoft) as onnxruntime's CPU kernel computes it: kv_num_heads
key/value heads shared by num_heads query heads, a causal mask over each sequence's valid
length (seqlens_k + 1), optional rotary embedding of Q and K, a local window (a query sees its
own key and the local_window_size - 1 before it, as onnxruntime 1.32 does) and softcap, and
the key/value cache written as present = past[:past_len] + new + zeros. A first prompt is
total_sequence_length == S (past lengths 0), else each sequence's past is seqlens_k + 1 - S."""

from __future__ import annotations

import numpy as np

from .attention import LOWEST, _merge_heads, _split_heads
from .body import Body
from .rotary import rotate


def group_query_attention(b: Body) -> None:
    """Inputs: query (B, S, N*H) (or packed Q|K|V when key and value are omitted), key,
    value (B, S, kvN*H), past_key, past_value (B, kvN, P, H), seqlens_k (B) int32 = each
    sequence's total length - 1, total_sequence_length (int32 scalar), cos_cache, sin_cache
    (max positions, rotary_dim/2). Outputs: output, present_key, present_value."""
    heads, kv_heads = int(b.attr("num_heads")), int(b.attr("kv_num_heads"))
    for k, what in ((9, "position_ids"), (10, "attention_bias"), (11, "head_sink")):
        if b.has(k):
            raise ValueError(f"input {k} ({what}) is not supported")
    if int(b.attr("smooth_softmax", 0)):
        raise ValueError("smooth_softmax=1 is not supported")
    if b.wants(3):
        raise ValueError("output 3 (output_qk) is not supported")
    if heads % kv_heads:
        raise ValueError(f"num_heads={heads} is not a multiple of kv_num_heads={kv_heads}")
    width = b.types[0].shape[-1] if b.types[0] is not None and b.types[0].shape else None
    if not isinstance(width, int):
        b.shape(0)  # NotYet, or a clear error below
        raise ValueError("the query's hidden size must be known")
    packed = not b.has(1)
    head = width // (heads + 2 * kv_heads) if packed else width // heads
    q = b.input(0)
    if packed:
        q, k, v = b.split(q, [heads * head, kv_heads * head, kv_heads * head], axis=2)
    else:
        k, v = b.input(1), b.input(2)
    q, k, v = (_split_heads(b, q, heads, head), _split_heads(b, k, kv_heads, head),
               _split_heads(b, v, kv_heads, head))

    s_len = b.squeeze(b.dim(b.input(0), 1), [0])                       # S
    total = b.cast(b.op("Reshape", b.input(6), b.const([])), np.int64)  # total_sequence_length
    lengths = b.op("Add", b.cast(b.input(5), np.int64), b.const(1))    # (B) valid lengths
    first = b.op("Equal", total, s_len)
    past = b.op("Where", first, b.const(0), b.op("Sub", lengths, s_len))  # (B) past lengths
    steps = b.op("Range", b.const(0), s_len, b.const(1))                 # (S)
    positions = b.op("Add", b.unsqueeze(past, [1]), b.unsqueeze(steps, [0]))  # (B, S)

    if int(b.attr("do_rotary", 0)):
        cos = b.unsqueeze(b.op("Gather", b.input(7), positions, axis=0), [1])
        sin = b.unsqueeze(b.op("Gather", b.input(8), positions, axis=0), [1])
        rd = 2 * b.shape(7)[1]
        inter = bool(int(b.attr("rotary_interleaved", 0)))
        q = rotate(b, q, cos, sin, rd, inter)
        k = rotate(b, k, cos, sin, rd, inter)

    # present: past[:past_b] + new + zeros, max(total, past buffer) long
    buf = b.squeeze(b.dim(b.input(3), 2), [0]) if b.has(3) else b.const(0)
    length = b.op("Max", total, buf)
    t = b.unsqueeze(b.op("Range", b.const(0), length, b.const(1)), [0])  # (1, Lp)
    pb = b.unsqueeze(past, [1])                                          # (B, 1)
    in_new = b.op("Less", t, b.op("Add", pb, b.unsqueeze(s_len, [0])))
    index = b.op("Where", b.op("Less", t, pb), t,
                 b.op("Where", in_new, b.op("Add", buf, b.op("Sub", t, pb)),
                      b.op("Add", buf, s_len)))                          # (B, Lp)
    index = b.unsqueeze(index, [1, 3])

    def present(new: str, past_input: int) -> str:
        zero = b.op("Mul", b.slice(new, [0], [1], [2]), b.fconst(0.0, new))  # (B, kvN, 1, H)
        parts = ([b.input(past_input)] if b.has(past_input) else []) + [new, zero]
        pool = b.op("Concat", *parts, axis=2)
        shape = b.op("Concat", b.dim(new, 0), b.dim(new, 1), b.unsqueeze(length, [0]),
                     b.dim(new, 3), axis=0)
        return b.op("GatherElements", pool, b.op("Expand", index, shape), axis=2)

    pk, pv = present(k, 3), present(v, 4)
    if b.wants(1):
        b.output(1, pk)
    if b.wants(2):
        b.output(2, pv)

    group = heads // kv_heads

    def repeat(x: str) -> str:  # (B, kvN, Lp, H) -> (B, N, Lp, H), head n reading n // group
        if group == 1:
            return x
        x = b.unsqueeze(x, [2])
        x = b.op("Expand", x, b.const([1, 1, group, 1, 1]))
        return b.op("Reshape", x, b.const([0, heads, -1, head]))

    scale = float(b.attr("scale", 0.0)) or 1.0 / float(np.sqrt(head))
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", repeat(pk), perm=[0, 1, 3, 2])),
                  b.fconst(scale, q))                                    # (B, N, S, Lp)
    softcap = float(b.attr("softcap", 0.0))
    if softcap > 0:
        scores = b.op("Mul", b.op("Tanh", b.op("Div", scores, b.fconst(softcap, q))),
                      b.fconst(softcap, q))
    ends = b.unsqueeze(b.op("Add", positions, b.const(1)), [2])          # (B, S, 1): causal
    valid = b.op("Less", t, ends)
    window = int(b.attr("local_window_size", -1))
    if window > 0:
        valid = b.op("And", valid, b.op("Not", b.op("Less", t, b.op("Sub", ends, b.const(window)))))
    scores = b.op("Where", b.unsqueeze(valid, [1]), scores, b.fconst(LOWEST, q))
    out = b.op("MatMul", b.op("Softmax", scores, axis=-1), repeat(pv))
    b.output(0, _merge_heads(b, out))


OPS = {"GroupQueryAttention": group_query_attention}

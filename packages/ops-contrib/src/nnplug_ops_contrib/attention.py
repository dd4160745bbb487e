"""Attention ops: Attention, QAttention and MultiHeadAttention, as onnxruntime's CPU kernels
compute them: scores = scale Q K^T + mask + attention_bias, where the mask adds
mask_filter_value (-10000 by default) at masked keys and the lowest float at keys after a
query (unidirectional), then softmax over the keys, times V."""

from __future__ import annotations

import numpy as np

from .body import Body

LOWEST = float(np.finfo(np.float32).min)


def _split_heads(b: Body, x: str, heads: int, size: int) -> str:
    """(B, S, heads*size) -> (B, heads, S, size)."""
    return b.op("Transpose", b.op("Reshape", x, b.const([0, 0, heads, size])), perm=[0, 2, 1, 3])


def _merge_heads(b: Body, x: str) -> str:
    """(B, N, S, H) -> (B, S, N*H)."""
    return b.op("Reshape", b.op("Transpose", x, perm=[0, 2, 1, 3]), b.const([0, 0, -1]))


def _key_mask(b: Body, k: int, like: str, total: str, batch: str) -> str | None:
    """The additive mask of input ``k`` (int32 mask_index / key_padding_mask), broadcastable
    to (B, N, S, T), or None. 1-D: (B) end positions, or (2B) end then start positions;
    2-D (B, T) and 3-D (B, S, T): 1 keeps a key, 0 masks it."""
    if not b.has(k):
        return None
    mask = b.input(k)
    rank = b.rank(k)
    zero = b.fconst(0.0, like)
    fill = b.fconst(float(b.attr("mask_filter_value", -10000.0)), like)
    if rank == 1:
        cols = b.unsqueeze(b.op("Range", b.const(0, np.int32), b.cast(total, np.int32),
                                b.const(1, np.int32)), [0])  # (1, T)
        ends = b.unsqueeze(b.op("Slice", mask, b.const([0]), batch, b.const([0])), [1])
        # (B) or (2B): padded with B zeros, positions B..2B are the starts (zeros: none)
        padded = b.op("Concat", mask, b.op("ConstantOfShape", batch, value=_zero_i32()), axis=0)
        starts = b.unsqueeze(b.op("Slice", padded, batch, b.op("Add", batch, batch),
                                  b.const([0])), [1])
        masked = b.op("Or", b.op("Not", b.op("Less", cols, ends)), b.op("Less", cols, starts))
        return b.unsqueeze(b.op("Where", masked, fill, zero), [1, 2])  # (B, 1, 1, T)
    keep = b.op("Greater", mask, b.const(0, np.int32))
    bias = b.op("Where", keep, zero, fill)
    if rank == 2:
        return b.unsqueeze(bias, [1, 2])
    if rank == 3:
        return b.unsqueeze(bias, [1])
    raise ValueError(f"a {rank}-D mask (input {k}) is not supported: onnxruntime's CPU kernel "
                     f"takes 1-D, 2-D and 3-D masks")


def _zero_i32():
    from onnx import numpy_helper

    return numpy_helper.from_array(np.zeros(1, np.int32))


def _attend(b: Body, q: str, k: str, v: str, head_size: int, mask: str | None,
            causal: bool, past_len: str | None, attention_bias: str | None) -> str:
    """softmax(scale q k^T + mask) v for (B, N, S, H) q and (B, N, T, H) k, v."""
    scale = float(b.attr("scale", 0.0)) or 1.0 / float(np.sqrt(head_size))
    scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])),
                  b.fconst(scale, q))
    bias = mask
    if causal:
        s_len = b.squeeze(b.dim(q, 2), [0])
        t_len = b.squeeze(b.dim(k, 2), [0])
        # query s sees keys up to past + s; onnxruntime's CPU kernels leave the last query
        # unmasked, which matters only where T > past + S (MultiHeadAttention with longer keys)
        steps = b.op("Range", b.const(0), s_len, b.const(1))
        rows = b.op("Add", steps, past_len) if past_len is not None else steps
        cols = b.op("Range", b.const(0), t_len, b.const(1))
        later = b.op("Greater", b.unsqueeze(cols, [0]), b.unsqueeze(rows, [1]))  # (S, T)
        last = b.op("Equal", steps, b.op("Sub", s_len, b.const(1)))
        later = b.op("And", later, b.op("Not", b.unsqueeze(last, [1])))
        bias = b.op("Where", later, b.fconst(LOWEST, q), bias if bias else b.fconst(0.0, q))
    if bias is not None:
        scores = b.op("Add", scores, bias)
    if attention_bias is not None:
        scores = b.op("Add", scores, attention_bias)
    return b.op("MatMul", b.op("Softmax", scores, axis=-1), v)


def _qkv_attention(b: Body, qkv: str, sizes: list[int], mask_input: int, past_input: int,
                   bias_input: int | None) -> None:
    """The rest of Attention/QAttention from the projected input (B, S, Dq+Dk+Dv)."""
    heads = int(b.attr("num_heads"))
    if int(b.attr("do_rotary", 0)):
        raise ValueError("do_rotary=1 is not supported (onnxruntime's CPU kernel refuses it "
                         "too)")
    if int(b.attr("past_present_share_buffer", 0)):
        raise ValueError("past_present_share_buffer=1 is not supported (a GPU-only option)")
    dq, dk, dv = sizes
    if dq != dk or dq % heads or dv % heads:
        raise ValueError(f"attribute num_heads={heads} does not divide the Q/K/V hidden sizes "
                         f"{sizes} (or Q and K differ); fix num_heads or qkv_hidden_sizes")
    q, k, v = b.split(qkv, sizes, axis=2)
    q, k, v = (_split_heads(b, q, heads, dq // heads), _split_heads(b, k, heads, dk // heads),
               _split_heads(b, v, heads, dv // heads))
    past_len = None
    if b.has(past_input):
        pk, pv = (b.squeeze(t, [0]) for t in b.split(b.input(past_input), [1, 1], axis=0))
        past_len = b.squeeze(b.dim(pk, 2), [0])
        k = b.op("Concat", pk, k, axis=2)
        v = b.op("Concat", pv, v, axis=2)
    total = b.dim(k, 2)
    mask = _key_mask(b, mask_input, q, total, b.dim(qkv, 0))
    out = _attend(b, q, k, v, dq // heads, mask, bool(int(b.attr("unidirectional", 0))),
                  past_len, b.input(bias_input) if bias_input is not None and b.has(bias_input)
                  else None)
    b.output(0, _merge_heads(b, out))
    if b.wants(1):
        b.output(1, b.op("Concat", b.unsqueeze(k, [0]), b.unsqueeze(v, [0]), axis=0))


def _sizes(b: Body, width: int) -> list[int]:
    sizes = [int(s) for s in (b.attr("qkv_hidden_sizes") or [])]
    if sizes:
        if len(sizes) != 3 or sum(sizes) != width:
            raise ValueError(f"qkv_hidden_sizes {sizes} do not add up to the weights' {width} "
                             f"columns")
        return sizes
    if width % 3:
        raise ValueError(f"the weights' {width} columns are not 3 equal parts")
    return [width // 3] * 3


def attention(b: Body) -> None:
    """Inputs: input (B, S, D_in), weights (D_in, Dq+Dk+Dv), bias?, mask_index?, past?
    (2, B, N, P, H), attention_bias? (B|1, N|1, S, T). Outputs: output, present."""
    if b.has(6):
        raise ValueError("past_sequence_length (input 6) is a GPU-only input")
    qkv = b.op("MatMul", b.input(0), b.input(1))
    if b.has(2):
        qkv = b.op("Add", qkv, b.input(2))
    _qkv_attention(b, qkv, _sizes(b, b.shape(1)[1]), 3, 4, 5)


def qattention(b: Body) -> None:
    """Attention of a quantized input and weight: inputs input, weight, bias, input_scale,
    weight_scale, mask_index?, input_zero_point?, weight_zero_point?, past?."""
    izp = b.input(6) if b.has(6) else ""
    wzp = [b.input(7)] if b.has(7) else []
    acc = b.op("MatMulInteger", b.input(0), b.input(1), *([izp] + wzp if (izp or wzp) else []))
    scale = b.op("Mul", b.input(3), b.input(4))
    qkv = b.op("Add", b.op("Mul", b.cast(acc, b.dtype(2)), scale), b.input(2))
    _qkv_attention(b, qkv, _sizes(b, b.shape(1)[1]), 5, 8, None)


def multi_head_attention(b: Body) -> None:
    """Inputs: query (B, S, D), key (B, L, D) or (B, N, L, H), value likewise, bias? (D+D+Dv),
    key_padding_mask?, attention_bias?, past_key?, past_value? (B, N, P, H). Outputs:
    output, present_key, present_value."""
    heads = int(b.attr("num_heads"))
    if b.has(8) or b.has(9):
        raise ValueError("past_sequence_length and cache_indirection (inputs 8, 9) are not "
                         "supported")
    if b.rank(0) != 3 or not b.has(1) or not b.has(2):
        raise ValueError("packed QKV (5-D query) and packed KV (5-D key) are not supported: "
                         "give query, key and value")
    q, k, v = b.input(0), b.input(1), b.input(2)
    q_width = b.shape(0)[-1] if b.types[0].shape[-1] is not None else None
    if not isinstance(q_width, int):
        raise ValueError("the query's hidden size must be known")
    head = q_width // heads
    if b.has(3):
        dv = b.shape(3)[0] - 2 * q_width
        bq, bk, bv = b.split(b.input(3), [q_width, q_width, dv], axis=0)
        q = b.op("Add", q, bq)
        if b.rank(1) == 3:
            k, v = b.op("Add", k, bk), b.op("Add", v, bv)
    q = _split_heads(b, q, heads, head)
    if b.rank(1) == 3:
        k = _split_heads(b, k, heads, head)
        vw = b.types[2].shape[-1]
        if not isinstance(vw, int):
            raise ValueError("the value's hidden size must be known")
        v = _split_heads(b, v, heads, vw // heads)
        past_len = None
        if b.has(6) and b.has(7):
            past_len = b.squeeze(b.dim(b.input(6), 2), [0])
            k = b.op("Concat", b.input(6), k, axis=2)
            v = b.op("Concat", b.input(7), v, axis=2)
    else:  # (B, N, L, H): keys and values already split into heads, no past
        past_len = None
    mask = _key_mask(b, 4, q, b.dim(k, 2), b.dim(b.input(0), 0))
    out = _attend(b, q, k, v, head, mask, bool(int(b.attr("unidirectional", 0))), past_len,
                  b.input(5) if b.has(5) else None)
    b.output(0, _merge_heads(b, out))
    if b.wants(1):
        b.output(1, k)
    if b.wants(2):
        b.output(2, v)


OPS = {"Attention": attention, "QAttention": qattention, "MultiHeadAttention": multi_head_attention}

"""RotaryEmbedding (com.microsoft): rotate pairs of each head's first rotary_embedding_dim
values by the cached cos/sin of their position."""

from __future__ import annotations

from .body import Body


def rotary_embedding(b: Body) -> None:
    """Inputs: input (B, S, N*H) or (B, N, S, H), position_ids (B, S) or (1) offset,
    cos_cache and sin_cache (max_positions, rotary_dim/2). Attrs: interleaved (pairs
    (2i, 2i+1) instead of (i, i+rd/2)), num_heads, rotary_embedding_dim, scale."""
    if int(b.attr("is_packed_batching", 0)):
        raise ValueError("is_packed_batching=1 is not supported")
    if float(b.attr("scale", 1.0)) != 1.0:
        raise ValueError("scale other than 1.0 is not supported")
    x = b.input(0)
    rank = b.rank(0)
    half = b.shape(2)[1]
    rd = int(b.attr("rotary_embedding_dim", 0)) or None
    if rank == 3:
        heads = int(b.attr("num_heads", 0))
        width = b.types[0].shape[2]
        if not heads:
            if not rd and isinstance(width, int):
                heads = width // (2 * half)
            else:
                raise ValueError("num_heads is needed for a 3-D input with "
                                 "rotary_embedding_dim")
        xh = b.op("Transpose", b.op("Reshape", x, b.const([0, 0, heads, -1])), perm=[0, 2, 1, 3])
    else:
        xh = x
    rd = rd or 2 * half
    # positions (B, S): given, or offset + 0..S-1 for a 1-element position_ids
    if b.rank(1) == 1:
        s = b.squeeze(b.dim(xh, 2), [0])
        pos = b.unsqueeze(b.op("Add", b.op("Range", b.const(0), s, b.const(1)),
                               b.cast(b.input(1), "int64")), [0])
    else:
        pos = b.cast(b.input(1), "int64")
    cos = b.unsqueeze(b.op("Gather", b.input(2), pos, axis=0), [1])  # (B|1, 1, S, rd/2)
    sin = b.unsqueeze(b.op("Gather", b.input(3), pos, axis=0), [1])
    y = rotate(b, xh, cos, sin, rd, bool(int(b.attr("interleaved", 0))))
    if rank == 3:
        y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.const([0, 0, -1]))
    b.output(0, y)


def rotate(b: Body, xh: str, cos: str, sin: str, rd: int, interleaved: bool) -> str:
    """(B, N, S, H) ``xh`` with its first ``rd`` values of each head rotated by ``cos``/``sin``
    (broadcast to (B, 1, S, rd/2)): pairs (i, i + rd/2), or (2i, 2i+1) when interleaved."""
    rot = b.slice(xh, [0], [rd], [3])
    rest = b.slice(xh, [rd], [2**62], [3])
    if interleaved:
        pairs = b.op("Reshape", rot, b.const([0, 0, 0, rd // 2, 2]))
        x1, x2 = (b.squeeze(t, [4]) for t in b.split(pairs, [1, 1], axis=4))
    else:
        x1, x2 = b.split(rot, [rd // 2, rd // 2], axis=3)
    y1 = b.op("Sub", b.op("Mul", x1, cos), b.op("Mul", x2, sin))
    y2 = b.op("Add", b.op("Mul", x2, cos), b.op("Mul", x1, sin))
    if interleaved:
        y = b.op("Reshape", b.op("Concat", b.unsqueeze(y1, [4]), b.unsqueeze(y2, [4]), axis=4),
                 b.const([0, 0, 0, rd]))
    else:
        y = b.op("Concat", y1, y2, axis=3)
    return b.op("Concat", y, rest, axis=3)


OPS = {"RotaryEmbedding": rotary_embedding}

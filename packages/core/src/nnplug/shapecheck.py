"""Shapes a plugin reports (a native backend's ``kernel_output_shapes``, a custom op's
``shape_infer``, the arrays a ``compute`` returns) checked against what the model declares
or ONNX inference gives, before the host allocates or hands them on.

A declared dim that is a number must match; a symbolic dim (``"N"``) must match the size
that symbol has in this run (bound from the inputs' actual shapes, or from its first
report); an unknown dim (None) matches anything. An unknown rank checks nothing.
"""

from __future__ import annotations

import numpy as np

from .graph import ValueInfo


def bind_symbols(declared: ValueInfo | None, shape, symbols: dict[str, int]) -> None:
    """Record the size each symbolic dim of ``declared`` has in the actual ``shape``."""
    if declared is None or declared.shape is None or len(declared.shape) != len(shape):
        return
    for want, got in zip(declared.shape, shape):
        if isinstance(want, str) and isinstance(got, (int, np.integer)):
            symbols.setdefault(want, int(got))


def mismatch(shape, dtype, declared: ValueInfo | None,
             symbols: dict[str, int] | None = None) -> str | None:
    """None when ``shape`` (and ``dtype``, when given) fit ``declared``; else what differs,
    as "shape [..] where the model has [..] ..." (the model: declared or ONNX-inferred)."""
    if declared is None:
        return None
    if dtype is not None and declared.dtype is not None and np.dtype(dtype) != declared.dtype:
        return f"dtype {np.dtype(dtype)} where the model has {declared.dtype}"
    if declared.shape is None or shape is None:
        return None
    shape = tuple(d if isinstance(d, (str, type(None))) else int(d) for d in shape)
    want = declared.shape
    if len(shape) != len(want):
        return (f"shape {list(shape)} (rank {len(shape)}) where the model has {fmt(want)} "
                f"(rank {len(want)})")
    symbols = {} if symbols is None else symbols
    for axis, (w, g) in enumerate(zip(want, shape)):
        if not isinstance(g, int):
            continue  # a reported dim that is itself symbolic or unknown (load time)
        if isinstance(w, int) and w >= 0 and w != g:
            return (f"shape {list(shape)} where the model has {fmt(want)} (dim {axis} must "
                    f"be {w})")
        if isinstance(w, str) and w in symbols and symbols[w] != g:
            return (f"shape {list(shape)} where the model has {fmt(want)} and {w} is "
                    f"{symbols[w]} in this run (dim {axis} must be {symbols[w]})")
    bind_symbols(declared, shape, symbols)
    return None


def fmt(shape) -> str:
    """``[2, N, ?]``: a shape as the messages write it."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


__all__ = ["bind_symbols", "mismatch", "fmt"]

"""Element-wise com.microsoft ops: Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd."""

from __future__ import annotations

import numpy as np

from .body import Body

SQRT_2_OVER_PI = 0.7978845608028654
FAST_GELU_CUBE = 0.044715 * SQRT_2_OVER_PI  # onnxruntime folds 0.044715 into the factor


def gelu(b: Body) -> None:
    """Gelu(X) = 0.5 X (1 + erf(X / sqrt 2))."""
    b.output(0, b.gelu(b.input(0), 0))


def bias_gelu(b: Body) -> None:
    """BiasGelu(A, B) = Gelu(A + B)."""
    b.output(0, b.gelu(b.op("Add", b.input(0), b.input(1)), 0))


def fast_gelu(b: Body) -> None:
    """FastGelu(X, bias?) = 0.5 x (1 + tanh(x (0.0356774 x^2 + 0.7978846))), x = X + bias:
    the tanh approximation, written in onnxruntime's arrangement."""
    x = b.op("Add", b.input(0), b.input(1)) if b.has(1) else b.input(0)
    c = b.fconst(FAST_GELU_CUBE, x, 0)
    s = b.fconst(SQRT_2_OVER_PI, x, 0)
    inner = b.op("Mul", x, b.op("Add", b.op("Mul", c, b.op("Mul", x, x)), s))
    t = b.op("Add", b.op("Tanh", inner), b.fconst(1.0, x, 0))
    b.output(0, b.op("Mul", b.op("Mul", b.fconst(0.5, x, 0), x), t))


def quick_gelu(b: Body) -> None:
    """QuickGelu(X) = X sigmoid(alpha X), alpha 1.702 by default."""
    x = b.input(0)
    alpha = b.fconst(float(b.attr("alpha", 1.702)), x, 0)
    b.output(0, b.op("Mul", x, b.op("Sigmoid", b.op("Mul", x, alpha))))


def bias_add(b: Body) -> None:
    """BiasAdd(X, bias, skip) = X + bias + skip."""
    b.output(0, b.op("Add", b.op("Add", b.input(0), b.input(1)), b.input(2)))


OPS = {"Gelu": gelu, "BiasGelu": bias_gelu, "FastGelu": fast_gelu, "QuickGelu": quick_gelu,
       "BiasAdd": bias_add}

__all__ = ["OPS", "np"]

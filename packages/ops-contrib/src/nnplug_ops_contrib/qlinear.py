"""QLinear ops: dequantize the inputs, run the float op, quantize the result (onnxruntime's
kernels compute the same through lookup tables or float math)."""

from __future__ import annotations

from .body import Body


def _deq(b: Body, x: int, scale: int, zp: int) -> str:
    return b.op("DequantizeLinear", b.input(x), b.input(scale),
                *([b.input(zp)] if b.has(zp) else []))


def _q(b: Body, y: str, scale: int, zp: int) -> None:
    b.output(0, b.op("QuantizeLinear", y, b.input(scale), *([b.input(zp)] if b.has(zp) else [])))


def _binary(op_type):
    def write(b: Body) -> None:
        """Inputs: A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale,
        C_zero_point?."""
        _q(b, b.op(op_type, _deq(b, 0, 1, 2), _deq(b, 3, 4, 5)), 6, 7)
    write.__name__ = f"qlinear_{op_type.lower()}"
    return write


def _unary(op_type, **attrs):
    def write(b: Body) -> None:
        """Inputs: X, X_scale, X_zero_point?, Y_scale, Y_zero_point?."""
        extra = {k: float(b.attr(k, v)) for k, v in attrs.items()}
        _q(b, b.op(op_type, _deq(b, 0, 1, 2), **extra), 3, 4)
    write.__name__ = f"qlinear_{op_type.lower()}"
    return write


def qlinear_concat(b: Body) -> None:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; attr axis."""
    n = (len(b.node.inputs) - 2) // 3
    parts = [_deq(b, 2 + 3 * i, 3 + 3 * i, 4 + 3 * i) for i in range(n)]
    _q(b, b.op("Concat", *parts, axis=int(b.attr("axis"))), 0, 1)


def qlinear_global_average_pool(b: Body) -> None:
    """Inputs: X, x_scale, x_zero_point, y_scale, y_zero_point; channels_last moves C last."""
    x = _deq(b, 0, 1, 2)
    if int(b.attr("channels_last", 0)):
        r = b.rank(0)
        x = b.op("Transpose", x, perm=[0, r - 1, *range(1, r - 1)])
        y = b.op("GlobalAveragePool", x)
        y = b.op("Transpose", y, perm=[0, *range(2, r), 1])
    else:
        y = b.op("GlobalAveragePool", x)
    _q(b, y, 3, 4)


def qlinear_softmax(b: Body) -> None:
    """Inputs: X, X_scale, x_zero_point?, y_scale, y_zero_point; attrs axis, opset (the
    Softmax opset it replaces: before 13 the input is flattened to 2-D at axis)."""
    x = _deq(b, 0, 1, 2)
    axis = int(b.attr("axis", -1))
    if int(b.attr("opset", 13)) < 13:
        shape = b.op("Shape", x)
        y = b.op("Reshape", b.op("Softmax", b.op("Flatten", x, axis=axis), axis=1), shape)
    else:
        y = b.op("Softmax", x, axis=axis)
    _q(b, y, 3, 4)


OPS = {"QLinearAdd": _binary("Add"), "QLinearMul": _binary("Mul"),
       "QLinearConcat": qlinear_concat, "QLinearGlobalAveragePool": qlinear_global_average_pool,
       "QLinearSigmoid": _unary("Sigmoid"), "QLinearLeakyRelu": _unary("LeakyRelu", alpha=0.01),
       "QLinearSoftmax": qlinear_softmax}

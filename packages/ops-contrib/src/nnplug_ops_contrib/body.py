"""Writing a function body for one node: standard ONNX ops at the model's opset (the ops whose
inputs changed between opsets are written in the form that opset has), constants in the
node's float type, formal inputs and outputs in the op's order."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

MIN_OPSET = 13
"""Bodies use the forms opset 13 gave Squeeze/Unsqueeze/Split/ReduceSum (axes as inputs)."""


class NotYet(Exception):
    """The body needs an input type that is not known yet: the core asks again later."""


def builder(write):
    """A builder for ``nnplug.Runtime.register_function`` from ``write(body)``."""

    def build(node, inputs, opsets):
        body = Body(node, inputs, opsets)
        try:
            write(body)
        except NotYet:
            return None
        return body.function()

    build.__name__ = write.__name__
    build.__doc__ = write.__doc__
    return build


class Body:
    def __init__(self, node, inputs, opsets):
        self.node = node
        self.types = list(inputs)
        self.opset = int(opsets.get("", opsets.get("ai.onnx", 0)))
        if self.opset < MIN_OPSET:
            raise ValueError(f"the model imports opset {self.opset} of ai.onnx; these bodies "
                             f"need opset {MIN_OPSET} or newer (convert the model with "
                             f"onnx.version_converter)")
        self.nodes: list[onnx.NodeProto] = []
        self.outputs: list[str] = []
        self._n = 0

    # -- the node ------------------------------------------------------------------------
    def has(self, k: int) -> bool:
        """Whether optional input ``k`` is given."""
        return k < len(self.node.inputs) and bool(self.node.inputs[k])

    def input(self, k: int) -> str:
        if not self.has(k):
            raise ValueError(f"input {k} is required")
        return f"in{k}"

    def wants(self, k: int) -> bool:
        """Whether output ``k`` is read (an output nobody reads is not computed)."""
        return k < len(self.node.outputs) and bool(self.node.outputs[k])

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def dtype(self, k: int) -> np.dtype:
        v = self.types[k] if k < len(self.types) else None
        if v is None or v.dtype is None:
            raise NotYet
        return np.dtype(v.dtype)

    def shape(self, k: int):
        """The static shape of input ``k`` (a constant's, typically), or NotYet."""
        v = self.types[k] if k < len(self.types) else None
        if v is None or v.shape is None or not all(isinstance(d, int) for d in v.shape):
            raise NotYet
        return tuple(v.shape)

    def rank(self, k: int) -> int:
        v = self.types[k] if k < len(self.types) else None
        if v is None or v.shape is None:
            raise NotYet
        return len(v.shape)

    def output(self, k: int, value: str) -> None:
        """Bind formal output ``k`` to ``value``."""
        while len(self.outputs) <= k:
            self.outputs.append(f"out{len(self.outputs)}_unset")
        self.outputs[k] = self.op("Identity", value, out=f"out{k}")

    # -- writing nodes -------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type: str, *inputs: str, n_out: int = 1, out: str | None = None,
           domain: str = "", **attrs):
        outs = [out] if out and n_out == 1 else [self.fresh(op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.int64) -> str:
        return self.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def fconst(self, value, like: str, like_input: int | None = None) -> str:
        """A float constant of ``like``'s type: its dtype when input ``like_input``'s is
        known, else CastLike (opset 15)."""
        if like_input is not None:
            try:
                return self.const(value, self.dtype(like_input))
            except NotYet:
                pass
        if self.opset < 15:
            raise NotYet
        return self.op("CastLike", self.const(value, np.float32), like)

    def cast(self, x: str, dtype) -> str:
        return self.op("Cast", x, to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))

    # forms that changed between opsets
    def reduce(self, op_type: str, x: str, axes, keepdims: int = 1) -> str:
        moved = 18 if op_type != "ReduceSum" else 13
        if self.opset >= moved:
            return self.op(op_type, x, self.const(list(axes)), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes) -> str:
        return self.op("Unsqueeze", x, self.const(list(axes)))

    def squeeze(self, x: str, axes) -> str:
        return self.op("Squeeze", x, self.const(list(axes)))

    def split(self, x: str, sizes, axis: int) -> list[str]:
        return self.op("Split", x, self.const(list(sizes)), n_out=len(sizes), axis=axis)

    def slice(self, x: str, starts, ends, axes) -> str:
        return self.op("Slice", x, self._ints(starts), self._ints(ends), self.const(list(axes)))

    def _ints(self, v) -> str:
        return v if isinstance(v, str) else self.const(list(v))

    def dim(self, x: str, axis: int) -> str:
        """``x.shape[axis]`` as a 1-element int64 tensor."""
        return self.slice(self.op("Shape", x), [axis], [axis + 1 if axis != -1 else 2**62], [0])

    def layer_norm(self, x: str, gamma: str, beta: str | None, epsilon: float,
                   like_input: int | None = None) -> tuple[str, str, str]:
        """(y, mean, inv_std_dev) over the last axis, mean and inv_std_dev keeping it."""
        if self.opset >= 17:
            ins = [x, gamma] + ([beta] if beta else [])
            y, mean, inv = self.op("LayerNormalization", *ins, n_out=3, axis=-1,
                                   epsilon=float(epsilon))
            return y, mean, inv
        mean = self.reduce("ReduceMean", x, [-1])
        d = self.op("Sub", x, mean)
        var = self.reduce("ReduceMean", self.op("Mul", d, d), [-1])
        eps = self.fconst(epsilon, x, like_input)
        inv = self.op("Reciprocal", self.op("Sqrt", self.op("Add", var, eps)))
        y = self.op("Mul", self.op("Mul", d, inv), gamma)
        return (self.op("Add", y, beta) if beta else y), mean, inv

    def rms_norm(self, x: str, gamma: str, epsilon: float, axes=(-1,),
                 like_input: int | None = None) -> tuple[str, str]:
        """(y, inv_std_dev): x / sqrt(mean(x^2) + epsilon) * gamma."""
        ms = self.reduce("ReduceMean", self.op("Mul", x, x), axes)
        eps = self.fconst(epsilon, x, like_input)
        inv = self.op("Reciprocal", self.op("Sqrt", self.op("Add", ms, eps)))
        return self.op("Mul", self.op("Mul", x, inv), gamma), inv

    def gelu(self, x: str, like_input: int | None = None) -> str:
        """0.5 * x * (1 + erf(x / sqrt(2)))."""
        half = self.fconst(0.5, x, like_input)
        one = self.fconst(1.0, x, like_input)
        inv_sqrt2 = self.fconst(1.0 / np.sqrt(2.0), x, like_input)
        erf = self.op("Erf", self.op("Mul", x, inv_sqrt2))
        return self.op("Mul", self.op("Mul", half, x), self.op("Add", one, erf))

    # -- the result ----------------------------------------------------------------------
    def function(self) -> onnx.FunctionProto:
        n = self.node
        inputs = [f"in{k}" for k in range(len(n.inputs))]
        opsets = [helper.make_opsetid("", self.opset)]
        if any(x.domain == "com.microsoft" for x in self.nodes):
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        return helper.make_function(n.domain, n.op_type, inputs, self.outputs, self.nodes,
                                    opsets)

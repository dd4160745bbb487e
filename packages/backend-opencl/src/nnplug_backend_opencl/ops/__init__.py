"""The operator table: what each op needs to be supported, how it lowers to device steps,
and which of its inputs the host must read (shapes, axes, clip bounds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import conv, conv_transpose, elementwise, gemm, normalize, pool, reduce, resize, shape
from .common import UNARY_CODES


@dataclass(frozen=True)
class OpDef:
    supports: Callable
    """(node, graph) -> None when supported, else the reason it is not."""
    lower: Callable
    host_inputs: Callable = lambda node: []


def _table() -> dict[str, OpDef]:
    ew = elementwise
    t = {
        "Conv": OpDef(conv.supports, conv.lower),
        "ConvTranspose": OpDef(conv_transpose.supports, conv_transpose.lower),
        "Gemm": OpDef(gemm.supports_gemm, gemm.lower_gemm),
        "MatMul": OpDef(gemm.supports_matmul, gemm.lower_matmul),
        "BatchNormalization": OpDef(ew.supports_batchnorm, ew.lower_batchnorm),
        "Relu": OpDef(ew.supports_unary, ew.lower_unary),
        "LeakyRelu": OpDef(ew.supports_unary, ew.lower_unary),
        "Sigmoid": OpDef(ew.supports_unary, ew.lower_unary),
        "Clip": OpDef(ew.supports_unary, ew.lower_unary, ew.clip_host_inputs),
        "Sum": OpDef(ew.supports_sum, ew.lower_sum),
        "Max": OpDef(ew.supports_sum, ew.lower_sum),
        "Min": OpDef(ew.supports_sum, ew.lower_sum),
        "Where": OpDef(ew.supports_where, ew.lower_where),
        "Expand": OpDef(ew.supports_expand, ew.lower_expand, ew.expand_host_inputs),
        "Resize": OpDef(resize.supports_resize, resize.lower_resize, resize.resize_host_inputs),
        "InstanceNormalization": OpDef(normalize.supports_instancenorm,
                                       normalize.lower_instancenorm),
        "LayerNormalization": OpDef(normalize.supports_layernorm, normalize.lower_layernorm),
        "MaxPool": OpDef(pool.supports_pool, pool.lower_pool),
        "AveragePool": OpDef(pool.supports_pool, pool.lower_pool),
        "GlobalAveragePool": OpDef(pool.supports_global, pool.lower_global),
        "LRN": OpDef(normalize.supports_lrn, normalize.lower_lrn),
        "Softmax": OpDef(normalize.supports_softmax, normalize.lower_softmax),
        "Concat": OpDef(shape.supports_concat, shape.lower_concat),
        "Reshape": OpDef(shape.supports_alias, shape.lower_reshape, shape.host_second_input),
        "Flatten": OpDef(shape.supports_alias, shape.lower_flatten),
        "Unsqueeze": OpDef(shape.supports_alias, shape.lower_unsqueeze, shape.host_second_input),
        "Squeeze": OpDef(shape.supports_alias, shape.lower_squeeze, shape.host_second_input),
        "Identity": OpDef(shape.supports_alias, shape.lower_identity),
        "Dropout": OpDef(shape.supports_dropout, shape.lower_dropout),
        "Transpose": OpDef(shape.supports_transpose, shape.lower_transpose),
        "ConstantOfShape": OpDef(shape.supports_constant_of_shape, shape.lower_constant_of_shape,
                                 shape.host_first_input),
    }
    for op in ("Add", "Sub", "Mul", "Div", "Pow"):
        t[op] = OpDef(ew.supports_binary, ew.lower_binary)
    t["PRelu"] = OpDef(ew.supports_binary, ew.lower_prelu)
    for op in reduce.CODES:
        t[op] = OpDef(reduce.supports_reduce, reduce.lower_reduce, reduce.reduce_host_inputs)
    for op in UNARY_CODES:
        t[op] = OpDef(ew.supports_unary, ew.lower_unary)
    return t


OPS: dict[str, OpDef] = _table()
LOWERINGS = {name: d.lower for name, d in OPS.items()}


def why_not(node, graph) -> str | None:
    """None when this backend can run ``node``, else the reason it cannot."""
    if node.domain not in ("", "ai.onnx"):
        return f"domain {node.domain!r} is not the ONNX domain"
    d = OPS.get(node.op_type)
    if d is None:
        return f"no OpenCL kernel for {node.op_type}"
    return d.supports(node, graph)

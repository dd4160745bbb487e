"""onnxruntime's contrib ops (domain com.microsoft, and SimplifiedLayerNormalization of the
ai.onnx domain) as ONNX function bodies for nnplug: every backend runs them from the standard
ops it has, through nnplug's function expansion (docs/function-expansion.md).

Installed, the ``nnplug.ops`` entry point calls :func:`register`, which registers one body
builder per op with ``Runtime.register_function``. Nothing here imports onnx until a body is
written (a Runtime starts without onnx).
"""

from __future__ import annotations

from importlib import import_module

from ._version import __version__

DOMAIN = "com.microsoft"

OPS = {
    "activations": ["Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasAdd"],
    "normalization": ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                      "EmbedLayerNormalization", "QEmbedLayerNormalization"],
    "attention": ["Attention", "QAttention", "MultiHeadAttention"],
    "gqa": ["GroupQueryAttention"],
    "rotary": ["RotaryEmbedding"],
    "matmul": ["FusedMatMul", "MatMulNBits", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"],
    "qlinear": ["QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearGlobalAveragePool",
                "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax"],
}
"""Module -> the com.microsoft ops whose bodies it writes."""

ONNX_DOMAIN_OPS = {"normalization": ["SimplifiedLayerNormalization"]}
"""Ops onnxruntime defines in the ai.onnx domain, which ONNX itself does not."""


def _lazy(module: str, table: str, op_type: str):
    """The builder of ``op_type``, importing its module (and onnx) on the first call."""
    built = []

    def build(node, inputs, opsets):
        if not built:
            from .body import builder

            built.append(builder(getattr(import_module(f".{module}", __name__), table)[op_type]))
        return built[0](node, inputs, opsets)

    build.__name__ = f"build_{op_type}"
    return build


def functions() -> dict[tuple[str, str], object]:
    """(domain, op type) -> body builder, for ``Runtime.register_function``."""
    out = {(DOMAIN, op): _lazy(m, "OPS", op) for m, ops in OPS.items() for op in ops}
    out.update({("", op): _lazy(m, "ONNX_DOMAIN_OPS", op)
                for m, ops in ONNX_DOMAIN_OPS.items() for op in ops})
    return out


def register(runtime) -> None:
    """The ``nnplug.ops`` entry point: register every body with ``runtime``."""
    for (domain, op_type), build in functions().items():
        runtime.register_function(build, domain=domain, op_type=op_type)


__all__ = ["DOMAIN", "ONNX_DOMAIN_OPS", "OPS", "__version__", "functions", "register"]

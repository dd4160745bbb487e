"""onnxruntime's contrib ops (domain com.microsoft, and SimplifiedLayerNormalization of the
ai.onnx domain) as ONNX function bodies for nnplug: every backend runs them from the standard
ops it has, through nnplug's function expansion (docs/function-expansion.md).

Installed, the ``nnplug.ops`` entry point calls :func:`register`, which registers one body
builder per op with ``Runtime.register_function``.
"""

from __future__ import annotations

from . import activations, attention, matmul, normalization, qlinear, rotary
from ._version import __version__
from .body import builder

DOMAIN = "com.microsoft"

WRITERS = {**activations.OPS, **normalization.OPS, **attention.OPS, **matmul.OPS,
           **qlinear.OPS, **rotary.OPS}
"""com.microsoft op type -> the function writing its body."""

ONNX_DOMAIN_WRITERS = dict(normalization.ONNX_DOMAIN_OPS)
"""Ops onnxruntime defines in the ai.onnx domain, which ONNX itself does not."""


def functions() -> dict[tuple[str, str], object]:
    """(domain, op type) -> body builder, for ``Runtime.register_function``."""
    out = {(DOMAIN, op): builder(w) for op, w in WRITERS.items()}
    out.update({("", op): builder(w) for op, w in ONNX_DOMAIN_WRITERS.items()})
    return out


def register(runtime) -> None:
    """The ``nnplug.ops`` entry point: register every body with ``runtime``."""
    for (domain, op_type), build in functions().items():
        runtime.register_function(build, domain=domain, op_type=op_type)


__all__ = ["DOMAIN", "WRITERS", "ONNX_DOMAIN_WRITERS", "__version__", "functions", "register"]

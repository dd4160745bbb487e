"""Custom operators (RKNN toolkit semantics), in Python.

    class MySoftmax:
        op_type = "cstSoftmax"
        def shape_infer(self, node, in_shapes, in_dtypes):
            return [in_shapes[0]], [in_dtypes[0]]
        def compute(self, node, inputs):
            axis = nnplug.get_node_attr(node, "axis", -1)
            ...
            return [out]

    rt.register_custom_op(MySoftmax())

An op is matched by ``op_type`` whatever (custom) domain the model's node uses. An
``op_type`` equal to a standard ONNX op is refused unless registered with
``override=True``; an override then runs instead of the backends' own kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx.defs

from .errors import CustomOpError, PluginError
from .graph import Node

_ATTR_TYPES = (bool, int, float, np.integer, np.floating, np.ndarray, list, tuple, str)


def get_node_attr(node: Node, name: str, default=None):
    """A node attribute: bool, int32/int64, float32 scalars or arrays (numpy), or str."""
    value = node.attrs.get(name, default)
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        dtype = np.int64 if all(isinstance(v, int) for v in value) else np.float32
        return np.asarray(value, dtype=dtype)
    return value


def is_standard_op(op_type: str) -> bool:
    return onnx.defs.has(op_type, "")


@dataclass
class CustomOp:
    """A registered custom op: the user's object plus where it came from.

    ``impl`` is a Python object with ``shape_infer``/``compute`` (target ``"cpu"``), or
    a native op record supplied by the custom-op library host.
    """

    op_type: str
    impl: object
    source: str
    override: bool = False
    targets: tuple[str, ...] = ("cpu",)
    native: dict = field(default_factory=dict)
    """For native ops: target -> native op record (see ``nnplug.native.custom_ops``)."""

    def describe(self) -> str:
        kind = "override of ONNX " if self.override else ""
        return f"{kind}op {self.op_type!r} from {self.source} (targets: {', '.join(self.targets)})"


def check_python_op(obj, override: bool) -> str:
    """Validate a Python custom op object; returns its op_type."""
    op_type = getattr(obj, "op_type", None)
    if not isinstance(op_type, str) or not op_type:
        raise PluginError(
            f"custom op {obj!r} has no 'op_type' string attribute; set op_type = \"MyOp\""
        )
    for method in ("shape_infer", "compute"):
        if not callable(getattr(obj, method, None)):
            raise PluginError(f"custom op {op_type!r} has no method {method}(); see docs/custom-ops.md")
    if is_standard_op(op_type) and not override:
        raise PluginError(
            f"custom op {op_type!r} has the name of a standard ONNX operator; register it with "
            f"override=True to replace the backends' kernel, or rename it"
        )
    return op_type


def run_python_op(op: CustomOp, node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Call ``compute`` and check what comes back; errors name the op, node and callback."""
    try:
        outs = op.impl.compute(node, inputs)
    except Exception as e:
        raise CustomOpError(
            f"custom op {op.op_type!r} failed in compute() on node {node.name!r}: "
            f"{type(e).__name__}: {e}"
        ) from e
    if isinstance(outs, np.ndarray):
        outs = [outs]
    outs = list(outs) if isinstance(outs, (list, tuple)) else None
    if outs is None or len(outs) != len(node.outputs):
        raise CustomOpError(
            f"custom op {op.op_type!r} compute() on node {node.name!r} must return a list of "
            f"{len(node.outputs)} array(s)"
        )
    return [np.ascontiguousarray(o) for o in outs]

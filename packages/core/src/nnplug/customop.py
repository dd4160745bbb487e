"""Custom operators (RKNN toolkit semantics).

In Python:

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

Native ops (C structs of callbacks, see ``custom_op.h``) subclass :class:`CustomOp` too.
"""

from __future__ import annotations

import numpy as np

from .device import CPU, Device
from .device_api import DeviceAPI
from .errors import CustomOpError, PluginError
from .graph import Node, ValueInfo
from .onnx_ops import STANDARD_OPS
from .shapecheck import bind_symbols, mismatch
from .tensor import HOST_API, Tensor, as_contiguous


def get_node_attr(node: Node, name: str, default=None):
    """A node attribute: bool, int32/int64, float32 scalars or numpy arrays, or str."""
    value = node.attrs.get(name, default)
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        dtype = np.int64 if all(isinstance(v, int) for v in value) else np.float32
        return np.asarray(value, dtype=dtype)
    return value


def is_standard_op(op_type: str) -> bool:
    """Whether ``op_type`` names an op of ONNX's default domain (any version)."""
    return op_type in STANDARD_OPS


class BoundOp:
    """A custom op bound to one node on one target: what the executor runs."""

    device: Device = CPU
    api: DeviceAPI = HOST_API

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError

    def close(self) -> None:
        """Release per-node state (native ops call ``destroy`` here)."""


class CustomOp:
    """A registered custom op type: where it came from and what it can run on."""

    op_type: str = ""
    source: str = ""
    override: bool = False
    targets: tuple[str, ...] = ("cpu",)
    runs_anywhere: bool = False
    """True when it needs no backend (runs on the host whatever backends are chosen)."""

    def shape_infer(self, node: Node, in_shapes: list, in_dtypes: list):
        """``(out_shapes, out_dtypes)`` for ``node``'s outputs."""
        raise NotImplementedError

    def bind(self, node: Node, values: dict[str, ValueInfo], target: str, backend) -> BoundOp | None:
        """Bind to ``node`` for ``target`` on ``backend`` (None: declined, use the backend's
        own kernel)."""
        raise NotImplementedError

    def decline_reason(self, node: Node, target: str) -> str | None:
        """Why :meth:`bind` just declined ``node`` for ``target``, in a few words, for the
        placement explanation (``Network.placement``). Default: None (the explanation then
        says the custom op declined the node)."""
        return None

    def describe(self) -> str:
        kind = "override of ONNX " if self.override else ""
        return f"{kind}op {self.op_type!r} from {self.source} (targets: {', '.join(self.targets)})"


class PythonCustomOp(CustomOp):
    """A Python object with ``op_type``, ``shape_infer`` and ``compute``; runs on the host."""

    runs_anywhere = True
    targets = ("cpu",)

    def __init__(self, impl, source: str, override: bool = False):
        self.op_type = check_python_op(impl, override)
        self.impl = impl
        self.source = source
        self.override = override

    def shape_infer(self, node, in_shapes, in_dtypes):
        shapes, dtypes = self.impl.shape_infer(node, in_shapes, in_dtypes)
        return list(shapes), list(dtypes)

    def bind(self, node, values, target, backend):
        return _PythonBound(self, node, values)


class _PythonBound(BoundOp):
    def __init__(self, op: PythonCustomOp, node: Node, values: dict[str, ValueInfo]):
        self.op, self.node = op, node
        self.declared_inputs = [values.get(x) for x in node.inputs if x]
        self.declared_outputs = [values.get(o) if o else None for o in node.outputs]

    def run(self, inputs):
        arrays = [t.numpy() for t in inputs]
        outs = run_python_op(self.op, self.node, arrays)
        symbols: dict[str, int] = {}
        for declared, a in zip(self.declared_inputs, arrays):
            bind_symbols(declared, a.shape, symbols)
        for name, declared, o in zip(self.node.outputs, self.declared_outputs, outs):
            why = name and mismatch(o.shape, o.dtype, declared, symbols)
            if why:
                raise CustomOpError(
                    f"custom op {self.op.op_type!r} ({self.op.source}) compute() on node "
                    f"{self.node.name!r} returned output {name!r} with {why}; it must return "
                    f"what its shape_infer() and the model say")
        return [Tensor.from_numpy(o) for o in outs]


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


def run_python_op(op: PythonCustomOp, node: Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
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
    return [as_contiguous(o) for o in outs]

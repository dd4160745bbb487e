"""Function bodies plugins contribute for ops ONNX does not define (e.g. the ``com.microsoft``
ops onnxruntime's optimizer writes): an op plugin registers, per (domain, op type), either
an ``onnx.FunctionProto`` or a builder that writes the body for one node, and the expand
stage (:mod:`nnplug.stages.expand`) inlines it where no backend claims the node, exactly as it
inlines ONNX's own function ops. So every backend runs such an op from the standard ops it
has, and a backend that claims the op still runs it whole.

A builder is called as ``build(node, inputs, opsets)``: the :class:`nnplug.Node`, the
:class:`nnplug.ValueInfo` of each input (None where omitted or not known yet) and the model's
opsets (domain -> version; write the body for ``opsets[""]``). It returns the
``onnx.FunctionProto`` (``domain``/``name`` of the op, formal inputs and outputs in the
op's order), or None when it cannot write the body yet (an input type it needs is not
known: it is asked again after the nodes before it are expanded). An exception names a
node the body cannot be written for (bad attributes), and becomes a ``ModelError`` naming
the node, the op and the plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ModelError, PluginError

if TYPE_CHECKING:
    import onnx

    from .graph import Node, ValueInfo

Builder = Callable[["Node", "list[ValueInfo | None]", "dict[str, int]"], "onnx.FunctionProto | None"]


@dataclass(frozen=True)
class FunctionDef:
    """A registered function body for one op of one domain (``rt.functions[(domain, op)]``)."""

    domain: str
    op_type: str
    build: Builder
    source: str

    def describe(self) -> str:
        return f"function {self.domain or 'ai.onnx'}::{self.op_type} from {self.source}"

    def body_for(self, node: Node, inputs: list, opsets: dict[str, int]):
        """The body for ``node``, or None when it cannot be written yet."""
        import onnx

        try:
            fp = self.build(node, inputs, opsets)
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(
                f"{node.describe()}: the {self.describe()} cannot write its body for this node: "
                f"{type(e).__name__}: {e}") from e
        if fp is None:
            return None
        if not isinstance(fp, onnx.FunctionProto):
            raise PluginError(f"{self.describe()} returned {type(fp).__name__}; a builder returns "
                              f"an onnx.FunctionProto or None")
        return fp


def make_function_def(body, domain: str | None, op_type: str | None, source: str) -> FunctionDef:
    """A FunctionDef from a FunctionProto (its domain and name say which op) or a builder."""
    if callable(body):  # checked first: registering a builder must not import onnx
        build = body
    elif _is_function_proto(body):
        fixed = body
        domain = fixed.domain if domain is None else domain
        op_type = fixed.name if op_type is None else op_type
        build = lambda node, inputs, opsets: fixed  # noqa: E731 - the same body for every node
    else:
        raise PluginError(f"register_function takes an onnx.FunctionProto or a builder "
                          f"function, not {type(body).__name__}")
    if domain is None or not op_type:
        raise PluginError("register_function with a builder needs domain= and op_type=")
    domain = "" if domain == "ai.onnx" else domain
    return FunctionDef(domain, op_type, build, source)


def _is_function_proto(obj) -> bool:
    import onnx

    return isinstance(obj, onnx.FunctionProto)


__all__ = ["Builder", "FunctionDef", "make_function_def"]

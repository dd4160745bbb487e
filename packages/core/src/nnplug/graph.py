"""The graph model backends see: nodes with parsed attributes, value types and shapes,
constants as numpy arrays. Built from an ONNX model by :mod:`nnplug.stages.loader` with the
conversions at the end of this module (which import onnx when they run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # onnx is imported when a model is read, not with nnplug
    import onnx

Dim = int | str | None
"""A dimension: a fixed size, a symbolic name, or None (unknown)."""


@dataclass(frozen=True)
class ValueInfo:
    name: str
    dtype: np.dtype | None
    shape: tuple[Dim, ...] | None
    """None when the rank is unknown."""
    kind: str = "tensor"
    """"tensor", "sequence", "optional", "map" or "unknown" (no type given): the core runs
    the ops on values that are not tensors (see nnplug.structural)."""

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


@dataclass
class Node:
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    """Input value names; "" marks an omitted optional input."""
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    """Attribute values: int, float, bytes->str, numpy arrays for tensors, lists."""
    opset: int = 0
    """The opset version of the node's domain in the model."""
    proto: onnx.NodeProto | None = None

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    @property
    def qualified_type(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def describe(self) -> str:
        return f"node {self.name!r} (op {self.op_type}, domain {self.domain or 'ai.onnx'}, opset {self.opset})"


@dataclass
class SubGraph:
    """The part of a model given to one backend's ``target.build.<kind>``."""

    nodes: list[Node]
    """In topological order."""
    inputs: list[str]
    """Values computed outside (or fed by the user), in the order ``run`` receives them."""
    outputs: list[str]
    """Values needed outside, in the order ``run`` returns them."""
    constants: dict[str, np.ndarray]
    """Constant inputs (weights) of these nodes, by name."""
    values: dict[str, ValueInfo]
    """Types and shapes of every value the nodes touch."""
    opsets: dict[str, int] = field(default_factory=dict)
    name: str = "subgraph"

    def value(self, name: str) -> ValueInfo:
        return self.values.get(name) or ValueInfo(name, None, None)

    def to_model(self) -> onnx.ModelProto:
        """This subgraph as a standalone ONNX model (for backends that hand work to
        another ONNX consumer, and for debugging)."""
        return subgraph_to_model(self)


def attribute_value(attr: onnx.AttributeProto):
    """An ONNX attribute as a plain Python / numpy value."""
    import onnx
    from onnx import numpy_helper

    v = onnx.helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        if v and isinstance(v[0], bytes):
            return [s.decode("utf-8", "replace") for s in v]
        if v and isinstance(v[0], onnx.TensorProto):
            return [numpy_helper.to_array(t) for t in v]
        return list(v)
    return v


def _dims(type_proto: onnx.TypeProto):
    import onnx

    if not type_proto.HasField("tensor_type"):
        return None, None
    tt = type_proto.tensor_type
    dtype = None
    if tt.elem_type:
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:
            dtype = None
    if not tt.HasField("shape"):
        return dtype, None
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            shape.append(d.dim_param)
        else:
            shape.append(None)
    return dtype, tuple(shape)


_KINDS = {"tensor_type": "tensor", "sequence_type": "sequence", "optional_type": "optional",
          "map_type": "map", "sparse_tensor_type": "sparse", None: "unknown"}


def value_info(vi: onnx.ValueInfoProto) -> ValueInfo:
    dtype, shape = _dims(vi.type)
    return ValueInfo(vi.name, dtype, shape, _KINDS.get(vi.type.WhichOneof("value"), "unknown"))


def subgraph_to_model(sg: SubGraph) -> onnx.ModelProto:
    import onnx
    from onnx import numpy_helper

    def vi(name):
        v = sg.value(name)
        elem = onnx.helper.np_dtype_to_tensor_dtype(v.dtype) if v.dtype is not None else 0
        return onnx.helper.make_tensor_value_info(name, elem, list(v.shape) if v.shape else None)

    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in sg.constants.items()]
    graph = onnx.helper.make_graph([n.proto for n in sg.nodes], sg.name,
                                   [vi(i) for i in sg.inputs], [vi(o) for o in sg.outputs], inits)
    opsets = [onnx.helper.make_opsetid(d, v) for d, v in sg.opsets.items()]
    return onnx.helper.make_model(graph, opset_imports=opsets)


# -- the model the stages pass on, and utilities every stage may use ------------------------------
@dataclass
class Model:
    nodes: list[Node]
    inputs: list[ValueInfo]
    """Inputs the user feeds (graph inputs that are not initializers)."""
    outputs: list[ValueInfo]
    constants: dict[str, np.ndarray]
    values: dict[str, ValueInfo]
    opsets: dict[str, int]
    name: str = "model"
    producers: dict[str, Node] = field(default_factory=dict)
    proto: onnx.ModelProto | None = None
    """The model as read (before shape inference): later stages rebuild from it."""
    warnings: list[str] = field(default_factory=list)
    """What the checker found that onnxruntime accepts too (see nnplug.checking)."""
    ir_version: int | None = None
    """The model's IR version (the loader sets it; None: the newest onnx knows)."""


def whole_graph(model: Model, nodes: list[Node], constants: dict[str, np.ndarray]) -> SubGraph:
    """``nodes`` of ``model`` as one graph (what ``supports`` sees while nodes are placed)."""
    return SubGraph(nodes, [v.name for v in model.inputs], [v.name for v in model.outputs],
                    constants, model.values, model.opsets, model.name)


def subgraphs(n: onnx.NodeProto):
    """(attribute name, graph) for each subgraph attribute of ``n`` (If's branches, bodies)."""
    import onnx

    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            for g in a.graphs:
                yield a.name, g


def outer_reads(g: onnx.GraphProto) -> list[str]:
    """Names ``g`` (and the subgraphs in it) reads that it does not define."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    defined |= {t.values.name for t in g.sparse_initializer}
    reads: list[str] = []

    def read(x):
        if x not in defined and x not in reads:
            reads.append(x)

    for n in g.node:
        for x in n.input:
            read(x)
        for _, sub in subgraphs(n):
            for x in outer_reads(sub):
                read(x)
        defined.update(n.output)
    for o in g.output:
        read(o.name)
    return reads


CONTROL_FLOW = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",),
                "SequenceMap": ("body",)}
"""The ops whose subgraphs the core runs (see nnplug.controlflow): op type -> graph attributes."""


def attach_outer_inputs(nodes: list[Node]) -> None:
    """Append to each node with subgraphs the outer values those subgraphs read (after its
    formal inputs, as onnxruntime's implicit inputs), so every stage sees them as inputs."""
    for n in nodes:
        if n.proto is None or not n.proto.attribute:
            continue
        for _, g in subgraphs(n.proto):
            for x in outer_reads(g):
                if x not in n.inputs:
                    n.inputs.append(x)


def node_schema(node: Node):
    """ONNX's schema of ``node`` at its opset, or None for an op ONNX does not define there."""
    from onnx import defs

    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        return defs.get_schema(node.op_type, max(node.opset, 1), domain)
    except Exception:  # noqa: BLE001 - SchemaError: no such op in that domain/opset
        return None


def is_string(dtype) -> bool:
    """Whether values of this numpy dtype are ONNX strings (object, str or bytes arrays)."""
    return dtype is not None and np.dtype(dtype).kind in "OUS"


def node_has_strings(node, values: dict, constants: dict) -> bool:
    """Whether a node reads or writes a string tensor (as far as the graph's types tell)."""
    for name in [*node.inputs, *node.outputs]:
        if not name:
            continue
        arr = constants.get(name)
        if arr is not None:
            if is_string(np.asarray(arr).dtype):
                return True
            continue
        info = values.get(name)
        if info is not None and is_string(getattr(info, "dtype", None)):
            return True
    return False

"""An ONNX model (read and checked) -> the :class:`~nnplug.graph.Model` the stages pass on:
nodes with parsed attributes, inferred types and shapes, constants as numpy arrays.

The read stage (:mod:`nnplug.stages.loader`) builds the whole model with it, the expand stage the
nodes of function bodies, control flow the models of its subgraphs: each from what it
already has, none by reading a model again."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from . import ml_types
from .errors import ModelError
from .graph import (
    Model,
    Node,
    ValueInfo,
    attribute_value,
    node_schema,
    outer_reads,
    subgraphs,
    value_info,
)
from .inference import collect_values, infer, skeleton
from .model_file import weight_of


def model_from_proto(proto: onnx.ModelProto, custom_ops: dict | None = None,
                     warned: list[str] | None = None,
                     weights: dict[str, np.ndarray] | None = None) -> Model:
    """The Model of ``proto`` (checked already): shapes inferred (custom ops'
    ``shape_infer`` for their nodes), outputs nothing reads omitted. ``warned``: what the
    checker found; ``weights``: the arrays of initializers read without their bytes in
    ``proto`` (:mod:`nnplug.model_file`), or known already (a model built again)."""
    custom_ops = custom_ops or {}
    opsets = {op.domain or "": op.version for op in proto.opset_import}
    # inference reads the weights' types, not their bytes (it copies the model in and out)
    inferred = ml_types.complete(infer(skeleton(proto)), infer)
    values = collect_values(inferred)
    nodes = _make_nodes(inferred, opsets)
    _check_topology(nodes, inferred)

    if any(n.op_type in custom_ops for n in nodes):
        values = _custom_shape_inference(inferred, nodes, values, custom_ops)

    g = inferred.graph
    omit_unused_outputs(nodes, values, {o.name for o in g.output})
    constants = {}
    for init in proto.graph.initializer:
        known = weight_of(init, weights) if weights else None
        constants[init.name] = known if known is not None else _read_initializer(init)
    inputs = [values.get(i.name) or value_info(i) for i in g.input if i.name not in constants]
    outputs = [values.get(o.name) or value_info(o) for o in g.output]
    producers = {o: n for n in nodes for o in n.outputs if o}
    return Model(nodes, inputs, outputs, constants, values, opsets,
                 name=g.name or "model", producers=producers, proto=proto,
                 warnings=list(warned or ()), ir_version=proto.ir_version or onnx.IR_VERSION)


def _read_initializer(init: onnx.TensorProto) -> np.ndarray:
    try:
        return numpy_helper.to_array(init)
    except Exception as e:
        raise ModelError(
            f"initializer {init.name!r} cannot be read ({type(e).__name__}: {e}): its data "
            f"does not match its type and dims {list(init.dims)}. Fix: re-export or repair "
            f"the model") from None


def _make_nodes(model: onnx.ModelProto, opsets: dict[str, int]) -> list[Node]:
    nodes = []
    seen = set()
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in seen:  # node names are optional and need not be unique
            name = f"{name}_{i}"
        seen.add(name)
        nodes.append(node_from_proto(n, name, opsets))
    return nodes


def node_from_proto(n: onnx.NodeProto, name: str, opsets: dict[str, int]) -> Node:
    """The Node of ``n``, named ``name``, at the model's ``opsets``."""
    try:
        attrs = {a.name: attribute_value(a) for a in n.attribute}
    except Exception as e:
        raise ModelError(f"node {name!r} (op {n.op_type}) has an unreadable attribute: {e}") from None
    return Node(name, n.op_type, n.domain, list(n.input), list(n.output), attrs,
                opsets.get(n.domain or "", opsets.get("ai.onnx", 0)), n)


def omit_unused_outputs(nodes: list[Node], values: dict, graph_outputs: set[str]) -> None:
    """An output nothing reads (no node, no subgraph, not a graph output) is passed to
    backends as omitted (""), as ONNX writes an optional output the model does not want,
    when ONNX declares it optional (Dropout's mask, MaxPool's indices), or when ONNX cannot
    infer its type (Dropout-7's mask). A backend then computes only what is read: onnxruntime
    likewise drops an inference Dropout whose mask nothing reads. Not BatchNormalization's:
    before opset 14 how many outputs it has says whether it runs in training mode."""
    read = _names_read(nodes) | graph_outputs
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    for n in nodes:
        if n.op_type == "BatchNormalization" or not any(o and o not in read for o in n.outputs):
            continue
        schema = node_schema(n)
        formal = schema.outputs if schema is not None else []
        n.outputs = ["" if o and o not in read and (
            values.get(o) is None or values[o].dtype is None
            or (i < len(formal) and formal[i].option == optional)) else o
            for i, o in enumerate(n.outputs)]


def _names_read(nodes: list[Node]) -> set[str]:
    """Every value name a node reads, with the outer names its subgraphs read (a body may
    read a value of the enclosing graph without naming it as an input)."""
    read = {x for n in nodes for x in n.inputs if x}
    for n in nodes:
        if n.proto is not None:
            for _, g in subgraphs(n.proto):
                read.update(outer_reads(g))
    return read


def _check_topology(nodes: list[Node], model: onnx.ModelProto) -> None:
    g = model.graph
    known = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    for n in nodes:
        for x in n.inputs:
            if x not in known:
                raise ModelError(
                    f"{n.describe()} reads {x!r}, which no earlier node, input or initializer defines"
                )
        known.update(n.outputs)
    for o in g.output:
        if o.name not in known:
            raise ModelError(f"graph output {o.name!r} is not produced by any node or input")


def _custom_shape_inference(model, nodes, values, custom_ops) -> dict[str, ValueInfo]:
    """Run each custom op's shape_infer in order, feed the result back to ONNX inference
    so the standard nodes after it get shapes too."""
    from .errors import CustomOpError
    from .shapecheck import mismatch

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in nodes:
        op = custom_ops.get(node.op_type)
        if op is None:
            continue
        ins = [values.get(x) for x in node.inputs if x]
        types_only = getattr(op, "infers_types_only", False)
        if not types_only and any(v is None or v.shape is None for v in ins):
            continue  # unknown input shapes: leave the outputs to run time
        try:
            shapes, dtypes = op.shape_infer(
                node, [None if v is None or v.shape is None else list(v.shape) for v in ins],
                [None if v is None else v.dtype for v in ins])
        except Exception as e:
            raise CustomOpError(
                f"custom op {node.op_type!r} failed in shape_infer() on node {node.name!r}: "
                f"{type(e).__name__}: {e}"
            ) from e
        if len(shapes) != len(node.outputs) or len(dtypes) != len(node.outputs):
            raise CustomOpError(
                f"custom op {node.op_type!r} shape_infer() on node {node.name!r} must return "
                f"{len(node.outputs)} shape(s) and dtype(s)"
            )
        for name, shape, dtype in zip(node.outputs, shapes, dtypes):
            why = name and mismatch(shape, dtype, values.get(name))
            if why:
                raise CustomOpError(
                    f"custom op {node.op_type!r} ({custom_ops[node.op_type].source}) "
                    f"shape_infer() on node {node.name!r} gave output {name!r} {why}; fix "
                    f"the op's shape_infer (or the shape the model declares)")
            if not name or (shape is None and (dtype is None or (
                    values.get(name) is not None and values[name].dtype is not None))):
                continue  # nothing more known before run time (an onnxruntime library's op)
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) \
                if dtype is not None else 0
            vi = onnx.helper.make_tensor_value_info(
                name, elem, list(shape) if shape is not None else None)
            model.graph.value_info.append(vi)
            values[name] = value_info(vi)
        _check_downstream(model, node, custom_ops, values)
        inferred = infer(model)
        for k, v in collect_values(inferred).items():
            if k not in values or values[k].shape is None:
                values[k] = v
        model = inferred
    return values


def _check_downstream(model: onnx.ModelProto, node: Node, custom_ops, values) -> None:
    """The shapes ``node``'s custom op gave, carried on by ONNX inference without the shapes
    the model declares downstream, must fit those: else the op's shape_infer is wrong, and is
    blamed here rather than the backend whose kernel would meet the wrong shape later (ONNX's
    own inference keeps a declared shape without comparing)."""
    from .errors import CustomOpError
    from .shapecheck import fmt, mismatch

    ours = {o for n in model.graph.node if n.op_type in custom_ops for o in n.output}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    kept = [vi for vi in probe.graph.value_info if vi.name in ours]
    del probe.graph.value_info[:]
    probe.graph.value_info.extend(kept)
    for o in probe.graph.output:
        if o.name not in ours and o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    for k, v in collect_values(infer(probe)).items():
        known = values.get(k)
        if k in ours or known is None or known.shape is None or v.shape is None:
            continue
        why = mismatch(v.shape, None, known)
        if why:
            gave = ", ".join(f"{o!r} {fmt(values[o].shape)}" for o in node.outputs
                             if o and values.get(o) is not None)
            raise CustomOpError(
                f"custom op {node.op_type!r} ({custom_ops[node.op_type].source}) shape_infer() "
                f"on node {node.name!r} gave output {gave}; from it ONNX shape inference gives "
                f"{k!r} {why}; fix the op's shape_infer (or the shape the model declares)")


__all__ = ["model_from_proto", "node_from_proto", "omit_unused_outputs"]

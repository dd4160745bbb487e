"""ONNX shape inference over a model: at load, and again after folding has made more shapes
static (both stages call it; it calls neither)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from . import ml_types
from .errors import ModelError, ValidationError, spec_link
from .graph import Model, Node, ValueInfo, value_info
from .model_file import CUT_MIN_ELEMENTS

# Attributes naming axes. ONNX's own inference reads some as 32-bit ints and dies on larger
# values (onnx 1.23: LayerNormalization axis=2**31 segfaults), so they are checked first.
AXIS_ATTRIBUTES = {"axis", "axes", "perm", "batch_axis", "time_axis"}
MAX_AXIS = 1 << 16
"""No tensor has this many dimensions: an axis beyond it is refused before ONNX sees it."""


def check_before_inference(proto: onnx.ModelProto) -> None:
    """What must be refused before ONNX's shape inference runs on ``proto``'s graph."""
    for i, n in enumerate(proto.graph.node):
        for a in n.attribute:
            if a.name not in AXIS_ATTRIBUTES:
                continue
            values = [a.i] if a.type == onnx.AttributeProto.INT else \
                list(a.ints) if a.type == onnx.AttributeProto.INTS else []
            bad = [v for v in values if abs(v) > MAX_AXIS]
            if bad:
                name = n.name or f"{n.op_type}_{i}"
                domain = n.domain or "ai.onnx"
                raise ValidationError(
                    f"invalid node {name!r} (op {n.op_type}, domain {domain}): attribute "
                    f"{a.name!r}: {bad[0]} is beyond any tensor's rank. Fix: use an axis "
                    f"in [-rank, rank-1] of the input (spec: {spec_link(n.op_type, n.domain)})",
                    node=name, op_type=n.op_type, field=a.name)

# Constants up to this many elements go into a re-inferred model with their data (shape
# inputs are small); larger ones only with their type and shape, so weights are not copied.
# The model reader cuts the bytes of exactly these out of the proto: one limit for both.
_REINFER_DATA_LIMIT = CUT_MIN_ELEMENTS


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    check_before_inference(model)  # values ONNX's inference itself would crash on
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                 data_prop=True)
    except Exception as e:
        raise ModelError(f"ONNX shape inference failed: {e}") from None


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the data of its large initializers (more than
    :data:`_REINFER_DATA_LIMIT` elements), which become graph inputs of the same type and
    shape: what the checker and shape inference read, without serializing the weights for
    each (they copy the whole model in and out). ``model`` itself when it has none."""
    g = model.graph
    big = [t for t in g.initializer if _numel(t) > _REINFER_DATA_LIMIT]
    if not big:
        return model
    out = onnx.ModelProto()
    _copy_fields(model, out, skip={"graph"})
    _copy_fields(g, out.graph, skip={"initializer"})
    big_names = {t.name for t in big}
    out.graph.initializer.extend(t for t in g.initializer if t.name not in big_names)
    declared = {i.name for i in g.input}
    out.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in big if t.name not in declared)
    return out


def _numel(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _copy_fields(src, dst, skip: set[str]) -> None:
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if field.message_type is None and not hasattr(value, "extend"):
            setattr(dst, field.name, value)  # a scalar
        elif hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        else:
            getattr(dst, field.name).CopyFrom(value)


def collect_values(model: onnx.ModelProto) -> dict[str, ValueInfo]:
    g = model.graph
    values = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        info = value_info(vi)
        old = values.get(vi.name)
        if old is None or (old.shape is None and info.shape is not None):
            values[vi.name] = info
    for init in g.initializer:
        values[init.name] = ValueInfo(
            init.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)),
            tuple(int(d) for d in init.dims))
    return values




def reinfer(model: Model, nodes: list[Node], constants: dict[str, np.ndarray], *,
            declared: bool = False) -> dict[str, ValueInfo]:
    """Types and shapes from ONNX shape inference run again over ``nodes`` of ``model``,
    with ``constants`` (initializers and folded values) known; the model's inputs keep
    their declared (possibly symbolic) shapes. Outputs of nodes ONNX cannot infer (custom
    domains) keep the types ``model.values`` gives them. ``declared``: the types the model
    declares for its inner values (``value_info``) are given too, as at load."""
    g = model.proto.graph
    read = {x for n in nodes for x in n.inputs if x} | {o.name for o in g.output}
    inits, const_inputs = [], []
    for name in sorted(read & set(constants)):
        a = np.asarray(constants[name])
        if a.size <= _REINFER_DATA_LIMIT or a.dtype == object:
            inits.append(numpy_helper.from_array(a, name))
        else:
            elem = onnx.helper.np_dtype_to_tensor_dtype(a.dtype)
            const_inputs.append(onnx.helper.make_tensor_value_info(name, elem, list(a.shape)))
    typed = []
    for n in nodes:
        if n.domain in ("", "ai.onnx", ml_types.ML):
            continue
        for o in n.outputs:
            v = model.values.get(o) if o else None
            if v is not None and v.dtype is not None and v.kind == "tensor":
                elem = onnx.helper.np_dtype_to_tensor_dtype(v.dtype)
                typed.append(onnx.helper.make_tensor_value_info(
                    o, elem, list(v.shape) if v.shape is not None else None))
    if declared:
        have = {vi.name for vi in typed} | set(constants)
        typed += [vi for vi in g.value_info if vi.name not in have]
    inputs = [i for i in g.input if i.name not in constants] + const_inputs
    graph = onnx.helper.make_graph([n.proto for n in nodes], g.name or "model", inputs,
                                   list(g.output), inits, value_info=typed)
    proto = onnx.helper.make_model(graph, opset_imports=list(model.proto.opset_import),
                                   functions=list(model.proto.functions))
    proto.ir_version = model.proto.ir_version or onnx.IR_VERSION
    return collect_values(ml_types.complete(infer(proto), infer))

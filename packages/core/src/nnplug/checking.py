"""The ONNX checker, as lenient as onnxruntime: findings only the strict checker makes
(a value's type given without a shape, a graph output given without a type: shape
inference fills both in) become :class:`nnplug.ModelWarning`; anything else is a
:class:`nnplug.ModelError` that names the node and the field.
"""

from __future__ import annotations

import re
import warnings

import onnx

from .errors import ModelError, ModelWarning

# Checker messages onnxruntime does not treat as errors, with what they mean to a user.
LENIENT = [
    (re.compile(r"Field 'shape' of 'type' is required but missing"),
     "a value's type has no shape (its rank is unknown); nnplug infers it"),
    (re.compile(r"Field 'type' of 'value_info' is required but missing"),
     "a value (e.g. a subgraph's output) has no type; nnplug infers it"),
    (re.compile(r"Unrecognized type value case \(value_info name: (?P<name>[^)]*)\)"),
     "value {name!r} has no type; nnplug infers it"),
    # IR versions before 4 list every initializer among the graph inputs; models exported
    # then (onnxruntime.datasets' mul_1.onnx) often do not, and their values are still plain
    (re.compile(r"(?P<name>.*) in initializer but not in graph input"),
     "initializer {name!r} is not a graph input, which IR version < 4 requires; nnplug "
     "treats it as a constant"),
]
MAX_FINDINGS = 32


def check_model(proto: onnx.ModelProto, provided=()) -> list[str]:
    """Run the ONNX checker on ``proto``; returns (and warns) the lenient findings, raises
    ModelError for the first real one. ``provided``: (domain, op type) pairs plugins
    register function bodies for; their ai.onnx nodes (ops ONNX does not define, such as
    onnxruntime's SimplifiedLayerNormalization) are not the checker's to refuse."""
    found: list[str] = []
    probe = _without_provided(proto, {op for d, op in provided if d in ("", "ai.onnx")})
    for _ in range(MAX_FINDINGS):
        try:
            onnx.checker.check_model(probe)
            break
        except onnx.checker.ValidationError as e:
            text = str(e).strip()
            first = text.splitlines()[0] if text else "(no message)"
            note = _lenient(first)
            if note is None:
                raise ModelError(_describe(first, text)) from None
            if probe is proto:
                probe = onnx.ModelProto()
                probe.CopyFrom(proto)
            if not _patch(probe.graph):
                raise ModelError(_describe(first, text)) from None
            if note not in found:
                found.append(note)
        except Exception as e:  # protobuf-level errors
            raise ModelError(f"the model cannot be checked: {e}") from None
    for note in found:
        warnings.warn(ModelWarning(f"the ONNX checker would refuse this model: {note} "
                                   f"(onnxruntime accepts it too)"), stacklevel=4)
    return found


_PROVIDED_DOMAIN = "nnplug.provided"


def _without_provided(proto: onnx.ModelProto, ops: set[str]) -> onnx.ModelProto:
    """``proto``, or a copy whose ai.onnx nodes of ``ops`` that ONNX does not define at the
    model's opset are moved to a domain of their own (the checker skips unknown domains)."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    def undefined(n) -> bool:
        if n.domain not in ("", "ai.onnx") or n.op_type not in ops:
            return False
        try:
            onnx.defs.get_schema(n.op_type, opset, "")
        except Exception:  # noqa: BLE001 - SchemaError: ONNX has no such op at this opset
            return True
        return False

    if not ops or not any(undefined(n) for n in proto.graph.node):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for n in copy.graph.node:
        if undefined(n):
            n.domain = _PROVIDED_DOMAIN
    copy.opset_import.append(onnx.helper.make_opsetid(_PROVIDED_DOMAIN, 1))
    return copy


def _lenient(first_line: str) -> str | None:
    for pattern, note in LENIENT:
        m = pattern.search(first_line)
        if m:
            return note.format(**m.groupdict())
    return None


def _describe(first: str, text: str) -> str:
    """The checker's message with the node it names, in one line."""
    m = re.search(r"Name: (?P<name>\S*) OpType: (?P<op>\S+)", text)
    where = f" (node {m['name']!r}, op {m['op']})" if m else ""
    return (f"the model does not pass the ONNX checker: {first}{where}; fix the model where "
            f"it is exported, or check it with onnx.checker.check_model(model)")


def _patch(g: onnx.GraphProto, top: bool = True) -> bool:
    """Make the lenient findings go away in a copy only the checker sees (so a real
    finding behind them is still reported). True when something was changed."""
    changed = False
    declared = {vi.name for vi in g.input}
    for init in g.initializer if top else ():  # IR < 4: initializers are inputs too
        if init.name not in declared:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type,
                                                              list(init.dims)))
            changed = True
    for vi in [*g.input, *g.output]:
        t = vi.type
        if t.WhichOneof("value") is None:
            t.tensor_type.elem_type = onnx.TensorProto.FLOAT
            changed = True
        if t.HasField("tensor_type") and not t.tensor_type.HasField("shape"):
            t.tensor_type.shape.SetInParent()
            changed = True
    kept = [vi for vi in g.value_info if vi.type.WhichOneof("value") is not None
            and not (vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"))]
    if len(kept) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(kept)
        changed = True
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                changed |= _patch(sub, top=False)
    return changed


__all__ = ["check_model", "LENIENT"]

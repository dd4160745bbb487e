"""Function expansion: a node no backend claims, whose op is an ONNX function (a standard
op with a function body, context-dependent bodies included, or a function of the model's
own ``ModelProto.functions``, or a body a plugin registered for an op ONNX does not define,
see :mod:`nnplug.functions`), is replaced by the nodes of its body, so backends get the long
tail of ops from primitives. A backend that claims the whole op keeps it.

Expanded nodes are named ``<original node>/<body node>`` and their private values
``<original node>/<value>``, so ``Network.assignment`` shows where each piece came from.
Bodies that contain functions again are expanded in the next round.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable

import onnx
from onnx import helper

from ..errors import ModelError
from ..from_onnx import model_from_proto, node_from_proto, omit_unused_outputs
from ..graph import Model, Node, SubGraph, ValueInfo, attach_outer_inputs, whole_graph
from ..inference import reinfer
from ..variadic import CHUNK, VARIADIC_OPS, split_body

MAX_ROUNDS = 16
"""Nesting depth of functions in functions that expansion follows (a deeper one is taken
for a function that calls itself). Rounds that only reach nodes whose input types became
known in the round before (a chain of plugin ops whose bodies need them) do not count."""


def expand_unclaimed(model: Model, claimed: Callable[[Node, SubGraph], bool],
                     custom_ops: dict, functions: dict | None = None) -> Model:
    """``model`` with every node that ``claimed`` refuses and that has a function body
    replaced by that body (recursively), and what subgraphs read from outer scopes appended
    to their node's inputs; ``model`` itself when nothing is expanded. ``functions``:
    (domain, op type) -> :class:`nnplug.functions.FunctionDef` of plugins.

    The bodies' nodes are spliced into the model as they are; only the types and shapes
    they make are inferred (:func:`nnplug.inference.reinfer`, without the weights)."""
    attach_outer_inputs(model.nodes)  # control flow: what subgraphs read is a node input
    depth: dict[str, int] = {}  # node name -> how many bodies deep it lies
    while True:
        graph = whole_graph(model, model.nodes, model.constants)
        bodies: dict[int, tuple[list[onnx.NodeProto], list]] = {}
        taken = None  # every name in the model, found once something is to be expanded
        for i, n in enumerate(model.nodes):
            if n.op_type in custom_ops or n.proto is None or not _may_have_body(
                    n, model, functions) or claimed(n, graph):
                continue  # backends are asked only about what has a body to expand into
            fn = function_of(n, model, functions)
            if fn is not None:
                level = depth.get(n.name, 0) + 1
                if level > MAX_ROUNDS:
                    raise ModelError(
                        f"function expansion of model {model.name!r} did not finish: "
                        f"{n.describe()} lies {MAX_ROUNDS} function bodies deep: a function "
                        f"calls itself")
                if taken is None:
                    taken = _all_names(model)
                body = inline(n, fn, taken)
                depth.update((piece.name, level) for piece in body)
                bodies[i] = (body, list(fn.opset_import))
        if not bodies:
            return model
        model = _spliced(model, bodies, custom_ops)


def _spliced(model: Model, bodies: dict[int, tuple[list[onnx.NodeProto], list]],
             custom_ops: dict) -> Model:
    """``model`` with the expanded nodes replaced by their bodies' nodes: a new Model whose
    other nodes, constants and known values are those of ``model``."""
    proto, opsets = model.proto, dict(model.opsets)
    new_domains = [o for _, ops in bodies.values() for o in ops if (o.domain or "") not in opsets]
    if new_domains:  # a body imports a domain the model does not: the model imports it too
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        for o in new_domains:
            if (o.domain or "") not in opsets:
                proto.opset_import.append(o)
                opsets[o.domain or ""] = o.version
    nodes: list[Node] = []
    for i, n in enumerate(model.nodes):
        if i not in bodies:
            nodes.append(n)
            continue
        pieces = [node_from_proto(p, p.name, opsets) for p in bodies[i][0]]
        attach_outer_inputs(pieces)
        nodes.extend(pieces)
    if any(p.op_type in custom_ops for i in bodies for p in bodies[i][0]):
        # a custom op's shape_infer types the body's piece: the model is built again, as read
        built = model_from_proto(_rebuilt(model, bodies, proto), custom_ops, model.warnings,
                                 model.constants)
        attach_outer_inputs(built.nodes)
        return built
    out = Model(nodes, list(model.inputs), list(model.outputs), model.constants,
                dict(model.values), opsets, name=model.name, proto=proto,
                warnings=model.warnings, ir_version=model.ir_version)
    values = out.values
    rename = _Symbols(values)
    for name, new in reinfer(out, nodes, model.constants, declared=True).items():
        merged = _merged(values.get(name), rename(new))
        if merged is not None:
            values[name] = merged
    # outputs nothing reads are omitted again: one a body does not read now, or one kept
    # (or omitted) for its type, which the bodies may have made known
    full = [dataclasses.replace(n, outputs=list(n.proto.output)) for n in nodes]
    omit_unused_outputs(full, values, {o.name for o in model.outputs})
    for k, n in enumerate(full):
        if n.outputs != nodes[k].outputs:
            nodes[k] = n
    out.outputs = [values.get(o.name) or o for o in model.outputs]
    out.producers = {o: n for n in nodes for o in n.outputs if o}
    return out


def _merged(old: ValueInfo | None, new: ValueInfo) -> ValueInfo | None:
    """What inference over the spliced bodies adds to what was known of a value, or None
    when it adds nothing: a body's own value, a type or rank not known before (a plugin op's
    outputs, and what follows them), a fixed size where a dim was symbolic or unknown."""
    if old is None or (old.dtype is None and new.dtype is not None):
        return new
    if old.kind != new.kind or old.dtype != new.dtype or new.shape is None:
        return None
    if old.shape is None:
        return new
    if len(old.shape) != len(new.shape):
        return None
    dims = tuple(b if isinstance(b, int) and not isinstance(a, int) else a
                 for a, b in zip(old.shape, new.shape))
    return dataclasses.replace(old, shape=dims) if dims != old.shape else None


class _Symbols:
    """Dims ONNX's inference names itself (``unk__3``) in a run over spliced bodies, renamed
    apart from the model's: a symbolic dim is one size wherever it appears in a run, and the
    model's own were named by another inference run."""

    def __init__(self, values: dict[str, ValueInfo]):
        self.taken = {d for v in values.values() if v.shape for d in v.shape
                      if isinstance(d, str)}
        self.names: dict[str, str] = {}
        self.next = 0

    def __call__(self, v: ValueInfo) -> ValueInfo:
        if not v.shape or not any(isinstance(d, str) and d.startswith("unk__") for d in v.shape):
            return v
        return dataclasses.replace(v, shape=tuple(
            self._fresh(d) if isinstance(d, str) and d.startswith("unk__") else d
            for d in v.shape))

    def _fresh(self, dim: str) -> str:
        if dim not in self.names:
            while f"unk__{self.next}" in self.taken:
                self.next += 1
            self.names[dim] = f"unk__{self.next}"
            self.taken.add(self.names[dim])
        return self.names[dim]


def _may_have_body(node: Node, model: Model, functions: dict | None) -> bool:
    """Whether :func:`function_of` may find a body for ``node`` (without building one: a
    plugin's builder runs only for a node no backend claims)."""
    if model.proto is not None and any(f.domain == node.domain and f.name == node.op_type
                                       for f in model.proto.functions):
        return True
    domain = node.domain if node.domain != "ai.onnx" else ""
    if not domain and node.op_type in VARIADIC_OPS and len(node.inputs) > CHUNK:
        return True  # nnplug.variadic splits it
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset, domain)
    except Exception:
        return (domain, node.op_type) in (functions or {})
    return bool(schema.function_opset_versions or
                schema.context_dependent_function_opset_versions)


def function_of(node: Node, model: Model, functions: dict | None = None
                ) -> onnx.FunctionProto | None:
    """The function body of ``node``'s op: the model's own function of that name, else the
    standard schema's body for the model's opset (built for the node's input types when
    the body depends on them), else, for an op ONNX does not define at that opset, the body
    a plugin registered (``functions``); None when the op is no function (yet)."""
    if model.proto is not None:
        overload = getattr(node.proto, "overload", "")
        for f in model.proto.functions:
            if (f.domain == node.domain and f.name == node.op_type
                    and getattr(f, "overload", "") == overload):
                return f
    domain = node.domain if node.domain != "ai.onnx" else ""
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset, domain)
    except Exception:
        return _registered_body(node, model, (functions or {}).get((domain, node.op_type)))
    for version in _preferred(schema.function_opset_versions, node.opset):
        fp = onnx.FunctionProto()
        fp.ParseFromString(schema.get_function_with_opset_version(version))
        if version <= node.opset or _means_the_same(fp, model.opsets):
            return _with_schema_defaults(fp, schema)
    versions = _preferred(schema.context_dependent_function_opset_versions, node.opset)
    if versions:
        known = [model.values.get(x) for x in node.inputs if x]
        if any(v is None or v.dtype is None for v in known):
            return None  # the builders need every input's type (and crash without it)
        types = [_type_proto(model.values.get(x)).SerializeToString() for x in node.inputs]
    for version in versions:
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                version, node.proto.SerializeToString(), types)
        except Exception:
            continue  # the body builder refuses these attributes or input types
        if not data:
            continue
        fp = onnx.FunctionProto()
        fp.ParseFromString(data)
        if version <= node.opset or _means_the_same(fp, model.opsets):
            return _with_schema_defaults(fp, schema)
    return _variadic_body(node, model)


def _variadic_body(node: Node, model: Model) -> onnx.FunctionProto | None:
    """A variadic op with more inputs than backends take: smaller nodes of the same op."""
    if node.domain not in ("", "ai.onnx"):
        return None
    first = model.values.get(node.inputs[0]) if node.inputs else None
    return split_body(node.op_type, len(node.inputs), list(node.proto.attribute),
                      first.dtype if first is not None else None, model.opsets.get("", 0))


def _registered_body(node: Node, model: Model, fdef) -> onnx.FunctionProto | None:
    """A plugin's body for ``node``, checked to mean at the model's opsets what it says."""
    if fdef is None:
        return None
    fp = fdef.body_for(node, [model.values.get(x) if x else None for x in node.inputs],
                       dict(model.opsets))
    if fp is None:
        return None
    own = {o.domain or "": o.version for o in fp.opset_import}
    if own.get("", model.opsets.get("", 0)) != model.opsets.get("", 0) \
            and not _means_the_same(fp, model.opsets):
        raise ModelError(
            f"{node.describe()}: the {fdef.describe()} wrote a body for opset {own['']} of "
            f"ai.onnx, but the model imports opset {model.opsets.get('', 0)} and some of the "
            f"body's ops mean something else there; the builder must write the body for "
            f"opsets[''] (fix the plugin)")
    return fp


def _preferred(versions, opset: int) -> list[int]:
    """Body versions to try: the newest not newer than the model's opset first (ONNX defines
    it for every opset up to the next body version), then newer ones, which are used only
    when every op in them means the same at the model's opset."""
    older = sorted((v for v in versions if v <= opset), reverse=True)
    return older + sorted(v for v in versions if v > opset)


def _means_the_same(fp: onnx.FunctionProto, opsets: dict[str, int]) -> bool:
    """Whether every op of the body has the same definition at the model's opsets as at the
    body's own (so the body can be inlined into the model as it is)."""
    own = {o.domain or "": o.version for o in fp.opset_import}

    def same(nodes) -> bool:
        for n in nodes:
            d = n.domain if n.domain != "ai.onnx" else ""
            if d in own and d in opsets and own[d] != opsets[d]:
                try:
                    a = onnx.defs.get_schema(n.op_type, own[d], d).since_version
                    b = onnx.defs.get_schema(n.op_type, opsets[d], d).since_version
                except Exception:
                    return False
                if a != b:
                    return False
            for attr in n.attribute:
                for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                    if not same(g.node):
                        return False
        return True

    return same(fp.node)


def _with_schema_defaults(fp: onnx.FunctionProto, schema) -> onnx.FunctionProto:
    """Schema bodies refer to attributes whose defaults live in the schema."""
    have = {a.name for a in fp.attribute_proto}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in have and default is not None and default.type:
            a = onnx.AttributeProto()
            a.CopyFrom(default)
            a.name = name
            fp.attribute_proto.append(a)
    return fp


def _type_proto(v: ValueInfo | None) -> onnx.TypeProto:
    if v is None or v.dtype is None:
        return onnx.TypeProto()
    elem = helper.np_dtype_to_tensor_dtype(v.dtype)
    shape = None if v.shape is None else [d if d is not None else "" for d in v.shape]
    return helper.make_tensor_type_proto(elem, shape)


def inline(node: Node, fn: onnx.FunctionProto, taken: set[str]) -> list[onnx.NodeProto]:
    """The nodes of ``fn`` for ``node``: formal inputs/outputs bound to the node's values,
    private values and node names made unique under the node's name, attribute references
    resolved to the node's attributes (or the function's defaults)."""
    names: dict[str, str] = {"": ""}
    for k, formal in enumerate(fn.input):
        names[formal] = node.proto.input[k] if k < len(node.proto.input) else ""
    for k, formal in enumerate(fn.output):
        if k < len(node.proto.output) and node.proto.output[k]:
            names[formal] = node.proto.output[k]
    attrs = {a.name: a for a in fn.attribute_proto}
    attrs.update({a.name: a for a in node.proto.attribute})
    prefix = node.name
    origin = node.proto.doc_string if node.proto.doc_string.startswith(_ORIGIN) else \
        f"{_ORIGIN}node {node.name!r} (op {node.op_type}, domain {node.domain or 'ai.onnx'})"

    def rename(name: str) -> str:
        got = names.get(name)
        if got is None:
            got = f"{prefix}/{name}"
            while got in taken:
                got += "_"
            taken.add(got)
            names[name] = got
        return got

    body = [_copy_node(n, k, rename, attrs, prefix, taken) for k, n in enumerate(fn.node)]
    for n in body:
        n.doc_string = origin
    return body


_ORIGIN = "nnplug: expanded from "


def expansion_note(node: Node) -> str:
    """For errors about an expanded node: which original node it is a piece of."""
    doc = node.proto.doc_string if node.proto is not None else ""
    if not doc.startswith(_ORIGIN):
        return ""
    return (f"; it is part of the function body of {doc[len(_ORIGIN):]}, which no backend runs "
            f"whole either")


def origin_of(node: Node) -> str | None:
    """The name of the node whose function body ``node`` is a piece of (the outermost one,
    for nested functions), or None."""
    doc = node.proto.doc_string if node.proto is not None else ""
    m = re.match(r"node ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") \(op ", doc[len(_ORIGIN):]) \
        if doc.startswith(_ORIGIN) else None
    return ast.literal_eval(m.group(1)) if m else None


def _copy_node(n: onnx.NodeProto, k: int, rename, attrs, prefix: str,
               taken: set[str]) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(n)
    name = f"{prefix}/{n.name or f'{n.op_type}_{k}'}"
    while name in taken:
        name += "_"
    taken.add(name)
    out.name = name
    out.input[:] = [rename(x) for x in n.input]
    out.output[:] = [rename(x) for x in n.output]
    del out.attribute[:]
    for a in n.attribute:
        if a.ref_attr_name:
            actual = attrs.get(a.ref_attr_name)
            if actual is None:
                continue  # an optional attribute the node does not set
            a2 = onnx.AttributeProto()
            a2.CopyFrom(actual)
            a2.name = a.name
            out.attribute.append(a2)
            continue
        a2 = onnx.AttributeProto()
        a2.CopyFrom(a)
        if a2.type == onnx.AttributeProto.GRAPH:
            _rename_graph(a2.g, rename, attrs, prefix, taken)
        elif a2.type == onnx.AttributeProto.GRAPHS:
            for g in a2.graphs:
                _rename_graph(g, rename, attrs, prefix, taken)
        out.attribute.append(a2)
    return out


def _rename_graph(g: onnx.GraphProto, rename, attrs, prefix, taken) -> None:
    """A subgraph inside a function body: every name is renamed the same way (outer-scope
    references included), attribute references resolved."""
    for vi in [*g.input, *g.output, *g.value_info]:
        vi.name = rename(vi.name)
    for t in g.initializer:
        t.name = rename(t.name)
    nodes = [_copy_node(n, k, rename, attrs, prefix, taken) for k, n in enumerate(g.node)]
    del g.node[:]
    g.node.extend(nodes)


def _all_names(model: Model) -> set[str]:
    """Every name in ``model``: nodes, values (in subgraphs too), inputs, outputs, weights."""
    g = model.proto.graph
    names = _proto_names([n.proto for n in model.nodes if n.proto is not None])
    names.update(n.name for n in model.nodes)
    names.update(v.name for v in [*g.input, *g.output, *g.value_info])
    names.update(model.constants)
    return names


def _proto_names(nodes) -> set[str]:
    names = {n.name for n in nodes}
    for n in nodes:
        names.update(n.input)
        names.update(n.output)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                names |= _proto_names(sub.node)
                names.update(v.name for v in [*sub.input, *sub.output, *sub.value_info])
                names.update(t.name for t in sub.initializer)
    return names


def _rebuilt(model: Model, bodies: dict[int, tuple[list[onnx.NodeProto], list]],
             header: onnx.ModelProto) -> onnx.ModelProto:
    """The model's proto (``header``'s, which imports the bodies' opsets) with the model's
    nodes, and the expanded ones' bodies in their place."""
    proto = onnx.ModelProto()
    proto.CopyFrom(header)
    del proto.graph.node[:]
    for i, node in enumerate(model.nodes):
        if i in bodies:
            proto.graph.node.extend(bodies[i][0])
            continue
        n = proto.graph.node.add()
        n.CopyFrom(node.proto)
        n.name = node.name  # the loader's unique names, kept across rounds
    return proto


__all__ = ["expand_unclaimed", "expansion_note", "function_of", "inline", "origin_of"]

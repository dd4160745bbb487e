"""Widening: float16 nodes computed in float32 where no backend runs them natively.

A model converted to float16 (onnxconverter-common's ``convert_float_to_float16``) is float16
from end to end, but few CPU kernels compute in float16: a backend either declines such a node
or runs it on a slow path. onnxruntime's CPU provider inserts Cast nodes around the float16
nodes its kernels do not run in float16 (its InsertCastTransformer); this stage does the same:

    x16 -> Node -> y16      becomes      x16 -> Cast(float) -> Node -> Cast(float16) -> y16

The rule, per node with a float16 (or bfloat16) input:

- a backend that declares the type native (:attr:`nnplug.Backend.reduced_precision`: it
  computes in that type at least as fast as in float32) and claims the node keeps it as it is;
- an op that only moves data (Reshape, Transpose, Gather, ...) is exact in any type: it keeps
  its type when a backend claims it so, unless all its float16 inputs are float32 already (the
  results of widened nodes), where widening it costs no cast;
- bfloat16 nodes are left as written: widened, ONNX's own bfloat16 attention cases come out
  an ulp away from the reference's (its intermediate roundings differ from a float32 op's), and
  nnplug's CPU kernels run bfloat16 on their float32 paths already;
- any other node is widened when a backend claims its float32 form.

Widened nodes next to each other share their casts: a value goes between them in float32 and
is rounded to float16 only where a node that is not widened, a subgraph or a graph output reads
it. That is what onnxruntime's CPU provider does (it removes the Cast pairs its inserted casts
make between its float32 kernels) and what OpenVINO does (it computes float16 models in float32
or lower, with no float16 rounding between ops), so answers agree with theirs and are nearer
the float32 model's than op-by-op float16 rounding. Rounding every result instead (tried)
put a Cast pair between every two nodes, which cut the backends' partitions and fusions apart
(float16 ResNet-50 on onednn+cpu: 8x slower than its float32 form). ONNX's node suite passes
the same cases either way (1862 of 1884 on cpu, run both ways). Float16 constants that
widened nodes read become float32 constants (exact).

Why a declaration and not "a backend claims it in float16": the portable backend claims
float16 MatMul with a scalar loop of conversions, 100 times slower than float32; claiming says
a node runs, not that it runs fast, and only the backend knows which.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelWarning
from ..from_onnx import model_from_proto
from ..graph import Model, Node, SubGraph, ValueInfo, outer_reads, subgraphs, whole_graph

log = logging.getLogger("nnplug")

REDUCED = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
"""The reduced-precision float types this stage widens (numpy names -> ONNX element types)."""

MOVES_DATA = frozenset({
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Identity", "Tile", "DepthToSpace",
    "SpaceToDepth", "Pad", "Where"})
"""Ops whose outputs are elements of their inputs: exact in any type, as fast in float16."""

_KEEPS_TYPE = frozenset({
    "Cast", "CastLike", "Constant", "ConstantOfShape", "EyeLike", "RandomNormal",
    "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Shape", "Size"})
"""Ops whose types are what they are about: never widened."""

_TYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})


def reduced_name(dtype) -> str | None:
    """"float16" or "bfloat16" for those numpy dtypes; None for any other."""
    if dtype is None:
        return None
    name = np.dtype(dtype).name
    return name if name in REDUCED else None


def widen_reduced_precision(model: Model, backends: list, custom_ops: dict) -> Model:
    """``model`` with its float16 nodes that no backend runs natively computed in
    float32 between Cast nodes (see the module's text); ``model`` itself when none is."""
    if not any(reduced_name(v.dtype) for v in model.values.values()) and \
            not any(reduced_name(a.dtype) for a in model.constants.values()):
        return model  # the common case: nothing to look at
    graph = whole_graph(model, model.nodes, model.constants)
    wide_graph = _in_float32(graph)
    widened: set[int] = set()
    in_float32: set[str] = set()  # values widened nodes make
    constant = set(model.constants) | {y for n in model.nodes if n.op_type == "Constant"
                                       for y in n.outputs}  # cast once, when folded
    for i, node in enumerate(model.nodes):
        kind = _widenable(node, graph, custom_ops)
        if kind is None:
            continue
        runs_natively = [b for b in backends if kind in getattr(b, "reduced_precision", ())]
        if any(b.supports(node, graph) for b in runs_natively):
            continue
        if kind != "float16":
            continue  # bfloat16 nodes run as written (see the module's text)
        if node.op_type in MOVES_DATA:
            floats = [x for x in node.inputs if x and x not in constant
                      and reduced_name(graph.value(x).dtype)]
            if not all(x in in_float32 for x in floats) and \
                    any(b.supports(node, graph) for b in backends):
                continue
        if any(b.supports(node, wide_graph) for b in backends):
            widened.add(i)
            in_float32.update(x for x in node.outputs if x and reduced_name(graph.value(x).dtype))
    if not widened:
        return model
    log.debug("model %r: %d float16 node(s) computed in float32", model.name,
              len(widened))
    with warnings.catch_warnings():  # the model's own findings were reported already
        warnings.simplefilter("ignore", ModelWarning)
        return model_from_proto(_rewritten(model, widened), custom_ops,
                                weights=model.constants)


def _widenable(node: Node, graph: SubGraph, custom_ops: dict) -> str | None:
    """The reduced type of ``node`` when it may be computed in float32 instead: ONNX's own op,
    reduced inputs of one type, its reduced outputs of that type, every type known."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _KEEPS_TYPE or \
            node.op_type in custom_ops or node.proto is None or \
            _TYPE_ATTRS & set(node.attrs) or any(True for _ in subgraphs(node.proto)):
        return None
    kinds = set()
    for j, x in enumerate([*node.inputs, *node.outputs]):
        if not x:
            continue
        arr = graph.constants.get(x)
        info = graph.value(x) if arr is None else ValueInfo(x, arr.dtype, arr.shape)
        if info.dtype is None or info.kind != "tensor":
            return None
        kind = reduced_name(info.dtype)
        if kind is not None:
            kinds.add(kind)
        elif j < len(node.inputs) or np.dtype(info.dtype).kind != "f":
            continue  # other inputs (indices, shapes) and non-float outputs stay as they are
        else:
            return None  # a float32 output of a reduced node: its types are its own business
    reduced_inputs = [x for x in node.inputs if x and _reduced_value(x, graph)]
    if len(kinds) != 1 or not reduced_inputs:
        return None
    return kinds.pop()


def _reduced_value(name: str, graph: SubGraph) -> bool:
    arr = graph.constants.get(name)
    return reduced_name(arr.dtype if arr is not None else graph.value(name).dtype) is not None


def _in_float32(graph: SubGraph) -> SubGraph:
    """``graph`` as widened nodes see it: every reduced value and constant float32."""
    f32 = np.dtype(np.float32)
    values = {n: (ValueInfo(n, f32, v.shape, v.kind) if reduced_name(v.dtype) else v)
              for n, v in graph.values.items()}
    constants = {n: (a.astype(np.float32) if reduced_name(a.dtype) else a)
                 for n, a in graph.constants.items()}
    return SubGraph(graph.nodes, graph.inputs, graph.outputs, constants, values, graph.opsets,
                    graph.name)


def _rewritten(model: Model, widened: set[int]) -> onnx.ModelProto:
    """The model's proto with the ``widened`` nodes (indices) reading and writing float32."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    g = proto.graph
    taken = _names(g)

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    kept_reads = _reads_outside(model, widened)  # values read in their own type
    everything = whole_graph(model, [], model.constants)
    nodes = list(g.node)
    del g.node[:]
    wide_of: dict[str, str] = {}  # reduced value -> its float32 twin
    new_inits = []
    for i, (p, node) in enumerate(zip(nodes, model.nodes)):
        p.name = node.name  # the loader's unique names, kept
        if i not in widened:
            g.node.append(p)
            continue
        inputs = list(p.input)
        for j, x in enumerate(inputs):
            if not x or not _reduced_value(x, everything):
                continue
            if x not in wide_of:
                wide_of[x] = fresh(f"{x}/float32")
                if x in model.constants:
                    new_inits.append(numpy_helper.from_array(
                        model.constants[x].astype(np.float32), wide_of[x]))
                else:
                    g.node.append(helper.make_node("Cast", [x], [wide_of[x]],
                                                   fresh(f"{x}/to_float32"),
                                                   to=onnx.TensorProto.FLOAT))
            inputs[j] = wide_of[x]
        del p.input[:]
        p.input.extend(inputs)
        narrow = []
        outputs = list(p.output)
        for j, y in enumerate(outputs):
            kind = reduced_name(model.values.get(y, ValueInfo(y, None, None)).dtype) if y else None
            if kind is None:
                continue
            outputs[j] = fresh(f"{y}/float32")
            wide_of[y] = outputs[j]
            if y not in kept_reads:
                continue  # only widened nodes read it: they take the float32 value
            narrow.append(helper.make_node("Cast", [outputs[j]], [y], fresh(f"{y}/to_{kind}"),
                                           to=REDUCED[kind]))
        del p.output[:]
        p.output.extend(outputs)
        g.node.append(p)
        g.node.extend(narrow)
    g.initializer.extend(new_inits)
    _drop_unread(g)
    return proto


def _reads_outside(model: Model, widened: set[int]) -> set[str]:
    """Values read in their own type: by nodes not widened, by subgraphs, as graph outputs."""
    reads = {o.name for o in model.outputs}
    for i, (n, p) in enumerate(zip(model.nodes, model.proto.graph.node)):
        if i not in widened:
            reads.update(n.inputs)
        for _, sub in subgraphs(p):
            reads.update(outer_reads(sub))
    return reads


def _drop_unread(g: onnx.GraphProto) -> None:
    """Reduced initializers only widened nodes read (they read float32 copies now), and the
    value_info of names no node writes any more."""
    read = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    for n in g.node:
        for _, sub in subgraphs(n):
            read.update(outer_reads(sub))
    inputs = {i.name for i in g.input}
    keep = [t for t in g.initializer if t.name in read or t.name in inputs]
    if len(keep) != len(g.initializer):
        del g.initializer[:]
        g.initializer.extend(keep)
    written = {y for n in g.node for y in n.output} | inputs | {t.name for t in g.initializer}
    infos = [v for v in g.value_info if v.name in written]
    if len(infos) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(infos)


def _names(g: onnx.GraphProto) -> set[str]:
    names = {n.name for n in g.node}
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
        for _, sub in subgraphs(n):
            names |= _names(sub)
    names.update(v.name for v in [*g.input, *g.output, *g.value_info])
    names.update(t.name for t in g.initializer)
    return names


__all__ = ["MOVES_DATA", "REDUCED", "reduced_name", "widen_reduced_precision"]

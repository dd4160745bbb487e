"""The place stage: which backend, custom op or core op runs each node; partitions and
their subgraphs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..backend import Backend
from ..controlflow import place_control_flow
from ..customop import CustomOp
from ..device import device_type_of
from ..discovery import BACKEND_DIST_PREFIX, installed_backend_dists
from ..errors import UnsupportedNodeError
from ..graph import Model, Node, SubGraph
from ..structural import place_structural
from .expand import expansion_note

if TYPE_CHECKING:
    import onnx

# Which backends a custom op's target can run on: its device type.
_TARGET_DEVICE = {"cpu": device_type_of("cpu"), "gpu": device_type_of("opencl")}


@dataclass
class Placement:
    """Where one node runs: a backend, or a custom op on some target."""

    backend: Backend | None
    op: CustomOp | None = None
    target: str | None = None  # custom ops: "cpu" or "gpu"
    bound: object = None  # custom ops: the BoundOp that runs this node
    core: object = None  # nodes the core runs itself (control flow): has .step(subgraph)
    with_next: bool = False  # claimed only together with the next node: one kernel for both
    declined: dict[str, str] | None = None  # who declined the node before it, and why

    @property
    def label(self) -> str:
        if self.core is not None:
            return self.core.label
        if self.op is not None:
            return f"op:{self.op.op_type}@{self.target}"
        return self.backend.id

    def same_partition(self, other: Placement) -> bool:
        return (self.op is None and other.op is None and self.core is None
                and other.core is None and self.backend is other.backend)


def custom_op_for(op_type: str, custom_ops: dict[str, CustomOp], use_overrides: bool) -> CustomOp | None:
    """The custom op that runs nodes of ``op_type``, if any (an override only when overrides
    are used)."""
    op = custom_ops.get(op_type)
    return None if op is not None and op.override and not use_overrides else op


def place(node: Node, graph: SubGraph, backends: list[Backend], custom_ops: dict[str, CustomOp],
          use_overrides: bool, bind_op, installed=(), next_node: Node | None = None,
          ask: Callable[[Backend, Node, SubGraph], bool] | None = None) -> Placement:
    """The first backend (or custom op for its target) in preference order that runs ``node``.

    ``next_node``: the node after it when that node alone reads ``node``'s outputs (none of
    them a graph output); a backend declining ``node`` alone may claim the two together
    (``supports_fused``), and then the Placement says ``with_next``.

    ``bind_op(op, node, target, backend)`` binds a custom op and returns the BoundOp, or
    None when the op declines the node, so the backend's own kernel is tried next.
    ``installed``: ids of every registered backend, for the error's advice.
    ``ask(backend, node, graph)``: how ``supports`` is asked (answers the expand stage got
    are reused; see :mod:`nnplug.supports_cache`).
    """
    op = custom_op_for(node.op_type, custom_ops, use_overrides)
    declined: dict[str, str] = {}
    for b in backends:
        if op is not None:
            for target in op.targets:
                if _TARGET_DEVICE.get(target) == b.device_type_number:
                    bound = bind_op(op, node, target, b)
                    if bound is not None:
                        return Placement(b, op, target, bound, declined=declined)
                    declined[f"op:{op.op_type}@{target}"] = (
                        op.decline_reason(node, target) or "the custom op declined the node")
        if (ask(b, node, graph) if ask is not None else b.supports(node, graph)):
            return Placement(b, declined=declined)
        if next_node is not None and b.supports_fused([node, next_node], graph):
            return Placement(b, with_next=True, declined=declined)
        declined[b.id] = b.decline_reason(node, graph) or "does not support it"
    if op is not None and op.runs_anywhere:
        bound = bind_op(op, node, "cpu", None)
        if bound is not None:
            return Placement(None, op, "cpu", bound, declined=declined)
    raise UnsupportedNodeError(_unsupported_message(node, backends, custom_ops, installed))


class Placer:
    """Places a model's nodes: on the first backend or custom op that runs each
    (:func:`place`), else on the core itself (control flow, sequence and optional ops)."""

    def __init__(self, model: Model, backends: list[Backend], ops: dict[str, CustomOp], *,
                 use_overrides: bool, installed: list[str],
                 compile_sub: Callable[[onnx.ModelProto, str], object],
                 why_declined: Callable[[Node], str] | None = None,
                 ask: Callable[[Backend, Node, SubGraph], bool] | None = None):
        """``installed``: ids of every registered backend, for errors; ``compile_sub(proto,
        name)``: a Network for a subgraph of a control-flow node; ``why_declined(node)``: what
        to lead an error about ``node`` with (a backend that declined it for a known reason);
        ``ask``: how ``supports`` is asked (see :func:`place`)."""
        self.model = model
        self.backends = backends
        self.ops = ops
        self.use_overrides = use_overrides
        self.installed = installed
        self.compile_sub = compile_sub
        self.why_declined = why_declined
        self.ask = ask

    def place_all(self, nodes: list[Node], graph: SubGraph) -> dict[str, Placement]:
        readers: dict[str, set[str]] = {}
        for n in [*self.model.nodes, *nodes]:
            for x in n.inputs:
                if x:
                    readers.setdefault(x, set()).add(n.name)
        results = set(graph.outputs or ()) | {o.name for o in self.model.outputs}
        placed: dict[str, Placement] = {}
        try:
            for i, n in enumerate(nodes):
                if n.name in placed:
                    continue
                nxt = nodes[i + 1] if i + 1 < len(nodes) else None
                outs = [o for o in n.outputs if o]
                if nxt is None or not outs or any(
                        o in results or readers.get(o, set()) != {nxt.name} for o in outs):
                    nxt = None  # only a node that alone reads n's outputs is claimed with it
                elif custom_op_for(nxt.op_type, self.ops, self.use_overrides) is not None:
                    nxt = None  # a custom op registered for the reader's op runs it
                p = self.place_one(n, graph, nxt)
                placed[n.name] = p
                if p.with_next:
                    placed[nxt.name] = Placement(p.backend)
        except UnsupportedNodeError as e:
            installed = ", ".join(self.installed) or "none"
            why = self.why_declined(n) if self.why_declined else ""
            msg = f"{why} (placing it failed: {e})" if why else str(e)
            raise UnsupportedNodeError(f"{msg} (installed backends: {installed})") from None
        return self.join_layout_islands(nodes, graph, placed)

    def join_layout_islands(self, nodes: list[Node], graph: SubGraph,
                            placed: dict[str, Placement]) -> dict[str, Placement]:
        """``placed`` with each layout island moved to its neighbours' backend: a partition of
        data movement alone (LAYOUT_OPS) whose every neighbour by data, the nodes it reads
        from and those that read it, runs on one other backend, which runs these nodes too.
        Alone it costs two crossings between backends, and on another device two copies, for
        no arithmetic (measured: the transposes around a model's LSTMs on the oneDNN backend,
        between the LSTMs on the CPU backend, made it 7% slower than the CPU backend alone)."""
        maker = {o: n.name for n in nodes for o in n.outputs if o}
        readers: dict[str, set[str]] = {}  # of the nodes that run (folded ones are gone)
        for n in nodes:
            for x in n.inputs:
                if x:
                    readers.setdefault(x, set()).add(n.name)
        moved = dict(placed)
        for part in partitions(nodes, placed):
            first = placed[part[0].name]
            if first.backend is None or first.op is not None or first.core is not None or any(
                    n.op_type not in LAYOUT_OPS or n.domain not in ("", "ai.onnx") or
                    placed[n.name].with_next for n in part):
                continue
            inside = {n.name for n in part}
            near = {maker[x] for n in part for x in n.inputs if x in maker} | {
                r for n in part for o in n.outputs if o for r in readers.get(o, ())}
            near -= inside
            if len({placed[m].label for m in near}) != 1:
                continue  # no neighbour (the graph's input to its output), or several sides
            side = placed[next(iter(near))]
            other = side.backend
            if other is None or side.op is not None or side.core is not None or \
                    other is first.backend:
                continue
            try:
                for n in part:
                    place(n, graph, [other], {}, False, self.bind, ask=self.ask)
            except UnsupportedNodeError:
                continue  # the neighbours' backend does not run one of them
            why = (f"claimed it; moved to {other.id}, which runs the nodes around it (data "
                   f"movement alone between another backend's nodes)")
            for n in part:
                moved[n.name] = Placement(other, declined={
                    **(placed[n.name].declined or {}), first.backend.id: why})
        return moved

    def replay(self, nodes: list[Node], graph: SubGraph,
               recorded: dict[str, tuple[str, bool, dict]]) -> dict[str, Placement]:
        """Placements as a plan cache entry recorded them ((label, with_next, declined) per
        node): a node on one of these backends goes there again without asking it; custom
        ops and the core's own nodes are placed (bound) again."""
        by_id = {b.id: b for b in self.backends}
        placed: dict[str, Placement] = {}
        for n in nodes:
            label, with_next, declined = recorded[n.name]
            b = by_id.get(label)
            if b is not None and custom_op_for(n.op_type, self.ops, self.use_overrides) is None:
                placed[n.name] = Placement(b, with_next=with_next, declined=dict(declined))
            else:
                placed[n.name] = self.place_one(n, graph)
        return placed

    def place_one(self, n: Node, graph: SubGraph, next_node: Node | None = None) -> Placement:
        try:
            return place(n, graph, self.backends, self.ops, self.use_overrides, self.bind,
                         installed=self.installed, next_node=next_node, ask=self.ask)
        except UnsupportedNodeError as e:
            core = place_control_flow(n, self.model, self.compile_sub) or place_structural(n, graph)
            if core is None:
                note = expansion_note(n)
                if note:
                    raise UnsupportedNodeError(f"{e}{note}") from None
                raise
            return Placement(None, core=core)

    def bind(self, op, node, target, backend):
        return op.bind(node, self.model.values, target, backend)


# Ops that only move or relabel data: a partition of these alone between another backend's
# nodes runs there instead (Placer.join_layout_islands).
LAYOUT_OPS = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})

# The domains ONNX itself defines: an op of one of these that nothing runs is a gap in the
# backends, not a custom op the user forgot to register.
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")


def _unsupported_message(node: Node, backends: list[Backend], custom_ops, installed=()) -> str:
    ids = ", ".join(b.id for b in backends) or "none"
    msg = f"no backend can run {node.describe()}; tried: {ids}"
    if node.domain not in STANDARD_DOMAINS:
        msg += (f". {node.op_type!r} is a custom op of domain {node.domain!r} and no custom op "
                f"of that type is registered: install the package that provides it (an "
                f"nnplug.ops entry point), or register one with rt.register_custom_op()")
    else:
        tried = {b.id for b in backends}
        untried = [bid for bid in installed if bid not in tried]
        unused = sorted({dist for bid, dist in installed_backend_dists().items()
                         if bid not in tried and bid not in installed})
        if untried:  # registered but left out of the preference list: no install will help
            msg += (f". Registered but not tried: {', '.join(map(repr, untried))}; add it to "
                    f"the backends list")
        if unused:
            msg += (f". Installed but not registered with this Runtime: {', '.join(unused)} "
                    f"(see nnplug info and Runtime.load_errors)")
        else:
            msg += (f". Another backend may run it: backend packages are named "
                    f"{BACKEND_DIST_PREFIX}<id> (pip install one; nnplug info lists what is "
                    f"installed)")
    return msg


def sole_readers_next(nodes: list[Node], results: set[str]) -> list[Node]:
    """``nodes`` (topological order) with each node whose outputs one node alone reads moved
    up to just after it, wherever that reader's other inputs are made by then: the order
    stays topological, and the place stage, which asks a backend about a node together with
    the next one only (``supports_fused``), sees such pairs. A QDQ model's branches
    interleave them otherwise (onnxruntime's quantizer writes both branches' QuantizeLinear,
    then both DequantizeLinear). ``results``: values wanted after the nodes (never paired)."""
    readers: dict[str, set[str]] = {}
    made: set[str] = set()
    for n in nodes:
        made.update(o for o in n.outputs if o)
        for x in n.inputs:
            if x:
                readers.setdefault(x, set()).add(n.name)
    by_name = {n.name: n for n in nodes}
    out: list[Node] = []
    emitted: set[str] = set()
    ready: set[str] = set()  # values made by emitted nodes

    def sole_reader(n: Node) -> Node | None:
        outs = [o for o in n.outputs if o]
        if not outs or any(o in results for o in outs):
            return None
        rs = {r for o in outs for r in readers.get(o, ())}
        if len(rs) != 1 or any(not readers.get(o) for o in outs):
            return None
        r = by_name[rs.pop()]
        if r.name in emitted or any(x and x in made and x not in ready for x in r.inputs):
            return None
        return r

    for n in nodes:
        while n is not None and n.name not in emitted:
            out.append(n)
            emitted.add(n.name)
            ready.update(o for o in n.outputs if o)
            n = sole_reader(n)
    return out


def partitions(nodes: list[Node], placements: dict[str, Placement],
               alone: Callable[[Node], bool] | None = None) -> list[list[Node]]:
    """Consecutive nodes (topological order) with the same backend form one partition;
    every custom op node is its own partition, and so is every node ``alone`` names (those
    reading or writing string tensors: a string value never lives inside a partition)."""
    parts: list[list[Node]] = []
    prev_alone = False
    for n in nodes:
        solo = bool(alone and alone(n))
        if parts and placements[parts[-1][-1].name].with_next:
            parts[-1].append(n)  # claimed together with the node before it
        elif parts and not solo and not prev_alone and \
                placements[parts[-1][-1].name].same_partition(placements[n.name]):
            parts[-1].append(n)
        else:
            parts.append([n])
        prev_alone = solo
    return parts


def wanted_after(parts: list[list[Node]], keep: set[str]) -> list[set[str]]:
    """Per partition: the values read after it (by a later partition) or kept (``keep``):
    what it hands on when it runs in the network."""
    out: list[set[str]] = []
    later = set(keep)
    for part in reversed(parts):
        out.append(set(later))
        later.update(x for n in part for x in n.inputs if x)
    out.reverse()
    return out


def subgraph_for(part: list[Node], model: Model, constants: dict[str, np.ndarray],
                 needed_after: set[str], index: int) -> SubGraph:
    produced = {o for n in part for o in n.outputs if o}
    inputs, consts = [], {}
    for n in part:
        for x in n.inputs:
            if not x or x in produced:
                continue
            if x in constants:
                consts[x] = constants[x]
            elif x not in inputs:
                inputs.append(x)
    outputs = [o for n in part for o in n.outputs if o and o in needed_after]
    values = {}
    for n in part:
        for x in [*n.inputs, *n.outputs]:
            if x and x in model.values:
                values[x] = model.values[x]
    for name, arr in consts.items():
        from ..graph import ValueInfo

        values[name] = ValueInfo(name, arr.dtype, tuple(arr.shape))
    return SubGraph(part, inputs, outputs, consts, values, model.opsets,
                    f"{model.name}:part{index}")

"""The fold stage: constant subgraphs are placed like any node, run once at load, and
become constants of the plan.

ONNX's shape inference evaluates only some ops on constant data (its data propagation), so
a shape computed by others (``Where(Equal(..), ConstantOfShape(..), ..)`` feeding an
``Expand``, as exporters write for BERT) leaves every value after it with unknown dims,
and backends plan those nodes at run time. When folding gives values to nodes whose
outputs have unknown dims, shape inference is run again with the folded values known;
outputs it now finds fully static take those shapes, and ``Shape``/``Size`` of a value whose
shape is static is folded too, which may make more nodes constant: rounds go on until
nothing changes (at most :data:`MAX_ROUNDS`). A model whose shapes are all known is folded
in one round, its constant nodes only. Dims that depend on a symbolic input dim (a dynamic
batch) stay symbolic."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from .compiler import build_steps
from .errors import ModelWarning, NnplugError
from .executor import Plan, run_steps
from .graph import whole_graph
from .inference import reinfer
from .planner import constant_nodes

if TYPE_CHECKING:
    from .graph import Model, Node, ValueInfo
    from .planner import Placer
    from .target import Target

MAX_ROUNDS = 8
"""Rounds of folding and shape inference; each one needs new static shapes to go on."""


def fold_constants(plan: Plan, model: Model, placer: Placer, target_of: dict[str, Target],
                   optimization: str) -> list[Node]:
    """Folds what is constant into ``plan.constants`` (``plan.assignment`` names each
    folded node) and refines ``model.values`` where folding makes shapes static. Returns
    the nodes left to place."""
    rest = list(model.nodes)
    if optimization == "disable":
        return rest
    # a model whose shapes are all known folds as it always did: only its constant nodes
    lost = any(o and not _static(model.values.get(o)) for n in rest for o in n.outputs)
    for _ in range(MAX_ROUNDS):
        before = len(rest)
        if lost:
            rest = _fold_shapes(plan, model, rest, placer)
        rest = _fold_constant_nodes(plan, model, rest, placer, target_of, optimization)
        if not lost or len(rest) == before or not _refine_shapes(model, rest, plan.constants):
            break
    return rest


def _fold_shapes(plan: Plan, model: Model, nodes: list[Node], placer: Placer) -> list[Node]:
    """``Shape``/``Size`` of a value whose shape is static: its result, computed here from
    that shape. ``plan.assignment`` names the backend the node is placed on, as for any
    folded node."""
    rest = []
    for n in nodes:
        v = model.values.get(n.inputs[0]) if n.inputs and n.inputs[0] else None
        out = n.outputs[0] if n.outputs else ""
        if (n.op_type not in ("Shape", "Size") or n.domain not in ("", "ai.onnx") or not out
                or n.op_type in placer.ops or v is None or not v.is_static
                or v.kind != "tensor"):
            rest.append(n)
            continue
        if n.op_type == "Shape":  # ONNX clamps start/end as Python slicing does
            start, end = n.attr("start", 0), n.attr("end", None)
            plan.constants[out] = np.array(v.shape[start:end], dtype=np.int64)
        else:
            plan.constants[out] = np.array(int(np.prod(v.shape, dtype=np.int64)),
                                           dtype=np.int64)
        try:
            label = placer.place_one(n, whole_graph(model, [n], plan.constants)).label
        except NnplugError:
            label = "core"  # no backend runs it, and none needs to
        plan.assignment[n.name] = label + " (folded)"
    return rest


def _fold_constant_nodes(plan: Plan, model: Model, nodes: list[Node], placer: Placer,
                         target_of: dict[str, Target], optimization: str) -> list[Node]:
    """Nodes whose inputs are all constant: placed, built, run once now."""
    const_nodes = constant_nodes(nodes, plan.constants, model.values, placer.ops)
    if not const_nodes:
        return nodes
    const_names = {n.name for n in const_nodes}
    rest = [n for n in nodes if n.name not in const_names]
    placed = placer.place_all(const_nodes, whole_graph(model, const_nodes, plan.constants))
    used_later = {x for n in rest for x in n.inputs if x} | {o.name for o in model.outputs}
    keep = {o for n in const_nodes for o in n.outputs if o} & used_later
    steps = build_steps(plan, model, const_nodes, placed, keep, target_of, optimization)
    try:
        env = run_steps(steps, {})
    finally:
        for s in steps:
            if s.close:
                s.close()
    for name in keep:
        plan.constants[name] = env[name].numpy()
    for n in const_nodes:
        plan.assignment[n.name] = placed[n.name].label + " (folded)"
        plan.declined[n.name] = dict(placed[n.name].declined or {})
    return rest


def _refine_shapes(model: Model, nodes: list[Node], constants: dict[str, np.ndarray]) -> bool:
    """Shape inference again over ``nodes`` with ``constants`` known, when some output of
    them is not static; ``model.values`` takes every shape that became static. Whether
    any did."""
    if not any(o and not _static(model.values.get(o)) for n in nodes for o in n.outputs):
        return False
    if any(n.proto is None for n in nodes):
        return False
    try:
        with warnings.catch_warnings():  # the model's findings were reported at load
            warnings.simplefilter("ignore", ModelWarning)
            found = reinfer(model, nodes, constants)
    except NnplugError:
        return False  # the shapes of the first inference stand; they are only less known
    values = dict(model.values)
    changed = False
    for name, new in found.items():
        old = values.get(name)
        if name in constants or not new.is_static or _static(old) or not _agrees(old, new):
            continue
        values[name] = new
        changed = True
    if changed:
        model.values = values
    return changed


def _static(v: ValueInfo | None) -> bool:
    return v is not None and v.is_static


def _agrees(old: ValueInfo | None, new: ValueInfo) -> bool:
    """Whether ``new`` (static) only fills in what ``old`` left unknown."""
    if old is None:
        return True
    if old.kind != new.kind or (old.dtype is not None and old.dtype != new.dtype):
        return False
    if old.shape is None:
        return True
    return len(old.shape) == len(new.shape) and all(
        not isinstance(a, int) or a == b for a, b in zip(old.shape, new.shape))


__all__ = ["fold_constants", "MAX_ROUNDS"]

"""The fold stage: constant subgraphs run once at load and become constants of the plan.
They are placed, built and run like any node, by the stages after this one, through the
:class:`Evaluator` the pipeline gives (this module imports none of them).

ONNX's shape inference evaluates only some ops on constant data (its data propagation), so
a shape computed by others (``Where(Equal(..), ConstantOfShape(..), ..)`` feeding an
``Expand``, as exporters write for BERT) leaves every value after it with unknown dims,
and backends plan those nodes at run time. When folding gives values to nodes whose
outputs have unknown dims, shape inference is run again with the folded values known;
outputs it now finds fully static take those shapes, and ``Shape``/``Size`` of a value whose
shape is static is folded too, which may make more nodes constant: rounds go on until
nothing changes (at most :data:`MAX_ROUNDS`). A model whose shapes are all known is folded
in one round: its constant nodes, and its Shape/Size nodes (torch's GroupNorm reshapes back
to ``Shape(x)``: a run-time node, and a partition of its own, otherwise). Dims that depend
on a symbolic input dim (a dynamic batch) stay symbolic."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import ModelWarning, NnplugError
from ..inference import reinfer

if TYPE_CHECKING:
    from ..graph import Model, Node, ValueInfo

MAX_ROUNDS = 8
"""Rounds of folding and shape inference; each one needs new static shapes to go on."""

# Ops whose result differs run to run: never folded.
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli"}


class Evaluator(Protocol):
    """How the fold stage runs what it folds: placed, built and run like any node, by the
    stages after it (the pipeline hands it one; see :mod:`nnplug.pipeline`)."""

    def where(self, model: Model, node: Node, constants: dict[str, np.ndarray]) -> str:
        """Where ``node`` would run (its ``Network.assignment`` label); raises an
        :class:`~nnplug.NnplugError` when nothing runs it."""

    def run(self, model: Model, nodes: list[Node], constants: dict[str, np.ndarray],
            keep: set[str]) -> Ran:
        """``nodes`` placed, built and run once."""

    def keeps(self, model: Model, node: Node, reader: Node,
              constants: dict[str, np.ndarray]) -> bool:
        """Whether ``node`` (constant) is placed together with ``reader``, the one node
        reading it, in one kernel: a backend declines ``node`` alone and claims the two
        (``supports_fused``). Then it is left unfolded, just before ``reader``."""


@dataclass
class Ran:
    """What an :class:`Evaluator` ran."""

    values: dict[str, np.ndarray]
    """The values asked for, by name."""
    where: dict[str, str]
    """node name -> where it ran (its label)."""
    declined: dict[str, dict[str, str]]
    """node name -> {backend or custom op that declined it before: why}."""
    assignment: dict[str, str] = field(default_factory=dict)
    """Where the nodes of the subgraphs it ran ran (control flow)."""


@dataclass
class Folded:
    """What the fold stage makes of a model: the nodes left to run, and the rest constant."""

    model: Model
    """The model, with the shapes folding made static (its nodes are all the nodes)."""
    nodes: list[Node]
    """The nodes left to place, in order."""
    constants: dict[str, np.ndarray]
    """The model's weights and the values folded."""
    assignment: dict[str, str] = field(default_factory=dict)
    """folded node name -> "<where it ran> (folded)"."""
    declined: dict[str, dict[str, str]] = field(default_factory=dict)


def constant_nodes(nodes: list[Node], constants, values: dict, custom_ops: dict
                   ) -> list[Node]:
    """Standard, deterministic ``nodes`` whose inputs are all in ``constants`` (names), or
    computed from them (transitively)."""
    known = set(constants)
    out = []
    for n in nodes:
        if (n.op_type not in custom_ops and n.op_type not in NONDETERMINISTIC
                and n.domain in ("", "ai.onnx") and all(x == "" or x in known for x in n.inputs)
                and all(values.get(o) is None or values[o].kind == "tensor"
                        for o in n.outputs if o)):  # sequences/optionals are not weights
            out.append(n)
            known.update(o for o in n.outputs if o)
    return out


def fold_constants(model: Model, evaluator: Evaluator, custom_ops: dict,
                   optimization: str) -> Folded:
    """Folds what is constant in ``model`` (its nodes run by ``evaluator``), and refines the
    shapes folding makes static (in a copy of the model)."""
    done = Folded(dataclasses.replace(model, values=dict(model.values)), list(model.nodes),
                  dict(model.constants))
    if optimization == "disable":
        return done
    model, rest = done.model, done.nodes
    fuses = optimization == "all"  # a backend may take a DequantizeLinear with its reader
    # a model whose shapes are all known folds in one round: nothing new becomes static
    lost = any(o and not _static(model.values.get(o)) for n in rest for o in n.outputs)
    for _ in range(MAX_ROUNDS):
        before = len(rest)
        rest = _fold_known(done, rest, evaluator, custom_ops)
        rest = _fold_constant_nodes(done, rest, evaluator, custom_ops, fuses)
        if not lost or len(rest) == before or not _refine_shapes(model, rest, done.constants):
            break
    done.nodes = rest
    return done


def _fold_known(done: Folded, nodes: list[Node], evaluator: Evaluator,
                custom_ops: dict) -> list[Node]:
    """Nodes whose result is known without running them: ``Shape``/``Size`` of a value whose
    shape is static (computed from that shape), ``Constant`` with a numeric value (the
    value), and ``Identity`` of a constant (that constant). A torch export has one Constant
    or Identity per weight it shares or reshapes (174 and 119 in a BERT-base), each of which
    would otherwise be built and run on a backend. The assignment names the backend the node
    is placed on, as for any folded node."""
    model = done.model
    rest = []
    for n in nodes:
        value = _known_value(n, model, done.constants, custom_ops)
        if value is None:
            rest.append(n)
            continue
        done.constants[n.outputs[0]] = value
        try:
            label = evaluator.where(model, n, done.constants)
        except NnplugError:
            label = "core"  # no backend runs it, and none needs to
        done.assignment[n.name] = label + " (folded)"
    return rest


def _known_value(n: Node, model: Model, constants: dict, custom_ops: dict):
    """What :func:`_fold_known` folds ``n`` to, or None."""
    out = n.outputs[0] if len(n.outputs) == 1 else ""
    if (not out or n.domain not in ("", "ai.onnx") or n.op_type in custom_ops
            or (model.values.get(out) is not None and model.values[out].kind != "tensor")):
        return None
    x = n.inputs[0] if n.inputs else ""
    if n.op_type == "Identity":
        return constants.get(x)  # the same array: constants are never written
    if n.op_type == "Constant" and len(n.attrs) == 1:
        (name, v), = n.attrs.items()
        if name == "value" and isinstance(v, np.ndarray) and v.dtype != object:
            return v
        kinds = {"value_float": np.float32, "value_floats": np.float32,
                 "value_int": np.int64, "value_ints": np.int64}
        return np.array(v, dtype=kinds[name]) if name in kinds else None
    v = model.values.get(x) if x else None
    if n.op_type not in ("Shape", "Size") or v is None or not v.is_static or v.kind != "tensor":
        return None
    if n.op_type == "Shape":  # ONNX clamps start/end as Python slicing does
        return np.array(v.shape[n.attr("start", 0):n.attr("end", None)], dtype=np.int64)
    return np.array(int(np.prod(v.shape, dtype=np.int64)), dtype=np.int64)


def _fold_constant_nodes(done: Folded, nodes: list[Node], evaluator: Evaluator,
                         custom_ops: dict, fuses: bool = False) -> list[Node]:
    """Nodes whose inputs are all constant: placed, built, run once now, except a
    DequantizeLinear a backend takes together with its reader (``fuses``; see
    :func:`_kept_for_readers`)."""
    model = done.model
    const_nodes = constant_nodes(nodes, done.constants, model.values, custom_ops)
    kept = _kept_for_readers(done, nodes, const_nodes, evaluator) if fuses else {}
    const_nodes = [n for n in const_nodes if n.name not in kept]
    if not const_nodes:
        return _before_readers(nodes, kept)
    const_names = {n.name for n in const_nodes}
    rest = _before_readers([n for n in nodes if n.name not in const_names], kept)
    used_later = {x for n in rest for x in n.inputs if x} | {o.name for o in model.outputs}
    keep = {o for n in const_nodes for o in n.outputs if o} & used_later
    ran = evaluator.run(model, const_nodes, done.constants, keep)
    done.assignment.update(ran.assignment)
    for name in keep:
        done.constants[name] = ran.values[name]
    for n in const_nodes:
        done.assignment[n.name] = ran.where[n.name] + " (folded)"
        done.declined[n.name] = dict(ran.declined.get(n.name) or {})
    return rest


def _kept_for_readers(done: Folded, nodes: list[Node], const_nodes: list[Node],
                      evaluator: Evaluator) -> dict[str, Node]:
    """The DequantizeLinear nodes of constants (integer weights) that a backend takes with
    the one node reading them (``Evaluator.keeps``), by name -> that reader. Folding one
    gives its reader float weights, and the integers and scales a backend could compute
    with (an int8 convolution) are lost; a backend that can use them says so by claiming
    the pair, and a model placed on any other folds as before."""
    const_names = {n.name for n in const_nodes}
    results = {o.name for o in done.model.outputs}
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for x in n.inputs:
            if x:
                readers.setdefault(x, []).append(n)
    kept = {}
    for n in const_nodes:
        outs = [o for o in n.outputs if o]
        if (n.op_type != "DequantizeLinear" or n.domain not in ("", "ai.onnx") or len(outs) != 1
                or outs[0] in results or not all(x == "" or x in done.constants for x in n.inputs)):
            continue
        read_by = readers.get(outs[0], [])
        if len(read_by) != 1 or read_by[0].name in const_names or any(
                r.name == read_by[0].name for r in kept.values()):
            continue  # one per reader: the place stage pairs a node with the next one only
        if evaluator.keeps(done.model, n, read_by[0], done.constants):
            kept[n.name] = read_by[0]
    return kept


def _before_readers(nodes: list[Node], kept: dict[str, Node]) -> list[Node]:
    """``nodes`` with each kept node moved to just before its reader (its inputs are all
    constants, so the order stays topological), where the place stage claims the two
    together."""
    if not kept:
        return nodes
    moved = {n.name: n for n in nodes if n.name in kept}
    before: dict[str, list[Node]] = {}
    for name, n in moved.items():
        before.setdefault(kept[name].name, []).append(n)
    out = []
    for n in nodes:
        if n.name in moved:
            continue
        out.extend(before.get(n.name, []))
        out.append(n)
    return out


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


__all__ = ["Evaluator", "Folded", "Ran", "MAX_ROUNDS", "NONDETERMINISTIC", "constant_nodes",
           "fold_constants"]

"""How a model becomes a Network: one stage after another, a module each. Each stage takes
what the one before it made and returns something new; none calls back into an earlier one.

    read       nnplug.stages.loader      path, bytes, ModelProto -> Model: checked, shapes inferred
    check      nnplug.stages.validate    every node, before any backend sees it
    widen      nnplug.stages.precision   float16 nodes no backend runs natively -> float32
                                  between casts
    expand     nnplug.stages.expand      nodes no backend claims whose op is a function -> its body;
                                  what subgraphs read from outer scopes -> node inputs
    fold       nnplug.stages.folding     constant subgraphs run once -> constants; shapes they make
                                  static are inferred again
               nnplug.stages.cse         nodes computing the same thing from the same inputs -> one
    place      nnplug.stages.planner     a backend, custom op or core op for each node
               nnplug.stages.measure     (placement="measure") partitions two host backends run:
                                  timed on both, kept on the faster
    compile    nnplug.stages.compiler    build each partition: the Plan (nnplug.plan)
    run        nnplug.stages.executor    (``Network.run``) the plan's steps over the feeds

What a later stage does for an earlier one it is handed, never imports: the fold stage runs
its constant nodes through an :class:`Evaluator` made here of the place, compile and run
stages, and each backend's ``supports`` answers are asked once (a
:class:`~nnplug.supports_cache.SupportsCache` the expand, fold and place stages share).
A subgraph of If/Loop/Scan gets a sub-plan of its own from :func:`compile_network`, on the
same backends, from a Model built of the subgraph as it is (not read again).
:class:`nnplug.Runtime` only holds the plugins and calls :func:`load_network`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from . import errors
from .errors import ModelWarning, NnplugError
from .from_onnx import model_from_proto
from .graph import Model, node_has_strings, whole_graph
from .network import Network, release_plan
from .plan import Plan
from .plan_cache import Decided, PlanCache, plan_key
from .stages.compiler import build_plan, build_steps, targets_for
from .stages.cse import merge_common_subexpressions
from .stages.executor import run_steps
from .stages.expand import expand_unclaimed
from .stages.folding import Ran, fold_constants
from .stages.loader import load, read_model
from .stages.measure import measure_placement, placement_mode
from .stages.planner import Placer, sole_readers_next
from .stages.precision import widen_reduced_precision
from .stages.validate import validate
from .static_shapes import ShapeDeclines
from .supports_cache import SupportsCache

if TYPE_CHECKING:
    from .customop import CustomOp
    from .plugins import BackendInfo
    from .runtime import Runtime


def load_network(runtime: Runtime, model, backends: list[BackendInfo], ops: dict[str, CustomOp],
                 targets: dict, *, optimization: str = "all", external_data_dir=None,
                 cache: PlanCache | None = None) -> Network:
    """``model`` (path, bytes or onnx.ModelProto) loaded, validated and compiled for
    ``backends`` (in preference order); see :meth:`nnplug.Runtime.load`. With ``cache``, what
    the stages up to placement decide is kept there, and a load it has an entry for goes
    straight to the compile stage (:mod:`nnplug.plan_cache`)."""
    # with a cache, a file's weights are copied only if a stage asks (a hit never does)
    read = read_model(model, external_data_dir, lazy=cache is not None)
    if cache is None:
        return _read_to_compile(runtime, read, backends, ops, targets, optimization)
    key = plan_key(read, backends, ops, runtime.functions, targets_for(
        [i.backend for i in backends], targets), optimization=optimization,
        placement=placement_mode(runtime.options.placement),
        use_overrides=not runtime.options.disable_op_overrides)
    hit = cache.read(key)
    if hit is not None:
        return compile_recorded(runtime, hit, backends, ops, targets, optimization=optimization)
    kept: list[Decided] = []
    said: list = []
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            net = _read_to_compile(runtime, read, backends, ops, targets, optimization,
                                   keep=kept.append)
    finally:
        for w in said:  # said as they would have been, and kept with the entry
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if kept:
        kept[0].warnings = [(w.category.__name__, str(w.message)) for w in said
                            if issubclass(w.category, UserWarning)]
        cache.write(key, kept[0])
    return net


def _read_to_compile(runtime, read, backends, ops, targets, optimization, keep=None):
    m = load(read, ops, functions=tuple(runtime.functions))
    validate(m, ops)  # before any backend sees a node
    return compile_network(runtime, m, backends, ops, targets, optimization=optimization,
                           keep=keep)


def compile_network(runtime: Runtime, model: Model, infos: list[BackendInfo],
                    ops: dict[str, CustomOp], targets: dict, *,
                    optimization: str = "all", keep=None) -> Network:
    """A loaded model expanded, folded, placed and compiled into a Network. ``keep``: given
    what the stages up to placement decided (a :class:`~nnplug.plan_cache.Decided`), before
    the compile stage."""
    backends = [info.backend for info in infos]
    target_of = targets_for(backends, targets)
    answers = SupportsCache()  # supports() asked once per node and backend, by every stage

    model = widen_reduced_precision(model, backends, ops)  # fp16 -> fp32
    declines = ShapeDeclines(backends, answers.ask)  # declined only for unknown shapes: said
    expanded = expand_unclaimed(model, declines.claimed, ops, runtime.functions)
    placer_for = _placers(runtime, infos, ops, targets, declines)

    leases = runtime.hold_backends(infos)  # for as long as the plan's kernels live
    plan = Plan({})
    try:
        folded = fold_constants(expanded, Evaluator(placer_for, target_of, optimization), ops,
                                optimization)
        plan = Plan(folded.constants, assignment=folded.assignment, declined=folded.declined)
        rest, merged = folded.nodes, {}
        if optimization != "disable":
            rest, merged = merge_common_subexpressions(
                rest, plan.constants, {o.name for o in expanded.outputs}, ops,
                folded.model.values)
        rest = sole_readers_next(rest, {o.name for o in folded.model.outputs})
        graph = whole_graph(folded.model, rest, plan.constants)
        placed = placer_for(folded.model).place_all(rest, graph)
        if placement_mode(runtime.options.placement) == "measure":
            placed = measure_placement(
                folded.model, rest, placed, backends, graph, plan.constants, target_of,
                alone=lambda n: node_has_strings(n, folded.model.values, plan.constants))
        declines.warn(placed)
        if keep is not None:
            keep(Decided(model, folded.model, rest,
                         {n: (p.label, p.with_next, dict(p.declined or {}))
                          for n, p in placed.items()},
                         dict(plan.constants), dict(plan.assignment), dict(plan.declined),
                         dict(merged)))
        _build(plan, folded.model, rest, placed, target_of, optimization, merged)
    except BaseException:
        release_plan(plan.steps, leases)  # the kernels built so far, then the backends
        raise
    return Network(model, plan, leases, nodes=rest, optimization=optimization)


def compile_recorded(runtime: Runtime, rec: Decided, infos: list[BackendInfo],
                     ops: dict[str, CustomOp], targets: dict, *,
                     optimization: str = "all") -> Network:
    """A Network from a plan cache entry: each node placed where the entry says (custom ops
    and the core's own nodes bound again), then compiled."""
    backends = [info.backend for info in infos]
    target_of = targets_for(backends, targets)
    for category, message in rec.warnings:  # what the stages said when the entry was made
        kind = getattr(errors, category, None)
        warnings.warn(message, kind if isinstance(kind, type) and issubclass(kind, Warning)
                      else UserWarning, stacklevel=4)
    placer = _placers(runtime, infos, ops, targets, None)(rec.folded)
    leases = runtime.hold_backends(infos)
    plan = Plan(rec.constants, assignment=dict(rec.assignment), declined=dict(rec.declined))
    try:
        placed = placer.replay(rec.nodes, whole_graph(rec.folded, rec.nodes, plan.constants),
                               rec.placed)
        _build(plan, rec.folded, rec.nodes, placed, target_of, optimization, rec.merged)
    except BaseException:
        release_plan(plan.steps, leases)
        raise
    return Network(rec.model, plan, leases, nodes=rec.nodes, optimization=optimization)


def _placers(runtime: Runtime, infos: list[BackendInfo], ops: dict[str, CustomOp],
             targets: dict, declines: ShapeDeclines | None):
    """model -> the Placer for it (control-flow subgraphs compiled on the same backends)."""
    backends = [info.backend for info in infos]

    def compile_sub(proto, name):
        with warnings.catch_warnings():  # findings were reported for the whole model
            warnings.simplefilter("ignore", ModelWarning)
            return compile_network(runtime, model_from_proto(proto, ops), infos, ops, targets)

    def placer_for(m: Model) -> Placer:
        return Placer(m, backends, ops, use_overrides=not runtime.options.disable_op_overrides,
                      installed=list(runtime.backends), compile_sub=compile_sub,
                      why_declined=declines.note if declines else None,
                      ask=declines.supports if declines else None)

    return placer_for


def _build(plan: Plan, model: Model, nodes, placed, target_of, optimization, merged) -> None:
    build_plan(plan, model, nodes, placed, target_of, optimization)
    for dropped, kept in merged.items():  # it ran where the node it is the same as ran
        plan.assignment[dropped] = plan.assignment[kept]


class Evaluator:
    """What the fold stage runs its constant nodes with (:class:`nnplug.stages.folding.Evaluator`):
    placed, built and run once, by the same stages as every other node."""

    def __init__(self, placer_for, target_of: dict, optimization: str):
        self.placer_for = placer_for
        self.target_of = target_of
        self.optimization = optimization

    def where(self, model: Model, node, constants) -> str:
        return self.placer_for(model).place_one(node, whole_graph(model, [node], constants)).label

    def keeps(self, model: Model, node, reader, constants) -> bool:
        graph = whole_graph(model, [node, reader], constants)
        try:
            return self.placer_for(model).place_one(node, graph, reader).with_next
        except NnplugError:
            return False  # nothing runs it alone or with its reader: folded, as before

    def run(self, model: Model, nodes, constants, keep):
        placed = self.placer_for(model).place_all(nodes, whole_graph(model, nodes, constants))
        scratch = Plan(constants)  # build_steps reads the constants, names sub-plans' nodes
        steps = build_steps(scratch, model, nodes, placed, keep, self.target_of,
                            self.optimization)
        try:
            env = run_steps(steps, {})
        finally:
            for s in steps:
                if s.close:
                    s.close()
        return Ran({name: env[name].numpy() for name in keep},
                   {n.name: placed[n.name].label for n in nodes},
                   {n.name: dict(placed[n.name].declined or {}) for n in nodes},
                   scratch.assignment)


__all__ = ["Evaluator", "compile_network", "compile_recorded", "load_network"]

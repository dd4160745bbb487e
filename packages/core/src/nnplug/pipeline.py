"""How a model becomes a Network: one stage after another, a module each.

    load       nnplug.loader      read (path, bytes, ModelProto), check, infer shapes
    validate   nnplug.validate    every node, before any backend sees it
    expand     nnplug.expand      nodes no backend claims whose op is a function -> its body
               nnplug.controlflow what subgraphs read from outer scopes -> node inputs
    fold       nnplug.folding     constant subgraphs run once -> constants; shapes they make
                                  static are inferred again
    merge      nnplug.cse         nodes computing the same thing from the same inputs -> one
    place      nnplug.planner     a backend, custom op or core op for each node
               nnplug.measure     (placement="measure") partitions two host backends run:
                                  timed on both, kept on the faster
    compile    nnplug.compiler    build each partition: the Network's plan
    run        nnplug.executor    (``Network.run``) the plan's steps over the feeds

A subgraph of If/Loop/Scan gets a sub-plan of its own from :func:`compile_network`, on the
same backends. :class:`nnplug.Runtime` only holds the plugins and calls :func:`load_network`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from .compiler import build_plan, targets_for
from .controlflow import attach_outer_inputs
from .cse import merge_common_subexpressions
from .errors import ModelWarning
from .executor import Plan
from .expand import expand_unclaimed
from .folding import fold_constants
from .graph import Model, node_has_strings, whole_graph
from .loader import load
from .measure import measure_placement, placement_mode
from .network import Network, release_plan
from .planner import Placer
from .precision import widen_reduced_precision
from .static_shapes import ShapeDeclines
from .validate import validate

if TYPE_CHECKING:
    from .customop import CustomOp
    from .plugins import BackendInfo
    from .runtime import Runtime


def load_network(runtime: Runtime, model, backends: list[BackendInfo], ops: dict[str, CustomOp],
                 targets: dict, *, optimization: str = "all", external_data_dir=None) -> Network:
    """``model`` (path, bytes or onnx.ModelProto) loaded, validated and compiled for
    ``backends`` (in preference order); see :meth:`nnplug.Runtime.load`."""
    m = load(model, ops, external_data_dir, functions=tuple(runtime.functions))
    validate(m, ops)  # before any backend sees a node
    return compile_network(runtime, m, backends, ops, targets, optimization=optimization)


def compile_network(runtime: Runtime, model: Model, infos: list[BackendInfo],
                    ops: dict[str, CustomOp], targets: dict, *,
                    optimization: str = "all") -> Network:
    """A loaded model expanded, placed and compiled into a Network."""
    backends = [info.backend for info in infos]
    target_of = targets_for(backends, targets)

    model = widen_reduced_precision(model, backends, ops, runtime.functions)  # fp16 -> fp32
    declines = ShapeDeclines(backends)  # nodes declined only for unknown shapes: said, not hidden
    expanded = expand_unclaimed(model, declines.claimed, ops, runtime.functions)
    attach_outer_inputs(expanded)  # control flow: what subgraphs read is a node input

    def compile_sub(proto, name):
        with warnings.catch_warnings():  # findings were reported for the whole model
            warnings.simplefilter("ignore", ModelWarning)
            return compile_network(runtime, load(proto, ops, functions=tuple(runtime.functions)),
                                   infos, ops, targets)

    placer = Placer(expanded, backends, ops,
                    use_overrides=not runtime.options.disable_op_overrides,
                    installed=list(runtime.backends), compile_sub=compile_sub,
                    why_declined=declines.note)
    leases = runtime.hold_backends(infos)  # for as long as the plan's kernels live
    plan = Plan(dict(model.constants))
    try:
        rest = fold_constants(plan, expanded, placer, target_of, optimization)
        merged = {}
        if optimization != "disable":
            rest, merged = merge_common_subexpressions(
                rest, plan.constants, {o.name for o in expanded.outputs}, ops)
        graph = whole_graph(expanded, rest, plan.constants)
        placed = placer.place_all(rest, graph)
        if placement_mode(runtime.options.placement) == "measure":
            placed = measure_placement(
                expanded, rest, placed, backends, graph, plan.constants, target_of,
                alone=lambda n: node_has_strings(n, expanded.values, plan.constants))
        declines.warn(placed)
        build_plan(plan, expanded, rest, placed, target_of, optimization)
        for dropped, kept in merged.items():  # it ran where the node it is the same as ran
            plan.assignment[dropped] = plan.assignment[kept]
    except BaseException:
        release_plan(plan.steps, leases)  # the kernels built so far, then the backends
        raise
    return Network(model, plan, leases, nodes=rest, optimization=optimization)


__all__ = ["load_network", "compile_network"]

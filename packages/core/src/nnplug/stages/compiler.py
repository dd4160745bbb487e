"""The compile stage: placed nodes become the steps of a Network's :class:`~nnplug.plan.Plan`.

Every partition left after folding (:mod:`nnplug.folding`) is built once by its backend for
its Target (:func:`build_plan`). Control-flow nodes build the sub-plans of their subgraphs
when their step is made (see :mod:`nnplug.controlflow`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ModelError, NnplugError, PluginError
from ..graph import node_has_strings
from ..plan import Plan, Step, plan_frees
from ..target import Target
from ..tensor import Tensor
from .planner import partitions, subgraph_for, wanted_after

if TYPE_CHECKING:
    from ..backend import Backend
    from ..graph import Model, Node
    from .planner import Placement


def targets_for(backends: list[Backend], targets: dict) -> dict[str, Target]:
    """backend id -> the Target its partitions are built for (``targets`` names them; the
    backend's own kind otherwise)."""
    target_of = {}
    for b in backends:
        spec = targets.get(b.id, b.target_kind_name)
        try:
            target_of[b.id] = Target(spec)
        except NnplugError as e:
            raise type(e)(f"backend {b.id!r}: {e}") from None
    unknown = set(targets) - set(target_of)
    if unknown:
        raise ModelError(f"targets given for backend(s) not in use: {', '.join(sorted(unknown))}")
    return target_of


def build_plan(plan: Plan, model: Model, nodes: list[Node], placed: dict[str, Placement],
               target_of: dict[str, Target], optimization: str) -> None:
    """The plan's steps for ``nodes`` (everything not folded), each value freed after its
    last reader."""
    results = {o.name for o in model.outputs}
    for n in nodes:
        plan.assignment[n.name] = placed[n.name].label
        plan.declined[n.name] = dict(placed[n.name].declined or {})
    plan.steps.extend(build_steps(plan, model, nodes, placed, results, target_of, optimization))
    plan_frees(plan.steps, results)


def build_steps(plan: Plan, model: Model, nodes: list[Node], placed: dict[str, Placement],
                keep: set[str], target_of: dict[str, Target], optimization: str) -> list[Step]:
    """One step per partition of ``nodes``; ``keep``: values wanted after all of them."""
    steps: list[Step] = []
    parts = partitions(nodes, placed,
                       alone=lambda n: node_has_strings(n, model.values, plan.constants))
    if optimization != "all":  # one node per kernel: nothing for a backend to fuse, but a
        split: list[list[Node]] = []  # node claimed only with the next one keeps it
        for n in (n for part in parts for n in part):
            if split and placed[split[-1][-1].name].with_next:
                split[-1].append(n)
            else:
                split.append([n])
        parts = split
    after = wanted_after(parts, keep)
    for i, part in enumerate(parts):
        p = placed[part[0].name]
        sg = subgraph_for(part, model, plan.constants, after[i], i)
        if p.op is not None:
            steps.append(_custom_step(p, sg))
            continue
        if p.core is not None:
            steps.append(p.core.step(sg))
            plan.assignment.update(p.core.assignment)
            continue
        b = p.backend
        try:
            module = b.build(sg, target_of[b.id])
        except NnplugError:
            raise
        except Exception as e:
            raise PluginError(
                f"backend {b.id!r} failed to build {len(part)} node(s) starting at "
                f"{part[0].describe()}: {type(e).__name__}: {e}"
            ) from e
        api = b.device_api()
        steps.append(Step(b.id, [n.name for n in part], sg.inputs, sg.outputs,
                          target_of[b.id].device, api, module["run"], module.close,
                          values=sg.values,
                          run_arrays=module["run_arrays"] if "run_arrays" in module else None,
                          fresh_arrays=getattr(module, "fresh_arrays", False)))
    return steps


def _custom_step(p, sg) -> Step:
    """A custom op gets every input in node order; constant ones are moved to its device
    once, here."""
    bound = p.bound
    node = sg.nodes[0]
    consts = {name: Tensor.from_numpy(a).to(bound.device, bound.api)
              for name, a in sg.constants.items()}
    slots = [(consts[x] if x in consts else sg.inputs.index(x)) for x in node.inputs if x]
    # the op returns every output of the node; the step hands on those needed later
    picks = [node.outputs.index(o) for o in sg.outputs]

    def run(ins):
        outs = bound.run([ins[s] if isinstance(s, int) else s for s in slots])
        return [outs[i] for i in picks] if len(outs) == len(node.outputs) else outs

    return Step(p.label, [node.name], sg.inputs, sg.outputs, bound.device, bound.api, run,
                bound.close, values=sg.values)

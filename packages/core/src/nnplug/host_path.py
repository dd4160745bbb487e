"""The short way through a run, for the common case: numpy feeds of the model's dtypes and
shapes, a plan whose steps all take host arrays (``Step.run_arrays``: native partitions on host
memory, planned once or run through ``run_dynamic``), no run context. What the general path
checks per run is found once here; a run is a few comparisons per feed and one native call per
step. A symbolic dim of the inputs (a batch ``N``) is bound from the feeds, the same size
wherever the symbol appears; a step whose shapes are not all static checks what it makes
itself (``Step.run_arrays``). Anything else (other feed types, a wrong
dtype or shape, device backends, a profiler) takes the general path, which checks and reports
as before.

The run is one Python function written for the plan when the network is made: each feed's
checks, each step's call and each result's check are straight-line code on local variables
(a loop over per-feed and per-step tuples and a dict of values cost a one-node run about
1.5 us of its 4). Its source holds indexes and integer sizes only; every name, dtype, shape
and step is bound as a global of the function.
"""

from __future__ import annotations

import numpy as np

from .errors import NnplugError
from .graph import ValueInfo
from .runcontext import current
from .stages.executor import Step, step_failed

ndarray = np.ndarray
HOST_VALUES = "host values"
"""A step's expected outputs when it is the core's own op making host values (ZipMap): in the
caller's form already (a list of dicts), made for this run."""
FRESH = "fresh arrays"
"""A step's expected outputs when its results need no check (``Step.fresh_arrays``)."""


class HostPath:
    """Built once per Network; ``run(feeds, names)`` is thread-safe (it keeps no state)."""

    __slots__ = ("run", "all_fresh", "source")

    def __init__(self, feeds, steps, output_names, constants):
        """``feeds``: (name, shape, dtype, ValueInfo or None when static) per model input;
        ``steps``: (step, its run_arrays, input names, output names, names freed after it,
        expected outputs: FRESH, HOST_VALUES, None (a dynamic step) or (shape, dtype) each)."""
        fresh = {o for s in steps if s[5] is FRESH or s[5] is HOST_VALUES for o in s[3]}
        fed = {f[0] for f in feeds}
        copied = [n for n in output_names if n in constants and n not in fed]
        self.all_fresh = fresh.issuperset(output_names)
        """Whether every model output is a value a step made for this run (no aliasing
        check, no conversion)."""
        self.source, scope = _write(feeds, steps, output_names, constants, fresh, copied)
        """The run's source, for a reader (``print(net._host_path.source)``)."""
        exec(compile(self.source, "<nnplug host path>", "exec"), scope)  # noqa: S102
        self.run = scope["run"]
        """``run(feeds, names)``: the arrays of ``names`` (None: every output), in that order,
        or None when this run is not the common case (the caller then takes the general path,
        which also reports what is wrong with the feeds)."""

    @classmethod
    def of(cls, inputs: list[ValueInfo], steps: list[Step], output_names: list[str],
           constants: dict) -> HostPath | None:
        """The host path of a plan, or None when some input or step cannot take it."""
        feeds = []
        for v in inputs:
            if v.kind != "tensor" or v.shape is None or v.dtype is None or v.dtype == object:
                return None
            feeds.append((v.name, tuple(v.shape), np.dtype(v.dtype), None if v.is_static else v))
        plan = []
        for s in steps:
            if s.run_arrays is None:
                return None
            host_values = s.label == "core"  # the core's own op (ZipMap): a host value out
            if s.static_outputs is None and not host_values and not all(
                    (v := s.values.get(o)) is not None and v.kind == "tensor" and
                    v.dtype is not None for o in s.outputs):
                return None
            expected = None if s.static_outputs is None else tuple(s.static_outputs)
            if s.fresh_arrays:
                expected = FRESH
            plan.append((s, s.run_arrays, tuple(s.inputs), tuple(s.outputs), tuple(s.frees),
                         HOST_VALUES if host_values else expected))
        made = {f[0] for f in feeds}  # each step reads what the feeds and earlier steps made
        for p in plan:
            if not made.issuperset(p[2]):
                return None
            made.update(p[3])
        if not made.union(constants).issuperset(output_names):  # the general path says why
            return None
        return cls(tuple(feeds), tuple(plan), tuple(output_names), constants)


def _write(feeds, steps, output_names, constants, fresh, copied):
    """The source of ``run`` and the globals it reads."""
    fed = {f[0] for f in feeds}
    own, pick = _owner(frozenset(fresh) | frozenset(copied))
    scope = {"ndarray": ndarray, "current": current, "NnplugError": NnplugError,
             "step_failed": step_failed, "unexpected": _unexpected, "own": own, "pick": pick,
             "known": frozenset(output_names)}
    var: dict[str, str] = {}  # value name -> its local variable

    def local(name):
        if name not in var:
            var[name] = f"v{len(var)}"
            scope[f"n{var[name][1:]}"] = name
        return var[name]

    lines = ["def run(feeds, names):",
             f"    if type(feeds) is not dict or len(feeds) != {len(feeds)} or "
             f"current() is not None:",
             "        return None",
             "    if names is not None and (type(names) is not list and type(names) is not "
             "tuple or not known.issuperset(names)):",
             "        return None  # an iterator is read once, by the general path"]
    where: dict[str, list[str]] = {}  # symbol -> its places among the feeds' dims
    for i, (name, shape, dtype, info) in enumerate(feeds):
        v = local(name)
        scope[f"d{i}"] = dtype
        lines += [f"    {v} = feeds.get(n{v[1:]})",
                  f"    if type({v}) is not ndarray or {v}.dtype is not d{i} and "
                  f"{v}.dtype != d{i} or not {v}.flags.c_contiguous:",
                  "        return None"]
        if info is None:
            scope[f"s{i}"] = shape
            lines += [f"    if {v}.shape != s{i}:", "        return None"]
            continue
        tests = [f"len(g{i}) != {len(shape)}"]
        for k, d in enumerate(shape):
            if type(d) is int:
                tests.append(f"g{i}[{k}] != {int(d)}")
            elif type(d) is str:
                where.setdefault(d, []).append(f"g{i}[{k}]")
        lines += [f"    g{i} = {v}.shape", f"    if {' or '.join(tests)}:", "        return None"]
    for places in where.values():  # a symbol's sizes must agree across the feeds
        for p in places[1:]:
            lines += [f"    if {p} != {places[0]}:", "        return None"]
    for name in copied:  # as the general path: constant outputs are copies
        v = local(name)
        scope[f"c{v[1:]}"] = constants[name]
        lines.append(f"    {v} = c{v[1:]}.copy()")
    for j, (step, run, ins, outs, frees, expected) in enumerate(steps):
        scope[f"step{j}"], scope[f"run{j}"], scope[f"outs{j}"] = step, run, outs
        args = ", ".join(local(n) for n in ins)
        lines += ["    try:",
                  f"        r = run{j}([{args}])",
                  "    except NnplugError:",
                  "        raise",
                  "    except Exception as e:  # as the general path words it",
                  f"        raise step_failed(step{j}, e) from e"]
        if expected is not FRESH:
            lines += [f"    if len(r) != {len(outs)}:", f"        raise unexpected(outs{j})"]
        if expected is None:  # a dynamic step: run_arrays checked the shapes it made
            lines += [f"    if type(r[{k}]) is not ndarray:\n        raise unexpected(outs{j})"
                      for k in range(len(outs))]
        elif expected is not FRESH and expected is not HOST_VALUES:
            scope[f"want{j}"] = expected
            for k in range(len(outs)):
                lines += [f"    if type(r[{k}]) is not ndarray or r[{k}].shape != "
                          f"want{j}[{k}][0] or r[{k}].dtype != want{j}[{k}][1]:",
                          f"        raise unexpected(outs{j}[{k}:{k + 1}])"]
        lines.append(f"    {''.join(local(o) + ', ' for o in outs)}= r")
        # a value no later step reads is let go (a feed stays the caller's; after the last
        # step the function returns)
        gone = [var[n] for n in frees if n in var and n not in output_names and n not in fed]
        if gone and j < len(steps) - 1:
            lines.append(f"    del {', '.join(gone)}")
    checked = [n for n in output_names if n not in fresh and n not in copied]
    if checked:  # the feeds as the run holds them, once for every output compared with them
        lines.append(f"    fed = ({''.join(var[f[0]] + ', ' for f in feeds)})")
    outputs = [f"own({var[n]}, fed)" if n in checked else var[n] for n in output_names]
    lines += ["    if names is None:",
              f"        return [{', '.join(outputs)}]",
              f"    return pick({{{', '.join(f'n{var[n][1:]}: {var[n]}' for n in output_names)}}}"
              f", names, {'fed' if checked else '()'})"]
    return "\n".join(lines) + "\n", scope


def _owner(fresh: frozenset):
    """``own(v, fed)`` and ``pick(values, names, fed)`` of a plan whose outputs in ``fresh``
    need no check; ``fed``: the run's feed arrays."""
    def own(v, fed):
        """A model output as the caller gets it: never an array sharing memory with a feed
        (an input passed through, or a view of one)."""
        if v.base is None:
            return v.copy() if any(v is f for f in fed) else v
        for f in fed:
            if np.may_share_memory(v, f):
                return v.copy()
        return v

    def pick(values, names, fed):
        """The outputs of ``names``, in that order (a name may come twice)."""
        return [values[n] if n in fresh else own(values[n], fed) for n in names]

    return own, pick


def _unexpected(names):
    from .errors import BackendError

    return BackendError(f"value(s) {', '.join(map(repr, names))}: a step's run_arrays returned "
                        f"another count, shape or dtype than the model's; the backend breaks the "
                        f"run_arrays contract (report it to its authors)")


__all__ = ["HostPath"]

"""The short way through a run, for the common case: numpy feeds of the model's dtypes and
shapes, a plan whose steps all take host arrays (``Step.run_arrays``: native partitions on host
memory, planned once or run through ``run_dynamic``), no run context. What the general path
checks per run is found once here; a run is a few comparisons per feed and one native call per
step. A symbolic dim of the inputs (a batch ``N``) is bound from the feeds, the same size
wherever the symbol appears; a step whose shapes are not all static checks what it makes
itself (``Step.run_arrays``). Anything else (other feed types, a wrong
dtype or shape, device backends, a profiler) takes the general path, which checks and reports
as before.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from .errors import NnplugError
from .graph import ValueInfo
from .runcontext import current
from .stages.executor import Step, step_failed

ndarray = np.ndarray
HOST_VALUES = "host values"
"""A step's expected outputs when it is the core's own op making host values (ZipMap)."""
FRESH = "fresh arrays"
"""A step's expected outputs when its results need no check (``Step.fresh_arrays``)."""


class HostPath:
    """Built once per Network; ``run`` is thread-safe (it keeps no state of its own)."""

    __slots__ = ("feeds", "steps", "output_names", "known_outputs", "constants", "symbols",
                 "fresh", "all_fresh", "constant_outputs")

    def __init__(self, feeds, steps, output_names, constants, fresh=frozenset()):
        self.feeds = tuple(_feed_check(*f) for f in feeds)
        """(name, dtype, the static shape or None, rank, a getter of the fixed dims or None,
        their sizes) of every model input, in order: a feed is checked with a few comparisons
        made in C (a generator per feed cost a decoder step 10 us)."""
        self.steps = steps
        """(step, its run_arrays, input names, output names, names freed after it,
        expected (shape, dtype) of each output, or None when some output shape is not static)
        per step."""
        where: dict[str, list[int]] = {}  # symbol -> its places among the feeds' dims, end to end
        at = 0
        for _, shape, _, info in feeds:
            for d in shape:
                if info is not None and type(d) is str:
                    where.setdefault(d, []).append(at)
                at += 1
        self.symbols = tuple(itemgetter(*p) for p in where.values() if len(p) > 1)
        """Per symbol that appears twice or more among the inputs' dims: a getter of its sizes
        from all feeds' dims end to end (the sizes must agree)."""
        self.output_names = output_names
        self.known_outputs = frozenset(output_names)
        self.constants = constants
        self.fresh = fresh
        """The model outputs that steps make as fresh arrays (``Step.fresh_arrays``): they
        need no aliasing check."""
        self.all_fresh = fresh.issuperset(output_names)
        self.constant_outputs = tuple(n for n in output_names if n in constants)
        """Model outputs that are constants (each run hands out a copy)."""

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
        fresh = set()  # outputs of steps whose results are fresh arrays
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
                fresh.update(s.outputs)
            plan.append((s, s.run_arrays, tuple(s.inputs), tuple(s.outputs), tuple(s.frees),
                         HOST_VALUES if host_values else expected))
        return cls(tuple(feeds), tuple(plan), tuple(output_names), constants,
                   frozenset(fresh))

    def run(self, feeds, names) -> list | None:
        """The arrays of ``names`` (None: every output), in that order, or None when this run
        is not the common case (the caller then takes the general path, which also reports
        what is wrong with the feeds)."""
        if type(feeds) is not dict or len(feeds) != len(self.feeds) or current() is not None:
            return None
        if names is None:
            names = self.output_names
        elif type(names) is not list and type(names) is not tuple or \
                not self.known_outputs.issuperset(names):
            return None  # an iterator is read once, by the general path
        env = {}
        dims = []  # every feed's dims, end to end (self.symbols' getters read them)
        for name, dtype, static, rank, fixed, sizes in self.feeds:
            a = feeds.get(name)
            if type(a) is not ndarray or a.dtype is not dtype and a.dtype != dtype or \
                    not a.flags.c_contiguous:
                return None
            got = a.shape
            if static is not None:
                if got != static:
                    return None
            elif len(got) != rank or fixed is not None and fixed(got) != sizes:
                return None
            env[name] = a
            dims += got
        for sym in self.symbols:
            sizes = sym(dims)
            if sizes.count(sizes[0]) != len(sizes):
                return None
        for name in self.constant_outputs:  # as the general path: constant outputs are copies
            if name not in env:
                env[name] = self.constants[name].copy()
        for step, run, ins, outs, frees, expected in self.steps:
            try:
                results = run(list(map(env.__getitem__, ins)))
            except NnplugError:
                raise
            except Exception as e:  # as the general path words it
                raise step_failed(step, e) from e
            if expected is FRESH:
                pass
            elif len(results) != len(outs):
                raise _unexpected(outs)
            elif expected is None:  # a dynamic step: run_arrays checked the shapes it made
                for r in results:  # a loop, not any(): a generator costs Python calls
                    if type(r) is not ndarray:
                        raise _unexpected(outs)
            elif expected is HOST_VALUES:
                pass
            else:
                for name, r, (shape, dtype) in zip(outs, results, expected):
                    if type(r) is not ndarray or r.shape != shape or r.dtype != dtype:
                        raise _unexpected([name])
            env.update(zip(outs, results))
            for name in frees:
                env.pop(name, None)
        if self.all_fresh:
            return list(map(env.__getitem__, names))
        out = []
        fresh = self.fresh
        fed = None  # the feeds, found when some output is to be compared with them
        for n in names:
            v = env[n]
            if n in fresh:
                out.append(v)
                continue
            if type(v) is not ndarray:  # a host value (ZipMap's maps): the caller's form
                out.append(v.numpy())
                continue
            if fed is None:
                fed = tuple(feeds[f[0]] for f in self.feeds)
                fed_ids = {id(f) for f in fed}
            if v.base is None:  # an input passed through: outputs never alias a caller's array
                if id(v) in fed_ids:
                    v = v.copy()
            else:
                for f in fed:
                    if np.may_share_memory(v, f):
                        v = v.copy()
                        break
            out.append(v)
        return out


def _feed_check(name, shape, dtype, info):
    """(name, dtype, static shape or None, rank, getter of the fixed dims or None, their
    sizes) of a feed declared ``shape`` (``info`` None: static)."""
    if info is None:
        return name, dtype, shape, len(shape), None, None
    fixed = [i for i, d in enumerate(shape) if type(d) is int]
    getter = itemgetter(*fixed, *fixed[:1]) if fixed else None  # always a tuple: 2+ items
    return (name, dtype, None, len(shape), getter,
            getter(shape) if getter is not None else None)


def _unexpected(names):
    from .errors import BackendError

    return BackendError(f"value(s) {', '.join(map(repr, names))}: a step's run_arrays returned "
                        f"another count, shape or dtype than the model's; the backend breaks the "
                        f"run_arrays contract (report it to its authors)")


__all__ = ["HostPath"]

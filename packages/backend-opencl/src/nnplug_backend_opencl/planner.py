"""From a rewritten node list and concrete input shapes to an execution plan.

Lowering (``ops/``) turns each node into device steps that name values symbolically;
the planner then gives every value a storage:

- ``input``: a buffer handed to ``run`` (never written),
- ``const``: a module buffer made once (weights, repacked weights, index tables),
- ``output``: a fresh buffer per call (the caller owns what ``run`` returns),
- ``slot``: a reusable scratch buffer of the execution context, shared by values whose
  lifetimes do not overlap (the queue is in order, so reuse after the last use is safe).

Reshape-like ops alias their input: the two names share one storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnplug.errors import BackendError


class Ref:
    """A kernel argument that is the buffer of value ``name``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


@dataclass
class Launch:
    program: tuple[str, str]
    """(kernel file, build options)."""
    kernel: str
    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    args: list
    node: str


@dataclass
class Fill:
    value: str
    pattern: np.ndarray
    nbytes: int
    node: str


@dataclass
class Copy:
    src: str
    dst: str
    nbytes: int
    node: str


@dataclass
class Value:
    shape: tuple[int, ...]
    dtype: np.dtype
    root: str
    """The value whose storage this one uses (itself unless it is an alias)."""

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class Plan:
    """Steps with every buffer argument resolved to an index into the per-call buffer list
    ``[inputs..., outputs..., consts..., slots...]``."""

    steps: list
    n_inputs: int
    output_sizes: list[int]
    output_specs: list[tuple[tuple[int, ...], np.dtype]]
    const_keys: list
    slot_sizes: list[int]
    programs: set = field(default_factory=set)
    consts: list = field(default_factory=list)
    """The const buffers, filled in by the module."""


class Planner:
    def __init__(self, module, input_shapes: dict[str, tuple[int, ...]],
                 host_values: dict[str, np.ndarray]):
        self.module = module
        self.target = module.target
        self.host_values = host_values
        self.values: dict[str, Value] = {}
        self.kind: dict[str, tuple] = {}  # root -> ("input", i) | ("const", key)
        self.steps: list = []
        self._node = ""
        self._n = 0
        for i, name in enumerate(module.inputs):
            self.values[name] = Value(tuple(input_shapes[name]), module.input_dtypes[i], name)
            self.kind[name] = ("input", i)

    # --- what lowering uses ------------------------------------------------------------
    @property
    def wg(self) -> int:
        return self.target.attrs["work_group_size"]

    def shape(self, name: str) -> tuple[int, ...]:
        self._ensure(name)
        return self.values[name].shape

    def dtype(self, name: str) -> np.dtype:
        self._ensure(name)
        return self.values[name].dtype

    def is_const(self, name: str) -> bool:
        return name in self.module.constants

    def const_array(self, name: str) -> np.ndarray:
        return self.module.constants[name]

    def host(self, name: str) -> np.ndarray:
        """The value of a small input the host must see (a shape, axes, a clip bound)."""
        if name in self.module.constants:
            return self.module.constants[name]
        if name in self.host_values:
            return self.host_values[name]
        raise BackendError(
            f"opencl: node {self._node!r} needs the value of {name!r} on the host, but it is "
            f"computed inside the same partition; make it a constant or an input of the model"
        )

    def define(self, name: str, shape, dtype) -> str:
        shape = tuple(int(d) for d in shape)
        self._check_size(name, shape, np.dtype(dtype))
        self.values[name] = Value(shape, np.dtype(dtype), name)
        return name

    def _check_size(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """A value's shape must be one a buffer can hold: no negative dim, and no more bytes
        than the device's global memory (a ConstantOfShape of [2**62, 4] asks for more than
        any address space)."""
        what = "a scratch buffer" if name.startswith("\0") else repr(name)
        if any(d < 0 for d in shape):
            raise ValueError(f"{what} would have shape {list(shape)}, with a negative dim")
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d  # Python ints: no overflow
        limit = self.target.attrs.get("global_memory") or 0
        if limit and nbytes > limit:
            raise ValueError(
                f"{what} of shape {list(shape)} ({dtype}) needs {nbytes:,} bytes, more than "
                f"the device's {limit:,} bytes of global memory")

    def alias(self, name: str, src: str, shape) -> str:
        v = self.values[src] if src in self.values else self._ensure(src)
        shape = tuple(int(d) for d in shape)
        if int(np.prod(shape, dtype=np.int64)) * v.dtype.itemsize != v.nbytes:
            raise BackendError(f"opencl: node {self._node!r}: {shape} does not fit {src!r} {v.shape}")
        self.values[name] = Value(shape, v.dtype, v.root)
        return name

    def temp(self, shape, dtype=np.float32) -> str:
        self._n += 1
        return self.define(f"\0tmp{self._n}", shape, dtype)

    def derived_const(self, key, make) -> str:
        """A module-level constant buffer computed once by ``make()`` (e.g. repacked weights)."""
        name = f"\0const{key!r}"
        if name not in self.values:
            arr = self.module.derived_constant(key, make)
            self.values[name] = Value(arr.shape, arr.dtype, name)
            self.kind[name] = ("const", key)
        return name

    def meta(self, ints) -> str:
        arr = np.ascontiguousarray(np.asarray(ints, dtype=np.int32).reshape(-1))
        if arr.size == 0:
            arr = np.zeros(1, np.int32)
        return self.derived_const(("meta", arr.tobytes()), lambda: arr)

    def launch(self, program: str, kernel: str, gsize, args, lsize=None, options: str = ""):
        gsize = tuple(int(g) for g in gsize)
        if any(g == 0 for g in gsize):
            return  # nothing to compute (an empty tensor)
        if lsize is None:
            lsize = (min(self.wg, _pow2_at_least(gsize[0])),) + (1,) * (len(gsize) - 1)
        # OpenCL 1.2 wants the global size to be a multiple of the work-group size
        gsize = tuple((g + w - 1) // w * w for g, w in zip(gsize, lsize))
        for a in args:
            if isinstance(a, str):
                self._ensure(a)
        conv = [Ref(a) if isinstance(a, str) else a for a in args]
        self.steps.append(Launch((program, options), kernel, gsize, lsize, conv, self._node))

    def fill(self, name: str, pattern: np.ndarray):
        nbytes = self.values[name].nbytes
        if nbytes:
            self.steps.append(Fill(name, np.asarray(pattern).reshape(1), nbytes, self._node))

    def copy(self, src: str, dst: str):
        nbytes = self.values[dst].nbytes
        if nbytes:
            self.steps.append(Copy(src, dst, nbytes, self._node))

    def _ensure(self, name: str) -> Value:
        if name not in self.values:
            if name not in self.module.constants:
                raise BackendError(f"opencl: node {self._node!r} reads {name!r}, which nothing defines")
            arr = self.module.constants[name]
            self.values[name] = Value(arr.shape, arr.dtype, name)
            self.kind[name] = ("const", ("const", name))
        return self.values[name]

    # --- planning ----------------------------------------------------------------------
    def lower(self, nodes, lowerings) -> None:
        for node in nodes:
            self._node = node.name
            try:
                lowerings[node.op_type](node, self)
            except BackendError:
                raise
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise BackendError(f"opencl: cannot plan {node.describe()}: {e}") from None

    def finish(self, outputs: list[str]) -> Plan:
        # Outputs get per-call buffers; one that aliases an input, a constant or another
        # output gets a copy so each returned buffer belongs to the caller alone.
        out_kind: dict[str, int] = {}
        out_names = []
        for j, name in enumerate(outputs):
            v = self._ensure(name)
            if v.root in self.kind or v.root in out_kind:
                self._node = f"output {name}"
                dst = self.define(f"\0out{j}", v.shape, v.dtype)
                self.copy(name, dst)
                name, v = dst, self.values[dst]
            out_kind[v.root] = j
            out_names.append(name)

        consts = []
        const_index = {}
        for root, k in self.kind.items():
            if k[0] == "const":
                const_index[root] = len(consts)
                consts.append(k[1])

        # liveness of the remaining (slot) roots, in step order
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for name in _step_values(step):
                root = self.values[name].root
                if root in self.kind or root in out_kind:
                    continue
                first.setdefault(root, i)
                last[root] = i
        starts: dict[int, list[str]] = {}
        ends: dict[int, list[str]] = {}
        for r, i in first.items():
            starts.setdefault(i, []).append(r)
        for r, i in last.items():
            ends.setdefault(i, []).append(r)
        slot_sizes: list[int] = []
        free: list[int] = []
        slot_of: dict[str, int] = {}
        for i in range(len(self.steps)):
            for r in starts.get(i, []):
                need = max(self.values[r].nbytes, 1)
                fits = [s for s in free if slot_sizes[s] >= need]
                if fits:
                    s = min(fits, key=lambda s: slot_sizes[s])
                elif free:  # grow the largest free slot rather than adding one
                    s = max(free, key=lambda s: slot_sizes[s])
                    slot_sizes[s] = need
                else:
                    s = len(slot_sizes)
                    slot_sizes.append(need)
                if s in free:
                    free.remove(s)
                slot_of[r] = s
            for r in ends.get(i, []):
                free.append(slot_of[r])

        n_in = len(self.module.inputs)
        n_out = len(outputs)

        def index(name: str) -> int:
            root = self.values[name].root
            k = self.kind.get(root)
            if k is not None and k[0] == "input":
                return k[1]
            if root in out_kind:
                return n_in + out_kind[root]
            if root in const_index:
                return n_in + n_out + const_index[root]
            return n_in + n_out + len(consts) + slot_of[root]

        steps = []
        programs = set()
        for step in self.steps:
            if isinstance(step, Launch):
                args = [(True, index(a.name)) if isinstance(a, Ref) else (False, a)
                        for a in step.args]
                steps.append(("launch", step.program, step.kernel, step.gsize, step.lsize, args,
                              step.node))
                programs.add(step.program)
            elif isinstance(step, Fill):
                steps.append(("fill", index(step.value), step.pattern, step.nbytes, step.node))
            else:
                steps.append(("copy", index(step.src), index(step.dst), step.nbytes, step.node))
        specs = [(self.values[n].shape, self.values[n].dtype) for n in out_names]
        return Plan(steps, n_in, [max(self.values[n].nbytes, 1) for n in out_names], specs,
                    consts, slot_sizes, programs)


def _step_values(step):
    if isinstance(step, Launch):
        return [a.name for a in step.args if isinstance(a, Ref)]
    if isinstance(step, Fill):
        return [step.value]
    return [step.src, step.dst]


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p

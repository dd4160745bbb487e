"""Building and running a partition on a native backend.

Nodes are grouped with the backend's ``fuse`` query and become kernels. When every shape is
known at load time the partition is planned once: intermediate values get byte offsets in one
arena, each kernel call becomes an ``nnp_step``, and a run is a single ``run_steps`` call
with fresh slot pointers (arena, inputs, outputs). Otherwise kernels run one by one, with
output shapes asked from the backend at run time.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import logging
import threading
import time
import weakref
from types import SimpleNamespace

import numpy as np

from ..backend import Module
from ..device import CPU, Device
from ..device_api import workspace_data
from ..errors import BackendError, InputError
from ..graph import SubGraph
from ..runcontext import current, output_buffer
from ..shapecheck import bind_symbols, mismatch
from ..tensor import Tensor, as_contiguous
from . import abi, string_tensors
from .buffer import NativeBuffer, addressof, cdev, fill_tensor
from .buffer import from_buffer as _from_buffer
from .data_shaped import shape_follows_input_shapes
from .descs import DescBuilder
from .dynamic_steps import DynamicSteps, usable
from .profile_hook import NodeEvents, record_kernel

MAX_FUSE = 64
"""The run of nodes first offered to ``fuse``; doubled while the backend takes all of it."""
ALIGN = 64
log = logging.getLogger("nnplug")

MAX_FIXED_PLANS = 8
"""Static plans a dynamic partition keeps, one per input shape met (a model served at a few
batch sizes); other shapes run through run_dynamic."""


class Kernel:
    __slots__ = ("ptr", "nodes", "inputs", "outputs", "label")

    def __init__(self, nodes):
        self.nodes = nodes
        self.ptr = None
        produced, ins = set(), []
        for node in nodes:
            ins += [v for v in node.inputs if not (v and v in produced)]
            produced.update(o for o in node.outputs if o)
        self.inputs = ins
        self.outputs = list(nodes[-1].outputs)
        first = nodes[0]
        self.label = f"node {first.name!r} (op {first.op_type})"
        if len(nodes) > 1:
            self.label += " fused with " + ", ".join(f"{n.name!r} ({n.op_type})" for n in nodes[1:])


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def plan_arena(items):
    """items: (key, nbytes, first_step, last_step) -> ({key: offset}, total bytes).

    Greedy by size: each value takes the lowest offset clear of every placed value whose
    lifetime overlaps its own (outputs never alias inputs, so lifetimes are inclusive)."""
    placed, offsets = [], {}
    for key, size, first, last in sorted(items, key=lambda it: (-it[1], it[2])):
        size = _align(max(size, 1))
        busy = sorted((o, o + s) for (o, s, f, la) in placed if not (la < first or last < f))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, size, first, last))
        offsets[key] = offset
    total = max((o + s for o, s, _, _ in placed), default=0)
    return offsets, total


class _State:
    """What a module owns; closed once (explicitly or when the module is collected)."""

    def __init__(self, lib, key):
        self.lib = lib
        self.key = key
        self.kernels: list[Kernel] = []
        self.buffers: list[NativeBuffer] = []
        # the constants the kernels were created with, kept until they are destroyed: the
        # host's promise to backends (abi.HOST_KEEPS_CONSTANTS), which may keep the pointers
        self.constants: dict = {}
        self.closed = False

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            for k in self.kernels:
                if k.ptr:
                    self.lib.table.kernel_destroy(k.ptr)
                    k.ptr = None
            for b in self.buffers:
                b.free()
        finally:
            self.constants = {}
            self.lib.drop()


def build_module(backend, subgraph: SubGraph, dev: Device, target=None) -> Module:
    lib = backend.library
    lib.hold()
    state = _State(lib, backend._key)
    try:
        runner = _build(lib, state, subgraph, dev, target)
    except BaseException:
        state.close()
        raise
    functions = {"run": runner.run, "kernels": lambda: [k.label for k in state.kernels],
                 "is_static": lambda: isinstance(runner, StaticRunner)}
    if isinstance(runner, StaticRunner) and runner.arrays_ok(subgraph.values or {}) or \
            isinstance(runner, DynamicRunner) and runner.native is not None:
        functions["run_arrays"] = runner.run_arrays
    module = Module(functions, close=state.close)
    # the core's own promise (Step.fresh_arrays), not a function a plugin's module offers
    module.fresh_arrays = "run_arrays" in functions and runner.fresh_arrays()
    weakref.finalize(module, state.close)
    return module


def _build(lib, state, subgraph, dev, target=None):
    values = subgraph.values or {}
    consts = {k: as_contiguous(v) for k, v in (subgraph.constants or {}).items()
              if k not in subgraph.inputs}
    nodes = list(subgraph.nodes)
    if not nodes:
        raise BackendError(f"backend {lib.id!r}: asked to build an empty subgraph")
    state.constants = consts  # the descriptors point into these arrays (not at copies)
    builder = DescBuilder(values, consts)
    groups = _group(lib, builder, nodes, subgraph.outputs)
    for group in groups:
        k = Kernel(group)
        descs = builder.nodes(group)  # the builder owns the memory the descriptors point to
        out = C.c_void_p()
        if lib.table.kernel_create_for_target:  # ABI 1.2: the kernel sees the Target
            rc = lib.table.kernel_create_for_target(descs, len(group), cdev(dev),
                                                    str(target).encode() if target else None,
                                                    C.byref(out))
        else:
            rc = lib.table.kernel_create(descs, len(group), cdev(dev), C.byref(out))
        if rc != 0:
            raise lib.error(rc, f"creating the kernel of {k.label}")
        if not out.value:
            raise BackendError(f"backend {lib.id!r}: kernel_create for {k.label} gave NULL")
        k.ptr = out.value
        state.kernels.append(k)
    spec = _Specs(values, consts)
    strings = any(string_tensors.is_string(spec.dtype(v)) for k in state.kernels
                  for v in k.inputs + k.outputs if v)
    if not strings and all(spec.static(v) for k in state.kernels for v in k.inputs + k.outputs) and \
            all(spec.static(v) for v in list(subgraph.inputs) + list(subgraph.outputs)):
        return StaticRunner(lib, state, subgraph, dev, spec, consts)
    return DynamicRunner(lib, state, subgraph, dev, spec, consts)


def _group(lib, builder, nodes, graph_outputs):
    """Consecutive runs of ``nodes``, each a kernel: what the backend's ``fuse`` takes from
    each node on, cut back so that no value made inside a run is needed after it (a kernel's
    outputs are its last node's). The run offered starts at MAX_FUSE nodes and doubles while
    the backend takes all of it, so a backend that plans whole partitions (oneDNN's) gets
    them whole, and one that takes a few nodes costs no more than before."""
    INF = len(nodes) + 1
    last_reader: dict[str, int] = {}
    for j, n in enumerate(nodes):
        for v in n.inputs:
            if v:
                last_reader[v] = j
    # per node: the last node reading one of its outputs (INF: a graph output)
    last_use = [max((INF if o in graph_outputs else last_reader.get(o, -1) for o in n.outputs if o),
                    default=-1) for n in nodes]
    def cuts(i, take):
        """The longest run [i, i + t), t <= take, whose nodes but the last are read only
        inside it; and the shortest such run longer than take (None: there is none)."""
        worst, best = -1, 1
        for t in range(2, len(nodes) - i + 1):
            worst = max(worst, last_use[i + t - 2])
            if worst >= INF:
                return best, None
            if worst < i + t:
                if t > take:
                    return best, t
                best = t
        return best, None

    groups, i, fuse = [], 0, lib.table.fuse
    while i < len(nodes):
        take = 1
        if fuse and i + 1 < len(nodes):
            size = MAX_FUSE
            while True:
                run = nodes[i:i + size]
                out = C.c_int32(1)
                rc = fuse(builder.nodes(run), len(run), C.byref(out))
                if rc != 0:
                    raise lib.error(rc, f"fuse() from node {nodes[i].name!r}")
                take = out.value
                if not 1 <= take <= len(run):
                    raise BackendError(
                        f"backend {lib.id!r}: fuse() took {take} of {len(run)} nodes from "
                        f"node {nodes[i].name!r}; it must be between 1 and {len(run)}"
                    )
                best, longer = cuts(i, take)
                # the backend took all it was offered: offer more when a longer run could
                # be a kernel (what is made inside it read only inside it)
                if take < len(run) or longer is None:
                    break
                size = max(2 * size, longer)
            take = best
        groups.append(nodes[i:i + take])
        i += take
    return groups


class _Specs:
    """Static shape / dtype of values, from the graph's value infos and the constants."""

    def __init__(self, values, consts):
        self.values = values
        self.consts = consts

    def dtype(self, name):
        if name in self.consts:
            return self.consts[name].dtype
        info = self.values.get(name)
        return None if info is None or info.dtype is None else np.dtype(info.dtype)

    def shape(self, name):
        """A tuple of ints, or None when not fully known."""
        if name in self.consts:
            return self.consts[name].shape
        info = self.values.get(name)
        if info is None or info.shape is None:
            return None
        if all(isinstance(d, int) and d >= 0 for d in info.shape):
            return tuple(info.shape)
        return None

    def static(self, name) -> bool:
        return not name or (self.shape(name) is not None and self.dtype(name) is not None)


class _BoundSpecs(_Specs):
    """_Specs of a dynamic partition with its symbolic dims bound to one run's sizes."""

    def __init__(self, spec: _Specs, sizes: dict[str, int], seen: dict[str, tuple]):
        super().__init__(spec.values, spec.consts)
        self.sizes = sizes
        self.seen = seen  # the run's shapes of the inputs and of outputs no symbol sizes

    def shape(self, name):
        if name in self.consts:
            return self.consts[name].shape
        if name in self.seen:
            return self.seen[name]
        info = self.values.get(name)
        if info is None or info.shape is None:
            return None
        shape = tuple(self.sizes.get(d) if isinstance(d, str) else d for d in info.shape)
        return shape if all(isinstance(d, int) and d >= 0 for d in shape) else None


def _array_of(tensor, name) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    if isinstance(tensor, Tensor):
        return tensor.numpy()
    raise InputError(f"input {name!r}: expected an nnplug Tensor, got {type(tensor).__name__}")


def _check_input(name, shape, dtype, want_shape, want_dtype):
    if want_dtype is not None and np.dtype(dtype) != want_dtype:
        raise InputError(f"input {name!r} has dtype {np.dtype(dtype)}, the model needs {want_dtype}")
    if want_shape is not None and tuple(shape) != tuple(want_shape):
        raise InputError(f"input {name!r} has shape {tuple(shape)}, the model needs {want_shape}")


class _Runner:
    def __init__(self, lib, state, subgraph, dev, spec, consts):
        self.lib = lib
        self.state = state
        self.dev = dev
        self.spec = spec
        self.consts = consts
        self.inputs = list(subgraph.inputs)
        self.outputs = list(subgraph.outputs)
        self.host = lib.host_visible and dev.device_type == CPU.device_type
        self.api = lib.device_api
        t = lib.table
        self.own_consts = bool(lib.flags & abi.KERNELS_OWN_CONSTANTS)
        self.kernel_run = t.kernel_run
        self.ws_size_fn = t.kernel_workspace_size
        self.stream_sync = t.stream_sync
        self.const_ptr = {}  # name -> address (host) or device handle, valid for the module
        self._packed = []  # string constants as nnp_string arrays
        for name, arr in consts.items():
            if self.own_consts or not any(name in k.inputs for k in state.kernels):
                continue
            if self.host and string_tensors.is_string(arr.dtype):
                self._packed.append(string_tensors.pack(arr, f"constant {name!r}"))
                self.const_ptr[name] = self._packed[-1].address
            elif self.host:
                self.const_ptr[name] = arr.ctypes.data if arr.nbytes else None
            elif arr.nbytes:
                buf = self.api.alloc_data_space(dev, arr.nbytes, dtype=arr.dtype)
                state.buffers.append(buf)
                self.api.copy_data_from_to(arr, 0, buf, 0, arr.nbytes, CPU, dev)
                self.const_ptr[name] = buf.ptr

    def _fail(self, rc, kernel: Kernel):
        if self.state.closed:
            return BackendError(f"backend {self.lib.id!r}: the module was closed")
        return self.lib.error(rc, f"running {kernel.label}")

    def _device_input(self, t, name):
        """(handle address, keep-alive) of a runtime input on this backend's device."""
        if isinstance(t, Tensor) and isinstance(t.handle, NativeBuffer) and \
                t.handle.lib is self.lib and t.byte_offset == 0:
            return t.handle.ptr, t
        arr = as_contiguous(_array_of(t, name))
        buf = self.api.alloc_data_space(self.dev, max(arr.nbytes, 1), dtype=arr.dtype)
        if arr.nbytes:
            self.api.copy_data_from_to(arr, 0, buf, 0, arr.nbytes, CPU, self.dev)
        return buf.ptr, buf

    def _sync(self):
        if self.stream_sync:
            rc = self.stream_sync(cdev(self.dev), None)
            if rc != 0:
                raise self.lib.error(rc, "stream_sync after a run")

    def _const_output(self, name):
        arr = self.consts[name]
        if self.host:
            return Tensor.from_numpy(arr.copy())
        return Tensor.from_numpy(arr).to(self.dev, self.api)


class StaticRunner(_Runner):
    """Shapes fixed at load: one arena, one ``run_steps`` call per run."""

    def __init__(self, lib, state, subgraph, dev, spec, consts, probe=None):
        """``probe``: arrays of a run of these shapes (every input, every output made), for a
        plan made from a dynamic partition (DynamicRunner._fix): kernels made for unknown
        shapes may want data behind every tensor when asked their workspace size."""
        super().__init__(lib, state, subgraph, dev, spec, consts)
        kernels = state.kernels
        self.in_specs = [(spec.shape(n), spec.dtype(n)) for n in self.inputs]
        slot = {}  # value name -> slot index
        for i, n in enumerate(self.inputs):
            slot.setdefault(n, 1 + i)
        produced = {o for k in kernels for o in k.outputs if o}
        out_slots, self.out_specs = [], []
        for n in dict.fromkeys(self.outputs):
            if n in produced and n not in slot:
                slot[n] = 1 + len(self.inputs) + len(out_slots)
                out_slots.append(n)
                self.out_specs.append((spec.shape(n), spec.dtype(n)))
        self.out_slot_names = out_slots
        self.num_slots = 1 + len(self.inputs) + len(out_slots)
        # arena: every produced value without a slot
        first, last = {}, {}
        for s, k in enumerate(kernels):
            for v in k.inputs:
                if v in first:
                    last[v] = s
            for o in k.outputs:
                if o and o not in slot:
                    first.setdefault(o, s)
                    last[o] = s
        offsets, total = plan_arena(
            [(v, _nbytes(spec.shape(v), spec.dtype(v)), first[v], last[v]) for v in first])
        # tensors of each step
        self._keep = []
        steps = (abi.Step * len(kernels))()
        ws = 0
        if probe is not None:  # where the slots point while workspace sizes are asked
            scratch = np.empty(max(total, 1) + ALIGN, np.uint8)
            base = scratch.ctypes.data + (-scratch.ctypes.data) % ALIGN
            held = [string_tensors.output_items(spec.shape(n)) if string_tensors.is_string(
                spec.dtype(n)) else probe[n] for n in out_slots]  # string outputs: elements
            at = [base] + [probe[n].ctypes.data for n in self.inputs] + \
                [a.ctypes.data for a in held]
        for s, k in enumerate(kernels):
            step = steps[s]
            step.kernel = k.ptr
            for which, names in (("inputs", k.inputs), ("outputs", k.outputs)):
                ts = (abi.Tensor * max(len(names), 1))()
                sl = (C.c_int32 * max(len(names), 1))()
                self._keep += [ts, sl]
                for i, v in enumerate(names):
                    sl[i] = -1
                    if not v:
                        continue
                    fill_tensor(ts[i], dev, spec.shape(v), spec.dtype(v), self._keep)
                    if v in slot:
                        sl[i] = slot[v]
                    elif v in offsets:
                        sl[i] = 0
                        ts[i].byte_offset = offsets[v]
                    else:  # a constant
                        ts[i].data = self.const_ptr.get(v)
                        if self.host:
                            ts[i].device = cdev(CPU)
                setattr(step, "num_" + which, len(names))
                setattr(step, which, ts)
                setattr(step, which[:-1] + "_slots", sl)
            if self.ws_size_fn:
                need = C.c_uint64(0)
                pointed = []
                if probe is not None:
                    for ts, sl, count in ((step.inputs, step.input_slots, step.num_inputs),
                                          (step.outputs, step.output_slots, step.num_outputs)):
                        for i in range(count):
                            if sl[i] >= 0:
                                ts[i].data = at[sl[i]]
                                pointed.append(ts[i])
                rc = self.ws_size_fn(k.ptr, step.inputs, step.num_inputs, step.outputs,
                                     step.num_outputs, C.byref(need))
                for t in pointed:  # run_steps finds them through the slots again
                    t.data = None
                if rc != 0:
                    raise lib.error(rc, f"kernel_workspace_size of {k.label}")
                ws = max(ws, need.value)
        self.steps = steps
        self.ws_nbytes = ws
        self.ws_offset = _align(total)
        self.arena_nbytes = self.ws_offset + (_align(ws) if ws else 0)
        self._free_arenas: list = []
        self._free_runs: list = []  # run_arrays' per-run state, one per concurrent run
        self.run_steps = lib.table.run_steps
        self._run_steps_raw = abi.unprototyped(self.run_steps) if self.run_steps else None
        self._ws_nbytes = C.c_uint64(ws)
        # where each result comes from, found once: (0, output slot) / (1, input) / (2, const)
        at = {n: j for j, n in enumerate(self.out_slot_names)}
        self._picks = [(0, at[n]) if n in at else
                       (1, self.inputs.index(n)) if n in self.inputs else (2, n)
                       for n in self.outputs]
        self._out_allocs = [(shape, dtype, None if string_tensors.is_string(dtype) else
                             _nbytes(shape, dtype)) for shape, dtype in self.out_specs]
        self._string_outs = [(j, n) for j, (n, (_, _, nbytes)) in
                             enumerate(zip(out_slots, self._out_allocs)) if nbytes is None]
        """Output slots of strings (only in a plan DynamicRunner fixed, run by run_arrays):
        the backend points zeroed nnp_string elements at its bytes, read back after the run."""
        self._outs_in_order = self._picks == [(0, j) for j in range(len(self.out_slot_names))]
        self._first_out_slot = 1 + len(self.inputs)

    # -- host arrays in, host arrays out: the fixed cost of a run kept low ------------------
    def fresh_arrays(self) -> bool:
        """Whether run_arrays returns only arrays it allocated for this run, in the model's
        shapes and dtypes (arrays_ok checked them): every output is an output slot, in order."""
        return self._outs_in_order

    def arrays_ok(self, values) -> bool:
        """Whether :meth:`run_arrays` may stand in for :meth:`run`: host memory, one native
        call, and every result's shape and dtype the model's (what the executor would check)."""
        if not (self.host and self.run_steps):
            return False
        specs = [self.out_specs[k] if kind == 0 else self.in_specs[k] if kind == 1 else
                 (self.consts[k].shape, self.consts[k].dtype) for kind, k in self._picks]
        for name, (shape, dtype) in zip(self.outputs, specs):
            v = values.get(name)
            if v is None or v.kind != "tensor" or not v.is_static or v.dtype != dtype or \
                    tuple(v.shape) != tuple(shape):
                return False
        return True

    def run_arrays(self, arrays):
        """:meth:`run` on numpy arrays, for a caller that checked each is C-contiguous with the
        shape and dtype of :attr:`in_specs` and runs with no run context (no profiler, no
        terminate flag, no bound outputs). Results are fresh arrays, except an input passed
        through (the same object) and a constant (a copy)."""
        if self.state.closed:
            raise BackendError(f"backend {self.lib.id!r}: the module was closed")
        try:
            run = self._free_runs.pop()
        except IndexError:
            run = self._new_run()
        slots, failed, args = run[1:]
        try:
            for j, a in enumerate(arrays, 1):
                try:
                    slots[j] = addressof(_from_buffer(a))
                except (TypeError, ValueError, BufferError):  # read-only, empty, or a
                    slots[j] = a.ctypes.data  # dtype the buffer protocol lacks (bfloat16)
            outs = []
            j = self._first_out_slot
            for shape, dtype, nbytes in self._out_allocs:
                if nbytes is None:  # a string output: the elements the backend fills
                    o = string_tensors.output_items(shape)
                else:
                    o = np_empty(shape, dtype)
                try:
                    slots[j] = addressof(_from_buffer(o))
                except (TypeError, ValueError, BufferError):  # empty, or a dtype the buffer
                    slots[j] = o.ctypes.data  # protocol lacks (bfloat16, float8)
                outs.append(o)
                j += 1
            failed.value = -1
            rc = self._run_steps_raw(*args)
            if self._string_outs:  # read back and released, also after a failed run
                texts = string_tensors.unpack_outputs(
                    [(n, outs[j], self._out_allocs[j][0]) for j, n in self._string_outs],
                    self.lib.table.release_strings, f"backend {self.lib.id!r}", rc_ok=rc == 0)
                for j, n in self._string_outs:
                    outs[j] = texts.get(n)
            if rc != 0:
                kernels = self.state.kernels
                idx = failed.value if 0 <= failed.value < len(kernels) else 0
                raise self._fail(rc, kernels[idx])
        finally:
            self._free_runs.append(run)
        if self._outs_in_order:
            return outs
        return [outs[k] if kind == 0 else arrays[k] if kind == 1 else self.consts[k].copy()
                for kind, k in self._picks]

    def _new_run(self):
        """What one run of :meth:`run_arrays` needs besides its arrays: (arena, slots with the
        arena's address set, failed-step index, the arguments of ``run_steps``)."""
        raw, ptr = self._host_arena()
        slots = (C.c_void_p * self.num_slots)()
        slots[0] = ptr
        failed = C.c_int32(-1)
        ws = C.c_void_p(ptr + self.ws_offset) if self.ws_nbytes else None
        return (raw, slots, failed, (self.steps, len(self.state.kernels), slots, self.num_slots,
                                     ws, self._ws_nbytes, None, C.byref(failed)))

    # -- arenas (host path): reused across runs, one per concurrent run ---------------------
    def _host_arena(self):
        try:
            return self._free_arenas.pop()
        except IndexError:
            raw = np.empty(self.arena_nbytes + ALIGN, np.uint8)
            ptr = raw.ctypes.data
            return raw, ptr + (-ptr) % ALIGN

    def run(self, inputs):
        if len(inputs) != len(self.inputs):
            raise InputError(f"expected {len(self.inputs)} input(s), got {len(inputs)}")
        slots = (C.c_void_p * self.num_slots)()
        keep = []
        host = self.host
        for i, (t, (shape, dtype)) in enumerate(zip(inputs, self.in_specs)):
            name = self.inputs[i]
            if host:
                arr = as_contiguous(_array_of(t, name))
                if arr.shape != shape or arr.dtype != dtype:
                    _check_input(name, arr.shape, arr.dtype, shape, dtype)
                keep.append(arr)
                slots[1 + i] = arr.ctypes.data
            else:
                _check_input(name, t.shape, t.dtype, shape, dtype)
                ptr, obj = self._device_input(t, name)
                keep.append(obj)
                slots[1 + i] = ptr
        base = 1 + len(self.inputs)
        outs = []
        for j, (shape, dtype) in enumerate(self.out_specs):
            if host:  # an IO-bound output array is written in place
                o = output_buffer(self.out_slot_names[j], shape, dtype)
                o = np.empty(shape, dtype) if o is None else o
                slots[base + j] = o.ctypes.data
            else:
                o = self.api.alloc_data_space(self.dev, max(_nbytes(shape, dtype), 1), dtype=dtype)
                slots[base + j] = o.ptr
            outs.append(o)
        arena = ws_handle = None
        if host:
            arena = self._host_arena()
            slots[0] = arena[1]
            ws = arena[1] + self.ws_offset if self.ws_nbytes else None
        else:
            if self.ws_offset:
                arena = self.api.alloc_workspace(self.dev, self.ws_offset)
                slots[0] = workspace_data(arena).ptr
            ws = None
            if self.ws_nbytes:
                ws_handle = self.api.alloc_workspace(self.dev, self.ws_nbytes)
                ws = workspace_data(ws_handle).ptr
        try:
            failed = self._execute(slots, ws)
            if failed is not None:
                raise self._fail(*failed)
            if not host:
                self._sync()
        finally:
            if host:
                self._free_arenas.append(arena)
            else:
                if arena is not None:
                    self.api.free_workspace(self.dev, arena)
                if ws_handle is not None:
                    self.api.free_workspace(self.dev, ws_handle)
        return self._results(inputs, outs)

    def _execute(self, slots, ws):
        """Run every step; (status, kernel) of the failing one, or None."""
        kernels = self.state.kernels
        if self.state.closed:
            raise BackendError(f"backend {self.lib.id!r}: the module was closed")
        ctx = current()
        if ctx is not None and ctx.step_by_step:  # profiled or stoppable: kernel by kernel
            return self._execute_observed(slots, ws, ctx)
        if self.run_steps:
            failed = C.c_int32(-1)
            rc = self.run_steps(self.steps, len(kernels), slots, self.num_slots, ws,
                                self.ws_nbytes, None, C.byref(failed))
            if rc != 0:
                idx = failed.value if 0 <= failed.value < len(kernels) else 0
                return rc, kernels[idx]
            return None
        for s, k in enumerate(kernels):
            step = self.steps[s]
            ins = _resolve(step.inputs, step.input_slots, step.num_inputs, slots)
            outs = _resolve(step.outputs, step.output_slots, step.num_outputs, slots)
            rc = self.kernel_run(k.ptr, ins, step.num_inputs, outs, step.num_outputs, ws,
                                 self.ws_nbytes, None)
            if rc != 0:
                return rc, k
        return None

    def _execute_observed(self, slots, ws, ctx):
        prof = ctx.profiler
        with _node_events(self.lib, prof) as hooks:
            for s, k in enumerate(self.state.kernels):
                ctx.check(k.label)
                step = self.steps[s]
                ins = _resolve(step.inputs, step.input_slots, step.num_inputs, slots)
                outs = _resolve(step.outputs, step.output_slots, step.num_outputs, slots)
                t0 = time.perf_counter_ns()
                rc = self.kernel_run(k.ptr, ins, step.num_inputs, outs, step.num_outputs, ws,
                                     self.ws_nbytes, None)
                if rc != 0:
                    return rc, k
                if prof is not None:
                    if not self.host:
                        self._sync()  # device work is timed when it is done
                    record_kernel(prof, self.lib.id, k, t0, time.perf_counter_ns(), hooks,
                                  [self.spec.shape(v) or () for v in k.inputs if v],
                                  [self.spec.shape(v) or () for v in k.outputs if v])
        return None

    def _results(self, inputs, outs):
        result = []
        for kind, k in self._picks:
            if kind == 0:
                if self.host:
                    result.append(Tensor.from_numpy(outs[k]))
                else:
                    shape, dtype = self.out_specs[k]
                    result.append(Tensor(outs[k], shape, dtype, self.dev, self.api))
            elif kind == 1:
                result.append(inputs[k])
            else:
                result.append(self._const_output(k))
        return result


np_empty = np.empty


def _string_array(t, name) -> np.ndarray:
    """An input for a string value as a numpy object array (str and bytes arrays converted)."""
    arr = as_contiguous(_array_of(t, name))
    return arr.astype(object) if arr.dtype.kind in "US" else arr


def _node_events(lib, prof):
    """The backend's per-node profile hook, held on this thread while profiling."""
    return NodeEvents(lib) if prof is not None else contextlib.nullcontext()


def _resolve(tensors, slot_ids, n, slots):
    out = (abi.Tensor * max(n, 1))()
    for i in range(n):
        out[i] = tensors[i]
        if slot_ids[i] >= 0:
            out[i].data = slots[slot_ids[i]]
    return out


def _made_outputs(runner) -> bool:
    """Whether every output of the partition is made by one of its kernels, each named once
    (none is an input or a constant passed through)."""
    made = {o for k in runner.state.kernels for o in k.outputs if o}
    return len(set(runner.outputs)) == len(runner.outputs) and all(
        n in made and n not in runner.inputs and n not in runner.consts for n in runner.outputs)


class DynamicRunner(_Runner):
    """Some shape unknown at load: output shapes asked at run time, kernel by kernel. A backend
    with ``run_dynamic`` (ABI 1.6) runs the whole partition in one call
    (:mod:`.dynamic_steps`) unless the run is observed kernel by kernel (profiled, stoppable)."""

    def __init__(self, lib, state, subgraph, dev, spec, consts):
        super().__init__(lib, state, subgraph, dev, spec, consts)
        self.out_shapes_fn = lib.table.kernel_output_shapes
        self._keep = []  # shape arrays of the constant inputs' tensors in plans
        self.last_use = {}
        for s, k in enumerate(state.kernels):
            for v in k.inputs:
                self.last_use[v] = s
            for o in k.outputs:
                if not o:
                    continue
                if spec.dtype(o) is None:
                    raise BackendError(
                        f"backend {lib.id!r}: the dtype of value {o!r} (output of {k.label}) "
                        f"is unknown after shape inference; the model needs type information"
                    )
                if spec.shape(o) is None and not self.out_shapes_fn:
                    raise BackendError(
                        f"backend {lib.id!r} cannot run {k.label}: its output {o!r} has a shape "
                        f"unknown at load time and the backend has no kernel_output_shapes; "
                        f"give the model static shapes or use another backend"
                    )
        self._templates = {}  # dtype -> a tensor with this device and dtype (see _put)
        self.plans = [self._kernel_plan(k) for k in state.kernels]
        self.native = DynamicSteps(self) if usable(self) else None
        self._symbols = self._input_symbols()
        self._fixed: dict[tuple, StaticRunner | None] = {}  # input shapes -> their plan
        self._fixing = threading.Lock()

    # -- a static plan per input shape, where every shape follows from the inputs' ----------
    def _input_symbols(self):
        """Per input, its dims (ints, and symbols: a dim the model leaves unnamed is one of
        its own), when every value the partition's kernels read or make has a shape of ints
        and of those symbols only, its dtype known and no strings but in partition outputs
        that no kernel reads (a classifier's string labels); a partition output may
        have other dims where its kernel's ops make shapes from shapes alone (data_shaped: a
        tree ensemble's [N, 1] where the model names no N), the sizes then taken from the
        shape's first run. Else None. Then one run's input shapes give every shape, and a
        static plan (one run_steps call, arena and outputs allocated by the host, no
        callback) can stand in for run_dynamic on those shapes."""
        if not (self.host and self.lib.table.run_steps):
            return None
        dims = []
        for i, n in enumerate(self.inputs):
            info = self.spec.values.get(n)
            if n in self.consts or info is None or info.shape is None:
                return None
            dims.append(tuple(f"\0{i}.{j}" if d is None else d for j, d in enumerate(info.shape)))
        known = {d for shape in dims for d in shape if isinstance(d, str)}
        learned = set()
        # string values a static plan takes: partition outputs no kernel reads (the host
        # hands zeroed elements and reads the backend's bytes back, as run_dynamic does)
        read = {v for k in self.state.kernels for v in k.inputs if v}
        strings_out = {v for v in self.outputs if v not in read and v not in self.inputs} \
            if self.native is not None else set()
        for k in self.state.kernels:
            for v in (*k.inputs, *k.outputs):
                if not v or v in self.consts:
                    continue
                info, dtype = self.spec.values.get(v), self.spec.dtype(v)
                if info is None or dtype is None or string_tensors.is_string(dtype) and \
                        v not in strings_out:
                    return None
                if v in self.inputs or info.shape is not None and all(
                        isinstance(d, int) or d in known for d in info.shape):
                    continue
                if v in k.outputs and not all(shape_follows_input_shapes(n, self.consts)
                                              for n in k.nodes):
                    return None
                learned.add(v)  # sizes the first run gives
        self._learned = learned
        # a value made and read inside: that first run goes kernel by kernel, to see it
        self._learn_inside = bool(learned - set(self.outputs)) or any(
            v in learned for k in self.state.kernels for v in k.inputs)
        return dims

    def fresh_arrays(self) -> bool:
        """Whether run_arrays returns only arrays the host allocated for this run (every
        path: run_dynamic, a fixed shape's static plan, the first run kernel by kernel)."""
        return _made_outputs(self)

    def _fix(self, shapes: tuple, arrays, made: dict, seen: dict) -> None:
        """Make the static plan for these input shapes, after a run on them went through
        (the backend's reported shapes and the outputs were checked against the model then;
        ``made``: its results, ``seen``: the shapes of what it made), up to MAX_FIXED_PLANS
        per partition; None where there is none."""
        with self._fixing:
            if shapes in self._fixed or len(self._fixed) >= MAX_FIXED_PLANS:
                return
            sizes: dict[str, int] = {}
            ok = 0 not in (d for shape in shapes for d in shape)  # empty: run_dynamic's
            for want, got in zip(self._symbols, shapes):
                ok = ok and len(want) == len(got)
                for w, g in zip(want, got):
                    ok = ok and (sizes.setdefault(w, g) == g if isinstance(w, str) else w == g)
            seen = {v: seen[v] for v in self._learned if v in seen}
            plan = None
            probe = {**dict(zip(self.inputs, arrays)), **made}
            if ok and len(seen) == len(self._learned) and \
                    all(n in probe for n in self.outputs if n not in self.consts):
                seen.update(zip(self.inputs, shapes))  # unnamed dims of inputs too
                try:
                    plan = StaticRunner(
                        self.lib, self.state,
                        SimpleNamespace(inputs=self.inputs, outputs=self.outputs), self.dev,
                        _BoundSpecs(self.spec, sizes, seen), self.consts, probe=probe)
                except BackendError as e:  # the shape keeps its run_dynamic
                    log.debug("no static plan for shapes %s: %s", shapes, e)
            self._fixed[shapes] = plan

    def _kernel_plan(self, k):
        """What a run of kernel k takes from the load, worked out once: its constant inputs as
        filled tensors (index -> tensor), whether its output shapes are asked for, and per
        output (index, name, load-time shape or None, dtype, string?, value info)."""
        consts = {}
        for i, v in enumerate(k.inputs):
            if v and v in self.consts and v not in self.inputs:
                arr, t = self.consts[v], abi.Tensor()
                fill_tensor(t, self.dev, arr.shape, arr.dtype, self._keep)
                t.data = self.const_ptr.get(v)
                consts[i] = t
        outs = [(o, v, self.spec.shape(v), self.spec.dtype(v),
                 string_tensors.is_string(self.spec.dtype(v)), self.spec.values.get(v))
                for o, v in enumerate(k.outputs) if v]
        return consts, any(shape is None for _, _, shape, _, _, _ in outs), outs

    def _put(self, tensors, i, shape, dtype, ptr, keep):
        """tensors[i] = this value: fill_tensor's work, from a tensor filled once per dtype."""
        tmpl = self._templates.get(dtype)
        if tmpl is None:
            tmpl = self._templates[dtype] = abi.Tensor()
            fill_tensor(tmpl, self.dev, (), dtype, keep)
        tensors[i] = tmpl
        t = tensors[i]
        if shape:
            t.ndim = len(shape)
            arr = (C.c_int64 * len(shape))(*shape)
            keep.append(arr)
            t.shape = arr
        t.data = ptr

    def run(self, inputs):
        if len(inputs) != len(self.inputs):
            raise InputError(f"expected {len(self.inputs)} input(s), got {len(inputs)}")
        if self.state.closed:
            raise BackendError(f"backend {self.lib.id!r}: the module was closed")
        env = {}  # name -> (address, shape, dtype, keep-alive)
        symbols: dict[str, int] = {}  # symbolic dims' sizes in this run
        for name, t in zip(self.inputs, inputs):
            info = self.spec.values.get(name)
            want = None if info is None or info.shape is None else info.shape
            shape = tuple(t.shape)
            if want is not None and (len(want) != len(shape) or any(
                    isinstance(w, int) and w != d for w, d in zip(want, shape))):
                raise InputError(f"input {name!r} has shape {shape}, the model needs {tuple(want)}")
            want_dtype = self.spec.dtype(name)
            if string_tensors.is_string(want_dtype):  # str/bytes arrays are ONNX strings too
                t = _string_array(t, name)
            _check_input(name, shape, t.dtype, None, want_dtype)
            bind_symbols(info, shape, symbols)
            if self.host and string_tensors.is_string(want_dtype):
                packed = string_tensors.pack(t, f"input {name!r}")
                env[name] = (packed.address, t.shape, t.dtype, t, packed)
            elif self.host:
                arr = as_contiguous(_array_of(t, name))
                env[name] = (arr.ctypes.data, arr.shape, arr.dtype, arr)
            else:
                ptr, obj = self._device_input(t, name)
                env[name] = (ptr, shape, np.dtype(t.dtype), obj)
        ctx = current()
        if self.native is not None and (ctx is None or not ctx.step_by_step):
            return self._run_native(env)
        prof = ctx.profiler if ctx is not None else None
        with _node_events(self.lib, prof) as hooks:
            for s, k in enumerate(self.state.kernels):
                if ctx is None:
                    self._run_kernel(s, k, env, symbols)
                    continue
                ctx.check(k.label)
                shapes = [env[v][1] if v in env else self.consts[v].shape for v in k.inputs if v]
                t0 = time.perf_counter_ns()
                self._run_kernel(s, k, env, symbols)
                if prof is not None:
                    if not self.host:
                        self._sync()
                    record_kernel(prof, self.lib.id, k, t0, time.perf_counter_ns(), hooks,
                                  shapes, [env[v][1] for v in k.outputs if v and v in env])
        if not self.host:
            self._sync()
        result = []
        for n in self.outputs:
            if n in env:
                ptr, shape, dtype, obj = env[n][:4]
                if self.host:
                    result.append(obj if isinstance(obj, Tensor) else Tensor.from_numpy(obj))
                elif isinstance(obj, Tensor):
                    result.append(obj)
                else:
                    result.append(Tensor(obj, shape, dtype, self.dev, self.api))
            else:
                result.append(self._const_output(n))
        return result

    def run_arrays(self, arrays):
        """:meth:`run` on host numpy arrays through ``run_dynamic``, for a caller that checked
        them against the model (dtype, C-contiguous, shapes that fit the declared ones) and
        runs with no run context. Results are fresh arrays, except an input passed through
        (the same object) and a constant (a copy); what the partition makes is checked against
        the model (run_dynamic, and the host as it allocates each output)."""
        if self.state.closed:
            raise BackendError(f"backend {self.lib.id!r}: the module was closed")
        if self._symbols is not None:
            shapes = tuple([a.shape for a in arrays])  # a list's comprehension: one call
            fixed = self._fixed.get(shapes)
            if fixed is not None:
                return fixed.run_arrays(arrays)
        if self._symbols is not None and shapes not in self._fixed and self._learn_inside:
            return self._first_run(shapes, arrays)
        made = self.native.run(arrays)
        if self._symbols is not None and shapes not in self._fixed:
            self._fix(shapes, arrays, made, {v: a.shape for v, a in made.items()})
        return self._outputs(made, arrays)

    def _outputs(self, made: dict, arrays) -> list:
        """The partition's outputs in order: what it made, else an input or a constant passed
        through."""
        if len(made) == len(self.outputs):  # the common case: the partition made every output
            return [made[n] for n in self.outputs]
        by_name = dict(zip(self.inputs, arrays))
        return [made[n] if n in made else by_name[n] if n in by_name else self.consts[n].copy()
                for n in self.outputs]

    def _first_run(self, shapes, arrays):
        """run_arrays kernel by kernel (each kernel's shapes asked and checked as on the
        general path), for a shape whose plan needs the sizes of values made and read inside
        the partition; the plan is made from what it saw."""
        env, symbols, seen = {}, {}, {}
        for name, a in zip(self.inputs, arrays):
            bind_symbols(self.spec.values.get(name), a.shape, symbols)
            env[name] = (a.ctypes.data, a.shape, a.dtype, a)
        for s, k in enumerate(self.state.kernels):
            self._run_kernel(s, k, env, symbols)
            seen.update((v, env[v][1]) for v in k.outputs if v and v in env)
        made = {n: env[n][3] for n in self.outputs if n in env and n not in self.inputs}
        self._fix(shapes, arrays, made, seen)
        return self._outputs(made, arrays)

    def _run_native(self, env):
        made = self.native.run([env[n][3] for n in self.inputs])
        result = []
        for n in self.outputs:
            if n in made:
                result.append(Tensor.from_numpy(made[n]))
            elif n in env:
                obj = env[n][3]
                result.append(obj if isinstance(obj, Tensor) else Tensor.from_numpy(obj))
            else:
                result.append(self._const_output(n))
        return result

    def _run_kernel(self, s, k, env, symbols):
        keep = []
        consts, ask_shapes, plan_outs = self.plans[s]
        n_in, n_out = len(k.inputs), len(k.outputs)
        tin = (abi.Tensor * max(n_in, 1))()
        for i, v in enumerate(k.inputs):
            if not v:
                continue
            if i in consts:
                tin[i] = consts[i]
                continue
            ptr, shape, dtype = env[v][:3]
            if ptr is None and self.host and string_tensors.is_string(dtype):
                keep.append(string_tensors.pack(env[v][3], f"value {v!r}"))
                ptr = keep[-1].address
            self._put(tin, i, shape, dtype, ptr, keep)
        shapes = {}
        if ask_shapes:
            ndims = (C.c_int32 * max(n_out, 1))()
            dims = (C.c_int64 * (max(n_out, 1) * abi.MAX_NDIM))()
            rc = self.out_shapes_fn(k.ptr, tin, n_in, n_out, ndims, dims)
            if rc != 0:
                raise self._fail(rc, k)
            for o in range(n_out):
                nd = ndims[o]
                row = dims[o * abi.MAX_NDIM:o * abi.MAX_NDIM + max(nd, 0)]
                if not 0 <= nd <= abi.MAX_NDIM or any(d < 0 for d in row):
                    raise BackendError(
                        f"backend {self.lib.id!r}: kernel_output_shapes of {k.label} gave "
                        f"output {o} rank {nd} dims {row}; ranks are 0..{abi.MAX_NDIM}, dims >= 0"
                    )
                shapes[o] = tuple(row)
            for o, v, _, _, _, info in plan_outs:
                why = mismatch(shapes[o], None, info, symbols)
                if why:
                    raise BackendError(
                        f"backend {self.lib.id!r}: kernel_output_shapes of {k.label} gave "
                        f"output {v!r} {why}; the backend's shape function is wrong (report it "
                        f"to the backend's authors)")
        tout = (abi.Tensor * max(n_out, 1))()
        made, string_outs = {}, []
        for o, v, static_shape, dtype, is_string, _ in plan_outs:
            shape = shapes[o] if ask_shapes else static_shape
            if self.host and is_string:  # filled by the backend
                items = string_tensors.output_items(shape)
                string_outs.append((v, items, shape))
                made[v] = (items.ctypes.data, shape, dtype, items)
            elif self.host:  # an IO-bound output array is written in place
                arr = output_buffer(v, shape, dtype)
                arr = np.empty(shape, dtype) if arr is None else arr
                made[v] = (arr.ctypes.data, shape, dtype, arr)
            else:
                buf = self.api.alloc_data_space(self.dev, max(_nbytes(shape, dtype), 1), dtype=dtype)
                made[v] = (buf.ptr, shape, dtype, buf)
            self._put(tout, o, shape, dtype, made[v][0], keep)
        ws, ws_n, ws_handle = None, 0, None
        if self.ws_size_fn:
            need = C.c_uint64(0)
            rc = self.ws_size_fn(k.ptr, tin, n_in, tout, n_out, C.byref(need))
            if rc != 0:
                raise self._fail(rc, k)
            ws_n = need.value
            if ws_n:
                ws_handle = self.api.alloc_workspace(self.dev, ws_n)
                ws = workspace_data(ws_handle)
                ws = ws.ptr if isinstance(ws, NativeBuffer) else ws.ctypes.data
        rc = -1
        try:
            rc = self.kernel_run(k.ptr, tin, n_in, tout, n_out, ws, ws_n, None)
        finally:
            if ws_handle is not None:
                self.api.free_workspace(self.dev, ws_handle)
            texts = string_tensors.unpack_outputs(
                string_outs, self.lib.table.release_strings,
                f"backend {self.lib.id!r}, {k.label}", rc_ok=rc == 0) if string_outs else {}
        if rc != 0:
            raise self._fail(rc, k)
        for v, arr in texts.items():
            made[v] = (None, made[v][1], made[v][2], arr)
        env.update(made)
        for v in k.inputs:
            if v and self.last_use.get(v) == s and v not in self.outputs:
                env.pop(v, None)

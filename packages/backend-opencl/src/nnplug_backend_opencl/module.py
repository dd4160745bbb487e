"""A built partition: constants on the device, plans per input shape, and ``run``.

``run`` is thread-safe without a global lock: each call borrows an *execution context*
(its own command queue, kernel objects and scratch buffers) from a pool, so concurrent
calls never share kernel arguments or scratch memory. Plans depend on the input shapes
(and on the values of the few inputs the host must read, such as a Reshape's shape), so
one module serves any batch size; each new shape is planned once.
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

from nnplug.device import Device
from nnplug.errors import BackendError
from nnplug.tensor import Tensor

from . import programs
from .devices import DeviceState
from .ops import LOWERINGS
from .planner import Plan, Planner

MAX_IDLE_CONTEXTS = 8


class ExecContext:
    def __init__(self, st: DeviceState, plan: Plan, prgs: dict):
        self.queue = cl.CommandQueue(st.context, st.device)
        self.kernels = {}
        for step in plan.steps:
            if step[0] == "launch" and (step[1], step[2]) not in self.kernels:
                self.kernels[(step[1], step[2])] = cl.Kernel(prgs[step[1]], step[2])
        self.slots = [cl.Buffer(st.context, cl.mem_flags.READ_WRITE, n) for n in plan.slot_sizes]

    def release(self):
        for b in self.slots:
            b.release()
        self.slots = []


class PlanEntry:
    def __init__(self, plan: Plan, prgs: dict):
        self.plan = plan
        self.prgs = prgs
        self.idle: list[ExecContext] = []
        self.lock = threading.Lock()


class CompiledModule:
    def __init__(self, *, state: DeviceState, device: Device, api, target, nodes, inputs,
                 input_dtypes, outputs, constants, host_inputs, name):
        self.state = state
        self.device = device
        self.api = api
        self.target = target
        self.nodes = nodes
        self.inputs = inputs
        self.input_dtypes = input_dtypes
        self.outputs = outputs
        self.constants = constants
        self.host_inputs = host_inputs
        """Indices of inputs whose values the planner reads on the host."""
        self.name = name
        self._derived: dict = {}
        self._const_buffers: dict = {}
        self._plans: dict = {}
        self._lock = threading.RLock()
        self._closed = False

    # --- constants ---------------------------------------------------------------------
    def derived_constant(self, key, make) -> np.ndarray:
        with self._lock:
            arr = self._derived.get(key)
            if arr is None:
                arr = np.ascontiguousarray(make() if key[0] != "const" else self.constants[key[1]])
                self._derived[key] = arr
            return arr

    def _const_buffer(self, key) -> cl.Buffer:
        buf = self._const_buffers.get(key)
        if buf is None:
            if key[0] == "const":
                arr = np.ascontiguousarray(self.constants[key[1]])
            else:
                arr = self._derived[key]
            flags = cl.mem_flags.READ_ONLY
            if arr.nbytes:
                buf = cl.Buffer(self.state.context, flags | cl.mem_flags.COPY_HOST_PTR, hostbuf=arr)
            else:
                buf = cl.Buffer(self.state.context, flags, 1)
            self._const_buffers[key] = buf
        return buf

    # --- planning ----------------------------------------------------------------------
    def plan_for(self, shapes: tuple, host_values: dict) -> PlanEntry:
        key = (shapes, tuple((k, v.dtype.str, v.tobytes()) for k, v in sorted(host_values.items())))
        entry = self._plans.get(key)
        if entry is not None:
            return entry
        with self._lock:
            entry = self._plans.get(key)
            if entry is None:
                planner = Planner(self, dict(zip(self.inputs, shapes)), host_values)
                planner.lower(self.nodes, LOWERINGS)
                plan = planner.finish(self.outputs)
                identity = {k: self.target.attrs[k] for k in
                            ("device_name", "platform_name", "driver_version", "opencl_version")}
                extra = self.target.attrs["build_options"]
                prgs = {}
                for file, options in plan.programs:
                    opts = " ".join(o for o in (options, extra) if o)
                    prgs[(file, options)] = programs.get_program(self.state, file, opts,
                                                                 identity=identity)
                plan.consts = [self._const_buffer(k) for k in plan.const_keys]
                entry = PlanEntry(plan, prgs)
                self._plans[key] = entry
            return entry

    # --- running -----------------------------------------------------------------------
    def run(self, inputs: list) -> list[Tensor]:
        if self._closed:
            raise BackendError(f"opencl: module {self.name!r} was closed")
        if len(inputs) != len(self.inputs):
            raise BackendError(
                f"opencl: module {self.name!r} takes {len(self.inputs)} inputs "
                f"({', '.join(self.inputs)}), got {len(inputs)}"
            )
        bufs = []
        keep = []
        for name, t, want in zip(self.inputs, inputs, self.input_dtypes):
            if not isinstance(t, Tensor):
                t = Tensor.from_numpy(np.asarray(t))
            if t.dtype != want:
                raise BackendError(f"opencl: input {name!r} is {t.dtype}, the model says {want}")
            if t.device != self.device or t.byte_offset:
                t = t.to(self.device, self.api) if t.device != self.device else _compact(t, self)
                keep.append(t)
            bufs.append(_buffer(t.handle))
        host_values = {}
        for i in self.host_inputs:
            host_values[self.inputs[i]] = inputs[i].numpy() if isinstance(inputs[i], Tensor) \
                else np.asarray(inputs[i])
        shapes = tuple(tuple(t.shape) if isinstance(t, Tensor) else np.shape(t) for t in inputs)
        entry = self.plan_for(shapes, host_values)
        plan = entry.plan
        with entry.lock:
            ex = entry.idle.pop() if entry.idle else None
        if ex is None:
            ex = ExecContext(self.state, plan, entry.prgs)
        try:
            outs = [cl.Buffer(self.state.context, cl.mem_flags.READ_WRITE, n)
                    for n in plan.output_sizes]
            allbufs = bufs + outs + plan.consts + ex.slots
            _execute(ex, plan, allbufs)
            ex.queue.finish()  # outputs are complete before anyone else's queue reads them
        except cl.Error as e:
            ex.release()
            raise BackendError(f"opencl: running module {self.name!r} failed: {e}") from None
        with entry.lock:
            if len(entry.idle) < MAX_IDLE_CONTEXTS:
                entry.idle.append(ex)
                ex = None
        if ex is not None:
            ex.release()
        return [Tensor(b, shape, dtype, self.device, self.api)
                for b, (shape, dtype) in zip(outs, plan.output_specs)]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for entry in self._plans.values():
                with entry.lock:
                    for ex in entry.idle:
                        ex.release()
                    entry.idle.clear()
            self._plans.clear()
            for buf in self._const_buffers.values():
                buf.release()
            self._const_buffers.clear()


def _buffer(handle):
    from nnplug.device_api import workspace_data

    return workspace_data(handle)


def _compact(t: Tensor, module: CompiledModule) -> Tensor:
    """A copy starting at byte 0: kernels take whole buffers, not offsets."""
    out = Tensor.empty(t.shape, t.dtype, module.device, module.api)
    module.api.copy_data_from_to(t.handle, t.byte_offset, out.handle, 0, t.nbytes, t.device,
                                 module.device)
    return out


def _execute(ex: ExecContext, plan: Plan, bufs: list) -> None:
    q = ex.queue
    for step in plan.steps:
        kind = step[0]
        try:
            if kind == "launch":
                _, prog, kname, gsize, lsize, args, _node = step
                knl = ex.kernels[(prog, kname)]
                knl.set_args(*[bufs[v] if is_buf else v for is_buf, v in args])
                cl.enqueue_nd_range_kernel(q, knl, gsize, lsize)
            elif kind == "fill":
                _, idx, pattern, nbytes, _node = step
                cl.enqueue_fill_buffer(q, bufs[idx], pattern, 0, nbytes)
            else:
                _, src, dst, nbytes, _node = step
                cl.enqueue_copy(q, bufs[dst], bufs[src], byte_count=nbytes)
        except cl.Error as e:
            raise BackendError(f"opencl: node {step[-1]!r}: {kind} failed: {e}") from None

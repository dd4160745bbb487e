"""Per-node profile events from native backends (``set_profile_hook``, backend ABI 1.1).

While a profiled run executes a native partition kernel by kernel, :class:`NodeEvents` holds
the backend's hook on the running thread and collects what it reports; :func:`record_kernel`
turns one kernel call into trace events: the nodes the backend reported (fused ones named),
or, from a backend without the hook, the kernel as a whole.
"""

from __future__ import annotations

import ctypes as C

from . import abi


class _Ref:
    __slots__ = ("name", "op_type")

    def __init__(self, name: str, op_type: str):
        self.name = name
        self.op_type = op_type


def _text(p) -> str:
    return p.decode("utf-8", "replace") if p else ""


def _rows(count, ndims, shapes) -> list[list[int]]:
    out = []
    for i in range(max(count, 0)):
        nd = ndims[i] if ndims else 0
        nd = nd if 0 <= nd <= abi.MAX_NDIM else 0
        out.append([int(shapes[i * abi.MAX_NDIM + d]) for d in range(nd)] if shapes else [])
    return out


class NodeEvents:
    """Context manager: the backend's profile hook set on this thread for its duration."""

    def __init__(self, lib):
        self.lib = lib
        self.set_hook = lib.table.set_profile_hook
        self.events: list[tuple] = []
        self._cb = abi.PROFILE_HOOK(self._on_event)  # kept alive while the hook is set

    def __enter__(self) -> NodeEvents:
        if self.set_hook:
            self.lib.check(self.set_hook(self._cb, None), "set_profile_hook")
        return self

    def __exit__(self, *exc) -> None:
        if self.set_hook:
            self.set_hook(abi.PROFILE_HOOK(), None)

    def _on_event(self, _user, ptr) -> None:
        try:  # never let an exception unwind into the backend
            e = ptr.contents
            size = e.struct_size
            if size < C.sizeof(abi.ProfileEvent):  # an older event layout: skip what it lacks
                return
            fused = [(_text(e.fused_names[i]), _text(e.fused_op_types[i]))
                     for i in range(max(e.num_fused, 0))] if e.fused_names else []
            self.events.append((
                _text(e.node_name), _text(e.op_type), fused, int(e.start_ns),
                int(e.start_ns) + max(int(e.duration_ns), 0),
                _rows(e.num_inputs, e.input_ndims, e.input_shapes),
                _rows(e.num_outputs, e.output_ndims, e.output_shapes)))
        except Exception:
            pass

    def take(self) -> list[tuple]:
        events, self.events = self.events, []
        return events


def record_kernel(prof, backend_id: str, kernel, start_ns: int, end_ns: int, hooks,
                  input_shapes, output_shapes) -> None:
    """Trace events for one kernel call: the backend's node events, else the whole kernel."""
    events = hooks.take() if hooks is not None else []
    if not events:
        prof.kernel(backend_id, kernel.nodes, start_ns, end_ns, input_shapes, output_shapes)
        return
    # The backend's clock is CLOCK_MONOTONIC like perf_counter_ns on Linux; elsewhere shift
    # its times into the kernel call they happened in.
    shift = 0
    if not start_ns - 1_000_000 <= events[0][3] <= end_ns:
        shift = start_ns - events[0][3]
    for name, op_type, fused, t0, t1, ins, outs in events:
        nodes = [_Ref(name, op_type)] + [_Ref(n, t) for n, t in fused]
        prof.kernel(backend_id, nodes, t0 + shift, t1 + shift, ins, outs)

"""What one run carries down to the code that executes it: a profiler to record into and a
terminate flag to honour.

The context lives in a context variable, so concurrent runs (threads, ``run_async``) each see
their own. Executors ask :func:`current` at step and kernel boundaries; with no context the run
takes its fastest path (native partitions in one ``run_steps`` call).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

from .errors import RunTerminatedError

_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "nnplug_run_context", default=None)


class RunContext:
    """``profiler``: a :class:`nnplug.profiling.Profiler` or None. ``terminated``: a callable
    returning True once the run should stop. ``tag``: names the run in errors and traces.
    ``outputs``: value name -> host array to write that value into (IO binding), where the
    backend can."""

    __slots__ = ("profiler", "terminated", "tag", "kernels", "outputs")

    def __init__(self, profiler=None, terminated: Callable[[], bool] | None = None,
                 tag: str = "", outputs: dict | None = None):
        self.profiler = profiler
        self.terminated = terminated
        self.tag = tag
        self.outputs = outputs or {}
        self.kernels = 0
        """Kernel events recorded (Profiler.kernel) since the current partition started."""

    @property
    def step_by_step(self) -> bool:
        """Whether partitions should run kernel by kernel (to time or stop between them)."""
        return self.profiler is not None or self.terminated is not None

    def check(self, where: str) -> None:
        """Raise RunTerminatedError when the run was asked to stop."""
        if self.terminated is not None and self.terminated():
            tag = f" (run tag {self.tag!r})" if self.tag else ""
            raise RunTerminatedError(
                f"the run{tag} was terminated before {where}: RunOptions.terminate was set; "
                f"set it back to False to run again"
            )


current = _current.get
"""``current()``: the RunContext of the run on this thread, or None (a C call: runs ask it
often)."""


def output_buffer(name: str, shape, dtype):
    """The caller's array for value ``name`` when it fits (shape, dtype, C-contiguous,
    writable), else None: a backend then allocates the output itself."""
    ctx = _current.get()
    buf = ctx.outputs.get(name) if ctx is not None else None
    if buf is None or tuple(buf.shape) != tuple(shape) or buf.dtype != dtype or \
            not (buf.flags.c_contiguous and buf.flags.writeable):
        return None
    return buf


@contextlib.contextmanager
def running(ctx: RunContext | None):
    """Make ``ctx`` the context of the runs started inside the block (on this thread)."""
    if ctx is None:
        yield None
        return
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)

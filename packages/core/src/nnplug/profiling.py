"""Profiles of runs as Chrome-trace JSON (opens in Perfetto and chrome://tracing), and the
per-op-type summary ``nnplug profile`` prints and charts.

A :class:`Profiler` collects complete events (``"ph": "X"``): one per kernel run (category
``kernel``: a native kernel, a Python backend's partition, or a custom op), one per copy at a
partition edge (``copy``), one per run (``run``) and one for loading the model (``session``).
Kernel events carry ``backend``, ``op_type``, ``nodes`` (every node a fused kernel ran),
``input_shapes`` and ``output_shapes`` in ``args``. Timestamps are microseconds from the
profiler's start; ``tid`` is the OS thread that ran the work.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass

from .errors import InvalidArgumentError, NnplugError
from .runcontext import current


def _shape(t) -> list[int]:
    return [int(d) for d in getattr(t, "shape", ())]


class Profiler:
    """Collects trace events; thread-safe (concurrent runs record into one profiler)."""

    def __init__(self, op_types: dict[str, str] | None = None):
        self.op_types = dict(op_types or {})
        """node name -> op type, to name partitions whose backend records no kernels."""
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self._start_ns = time.perf_counter_ns()
        self.pid = os.getpid()

    @property
    def start_ns(self) -> int:
        """The profiler's time origin on ``time.perf_counter_ns``'s clock."""
        return self._start_ns

    # -- recording ---------------------------------------------------------------------------
    def add(self, name: str, cat: str, start_ns: int, end_ns: int, args: dict | None = None) -> None:
        event = {"name": name, "cat": cat, "ph": "X", "pid": self.pid,
                 "tid": threading.get_native_id(),
                 "ts": round((start_ns - self._start_ns) / 1e3, 3),
                 "dur": round(max(end_ns - start_ns, 0) / 1e3, 3), "args": args or {}}
        with self._lock:
            self._events.append(event)

    @contextlib.contextmanager
    def span(self, name: str, cat: str, args: dict | None = None):
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            self.add(name, cat, t0, time.perf_counter_ns(), args)

    def kernel(self, backend: str, nodes, start_ns: int, end_ns: int, input_shapes,
               output_shapes) -> None:
        """One kernel run. ``nodes``: the graph nodes it ran (objects with ``name`` and
        ``op_type``; several when the backend fused them). Backends may call it from a
        Module's ``run``; the partition is then not timed again as a whole."""
        ctx = current()
        if ctx is not None:
            ctx.kernels += 1
        names = [n.name for n in nodes]
        op_type = "+".join(n.op_type for n in nodes) if len(nodes) <= 4 else \
            f"{nodes[0].op_type}+{len(nodes) - 1} fused"
        self.add(names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} fused)",
                 "kernel", start_ns, end_ns,
                 {"backend": backend, "op_type": op_type, "nodes": names,
                  "op_types": [n.op_type for n in nodes], "fused": len(nodes) > 1,
                  "input_shapes": [list(s) for s in input_shapes],
                  "output_shapes": [list(s) for s in output_shapes]})

    def step(self, step, inputs, outputs, start_ns: int, end_ns: int) -> None:
        """A partition whose backend recorded no kernel events: one kernel event for it."""
        nodes = [_NodeRef(n, self.op_types.get(n, "?")) for n in step.nodes]
        self.kernel(step.label, nodes, start_ns, end_ns, [_shape(t) for t in inputs],
                    [_shape(t) for t in outputs])

    def copy(self, value: str, src, dst, start_ns: int, end_ns: int) -> None:
        """A copy of ``value`` across a partition edge (``src``/``dst``: Tensors)."""
        self.add(f"copy {value}", "copy", start_ns, end_ns,
                 {"value": value, "from": str(src.device), "to": str(dst.device),
                  "shape": _shape(src), "bytes": int(src.nbytes)})

    # -- reading -----------------------------------------------------------------------------
    def events(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._events]

    def trace(self) -> dict:
        """The Chrome-trace document (JSON object form)."""
        return {"traceEvents": self.events(), "displayTimeUnit": "ms",
                "otherData": {"producer": "nnplug"}}

    def write(self, path: str, *, one_event_a_line: bool = False) -> str:
        """Write the trace to ``path``: the JSON object form, or with ``one_event_a_line``
        a JSON array with one event a line (onnxruntime's layout; both are Chrome traces)."""
        try:
            with open(path, "w", encoding="utf-8") as f:
                if one_event_a_line:
                    f.write("[\n" + ",\n".join(json.dumps(e) for e in self.events()) + "\n]\n")
                else:
                    json.dump(self.trace(), f)
        except OSError as e:
            raise NnplugError(f"cannot write the profile to {path!r}: {e}") from None
        return path


@dataclass(frozen=True)
class _NodeRef:
    name: str
    op_type: str


def profiled(net, feeds, profiler: Profiler, output_names=None) -> dict:
    """``net.run(feeds)`` recorded into ``profiler`` (a ``run`` event around its kernels)."""
    from .runcontext import RunContext, running

    for name, op_type in net.op_types.items():
        profiler.op_types.setdefault(name, op_type)
    with running(RunContext(profiler)), profiler.span("model_run", "run"):
        return net.run(feeds, output_names)


# -- summaries ---------------------------------------------------------------------------------
@dataclass
class OpTypeTime:
    op_type: str
    count: int
    total_us: float
    percent: float

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


def by_op_type(events) -> list[OpTypeTime]:
    """Kernel and copy time per op type (fused kernels under their fused name), largest first.

    ``events``: a Profiler, a trace document, a list of events, or a trace file path."""
    events = load_events(events)
    totals: dict[str, list] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "copy"):
            continue
        key = e["args"].get("op_type", "?") if e["cat"] == "kernel" else "(copy)"
        row = totals.setdefault(key, [0, 0.0])
        row[0] += 1
        row[1] += float(e.get("dur", 0))
    whole = sum(t for _, t in totals.values()) or 1.0
    rows = [OpTypeTime(k, c, t, 100.0 * t / whole) for k, (c, t) in totals.items()]
    return sorted(rows, key=lambda r: -r.total_us)


def load_events(source) -> list[dict]:
    if isinstance(source, Profiler):
        return source.events()
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, encoding="utf-8") as f:
                source = json.load(f)
        except (OSError, ValueError) as e:
            raise NnplugError(f"cannot read the profile {os.fspath(source)!r}: {e}") from None
    if isinstance(source, dict):
        source = source.get("traceEvents", [])
    return list(source)


def format_table(rows: list[OpTypeTime], runs: int = 1) -> str:
    """The per-op-type table ``nnplug profile`` prints (times per run)."""
    runs = max(runs, 1)
    width = max([len("op type")] + [len(r.op_type) for r in rows])
    lines = [f"{'op type':<{width}}  {'calls':>6}  {'total ms':>9}  {'mean us':>9}  {'share':>6}"]
    for r in rows:
        lines.append(f"{r.op_type:<{width}}  {r.count // runs:>6}  {r.total_us / runs / 1e3:>9.3f}  "
                     f"{r.mean_us:>9.1f}  {r.percent:>5.1f}%")
    return "\n".join(lines)


def write_chart(rows: list[OpTypeTime], path: str, title: str = "where the time goes",
                top: int = 15, runs: int = 1) -> str:
    """A horizontal bar chart of time per op type (per run, over ``runs`` runs): ``.svg``
    (no dependency) or ``.png`` (needs matplotlib: ``pip install 'nnplug[chart]'``)."""
    runs = max(runs, 1)
    rows = [OpTypeTime(r.op_type, r.count // runs, r.total_us / runs, r.percent)
            for r in rows[:top]]
    ext = os.path.splitext(path)[1].lower()
    if ext == ".svg":
        text = _svg(rows, title)
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise NnplugError(f"cannot write the chart to {path!r}: {e}") from None
        return path
    if ext != ".png":
        raise InvalidArgumentError(f"chart {path!r}: name it .svg or .png")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise NnplugError(
            f"writing {path!r} needs matplotlib: pip install 'nnplug[chart]' (or write an .svg "
            f"chart, which needs nothing)"
        ) from None
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    names = [r.op_type for r in rows][::-1]
    ax.barh(names, [r.total_us / 1e3 for r in rows][::-1], color="#4c78a8")
    ax.set_xlabel("ms per run")
    ax.set_title(title)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise NnplugError(f"cannot write the chart to {path!r}: {e}") from None
    finally:
        plt.close(fig)
    return path


def _svg(rows: list[OpTypeTime], title: str) -> str:
    from xml.sax.saxutils import escape

    bar_h, gap, left, width = 18, 6, 220, 420
    height = 40 + len(rows) * (bar_h + gap) + 10
    most = max((r.total_us for r in rows), default=1.0) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 140}" '
             f'height="{height}" font-family="sans-serif" font-size="12">',
             f'<text x="10" y="20" font-size="14">{escape(title)}</text>']
    for i, r in enumerate(rows):
        y = 36 + i * (bar_h + gap)
        w = max(1.0, width * r.total_us / most)
        parts.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">'
                     f'{escape(r.op_type)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                     f'fill="#4c78a8"><title>{escape(r.op_type)}: {r.total_us / 1e3:.3f} ms, '
                     f'{r.count} calls</title></rect>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 13}">{r.total_us / 1e3:.3f} ms '
                     f'({r.percent:.1f}%)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


__all__ = ["OpTypeTime", "Profiler", "by_op_type", "format_table", "load_events", "profiled",
           "write_chart"]

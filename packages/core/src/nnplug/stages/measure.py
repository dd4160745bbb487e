"""The measure stage (``CreationOptions(placement="measure")`` or ``NNPLUG_PLACEMENT=measure``):
between place and compile, each partition that another host backend could run whole is built
on both, timed on the partition's real shapes, and moved to the faster one.

Placement by preference order gives a node to the first backend that claims it, and a backend
that claims an op is not always the faster one on every shape (oneDNN's partitions lose to the
portable CPU backend on some models). Measuring settles it where both can run the nodes:

- only partitions whose values all have static shapes, on backends whose memory is the host's
  (the timing runs feed host arrays: random normal floats, zero integers, false booleans);
- a candidate must claim every node of the partition (``supports``); a partition holding a
  node claimed only together with the next one stays where it is;
- each build runs once untimed, then up to :data:`RUNS` times within :data:`BUDGET_S`; the
  fastest run counts, and a candidate wins only below :data:`MARGIN` of the current time;
- a build or run that fails leaves the partition where it was;
- a partition is timed writing what the network reads after it, as it runs in the network;
- then the network as a whole: where every node is on a host backend and every shape is
  static, the split (its partitions run one after another, each fed what the ones before it
  made) is timed against the whole network on each host backend that runs every node, and
  everything moves to that backend when it is below :data:`MARGIN` of the split (near ties
  kept per partition add up, and so does switching backends between them).

Decisions are remembered on disk (``NNPLUG_CACHE_DIR``, default ``~/.cache/nnplug``, file
``placement.json``) per partition: its nodes, shapes and types, the candidates' ids and
versions, nnplug's version and the thread setting; a second load of the same model (or of
another model with the same partition) reads them instead of timing again. A missing,
unreadable or corrupt file is measured again and rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .._version import __version__
from ..device import CPU
from ..plan_cache import cache_root
from ..tensor import Tensor
from .planner import Placement, partitions, subgraph_for, wanted_after

if TYPE_CHECKING:
    from ..backend import Backend
    from ..graph import Model, Node, SubGraph
    from ..target import Target

ENV_VAR = "NNPLUG_PLACEMENT"
MODES = ("order", "measure")
RUNS = 5
BUDGET_S = 0.2
MARGIN = 0.85
_file_lock = threading.Lock()


def placement_mode(option: str | None) -> str:
    """The creation option, else ``NNPLUG_PLACEMENT``, else ``"order"``."""
    mode = option if option is not None else os.environ.get(ENV_VAR, "") or "order"
    if mode not in MODES:
        from ..errors import InvalidArgumentError

        where = "CreationOptions.placement" if option is not None else ENV_VAR
        raise InvalidArgumentError(f"{where} = {mode!r}: use one of {', '.join(MODES)}")
    return mode


def measure_placement(model: Model, nodes: list[Node], placed: dict[str, Placement],
                      backends: list[Backend], graph: SubGraph, constants: dict,
                      target_of: dict[str, Target], alone) -> dict[str, Placement]:
    """``placed`` with each measurable partition on the fastest host backend that runs it
    whole (a new dict; the nodes that moved say why in ``declined``)."""
    hosts = [b for b in backends if target_of[b.id].device == CPU]
    out = dict(placed)
    cache = _Cache()
    results = {o.name for o in model.outputs}
    parts = partitions(nodes, placed, alone=alone)
    # timed writing what the network reads after it, as it runs there (every value made
    # inside would make a oneDNN partition reorder each back to a plain layout)
    after = wanted_after(parts, results)
    for i, part in enumerate(parts):
        current = placed[part[0].name]
        if current.backend not in hosts or current.op is not None or current.core is not None \
                or any(placed[n.name].with_next for n in part):
            continue
        others = [b for b in hosts if b is not current.backend
                  and all(_claims(b, n, graph) for n in part)]
        if not others:
            continue
        sg = subgraph_for(part, model, constants, after[i], i)
        if not _static(sg):
            continue
        key = _key(sg, [current.backend, *others])
        times = cache.get(key)
        if times is None:
            times = {b.id: _time(b, sg, target_of[b.id]) for b in [current.backend, *others]}
            cache.put(key, times)
        base = times.get(current.backend.id)
        best = min((b for b in others if times.get(b.id) is not None),
                   key=lambda b: times[b.id], default=None)
        if base is None or best is None or times[best.id] >= MARGIN * base:
            continue
        why = (f"measured slower on these shapes: {base * 1e3:.3g} ms against "
               f"{best.id}'s {times[best.id] * 1e3:.3g} ms")
        for n in part:
            declined = dict(placed[n.name].declined or {})
            declined[current.backend.id] = why
            out[n.name] = Placement(backend=best, declined=declined)
    out = _whole_network(model, nodes, out, hosts, graph, constants, target_of, alone, cache)
    cache.save()
    return out


def _whole_network(model: Model, nodes: list[Node], placed: dict[str, Placement],
                   hosts: list[Backend], graph: SubGraph, constants: dict,
                   target_of: dict[str, Target], alone, cache: _Cache) -> dict[str, Placement]:
    """``placed``, or every node on one host backend when that runs the whole network faster
    than the split: each partition kept its backend within the margin, and near ties add up,
    as does what switching backends costs between partitions (a oneDNN convolution between
    two CPU partitions pays its layout changes, and each backend's threads wake in turn).
    The split is timed as it runs: its partitions one after another, on what each made."""
    parts = partitions(nodes, placed, alone=alone)
    used = {placed[p[0].name].backend for p in parts}
    if len(parts) < 2 or len(used) < 2 or any(
            p.backend not in hosts or p.op is not None or p.core is not None or p.with_next
            for p in placed.values()):
        return placed
    results = {o.name for o in model.outputs}
    whole = subgraph_for(nodes, model, constants, results, 0)
    if not _static(whole):
        return placed
    alone_on = [b for b in hosts if all(_claims(b, n, graph) for n in nodes)]
    if not alone_on:
        return placed
    key = "whole:" + _key(whole, hosts) + ":" + ",".join(
        f"{n.name}={placed[n.name].backend.id}" for n in nodes)
    times = cache.get(key)
    if times is None:
        chain = []
        for i, (part, wanted) in enumerate(zip(parts, wanted_after(parts, results))):
            b = placed[part[0].name].backend
            chain.append((b, subgraph_for(part, model, constants, wanted, i), target_of[b.id]))
        times = {"split": _time_chain(chain, whole),
                 **{b.id: _time(b, whole, target_of[b.id]) for b in alone_on}}
        cache.put(key, times)
    split = times.get("split")
    best = min((b for b in alone_on if times.get(b.id) is not None),
               key=lambda b: times[b.id], default=None)
    if split is None or best is None or times[best.id] >= MARGIN * split:
        return placed
    names = sorted({b.id for b in used})
    why = (f"measured slower as a whole: {split * 1e3:.3g} ms split over "
           f"{' and '.join(names)} against {times[best.id] * 1e3:.3g} ms on {best.id} alone")
    out = {}
    for n in nodes:
        p = placed[n.name]
        declined = dict(p.declined or {})
        if p.backend is not best:
            declined[p.backend.id] = why
        out[n.name] = Placement(backend=best, declined=declined)
    return out


def _claims(backend: Backend, node: Node, graph: SubGraph) -> bool:
    try:
        return bool(backend.supports(node, graph))
    except Exception:  # a plugin that cannot answer does not take the partition
        return False


def _static(sg: SubGraph) -> bool:
    for name in [*sg.inputs, *sg.outputs]:
        v = sg.values.get(name)
        if v is None or v.dtype is None or v.shape is None or \
                not all(isinstance(d, int) and d >= 0 for d in v.shape):
            return False
    return True


def _inputs(sg: SubGraph) -> list[Tensor]:
    rng = np.random.default_rng(0)
    arrays = []
    for name in sg.inputs:
        v = sg.values[name]
        dtype = np.dtype(v.dtype)
        if dtype.kind == "f":
            arr = rng.standard_normal(v.shape).astype(dtype)
        else:
            arr = np.zeros(v.shape, dtype)
        arrays.append(Tensor.from_numpy(arr))
    return arrays


def _time(backend: Backend, sg: SubGraph, target: Target) -> float | None:
    """Seconds of the fastest of a few runs of ``sg`` on ``backend``, or None if it fails."""
    return _time_chain([(backend, sg, target)], sg)


def _time_chain(chain: list[tuple[Backend, SubGraph, Target]], whole: SubGraph) -> float | None:
    """Seconds of the fastest of a few runs of the partitions of ``chain`` one after another,
    each fed what the ones before it made (as a run of the network feeds them: what switching
    backends costs is timed too), from random inputs of ``whole``'s; None if one fails."""
    modules = []
    try:
        for backend, sg, target in chain:
            modules.append(backend.build(sg, target))
    except Exception:
        _close(modules)
        return None

    def run(feeds: dict) -> None:
        env = dict(feeds)
        for (_, sg, _), module in zip(chain, modules):
            env.update(zip(sg.outputs, module["run"]([env[x] for x in sg.inputs])))

    try:
        feeds = dict(zip(whole.inputs, _inputs(whole)))
        run(feeds)  # untimed: first-run allocations, caches
        best, start = float("inf"), time.perf_counter()
        for _ in range(RUNS):
            t0 = time.perf_counter()
            run(feeds)
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() - start > BUDGET_S:
                break
        return best
    except Exception:
        return None
    finally:
        _close(modules)


def _close(modules) -> None:
    for module in modules:
        with contextlib.suppress(Exception):
            module.close()


def _key(sg: SubGraph, backends: list[Backend]) -> str:
    h = hashlib.sha256()
    h.update(f"nnplug {__version__}; threads {os.environ.get('NNPLUG_NUM_THREADS', '')}; "
             f"cpus {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 0}"
             .encode())
    for b in sorted(backends, key=lambda b: b.id):
        h.update(f"; {b.id} {getattr(b, 'version', '')}".encode())
    for n in sg.nodes:
        proto = n.proto
        h.update(proto.SerializeToString(deterministic=True) if proto is not None
                 else repr((n.op_type, n.inputs, n.outputs)).encode())
    for name in sorted(sg.values):
        v = sg.values[name]
        h.update(f"{name}:{v.dtype}:{v.shape};".encode())
    return h.hexdigest()


class _Cache:
    """The decisions file: read once per load, written back when something was measured."""

    def __init__(self):
        folder = cache_root()
        self.path = os.path.join(folder, "placement.json")
        self.entries: dict = {}
        self.changed = False
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict) and data.get("version") == 1 and \
                    isinstance(data.get("entries"), dict):
                self.entries = data["entries"]
        except (OSError, ValueError):
            pass  # no file yet, or a corrupt one: measured again and rewritten

    def get(self, key: str) -> dict | None:
        times = self.entries.get(key)
        if not isinstance(times, dict) or not all(
                t is None or isinstance(t, (int, float)) for t in times.values()):
            return None
        return times

    def put(self, key: str, times: dict) -> None:
        self.entries[key] = times
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        with _file_lock, contextlib.suppress(OSError):  # a read-only home only costs a re-measure
            folder = os.path.dirname(self.path)
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".placement-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "entries": self.entries}, f)
            os.replace(tmp, self.path)

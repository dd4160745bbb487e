"""Running a network asynchronously (``Network.run_async``) and over many feeds
(``Network.run_many``)."""

from __future__ import annotations

import concurrent.futures
import contextvars
import itertools
import os
import threading

import numpy as np

from .errors import InputError, InvalidArgumentError
from .tensor import Tensor

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(2, min(8, os.cpu_count() or 2)), thread_name_prefix="nnplug-run")
        return _pool


def submit(net, feeds, output_names=None) -> concurrent.futures.Future:
    """``net.run(feeds, output_names)`` on a worker thread, in the caller's context (so a
    session's profiler and run options apply to it)."""
    ctx = contextvars.copy_context()
    return _executor().submit(ctx.run, net.run, feeds, output_names)


def _host(value) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def batch_axis_symbol(net, output_names) -> str:
    """The symbolic first dimension every input and requested output shares, or an
    InputError saying which value stops batching."""
    symbol = None
    for kind, values in (("input", net.inputs),
                         ("output", [o for o in net.outputs if o.name in output_names])):
        for v in values:
            first = v.shape[0] if v.shape else None
            if not isinstance(first, str) or (symbol is not None and first != symbol):
                want = f"the symbolic dimension {symbol!r}" if symbol else "a symbolic dimension"
                raise InputError(
                    f"run_many(batch_size > 1) stacks feeds along the first dimension, but "
                    f"{kind} {v.name!r} has shape {list(v.shape) if v.shape else 'unknown'} "
                    f"whose first dimension is not {want}; use batch_size=1 (one run per feed)"
                    f" or export the model with a dynamic batch dimension")
            symbol = first
    return symbol


def run_many(net, feeds_iterable, output_names=None, batch_size: int = 1) -> list[dict]:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be an integer >= 1, not {batch_size!r}")
    if batch_size == 1:
        return [net.run(feeds, output_names) for feeds in feeds_iterable]
    names = [o.name for o in net.outputs] if output_names is None else list(output_names)
    batch_axis_symbol(net, names)
    results: list[dict] = []
    it = iter(feeds_iterable)
    while True:
        chunk = list(itertools.islice(it, batch_size))
        if not chunk:
            return results
        results.extend(_run_chunk(net, chunk, names))


def _run_chunk(net, chunk: list, names: list[str]) -> list[dict]:
    """Feeds of one chunk, stacked where their shapes allow (same inputs, same dims after
    the first), run once per group, split back in order."""
    arrays = []
    for i, feeds in enumerate(chunk):
        if not isinstance(feeds, dict):
            raise InputError(f"run_many: item {i} is a {type(feeds).__name__}, not a dict of "
                             f"input name -> array")
        arrays.append({k: _host(v) for k, v in feeds.items()})
    groups: dict[tuple, list[int]] = {}
    for i, feeds in enumerate(arrays):
        key = tuple(sorted((k, a.shape[1:], a.dtype.str, a.ndim) for k, a in feeds.items()))
        groups.setdefault(key, []).append(i)
    out: list[dict | None] = [None] * len(chunk)
    for members in groups.values():
        if any(a.ndim == 0 for a in arrays[members[0]].values()):
            for i in members:  # rank 0 feeds: the model will report the rank; run as given
                out[i] = net.run(chunk[i], names)
            continue
        sizes = [next(iter(arrays[i].values())).shape[0] for i in members]
        stacked = {k: np.concatenate([arrays[i][k] for i in members]) for k in arrays[members[0]]}
        result = net.run(stacked, names)
        bounds = np.cumsum([0] + sizes)
        for name, value in result.items():
            if value.ndim == 0 or value.shape[0] != bounds[-1]:
                raise InputError(
                    f"run_many: output {name!r} has shape {list(value.shape)} for a batch of "
                    f"{bounds[-1]}; its first dimension does not follow the batch, so it "
                    f"cannot be split back; use batch_size=1")
        for j, i in enumerate(members):
            out[i] = {name: value[bounds[j]:bounds[j + 1]] for name, value in result.items()}
    return out

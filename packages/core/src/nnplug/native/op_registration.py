"""Registering a native custom-op library's ops with a Runtime: all of them or none."""

from __future__ import annotations

import os

from ..customop import CustomOp
from ..errors import PluginError
from .loader import LibraryLoadError, check_library_file
from .op_library import load_op_library


def register_library(runtime, path) -> list[CustomOp]:
    """Load the library at ``path`` and register its ops with ``runtime`` (all or none);
    in a worker process when the Runtime's ``isolate_plugins`` name it."""
    ops = _isolated_ops(runtime, path)
    if ops is None:
        ops = load_op_library(path)
    taken = runtime.ops
    for op in ops:
        if op.op_type in taken:
            raise LibraryLoadError(
                os.fsdecode(os.fspath(path)), "duplicate op",
                f"custom op {op.op_type!r} is already registered from {taken[op.op_type].source}",
                "each op type can be registered once: remove one of the two")
    done = []
    try:
        for op in ops:
            done.append(runtime.register_custom_op(op))
    except PluginError as e:
        raise LibraryLoadError(os.fsdecode(os.fspath(path)), "duplicate op", str(e)) from None
    return done


def _isolated_ops(runtime, path):
    """The library's ops from a worker process (:mod:`nnplug.native.isolated`) when the
    Runtime's ``isolate_plugins`` name it; None when they do not."""
    names = runtime._isolation_names() if hasattr(runtime, "_isolation_names") else ()
    if not names:
        return None
    from .isolated import load_isolated_ops, timeout_of

    path = check_library_file(path, "op library")
    return load_isolated_ops(path, names, timeout_of(runtime.options.isolate_timeout))

"""Native plugins: the C ABI headers and the host side of native backends and custom ops.

    nnplug.get_include()                      # folder with nnplug/backend.h, nnplug/common.h
    default_backend_dir(), default_op_dir()   # the default folders (they need not exist)
    backend = load_backend_library("/opt/nnplug/backends/libmine.so")
    dirs, errors = backend_search_dirs(options.dynamic_backends_path)
    paths, errors = find_backend_libraries(dirs)

See docs/dynamic-backends.md.
"""

from __future__ import annotations

from ..headers import get_include  # one definition, re-exported here
from .folders import BACKEND_ENV_VAR as ENV_VAR
from .folders import (
    backend_search_dirs,
    default_backend_dir,
    default_op_dir,
    find_backend_libraries,
)
from .loader import LibraryLoadError, NativeLibrary, load_backend_library


def __getattr__(name):  # the adapter classes import numpy-heavy modules: load them on use
    if name in ("NativeBackend", "NativeDeviceAPI", "NativeBuffer"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'nnplug.native' has no attribute {name!r}")


__all__ = [
    "ENV_VAR",
    "LibraryLoadError",
    "NativeLibrary",
    "backend_search_dirs",
    "default_backend_dir",
    "default_op_dir",
    "find_backend_libraries",
    "get_include",
    "load_backend_library",
    "NativeBackend",
    "NativeDeviceAPI",
    "NativeBuffer",
]

"""pyopencl, imported when first used.

Importing pyopencl costs tens of milliseconds. The runtime activates every installed backend
when a ``Runtime`` is created, so the modules it needs then (the device API, the device list)
reach pyopencl through ``cl`` and the import happens on the first real OpenCL call instead.
"""

from __future__ import annotations

import importlib


class _LazyModule:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


cl = _LazyModule("pyopencl")

"""Build hook: nnplug's shared native build (configured by [tool.nnplug.native] in
pyproject.toml; what it does is written in nnplug/native_build.py of the nnplug core).

This loader finds that file: in ``_nnplug_build/`` beside it (sdists and generated projects
ship a copy), in the monorepo's core beside this package, or in the installed nnplug.
"""

from __future__ import annotations

import importlib.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_CANDIDATES = (os.path.join(_HERE, "_nnplug_build", "native_build.py"),
               os.path.join(_HERE, "..", "core", "src", "nnplug", "native_build.py"))


def _load():
    for path in _CANDIDATES:
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("nnplug_native_build", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    from nnplug import native_build  # nnplug in the build environment

    return native_build


CustomBuildHook = _load().NativeBuildHook

"""Build hook: nnplug's one native build, nnplug/native_build.py (docs/native-build.md), from
the copy an sdist ships in _nnplug_build/, the monorepo's core, or an installed nnplug."""

import os
import runpy

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in ("_nnplug_build/native_build.py", "../core/src/nnplug/native_build.py"):
    if os.path.isfile(os.path.join(_HERE, _path)):
        CustomBuildHook = runpy.run_path(os.path.join(_HERE, _path))["NativeBuildHook"]
        break
else:
    from nnplug.native_build import NativeBuildHook as CustomBuildHook  # noqa: F401

"""nnplug's native build: the hatchling build hook ``nnplug-native`` that compiles a plugin's C
sources against nnplug's headers (see ``native`` and docs/native-build.md)."""

from ._version import __version__
from .native import PLUGIN_NAME, NativeBuildError, NativeBuildHook

__all__ = ["PLUGIN_NAME", "NativeBuildError", "NativeBuildHook", "__version__"]

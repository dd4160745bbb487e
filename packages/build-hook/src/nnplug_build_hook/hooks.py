"""How hatchling finds the hook: the ``hatch`` entry point of this distribution names this
module, and hatchling calls its registration functions when a project configures
``[tool.hatch.build.hooks.nnplug-native]``."""

from hatchling.plugin import hookimpl

from .native import NativeBuildHook


@hookimpl
def hatch_register_build_hook():
    return NativeBuildHook

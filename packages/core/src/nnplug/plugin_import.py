"""Importing a plugin's entry point without letting the plugin end the process.

A plugin module runs arbitrary code at import. ``sys.exit()`` there (SystemExit), or any other
BaseException that is not an Exception, would end ``Runtime()``, ``nnplug info`` and
``nnplug doctor`` without naming the plugin; it becomes an :class:`EntryPointImportError` (a
load error naming the entry point) instead. KeyboardInterrupt is the one exception let through:
it is how a user stops a program (Ctrl-C during a slow or hanging import), and a plugin that
raises it itself cannot be told apart from that.
"""

from __future__ import annotations

from . import discovery
from .errors import PluginError


class EntryPointImportError(PluginError):
    """An entry point's object could not be imported; ``reason`` and ``fix`` say why and
    what to do."""

    def __init__(self, reason: str, fix: str):
        super().__init__(f"{reason}; {fix}")
        self.reason = reason
        self.fix = fix


def load_entry_point(ep):
    """``ep.load()``; a failure (SystemExit included, KeyboardInterrupt not) raises
    EntryPointImportError."""
    try:
        return ep.load()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a plugin must not end the process
        raise EntryPointImportError(*_why(ep, e)) from e


def _why(ep, e: BaseException) -> tuple[str, str]:
    disable = f"or set {discovery.DISABLE_ENV}={ep.name} to skip it"
    module = getattr(ep, "module", None) or ep.value.split(":")[0].strip()
    if isinstance(e, ModuleNotFoundError) and e.name and (
            module == e.name or module.startswith(e.name + ".")):
        return (f"the entry point names module {module!r}, which does not exist "
                f"(no module {e.name!r})",
                f"correct the module in the entry point ({ep.value}) in the pyproject.toml of "
                f"the package that declares it and reinstall it, {disable}")
    if isinstance(e, ModuleNotFoundError) and e.name:
        return (f"ModuleNotFoundError: {e}: module {module!r} imports {e.name!r}, which is "
                f"not installed",
                f"install the package that provides {e.name!r} (a missing dependency of the "
                f"plugin), {disable}")
    if isinstance(e, AttributeError) and module:
        return (f"AttributeError: {e}: the entry point's object ({ep.value}) is not in module "
                f"{module!r}",
                f"correct the entry point in the package's pyproject.toml and reinstall it, "
                f"{disable}")
    if isinstance(e, SystemExit):
        return (f"importing {module!r} called sys.exit({e.code!r}) (SystemExit): a plugin "
                f"must not end the process",
                f"fix the plugin (raise an exception instead of exiting), {disable}")
    if not isinstance(e, Exception):
        return (f"importing {module!r} raised {type(e).__name__} (a BaseException that ends "
                f"programs): {e}",
                f"fix the plugin (raise an Exception instead), {disable}")
    return (f"{type(e).__name__}: {e}",
            f"reinstall the distribution that provides it, {disable}")


__all__ = ["EntryPointImportError", "load_entry_point"]

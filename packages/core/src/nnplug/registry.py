"""The global function registry (TVM's ``register_func`` / ``get_func``).

Names are dotted strings such as ``device_api.cpu`` or ``target.build.opencl``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .errors import RegistryError

_funcs: dict[str, Callable] = {}
_lock = threading.RLock()  # re-entered when the collector releases a backend


def register_func(name: str, func: Callable | None = None, *, override: bool = False):
    """Register ``func`` under ``name``; usable as ``@register_func("name")``.

    A second registration of the same name raises unless ``override=True``.
    """
    if not isinstance(name, str) or not name:
        raise RegistryError("register_func: the name must be a non-empty string")

    def _register(f: Callable) -> Callable:
        if not callable(f):
            raise RegistryError(f"register_func({name!r}): {f!r} is not callable")
        with _lock:
            if name in _funcs and not override and _funcs[name] is not f:
                raise RegistryError(
                    f"global function {name!r} is already registered ({_funcs[name]!r}); "
                    f"pass override=True to replace it with {f!r}"
                )
            _funcs[name] = f
        return f

    return _register if func is None else _register(func)


def get_func(name: str, allow_missing: bool = False) -> Callable | None:
    """Return the function registered as ``name``."""
    with _lock:
        f = _funcs.get(name)
    if f is None and not allow_missing:
        near = [n for n in list_funcs(name.rsplit(".", 1)[0] + ".")] if "." in name else []
        hint = f"; registered under that prefix: {', '.join(near)}" if near else ""
        raise RegistryError(f"no global function named {name!r}{hint}")
    return f


def remove_func(name: str, func: Callable | None = None) -> None:
    """Unregister ``name`` (only if it still maps to ``func`` when that is given)."""
    with _lock:
        if name in _funcs and (func is None or _funcs[name] is func):
            del _funcs[name]


def list_funcs(prefix: str = "") -> list[str]:
    """Sorted names of the registered functions that start with ``prefix``."""
    with _lock:
        return sorted(n for n in _funcs if n.startswith(prefix))

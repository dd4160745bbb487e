"""The process-wide registry: every name the core resolves globally, in one place.

Three namespaces share one rule for duplicates and one for withdrawal:

- ``FUNCS``: global functions (TVM's ``register_func`` / ``get_func``), dotted names such as
  ``device_api.cpu`` or ``target.build.opencl``;
- ``TARGET_KINDS``: what ``nnplug.Target(...)`` can parse (see :mod:`nnplug.target`);
- ``DEVICE_TYPES``: device type name -> number (see :mod:`nnplug.device`).

**Duplicates**: adding a name that is already visible raises the namespace's error naming
both entries, unless ``override=True`` (or the same value again, a no-op).
**Withdrawal**: an entry added with ``override=True`` sits on top of the one it hides; when its
owner is withdrawn (a backend released by its last Runtime), the hidden entry is visible
again. :func:`withdraw` removes every entry of an owner from every namespace.

A Runtime's own view of its backends and ops (``rt.backends``, ``rt.ops``) and the lease
table that shares one loaded backend between Runtimes (:mod:`nnplug.plugins`) are not
global names and live with their owners.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .errors import RegistryError

_lock = threading.RLock()
# The garbage collector may release a Runtime or Network (and so withdraw a backend) inside
# any allocation, also while this thread holds the lock: a withdrawal asked for then is
# queued, and the holder applies it before letting go.
_to_withdraw: list[object] = []
_holding = threading.local()


class Namespace:
    """One kind of global name: name -> a stack of ``(owner, value)``; the top is visible."""

    def __init__(self, what: str, error: type[Exception] = RegistryError):
        self.what = what
        self.error = error
        self._stacks: dict[str, list[tuple[object, object]]] = {}

    def add(self, name: str, value, *, owner=None, override: bool = False) -> None:
        with _holding_lock():
            stack = self._stacks.setdefault(name, [])
            if stack and stack[-1][1] is not value and not override:
                raise self.error(
                    f"{self.what} {name!r} is already registered ({stack[-1][1]!r}); pass "
                    f"override=True to replace it with {value!r}")
            if stack and stack[-1][1] is value and stack[-1][0] is owner:
                return  # the same entry again
            if owner is None and stack and stack[-1][0] is None:
                stack[-1] = (None, value)  # the API's own replacement: nothing to restore
            else:
                stack.append((owner, value))

    def remove(self, name: str, value=None) -> None:
        """Forget ``name`` (only its entry holding ``value``, when that is given)."""
        with _holding_lock():
            stack = self._stacks.get(name)
            if not stack:
                return
            if value is None:
                del self._stacks[name]
                return
            kept = [e for e in stack if e[1] is not value]
            if kept:
                self._stacks[name] = kept
            else:
                del self._stacks[name]

    def get(self, name: str, default=None):
        with _lock:
            stack = self._stacks.get(name)
            return stack[-1][1] if stack else default

    def owner_of(self, name: str):
        """Who added the visible entry of ``name`` (None: the API, or no such name)."""
        with _lock:
            stack = self._stacks.get(name)
            return stack[-1][0] if stack else None

    def names(self, prefix: str = "") -> list[str]:
        with _lock:
            return sorted(n for n in self._stacks if n.startswith(prefix))

    def items(self) -> list[tuple[str, object]]:
        with _lock:
            return [(n, s[-1][1]) for n, s in self._stacks.items()]

    def __contains__(self, name: str) -> bool:
        with _lock:
            return name in self._stacks

    def _drop_owner(self, owner) -> None:
        for name, stack in list(self._stacks.items()):
            kept = [e for e in stack if e[0] is not owner]
            if len(kept) == len(stack):
                continue
            if kept:
                self._stacks[name] = kept
            else:
                del self._stacks[name]


FUNCS = Namespace("global function")
TARGET_KINDS = Namespace("target kind")  # nnplug.target sets its error class
DEVICE_TYPES = Namespace("device type")
_NAMESPACES = (FUNCS, TARGET_KINDS, DEVICE_TYPES)


def withdraw(owner) -> None:
    """Remove every entry ``owner`` added, in every namespace; what they hid is visible again.
    Safe to call from a garbage-collector callback on a thread that holds the lock."""
    _to_withdraw.append(owner)
    if not getattr(_holding, "depth", 0):
        with _holding_lock():
            pass  # applies the queue on the way out


class _holding_lock:
    """The registry lock, applying queued withdrawals before the outermost holder lets go."""

    def __enter__(self):
        _lock.acquire()
        _holding.depth = getattr(_holding, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        try:
            if _holding.depth == 1:
                while _to_withdraw:
                    owner = _to_withdraw.pop()
                    for ns in _NAMESPACES:
                        ns._drop_owner(owner)
        finally:
            _holding.depth -= 1
            _lock.release()


# -- global functions (TVM's API) ----------------------------------------------------------------
def register_func(name: str, func: Callable | None = None, *, override: bool = False,
                  owner=None):
    """Register ``func`` under ``name``; usable as ``@register_func("name")``.

    A second registration of the same name raises unless ``override=True``. ``owner``: the
    object whose :func:`withdraw` removes it again (what it hid is then visible again).
    """
    if not isinstance(name, str) or not name:
        raise RegistryError("register_func: the name must be a non-empty string")

    def _register(f: Callable) -> Callable:
        if not callable(f):
            raise RegistryError(f"register_func({name!r}): {f!r} is not callable")
        FUNCS.add(name, f, override=override, owner=owner)
        return f

    return _register if func is None else _register(func)


def get_func(name: str, allow_missing: bool = False) -> Callable | None:
    """Return the function registered as ``name``."""
    f = FUNCS.get(name)
    if f is None and not allow_missing:
        near = FUNCS.names(name.rsplit(".", 1)[0] + ".") if "." in name else []
        hint = f"; registered under that prefix: {', '.join(near)}" if near else ""
        raise RegistryError(f"no global function named {name!r}{hint}")
    return f


def remove_func(name: str, func: Callable | None = None) -> None:
    """Unregister ``name`` (only if it still maps to ``func`` when that is given)."""
    FUNCS.remove(name, func)


def list_funcs(prefix: str = "") -> list[str]:
    """Sorted names of the registered functions that start with ``prefix``."""
    return FUNCS.names(prefix)

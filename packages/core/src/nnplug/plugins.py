"""Plugin bookkeeping shared by every way a plugin arrives (entry point, folder, API):
load-error records, where-from records, and the process-wide lease table that lets
several Runtimes share one loaded backend and releases it after the last user."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("nnplug")

RESERVED_IDS = frozenset({"auto", "all", "none", "default", "host", "python", "custom", "op",
                          "nnplug"})
"""Backend ids that mean something else to the host, for Python and native backends alike
(NNP_RESERVED_BACKEND_IDS in backend.h, checked against it by the tests)."""


@dataclass(frozen=True)
class LoadError:
    """A plugin that could not be loaded, and why."""

    source: str
    """What was being loaded: an entry point ``group:name``, or a file path."""
    stage: str
    """Where it failed: ``import``, ``call``, ``type``, ``disabled``, ``path``, ``not loadable``,
    ``no entry symbol``, ``abi version``, ``invalid id``, ``duplicate id``, ``init``, ..."""
    reason: str
    fix: str | None = None
    """The usual way to fix it, when there is one."""

    def __str__(self) -> str:
        text = f"{self.source}: {self.stage}: {self.reason}"
        return f"{text} (fix: {self.fix})" if self.fix else text


@dataclass
class BackendInfo:
    """Where a backend came from (``rt.backends[id]``)."""

    id: str
    origin: str
    """``entry_point``, ``dynamic`` (a shared object found in a backends folder) or ``api``."""
    source: str
    """Entry point ``name = module:object`` with dist and version, or the .so path."""
    device_type: str
    backend: object = field(repr=False, default=None)
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.id} ({self.device_type}) from {self.origin}: {self.source}"


def report(errors: list[LoadError], err: LoadError) -> None:
    """Record a load error and log it at WARNING (one line, with the fix)."""
    errors.append(err)
    log.warning("nnplug: skipped plugin %s", err)


class _Lease:
    __slots__ = ("obj", "count", "on_last_release")

    def __init__(self, obj, on_last_release):
        self.obj = obj
        self.count = 0
        self.on_last_release = on_last_release


class LeaseTable:
    """key -> shared object, created on first acquire, released after the last release."""

    def __init__(self):
        self._leases: dict[object, _Lease] = {}
        self._lock = threading.RLock()

    def acquire(self, key, create: Callable[[], object],
                on_last_release: Callable[[object], None] | None = None):
        with self._lock:
            lease = self._leases.get(key)
            if lease is None:
                lease = _Lease(create(), on_last_release)
                self._leases[key] = lease
            lease.count += 1
            return lease.obj

    def retain(self, key) -> None:
        with self._lock:
            self._leases[key].count += 1

    def release(self, key) -> None:
        with self._lock:
            lease = self._leases.get(key)
            if lease is None:
                return
            lease.count -= 1
            if lease.count > 0:
                return
            del self._leases[key]
        if lease.on_last_release is not None:
            try:
                lease.on_last_release(lease.obj)
            except Exception as e:  # a plugin's cleanup must not break the caller
                log.warning("nnplug: releasing %s failed: %s", key, e)

    def count(self, key) -> int:
        with self._lock:
            lease = self._leases.get(key)
            return lease.count if lease else 0


BACKENDS = LeaseTable()
"""Loaded backends shared by all Runtimes of the process."""

"""What the conformance suite tests: one backend and/or the ops of one op package, loaded
into a fresh Runtime that auto-loads nothing else."""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field

from nnplug import Backend, BackendInfo, CreationOptions, HostDeviceAPI, Runtime, discovery


class SubjectError(Exception):
    """The thing to test could not be found or loaded (a usage problem, reported once)."""


class HostBackend(Backend):
    """A backend that runs nothing itself: it gives custom ops with a ``cpu`` target a host
    device to bind to when the op package is tested without a real backend."""

    id = "testhost"
    device_type = "cpu"

    def __init__(self):
        self._api = HostDeviceAPI()

    def device_api(self):
        return self._api

    def supports(self, node, graph) -> bool:
        return False

    def build(self, subgraph, target):
        raise NotImplementedError("testhost runs no nodes")


@dataclass
class Subject:
    runtime: Runtime
    backend: BackendInfo | None = None
    native_path: str | None = None
    """The shared object of a native backend (None for a Python backend)."""
    entry_point: object = None
    op_source: str | None = None
    op_types: list[str] = field(default_factory=list)
    op_module: object = None
    """The module of the ops entry point: Python op classes there serve as references."""
    backends_for_ops: list[str] = field(default_factory=list)

    @property
    def backend_id(self) -> str | None:
        return self.backend.id if self.backend else None

    def describe(self) -> str:
        parts = []
        if self.backend:
            kind = f"native {self.native_path}" if self.native_path else "python"
            ver = f" {self.backend.version}" if self.backend.version else ""
            parts.append(f"backend {self.backend.id!r}{ver} ({kind}; from {self.backend.source})")
        if self.op_source:
            parts.append(f"ops {', '.join(self.op_types) or 'none'} (from {self.op_source})")
        return "; ".join(parts)

    def close(self) -> None:
        self.runtime.close()


def _resolve(obj):
    """An entry point's object: a factory is called; a native library path is returned as a str."""
    if callable(obj) and not inspect.isclass(obj) and not isinstance(obj, Backend):
        obj = obj()
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    return obj


def _entry_point(group: str, name: str):
    eps = discovery.entry_points(group)
    for ep in eps:
        if ep.name == name:
            return ep
    return None


def _names(group: str) -> str:
    return ", ".join(ep.name for ep in discovery.entry_points(group)) or "none installed"


def open_backend(rt: Runtime, name: str | None, path: str | None) -> tuple[BackendInfo, str | None, object]:
    """Register the backend under test in ``rt``: a native .so by path, or by entry point name
    (else a library of that id in the native backend folders)."""
    if path:
        if not os.path.exists(path):
            raise SubjectError(f"--nnplug-backend-path {path!r}: no such file")
        real = os.path.realpath(path)
        info = rt.register_backend(real, source=real)
        if name and info.id != name:
            raise SubjectError(f"{path} is backend {info.id!r}, not {name!r}")
        return info, real, None
    ep = _entry_point(discovery.BACKENDS_GROUP, name)
    if ep is not None:
        try:
            obj = _resolve(ep.load())
        except Exception as e:
            raise SubjectError(f"backend entry point {discovery.describe(ep)} failed to load: "
                               f"{type(e).__name__}: {e}") from e
        native = os.path.realpath(obj) if isinstance(obj, str) else None
        info = rt.register_backend(obj, origin="entry_point", source=discovery.describe(ep))
        info.version = discovery.dist_version(ep)
        return info, native, ep
    # a native backend dropped into a backends folder (NNPLUG_BACKEND_PATH or the default)
    with Runtime(CreationOptions(entry_points=False, custom_op_paths="")) as probe:
        found = probe.backends.get(name)
        path = found.source if found is not None and found.origin == "dynamic" else None
    if path:
        return rt.register_backend(path, origin="dynamic", source=path), path, None
    raise SubjectError(
        f"no backend {name!r}: no 'nnplug.backends' entry point of that name (installed: "
        f"{_names(discovery.BACKENDS_GROUP)}) and no library of that id in the native backend "
        f"folders; pip install the package, or pass --nnplug-backend-path PATH/TO/lib.so"
    )


def open_ops(rt: Runtime, name: str | None, library: str | None):
    """Register the op package (entry point ``name``) or native op library under test."""
    before = set(rt.ops)
    module = None
    if library:
        if not os.path.exists(library):
            raise SubjectError(f"--nnplug-op-library {library!r}: no such file")
        register = getattr(rt, "register_custom_ops_library", None)
        if register is None:
            raise SubjectError("this nnplug has no native custom-op support")
        register(os.path.realpath(library))
        source = os.path.realpath(library)
    else:
        ep = _entry_point(discovery.OPS_GROUP, name)
        if ep is None:
            raise SubjectError(
                f"no op package {name!r}: no 'nnplug.ops' entry point of that name (installed: "
                f"{_names(discovery.OPS_GROUP)}); pip install the package first"
            )
        source = discovery.describe(ep)
        try:
            obj = ep.load()
            module = sys.modules.get(ep.module)
        except Exception as e:
            raise SubjectError(f"op entry point {source} failed to load: {type(e).__name__}: {e}") from e
        if inspect.isclass(obj):
            obj = obj()
        if hasattr(obj, "op_type"):
            rt.register_custom_op(obj, override=bool(getattr(obj, "override", False)), source=source)
        elif callable(obj):
            obj(rt)
        else:
            raise SubjectError(f"op entry point {source} gave {type(obj).__name__}: expected a "
                               f"custom op class/instance or a function taking the Runtime")
    added = sorted(set(rt.ops) - before)
    if not added:
        raise SubjectError(f"{source} registered no custom op")
    return source, added, module


def open_subject(backend: str | None = None, backend_path: str | None = None,
                 op: str | None = None, op_library: str | None = None) -> Subject:
    rt = Runtime(CreationOptions.isolated())
    subject = Subject(rt)
    try:
        if backend or backend_path:
            subject.backend, subject.native_path, subject.entry_point = \
                open_backend(rt, backend, backend_path)
        if op or op_library:
            subject.op_source, subject.op_types, subject.op_module = open_ops(rt, op, op_library)
            if subject.backend is None or subject.backend.device_type != "cpu":
                rt.register_backend(HostBackend)
            subject.backends_for_ops = list(rt.backends)
    except SubjectError:
        rt.close()
        raise
    except Exception as e:
        rt.close()
        raise SubjectError(f"{type(e).__name__}: {e}") from e
    return subject

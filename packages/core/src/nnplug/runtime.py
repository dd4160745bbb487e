"""Runtime: the plugins (discovery, registration, the names backends publish) and the entry
to :mod:`nnplug.pipeline`, which makes a Network of a model."""

from __future__ import annotations

import atexit
import inspect
import os
import threading
from dataclasses import dataclass

from . import discovery, ranking, registry
from .backend import Backend
from .customop import CustomOp, PythonCustomOp
from .device import device_type_name
from .errors import (
    ArgumentTypeError,
    BackendNotAvailableError,
    InvalidArgumentError,
    NnplugError,
    PluginError,
)
from .functions import FunctionDef, make_function_def
from .network import Network
from .plugin_import import EntryPointImportError, load_entry_point
from .plugins import BACKENDS, RESERVED_IDS, BackendInfo, LoadError, report
from .precision_hint import hinted_targets
from .registry import register_func
from .target import Target, register_target_kind

OPTIMIZATION_LEVELS = ("disable", "basic", "all")
"""Graph optimisation levels of ``Runtime.load`` (see there)."""



@dataclass
class CreationOptions:
    """How a Runtime finds its plugins."""

    dynamic_backends_path: str | list[str] | None = None
    """Folders of native backend .so files; str split on ':' or a list. None: the
    NNPLUG_BACKEND_PATH environment variable, else ``backends/`` beside the core
    (``nnplug.native.default_backend_dir()``; it need not exist, and does not in a fresh
    install). "" or []: load none."""
    custom_op_paths: str | list[str] | None = None
    """Folders of ``libnnplug_op_*.so`` custom-op libraries (same rules, variable
    NNPLUG_CUSTOM_OP_PATH, else ``ops/`` beside the core: ``nnplug.native.default_op_dir()``,
    as ``nnplug.native.default_backend_dir()`` is the backends' default)."""
    backend_preference: list[str] | None = None
    """Default backend order for ``load()`` and sessions without providers; None: the
    ``NNPLUG_BACKENDS`` environment variable, else the order the backends declare
    (``nnplug.ranking.default_order``: higher ``priority`` first, ties in registration order)."""
    entry_points: bool = True
    """Read installed plugins (``nnplug.backends`` / ``nnplug.ops`` entry points)."""
    disable_op_overrides: bool = False
    """Ignore custom ops that override standard ONNX ops (use the backends' kernels)."""
    disabled_plugins: list[str] | None = None
    """Entry point names to skip, on top of NNPLUG_DISABLE_PLUGINS."""
    isolate_native: bool = False
    """Load each native library (backend or custom-op .so) in a child process first; one
    that crashes, aborts or hangs there is a load error (stage ``crashed``) and is never
    loaded into this process. Costs a Python start per library (see docs/dynamic-backends.md).
    Screening only: what passes runs in this process (``isolate_plugins`` runs it elsewhere)."""
    isolate_plugins: bool | str | list[str] | None = None
    """Native backends to run in a worker process of their own, so that a crash in them is a
    BackendError, not the end of this process: True or ``"*"`` for every one, else backend
    ids, custom op types and library file names (a comma-separated string or a list). None:
    the NNPLUG_ISOLATE_PLUGINS environment variable; False or "": none. Backends of any device
    and the CPU implementations of ops (see "Isolated backends" in docs/dynamic-backends.md)."""
    isolate_timeout: float | None = None
    """Seconds an isolated backend's worker may take for one call (a run, a build) before it
    is stopped and the call raises a BackendError. None: NNPLUG_ISOLATE_TIMEOUT, else no limit."""

    placement: str | None = None
    """How nodes claimed by several backends are placed: ``"order"`` (the first backend in
    the preference order that claims a node runs it) or ``"measure"`` (a partition another
    host backend could run whole is timed on both at load and runs on the faster; decisions
    are remembered on disk, see :mod:`nnplug.stages.measure`). None: ``NNPLUG_PLACEMENT``, else
    ``"order"``."""

    @classmethod
    def isolated(cls, **overrides) -> CreationOptions:
        """Options that load no plugin by themselves (no entry points, no backend or op
        folders): for tests, which register exactly what they need."""
        return cls(**{"entry_points": False, "dynamic_backends_path": "", "custom_op_paths": "",
                      **overrides})


class Runtime:
    """Holds the backends and custom ops a process can use; loads networks.

    Creating one reads entry points (metadata only) and scans the native plugin folders;
    plugins that fail are logged, recorded in ``load_errors`` and skipped.
    """

    def __init__(self, options: CreationOptions | None = None):
        self.options = options or CreationOptions()
        self.load_errors: list[LoadError] = []
        self.disabled: list[str] = []
        self._disabled_dists: dict[str, str] = {}  # "group:name" -> distribution
        self._backends: dict[str, BackendInfo] = {}
        self._leases: dict[str, object] = {}  # backend id -> lease key
        self._ops: dict[str, CustomOp] = {}
        self._functions: dict[tuple[str, str], FunctionDef] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._op_source: str | None = None
        disabled = discovery.disabled_names(self.options.disabled_plugins)
        if self.options.entry_points:
            self._load_backend_entry_points(disabled)
        self._load_dynamic_backends()
        if self.options.entry_points:
            self._load_op_entry_points(disabled)
        self._load_op_libraries()

    # -- public views ---------------------------------------------------------------------
    @property
    def backends(self) -> dict[str, BackendInfo]:
        with self._lock:
            return dict(self._backends)

    @property
    def ops(self) -> dict[str, CustomOp]:
        with self._lock:
            return dict(self._ops)

    @property
    def functions(self) -> dict[tuple[str, str], FunctionDef]:
        """(domain, op type) -> the function body a plugin registered (``""`` is ai.onnx)."""
        with self._lock:
            return dict(self._functions)

    def __repr__(self) -> str:
        return (f"<nnplug.Runtime backends=[{', '.join(self._backends)}] "
                f"ops=[{', '.join(self._ops)}] load_errors={len(self.load_errors)}>")

    # -- backends -------------------------------------------------------------------------
    def register_backend(self, obj, *, origin: str = "api", source: str | None = None) -> BackendInfo:
        """Register a Backend (subclass, instance or factory) or a native backend .so path."""
        if isinstance(obj, (str, os.PathLike)):
            return self._register_library(os.fspath(obj), origin, source)
        key = _Identity(obj)
        src = source or f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
        return self._register(key, lambda: _instantiate(obj), origin, src)

    def _register_library(self, path: str, origin: str, source: str | None) -> BackendInfo:
        from .native import load_backend_library

        real = os.path.realpath(path)
        names = self._isolation_names()
        if names:
            info = self._register_isolated(path, real, names, origin, source)
            if info is not None:
                return info
        if self.options.isolate_native:
            from .native.probe import probe_once

            probe_once(real, "backend")
        with self._lock:  # a duplicate id is refused before the library's init runs
            taken = {bid: info.source for bid, info in self._backends.items()}
        return self._register(("library", real), lambda: load_backend_library(real, taken),
                              origin, source or real)

    def _isolation_names(self) -> frozenset[str]:
        from .native.isolated import isolation_names

        return isolation_names(self.options.isolate_plugins)

    def _register_isolated(self, path: str, real: str, names, origin: str,
                           source: str | None) -> BackendInfo | None:
        """Register the library at ``path`` as an IsolatedBackend when ``names`` name it (by
        file name; by id, learnt by loading it in its worker); None when they do not."""
        from .native import isolated

        timeout = isolated.timeout_of(self.options.isolate_timeout)
        with self._lock:
            taken = {bid: info.source for bid, info in self._backends.items()}
        key = ("isolated-library", real)
        made = []
        if not isolated.names_library(names, path) and not BACKENDS.count(key):
            backend = isolated.IsolatedBackend(real, taken, timeout)  # learns its id
            if backend.id not in names:
                backend.close()
                return None
            made.append(backend)
        try:
            return self._register(
                key, lambda: made.pop() if made else isolated.IsolatedBackend(real, taken, timeout),
                origin, source or real)
        finally:
            for backend in made:
                backend.close()

    def _register(self, key, create, origin: str, source: str, version: str | None = None) -> BackendInfo:
        backend = BACKENDS.acquire(key, lambda: _activate(create()), _deactivate)
        try:
            bid = backend.id
            if not isinstance(bid, str) or not bid or bid in RESERVED_IDS:
                raise PluginError(f"invalid backend id {bid!r} (reserved or empty)")
            with self._lock:
                if bid in self._backends:
                    raise PluginError(
                        f"duplicate backend id {bid!r}: already registered from "
                        f"{self._backends[bid].source}"
                    )
                if version is None:  # a native library's table has one; entry points: the dist's
                    version = getattr(backend, "version", None)
                info = BackendInfo(bid, origin, source, device_type_name(backend.device_type_number),
                                   backend, version)
                self._backends[bid] = info
                self._leases[bid] = key
            return info
        except Exception:
            BACKENDS.release(key)
            raise

    def _loaded_entry_points(self, group: str, disabled: set[str]):
        """(entry point, source text, loaded object) for each enabled entry point of
        ``group`` that imports; the others are recorded as disabled or as load errors."""
        for ep in discovery.entry_points(group):
            if ep.name in disabled or "*" in disabled:
                self.disabled.append(f"{ep.group}:{ep.name}")
                self._disabled_dists[f"{ep.group}:{ep.name}"] = discovery.dist_name(ep)
                continue
            source = discovery.describe(ep)
            try:
                obj = load_entry_point(ep)
            except EntryPointImportError as e:  # sys.exit() in a plugin included
                report(self.load_errors, LoadError(source, "import", e.reason, e.fix))
                continue
            yield ep, source, obj

    def _load_backend_entry_points(self, disabled: set[str]) -> None:
        for ep, source, obj in self._loaded_entry_points(discovery.BACKENDS_GROUP, disabled):
            try:
                if callable(obj) and not inspect.isclass(obj) and not isinstance(obj, Backend):
                    obj = obj()  # a factory: of a Backend, or of a native library path
                if not (isinstance(obj, (Backend, str, os.PathLike))
                        or (inspect.isclass(obj) and issubclass(obj, Backend))):
                    raise ArgumentTypeError(
                        f"entry point gave {type(obj).__name__}, expected a nnplug.Backend "
                        f"(class, instance or factory) or the path of a native backend library"
                    )
                self.register_backend(obj, origin="entry_point", source=source)
                self._backends[_last_id(self, source)].version = discovery.dist_version(ep)
            except Exception as e:
                stage = getattr(e, "stage", "type" if isinstance(e, TypeError) else "register")
                report(self.load_errors, LoadError(source, stage, str(e), getattr(e, "fix", None)))

    def _load_dynamic_backends(self) -> None:
        if self.options.dynamic_backends_path in ("", []):
            return  # an empty override disables native backend loading
        from .native import folders

        folders.load_folders(folders.BACKENDS, self.options.dynamic_backends_path,
                             self._register_folder_library, self._report)

    def _register_folder_library(self, path: str) -> None:
        try:
            self._register_library(path, "dynamic", None)
        except PluginError as e:  # the Runtime's own refusals, named as load stages
            text = str(e)
            stage = ("duplicate id" if "duplicate backend id" in text else
                     "invalid id" if "invalid backend id" in text else None)
            if stage is None or hasattr(e, "stage"):
                raise
            from .native.loader import LibraryLoadError

            raise LibraryLoadError(path, stage, text) from None

    def _report(self, err: LoadError) -> None:
        report(self.load_errors, err)

    # -- custom ops -----------------------------------------------------------------------
    def register_custom_op(self, obj, *, override: bool = False, source: str | None = None) -> CustomOp:
        """Register a Python custom op object (``op_type``, ``shape_infer``, ``compute``), or
        a ready CustomOp. Do it before ``load()``."""
        source = source or self._op_source
        op = obj if isinstance(obj, CustomOp) else PythonCustomOp(
            obj, source or f"{type(obj).__module__}.{type(obj).__qualname__}", override)
        with self._lock:
            if op.op_type in self._ops:
                raise PluginError(
                    f"custom op {op.op_type!r} is already registered from "
                    f"{self._ops[op.op_type].source}; each op type can be registered once"
                )
            self._ops[op.op_type] = op
        return op

    def register_function(self, body, *, domain: str | None = None, op_type: str | None = None,
                          source: str | None = None) -> FunctionDef:
        """Register the function body of an op ONNX does not define: an ``onnx.FunctionProto``
        (its ``domain`` and ``name`` say which op), or a builder ``build(node, inputs, opsets)
        -> FunctionProto | None`` with ``domain=`` and ``op_type=`` (see
        :mod:`nnplug.functions`). Nodes of that op that no backend claims are replaced by
        the body (docs/function-expansion.md). Do it before ``load()``."""
        fdef = make_function_def(body, domain, op_type, source or self._op_source or
                                 getattr(body, "__module__", None) or "the API")
        key = (fdef.domain, fdef.op_type)
        with self._lock:
            if key in self._functions:
                raise PluginError(
                    f"a function for op {fdef.op_type!r} of domain {fdef.domain or 'ai.onnx'!r} "
                    f"is already registered from {self._functions[key].source}; each op can "
                    f"have one")
            self._functions[key] = fdef
        return fdef

    def register_custom_ops_library(self, path) -> list[CustomOp]:
        """Load a native custom-op library (``nnplug/custom_op.h``, or one built for
        onnxruntime's custom-op C API: ``RegisterCustomOps``) and register its ops.

        All or none: a library whose op type is already registered is refused. Raises
        ``nnplug.PluginError`` (with ``stage``, ``reason``, ``fix``) when it cannot be loaded."""
        from .native.op_registration import register_library

        if self.options.isolate_native:
            from .native.probe import probe_once

            probe_once(os.fsdecode(os.fspath(path)), "op library")
        return register_library(self, path)

    def _load_op_entry_points(self, disabled: set[str]) -> None:
        for _ep, source, obj in self._loaded_entry_points(discovery.OPS_GROUP, disabled):
            try:
                self._register_op_plugin(obj, source)
            except Exception as e:
                report(self.load_errors, LoadError(source, getattr(e, "stage", "register"), str(e)))

    def _register_op_plugin(self, obj, source: str) -> None:
        """An ``nnplug.ops`` entry point gives a function that takes the Runtime and
        registers its ops (through the public API), or a custom op class/instance."""
        if inspect.isclass(obj):
            obj = obj()
        if hasattr(obj, "op_type"):
            self.register_custom_op(obj, override=bool(getattr(obj, "override", False)),
                                    source=source)
        elif callable(obj):
            self._op_source = source  # ops it registers are attributed to the entry point
            try:
                obj(self)
            finally:
                self._op_source = None
        else:
            raise ArgumentTypeError(
                f"entry point gave {type(obj).__name__}; expected a custom op class/instance or "
                f"a function taking the Runtime"
            )

    def _load_op_libraries(self) -> None:
        """Native custom-op libraries from ``custom_op_paths`` (see ``nnplug.native.folders``)."""
        if self.options.custom_op_paths in ("", []):
            return  # an empty override disables native op loading
        from .native import folders

        folders.load_folders(folders.OP_LIBRARIES, self.options.custom_op_paths,
                             self.register_custom_ops_library, self._report)

    # -- loading networks -----------------------------------------------------------------
    def load(self, model, backends: list[str] | None = None,
             targets: dict[str, str | dict | Target] | None = None, *,
             optimization: str = "all", external_data_dir=None, plan_cache=None) -> Network:
        """Load, check, assign and compile ``model`` (path, bytes or onnx.ModelProto).

        ``backends``: preference order (default: the creation options' order, else all
        registered backends). ``targets``: backend id -> Target (or JSON/dict) to compile for.
        ``optimization``: ``"all"`` (fold constant subgraphs, run repeated computations
        once, let backends fuse nodes), ``"basic"`` (fold and merge only: every node is its own
        kernel) or ``"disable"`` (none of them).
        ``external_data_dir``: the folder of the model's external data files when ``model``
        is bytes or a ModelProto (a path finds them beside the model file).
        ``plan_cache``: keep what the stages decide on disk and reuse it on the next load of
        the same model with the same plugins and options (:mod:`nnplug.plan_cache`): True
        (the default folder), a folder, False (off); None: as ``NNPLUG_PLAN_CACHE`` says.
        """
        if optimization not in OPTIMIZATION_LEVELS:
            raise InvalidArgumentError(
                f"optimization {optimization!r} is not one of {', '.join(OPTIMIZATION_LEVELS)}")
        if self._closed:
            raise NnplugError("this Runtime is closed")
        chosen = self._choose_backends(backends)
        with self._lock:
            ops = dict(self._ops)
        from .pipeline import load_network  # the stages import onnx: on the first load

        targets = hinted_targets(chosen, targets or {})  # NNPLUG_PRECISION, see there
        from .plan_cache import PlanCache, cache_folder

        folder = cache_folder(plan_cache)
        return load_network(self, model, chosen, ops, targets, optimization=optimization,
                            external_data_dir=external_data_dir,
                            cache=PlanCache(folder) if folder else None)

    def default_backends(self, policy: str = "default") -> list[str]:
        """The backend order used when none is given: ``CreationOptions.backend_preference``,
        else ``NNPLUG_BACKENDS``, else the order the backends declare (see
        :mod:`nnplug.ranking`), with ``policy``'s device types first."""
        explicit = self.options.backend_preference or ranking.env_order()
        if explicit:
            return list(explicit)
        with self._lock:
            infos = list(self._backends.values())
        return ranking.default_order(infos, policy)

    def devices(self, policy: str = "default") -> list:
        """Every (backend, device) pair this Runtime can run on, best first: a list of
        :class:`nnplug.ranking.BackendDevice` (backend id, device, class "cpu"/"gpu"/"npu"/
        "accelerator", vendor, name, onnxruntime provider names)."""
        with self._lock:
            infos = list(self._backends.values())
        return ranking.backend_devices(infos, policy)

    def _choose_backends(self, names) -> list[BackendInfo]:
        with self._lock:
            available = dict(self._backends)
        if names is None:
            names = self.default_backends()
        if isinstance(names, str):
            names = [names]
        chosen = []
        for name in names:
            if name not in available:
                raise BackendNotAvailableError(
                    f"backend {name!r} is not available (installed: "
                    f"{', '.join(available) or 'none'}){self.missing_backend_hint(name)}")
            chosen.append(available[name])
        return chosen

    def missing_backend_hint(self, name: str) -> str:
        """Why backend ``name`` is not registered and what to do, as a message tail: it failed
        to load, its entry point is disabled, or it is not installed."""
        why = next((f"; it failed to load: {e}" for e in self.load_errors
                    if name in e.source), "")
        if why:
            return why
        off = [d for d in self.disabled if d == f"{discovery.BACKENDS_GROUP}:{name}"]
        if off:
            dist = self._disabled_dists.get(off[0], "its distribution")
            return (f"; {dist} is installed but its entry point is disabled ({', '.join(off)}: "
                    f"see {discovery.DISABLE_ENV} and CreationOptions.disabled_plugins)")
        return f"; {discovery.install_hint(name)}"

    def hold_backends(self, infos: list[BackendInfo]) -> list:
        """The lease keys of these backends, each retained once for the caller, who releases
        them (``nnplug.network.release_plan``): the backends stay loaded while a plan built on
        them lives, even if this Runtime closes first."""
        keys = []
        with self._lock:
            for info in infos:
                key = self._leases.get(info.id)
                if key is not None:
                    BACKENDS.retain(key)
                    keys.append(key)
        return keys

    # -- life cycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Release this Runtime's backends (networks still loaded keep theirs alive)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            keys = list(self._leases.values())
            self._leases.clear()
            ops = list(self._ops.values())
        for op in ops:
            release = getattr(op, "release", None)
            if release is not None:
                release()
        for key in keys:
            BACKENDS.release(key)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_default: Runtime | None = None
_default_lock = threading.Lock()


def default_runtime() -> Runtime:
    """The one process-wide Runtime (created on first use) that sessions and the ONNX backend
    interface share when they are given none."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Runtime()
            atexit.register(_default.close)  # before interpreter teardown, not during it
        return _default


def set_default_runtime(rt: Runtime | None) -> None:
    """Use ``rt`` (e.g. one with test backends registered) as the default; None: create one
    on next use."""
    global _default
    with _default_lock:
        _default = rt


def _last_id(rt: Runtime, source: str) -> str:
    return next(bid for bid, info in reversed(rt._backends.items()) if info.source == source)


def _instantiate(obj) -> Backend:
    if inspect.isclass(obj):
        obj = obj()
    elif callable(obj) and not isinstance(obj, Backend):
        obj = obj()
    if not isinstance(obj, Backend):
        raise ArgumentTypeError(f"expected a nnplug.Backend, got {type(obj).__name__}")
    return obj


def _activate(backend: Backend) -> Backend:
    """First use of a backend in this process: publish its target kind and functions, owned
    by the backend (two live backends may share an id: the newest is visible, and when it is
    withdrawn the previous one is visible again; see :mod:`nnplug.registry`)."""
    if not isinstance(backend, Backend):
        raise ArgumentTypeError(f"expected a nnplug.Backend, got {type(backend).__name__}")
    kind_args = dict(backend.target_kind())
    register_target_kind(backend.target_kind_name, override=True, owner=backend, **kind_args)
    # asked for on first use: a device API may import its driver's bindings (start-up time)
    register_func(f"device_api.{backend.id}", backend.device_api, override=True, owner=backend)
    register_func(f"target.build.{backend.target_kind_name}", backend.build, override=True,
                  owner=backend)
    return backend


def _deactivate(backend: Backend) -> None:
    registry.withdraw(backend)
    backend.close()


class _Identity:
    """A lease key for an object by identity that keeps the object alive (so its id()
    cannot be reused by another object while the lease exists)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj


__all__ = ["CreationOptions", "Runtime", "Network", "default_runtime", "set_default_runtime"]

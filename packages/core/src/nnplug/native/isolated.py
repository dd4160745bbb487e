"""Isolated native backends: the library runs in a worker process of its own.

``CreationOptions(isolate_plugins=...)`` / ``NNPLUG_ISOLATE_PLUGINS`` (``*``, or backend ids, op
types and library file names, comma-separated) make the Runtime register an
:class:`IsolatedBackend` in place of a :class:`~nnplug.native.backend.NativeBackend`, and
:class:`IsolatedCustomOp` objects in place of a custom-op library's NativeCustomOp. The application keeps the core (it
loads, places and compiles the model); the worker (:mod:`nnplug.native.worker`) loads the .so
and answers ``supports``, builds the kernels and runs them. Constants cross once per built
partition, inputs and outputs through shared memory on every run (:mod:`nnplug.native.wire`).

When the worker dies (a signal, ``exit()``, the user's timeout), the call raises
:class:`PluginCrashed`, a BackendError naming the backend, what it was doing (the node whose
kernel ran) and how it died; the next call starts a fresh worker, and each partition is built
again there before it runs. Calls from several threads take turns: one lock per worker.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref

import numpy as np

from ..backend import Backend, Module
from ..customop import BoundOp, CustomOp
from ..device_api import HostDeviceAPI, attr_kind
from ..errors import BackendError, CustomOpError, InvalidArgumentError
from ..tensor import Tensor, as_contiguous
from . import strings, wire
from .loader import LibraryLoadError, register_library_device_type

log = logging.getLogger("nnplug")

ENV_VAR = "NNPLUG_ISOLATE_PLUGINS"
TIMEOUT_ENV_VAR = "NNPLUG_ISOLATE_TIMEOUT"
LOAD_TIMEOUT_S = 60.0  # loading takes milliseconds (and a Python start): a minute means it hangs
_EXIT_WAIT_S = 5.0


# -- which plugins -------------------------------------------------------------------------------
def isolation_names(option=None) -> frozenset[str]:
    """The names to isolate: ``option`` (``CreationOptions.isolate_plugins``: True for every
    native plugin, a comma-separated string or a list), else NNPLUG_ISOLATE_PLUGINS."""
    if option is None:
        option = os.environ.get(ENV_VAR, "")
    if option is True:
        return frozenset({"*"})
    if option is False:
        return frozenset()
    if isinstance(option, str):
        items = option.split(",")
    else:
        try:
            items = [str(x) for x in option]
        except TypeError:
            raise InvalidArgumentError(
                f"isolate_plugins must be True, a comma-separated string or a list of names, "
                f"not {option!r}") from None
    return frozenset(x.strip() for x in items if x.strip())


def names_library(names, path: str) -> bool:
    """Whether ``names`` isolate the library at ``path`` by its file name (or all of them)."""
    return "*" in names or os.path.basename(path) in names or \
        os.path.basename(os.path.realpath(path)) in names


def timeout_of(option=None) -> float | None:
    """Seconds a call may take in the worker (``CreationOptions.isolate_timeout``, else
    NNPLUG_ISOLATE_TIMEOUT); None: no limit."""
    if option is None:
        text = os.environ.get(TIMEOUT_ENV_VAR, "").strip()
        if not text:
            return None
        try:
            option = float(text)
        except ValueError:
            raise InvalidArgumentError(
                f"{TIMEOUT_ENV_VAR}={text!r} is not a number of seconds") from None
    option = float(option)
    if not option > 0:
        raise InvalidArgumentError(f"isolate_timeout must be > 0 seconds, not {option}")
    return option


# -- errors --------------------------------------------------------------------------------------
def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class PluginCrashed(BackendError):
    """The worker process of an isolated backend died (or was stopped after its timeout).

    ``plugin`` (the backend id or library path), ``doing`` (what it was doing, e.g. ``running
    node 'r' (op Relu)``), ``signal`` (e.g. ``"SIGSEGV"``, or None), ``exit_status`` (or None),
    ``timed_out``, ``last_words`` (its last line on stderr, or "")."""

    def __init__(self, plugin, doing, how, signal=None, exit_status=None, timed_out=False,
                 last_words="", kind="backend"):
        self.plugin, self.doing, self.how, self.signal = plugin, doing, how, signal
        self.exit_status, self.timed_out, self.last_words = exit_status, timed_out, last_words
        tail = f"; its last words: {strings.shorten(last_words)!r}" if last_words else ""
        again, fix = (("builds the model's partitions again", "the backend's authors with the "
                       "model; run the model on another backend meanwhile") if kind == "backend"
                      else ("binds the op's nodes again", "the op library's authors with the "
                            "model"))
        super().__init__(
            f"{plugin} {how} while {doing}{tail}. The application goes on: the next call starts "
            f"a fresh worker process and {again} (fix: report it to {fix})")


# -- the worker process --------------------------------------------------------------------------
class _WorkerLock:
    """A worker's channel lock (reentrant) that runs, when its holder lets it go, the closes
    left to the holder (:meth:`WorkerProcess.close_soon`)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0  # changed only by the owner
        self.deferred: collections.deque = collections.deque()

    def __enter__(self):
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self.leave()

    def leave(self) -> None:
        """Let the lock go (after ``with`` or a :meth:`try_enter` that returned True), running
        first, if this is the outermost hold, the closes left to the holder."""
        try:
            while self._depth == 1 and self.deferred:
                try:
                    close = self.deferred.popleft()
                except IndexError:  # taken meanwhile
                    break
                try:
                    close()
                except Exception as e:  # noqa: BLE001 - a close must not fail the holder's call
                    log.debug("nnplug: a deferred close failed: %s", e)
        finally:
            self._depth -= 1
            if not self._depth:
                self._owner = None
            self._lock.release()

    def owned_here(self) -> bool:
        return self._owner == threading.get_ident()

    def try_enter(self) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        self._owner = threading.get_ident()
        self._depth += 1
        return True


class WorkerProcess:
    """One worker process for one library, started on demand and again after it died.

    Every request holds :attr:`lock` (callers take it, see :meth:`call`); the generation
    counts the starts, so a module knows when it must be built again."""

    def __init__(self, path: str, timeout: float | None, kind: str = "backend"):
        self.path = path
        self.timeout = timeout
        self.kind = kind  # "backend" or "op library"
        self.lock = _WorkerLock()
        self.generation = 0
        self.info: dict | None = None
        self.label = f"native {'backend' if kind == 'backend' else 'custom-op'} library ({path})"
        self._proc = None
        self._sock = None
        self._status = None
        self._inputs: wire.Region | None = None
        self._outputs: wire.Region | None = None
        self._words: collections.deque = collections.deque(maxlen=8)
        self._setup: list = []  # requests replayed in a fresh worker (set_num_threads)
        _ALL.add(self)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _forget(self) -> None:
        """In a forked child: the parent's worker and channel are not ours to use (our
        requests would interleave with the parent's); the next call starts our own."""
        self.lock = _WorkerLock()
        if self._sock is not None:
            self._sock.close()  # our copy of the descriptor only
        self._proc = self._sock = None
        for r in (self._status, self._inputs, self._outputs):
            if r is not None:
                r.close()
        self._status = self._inputs = self._outputs = None

    def close_soon(self, close) -> None:
        """Run ``close()`` (which may send requests) under the lock: now where the lock is free,
        else when its holder lets it go. Closes come from finalizers, which a garbage collection
        runs on whatever thread allocates: waiting for the lock there deadlocked a thread that
        was starting while the holder waited for it to start, and a close sent from inside the
        holder's own exchange would come between its request and what it reads after."""
        if not self.lock.owned_here() and self.lock.try_enter():
            try:
                close()
            finally:
                self.lock.leave()
            return
        self.lock.deferred.append(close)

    # -- starting and stopping -------------------------------------------------------------
    def _spawn(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status = wire.Region.create(wire.STATUS_BYTES, "nnplug-status")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nnplug.native.worker", str(child.fileno()), str(status.fd)],
                pass_fds=(child.fileno(), status.fd), stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=env)
        except BaseException:
            parent.close()
            status.close()
            raise
        finally:
            child.close()
        self._proc, self._sock, self._status = proc, parent, status
        self._words = collections.deque(maxlen=8)
        threading.Thread(target=_forward_stderr, args=(proc.stderr, self._words),
                         name=f"nnplug-worker-{proc.pid}-stderr", daemon=True).start()
        self.generation += 1

    def start(self, taken=()) -> dict:
        """Start the worker and load the library there; its table's facts. LibraryLoadError
        (stage ``crashed`` when the worker died loading it)."""
        with self.lock:
            if self._proc is not None:
                return self.info
            self._spawn()
            msg = ("load", self.path, dict(taken) if isinstance(taken, dict)
                   else {t: "" for t in taken}) if self.kind == "backend" else \
                ("load_ops", self.path)
            try:
                info = self._request(msg, timeout=LOAD_TIMEOUT_S if self.timeout is None
                                     else max(self.timeout, LOAD_TIMEOUT_S))
            except PluginCrashed as e:
                tail = f"; its last words: {strings.shorten(e.last_words)!r}" if e.last_words else ""
                raise LibraryLoadError(
                    self.path, "crashed", f"its worker process {e.how} while {e.doing}{tail}",
                    f"the {self.kind} crashes while it is loaded: do not install it (report it to "
                    f"its authors); remove it from the folder") from None
            except BaseException:
                self.stop()
                raise
            self.info = info
            if self.kind == "backend":
                self.label = f"native backend {info['id']!r} ({self.path})"
            for msg in self._setup:
                self._request(msg)
            return info

    def stop(self) -> None:
        """End the worker (end of file on its socket, then a kill if it lingers)."""
        with self.lock:
            proc, self._proc = self._proc, None
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            if proc is not None:
                try:
                    proc.wait(_EXIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._drop_regions()

    def _drop_regions(self):
        for r in (self._status, self._inputs, self._outputs):
            if r is not None:
                r.close()
        self._status = self._inputs = self._outputs = None

    # -- requests --------------------------------------------------------------------------
    def call(self, msg, fds=(), timeout=None):
        """Send ``msg`` and wait for its reply (starting the worker first if need be)."""
        with self.lock:
            if self._proc is None:
                self.start()
            return self._request(msg, fds, timeout)

    def _request(self, msg, fds=(), timeout=None):
        timeout = self.timeout if timeout is None else timeout
        try:
            wire.send(self._sock, msg, fds)
            reply, got = wire.recv(self._sock, timeout)
        except wire.ChannelTimeout:
            self._proc.kill()
            raise self._died(timed_out=timeout) from None
        except (wire.ChannelClosed, BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        except BaseException:  # KeyboardInterrupt while waiting: the reply would come to the
            self._abandon()    # next request, a wrong answer; this worker is done with
            raise
        if reply[0] == "ok":
            self._got = got
            return reply[1]
        for fd in got:
            os.close(fd)
        raise _rebuilt(*reply[1:])

    def _abandon(self) -> None:
        """Kill the worker after its channel was left mid-request (out of step)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._drop_regions()

    def received_fds(self) -> list[int]:
        """The file descriptors that came with the last reply (taken: the caller owns them)."""
        got, self._got = getattr(self, "_got", []), []
        return got

    def _died(self, timed_out=None) -> PluginCrashed:
        proc, status = self._proc, self._status
        doing = "doing something unknown"
        if status is not None:
            raw = bytes(status.map[:wire.STATUS_BYTES]).split(b"\0", 1)[0]
            doing = raw.decode("utf-8", "replace") or doing
        try:
            rc = proc.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:  # it closed its socket but lives on: stop it
            proc.kill()
            rc = proc.wait()
        self._proc = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._drop_regions()
        if proc.stderr is not None:  # let the forwarder read what is left
            _join_forwarder(proc.pid)
        words = self._words[-1] if self._words else ""
        where = f"{self.label[:-1]}, worker process {proc.pid})"
        if timed_out:
            return PluginCrashed(where, doing, f"did not answer within {timed_out:g} s (the "
                                 f"isolate_timeout) and was stopped", signal=signal_name(-rc)
                                 if rc < 0 else None, timed_out=True, last_words=words,
                                 kind=self.kind)
        if rc < 0:
            sig = signal_name(-rc)
            hint = " (out of memory?)" if sig == "SIGKILL" else ""
            return PluginCrashed(where, doing, f"died of {sig}{hint}", signal=sig,
                                 last_words=words, kind=self.kind)
        return PluginCrashed(where, doing, f"exited with status {rc} (the plugin called exit())",
                             exit_status=rc, last_words=words, kind=self.kind)

    # -- tensors ---------------------------------------------------------------------------
    def put_inputs(self, arrays) -> tuple[list, tuple]:
        """Write ``arrays`` into the input region: (specs for the worker, fds to send)."""
        shm = [a for a in arrays if wire.in_region(a)]
        place, total = wire.layout(shm)
        fds = ()
        if self._inputs is None or self._inputs.nbytes < total:
            size = max(total, 2 * (self._inputs.nbytes if self._inputs else 0), 1 << 16)
            if self._inputs is not None:
                self._inputs.close()
            self._inputs = wire.Region.create(size, "nnplug-inputs")
            fds = (self._inputs.fd,)
        specs, it = [], iter(place)
        for a in arrays:
            if wire.in_region(a):
                off, shape, dtype = next(it)
                self._inputs.array(off, shape, dtype)[...] = a
                specs.append(("shm", off, shape, dtype))
            else:
                specs.append(("obj", a))
        return specs, fds

    def take_outputs(self, specs) -> list[np.ndarray]:
        """Copies of the outputs the worker left in its output region (mapped on first use)."""
        for fd in self.received_fds():
            if self._outputs is not None:
                self._outputs.close()
            self._outputs = wire.Region(fd)
        return [np.array(self._outputs.array(*s[1:])) if s[0] == "shm" else s[1] for s in specs]


_ALL: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for w in list(_ALL):
        w._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_all_at_exit() -> None:
    """Stop the workers still running, before the interpreter finalizes: otherwise each ends
    when finalization closes its socket, and its stderr forwarder (a daemon thread) wakes up
    to read the end while the interpreter is being torn down. A worker whose lock a thread
    still holds (a run abandoned mid-flight) is left to end with the process."""
    for w in list(_ALL):
        if not w.lock.try_enter():
            continue
        try:
            pid = w.pid
            w.stop()
        finally:
            w.lock.leave()
        if pid is not None:
            _join_forwarder(pid)


atexit.register(_stop_all_at_exit)


def _forward_stderr(stream, words) -> None:
    """Pass the worker's stderr on to ours, keeping its last lines for error messages."""
    try:
        for line in iter(stream.readline, b""):
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                words.append(text)
            try:
                sys.stderr.write(line.decode("utf-8", "replace"))
            except (ValueError, OSError):  # our stderr is closed (interpreter exit)
                pass
    finally:
        stream.close()


def _join_forwarder(pid: int) -> None:
    for t in list(threading.enumerate()):
        if t.name == f"nnplug-worker-{pid}-stderr":
            t.join(1.0)


def _rebuilt(cls_name: str, message: str, extra):
    """The worker's exception, as the same nnplug class where there is one."""
    if extra is not None:
        return LibraryLoadError(*extra)
    from .. import errors

    cls = getattr(errors, cls_name, None)
    if isinstance(cls, type) and issubclass(cls, errors.NnplugError):
        try:
            return cls(message)
        except TypeError:
            pass
    return BackendError(f"{cls_name}: {message}")


# -- the backend -------------------------------------------------------------------------------
class _WorkerDeviceAPI(HostDeviceAPI):
    """Host memory for the partitions' tensors, which cross through shared memory; the
    device's attributes (its class, vendor, name) from the library in the worker."""

    def __init__(self, worker: WorkerProcess):
        self.worker = worker

    def get_attr(self, dev, kind):
        return self.worker.call(("get_attr", dev.device_type, dev.index, attr_kind(kind).value))


class IsolatedBackend(Backend):
    """A native backend whose library lives in a worker process. Its tensors cross through
    host shared memory: to the application it is a backend of host memory whatever its
    device, and the worker moves inputs to the device and outputs back (see worker.py)."""

    def __init__(self, path: str, taken=(), timeout: float | None = None):
        self.path = path
        self.worker = WorkerProcess(os.path.realpath(path), timeout)
        info = self.worker.start(taken)
        try:  # the same pair, and the same clash rule, in this process
            register_library_device_type(path, info["device_type"], info["device_type_name"])
        except LibraryLoadError:
            self.worker.stop()
            raise
        self.id = info["id"]
        self.device_type = info["device_type"]
        self.version = info["version"]
        self.priority = info["priority"]
        self.provider_names = info["provider_names"]
        self.abi_version = info["abi_version"]
        self._kind = info["target_kind"]
        self._threads = info["threads"]
        self._api = _WorkerDeviceAPI(self.worker)
        self._closed = False

    def __repr__(self):
        return f"<IsolatedBackend {self.id!r} from {self.path}, worker pid {self.worker.pid}>"

    def describe(self) -> str:
        return f"native backend {self.id!r} ({self.path}; isolated in a worker process)"

    def device_api(self):
        return self._api

    def target_kind(self) -> dict:
        # the partitions' tensors are host memory in this process, whatever the device
        return {"device_type": "cpu", "attrs": dict(self._kind["attrs"])}

    def set_num_threads(self, num_threads: int) -> None:
        if not self._threads:
            raise NotImplementedError(f"backend {self.id!r} has no set_num_threads")
        msg = ("set_num_threads", int(num_threads))
        with self.worker.lock:
            self.worker._setup[:] = [msg]  # a fresh worker gets it too
            self.worker.call(msg)

    def _ask(self, what, nodes, graph):
        values = getattr(graph, "values", {}) or {}
        constants = getattr(graph, "constants", {}) or {}
        names = {v for n in (nodes if isinstance(nodes, list) else [nodes])
                 for v in list(n.inputs) + list(n.outputs) if v}
        nodes = [wire.light_node(n) for n in nodes] if isinstance(nodes, list) else \
            wire.light_node(nodes)
        return self.worker.call((what, nodes, {k: v for k, v in values.items() if k in names},
                                 {k: v for k, v in constants.items() if k in names}))

    def supports(self, node, graph) -> bool:
        return bool(self._ask("supports", node, graph))

    def supports_fused(self, nodes, graph) -> bool:
        return bool(self._ask("supports_fused", list(nodes), graph))

    def static_shapes_only(self, node, graph):
        return self._ask("static_shapes_only", node, graph)

    def build(self, subgraph, target) -> Module:
        if self._closed:
            raise BackendError(f"{self.describe()} is closed")
        plan = _Plan(self, subgraph, target)
        module = Module({"run": plan.run, "kernels": lambda: list(plan.kernels),
                         "is_static": lambda: plan.is_static,
                         "worker_pid": lambda: self.worker.pid}, close=plan.close)
        weakref.finalize(module, plan.close)
        return module

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.worker.stop()


_keys = itertools.count(1)


class _Plan:
    """One built partition: its constants in a shared region (written once), and the key of
    the module the worker built from them; built again in a fresh worker before it runs."""

    def __init__(self, backend: IsolatedBackend, sg, target):
        self.backend = backend
        self.worker = backend.worker
        self.key = next(_keys)
        self.label = (f"partition of {len(sg.nodes)} node(s) from {sg.nodes[0].describe()}"
                      if sg.nodes else "an empty partition")
        consts = {k: as_contiguous(v) for k, v in (sg.constants or {}).items()}
        shm = {k: v for k, v in consts.items() if wire.in_region(v)}
        place, total = wire.layout(shm.values())
        self.layout = dict(zip(shm, place))
        self.inline = {k: v for k, v in consts.items() if k not in shm}
        self.region = None
        if total:
            region = wire.Region.create(total, "nnplug-constants")
            for name, (off, shape, dtype) in self.layout.items():
                region.array(off, shape, dtype)[...] = shm[name]
            self.region = region
        self.fields = {"nodes": [wire.light_node(n) for n in sg.nodes], "inputs": list(sg.inputs),
                       "outputs": list(sg.outputs), "values": dict(sg.values or {}),
                       "opsets": dict(getattr(sg, "opsets", {}) or {}),
                       "name": getattr(sg, "name", "subgraph")}
        self.target = str(target) if target is not None else None
        self.built_in = 0  # the worker generation that holds this module
        self.kernels, self.is_static = [], False
        self.closed = False
        with self.worker.lock:
            self._build()

    def _build(self):
        w = self.worker
        if w._proc is None:
            w.start()
        fds = (self.region.fd,) if self.region is not None else ()
        got = w._request(("build", self.key, self.fields, self.layout, self.inline, self.target,
                          self.label), fds)
        self.kernels, self.is_static = got["kernels"], got["is_static"]
        self.built_in = w.generation

    def run(self, inputs):
        arrays = [as_contiguous(t.numpy() if isinstance(t, Tensor) else np.asarray(t))
                  for t in inputs]
        w = self.worker
        with w.lock:
            if self.closed:
                raise BackendError(f"{self.backend.describe()}: the module was closed")
            if w._proc is None or self.built_in != w.generation:
                self._build()
            specs, fds = w.put_inputs(arrays)
            outs = w._request(("run", self.key, specs), fds)
            arrays = w.take_outputs(outs)
        return [Tensor.from_numpy(a) for a in arrays]

    def close(self):
        self.worker.close_soon(self._close)

    def _close(self):
        w = self.worker
        with w.lock:
            if self.closed:
                return
            self.closed = True
            try:
                if w._proc is not None and self.built_in == w.generation:
                    w._request(("close", self.key))
            except BackendError:
                pass  # the worker died: what it held went with it
            finally:
                if self.region is not None:
                    self.region.close()
                    self.region = None


# -- custom-op libraries -------------------------------------------------------------------------
class IsolatedOpLibrary:
    """A native custom-op library in a worker process: its ops run there (shape inference,
    init, prepare/compute, destroy), the CPU implementations on host memory and the OpenCL
    ones on an OpenCL context of the worker's own (see :meth:`IsolatedCustomOp.bind`)."""

    def __init__(self, path: str, timeout: float | None = None):
        self.path = path
        self.worker = WorkerProcess(os.path.realpath(path), timeout, "op library")
        infos = self.worker.start()
        self.ops = [IsolatedCustomOp(self, i) for i in infos]
        self._live = len(self.ops)
        self._lock = threading.Lock()

    def released(self) -> None:
        """One op was released (Runtime.close): the last one stops the worker."""
        with self._lock:
            self._live -= 1
            last = self._live == 0
        if last:
            self.worker.stop()


class IsolatedCustomOp(CustomOp):
    """One op type of an :class:`IsolatedOpLibrary`. To the application a bound node is a
    step on host memory whatever its target: its tensors cross through shared memory, and
    the worker moves them to and from its own OpenCL context for the GPU target."""

    def __init__(self, library: IsolatedOpLibrary, info: dict):
        self.library = library
        self.op_type = info["op_type"]
        self.source = f"{info['source']} (isolated in a worker process)"
        self.override = info["override"]
        self.targets = tuple(t for t in ("gpu", "cpu") if t in info["targets"])
        self.runs_anywhere = "cpu" in self.targets
        self._released = False
        self._declines: dict[tuple[str, str], str] = {}  # (node, target) -> why
        self._warned: set[str] = set()

    def shape_infer(self, node, in_shapes, in_dtypes):
        # the whole node: an override without shape_infer has ONNX infer its shapes
        return self.library.worker.call(("op_shape_infer", self.op_type, node,
                                         [list(s) for s in in_shapes], list(in_dtypes)))

    def bind(self, node, values, target, backend):
        """The GPU target runs the op's OpenCL kernel in the worker, on the OpenCL handles of
        ``backend``'s class built again there (a context of the worker's own on the same
        device); declined, with the reason in the placement explanation, when ``backend``
        gives no OpenCL handles here or cannot be rebuilt there."""
        self._declines.pop((node.name, target), None)
        device = None
        if target == "gpu":
            device, why = _opencl_backend_spec(backend)
            if device is None:
                self._decline(node, target, why, backend)
                return None
        bound = _IsolatedBound(self, wire.light_node(node),
                               {v: values[v] for v in list(node.inputs) + list(node.outputs)
                                if v and v in values}, target, device)
        why = bound.bind()
        if why is None:
            return bound
        bound.closed = True
        bound._finalizer.detach()  # nothing of it is held in the worker
        self._decline(node, target, why, backend)
        return None

    def _decline(self, node, target, why, backend) -> None:
        if target == "gpu" and "cpu" in self.targets:
            why += "; its CPU implementation runs in the worker process instead"
        self._declines[(node.name, target)] = why
        if target == "gpu" and backend is not None and backend.id not in self._warned:
            self._warned.add(backend.id)
            log.warning(
                "nnplug: custom op %r (%s) cannot run its OpenCL kernel for backend %r: %s",
                self.op_type, self.source, backend.id, why)

    def decline_reason(self, node, target):
        return self._declines.get((node.name, target))

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.library.released()


def _opencl_backend_spec(backend):
    """(what the worker rebuilds ``backend`` from, None), or (None, why it cannot): the
    backend must give OpenCL handles in this process, as for an op that is not isolated."""
    from .op_opencl import backend_device

    if backend is None:
        return None, "no backend to take OpenCL handles from"
    dev = backend_device(backend)
    try:
        handles = backend.device_api().opencl_handles(dev)
    except Exception as e:  # noqa: BLE001 - the backend's error, named
        return None, f"backend {backend.id!r} failed to give OpenCL handles: {e}"
    if handles is None:
        return None, (f"backend {backend.id!r} exposes no OpenCL handles "
                      f"(DeviceAPI.opencl_handles) for {dev}")
    cls = type(backend)
    return {"module": cls.__module__, "qualname": cls.__qualname__, "id": backend.id,
            "device": (dev.device_type, dev.index)}, None


class _IsolatedBound(BoundOp):
    def __init__(self, op: IsolatedCustomOp, node, values, target="cpu", device=None):
        self.op, self.node, self.values = op, node, values
        self.target, self.device_spec = target, device
        self.worker = op.library.worker
        self.key = next(_keys)
        self.bound_in = 0
        self.closed = False
        self._finalizer = weakref.finalize(self, _close_bound, self.worker, self.key)

    def bind(self) -> str | None:
        """Bind the node in the worker: None when bound, else why it was declined."""
        w = self.worker
        with w.lock:
            if w._proc is None:
                w.start()
            ok, why = w._request(("op_bind", self.key, self.op.op_type, self.node, self.values,
                                  self.target, self.device_spec))
            self.bound_in = w.generation
        return None if ok else why

    def run(self, inputs):
        arrays = [as_contiguous(t.numpy() if isinstance(t, Tensor) else np.asarray(t))
                  for t in inputs]
        w = self.worker
        with w.lock:
            if self.closed:
                raise CustomOpError(f"custom op {self.op.op_type!r} on node {self.node.name!r} "
                                    f"was released (its network was closed)")
            if w._proc is None or self.bound_in != w.generation:
                why = self.bind()
                if why is not None:
                    raise CustomOpError(
                        f"custom op {self.op.op_type!r} ({self.op.source}) declined node "
                        f"{self.node.name!r} in its fresh worker process, after accepting it "
                        f"before: {why}")
            specs, fds = w.put_inputs(arrays)
            outs = w._request(("op_run", self.key, specs), fds)
            arrays = w.take_outputs(outs)
        return [Tensor.from_numpy(a) for a in arrays]

    def close(self) -> None:
        self.closed = True
        self._finalizer()


def _close_bound(worker, key) -> None:
    def close():
        with worker.lock:
            if worker._proc is None:
                return
            try:
                worker._request(("op_close", key))
            except BackendError:
                pass  # the worker died: what it held went with it

    worker.close_soon(close)


def load_isolated_ops(path: str, names, timeout: float | None):
    """The ops of the custom-op library at ``path`` from a worker process when ``names`` name
    it (by file name, or one of its op types: learnt by loading it there); None when not."""
    lib = IsolatedOpLibrary(path, timeout)
    if names_library(names, path) or any(op.op_type in names for op in lib.ops):
        return lib.ops
    lib.worker.stop()
    return None

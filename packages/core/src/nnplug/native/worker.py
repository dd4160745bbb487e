"""The worker process of an isolated native backend: ``python -m nnplug.native.worker SOCK STATUS``.

It loads the library with the ordinary loader (:func:`nnplug.native.load_backend_library`),
answers the application's requests (see :mod:`nnplug.native.wire` for the protocol) with the
ordinary :class:`~nnplug.native.backend.NativeBackend` and its modules, and ends at end of file
on its socket. Before each step that runs plugin code it writes what it is doing into the
status region, which the application reads when this process dies.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys
from types import SimpleNamespace

import numpy as np

from ..device import Device
from ..graph import SubGraph
from ..runcontext import RunContext, running
from ..target import Target, register_target_kind
from ..tensor import CPU, Tensor
from . import wire
from .loader import LibraryLoadError, load_backend_library


class _Progress(RunContext):
    """Runs kernel by kernel, writing each kernel's label into the status region first."""

    __slots__ = ("worker",)

    def __init__(self, worker, outputs):
        super().__init__(terminated=_never, outputs=outputs)
        self.worker = worker

    def check(self, where: str) -> None:
        self.worker.doing(f"running {where}")


def _never() -> bool:
    return False


class Worker:
    def __init__(self, sock: socket.socket, status: wire.Region):
        self.sock = sock
        self.status = status
        self.backend = None
        self.modules: dict[int, tuple] = {}  # key -> (Module, constants Region or None, label)
        self.inputs: wire.Region | None = None
        self.outputs: wire.Region | None = None
        self.ops: dict = {}  # op type -> NativeCustomOp (a custom-op library's worker)
        self.bound: dict = {}  # key -> NativeBound
        self.device_backends: dict = {}  # (module, class) -> (backend or None, why not)

    def doing(self, what: str) -> None:
        data = what.encode("utf-8", "replace")[:wire.STATUS_BYTES - 1] + b"\0"
        self.status.map[:len(data)] = data

    def serve(self) -> None:
        while True:
            try:
                msg, fds = wire.recv(self.sock)
            except wire.ChannelClosed:
                return
            try:
                value, out_fds = getattr(self, "do_" + msg[0])(*msg[1:], fds=fds)
                reply = ("ok", value)
            except Exception as e:  # noqa: BLE001 - every error goes back to the application
                extra = (e.path, e.stage, e.reason, e.fix) if isinstance(e, LibraryLoadError) else None
                reply, out_fds = ("error", type(e).__name__, str(e), extra), ()
            self.doing("waiting for a request")
            wire.send(self.sock, reply, out_fds)

    # -- requests --------------------------------------------------------------------------
    def do_load(self, path, taken, fds=()):
        self.doing("loading it (dlopen: the library's constructors)")
        check = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
        self.doing("loading it (its entry point nnp_backend_entry, the table checks, init)")
        b = self.backend = load_backend_library(path, taken)
        del check  # the loader holds its own handle
        lib = b.library
        kind = b.target_kind()
        register_target_kind(b.target_kind_name, **kind, override=True)
        return {"id": b.id, "version": b.version, "device_type": b.device_type,
                "device_type_name": lib.device_type_name,
                "priority": b.priority, "provider_names": tuple(b.provider_names),
                "abi_version": tuple(b.abi_version), "target_kind": kind,
                "host_visible": lib.host_visible, "threads": bool(lib.table.set_num_threads),
                "pid": os.getpid()}, ()

    def do_supports(self, node, values, constants, fds=()):
        self.doing(f"asked whether it supports {node.describe()}")
        return self.backend.supports(node, SimpleNamespace(values=values, constants=constants)), ()

    def do_supports_fused(self, nodes, values, constants, fds=()):
        self.doing(f"asked whether it runs {nodes[0].describe()} and the nodes after it fused")
        return self.backend.supports_fused(
            nodes, SimpleNamespace(values=values, constants=constants)), ()

    def do_static_shapes_only(self, node, values, constants, fds=()):
        self.doing(f"asked whether it supports {node.describe()}")
        return self.backend.static_shapes_only(
            node, SimpleNamespace(values=values, constants=constants)), ()

    def do_get_attr(self, device_type, index, kind, fds=()):
        self.doing(f"get_attr({kind})")
        return self.backend.device_api().get_attr(Device(device_type, index), kind), ()

    def do_set_num_threads(self, n, fds=()):
        self.doing(f"set_num_threads({n})")
        self.backend.set_num_threads(n)
        return None, ()

    def do_build(self, key, fields, const_layout, inline, target, label, fds=()):
        region = wire.Region(fds[0], writable=False) if fds else None
        consts = dict(inline)
        for name, (offset, shape, dtype) in const_layout.items():
            consts[name] = region.array(offset, shape, dtype)
        sg = SubGraph(constants=consts, **fields)
        self.doing(f"building {label} (kernel creation)")
        module = self.backend.build(sg, Target(target) if target else None)
        # outputs of known shape are written by the kernels straight into the output region
        static = {n: _static_spec(sg, n) for n in dict.fromkeys(sg.outputs)}
        static = {n: s for n, s in static.items() if s}
        place, total = wire.layout(_Shaped(*s) for s in static.values())
        offsets = {n: p[0] for n, p in zip(static, place)}
        self.modules[key] = (module, region, sg, (static, offsets, total))
        return {"kernels": module["kernels"]() if "kernels" in module else [],
                "is_static": module["is_static"]() if "is_static" in module else False}, ()

    def do_close(self, key, fds=()):
        entry = self.modules.pop(key, None)
        if entry is not None:
            self.doing("closing a module (kernel_destroy)")
            entry[0].close()
            if entry[1] is not None:
                entry[1].close()
        return None, ()

    def do_run(self, key, specs, fds=()):
        self._set_inputs(fds)
        module, _region, sg, (static, offsets, total) = self.modules[key]
        inputs = [self.inputs.array(*s[1:]) if s[0] == "shm" else s[1] for s in specs]
        new_fd = self._room(total)
        bound = {n: self.outputs.array(offsets[n], *static[n]) for n in static}
        with running(_Progress(self, bound)):
            results = module["run"](inputs)
        out, fd = self._reply(results, sg.outputs, bound, offsets, total)
        new_fd = fd if fd is not None else new_fd
        return out, (() if new_fd is None else (new_fd,))

    def _reply(self, results, names, bound, offsets, total):
        """(output specs for the application, fd of a new output region or None): outputs
        the kernels wrote into the region in place are named there, the others copied in."""
        out, extra, end = [], [], total
        for name, t in zip(names, results):
            view = bound.get(name)
            if isinstance(t, Tensor) and not t.is_host and view is not None and \
                    tuple(t.shape) == view.shape and t.dtype == view.dtype:
                if t.nbytes:  # a device output: straight into the shared output region
                    t.api.copy_data_from_to(t.handle, t.byte_offset, view, 0, t.nbytes,
                                            t.device, CPU)
                arr = view
            else:
                arr = t.numpy() if hasattr(t, "numpy") else t
            if view is not None and _same(arr, view):
                out.append(("shm", offsets[name], view.shape, view.dtype))
            elif wire.in_region(arr):
                out.append(None)
                extra.append((len(out) - 1, arr, end))
                end += wire.aligned(arr.nbytes)
            else:
                out.append(("obj", arr))
        fd = None
        if extra:
            fd = self._room(end, keep=total)
            for i, arr, off in extra:
                self.outputs.array(off, arr.shape, arr.dtype)[...] = arr
                out[i] = ("shm", off, arr.shape, arr.dtype)
        return out, fd

    def _set_inputs(self, fds):
        if fds:
            if self.inputs is not None:
                self.inputs.close()
            self.inputs = wire.Region(fds[0])

    # -- custom-op libraries ---------------------------------------------------------------
    def do_load_ops(self, path, fds=()):
        from .op_library import load_op_library

        self.doing("loading it (dlopen: the library's constructors)")
        check = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
        self.doing("loading it (its entry point nnp_custom_op_entry, the op checks)")
        self.ops = {op.op_type: op for op in load_op_library(path)}
        del check
        return [{"op_type": op.op_type, "source": op.source, "override": op.override,
                 "targets": op.targets} for op in self.ops.values()], ()

    def do_op_shape_infer(self, op_type, node, in_shapes, in_dtypes, fds=()):
        self.doing(f"inferring the output shapes of custom op {op_type!r} on node {node.name!r}")
        return self.ops[op_type].shape_infer(node, in_shapes, in_dtypes), ()

    def do_op_bind(self, key, op_type, node, values, target="cpu", device=None, fds=()):
        backend = None
        if target == "gpu":
            backend, why = self._device_backend(device)
            if backend is None:
                return (False, why), ()
            self.doing(f"binding custom op {op_type!r} to node {node.name!r} (building its "
                       f"OpenCL program and kernel, its init)")
        else:
            self.doing(f"binding custom op {op_type!r} to node {node.name!r} (its init)")
        bound = self.ops[op_type].bind(node, values, target, backend)
        if bound is None:
            return (False, "its init declined the node (NNP_OP_SKIP)"), ()
        self.bound[key] = bound
        return (True, None), ()

    def _device_backend(self, spec):
        """(backend, None) whose device API gives this process the OpenCL handles of the
        application's backend ``spec`` (its class, rebuilt here: a context of our own on the
        same device), else (None, why not). Rebuilt once per worker process."""
        ref = (spec["module"], spec["qualname"])
        if ref not in self.device_backends:
            self.device_backends[ref] = _rebuilt_backend(self, spec)
        return self.device_backends[ref]

    def do_op_close(self, key, fds=()):
        bound = self.bound.pop(key, None)
        if bound is not None:
            self.doing(f"closing custom op {bound.state.op.op_type!r} on node "
                       f"{bound.node.name!r} (its destroy)")
            bound.close()
        return None, ()

    def do_op_run(self, key, specs, fds=()):
        from ..tensor import Tensor

        self._set_inputs(fds)
        bound = self.bound[key]
        inputs = [Tensor.from_numpy(self.inputs.array(*s[1:]) if s[0] == "shm" else s[1])
                  for s in specs]
        op = f"custom op {bound.state.op.op_type!r}"
        if bound.device != CPU:  # the OpenCL implementation: its inputs go to our context
            self.doing(f"copying the inputs of {op} on node {bound.node.name!r} to {bound.device}")
            inputs = [t.to(bound.device, bound.api) for t in inputs]
            op += " (its OpenCL kernel)"
        self.doing(f"running {op} on node {bound.node.name!r}")
        results = bound.run(inputs)
        out, fd = self._reply(results, list(range(len(results))), {}, {}, 0)
        return out, (() if fd is None else (fd,))

    def _room(self, nbytes: int, keep: int = 0):
        """Make the output region hold ``nbytes`` (keeping its first ``keep`` bytes); the fd
        of a new region (to send to the application), or None."""
        if self.outputs is not None and self.outputs.nbytes >= nbytes:
            return None
        region = wire.Region.create(max(nbytes, 2 * (self.outputs.nbytes if self.outputs else 0),
                                        1 << 16), "nnplug-outputs")
        if self.outputs is not None:
            if keep:
                region.buf[:keep] = self.outputs.buf[:keep]
            self.outputs.close()
        self.outputs = region
        return region.fd


def _rebuilt_backend(worker: Worker, spec):
    """The application's backend ``spec`` built again here from its class (no arguments), with
    the OpenCL handles of the same device; (None, why not) when that fails."""
    import importlib

    from .op_opencl import backend_device

    name = f"{spec['module']}.{spec['qualname']}"
    what = f"backend {spec['id']!r} ({name}()), rebuilt in the worker process,"
    worker.doing(f"building {name}() for the OpenCL handles of backend {spec['id']!r}")
    try:
        obj = importlib.import_module(spec["module"])
        for part in spec["qualname"].split("."):
            obj = getattr(obj, part)
        backend = obj()
        register_target_kind(backend.target_kind_name, **backend.target_kind(), override=True)
        dev = backend_device(backend)
        if backend.id != spec["id"] or (dev.device_type, dev.index) != tuple(spec["device"]):
            return None, (f"{what} is backend {backend.id!r} on {dev}, not the application's "
                          f"on {Device(*spec['device'])}")
        handles = backend.device_api().opencl_handles(dev)
    except Exception as e:  # noqa: BLE001 - why the OpenCL kernel cannot run here
        return None, f"{what} failed: {type(e).__name__}: {e}"
    if handles is None:
        return None, f"{what} gives no OpenCL handles for {dev}"
    return backend, None


class _Shaped:
    __slots__ = ("shape", "dtype", "nbytes")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype
        self.nbytes = int(_numel(shape)) * dtype.itemsize


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _static_spec(sg, name):
    """(shape, dtype) of an output the kernels make with a shape known now, else None."""
    if name in sg.inputs or name in sg.constants:
        return None
    info = sg.values.get(name)
    if info is None or info.dtype is None or not info.is_static or info.kind != "tensor":
        return None
    dtype = np.dtype(info.dtype)
    return None if dtype.hasobject else (tuple(info.shape), dtype)


def _same(arr, view) -> bool:
    return (getattr(arr, "ctypes", None) is not None and arr.ctypes.data == view.ctypes.data
            and arr.shape == view.shape and arr.dtype == view.dtype)


def _die_with_parent() -> None:
    """Linux: end this process when the application ends (a worker stuck in a kernel would
    otherwise outlive it)."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _die_with_parent()
    sock = socket.socket(fileno=int(argv[0]))
    status = wire.Region(int(argv[1]), wire.STATUS_BYTES)
    try:
        Worker(sock, status).serve()
    finally:
        sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: unloading plugins at exit is not under test here


if __name__ == "__main__":
    main()

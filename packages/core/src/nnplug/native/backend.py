"""The Python face of a native backend: a DeviceAPI and a Backend over its C function table."""

from __future__ import annotations

import ctypes as C
import threading

import numpy as np

# Imported here, not where used: close() may run at interpreter exit, when imports fail.
from .. import plugins
from ..backend import Backend, Module
from ..device import CPU, Device
from ..device_api import DeviceAPI, _Workspace, attr_kind
from ..errors import InvalidArgumentError, TensorExportError
from ..graph import Node, SubGraph
from ..target import Target
from . import abi, string_tensors
from .buffer import NativeBuffer, cdev
from .descs import DescBuilder

_NO_DTYPE = abi.DType(0, 0, 0)


class NativeStream:
    __slots__ = ("ptr", "device")

    def __init__(self, ptr, device):
        self.ptr = ptr
        self.device = device


def _host_side(buf, what: str):
    """(address, size) of host memory given to a copy."""
    arr = np.asarray(buf)
    if not arr.flags.c_contiguous:
        raise InvalidArgumentError(f"copy_data_from_to: the host {what} must be C-contiguous")
    if what == "destination" and not arr.flags.writeable:
        raise InvalidArgumentError("copy_data_from_to: the host destination is read-only")
    return arr.ctypes.data, arr.nbytes


class NativeDeviceAPI(DeviceAPI):
    """TVM-style device API over a native backend's table. Handles are NativeBuffer objects."""

    def __init__(self, lib):
        super().__init__()
        self.lib = lib
        t = lib.table
        self._t = t
        self.has_streams = bool(t.create_stream)
        self.has_workspaces = bool(t.alloc_workspace)

    def __repr__(self):
        return f"<NativeDeviceAPI of backend {self.lib.id!r}>"

    def _check(self, rc, what):
        if rc != 0:
            raise self.lib.error(rc, what)

    # -- attributes ------------------------------------------------------------------------
    def get_attr(self, dev: Device, kind):
        kind = attr_kind(kind)
        out = abi.AttrValue()
        self._check(self._t.get_attr(cdev(dev), abi.DEVICE_ATTR_NUMBERS[kind.value], C.byref(out)),
                    f"get_attr({kind.value}) on {dev}")
        if out.type == abi.ATTR_VALUE_INT:
            return bool(out.i) if kind.value == "exist" else int(out.i)
        if out.type == abi.ATTR_VALUE_STRING:
            return out.s.decode("utf-8", "replace")
        return False if kind.value == "exist" else None

    def set_device(self, dev: Device) -> None:
        if self._t.set_device:
            self._check(self._t.set_device(cdev(dev)), f"set_device({dev})")

    # -- memory ----------------------------------------------------------------------------
    def alloc_data_space(self, dev: Device, nbytes: int, alignment: int = 64, dtype=None,
                         *, _held: bool = True):
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise InvalidArgumentError(f"alloc_data_space: nbytes must be > 0, not {nbytes}")
        if alignment < 1 or alignment & (alignment - 1):
            raise InvalidArgumentError(f"alloc_data_space: alignment {alignment} is not a power of two")
        out = C.c_void_p()
        self._check(self._t.alloc_data_space(cdev(dev), nbytes, alignment,
                                             abi.dtype_of(dtype), C.byref(out)),
                    f"alloc_data_space({nbytes} bytes) on {dev}")
        if not out.value:
            raise self.lib.error(4, f"alloc_data_space({nbytes} bytes) gave a NULL handle")
        return NativeBuffer(self.lib, out.value, nbytes, dev, held=_held)

    def free_data_space(self, dev: Device, handle) -> None:
        if isinstance(handle, _Workspace):
            handle = handle.handle
        if not isinstance(handle, NativeBuffer) or handle.lib is not self.lib:
            raise InvalidArgumentError(f"free_data_space: {handle!r} was not allocated by this backend")
        handle.free()

    def alloc_workspace(self, dev: Device, nbytes: int, dtype=None):
        if not self.has_workspaces:  # the base class's pool, over unheld data-space blocks
            size = max(4096, (int(nbytes) + 4095) // 4096 * 4096)
            with self._pool_lock:
                free = self._pool[(dev, size)]
                if free:
                    return free.pop()
            return _Workspace(self.alloc_data_space(dev, size, _held=False), size)
        nbytes = max(int(nbytes), 1)
        out = C.c_void_p()
        self._check(self._t.alloc_workspace(cdev(dev), nbytes, abi.dtype_of(dtype), C.byref(out)),
                    f"alloc_workspace({nbytes} bytes) on {dev}")
        return NativeBuffer(self.lib, out.value, nbytes, dev, workspace=True)

    def free_workspace(self, dev: Device, handle) -> None:
        if not self.has_workspaces:
            return super().free_workspace(dev, handle)
        if not isinstance(handle, NativeBuffer) or handle.lib is not self.lib:
            raise InvalidArgumentError(f"free_workspace: {handle!r} was not allocated by this backend")
        handle.free()

    # -- copies ----------------------------------------------------------------------------
    def copy_data_from_to(self, src, src_offset, dst, dst_offset, nbytes, dev_from, dev_to,
                          stream=None) -> None:
        src = src.handle if isinstance(src, _Workspace) else src
        dst = dst.handle if isinstance(dst, _Workspace) else dst
        nbytes, src_offset, dst_offset = int(nbytes), int(src_offset), int(dst_offset)
        if min(nbytes, src_offset, dst_offset) < 0:
            raise InvalidArgumentError("copy_data_from_to: negative size or offset")
        src_dev = isinstance(src, NativeBuffer)
        dst_dev = isinstance(dst, NativeBuffer)
        for buf, is_dev in ((src, src_dev), (dst, dst_dev)):
            if is_dev and (buf.lib is not self.lib or buf.freed):
                raise InvalidArgumentError(f"copy_data_from_to: {buf!r} is freed or not this backend's")
        s_ptr, s_size = (src.ptr, src.nbytes) if src_dev else _host_side(src, "source")
        d_ptr, d_size = (dst.ptr, dst.nbytes) if dst_dev else _host_side(dst, "destination")
        if src_offset + nbytes > s_size or dst_offset + nbytes > d_size:
            raise InvalidArgumentError(
                f"copy of {nbytes} bytes out of bounds (src {s_size} bytes at {src_offset}, "
                f"dst {d_size} bytes at {dst_offset})"
            )
        if nbytes == 0:
            return
        if not src_dev and not dst_dev:
            C.memmove(d_ptr + dst_offset, s_ptr + src_offset, nbytes)
            return
        kind = (abi.COPY_DEVICE_TO_DEVICE if src_dev and dst_dev else
                abi.COPY_HOST_TO_DEVICE if dst_dev else abi.COPY_DEVICE_TO_HOST)
        f_dev = src.device if src_dev else CPU
        t_dev = dst.device if dst_dev else CPU
        self._check(self._t.copy_data_from_to(s_ptr, src_offset, d_ptr, dst_offset, nbytes,
                                              cdev(f_dev), cdev(t_dev), kind,
                                              stream.ptr if stream is not None else None),
                    f"copy_data_from_to({nbytes} bytes, {f_dev} -> {t_dev})")

    # -- streams ---------------------------------------------------------------------------
    def create_stream(self, dev: Device):
        if not self.has_streams:
            return None
        out = C.c_void_p()
        self._check(self._t.create_stream(cdev(dev), C.byref(out)), f"create_stream on {dev}")
        return NativeStream(out.value, dev)

    def _stream_op(self, fn, name, dev, stream):
        if self.has_streams:
            ptr = stream.ptr if isinstance(stream, NativeStream) else None
            self._check(fn(cdev(dev), ptr), f"{name} on {dev}")

    def free_stream(self, dev: Device, stream) -> None:
        if stream is not None:
            self._stream_op(self._t.free_stream, "free_stream", dev, stream)

    def set_stream(self, dev: Device, stream) -> None:
        self._stream_op(self._t.set_stream, "set_stream", dev, stream)

    def stream_sync(self, dev: Device, stream) -> None:
        self._stream_op(self._t.stream_sync, "stream_sync", dev, stream)

    def sync_stream_from_to(self, dev: Device, event_src, event_dst) -> None:
        if self.has_streams:
            p = [s.ptr if isinstance(s, NativeStream) else None for s in (event_src, event_dst)]
            self._check(self._t.sync_stream_from_to(cdev(dev), p[0], p[1]),
                        f"sync_stream_from_to on {dev}")

    # -- DLPack ----------------------------------------------------------------------------
    def dlpack_capsule(self, tensor, stream=None, **kwargs):
        """Zero-copy DLPack export of a tensor in host-visible backend memory."""
        buf = tensor.handle
        if not self.lib.host_visible or not isinstance(buf, NativeBuffer):
            raise TensorExportError(
                f"DLPack export from backend {self.lib.id!r} needs host-visible memory; "
                f"use .numpy() or .to('cpu') first"
            )
        if stream is not None and self.has_streams:
            self.stream_sync(tensor.device, None)
        flat = np.asarray(buf)[tensor.byte_offset:tensor.byte_offset + tensor.nbytes]
        # kwargs (max_version, ...) pass through: a versioned capsule imports writable.
        return flat.view(tensor.dtype).reshape(tensor.shape).__dlpack__(**kwargs)


class NativeBackend(Backend):
    """A Backend over a loaded native library. Each object holds one lease on the library;
    :meth:`close` releases it (modules built from it hold their own)."""

    def __init__(self, lib, key, path: str):
        self.library = lib
        self.id = lib.id
        self.device_type = lib.device_type
        self.version = lib.version
        self.priority = lib.priority
        self.provider_names = lib.provider_names
        self.path = path
        self.abi_version = lib.abi_version
        self._key = key
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<NativeBackend {self.id!r} from {self.path}>"

    def describe(self) -> str:
        return f"native backend {self.id!r} ({self.path})"

    def device_api(self) -> NativeDeviceAPI:
        return self.library.device_api

    def target_kind(self) -> dict:
        """The kind named after the id, with the attributes the table declares (ABI 1.2)."""
        return {"device_type": self.device_type, "attrs": dict(self.library.target_attrs)}

    def set_num_threads(self, num_threads: int) -> None:
        """Worker threads for later runs (0: the backend's choice). Process-wide."""
        fn = self.library.table.set_num_threads
        if not fn:
            raise NotImplementedError(f"backend {self.id!r} has no set_num_threads")
        self.library.check(fn(int(num_threads)), f"set_num_threads({num_threads})")

    def supports(self, node: Node, graph: SubGraph) -> bool:
        values = getattr(graph, "values", {}) or {}
        constants = getattr(graph, "constants", {}) or {}
        if not self._can_plan_outputs(node, values, constants):
            return False  # claiming it would fail at build time: decline, so it falls back
        if not string_tensors.takes_strings(self.library) and \
                string_tensors.node_has_strings(node, values, constants):
            return False  # string tensors: host memory, ABI 1.3 and release_strings only
        builder = DescBuilder(values, getattr(graph, "constants", {}) or {})
        desc = abi.NodeDesc()
        builder.node(node, desc)
        out = C.c_int32(0)
        self.library.check(self.library.table.supports(C.byref(desc), C.byref(out)),
                           f"supports() for {node.describe()}")
        return bool(out.value)

    def decline_reason(self, node: Node, graph: SubGraph) -> str | None:
        """The host's own reasons to decline before asking the library (see supports)."""
        values = getattr(graph, "values", {}) or {}
        constants = getattr(graph, "constants", {}) or {}
        if not self._can_plan_outputs(node, values, constants):
            return self.static_shapes_only(node, graph) or \
                "an output's dtype or kind is not known at load time"
        if not string_tensors.takes_strings(self.library) and \
                string_tensors.node_has_strings(node, values, constants):
            return ("it reads or writes string tensors and its table has no release_strings "
                    "(backend ABI 1.3)")
        return None

    def supports_fused(self, nodes: list[Node], graph: SubGraph) -> bool:
        fn = self.library.table.supports_fused
        if not fn:
            return False
        values = getattr(graph, "values", {}) or {}
        constants = getattr(graph, "constants", {}) or {}
        if not all(self._can_plan_outputs(n, values, constants) for n in nodes):
            return False
        if any(string_tensors.node_has_strings(n, values, constants) for n in nodes):
            return False  # a string value is never inside a kernel group
        builder = DescBuilder(values, constants)
        out = C.c_int32(0)
        self.library.check(fn(builder.nodes(nodes), len(nodes), C.byref(out)),
                           f"supports_fused() for {nodes[0].describe()}")
        return bool(out.value)

    def _can_plan_outputs(self, node: Node, values, constants) -> bool:
        """What the plan needs of a node's outputs: a known dtype, and a shape known at load
        time unless the library computes output shapes (``kernel_output_shapes``)."""
        dynamic_ok = bool(self.library.table.kernel_output_shapes)
        for o in node.outputs:
            if not o or o in constants:
                continue
            info = values.get(o)
            if info is None:
                continue  # nothing known (a hand-built graph): the library decides
            if info.dtype is None or info.kind != "tensor":
                return False
            if not dynamic_ok and (info.shape is None or not all(
                    isinstance(d, int) and d >= 0 for d in info.shape)):
                return False
        return True

    def static_shapes_only(self, node: Node, graph: SubGraph) -> str | None:
        """Why this backend declines ``node`` although its library supports it: an output
        shape unknown at load time and no ``kernel_output_shapes``; None when that is not
        the reason (see :mod:`nnplug.static_shapes`)."""
        if self.library.table.kernel_output_shapes:
            return None
        values = getattr(graph, "values", {}) or {}
        constants = getattr(graph, "constants", {}) or {}
        infos = [(o, values[o]) for o in node.outputs
                 if o and o not in constants and values.get(o) is not None]
        if any(i.dtype is None or i.kind != "tensor" for _, i in infos):
            return None  # declined for another reason
        dynamic = [o for o, i in infos if i.shape is None or not all(
            isinstance(d, int) and d >= 0 for d in i.shape)]
        if not dynamic:
            return None
        if not string_tensors.takes_strings(self.library) and \
                string_tensors.node_has_strings(node, values, constants):
            return None
        builder = DescBuilder(values, constants)  # holds the descriptor's memory
        desc = abi.NodeDesc()
        builder.node(node, desc)
        out = C.c_int32(0)
        if self.library.table.supports(C.byref(desc), C.byref(out)) != 0 or not out.value:
            return None
        shape = values[dynamic[0]].shape
        shown = "unknown" if shape is None else "(" + ", ".join(map(str, shape)) + ")"
        return (f"its output {dynamic[0]!r} has shape {shown} at load time, and the backend "
                f"has no kernel_output_shapes to compute output shapes at run time")

    def build(self, subgraph: SubGraph, target: Target) -> Module:
        from .plan import build_module

        if self._closed:
            from ..errors import BackendError

            raise BackendError(f"{self.describe()} is closed")
        dev = target.device if target is not None else Device(self.device_type, 0)
        return build_module(self, subgraph, dev, target)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        plugins.BACKENDS.release(self._key)

"""The channel between the application and an isolated plugin's worker process.

One message is a length-prefixed pickle sent over a Unix stream socket, optionally carrying
file descriptors (SCM_RIGHTS) in the same ``sendmsg``. Tensor bytes never travel in messages:
they lie in shared memory regions (anonymous ``memfd`` files, mapped by both processes), and a
message names them by (region, offset, shape, dtype). A region's file descriptor is sent once;
it has no name in the file system, so nothing is left behind when either process dies.

Requests, application -> worker, each answered by one reply:

    ("load", path, taken)                        -> {id, version, device_type, ...}
    ("supports", node, values, constants)        -> bool
    ("supports_fused", nodes, values, constants) -> bool
    ("static_shapes_only", node, values, constants) -> str | None
    ("set_num_threads", n)                       -> None
    ("build", key, subgraph, layout, target) + fd of the constants region
                                                 -> {"kernels": [...], "is_static": bool}
    ("close", key)                               -> None
    ("run", key, inputs) [+ fd of a new input region]
                                                 -> outputs [+ fd of a new output region]

and for a custom-op library:

    ("load_ops", path)                           -> [{op_type, source, override, targets}]
    ("op_shape_infer", op_type, node, in_shapes, in_dtypes) -> (shapes, dtypes)
    ("op_bind", key, op_type, node, values, target, device)
                                                 -> (bound?, why not): target "cpu", or "gpu"
                                                    with device = the backend's class, id and
                                                    device, rebuilt in the worker for its
                                                    OpenCL handles
    ("op_run", key, inputs) [+ fd]               -> outputs [+ fd]
    ("op_close", key)                            -> None

A reply is ``("ok", value)`` or ``("error", class name, message, extra)``. The worker writes
the label of the kernel it is about to run into the status region, so that the application
can name it when the worker dies there.
"""

from __future__ import annotations

import array
import dataclasses
import mmap
import os
import pickle
import socket
import struct
import tempfile

import numpy as np

_HEADER = struct.Struct("<QI")  # payload bytes, number of file descriptors
MAX_FDS = 4
ALIGN = 64
STATUS_BYTES = 4096


class ChannelClosed(Exception):
    """The other end is gone (end of file on the socket)."""


class ChannelTimeout(Exception):
    """No reply within the time allowed."""


def send(sock: socket.socket, obj, fds=()) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    head = _HEADER.pack(len(data), len(fds))
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([head, data], anc)  # one system call for most messages
    if sent < len(head):
        sock.sendall(head[sent:])
        sent = len(head)
    if sent - len(head) < len(data):
        sock.sendall(memoryview(data)[sent - len(head):])


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ChannelClosed()
        got += k


_FIRST_READ = 1 << 16


def recv(sock: socket.socket, timeout: float | None = None):
    """(object, [fds]). ChannelTimeout when nothing arrives within ``timeout`` seconds;
    ChannelClosed at end of file. The timeout covers the wait for the first byte only.

    The first read takes up to 64 KiB: requests and replies alternate, so it can only hold
    this message, and a small message then costs one system call."""
    sock.settimeout(timeout)
    try:
        first, anc, _flags, _addr = sock.recvmsg(_FIRST_READ, socket.CMSG_SPACE(MAX_FDS * 4))
    except TimeoutError:
        raise ChannelTimeout() from None
    except (ConnectionResetError, BrokenPipeError):
        raise ChannelClosed() from None
    finally:
        sock.settimeout(None)
    if not first:
        raise ChannelClosed()
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds += list(a)
    try:
        if len(first) < _HEADER.size:
            head = bytearray(_HEADER.size)
            head[:len(first)] = first
            _recv_exact(sock, memoryview(head)[len(first):])
            first = bytes(head)
        size, _n = _HEADER.unpack_from(first)
        have = len(first) - _HEADER.size
        if have >= size:
            payload = memoryview(first)[_HEADER.size:_HEADER.size + size]
        else:
            buf = bytearray(size)
            buf[:have] = memoryview(first)[_HEADER.size:]
            _recv_exact(sock, memoryview(buf)[have:])
            payload = buf
    except (ConnectionResetError, BrokenPipeError):
        raise ChannelClosed() from None
    return pickle.loads(payload), fds


# -- nodes -----------------------------------------------------------------------------------
class _Attribute:
    __slots__ = ("name", "type")

    def __init__(self, name: str, type: int):
        self.name, self.type = name, type

    def __reduce__(self):
        return (_Attribute, (self.name, self.type))


class AttributeTypes:
    """What the worker reads of a node's NodeProto (each attribute's name and type), without
    the proto: unpickling one would import onnx there, a second or more at its first request."""

    __slots__ = ("attribute",)

    def __init__(self, attribute):
        self.attribute = tuple(attribute)

    def __reduce__(self):
        return (AttributeTypes, (self.attribute,))


def light_node(node):
    """``node`` with its proto replaced by its attribute names and types."""
    proto = node.proto
    if proto is None or isinstance(proto, AttributeTypes):
        return node
    return dataclasses.replace(node, proto=AttributeTypes(
        _Attribute(a.name, int(a.type)) for a in proto.attribute))


# -- shared memory ------------------------------------------------------------------------------
def new_region_fd(nbytes: int, name: str = "nnplug") -> int:
    """A file descriptor of ``nbytes`` of anonymous shared memory (no name on disk)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
    else:  # pragma: no cover - other Unix systems: an unlinked temporary file
        fd, path = tempfile.mkstemp(prefix=name, dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        os.unlink(path)
    os.ftruncate(fd, max(int(nbytes), 1))
    return fd


class Region:
    """A mapped shared memory region; owns its file descriptor (closed with it)."""

    def __init__(self, fd: int, nbytes: int | None = None, writable: bool = True):
        self.fd = fd
        self.nbytes = os.fstat(fd).st_size if nbytes is None else int(nbytes)
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self.map = mmap.mmap(fd, max(self.nbytes, 1), access=access)
        self.buf = np.frombuffer(self.map, dtype=np.uint8)

    @classmethod
    def create(cls, nbytes: int, name: str = "nnplug") -> Region:
        return cls(new_region_fd(nbytes, name), nbytes)

    def array(self, offset: int, shape, dtype) -> np.ndarray:
        """A view of ``shape``/``dtype`` at ``offset`` (no copy)."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.buf[offset:offset + n].view(dtype).reshape(shape)

    def close(self) -> None:
        self.buf = None
        try:
            self.map.close()
        except BufferError:  # a view is still alive: the mapping goes when it does
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def aligned(n: int) -> int:
    return (int(n) + ALIGN - 1) // ALIGN * ALIGN


def layout(arrays) -> tuple[list[tuple[int, tuple, str]], int]:
    """Byte offsets for ``arrays`` (numeric numpy arrays) packed one after another, aligned:
    ([(offset, shape, dtype), ...], total bytes)."""
    out, total = [], 0
    for a in arrays:
        out.append((total, tuple(a.shape), a.dtype))
        total += aligned(a.nbytes)
    return out, total


def in_region(arr) -> bool:
    """Whether an array's bytes can lie in shared memory (object arrays cannot)."""
    return isinstance(arr, np.ndarray) and not arr.dtype.hasobject

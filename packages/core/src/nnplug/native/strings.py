"""Bounded reads of the C strings a native plugin hands over (ids, versions, names, messages).

A plugin's ``const char*`` may lack its NUL before unmapped or PROT_NONE memory, be megabytes
long or not be UTF-8. ctypes' ``c_char_p`` would run ``strlen`` over it; here every read stops
at a limit (the ``NNP_MAX_*_BYTES`` defines of ``nnplug/common.h``) and at the first byte this
process may not read, through ``process_vm_readv`` on the process itself, which reports such
memory as a short read instead of a fault (``/proc/self/mem`` would not: it reads through
PROT_NONE).
"""

from __future__ import annotations

import ctypes as C
import mmap
import os
from dataclasses import dataclass

# Keep in step with nnplug/common.h. Bytes before the terminating NUL.
MAX_ID_BYTES = 32
MAX_VERSION_BYTES = 64
MAX_NAME_BYTES = 128
MAX_MESSAGE_BYTES = 4096
MAX_PATH_BYTES = 4096
MAX_SOURCE_BYTES = 16 << 20  # NNP_MAX_CL_SOURCE_BYTES (custom_op.h): an OpenCL source text
MAX_TARGET_ATTRS_BYTES = 16384  # nnp_backend_v1.target_attrs (backend ABI 1.2)
MAX_PROVIDER_NAMES_BYTES = 1024  # nnp_backend_v1.provider_names (backend ABI 1.5)
SHOWN_CHARS = 80  # how much of a bad string an error message quotes

_PAGE = mmap.PAGESIZE


class _IOVec(C.Structure):
    _fields_ = [("base", C.c_void_p), ("len", C.c_size_t)]


def _vm_readv():
    try:
        fn = C.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    fn.restype = C.c_ssize_t
    # the remote iovecs as an address: read_gathered passes where a backend's elements are
    fn.argtypes = [C.c_int, C.POINTER(_IOVec), C.c_ulong, C.c_void_p, C.c_ulong, C.c_ulong]
    # A sandbox may forbid the call (seccomp: EPERM, ENOSYS): then reads are bounded only.
    probe, out = C.create_string_buffer(b"ok"), C.create_string_buffer(2)
    src, dst = _IOVec(C.cast(probe, C.c_void_p), 2), _IOVec(C.cast(out, C.c_void_p), 2)
    if fn(os.getpid(), C.byref(dst), 1, C.byref(src), 1, 0) != 2 or out.raw != b"ok":
        return None  # pragma: no cover
    return fn


_READV = _vm_readv()


def _read_memory(address: int, n: int) -> bytes:
    """Up to ``n`` bytes at ``address``: fewer where readable memory ends."""
    if _READV is None:  # pragma: no cover - elsewhere: a bounded, unprotected read
        return C.string_at(address, n)
    # one remote piece per page, so that a short read stops exactly where readable memory does
    pieces, at, end = [], address, address + n
    while at < end:
        step = min(end, (at // _PAGE + 1) * _PAGE) - at
        pieces.append((at, step))
        at += step
    remote = (_IOVec * len(pieces))(*pieces)
    buf = C.create_string_buffer(n)
    local = _IOVec(C.cast(buf, C.c_void_p), n)
    got = _READV(os.getpid(), C.byref(local), 1, remote, len(pieces), 0)
    return buf.raw[:max(got, 0)]


_IOV_MAX = 1024  # iovecs one process_vm_readv call takes (Linux UIO_MAXIOV)
_IOVEC_BYTES = C.sizeof(_IOVec)


def read_gathered(iovecs: int, sizes: list[int]) -> bytes | None:
    """The bytes of len(sizes) (address, size) pairs stored as iovecs at ``iovecs``, one after
    another, in one read per _IOV_MAX pairs; None when any pair is not wholly readable (a
    partial read never splits a pair) or the process cannot read itself this way."""
    if _READV is None:  # pragma: no cover - not Linux, or a sandbox forbids the call
        return None
    total = sum(sizes)
    buf = C.create_string_buffer(max(total, 1))
    base, at = C.addressof(buf), 0
    for k in range(0, len(sizes), _IOV_MAX):
        want = sum(sizes[k:k + _IOV_MAX])
        if want:
            local = _IOVec(base + at, want)
            count = min(_IOV_MAX, len(sizes) - k)
            remote = iovecs + k * _IOVEC_BYTES
            if _READV(os.getpid(), C.byref(local), 1, remote, count, 0) != want:
                return None
        at += want
    return buf.raw[:total]


def read_bytes(address: int, n: int) -> bytes:
    """``n`` bytes a plugin says are at ``address``: fewer where readable memory ends."""
    return _read_memory(address, n) if address and n > 0 else b""


@dataclass(frozen=True)
class PluginString:
    """What was read: ``raw`` bytes before the NUL (or the limit), and ``problem`` or None."""

    raw: bytes
    problem: str | None = None

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    @property
    def shown(self) -> str:
        """The text for a message: cut to SHOWN_CHARS, quoted."""
        return repr(shorten(self.text))


def read(address: int | None, limit: int) -> PluginString | None:
    """The NUL-terminated string at ``address``, at most ``limit`` bytes; None for NULL."""
    if not address:
        return None
    data = _read_memory(address, limit + 1)
    end = data.find(b"\0")
    if end >= 0:
        return PluginString(data[:end])
    if len(data) > limit:
        return PluginString(data[:limit], f"longer than {limit} bytes")
    if not data:
        return PluginString(b"", f"points to unreadable memory ({address:#x})")
    return PluginString(data, f"has no NUL terminator before unreadable memory "
                              f"(after {len(data)} bytes)")


def field(struct, name: str, limit: int) -> PluginString | None:
    """A ``const char*`` member of a ctypes struct copy, read without ctypes' strlen."""
    offset = getattr(type(struct), name).offset
    return read(C.c_void_p.from_buffer(struct, offset).value, limit)


def message(address: int | None) -> str:
    """A plugin's error message: decoded with replacement, cut at MAX_MESSAGE_BYTES."""
    s = read(address, MAX_MESSAGE_BYTES)
    if s is None:
        return ""
    return s.text + (" [... cut]" if s.problem else "")


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


RAW_STRING_FN = C.CFUNCTYPE(C.c_void_p)  # const char* (*)(void), result left unread


def call_message(fn) -> str:
    """Call a plugin's ``const char* (*)(void)`` (e.g. last_error) and read its result bounded."""
    return message(C.cast(fn, RAW_STRING_FN)())

"""String tensors across the backend ABI (1.3): numpy object arrays <-> ``nnp_string`` arrays.

ONNX STRING tensors are numpy object arrays of ``str`` in the core (as onnxruntime returns
them). A native backend sees them as arrays of ``nnp_string {const char* data; uint64_t
size;}`` in host memory: for inputs and constants the bytes are the host's, packed here and
kept alive by the returned object; for outputs the backend allocates the bytes, the host copies
them (bounded reads: a bad pointer is an error, never a crash) and hands them back through the
table's ``release_strings``.
"""

from __future__ import annotations

import ctypes as C
import itertools
import math

import numpy as np

from ..errors import BackendError, InputError
from ..graph import is_string, node_has_strings  # noqa: F401  (used as string_tensors.*)
from . import abi, strings
from .buffer import address_of

MAX_STRING_BYTES = 1 << 30  # NNP_MAX_STRING_BYTES (backend.h)
_ITEM = np.dtype([("data", np.uint64), ("size", np.uint64)])  # == nnp_string, 16 bytes
assert _ITEM.itemsize == C.sizeof(abi.String)


class Packed:
    """An ``nnp_string`` array over the UTF-8 bytes of a numpy array; ``address`` is valid while
    this object lives."""

    __slots__ = ("items", "blob", "address", "nbytes")

    def __init__(self, arr: np.ndarray, what: str):
        flat = np.asarray(arr).reshape(-1)
        parts = []
        for i, v in enumerate(flat):
            if isinstance(v, str):
                try:
                    parts.append(v.encode("utf-8"))
                except UnicodeEncodeError as e:
                    raise InputError(f"{what}: element {i} is not valid Unicode text ({e.reason}); "
                                     f"string tensors hold UTF-8 text") from None
            elif isinstance(v, (bytes, np.bytes_)):
                parts.append(bytes(v))
            else:
                raise InputError(f"{what}: element {i} is a {type(v).__name__}; a string tensor "
                                 f"holds str (or bytes) elements")
        self.blob = b"".join(parts)
        base = C.cast(C.c_char_p(self.blob), C.c_void_p).value or 0
        sizes = [len(p) for p in parts]
        self.items = np.zeros(max(len(parts), 1), _ITEM)
        if parts:  # Python ints: a run's few labels cost less than numpy's calls
            self.items["data"][:len(parts)] = [base + at if n else 0 for at, n in
                                               zip(itertools.accumulate(sizes, initial=0), sizes)]
            self.items["size"][:len(parts)] = sizes
        self.address = self.items.ctypes.data
        self.nbytes = len(parts) * _ITEM.itemsize


def pack(arr: np.ndarray, what: str) -> Packed:
    return Packed(arr, what)


def output_items(shape) -> np.ndarray:
    """Zeroed ``nnp_string`` elements for a string output of this shape."""
    return np.zeros(max(math.prod(shape), 1), _ITEM)


def unpack(items: np.ndarray, shape, release, who: str) -> np.ndarray:
    """The object array of str a backend wrote into ``items`` (from :func:`output_items`);
    ``release(address, count)`` frees the backend's bytes, whatever happens here."""
    n = math.prod(shape)
    address = address_of(items)
    try:
        out = np.empty(n, object)
        ptrs, sizes = items["data"][:n].tolist(), items["size"][:n].tolist()
        for i in range(n):
            if sizes[i] > MAX_STRING_BYTES:
                raise BackendError(f"{who}: string output element {i} claims {sizes[i]} bytes, "
                                   f"more than NNP_MAX_STRING_BYTES ({MAX_STRING_BYTES})")
            if sizes[i] and not ptrs[i]:
                raise BackendError(f"{who}: string output element {i} has {sizes[i]} bytes at "
                                   f"NULL")
        blob = strings.read_gathered(address, sizes)
        at = 0
        for i in range(n):
            if blob is None:  # some element is unreadable: read one by one to name it
                raw = strings.read_bytes(ptrs[i], sizes[i])
                if len(raw) != sizes[i]:
                    raise BackendError(f"{who}: string output element {i} points to unreadable "
                                       f"memory ({ptrs[i]:#x}, {sizes[i]} bytes)")
            else:
                raw = blob[at:at + sizes[i]]
                at += sizes[i]
            try:
                out[i] = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BackendError(f"{who}: string output element {i} is not UTF-8 ({e.reason} at "
                                   f"byte {e.start}: {strings.shorten(repr(raw))})") from None
        return out.reshape(shape)
    finally:
        if n and release:
            release(address, n)


def unpack_outputs(outputs, release, where: str, rc_ok: bool) -> dict:
    """{value name: object array of str} of a call's string ``outputs`` ((name, items, shape)
    each, from :func:`output_items`), every element array released whatever happens; the first
    bad element is an error when the call itself succeeded (``rc_ok``), else the call's own
    failure is what the caller reports. ``where``: "backend 'x', node ...", for messages."""
    texts, error = {}, None
    for name, items, shape in outputs:
        try:
            texts[name] = unpack(items, shape, release, f"{where}, output {name!r}")
        except BackendError as e:
            error = error or e
    if error is not None and rc_ok:
        raise error
    return texts


def takes_strings(lib) -> bool:
    """Whether a loaded native library may be given string tensors (ABI 1.3 and release_strings,
    host-visible memory)."""
    return bool(lib.host_visible and lib.table.release_strings)


"""An ONNX model's bytes read once: the protobuf parsed without its large weights, and each of
those weights copied once, straight from the file, into its own array.

``onnx.load`` reads the whole file into memory, the protobuf parser copies every initializer's
``raw_data`` into the message, and ``numpy_helper.to_array`` copies it again: three copies of
every weight, half a second on a 400 MB transformer. Here the file is mapped, the wire format
of the model's top-level graph is walked (a few thousand fields: its nodes and initializers
are skipped or cut, never parsed), and the message is parsed from the model *without* the
``raw_data`` of its large plain-typed initializers, whose bytes go directly from the mapping
into aligned numpy arrays. The tensors so cut stay in the proto with their name, type and
dims and no data; :func:`weight_of` says which those are.

Anything unexpected (a malformed file, a graph field given twice, a big-endian host) falls
back to ``onnx.load``, which then reports what is wrong in its own words.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .threads import available_cores

if TYPE_CHECKING:
    import onnx

CUT_MIN_ELEMENTS = 4096
"""Initializers with more elements than this lose their bytes in the proto; smaller ones stay
inline, where shape inference reads their values (nnplug.inference's skeleton drops exactly
the larger ones, by this same limit)."""

_GRAPH = 7  # ModelProto.graph
_INITIALIZER = 5  # GraphProto.initializer
# TensorProto fields
_DIMS, _DATA_TYPE, _SEGMENT, _NAME, _RAW_DATA, _DATA_LOCATION = 1, 2, 3, 8, 9, 14
_TYPED_DATA = {4, 5, 6, 7, 10, 11}  # float_data .. uint64_data: the values are not raw bytes

_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
# TensorProto.DataType numbers (onnx.proto; stable): nnplug imports onnx on the first load only
_PLAIN = {1: np.float32, 11: np.float64, 10: np.float16, 3: np.int8, 5: np.int16, 6: np.int32,
          7: np.int64, 2: np.uint8, 4: np.uint16, 12: np.uint32, 13: np.uint64, 9: np.bool_}
"""Element types whose raw_data is the array's own little-endian bytes (the others, such as
bfloat16, float8 and 4-bit types, go through onnx's own conversion)."""


@dataclass
class ModelFile:
    """A model as read: ``proto`` (the cut initializers without bytes) and ``weights``, the
    arrays of the cut initializers by name (read-only; the stages make new arrays).

    ``weights_identity``: a string that changes whenever the cut weights' bytes may have
    (the file's identity and times for a file, a hash for bytes); the plan cache keys on it
    with the proto (:mod:`nnplug.plan_cache`)."""

    proto: onnx.ModelProto
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)

    def weights_identity(self) -> str:
        if isinstance(self.weights, FileWeights):
            return self.weights.identity
        if not self.weights:
            return "none"
        import hashlib

        h = hashlib.sha256()
        for name in sorted(self.weights):
            w = self.weights[name]
            h.update(f"{name}:{w.dtype.str}:{w.shape};".encode())
            h.update(memoryview(np.ascontiguousarray(w)).cast("B"))
        return "sha256:" + h.hexdigest()


class FileWeights(Mapping):
    """The cut weights of a model file, copied out of the file when one is first asked for
    (all at once, in one mapping): a load that never reads them, such as one a plan cache
    answers, never copies them. The file must still be what it was when its skeleton was
    read (same size, times and inode), else reading them is an error that names it."""

    def __init__(self, path: str, stat: os.stat_result, cut: list):
        self.path = path
        self._stat = _file_stamp(stat)
        self._cut = cut
        self._names = [c[0] for c in cut]
        self._arrays: dict[str, np.ndarray] | None = None
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        return f"file:{os.path.realpath(self.path)}:{self._stat}"

    def arrays(self) -> dict[str, np.ndarray]:
        """Every weight, copied out of the file now if it was not yet."""
        with self._lock:
            if self._arrays is None:
                self._arrays = self._copy()
            return self._arrays

    def _copy(self) -> dict[str, np.ndarray]:
        from .errors import ModelError

        changed = ModelError(
            f"model file {self.path!r} changed while it was being loaded (its weights are read "
            f"after its graph): load it again once it is written")
        try:
            with open(self.path, "rb") as f:
                if _file_stamp(os.fstat(f.fileno())) != self._stat:
                    raise changed
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise ModelError(f"model file {self.path!r} cannot be read again for its "
                             f"weights: {e}") from None
        try:
            view = memoryview(mapping)
            try:
                return _copy_weights(view, self._cut)
            finally:
                view.release()
        finally:
            mapping.close()

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays()[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name) -> bool:
        return name in self._names if self._arrays is None else name in self._arrays


def _file_stamp(st: os.stat_result) -> str:
    """What changes when a file is written again or replaced (ctime cannot be set back)."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class _Unexpected(Exception):
    """The bytes are not what this reader walks; onnx.load reads them instead."""


def weight_of(tensor: onnx.TensorProto, weights: dict[str, np.ndarray]) -> np.ndarray | None:
    """The array of ``tensor`` when it is one of ``weights`` cut from its proto (no data of
    its own left), else None (its own data is what it holds)."""
    w = weights.get(tensor.name)
    if w is None or tensor.HasField("raw_data") or tensor.data_location == _EXTERNAL:
        return None
    if any(len(getattr(tensor, f.name)) for f in tensor.DESCRIPTOR.fields
           if f.number in _TYPED_DATA):
        return None
    return w


def read_file(path: str, lazy: bool = False) -> ModelFile:
    """The model file at ``path`` (its external data read from the file's folder, as
    ``onnx.load`` does). ``lazy``: leave the weights in the file until a stage asks for them
    (a plan cache may answer the load without them); otherwise they are copied now, which is
    measurably faster here than later in a load (0.07 against 0.16 s for BERT-base's 437 MB
    when the previous session's memory was just freed)."""
    import onnx

    try:
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # an empty file, a file that cannot be mapped
        return ModelFile(onnx.load(path))
    try:
        read = _split(mapping, lambda cut: FileWeights(path, stat, cut))
    finally:
        try:
            mapping.close()
        except BufferError:  # a view still held (by a traceback): freed with it
            pass
    if read is None:
        return ModelFile(onnx.load(path))
    if not lazy:
        read.weights.arrays()
    from onnx.external_data_helper import load_external_data_for_model

    # every tensor onnx.load would fill (subgraphs' and attributes' too); the cut ones have no
    # external data, so they are left alone
    load_external_data_for_model(read.proto, os.path.dirname(os.path.abspath(path)))
    return read


def read_bytes(data) -> ModelFile:
    """The model serialized in ``data`` (bytes, bytearray or memoryview)."""
    import onnx

    read = _split(data)
    return read if read is not None else ModelFile(onnx.load_from_string(bytes(data)))


def _split(data, lazy=None) -> ModelFile | None:
    """``data`` parsed with its large weights cut out and copied to arrays (or, with
    ``lazy``, handed to ``lazy(cut)`` to copy when asked); None where this reader does not
    walk it (onnx.load then reads it)."""
    import onnx

    if sys.byteorder != "little":
        return None
    view = memoryview(data).cast("B")
    try:
        try:
            pieces, cut = _cut_model(view)
        except (_Unexpected, IndexError):
            return None
        if not cut:
            return None  # nothing gained: the plain reader
        skeleton = b"".join(pieces)
        del pieces
        weights = lazy(cut) if lazy is not None else _copy_weights(view, cut)
    finally:
        view.release()
    return ModelFile(onnx.load_from_string(skeleton), weights)


PARALLEL_COPY_BYTES = 64 << 20
"""Weights of at least this many bytes in all are copied by several threads: the copy's cost is
mostly the kernel handing out fresh pages, which the cores do side by side (BERT-base's
415 MB: 0.09-0.40 s on one thread of this 2-core machine, 0.06 s on two)."""


def _copy_weights(view: memoryview, cut: list) -> dict[str, np.ndarray]:
    """Each cut weight's bytes copied once into its own read-only array."""

    def copy(item):
        name, dtype, dims, start, end = item
        arr = np.empty(dims, dtype)
        with view[start:end] as raw:
            arr.reshape(-1).view(np.uint8)[:] = raw  # numpy lets go of the GIL for the copy
        arr.flags.writeable = False
        return name, arr

    threads = min(4, available_cores())
    if threads < 2 or sum(end - start for _, _, _, start, end in cut) < PARALLEL_COPY_BYTES:
        return dict(map(copy, cut))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="nnplug-read") as pool:
        done = dict(pool.map(copy, sorted(cut, key=lambda c: c[3] - c[4])))  # largest first
    return {c[0]: done[c[0]] for c in cut}  # in the file's order


def _varint(buf, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise _Unexpected("varint too long")


def _encode(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, field start, value start, value end) of each field."""
    i = start
    while i < end:
        key, j = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, k = _varint(buf, j)
        elif wire == 2:
            n, j = _varint(buf, j)
            k = j + n
        elif wire == 1:
            k = j + 8
        elif wire == 5:
            k = j + 4
        else:  # groups: not in ONNX's messages
            raise _Unexpected(f"wire type {wire}")
        if k > end:
            raise _Unexpected("a field runs past its message")
        yield number, wire, i, j, k
        i = k


def _cut_model(buf) -> tuple[list, list]:
    """The model's bytes as pieces to join, with its graph's large raw initializers left out,
    and what was left out: (name, dtype, dims, start, end of the bytes)."""
    pieces, cut, graphs = [], [], 0
    for number, wire, at, start, end in _fields(buf, 0, len(buf)):
        if number != _GRAPH or wire != 2:
            pieces.append(buf[at:end])
            continue
        graphs += 1
        if graphs > 1:  # a message split in two is merged by protobuf: leave that to it
            raise _Unexpected("the graph field appears twice")
        graph, cut = _cut_graph(buf, start, end)
        pieces.append(bytes([(_GRAPH << 3) | 2]) + _encode(sum(len(p) for p in graph)))
        pieces.extend(graph)
    return pieces, cut


def _cut_graph(buf, start: int, end: int) -> tuple[list, list]:
    pieces, cut, names = [], [], set()
    for number, wire, at, s, e in _fields(buf, start, end):
        if number == _INITIALIZER and wire == 2:
            kept = _cut_tensor(buf, s, e, cut, names)
            if kept is not None:
                pieces.append(bytes([(_INITIALIZER << 3) | 2]) + _encode(
                    sum(len(p) for p in kept)))
                pieces.extend(kept)
                continue
        pieces.append(buf[at:e])
    return pieces, cut


def _cut_tensor(buf, start: int, end: int, cut: list, names: set) -> list | None:
    """The tensor's fields but raw_data when its bytes are cut out (recorded in ``cut``);
    None when it stays whole."""
    dims, dtype, name, raw, plain = [], 0, None, None, True
    kept = []
    for number, wire, at, s, e in _fields(buf, start, end):
        if number == _RAW_DATA and wire == 2:
            raw = (s, e)
            continue
        kept.append(buf[at:e])
        if number == _DIMS:
            if wire == 0:
                dims.append(_varint(buf, s)[0])
            elif wire == 2:  # packed
                i = s
                while i < e:
                    d, i = _varint(buf, i)
                    dims.append(d)
        elif number == _DATA_TYPE and wire == 0:
            dtype = _varint(buf, s)[0]
        elif number == _NAME and wire == 2:
            name = bytes(buf[s:e]).decode("utf-8", "replace")
        elif number in _TYPED_DATA or number == _SEGMENT or (
                number == _DATA_LOCATION and _varint(buf, s)[0] != 0):
            plain = False
    if raw is None or not plain or not name or name in names or dtype not in _PLAIN:
        return None
    dims = [d - (1 << 64) if d >= 1 << 63 else d for d in dims]  # int64 on the wire
    if any(d < 0 for d in dims):
        return None
    numel = int(np.prod(dims, dtype=np.int64)) if dims else 1
    np_type = np.dtype(_PLAIN[dtype])
    if numel <= CUT_MIN_ELEMENTS or raw[1] - raw[0] != numel * np_type.itemsize:
        return None  # small, or its size is wrong: to_array says so in its words
    names.add(name)
    cut.append((name, np_type, tuple(dims), raw[0], raw[1]))
    return kept


__all__ = ["CUT_MIN_ELEMENTS", "FileWeights", "ModelFile", "read_bytes", "read_file", "weight_of"]

"""The on-disk cache of placed plans: what the read-to-place stages decided for a model,
kept so that loading the same model again on the same plugins skips them.

An entry holds the nodes after expansion, folding and merging, where each runs, and the
constants they read (weights and folded values), 64-byte aligned. A load it answers reads
the model file's graph (not its weights), maps the entry's constants straight from the file
(no copy: the pages are the file's, shared by every process that maps it) and goes on to
the compile stage. Backends still build their kernels, so what they pack is packed again.

An entry is keyed on everything that could change what the stages decide (see
:func:`plan_key`): the model's graph (hashed) and its weights (a file's identity and
times, or the bytes' hash), nnplug's and each plugin's version and code, the backends
in order, their targets, the custom ops and function bodies, the optimization level and
placement mode. Entries are written to a temporary file and renamed into place, never
rewritten: a process that maps one keeps its bytes even when another replaces it. An entry
that cannot be read (cut short, another format, not what its key says) is reported in the
log and rebuilt.

Entries are pickles: the cache folder must be writable only by the user who reads it (the
default, under the home folder, is).

Turn it on with ``Runtime.load(..., plan_cache=True | folder)``, the session config entry
``nnplug.plan_cache_dir``, or ``NNPLUG_PLAN_CACHE`` (``1`` for the default folder
``$NNPLUG_CACHE_DIR/plans``, else a folder). See docs/performance.md.
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ._version import __version__
from .plugins import log

if TYPE_CHECKING:
    from .graph import Model, Node
    from .model_file import ModelFile

ENV_VAR = "NNPLUG_PLAN_CACHE"
CACHE_ENV_VAR = "NNPLUG_CACHE_DIR"
"""Where nnplug keeps what it remembers across processes (default ~/.cache/nnplug)."""
CONFIG_KEY = "nnplug.plan_cache_dir"
"""The session config entry that turns the cache on for an InferenceSession: a folder."""
FORMAT = 1
MAGIC = b"NNPPLAN" + bytes([FORMAT])
SUFFIX = ".nnplan"
_ALIGN = 64
_HEADER = struct.Struct("<8sQQ32s")  # magic, meta length, data length, sha256 of meta


def cache_root() -> str:
    return os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "nnplug")


def cache_folder(option=None) -> str | None:
    """The folder entries live in, or None when the cache is off. ``option``: False (off),
    True (the default folder), a folder, or None (what ``NNPLUG_PLAN_CACHE`` says: unset,
    empty or ``0`` is off, ``1`` the default folder, anything else a folder)."""
    if option is None:
        option = os.environ.get(ENV_VAR, "")
        option = {"": False, "0": False, "1": True}.get(option, option)
    if option is False:
        return None
    if option is True:
        return os.path.join(cache_root(), "plans")
    return os.fspath(option)


@dataclass
class Decided:
    """What the stages from read to place decided for one load: what an entry keeps, and what
    a load from it compiles."""

    model: Model
    """The model as read and checked (the Network's inputs, outputs and op types)."""
    folded: Model
    """The model after expansion and folding (the values the nodes make)."""
    nodes: list[Node]
    """The nodes left to run, in order."""
    placed: dict[str, tuple[str, bool, dict[str, str]]]
    """Node name -> (where it runs, claimed with the next node, who declined it and why)."""
    constants: dict[str, np.ndarray]
    assignment: dict[str, str]
    """Where the nodes folded at load ran."""
    declined: dict[str, dict[str, str]]
    merged: dict[str, str]
    """Node merged away -> the node it is the same as."""
    warnings: list[tuple[str, str]] = field(default_factory=list)
    """(category name, message) of the warnings the stages gave, said again on a cache hit."""


def plan_key(read: ModelFile, infos, ops: dict, functions, targets: dict, *,
             optimization: str, placement: str, use_overrides: bool) -> str:
    """The hex key of a load: changes with anything that changes what the stages decide."""
    import hashlib

    h = hashlib.sha256()

    def put(*parts):
        for p in parts:
            h.update(repr(p).encode())
            h.update(b"\0")

    put("format", FORMAT, "nnplug", __version__, _code_stamp(sys.modules[__package__]))
    put("python", sys.version_info[:2], "numpy", np.__version__, "byteorder", sys.byteorder)
    for info in infos:
        put("backend", info.id, info.version, info.source, _code_stamp(info.backend),
            str(targets.get(info.id)))
    for name in sorted(ops):
        op = ops[name]
        put("op", name, type(op).__qualname__, getattr(op, "label", None),
            getattr(op, "targets", None), getattr(op, "override", None), _code_stamp(op))
    for key in sorted(functions):
        put("function", key, getattr(functions[key], "source", None))
    put("optimization", optimization, "placement", placement, "overrides", use_overrides)
    put("weights", read.weights_identity())
    h.update(hashlib.sha256(read.proto.SerializeToString(deterministic=True)).digest())
    return h.hexdigest()


def _code_stamp(obj) -> str:
    """The identity of the files ``obj``'s code comes from (a native backend's library, else
    every module of the package its class is defined in): an editable install changes code,
    not versions."""
    import inspect

    path = getattr(obj, "path", None)
    if not isinstance(path, str):
        path = getattr(getattr(obj, "library", None), "path", None)
    if not isinstance(path, str):
        module = obj if inspect.ismodule(obj) else inspect.getmodule(type(obj))
        top = sys.modules.get(module.__name__.split(".")[0]) if module else None
        path = getattr(top, "__file__", None)
        if not isinstance(path, str):
            return "?"
    try:
        if os.path.basename(path) == "__init__.py":  # a package: its newest module counts
            folder = os.path.dirname(path)
            stamps = [_stat_stamp(os.path.join(root, f))
                      for root, _, files in os.walk(folder) for f in files if f.endswith(".py")]
            return f"{folder}:{max(stamps)}:{len(stamps)}"
        return f"{path}:{_stat_stamp(path)}"
    except OSError:
        return f"{path}:?"


def _stat_stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


class PlanCache:
    """Entries in one folder."""

    def __init__(self, folder: str):
        self.folder = folder

    def path(self, key: str) -> str:
        return os.path.join(self.folder, key + SUFFIX)

    def read(self, key: str) -> Decided | None:
        """The entry of ``key``; None when there is none or it cannot be used (said in the
        log: it is written again after this load)."""
        path = self.path(key)
        try:
            return _read_entry(path, key)
        except FileNotFoundError:
            return None
        except Exception as e:  # a damaged entry is rebuilt, never trusted
            log.warning("nnplug: plan cache entry %s cannot be used (%s); rebuilding it",
                        path, e)
            return None

    def write(self, key: str, decided: Decided) -> None:
        """Store ``decided`` under ``key``; a cache that cannot be written is said in the log
        and the load goes on."""
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            _write_entry(self.path(key), key, decided)
        except Exception as e:
            log.warning("nnplug: cannot write the plan cache entry in %s: %s", self.folder, e)


def _shell(model: Model) -> Model:
    """``model`` without its weights and graph: what control flow reads of its proto (opsets,
    IR version, functions) is kept."""
    import onnx

    proto = None
    if model.proto is not None:
        proto = onnx.ModelProto(ir_version=model.proto.ir_version)
        proto.opset_import.extend(model.proto.opset_import)
        proto.functions.extend(model.proto.functions)
    return replace(model, constants={}, proto=proto, producers={})


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _write_entry(path: str, key: str, d: Decided) -> None:
    import hashlib
    import pickle
    import tempfile

    table, offset, small = {}, 0, {}
    arrays = []
    written: dict[int, tuple] = {}  # one copy of an array kept under several names (Identity)
    for name, given in d.constants.items():
        if id(given) in written:
            table[name] = written[id(given)]
            continue
        a = np.asarray(given)
        if a.dtype.hasobject or a.dtype.isbuiltin != 1 or a.nbytes < _ALIGN * 4:
            # pickled: strings, ml_dtypes' types (bfloat16, float8, int4: their dtype.str
            # reads back as raw bytes), and arrays smaller than their padding
            small[name] = a
            continue
        a = np.ascontiguousarray(a)
        table[name] = written[id(given)] = (a.dtype.str, a.shape, offset, a.nbytes)
        arrays.append(a)
        offset += _aligned(a.nbytes)
    described = replace(d, model=_shell(d.model), folded=_shell(d.folded), constants=small)
    meta = pickle.dumps({"key": key, "decided": described, "table": table}, protocol=5)
    head = _HEADER.pack(MAGIC, len(meta), offset, hashlib.sha256(meta).digest())
    start = _aligned(len(head) + len(meta))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            f.write(meta)
            f.write(b"\0" * (start - len(head) - len(meta)))
            for a in arrays:
                f.write(memoryview(a).cast("B"))
                f.write(b"\0" * (-a.nbytes % _ALIGN))
        os.replace(tmp, path)  # readers see the old entry or the new one, never half of one
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_entry(path: str, key: str) -> Decided:
    import hashlib
    import mmap
    import pickle

    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if hasattr(os, "geteuid") and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
            raise ValueError("another user owns it or others may write it (its description "
                             "is a pickle: only entries this user wrote are read)")
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise ValueError("shorter than its header")
        magic, meta_len, data_len, digest = _HEADER.unpack(head)
        if magic != MAGIC:
            raise ValueError("not a plan cache entry of this nnplug's format")
        meta_bytes = f.read(meta_len)
        if len(meta_bytes) != meta_len or hashlib.sha256(meta_bytes).digest() != digest:
            raise ValueError("its description is cut short or damaged")
        start = _aligned(_HEADER.size + meta_len)
        if st.st_size != start + data_len:
            raise ValueError(f"{st.st_size} bytes where its header says {start + data_len}")
        meta = pickle.loads(meta_bytes)
        if meta["key"] != key:
            raise ValueError("it was written for another key")
        mapping = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if data_len else None)
    decided = meta["decided"]
    constants = decided.constants  # the pickled ones, then the mapped ones
    for name, (dtype, shape, offset, nbytes) in meta["table"].items():
        # read-only views of the mapping: the entry is never written in place (replaced
        # whole), so its pages stay what they were for as long as a session maps them
        dt = np.dtype(dtype)
        constants[name] = np.frombuffer(mapping, dtype=dt, count=nbytes // dt.itemsize,
                                        offset=start + offset).reshape(shape)
    for a in constants.values():
        if isinstance(a, np.ndarray) and a.flags.writeable:
            a.flags.writeable = False
    return decided


__all__ = ["CONFIG_KEY", "ENV_VAR", "Decided", "PlanCache", "cache_folder", "plan_key"]

"""Libraries built for onnxruntime's custom-op C API, run as nnplug custom ops.

``RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)`` is called once with nnplug's
``OrtApiBase`` (:mod:`._custom_op_api`); the ``OrtCustomOp`` structs it adds to its domains
become one :class:`OrtLibraryOp` per op type (CPU execution provider only). A node is bound
to the op of its domain (else the first domain that has the type) whose declared input
types fit: ``CreateKernel[V2]`` once per node, ``KernelCompute[V2]`` per run on host numpy
arrays (strings as object arrays), ``KernelDestroy`` when the network goes.

Output shapes are known only when the kernel allocates them (``KernelContext_GetOutput``),
as in onnxruntime; output types come from ``GetOutputType``, an undefined one taking the
type of the op's type-generic input (onnxruntime's rule). The library stays loaded for the
life of the process.
"""

from __future__ import annotations

import ctypes as C
import logging
import os
import shutil
import tempfile
import threading
import weakref

import numpy as np

from ..customop import BoundOp, CustomOp
from ..errors import CustomOpError
from ..tensor import Tensor
from . import _custom_op_api as ort

log = logging.getLogger("nnplug.ops")

ENTRY_SYMBOL = "RegisterCustomOps"
CPU_PROVIDER = "CPUExecutionProvider"
UNDEFINED = 0
OPTIONAL, VARIADIC = 1, 2  # OrtCustomOpInputOutputCharacteristic (0: required)

_OP = C.c_void_p
_GET_STR = C.CFUNCTYPE(C.c_void_p, _OP)
_GET_TYPE = C.CFUNCTYPE(C.c_int, _OP, C.c_size_t)
_GET_COUNT = C.CFUNCTYPE(C.c_size_t, _OP)
_GET_INT = C.CFUNCTYPE(C.c_int, _OP)
_CREATE = C.CFUNCTYPE(C.c_void_p, _OP, C.c_void_p, C.c_void_p)
_CREATE_V2 = C.CFUNCTYPE(C.c_void_p, _OP, C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p))
_COMPUTE = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p)
_COMPUTE_V2 = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_void_p)
_DESTROY = C.CFUNCTYPE(None, C.c_void_p)


class OrtCustomOpStruct(C.Structure):
    """onnxruntime's ``OrtCustomOp``; a member exists when ``version`` is at least the
    version beside it (onnxruntime reads no further)."""

    _fields_ = [("version", C.c_uint32),
                ("CreateKernel", C.c_void_p), ("GetName", C.c_void_p),                 # 1
                ("GetExecutionProviderType", C.c_void_p), ("GetInputType", C.c_void_p),
                ("GetInputTypeCount", C.c_void_p), ("GetOutputType", C.c_void_p),
                ("GetOutputTypeCount", C.c_void_p), ("KernelCompute", C.c_void_p),
                ("KernelDestroy", C.c_void_p),
                ("GetInputCharacteristic", C.c_void_p),                                # 8
                ("GetOutputCharacteristic", C.c_void_p),
                ("GetInputMemoryType", C.c_void_p),                                    # 12
                ("GetVariadicInputMinArity", C.c_void_p),                              # 14
                ("GetVariadicInputHomogeneity", C.c_void_p),
                ("GetVariadicOutputMinArity", C.c_void_p),
                ("GetVariadicOutputHomogeneity", C.c_void_p),
                ("CreateKernelV2", C.c_void_p), ("KernelComputeV2", C.c_void_p),       # 16
                ("InferOutputShapeFn", C.c_void_p), ("GetStartVersion", C.c_void_p),   # 17
                ("GetEndVersion", C.c_void_p)]


_SINCE = {"GetInputCharacteristic": 8, "GetOutputCharacteristic": 8,
          "GetVariadicInputMinArity": 14, "GetVariadicOutputMinArity": 14,
          "CreateKernelV2": 16, "KernelComputeV2": 16}


class OpDef:
    """One ``OrtCustomOp`` of a library: its name, domain and declared types."""

    def __init__(self, address: int, domain: str, path: str):
        self.address = address
        self.domain = domain
        self.path = path
        self.version = C.c_uint32.from_address(address).value
        size = C.sizeof(OrtCustomOpStruct) if self.version >= 17 else \
            OrtCustomOpStruct.GetStartVersion.offset if self.version >= 16 else \
            OrtCustomOpStruct.CreateKernelV2.offset if self.version >= 14 else \
            OrtCustomOpStruct.GetInputMemoryType.offset if self.version >= 8 else \
            OrtCustomOpStruct.GetInputCharacteristic.offset
        self.s = OrtCustomOpStruct()
        C.memmove(C.addressof(self.s), address, size)
        self.name = self._string("GetName")
        self.provider = self._string("GetExecutionProviderType") or CPU_PROVIDER
        self.input_types = self._types("GetInputTypeCount", "GetInputType")
        self.output_types = self._types("GetOutputTypeCount", "GetOutputType")
        self.input_kinds = self._kinds("GetInputCharacteristic", len(self.input_types))
        self.output_kinds = self._kinds("GetOutputCharacteristic", len(self.output_types))
        self.v2 = bool(self._member("CreateKernelV2") and self._member("KernelComputeV2"))
        if not self.v2 and not (self.s.CreateKernel and self.s.KernelCompute):
            raise CustomOpError(f"onnxruntime custom op {self.name!r} of {path} has neither "
                                f"CreateKernel/KernelCompute nor their V2")

    def _member(self, name: str):
        return getattr(self.s, name) if self.version >= _SINCE.get(name, 1) else None

    def _string(self, member: str) -> str | None:
        fn = self._member(member)
        p = _GET_STR(fn)(self.address) if fn else None
        return C.string_at(p).decode("utf-8") if p else None

    def _types(self, count: str, each: str) -> list[int]:
        n = _GET_COUNT(getattr(self.s, count))(self.address)
        get_type = _GET_TYPE(getattr(self.s, each))
        return [int(get_type(self.address, i)) for i in range(n)]

    def _kinds(self, member: str, n: int) -> list[int]:
        fn = self._member(member)
        if not fn:
            return [0] * n
        get_kind = _GET_TYPE(fn)
        return [int(get_kind(self.address, i)) for i in range(n)]

    # -- types for one node -------------------------------------------------------------------
    def _declared(self, types: list[int], kinds: list[int], i: int) -> int:
        if i < len(types):
            return types[i]
        if types and kinds and kinds[-1] == VARIADIC:
            return types[-1]
        return UNDEFINED

    def fits(self, in_dtypes: list) -> bool:
        """Whether inputs of these dtypes (None: omitted or unknown) fit the declared types."""
        for i, d in enumerate(in_dtypes):
            want = self._declared(self.input_types, self.input_kinds, i)
            if d is not None and want != UNDEFINED and ort.element_type(d) != want:
                return False
        return True

    def output_types_for(self, n_outputs: int, in_dtypes: list) -> list[int]:
        """onnxruntime's rule: an undefined output type is that of the op's type-generic
        (undefined) input, the last such input given."""
        generic = UNDEFINED
        for i, d in enumerate(in_dtypes):
            if d is not None and self._declared(self.input_types, self.input_kinds, i) \
                    == UNDEFINED:
                generic = ort.element_type(d)
        return [self._declared(self.output_types, self.output_kinds, i) or generic
                for i in range(n_outputs)]


class OrtLibrary:
    def __init__(self, path: str, cdll):
        self.path = path
        self.cdll = cdll


_libraries: dict[str, list[OpDef]] = {}  # real path -> its ops (registered once a process)
_libraries_lock = threading.Lock()


def has_entry(cdll) -> bool:
    try:
        getattr(cdll, ENTRY_SYMBOL)
        return True
    except AttributeError:
        return False


def load_ort_library(path: str, cdll) -> list[OrtLibraryOp]:
    """The ops of the onnxruntime custom-op library at ``path`` (``cdll``: that file loaded,
    found to export ``RegisterCustomOps``; the ops run in a private copy, see
    :func:`_private_copy`).

    Raises :class:`nnplug.native.loader.LibraryLoadError` when its ``RegisterCustomOps``
    fails."""
    from ..native.loader import LibraryLoadError

    real = os.path.realpath(path)
    with _libraries_lock:
        defs = _libraries.get(real)
        if defs is None:
            cdll = _private_copy(real)
            entry = getattr(cdll, ENTRY_SYMBOL)
            entry.restype, entry.argtypes = C.c_void_p, [C.c_void_p, C.c_void_p]
            options = ort.SessionOptions()
            handle = ort.new_handle(options)
            try:
                failed = ort.status_result(entry(handle, C.addressof(ort.API_BASE)))
            finally:
                ort.drop_handle(handle)
            if failed:
                code, message = failed
                raise LibraryLoadError(
                    path, "register",
                    f"{ENTRY_SYMBOL} returned {ort.ERROR_NAMES[code] if code < 12 else code}: "
                    f"{message}",
                    "see docs/coming-from-onnxruntime.md for the onnxruntime C API nnplug "
                    "implements")
            defs = []
            for domain in options.domains:
                for address in domain.ops:
                    defs.append(OpDef(address, domain.name, path))
            _libraries[real] = defs
            _keep.append(cdll)
    by_type: dict[str, list[OpDef]] = {}
    for d in defs:
        if d.provider != CPU_PROVIDER:
            continue  # kernels for other execution providers' memory
        by_type.setdefault(d.name, []).append(d)
    ops = [OrtLibraryOp(t, ds, path) for t, ds in by_type.items()]
    log.debug("loaded onnxruntime custom-op library %s: %d op types", path, len(ops))
    return ops


_keep: list = []  # loaded libraries: their function pointers are held by ops


def _private_copy(real: str):
    """The library loaded from a copy of its file: its own globals, apart from the instance
    onnxruntime (or another host) loads from the same file in this process. Such libraries
    keep the first OrtApi they are given in globals (onnxruntime-extensions does), so one
    loaded instance cannot serve two hosts."""
    folder = tempfile.mkdtemp(prefix="nnplug-ortlib-")
    copy = os.path.join(folder, os.path.basename(real))
    try:
        shutil.copyfile(real, copy)
        _unshare_unique_symbols(copy)
        return C.CDLL(copy, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
    finally:  # the loaded copy stays mapped without its file
        shutil.rmtree(folder, ignore_errors=True)


class OrtLibraryOp(CustomOp):
    """One op type of an onnxruntime custom-op library (each domain's and type's kernel)."""

    runs_anywhere = True
    targets = ("cpu",)
    infers_types_only = True
    """Output shapes are known when the kernel runs; types at load (the loader asks for them
    even when input shapes are unknown)."""

    def __init__(self, op_type: str, defs: list[OpDef], path: str):
        self.op_type = op_type
        self.defs = defs
        self.source = path
        self.domains = tuple(dict.fromkeys(d.domain for d in defs))

    def describe(self) -> str:
        return (f"onnxruntime op {self.op_type!r} (domains {', '.join(self.domains)}) from "
                f"{self.source}")

    def pick(self, node, in_dtypes: list) -> OpDef:
        mine = [d for d in self.defs if d.domain == (node.domain or "")] or self.defs
        for d in mine:
            if d.fits(in_dtypes):
                return d
        have = ", ".join(str(d.input_types) for d in mine)
        got = [None if t is None else str(np.dtype(t)) for t in in_dtypes]
        raise CustomOpError(
            f"onnxruntime custom op {self.op_type!r} ({self.source}) has no kernel for the "
            f"input types {got} of node {node.name!r}; its kernels take element types {have}")

    @staticmethod
    def runs(node) -> bool:
        """Not nodes of ONNX's own domain: a library op named like a standard op (StringSplit,
        StringConcat) runs only where the model names its domain, as in onnxruntime."""
        return (node.domain or "") not in ("", "ai.onnx")

    def shape_infer(self, node, in_shapes, in_dtypes):
        if not self.runs(node):
            return [None] * len(node.outputs), [None] * len(node.outputs)
        dtypes = list(in_dtypes) + [None] * (len(node.inputs) - len(in_dtypes))
        d = self.pick(node, _by_position(node, dtypes))
        types = d.output_types_for(len(node.outputs), _by_position(node, dtypes))
        return [None] * len(node.outputs), [ort.numpy_dtype(t) if t else None for t in types]

    def bind(self, node, values, target, backend):
        if not self.runs(node):
            return None  # the backends' kernel for the standard op
        in_dtypes = [values[x].dtype if x and x in values else None for x in node.inputs]
        d = self.pick(node, in_dtypes)
        declared = [values[o].dtype if o and o in values else None for o in node.outputs]
        return _OrtBound(self, d, node, in_dtypes, declared)


def _by_position(node, dtypes_given: list) -> list:
    """Input dtypes by input position (the loader passes those of the inputs given)."""
    it = iter(dtypes_given)
    return [next(it, None) if x else None for x in node.inputs]


class _OrtBound(BoundOp):
    def __init__(self, op: OrtLibraryOp, d: OpDef, node, in_dtypes, declared_out):
        self.op, self.d, self.node = op, d, node
        self.declared_out = declared_out
        self.lock = threading.Lock()
        types = d.output_types_for(len(node.outputs), in_dtypes)
        self.info = ort.KernelInfo(node, [ort.element_type(t) if t is not None else 0
                                          for t in in_dtypes], types)
        self.info_handle = ort.new_handle(self.info)
        self.kernel = self._create()
        self._finalizer = weakref.finalize(self, _destroy, d, self.kernel, self.info_handle)

    def _what(self) -> str:
        return (f"onnxruntime custom op {self.op.op_type!r} (domain {self.d.domain!r}, "
                f"{self.op.source}) on node {self.node.name!r}")

    def _create(self) -> int:
        api = ort.TABLE_ADDRESS
        if self.d.v2:
            kernel = C.c_void_p()
            failed = ort.status_result(_CREATE_V2(self.d.s.CreateKernelV2)(
                self.d.address, api, self.info_handle, C.byref(kernel)))
            if failed:
                ort.drop_handle(self.info_handle)
                raise CustomOpError(f"{self._what()}: CreateKernelV2 failed: "
                                    f"{ort.ERROR_NAMES[failed[0]] if failed[0] < 12 else ''} "
                                    f"{failed[1]}")
            return kernel.value or 0
        return _CREATE(self.d.s.CreateKernel)(self.d.address, api, self.info_handle) or 0

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        if not self._finalizer.alive:
            raise CustomOpError(f"{self._what()} was released (its network was closed)")
        it = iter(inputs)
        arrays = [next(it).numpy() if x else None for x in self.node.inputs]
        values = [None if a is None else _value(a) for a in arrays]
        in_dtypes = [None if a is None else a.dtype for a in arrays]
        types = self.d.output_types_for(len(self.node.outputs), in_dtypes)
        types = [t or (ort.element_type(dt) if dt is not None else 0)
                 for t, dt in zip(types, self.declared_out)]
        ctx = ort.KernelContext(values, types, self.op.op_type)
        handle = ort.new_handle(ctx)
        try:
            with self.lock:
                if self.d.v2:
                    failed = ort.status_result(
                        _COMPUTE_V2(self.d.s.KernelComputeV2)(self.kernel, handle))
                else:
                    _COMPUTE(self.d.s.KernelCompute)(self.kernel, handle)
                    failed = None
            if failed:
                code, message = failed
                raise CustomOpError(f"{self._what()} failed in KernelCompute: "
                                    f"{ort.ERROR_NAMES[code] if code < 12 else code}: {message}")
            return [self._output(ctx, i, name) for i, name in enumerate(self.node.outputs)]
        finally:
            ctx.close()
            ort.drop_handle(handle)

    def _output(self, ctx, i: int, name: str) -> Tensor:
        v = ctx.outputs[i]
        if v is None:
            if name:
                raise CustomOpError(f"{self._what()}: the kernel did not produce output {i} "
                                    f"({name!r}) (it never called KernelContext_GetOutput for "
                                    f"it)")
            return Tensor.from_numpy(np.zeros((0,), np.float32))
        arr = v.array
        if v.etype == ort.STRING_TYPE:
            v.settle()
            flat = arr.reshape(-1)
            for j, s in enumerate(flat):
                if isinstance(s, bytes):
                    try:
                        flat[j] = s.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise CustomOpError(f"{self._what()}: output {name!r} element {j} is "
                                            f"not UTF-8 ({e})") from None
        return Tensor.from_numpy(arr)

    def close(self) -> None:
        self._finalizer()


def _value(a: np.ndarray) -> ort.Value:
    if a.dtype.kind in "OUS":
        return ort.Value(np.asarray(a, dtype=object), ort.STRING_TYPE)
    a = np.ascontiguousarray(a)
    etype = ort.element_type(a.dtype)
    if not etype:
        raise CustomOpError(f"an input of dtype {a.dtype} cannot cross onnxruntime's C API")
    return ort.Value(a, etype)


def _destroy(d: OpDef, kernel: int, info_handle: int) -> None:
    try:
        if kernel and d.s.KernelDestroy:
            _DESTROY(d.s.KernelDestroy)(kernel)
    finally:
        ort.drop_handle(info_handle)


__all__ = ["OrtLibraryOp", "has_entry", "load_ort_library"]


# -- ELF: GNU unique symbols -----------------------------------------------------------------------
_STB_GLOBAL, _STB_GNU_UNIQUE = 1, 10
_SHT_DYNSYM = 11


def _unshare_unique_symbols(path: str) -> int:
    """Rebind the GNU unique symbols of the ELF file at ``path`` as global ones; the count.

    g++ makes the static locals of inline functions (a library's singletons, e.g.
    onnxruntime-extensions' ``OrtW::API::instance``) GNU unique: one per process, whatever
    file they are loaded from. As plain globals of a library loaded RTLD_LOCAL, the copy
    binds them to its own."""
    import struct

    with open(path, "r+b") as f:
        data = bytearray(f.read())
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return 0  # not a 64-bit little-endian ELF file: leave it alone
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        count = 0
        for i in range(shnum):
            at = shoff + i * shentsize
            sh_type, = struct.unpack_from("<I", data, at + 4)
            if sh_type != _SHT_DYNSYM:
                continue
            offset, size = struct.unpack_from("<QQ", data, at + 0x18)
            entsize, = struct.unpack_from("<Q", data, at + 0x38)
            for sym in range(offset, offset + size, entsize or 24):
                info = data[sym + 4]
                if info >> 4 == _STB_GNU_UNIQUE:
                    data[sym + 4] = (_STB_GLOBAL << 4) | (info & 0xF)
                    count += 1
        if count:
            f.seek(0)
            f.write(data)
    return count

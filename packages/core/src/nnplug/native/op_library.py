"""Loading a native custom-op library (``libnnplug_op_*.so``, ``nnplug/custom_op.h``).

``load_op_library`` dlopens the file, asks ``nnp_custom_op_entry`` for its table, checks the
ABI versions, every struct size, string and callback, and makes one :class:`NativeCustomOp`
per op type (with its CPU and/or GPU implementation). A library that fails a check is closed
again and raises :class:`LibraryLoadError` (``stage``, ``reason``, ``fix``). A loaded library
stays loaded until the process exits (function pointers of a library may be held by any
network still alive).
"""

from __future__ import annotations

import ctypes as C
import logging
import os
import threading

from ..customop import CustomOp, is_standard_op
from ..errors import CustomOpError
from . import abi, op_abi, strings
from .loader import LibraryLoadError, _dlclose, _dlopen_fix, check_library_file
from .op import NativeCustomOp
from .op_abi import (
    ABI_MAJOR,
    ABI_MINOR,
    ABI_VERSION,
    ENTRY_SYMBOL,
    MAX_OPS,
    MIN_LIBRARY_SIZE,
    MIN_OP_SIZE,
    OVERRIDES_STANDARD,
    TARGET_GPU,
    TARGET_NAMES,
    CustomOpStruct,
    OpLibraryStruct,
)

log = logging.getLogger("nnplug.ops")


class OpImpl:
    """One checked nnp_custom_op struct (one op type on one target) of a loaded library."""

    def __init__(self, library: OpLibrary, struct: CustomOpStruct, texts: dict,
                 cl_source: bytes | None):
        self.library = library
        self.struct = struct
        self.op_type = texts["op_type"]
        self.target = TARGET_NAMES[struct.target]
        self.cl_source = cl_source
        self.cl_kernel_name = texts["cl_kernel_name"]
        self.cl_build_options = texts["cl_build_options"] or ""
        self._programs: dict[int, object] = {}  # cl_context -> the backend's program
        self._lock = threading.Lock()

    def program(self, handles):
        """The op's OpenCL program, built once per context by the backend that owns it
        (:class:`nnplug.device_api.OpenCLHandles`)."""
        with self._lock:
            prog = self._programs.get(handles.context)
            if prog is None:
                try:
                    prog = handles.build_program(self.cl_source, self.cl_build_options)
                except Exception as e:  # noqa: BLE001 - the backend's error, with its log
                    raise CustomOpError(
                        f"op {self.op_type!r} from {self.library.path}: building its OpenCL "
                        f"kernel failed; compiler log:\n{e}") from None
                self._programs[handles.context] = prog
            return prog

    def release(self) -> None:
        """Drop the programs (a backend releases a program when nothing holds it)."""
        with self._lock:
            self._programs = {}


class OpLibrary:
    """A dlopen'ed custom-op library. Never unloaded (see the module docstring)."""

    def __init__(self, path: str, cdll, name: str | None):
        self.path = path
        self.cdll = cdll
        self.name = name
        self.impls: list[OpImpl] = []


def load_op_library(path) -> list[CustomOp]:
    """Load the custom-op library at ``path``: one NativeCustomOp per op type it exports (or,
    for a library built for onnxruntime's custom-op C API, one ``OrtLibraryOp`` per op type
    its ``RegisterCustomOps`` adds: see ``nnplug.onnxruntime._custom_op_library``).

    Raises :class:`nnplug.native.loader.LibraryLoadError` (``stage``, ``reason``, ``fix``)."""
    path = check_library_file(path, "op library")
    real = os.path.realpath(path)
    try:
        cdll = C.CDLL(real, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
    except OSError as e:
        text = str(e)
        fix = _dlopen_fix(text).replace("backends folder", "custom-op folder")
        raise LibraryLoadError(path, "not loadable", text, fix) from None
    from ..onnxruntime import _custom_op_library as ort_library

    if not _exports(cdll, ENTRY_SYMBOL) and ort_library.has_entry(cdll):
        return ort_library.load_ort_library(path, cdll)  # built for onnxruntime's C API
    try:
        lib = _check_library(path, cdll)
    except BaseException:
        _dlclose(cdll._handle)
        raise
    by_type: dict[str, dict[str, OpImpl]] = {}
    for impl in lib.impls:
        by_type.setdefault(impl.op_type, {})[impl.target] = impl
    ops = [NativeCustomOp(t, impls, lib) for t, impls in by_type.items()]
    log.debug("loaded op library %s: %s", path, ", ".join(op.describe() for op in ops))
    return ops


def _exports(cdll, symbol: str) -> bool:
    try:
        getattr(cdll, symbol)
        return True
    except AttributeError:
        return False


def _check_library(path: str, cdll) -> OpLibrary:
    try:
        entry = getattr(cdll, ENTRY_SYMBOL)
    except AttributeError:
        try:
            with open(path, "rb") as f:
                mangled = b"_Z19nnp_custom_op_entry" in f.read()
        except OSError:
            mangled = False
        raise LibraryLoadError(
            path, "no entry symbol",
            f"{ENTRY_SYMBOL} is there only as a C++-mangled name" if mangled else
            f"the library does not export {ENTRY_SYMBOL}",
            'declare it extern "C" (include <nnplug/custom_op.h>, which does)' if mangled else
            "define NNP_EXPORT const nnp_op_library* nnp_custom_op_entry(const nnp_version*) "
            "(see docs/custom-ops.md); keep other libraries out of custom-op folders",
        ) from None
    entry.restype = C.c_void_p
    entry.argtypes = [C.POINTER(abi.Version)]
    host = abi.Version(*ABI_VERSION)
    address = entry(C.byref(host))
    host_text = ".".join(map(str, ABI_VERSION))
    if not address:
        raise LibraryLoadError(path, "abi version",
                               f"{ENTRY_SYMBOL} returned NULL for host custom-op ABI {host_text}",
                               "install the nnplug version the library was built for")
    _check_version(path, "library", abi.Version.from_address(address).tuple())
    table, size = op_abi.read_struct(OpLibraryStruct, address, "struct_size")
    if size < MIN_LIBRARY_SIZE:
        raise LibraryLoadError(path, "invalid library",
                               f"struct_size {size} is smaller than nnp_op_library "
                               f"({MIN_LIBRARY_SIZE} bytes)",
                               "set struct_size = sizeof(nnp_op_library)")
    if not 1 <= table.num_ops <= MAX_OPS or not table.ops:
        raise LibraryLoadError(path, "invalid library",
                               f"num_ops is {table.num_ops} (ops {'set' if table.ops else 'NULL'})",
                               "list 1 or more nnp_custom_op pointers in ops")
    name = strings.field(table, "name", strings.MAX_NAME_BYTES)
    if name is not None and name.problem:
        raise LibraryLoadError(path, "invalid library", f"name string {name.problem}: {name.shown}",
                               f"make name a NUL-terminated string of at most "
                               f"{strings.MAX_NAME_BYTES} bytes (NNP_MAX_NAME_BYTES)")
    lib = OpLibrary(path, cdll, None if name is None else name.text)
    seen = set()
    for i in range(table.num_ops):
        if not table.ops[i]:
            raise LibraryLoadError(path, "invalid op", f"ops[{i}] is NULL", "list valid ops")
        impl = _check_op(path, lib, i, table.ops[i])
        if (impl.op_type, impl.target) in seen:
            raise LibraryLoadError(path, "invalid op",
                                   f"op {impl.op_type!r} is listed twice for target {impl.target}",
                                   "list each op type once per target")
        seen.add((impl.op_type, impl.target))
        lib.impls.append(impl)
    return lib


def _check_version(path: str, what: str, version: tuple) -> None:
    vtext = ".".join(map(str, version))
    host_text = ".".join(map(str, ABI_VERSION))
    if version[0] != ABI_MAJOR:
        fix = ("upgrade nnplug (pip install -U nnplug)" if version[0] > ABI_MAJOR else
               "rebuild it against this nnplug's headers (nnplug.get_include())")
        raise LibraryLoadError(path, "abi version",
                               f"{what} custom-op ABI {vtext} has major version {version[0]}; "
                               f"this nnplug loads {ABI_MAJOR}.x", fix)
    if version[1] > ABI_MINOR:
        raise LibraryLoadError(path, "abi version",
                               f"{what} custom-op ABI {vtext} is newer than this nnplug's "
                               f"{host_text}",
                               "upgrade nnplug, or rebuild the library against these headers")


def _check_op(path: str, lib: OpLibrary, i: int, address: int) -> OpImpl:
    _check_version(path, f"ops[{i}]", abi.Version.from_address(address).tuple())
    op, size = op_abi.read_struct(CustomOpStruct, address, "struct_size")
    texts, problems = {}, []
    for field, limit, define in _OP_STRINGS:
        s = strings.field(op, field, limit) if size > getattr(CustomOpStruct, field).offset else None
        texts[field] = None if s is None else s.text
        if s is not None and s.problem:
            problems.append((field, s, limit, define))
    name = strings.shorten(texts["op_type"] or "")

    def bad(reason, fix):
        return LibraryLoadError(path, "invalid op", f"ops[{i}] ({name or 'no op_type'}): {reason}",
                                fix)

    if problems:
        field, s, limit, define = problems[0]
        raise bad(f"{field} string {s.problem}: {s.shown}",
                  f"make {field} a NUL-terminated string of at most {limit} bytes ({define} in "
                  f"nnplug/common.h)")
    name = texts["op_type"] or ""
    if size < MIN_OP_SIZE:
        raise bad(f"struct_size {size} is smaller than an ABI 1.0 nnp_custom_op",
                  "set struct_size = sizeof(nnp_custom_op)")
    if not name or not name.replace("_", "").isalnum() or not name[0].isalpha():
        raise bad("op_type must be a name such as \"cstMyOp\"", "set op_type")
    if op.target not in TARGET_NAMES:
        raise bad(f"target {op.target} is neither NNP_OP_TARGET_CPU nor NNP_OP_TARGET_GPU",
                  "set target")
    if not op.compute:
        raise bad("compute is NULL", "provide compute")
    if op.compute_native:
        raise bad("compute_native is reserved and must be NULL", "leave compute_native NULL")
    has_flags = abi.Version.from_address(address).tuple()[1] >= 1 and \
        size >= CustomOpStruct.flags.offset + C.sizeof(C.c_uint32)
    if is_standard_op(name) and not (has_flags and op.flags & OVERRIDES_STANDARD):
        raise bad(f"op_type {name!r} is the name of a standard ONNX operator, and the op does "
                  f"not say it overrides it",
                  "set .flags = NNP_OP_OVERRIDES_STANDARD (nnplug/custom_op.h, ABI 1.1) to "
                  "replace the backends' kernel for it, or rename the op")
    source = None
    if op.target == TARGET_GPU:
        if not op.cl_kernel_name or not op.cl_kernel_source:
            raise bad("a GPU op needs cl_kernel_name and cl_kernel_source",
                      "set both (see custom_op.h)")
        if op.cl_source_size:
            if op.cl_source_size > strings.MAX_SOURCE_BYTES:
                raise bad(f"cl_source_size {op.cl_source_size} is over "
                          f"NNP_MAX_CL_SOURCE_BYTES ({strings.MAX_SOURCE_BYTES})",
                          "set cl_source_size to the bytes of the source text")
            source = strings.read_bytes(op.cl_kernel_source, op.cl_source_size)
            if len(source) != op.cl_source_size:
                raise bad(f"cl_kernel_source is unreadable after {len(source)} of its "
                          f"cl_source_size {op.cl_source_size} bytes",
                          "set cl_source_size to the bytes of the source text")
        else:
            s = strings.read(op.cl_kernel_source, strings.MAX_PATH_BYTES)
            if s.problem:
                raise bad(f"cl_kernel_source path {s.problem}: {s.shown}",
                          "give a path of at most NNP_MAX_PATH_BYTES bytes, or embed the source "
                          "text (cl_source_size > 0)")
            cl_path = os.fsdecode(s.raw)
            if not os.path.isabs(cl_path):
                cl_path = os.path.join(os.path.dirname(os.path.realpath(path)), cl_path)
            try:
                with open(cl_path, "rb") as f:
                    source = f.read()
            except OSError as e:
                raise bad(f"cannot read cl_kernel_source file {cl_path!r}: {e.strerror or e}",
                          "ship the .cl file beside the library or embed the source text "
                          "(cl_source_size > 0)") from None
    return OpImpl(lib, op, texts, source)


_OP_STRINGS = (("op_type", strings.MAX_NAME_BYTES, "NNP_MAX_NAME_BYTES"),
               ("cl_kernel_name", strings.MAX_NAME_BYTES, "NNP_MAX_NAME_BYTES"),
               ("cl_build_options", strings.MAX_MESSAGE_BYTES, "NNP_MAX_MESSAGE_BYTES"))

"""The host side of native custom operators (``nnplug/custom_op.h``, RKNN's rknn_custom_op).

A library ``libnnplug_op_*.so`` exports ``nnp_custom_op_entry`` returning one or more
``nnp_custom_op`` structs; each op type (with its CPU and/or GPU struct) becomes one
:class:`NativeCustomOp` registered with the Runtime. Per node: ``init`` once at load (it may
decline with ``NNP_OP_SKIP``), ``prepare`` + ``compute`` per run, ``destroy`` once when the
network goes. Callback calls and tensor attributes are logged at DEBUG on ``nnplug.ops``.

GPU ops run on the backend whose device type is OpenCL. The core does not import pyopencl:
the backend's DeviceAPI hands over raw handles (``native_handles(dev)``,
``native_data_handle(handle)``) and the op's program is built here through ctypes on
libOpenCL.so.1. Op libraries stay loaded until the process exits (function pointers of a
library may be held by any network still alive).
"""

from __future__ import annotations

import ctypes as C
import fnmatch
import itertools
import logging
import os
import threading
import weakref

import numpy as np

from ..customop import BoundOp, CustomOp, is_standard_op
from ..device import CPU, Device
from ..device_api import workspace_data
from ..errors import ArgumentTypeError, CustomOpError, PluginError
from ..plugins import LoadError, report
from ..shapecheck import bind_symbols, mismatch
from ..tensor import HOST_API, Tensor
from ..threads import thread_count
from . import abi, strings
from .descs import DescBuilder
from .loader import (
    LibraryLoadError,
    _dlclose,
    _dlopen_fix,
    backend_search_dirs,
    check_library_file,
    default_op_dir,
    find_backend_libraries,
)

log = logging.getLogger("nnplug.ops")

ABI_MAJOR, ABI_MINOR, ABI_PATCH = 1, 1, 0
OVERRIDES_STANDARD = 1 << 0  # nnp_custom_op.flags (ABI 1.1)
ABI_VERSION = (ABI_MAJOR, ABI_MINOR, ABI_PATCH)
ENTRY_SYMBOL = "nnp_custom_op_entry"
ENV_VAR = "NNPLUG_CUSTOM_OP_PATH"
FILE_PATTERN = "libnnplug_op_*.so"
MAX_DIMS = 16
SKIP = -1
TARGET_CPU, TARGET_GPU = 1, 2
TARGET_NAMES = {TARGET_CPU: "cpu", TARGET_GPU: "gpu"}
LAYOUT_NCHW = 1
MAX_OPS = 1024


# -- ctypes mirrors of custom_op.h (same members, same order) ----------------------------------
class OpTensorAttr(C.Structure):
    _fields_ = [
        ("name", C.c_char_p),
        ("n_dims", C.c_uint32),
        ("dims", C.c_int64 * MAX_DIMS),
        ("n_elems", C.c_uint64),
        ("size", C.c_uint64),
        ("dtype", abi.DType),
        ("layout", C.c_int32),
    ]


class OpMem(C.Structure):
    _fields_ = [("base", C.c_void_p), ("offset", C.c_uint64), ("size", C.c_uint64)]


class OpTensor(C.Structure):
    _fields_ = [("attr", OpTensorAttr), ("mem", OpMem)]


class ClApi(C.Structure):
    _fields_ = [("struct_size", C.c_uint32)] + [
        (n, C.c_void_p) for n in ("clSetKernelArg", "clEnqueueNDRangeKernel", "clFinish",
                                  "clGetKernelWorkGroupInfo", "clGetDeviceInfo")]


class OpContext(C.Structure):
    pass


# The plugin's strings arrive as raw pointers, read bounded (strings.py), never by strlen.
GET_ATTR = C.CFUNCTYPE(abi.status, C.POINTER(OpContext), C.c_void_p, C.POINTER(abi.Attr))
SET_ERROR = C.CFUNCTYPE(None, C.POINTER(OpContext), C.c_void_p)

OpContext._fields_ = [
    ("struct_size", C.c_uint32),
    ("target", C.c_int32),
    ("op_type", C.c_char_p),
    ("node_name", C.c_char_p),
    ("num_threads", C.c_int32),
    ("cl_platform", C.c_void_p),
    ("cl_device", C.c_void_p),
    ("cl_context", C.c_void_p),
    ("cl_command_queue", C.c_void_p),
    ("cl_kernel", C.c_void_p),
    ("cl", C.POINTER(ClApi)),
    ("priv_data", C.c_void_p),
    ("get_attr", GET_ATTR),
    ("set_error", SET_ERROR),
    ("host_data", C.c_void_p),
]

_TP = C.POINTER(OpTensor)
CALLBACK = C.CFUNCTYPE(C.c_int32, C.POINTER(OpContext), _TP, C.c_uint32, _TP, C.c_uint32)
DESTROY = C.CFUNCTYPE(C.c_int32, C.POINTER(OpContext))


class CustomOpStruct(C.Structure):
    _fields_ = [
        ("version", abi.Version),
        ("struct_size", C.c_uint32),
        ("target", C.c_int32),
        ("op_type", C.c_char_p),
        ("cl_kernel_name", C.c_char_p),
        ("cl_kernel_source", C.c_void_p),  # text or path: read with its size
        ("cl_source_size", C.c_uint64),
        ("cl_build_options", C.c_char_p),
        ("init", CALLBACK),
        ("prepare", CALLBACK),
        ("compute", CALLBACK),
        ("compute_native", C.c_void_p),
        ("destroy", DESTROY),
        ("shape_infer", CALLBACK),
        ("flags", C.c_uint32),  # ABI 1.1
    ]


class OpLibraryStruct(C.Structure):
    _fields_ = [
        ("abi_version", abi.Version),
        ("struct_size", C.c_uint32),
        ("name", C.c_char_p),
        ("num_ops", C.c_int32),
        ("ops", C.POINTER(C.c_void_p)),
    ]


# The smallest structs an ABI 1.0 library may hand over.
MIN_OP_SIZE = CustomOpStruct.shape_infer.offset
MIN_LIBRARY_SIZE = C.sizeof(OpLibraryStruct)


def _read(struct_type, address: int, size_field: str):
    """Copy a plugin struct into a zeroed mirror, up to its struct_size."""
    size = C.c_uint32.from_address(address + getattr(struct_type, size_field).offset).value
    out = struct_type()
    C.memmove(C.addressof(out), address, min(size, C.sizeof(struct_type)))
    return out, size


# -- loading a library ---------------------------------------------------------------------------
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
        self.cl_build_options = (texts["cl_build_options"] or "").encode()
        self._programs: dict[int, int] = {}  # cl_context -> cl_program
        self._lock = threading.Lock()

    def program(self, cl, context: int, device: int) -> int:
        """The op's program, built once per OpenCL context."""
        with self._lock:
            prog = self._programs.get(context)
            if prog is None:
                prog = self._programs[context] = cl.build(
                    context, device, self.cl_source, self.cl_build_options,
                    f"op {self.op_type!r} from {self.library.path}")
            return prog

    def release(self) -> None:
        with self._lock:
            programs, self._programs = list(self._programs.values()), {}
        for p in programs:
            _opencl().release_program(p)


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
    table, size = _read(OpLibraryStruct, address, "struct_size")
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
    op, size = _read(CustomOpStruct, address, "struct_size")
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


# -- folders ---------------------------------------------------------------------------------------
def op_search_dirs(option=None) -> tuple[list[str], list[LoadError]]:
    """Folders for ``custom_op_paths`` with the dynamic-backend rules (same helper), and one
    LoadError (stage ``path``) per entry skipped."""
    origin = "custom_op_paths"
    if option is None:
        env = os.environ.get(ENV_VAR)
        if env is None:
            d = default_op_dir()
            return ([d] if os.path.isdir(d) else []), []
        option, origin = env, ENV_VAR
    if not isinstance(option, (str, bytes, os.PathLike)):
        try:
            option = [os.fsdecode(os.fspath(p)) for p in option]
        except TypeError:
            raise ArgumentTypeError(f"custom_op_paths must be a ':'-separated string or a list of "
                            f"paths, not {option!r}") from None
    dirs, errors = backend_search_dirs(option)
    # The shared helper words its messages for backends; name the option actually used.
    errors = [LoadError(e.source.replace("dynamic_backends_path", origin), e.stage, e.reason,
                        e.fix) for e in errors]
    return dirs, errors


def find_op_libraries(dirs) -> tuple[list[str], list[LoadError]]:
    """``libnnplug_op_*.so`` files in ``dirs``: sorted, deduplicated by real path."""
    files, errors = find_backend_libraries(dirs)
    files = [f for f in files if fnmatch.fnmatchcase(os.path.basename(f), FILE_PATTERN)]
    errors = [e for e in errors  # folder errors, and files that would have been op libraries
              if e.source in dirs or fnmatch.fnmatchcase(os.path.basename(e.source), FILE_PATTERN)]
    return files, errors


def register_library(runtime, path, origin: str = "api") -> list[NativeCustomOp]:
    """Load the library at ``path`` and register its ops with ``runtime`` (all or none);
    in a worker process when the Runtime's ``isolate_plugins`` name it."""
    ops = _isolated_ops(runtime, path)
    if ops is None:
        ops = load_op_library(path)
    taken = runtime.ops
    for op in ops:
        if op.op_type in taken:
            raise LibraryLoadError(
                os.fsdecode(os.fspath(path)), "duplicate op",
                f"custom op {op.op_type!r} is already registered from {taken[op.op_type].source}",
                "each op type can be registered once: remove one of the two")
    done = []
    try:
        for op in ops:
            done.append(runtime.register_custom_op(op))
    except PluginError as e:
        raise LibraryLoadError(os.fsdecode(os.fspath(path)), "duplicate op", str(e)) from None
    return done


def load_op_folders(runtime, option) -> None:
    """Everything the Runtime does for ``CreationOptions.custom_op_paths``: scan, load,
    register; each failure is a WARNING and a ``runtime.load_errors`` entry."""
    dirs, errors = op_search_dirs(option)
    files, more = find_op_libraries(dirs)
    for err in errors + more:
        report(runtime.load_errors, err)
    for path in files:
        try:
            if getattr(runtime.options, "isolate_native", False):
                from .probe import probe_once

                probe_once(path, "op library")
            register_library(runtime, path, "dynamic")
        except LibraryLoadError as e:
            report(runtime.load_errors, e.load_error())
        except Exception as e:  # a broken library must never stop the Runtime
            report(runtime.load_errors, LoadError(path, "register", f"{type(e).__name__}: {e}"))


# -- the op ----------------------------------------------------------------------------------------
_NUMPY_DTYPES = {np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.float64),
                 np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.int8), np.dtype(bool),
                 np.dtype(np.float16)}


def _isolated_ops(runtime, path):
    """The library's ops from a worker process (:mod:`nnplug.native.isolated`) when the
    Runtime's ``isolate_plugins`` name it; None when they do not."""
    names = runtime._isolation_names() if hasattr(runtime, "_isolation_names") else ()
    if not names:
        return None
    from .isolated import load_isolated_ops, timeout_of

    path = check_library_file(path, "op library")
    return load_isolated_ops(path, names, timeout_of(runtime.options.isolate_timeout))


class NativeCustomOp(CustomOp):
    """One op type of a native library, with its CPU and/or GPU implementation."""

    def __init__(self, op_type: str, impls: dict[str, OpImpl], library: OpLibrary):
        self.op_type = op_type
        self.impls = impls
        self.library = library
        self.source = library.path + (f" ({library.name})" if library.name else "")
        self.override = is_standard_op(op_type)
        self.targets = tuple(t for t in ("gpu", "cpu") if t in impls)
        self.runs_anywhere = "cpu" in impls
        self._warned: set[str] = set()

    # -- shapes ----------------------------------------------------------------------------
    def _shape_impl(self) -> OpImpl | None:
        for t in ("cpu", "gpu"):
            impl = self.impls.get(t)
            if impl is not None and impl.struct.shape_infer:
                return impl
        return None

    def shape_infer(self, node, in_shapes, in_dtypes):
        impl = self._shape_impl()
        if impl is None:
            if self.override:
                return _onnx_shapes(node, in_shapes, in_dtypes)
            raise CustomOpError(
                f"custom op {self.op_type!r} ({self.source}) has no shape_infer callback, so "
                f"the shapes of node {node.name!r}'s outputs are unknown; implement "
                f"shape_infer in the library (see nnplug/custom_op.h)")
        state = _NodeState(self, impl, node, "cpu")
        ins = [_tensor_attr(state, name, shape, dtype)
               for name, shape, dtype in zip([x for x in node.inputs if x], in_shapes, in_dtypes)]
        outs = (OpTensor * max(len(node.outputs), 1))()
        for i, name in enumerate(node.outputs):
            outs[i].attr.name = state.hold(name.encode())
        ins_arr = (OpTensor * max(len(ins), 1))(*ins)
        state.call("shape_infer", impl.struct.shape_infer, ins_arr, len(ins), outs,
                   len(node.outputs))
        shapes, dtypes = [], []
        for i in range(len(node.outputs)):
            a = outs[i].attr
            if a.n_dims > MAX_DIMS:
                raise state.error("shape_infer", f"output {i} has n_dims {a.n_dims} > {MAX_DIMS}")
            dt = abi.numpy_dtype(a.dtype)
            if dt is None:
                raise state.error("shape_infer", f"output {i} has no valid dtype "
                                  f"(code {a.dtype.code}, bits {a.dtype.bits})")
            shapes.append([int(d) if d >= 0 else None for d in a.dims[:a.n_dims]])
            dtypes.append(dt)
        return shapes, dtypes

    # -- binding -----------------------------------------------------------------------------
    def bind(self, node, values, target, backend):
        impl = self.impls[target]
        state = _NodeState(self, impl, node, target)
        if target == "gpu":
            if not state.attach_gpu(backend):
                return None
        else:
            state.device, state.api = CPU, HOST_API
        ins = [_value_attr(state, x, values) for x in node.inputs if x]
        outs = [_value_attr(state, x, values) for x in node.outputs]
        try:
            rc = state.call("init", impl.struct.init, *_arrays(ins, outs)) \
                if impl.struct.init else 0
        except BaseException:
            state.release_gpu()
            raise
        if rc == SKIP:
            log.debug("%s: init declined node %r (NNP_OP_SKIP); the backends' kernel is used",
                      self.op_type, node.name)
            state.release_gpu()
            return None
        return NativeBound(state, ins, outs, values)

    def warn_once(self, key: str, msg: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logging.getLogger("nnplug").warning(msg, *args)

    def release(self) -> None:
        """Runtime.close: drop the op's OpenCL programs (kernels keep theirs alive)."""
        for impl in self.impls.values():
            if impl.cl_source is not None and impl._programs:
                impl.release()


def _onnx_shapes(node, in_shapes, in_dtypes):
    """Output shapes of a standard ONNX node, by ONNX's own inference on a one-node model."""
    import onnx

    def vi(name, shape, dtype):
        dims = None if shape is None else [d if isinstance(d, (int, str)) else None for d in shape]
        return onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims)

    names = [x for x in node.inputs if x]
    graph = onnx.helper.make_graph(
        [node.proto], "one", [vi(n, s, d) for n, s, d in zip(names, in_shapes, in_dtypes)],
        [onnx.helper.make_tensor_value_info(o, 0, None) for o in node.outputs if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", node.opset or 13)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    found = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    shapes, dtypes = [], []
    for o in node.outputs:
        t = found[o].type.tensor_type
        shapes.append([d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                       for d in t.shape.dim] if t.HasField("shape") else None)
        dtypes.append(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    return shapes, dtypes


# -- per-node state and callbacks ----------------------------------------------------------------
_states: dict[int, _NodeState] = {}
_states_lock = threading.Lock()
_keys = itertools.count(1)


def _state_of(ctx) -> _NodeState | None:
    with _states_lock:
        return _states.get(ctx.contents.host_data or 0)


def _get_attr(ctx, name, out):
    try:
        state = _state_of(ctx)
        s = strings.read(name, strings.MAX_NAME_BYTES)
        text = s.text if s is not None and not s.problem else ""
        if state is None or not out:
            return 2
        C.memset(out, 0, C.sizeof(abi.Attr))
        node = state.node
        if text not in node.attrs:
            log.debug("%s[%s] get_attr(%r): no such attribute", state.op.op_type, node.name, text)
            return 2
        types = {a.name: int(a.type) for a in node.proto.attribute} if node.proto else {}
        state.descs.attr(text, node.attrs[text], types.get(text), out.contents)
        log.debug("%s[%s] get_attr(%r) -> type %d, count %d", state.op.op_type, node.name, text,
                  out.contents.type, out.contents.count)
        return 0
    except Exception as e:  # never let an exception cross into C
        log.error("nnplug: get_attr failed: %s", e)
        return 1


def _set_error(ctx, message):
    state = _state_of(ctx)
    if state is not None:
        state.last_error.text = strings.message(message)


_GET_ATTR = GET_ATTR(_get_attr)
_SET_ERROR = SET_ERROR(_set_error)


class _NodeState:
    """The context of one node: what the callbacks of that node see."""

    def __init__(self, op: NativeCustomOp, impl: OpImpl, node, target: str):
        self.op, self.impl, self.node, self.target = op, impl, node, target
        self.descs = DescBuilder({}, {})
        self._keep: list = []
        self.last_error = threading.local()
        self.lock = threading.Lock()
        self.device: Device = CPU
        self.api = HOST_API
        self.cl_api = None
        self.key = next(_keys)
        ctx = self.ctx = OpContext()
        ctx.struct_size = C.sizeof(OpContext)
        ctx.target = TARGET_CPU if target == "cpu" else TARGET_GPU
        ctx.op_type = self.hold(op.op_type.encode())
        ctx.node_name = self.hold((node.name or "").encode())
        ctx.num_threads = thread_count()
        ctx.get_attr = _GET_ATTR
        ctx.set_error = _SET_ERROR
        ctx.host_data = self.key
        with _states_lock:
            _states[self.key] = self
        self._finalizer = weakref.finalize(self, _forget, self.key)

    def hold(self, obj):
        self._keep.append(obj)
        return obj

    # -- GPU -------------------------------------------------------------------------------
    def attach_gpu(self, backend) -> bool:
        """Take the OpenCL handles of ``backend``'s device and create this node's kernel;
        False (with a warning once) when the backend cannot hand them over."""
        api = backend.device_api()
        if not (hasattr(api, "native_handles") and hasattr(api, "native_data_handle")):
            self.op.warn_once(backend.id, "nnplug: custom op %r has a GPU kernel but backend %r "
                              "exposes no OpenCL handles (DeviceAPI.native_handles); using its "
                              "own kernel or the CPU one", self.op.op_type, backend.id)
            return False
        self.device = _backend_device(backend)
        self.api = api
        handles = api.native_handles(self.device)
        cl = _opencl()
        self.cl_api = cl
        ctx = self.ctx
        ctx.cl_platform = handles.get("cl_platform_id")
        ctx.cl_device = handles["cl_device_id"]
        ctx.cl_context = handles["cl_context"]
        ctx.cl_command_queue = handles["cl_command_queue"]
        program = self.impl.program(cl, handles["cl_context"], handles["cl_device_id"])
        ctx.cl_kernel = cl.create_kernel(program, self.impl.cl_kernel_name,
                                         f"op {self.op.op_type!r} node {self.node.name!r}")
        ctx.cl = C.pointer(cl.api)
        return True

    def refresh_queue(self) -> None:
        """The queue the backend uses for this thread (its current stream)."""
        self.ctx.cl_command_queue = self.api.native_handles(self.device)["cl_command_queue"]

    def release_gpu(self) -> None:
        if self.ctx.cl_kernel:
            self.cl_api.release_kernel(self.ctx.cl_kernel)
            self.ctx.cl_kernel = None

    # -- calls -----------------------------------------------------------------------------
    def call(self, name: str, fn, ins, n_ins, outs, n_outs) -> int:
        """Call one callback; non-zero (except SKIP from init) raises CustomOpError."""
        verbose = log.isEnabledFor(logging.DEBUG)
        if verbose:
            log.debug("%s[%s] %s(%s)", self.op.op_type, self.node.name, name,
                      _describe(ins, n_ins, outs, n_outs, name != "shape_infer"))
        self.last_error.text = ""
        rc = fn(C.byref(self.ctx), ins, n_ins, outs, n_outs)
        if verbose:
            log.debug("%s[%s] %s -> %d", self.op.op_type, self.node.name, name, rc)
        if rc != 0 and not (name == "init" and rc == SKIP):
            raise self.error(name, returned(rc))
        return rc

    def error(self, callback: str, what: str) -> CustomOpError:
        msg = getattr(self.last_error, "text", "")
        return CustomOpError(
            f"custom op {self.op.op_type!r} ({self.target}, {self.op.source}) failed in "
            f"{callback}() on node {self.node.name!r}: {what}" + (
                f": {msg}" if msg else " and gave no message (the op did not call "
                                      "ctx->set_error)"))


def returned(rc: int) -> str:
    """A callback's non-zero return value, with the nnp_status it is (nnplug/common.h)."""
    name = abi.STATUS_NAMES.get(rc)
    return f"returned {rc} (NNP_STATUS_{name})" if name else f"returned {rc} (not an nnp_status)"


def _forget(key: int) -> None:
    with _states_lock:
        _states.pop(key, None)


def _backend_device(backend) -> Device:
    from ..target import Target

    try:
        return Target(backend.target_kind_name).device
    except Exception:  # noqa: BLE001 - a kind that cannot be built alone: its first device
        return Device(backend.device_type_number, 0)


def _describe(ins, n_ins, outs, n_outs, with_mem: bool) -> str:
    def one(t):
        a = t.attr
        dims = ",".join(str(d) for d in a.dims[:a.n_dims])
        dt = abi.numpy_dtype(a.dtype)
        text = f"{(a.name or b'').decode()}: {dt}[{dims}] n_elems={a.n_elems} size={a.size}"
        if with_mem:
            text += f" mem=({t.mem.base and hex(t.mem.base)}+{t.mem.offset}, {t.mem.size})"
        return text

    return ("inputs [" + "; ".join(one(ins[i]) for i in range(n_ins)) + "] outputs ["
            + "; ".join(one(outs[i]) for i in range(n_outs)) + "]")


def _fill_attr(attr: OpTensorAttr, state: _NodeState, name: str, shape, dtype) -> None:
    attr.name = state.hold(name.encode())
    attr.layout = LAYOUT_NCHW
    attr.dtype = abi.dtype_of(dtype)
    if shape is None:
        attr.n_dims = 0
        return
    if len(shape) > MAX_DIMS:
        raise CustomOpError(f"custom op {state.op.op_type!r} on node {state.node.name!r}: "
                            f"{name!r} has rank {len(shape)} > {MAX_DIMS}")
    dims = [int(d) if isinstance(d, (int, np.integer)) and d >= 0 else -1 for d in shape]
    attr.n_dims = len(dims)
    for i, d in enumerate(dims):
        attr.dims[i] = d
    known = all(d >= 0 for d in dims)
    attr.n_elems = int(np.prod(dims, dtype=np.int64)) if known else 0
    attr.size = attr.n_elems * (np.dtype(dtype).itemsize if dtype is not None else 0)


def _tensor_attr(state, name, shape, dtype) -> OpTensor:
    t = OpTensor()
    _fill_attr(t.attr, state, name, shape, dtype)
    return t


def _value_attr(state, name, values) -> OpTensor:
    v = values.get(name)
    return _tensor_attr(state, name, getattr(v, "shape", None), getattr(v, "dtype", None))


def _static(v) -> tuple | None:
    return tuple(v.shape) if v is not None and getattr(v, "is_static", False) else None


def _arrays(ins: list, outs: list):
    a = (OpTensor * max(len(ins), 1))(*ins)
    b = (OpTensor * max(len(outs), 1))(*outs)
    return a, len(ins), b, len(outs)


# -- running -------------------------------------------------------------------------------------
class NativeBound(BoundOp):
    """A native op bound to one node: prepare + compute per run; destroy once."""

    def __init__(self, state: _NodeState, ins: list[OpTensor], outs: list[OpTensor], values):
        self.state = state
        self.device = state.device
        self.api = state.api
        self.node = state.node
        self.in_shapes = [_static(values.get(x)) for x in self.node.inputs if x]
        self.declared_inputs = [values.get(x) for x in self.node.inputs if x]
        self.declared_outputs = [values.get(o) if o else None for o in self.node.outputs]
        self.out_static = []
        for name in self.node.outputs:
            v = values.get(name)
            shape = _static(v)
            self.out_static.append(None if shape is None or v.dtype is None
                                   else (shape, np.dtype(v.dtype)))
        self._specs: dict[tuple, list] = {}  # input shapes/dtypes -> output specs
        self._finalizer = weakref.finalize(self, _destroy, state)

    def _output_specs(self, inputs: list[Tensor]):
        shapes = [tuple(t.shape) for t in inputs]
        if all(s is not None for s in self.out_static) and shapes == self.in_shapes:
            return self.out_static
        key = tuple(shapes) + tuple(t.dtype.str for t in inputs)
        specs = self._specs.get(key)
        if specs is None:
            specs = self._infer_specs(inputs, shapes)
            if len(self._specs) >= 64:  # symbolic shapes: keep the recent ones only
                self._specs.clear()
            self._specs[key] = specs
        return specs

    def _infer_specs(self, inputs: list[Tensor], shapes: list[tuple]):
        out_shapes, out_dtypes = self.state.op.shape_infer(
            self.node, [list(s) for s in shapes], [t.dtype for t in inputs])
        specs = []
        for name, s, d in zip(self.node.outputs, out_shapes, out_dtypes):
            if s is None or any(not isinstance(x, int) or x < 0 for x in s):
                raise CustomOpError(
                    f"custom op {self.state.op.op_type!r}: the shape of output {name!r} of node "
                    f"{self.node.name!r} is not known for inputs {shapes}")
            specs.append((tuple(s), np.dtype(d)))
        symbols: dict[str, int] = {}
        for declared, shape in zip(self.declared_inputs, shapes):
            bind_symbols(declared, shape, symbols)
        for name, declared, (shape, dtype) in zip(self.node.outputs, self.declared_outputs, specs):
            why = name and mismatch(shape, dtype, declared, symbols)
            if why:
                raise CustomOpError(
                    f"custom op {self.state.op.op_type!r} ({self.state.op.source}) shape_infer() "
                    f"on node {self.node.name!r} gave output {name!r} {why}; fix the op's "
                    f"shape_infer")
        return specs

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        st = self.state
        if not self._finalizer.alive:
            raise CustomOpError(f"custom op {st.op.op_type!r} on node {self.node.name!r} was "
                                f"released (its network was closed)")
        for t in inputs:
            if t.dtype not in _NUMPY_DTYPES:
                raise CustomOpError(f"custom op {st.op.op_type!r} on node {self.node.name!r}: "
                                    f"input dtype {t.dtype} cannot cross the C ABI")
        specs = self._output_specs(inputs)
        outputs = [Tensor.empty(s, d, self.device, self.api) for s, d in specs]
        names_in = [x for x in self.node.inputs if x]
        ins = [self._op_tensor(n, t) for n, t in zip(names_in, inputs)]
        outs = [self._op_tensor(n, t) for n, t in zip(self.node.outputs, outputs)]
        arrays = _arrays(ins, outs)
        keep = (inputs, outputs)  # the memory behind mem.base stays alive through the calls
        with st.lock:
            if st.target == "gpu":
                st.refresh_queue()
            if st.impl.struct.prepare:
                st.call("prepare", st.impl.struct.prepare, *arrays)
            st.call("compute", st.impl.struct.compute, *arrays)
            if st.target == "gpu":
                st.cl_api.finish(st.ctx.cl_command_queue, st)
        del keep
        return outputs

    def _op_tensor(self, name: str, t: Tensor) -> OpTensor:
        ot = _tensor_attr(self.state, name, t.shape, t.dtype)
        if self.state.target == "gpu":
            ot.mem.base = self.api.native_data_handle(t.handle) if t.nbytes else None
        else:
            arr = np.asarray(workspace_data(t.handle))
            ot.mem.base = arr.ctypes.data
        ot.mem.offset = t.byte_offset
        ot.mem.size = t.nbytes
        return ot

    def close(self) -> None:
        self._finalizer()


def _destroy(state: _NodeState) -> None:
    """destroy once per bound node (network closed or collected, or interpreter exit)."""
    try:
        fn = state.impl.struct.destroy
        if fn:
            with state.lock:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s[%s] destroy()", state.op.op_type, state.node.name)
                rc = fn(C.byref(state.ctx))
            if rc != 0:
                logging.getLogger("nnplug").warning(
                    "nnplug: %s", state.error("destroy", returned(rc)))
    finally:
        state.release_gpu()
        _forget(state.key)


# -- OpenCL through ctypes (loaded only when a GPU op is bound) ------------------------------------
_CL_PROGRAM_BUILD_LOG = 0x1183
_cl = None
_cl_lock = threading.Lock()


class _OpenCL:
    def __init__(self):
        try:
            lib = C.CDLL("libOpenCL.so.1")
        except OSError as e:
            raise PluginError(f"GPU custom ops need the OpenCL ICD loader libOpenCL.so.1: {e}; "
                              f"install ocl-icd-libopencl1 (Debian) or your GPU driver") from None
        self.lib = lib
        vp, u32, sz, i32 = C.c_void_p, C.c_uint32, C.c_size_t, C.c_int32
        self._sig(lib.clCreateProgramWithSource, vp, [vp, u32, C.POINTER(C.c_char_p),
                                                      C.POINTER(sz), C.POINTER(i32)])
        self._sig(lib.clBuildProgram, i32, [vp, u32, C.POINTER(vp), C.c_char_p, vp, vp])
        self._sig(lib.clGetProgramBuildInfo, i32, [vp, vp, u32, sz, vp, C.POINTER(sz)])
        self._sig(lib.clCreateKernel, vp, [vp, C.c_char_p, C.POINTER(i32)])
        self._sig(lib.clReleaseKernel, i32, [vp])
        self._sig(lib.clReleaseProgram, i32, [vp])
        self._sig(lib.clFinish, i32, [vp])
        self.api = ClApi(C.sizeof(ClApi), *[
            C.cast(getattr(lib, n), C.c_void_p).value for n in (
                "clSetKernelArg", "clEnqueueNDRangeKernel", "clFinish",
                "clGetKernelWorkGroupInfo", "clGetDeviceInfo")])

    @staticmethod
    def _sig(fn, restype, argtypes):
        fn.restype, fn.argtypes = restype, argtypes

    def build(self, context: int, device: int, source: bytes, options: bytes, what: str) -> int:
        err = C.c_int32(0)
        src = C.c_char_p(source)
        n = C.c_size_t(len(source))
        prog = self.lib.clCreateProgramWithSource(context, 1, C.byref(src), C.byref(n),
                                                  C.byref(err))
        if err.value or not prog:
            raise CustomOpError(f"{what}: clCreateProgramWithSource failed ({err.value})")
        dev = C.c_void_p(device)
        rc = self.lib.clBuildProgram(prog, 1, C.byref(dev), options or None, None, None)
        if rc:
            build_log = self._build_log(prog, device)
            self.lib.clReleaseProgram(prog)
            raise CustomOpError(f"{what}: building its OpenCL kernel failed ({rc}); compiler "
                                f"log:\n{build_log}")
        return prog

    def _build_log(self, prog, device) -> str:
        size = C.c_size_t(0)
        self.lib.clGetProgramBuildInfo(prog, device, _CL_PROGRAM_BUILD_LOG, 0, None,
                                       C.byref(size))
        buf = C.create_string_buffer(size.value + 1)
        self.lib.clGetProgramBuildInfo(prog, device, _CL_PROGRAM_BUILD_LOG, size.value, buf,
                                       None)
        return buf.value.decode("utf-8", "replace").strip()

    def create_kernel(self, program: int, name: str, what: str) -> int:
        err = C.c_int32(0)
        k = self.lib.clCreateKernel(program, name.encode(), C.byref(err))
        if err.value or not k:
            raise CustomOpError(f"{what}: clCreateKernel({name!r}) failed ({err.value}); is "
                                f"cl_kernel_name the name of a __kernel in its source?")
        return k

    def release_kernel(self, kernel: int) -> None:
        self.lib.clReleaseKernel(kernel)

    def release_program(self, program: int) -> None:
        self.lib.clReleaseProgram(program)

    def finish(self, queue: int, state: _NodeState) -> None:
        rc = self.lib.clFinish(queue)
        if rc:
            raise state.error("compute", f"clFinish on its queue failed ({rc})")


def _opencl() -> _OpenCL:
    global _cl
    with _cl_lock:
        if _cl is None:
            _cl = _OpenCL()
        return _cl


__all__ = ["NativeCustomOp", "NativeBound", "load_op_library", "load_op_folders",
           "register_library", "op_search_dirs", "find_op_libraries"]

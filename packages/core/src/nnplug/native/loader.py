"""Loading native backend shared objects (the folders they are found in: :mod:`.folders`).

Each is dlopen'ed (RTLD_LOCAL), its entry symbol resolved, ABI version, table and id checked,
then ``init`` called. A library is loaded once per process and shared by every Runtime
through :data:`nnplug.plugins.BACKENDS`. The file checks and dlopen fixes here serve the
custom-op libraries too.
"""

from __future__ import annotations

import _ctypes  # dlclose; imported here because unloading may run at interpreter exit
import ctypes
import logging
import os
import re
import struct
import threading

from .. import plugins
from ..device import (
    EXTENSION_TYPE_BASE,
    device_type_name,
    is_standard_type,
    register_device_type,
)
from ..errors import PluginError
from ..threads import requested_threads
from . import abi, strings, target_attrs

log = logging.getLogger("nnplug")

_ID = re.compile(r"[a-z][a-z0-9_]{0,31}$")
_DEVICE_NAME = re.compile(r"[a-z][a-z0-9_]*$")


class LibraryLoadError(PluginError):
    """A native library that could not be loaded or registered: ``stage``, ``reason``, ``fix``."""

    def __init__(self, path: str, stage: str, reason: str, fix: str | None = None):
        self.path, self.stage, self.reason, self.fix = str(path), stage, reason, fix
        text = f"{path}: {stage}: {reason}"
        super().__init__(f"{text} (fix: {fix})" if fix else text)


# -- one library --------------------------------------------------------------------------------
def _dlclose(handle: int) -> None:
    try:
        _ctypes.dlclose(handle)
    except AttributeError:  # pragma: no cover - non-glibc platforms
        libc = ctypes.CDLL(None)
        libc.dlclose.argtypes = [ctypes.c_void_p]
        libc.dlclose(handle)


def _dlopen_fix(text: str) -> str:
    m = re.search(r"([^\s:]+\.so[.\d]*): cannot open shared object file", text)
    if m:
        return (f"install the package that provides {m.group(1)}, or add the folder that holds "
                f"it to LD_LIBRARY_PATH")
    if "undefined symbol" in text:
        sym = text.rsplit("undefined symbol:", 1)[-1].strip()
        return (f"the library needs symbol {sym} that nothing loaded provides: link the library "
                f"that defines it (-l...) when building, or rebuild against matching versions")
    if "invalid ELF header" in text or "file too short" in text:
        return ("this is not a shared library: remove it from the backends folder or rename it "
                "(every *.so file there is loaded)")
    if "wrong ELF class" in text or "ELF file's phentsize" in text or "machine" in text.lower():
        return "the library was built for another architecture: rebuild it for this machine"
    if "Permission denied" in text:
        return "make the file readable by this user"
    return "check the file with `ldd` and rebuild it as a shared library (-shared -fPIC)"


def _mangled_entry(path: str) -> bool:
    """Whether the file holds a C++-mangled nnp_backend_entry (declared without extern "C")."""
    try:
        with open(path, "rb") as f:
            return b"_Z17nnp_backend_entry" in f.read()
    except OSError:
        return False


def register_library_device_type(path: str, dt: int, name: str | None) -> None:
    """The device type of the library at ``path``: DLPack numbers need no name; an extension
    number (>= 64) needs a name, and the pair must not clash with what another plugin
    registered (a clash names both). An isolated backend's pair is registered in its worker
    and in the application."""
    problem = None
    if dt >= EXTENSION_TYPE_BASE and not name:
        problem = (f"device type {dt} is an extension type (>= {EXTENSION_TYPE_BASE}) and "
                   f"device_type_name is NULL")
    elif name and not _DEVICE_NAME.match(name):
        problem = (f"device_type_name {strings.shorten(name)!r} is not lower-case letters, "
                   f"digits and _ starting with a letter")
    elif dt < EXTENSION_TYPE_BASE and not is_standard_type(dt):
        problem = (f"device type {dt} is not a DLPack type (and below the extension range, "
                   f"{EXTENSION_TYPE_BASE} and up)")
    elif dt < EXTENSION_TYPE_BASE and name and name != device_type_name(dt):
        problem = (f"device_type_name {name!r} given for DLPack's type {dt} "
                   f"({device_type_name(dt)}); names are for extension types")
    if problem:
        raise LibraryLoadError(
            path, "invalid table", f"device type: {problem}",
            "use a DLPack device type number, or a number >= 64 with device_type_name set "
            "(see 'Extension device types' in docs/dynamic-backends.md)")
    if dt < EXTENSION_TYPE_BASE:
        return
    try:
        register_device_type(name, dt, owner=path)
    except ValueError as e:
        raise LibraryLoadError(
            path, "device type clash", f"this library's device type {name!r} = {dt}: {e}",
            "plugins for different devices need different numbers and names, plugins for "
            "the same device the same pair: change one library's device_type / "
            "device_type_name, or remove one (see 'Extension device types' in "
            "docs/dynamic-backends.md)") from None


class NativeLibrary:
    """One dlopen'ed backend library: its checked function table and life cycle.

    Shared by all NativeBackend objects of the process that load the same real path. It is
    unloaded (shutdown, dlclose) after the last lease is released AND the last buffer or
    kernel it handed out is gone.
    """

    def __init__(self, path: str, realpath: str, cdll, table: abi.BackendV1, struct_size: int):
        self.path = path
        self.realpath = realpath
        self._cdll = cdll
        self.table = table
        self.struct_size = struct_size
        self.abi_version = table.abi_version.tuple()
        self.flags = table.flags
        texts = table_strings(path, table)
        self.id = texts["id"] or ""
        self.version = texts["version"]
        self.device_type_name = texts["device_type_name"]
        self.device_type = int(table.device_type)
        self.host_visible = bool(self.flags & abi.HOST_VISIBLE)
        self.target_attrs = declared_target_attrs(path, table, struct_size)
        self.priority = int(table.priority)
        self.provider_names = declared_provider_names(path, table)
        self.key = lease_key(realpath)
        self._lock = threading.Lock()
        self._unloaded = False
        self._device_api = None

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str, taken=()) -> NativeLibrary:
        real = os.path.realpath(path)
        try:
            cdll = ctypes.CDLL(real, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
        except OSError as e:
            text = str(e)
            raise LibraryLoadError(path, "not loadable", text, _dlopen_fix(text)) from None
        try:
            lib = cls._check(path, real, cdll, taken)
        except BaseException:
            _dlclose(cdll._handle)
            raise
        lib._init()
        return lib

    @classmethod
    def _check(cls, path, real, cdll, taken) -> NativeLibrary:
        try:
            entry = getattr(cdll, abi.ENTRY_SYMBOL)
        except AttributeError:
            if _mangled_entry(real):
                raise LibraryLoadError(
                    path, "no entry symbol",
                    f"{abi.ENTRY_SYMBOL} is there only as a C++-mangled name",
                    'declare it extern "C" (include <nnplug/backend.h>, which does)',
                ) from None
            raise LibraryLoadError(
                path, "no entry symbol", f"the library does not export {abi.ENTRY_SYMBOL}",
                "define NNP_EXPORT const nnp_backend_v1* nnp_backend_entry(const nnp_version*) "
                "(see docs/dynamic-backends.md); not every .so is a backend: keep others out of "
                "the backends folder",
            ) from None
        entry.restype = ctypes.c_void_p
        entry.argtypes = [ctypes.POINTER(abi.Version)]
        host = abi.Version(*abi.ABI_VERSION)
        address = entry(ctypes.byref(host))
        host_text = ".".join(map(str, abi.ABI_VERSION))
        if not address:
            raise LibraryLoadError(
                path, "abi version", f"{abi.ENTRY_SYMBOL} returned NULL for host ABI {host_text}",
                "the backend refuses this nnplug; install the nnplug version it was built for",
            )
        version = abi.Version.from_address(address).tuple()
        vtext = ".".join(map(str, version))
        if version[0] != abi.ABI_MAJOR:
            fix = (f"upgrade nnplug to a release with backend ABI {version[0]}.x "
                   f"(pip install -U nnplug)" if version[0] > abi.ABI_MAJOR else
                   f"rebuild the backend against this nnplug's headers (nnplug.get_include()), "
                   f"backend ABI {host_text}")
            raise LibraryLoadError(
                path, "abi version",
                f"backend ABI {vtext} has major version {version[0]}; this nnplug loads "
                f"{abi.ABI_MAJOR}.x", fix)
        if version[1] > abi.ABI_MINOR:
            raise LibraryLoadError(
                path, "abi version",
                f"backend ABI {vtext} is newer than this nnplug's {host_text}",
                f"upgrade nnplug to a release with backend ABI >= {version[0]}.{version[1]} "
                f"(pip install -U nnplug), or rebuild the backend against these headers",
            )
        table, size = abi.read_table(address)
        cls._check_table(path, table, size)
        ident = table_strings(path, table)["id"] or ""
        if not _ID.match(ident) or ident in abi.RESERVED_IDS:
            why = "empty" if not ident else (
                "reserved" if ident in abi.RESERVED_IDS else "not [a-z][a-z0-9_]{0,31}")
            raise LibraryLoadError(
                path, "invalid id", f"backend id {strings.shorten(ident)!r} is {why}",
                "set the table's id to a short lower-case name such as \"mynpu\", not one of "
                + ", ".join(sorted(abi.RESERVED_IDS)),
            )
        if ident in taken:
            raise duplicate_error(path, ident, taken)
        lib = cls(path, real, cdll, table, size)
        lib._register_device_type()
        return lib

    @staticmethod
    def _check_table(path, table, size):
        if size < abi.MIN_STRUCT_SIZE:
            raise LibraryLoadError(
                path, "invalid table",
                f"struct_size {size} is smaller than a backend ABI 1.0 table "
                f"({abi.MIN_STRUCT_SIZE} bytes)",
                "set struct_size = sizeof(nnp_backend_v1) and rebuild with nnplug's headers",
            )
        missing = [n for n in abi.REQUIRED_ENTRIES if not getattr(table, n)]
        for group in abi.PAIRED_ENTRIES:
            given = [n for n in group if getattr(table, n)]
            if given and len(given) != len(group):
                missing += [n for n in group if n not in given]
        if missing:
            raise LibraryLoadError(
                path, "invalid table", f"entries left NULL: {', '.join(missing)}",
                "provide them (see the REQUIRED/OPTIONAL notes in nnplug/backend.h)",
            )
        if table.device_type == 1 and not table.flags & abi.HOST_VISIBLE:
            raise LibraryLoadError(
                path, "invalid table", "a CPU backend without NNP_BACKEND_HOST_VISIBLE",
                "set flags |= NNP_BACKEND_HOST_VISIBLE (CPU memory is host memory)",
            )

    def _register_device_type(self):
        register_library_device_type(self.path, self.device_type, self.device_type_name)

    def _init(self):
        if not self.table.init:
            return
        opts = abi.InitOptions(ctypes.sizeof(abi.InitOptions), abi.Version(*abi.ABI_VERSION),
                               requested_threads(), None, abi.HOST_KEEPS_CONSTANTS)
        rc = self.table.init(ctypes.byref(opts))
        if rc != 0:
            msg = self.last_error() or f"status {abi.STATUS_NAMES.get(rc, rc)} and no message"
            _dlclose(self._cdll._handle)
            self._unloaded = True
            raise LibraryLoadError(
                self.path, "init", msg,
                "see the backend's message (device, driver or dependency missing?)",
            )

    # -- calls -----------------------------------------------------------------------------
    def last_error(self) -> str:
        try:
            return strings.call_message(self.table.last_error)
        except Exception:  # noqa: BLE001 - a broken last_error must not hide the real failure
            return ""

    def error(self, rc: int, what: str):
        """A BackendError for a failed call: the backend's message, the status and ``what``."""
        from ..errors import BackendError

        msg = self.last_error() or "the backend gave no message (its last_error() is empty)"
        return BackendError(
            f"backend {self.id!r}: {what} failed: {msg} "
            f"(status {abi.STATUS_NAMES.get(rc, rc)}; library {self.path})"
        )

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise self.error(rc, what)

    @property
    def device_api(self):
        with self._lock:
            if self._device_api is None:
                from .backend import NativeDeviceAPI

                self._device_api = NativeDeviceAPI(self)
            return self._device_api

    # -- life cycle ------------------------------------------------------------------------
    # Buffers, kernels and modules hold leases of their own on the library's key, so a
    # library stays loaded (and shared, never re-initialised) while anything uses it.
    def hold(self) -> None:
        """Something (a buffer, a module) now depends on the library."""
        try:
            plugins.BACKENDS.retain(self.key)
        except KeyError:
            from ..errors import BackendError

            raise BackendError(f"backend {self.id!r} ({self.path}) was already unloaded") from None

    def drop(self) -> None:
        plugins.BACKENDS.release(self.key)

    def release(self) -> None:
        """Called by the lease table after the last lease: shut down and unload."""
        with self._lock:
            if self._unloaded:
                return
            api = self._device_api
        if api is not None:
            api.release_workspaces()
        with self._lock:
            self._unloaded = True
        self._finish()

    @property
    def loaded(self) -> bool:
        return not self._unloaded

    def _finish(self):
        try:
            if self.table.shutdown:
                self.table.shutdown()
        finally:
            _dlclose(self._cdll._handle)
            log.debug("nnplug: unloaded native backend %s (%s)", self.id, self.path)


_TABLE_STRINGS = (("id", strings.MAX_ID_BYTES), ("version", strings.MAX_VERSION_BYTES),
                  ("device_type_name", strings.MAX_NAME_BYTES))


def table_strings(path: str, table: abi.BackendV1) -> dict[str, str | None]:
    """The table's strings, each read bounded (None for NULL); LibraryLoadError for one that
    is too long or not terminated. Invalid UTF-8 is decoded with replacement characters."""
    out = {}
    for name, limit in _TABLE_STRINGS:
        s = strings.field(table, name, limit)
        if s is not None and s.problem:
            raise LibraryLoadError(
                path, "invalid table", f"{name} string {s.problem}: {s.shown}",
                f"make {name} a NUL-terminated UTF-8 string of at most {limit} bytes "
                f"(NNP_MAX_{'NAME' if name == 'device_type_name' else name.upper()}_BYTES "
                f"in nnplug/common.h)")
        out[name] = None if s is None else s.text
    return out


_PROVIDER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*$")


def declared_provider_names(path: str, table: abi.BackendV1) -> tuple[str, ...]:
    """The onnxruntime provider names the table says it stands for (ABI 1.5
    ``provider_names``, comma-separated); () for NULL and older tables. LibraryLoadError for
    text that is not a list of names."""
    s = strings.field(table, "provider_names", strings.MAX_PROVIDER_NAMES_BYTES)
    if s is None:
        return ()
    names = tuple(n.strip() for n in s.text.split(",") if n.strip())
    bad = [n for n in names if not _PROVIDER_NAME.match(n)]
    if s.problem or bad:
        raise LibraryLoadError(
            path, "invalid table",
            f"provider_names string {s.problem or 'holds ' + repr(bad[0]) + ', not a name'}: "
            f"{s.shown}",
            f"make provider_names a NUL-terminated, comma-separated list of onnxruntime provider "
            f"names such as \"DnnlExecutionProvider\" of at most "
            f"{strings.MAX_PROVIDER_NAMES_BYTES} bytes (NNP_MAX_PROVIDER_NAMES_BYTES), or NULL")
    return names


def declared_target_attrs(path: str, table: abi.BackendV1, size: int) -> dict:
    """The table's Target attributes (ABI 1.2 ``target_attrs``) as ``{name: (type, default)}``;
    {} for older tables and NULL. LibraryLoadError for text that is not a valid declaration."""
    if not abi.has_member(table, size, "target_attrs"):
        return {}
    s = strings.field(table, "target_attrs", strings.MAX_TARGET_ATTRS_BYTES)
    if s is None:
        return {}
    fix = (f"make target_attrs a NUL-terminated JSON object of at most "
           f"{strings.MAX_TARGET_ATTRS_BYTES} bytes (NNP_MAX_TARGET_ATTRS_BYTES), e.g. "
           f"{target_attrs.EXAMPLE}; or NULL")
    if s.problem:
        raise LibraryLoadError(path, "invalid table", f"target_attrs string {s.problem}: {s.shown}",
                               fix)
    try:
        return target_attrs.parse(s.text)
    except ValueError as e:
        raise LibraryLoadError(path, "invalid table", str(e), fix) from None


def duplicate_error(path: str, ident: str, taken) -> LibraryLoadError:
    where = taken.get(ident) if isinstance(taken, dict) else None
    first = f" (first from {where})" if where else ""
    return LibraryLoadError(
        path, "duplicate id", f"a backend with id {ident!r} is already registered{first}",
        "remove one of the two libraries from the backends path, or give one another id",
    )


def lease_key(path: str) -> tuple[str, str]:
    return ("native-backend", os.path.realpath(path))


def check_library_file(path, what: str) -> str:
    """``path`` as a str, if it names an existing regular file whose ELF header, program
    headers and segments lie inside the file; else LibraryLoadError.

    dlopen maps the segments a file's headers describe: one that ends past the end of the
    file (a truncated copy) is hit as SIGBUS inside dlopen, which no error handling catches.
    """
    path = os.fsdecode(os.fspath(path))
    if not os.path.exists(path):
        kind = "dangling symbolic link" if os.path.islink(path) else "no such file"
        raise LibraryLoadError(path, "not found", kind, "check the path")
    if not os.path.isfile(path):
        raise LibraryLoadError(path, "not found", "not a regular file",
                               f"give the path of the {what}'s .so file")
    reason = _elf_problem(path)
    if reason is not None:
        raise LibraryLoadError(path, "not loadable", reason, _elf_fix(reason, what))
    return path


_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_MAX_PHNUM = 0xFFFF  # e_phnum is 16 bits; PN_XNUM (0xffff) escapes are not used by .so files


def _elf_problem(path: str) -> str | None:
    """Why the file cannot be a whole ELF shared object, or None. Reads headers only."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != _ELF_MAGIC and len(head) >= 4:
                return "invalid ELF header (the file does not start with the ELF magic bytes)"
            if len(head) < 16:
                return f"file too short ({size} bytes) for an ELF header"
            elf_class, data = head[4], head[5]
            if elf_class not in (1, 2) or data not in (1, 2):
                return f"invalid ELF header (class {elf_class}, data encoding {data})"
            is64, end = elf_class == 2, "<" if data == 1 else ">"
            ehsize, phsize = (64, 56) if is64 else (52, 32)
            if len(head) < ehsize:
                return f"file too short ({size} bytes) for an ELF header ({ehsize} bytes)"
            if is64:
                e_type, _, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
                    end + "HHIQQQIHHH", head, 16)
            else:
                e_type, _, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
                    end + "HHIIIIIHHH", head, 16)
            if e_type != _ET_DYN:
                return f"ELF file of type {e_type}, not a shared object (type {_ET_DYN})"
            if phentsize != phsize or not 0 < phnum < _MAX_PHNUM:
                return (f"invalid ELF program header table ({phnum} entries of {phentsize} "
                        f"bytes; expected entries of {phsize} bytes)")
            table_end = phoff + phnum * phentsize
            if table_end > size:
                return (f"file truncated: its program headers end at byte {table_end}, the file "
                        f"has {size} bytes")
            f.seek(phoff)
            table = f.read(phnum * phentsize)
    except OSError as e:
        return f"cannot read the file: {e.strerror or e}"
    for i in range(phnum):
        if is64:
            p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
                end + "IIQQQQ", table, i * phsize)
        else:
            p_type, p_offset, _, _, p_filesz = struct.unpack_from(end + "IIIII", table, i * phsize)
        if p_filesz and p_offset + p_filesz > size:
            return (f"file truncated: segment {i} (type {p_type:#x}) ends at byte "
                    f"{p_offset + p_filesz}, the file has {size} bytes")
    return None


def _elf_fix(reason: str, what: str) -> str:
    if reason.startswith("file truncated"):
        return (f"the file is incomplete (an interrupted copy or download?): reinstall or "
                f"rebuild the {what}, or remove it from the folder")
    if reason.startswith("cannot read"):
        return "make the file readable by this user"
    return _dlopen_fix(reason)


def load_backend_library(path, taken=()):
    """Load (or share) the native backend at ``path``; a new NativeBackend holding one lease.

    ``taken``: ids already registered (a set, or a dict id -> where from): such a library is
    refused with stage ``duplicate id`` before its ``init`` runs. Raises LibraryLoadError.
    Call ``backend.close()`` to release the lease.
    """
    from .backend import NativeBackend

    path = check_library_file(path, "backend")
    key = lease_key(path)
    lib = plugins.BACKENDS.acquire(key, lambda: NativeLibrary.open(path, taken),
                                   lambda lib: lib.release())
    if lib.id in taken:  # the library was already loaded by another Runtime
        plugins.BACKENDS.release(key)
        raise duplicate_error(path, lib.id, taken)
    return NativeBackend(lib, key, path)

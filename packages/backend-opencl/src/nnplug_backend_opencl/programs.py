"""OpenCL C programs: the .cl files shipped in ``kernels/``, compiled per device on first use.

Compiled programs are cached twice: in memory per context (one build per process), and on
disk as program binaries so the next process skips the compiler. The disk key hashes the
device name, platform, driver version, OpenCL version, build options and the source text,
so a driver update or an edited kernel never reuses a stale binary.

The disk cache lives in ``$NNPLUG_OPENCL_CACHE_DIR`` if set (set it empty to turn the disk
cache off), else ``$XDG_CACHE_HOME/nnplug/opencl``, else ``~/.cache/nnplug/opencl``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from importlib import resources

import pyopencl as cl

from nnplug.errors import BackendError

from .devices import DeviceState

log = logging.getLogger("nnplug.opencl")
ENV_CACHE_DIR = "NNPLUG_OPENCL_CACHE_DIR"
BASE_OPTIONS = "-cl-std=CL1.2"


def kernel_files() -> list[str]:
    """Names of the shipped .cl files."""
    root = resources.files(__package__).joinpath("kernels")
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".cl"))


def kernel_source(name: str) -> str:
    path = resources.files(__package__).joinpath("kernels", name)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BackendError(
            f"OpenCL kernel file {name!r} is missing from the nnplug_backend_opencl package "
            f"(shipped: {', '.join(kernel_files())}); reinstall nnplug-backend-opencl"
        ) from None


def cache_dir() -> str | None:
    """The disk cache folder, or None when the disk cache is off."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env is not None:
        return env or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nnplug", "opencl")


def cache_key(device_id: dict, source: str, options: str) -> str:
    h = hashlib.sha256()
    for part in (device_id["device_name"], device_id["platform_name"],
                 device_id["driver_version"], device_id["opencl_version"], options, source):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def device_identity(dev: cl.Device) -> dict:
    return {"device_name": dev.name.strip(), "platform_name": dev.platform.name.strip(),
            "driver_version": dev.driver_version.strip(), "opencl_version": dev.version.strip()}


def get_program(st: DeviceState, name: str, options: str = "", source: str | None = None,
                identity: dict | None = None) -> cl.Program:
    """The built program for kernel file ``name`` (or ``source`` text) on ``st``'s device."""
    source = kernel_source(name) if source is None else source
    options = " ".join(o for o in (BASE_OPTIONS, options) if o)
    identity = identity or device_identity(st.device)
    key = cache_key(identity, source, options)
    with st.build_lock:
        prg = st.programs.get(key)
        if prg is None:
            prg = _load_binary(st, key, options) or _build_source(st, name, source, options, key)
            st.programs[key] = prg
        return prg


def _load_binary(st: DeviceState, key: str, options: str) -> cl.Program | None:
    folder = cache_dir()
    if folder is None:
        return None
    path = os.path.join(folder, key + ".bin")
    try:
        with open(path, "rb") as f:
            binary = f.read()
    except OSError:
        return None
    try:
        return cl.Program(st.context, [st.device], [binary]).build(options)
    except cl.Error as e:  # corrupt or foreign binary: rebuild from source and overwrite it
        log.info("nnplug: ignoring cached OpenCL binary %s: %s", path, e)
        return None


def _build_source(st: DeviceState, name: str, source: str, options: str, key: str) -> cl.Program:
    try:
        prg = cl.Program(st.context, source).build(options, devices=[st.device])
    except cl.Error as e:
        raise BackendError(
            f"OpenCL program {name!r} failed to compile for {st.device.name.strip()} "
            f"(driver {st.device.driver_version}, options {options!r}). Compiler log:\n{e}"
        ) from None
    _store_binary(prg, key)
    return prg


def _store_binary(prg: cl.Program, key: str) -> None:
    folder = cache_dir()
    if folder is None:
        return
    try:
        binaries = prg.get_info(cl.program_info.BINARIES)
        if not binaries or not binaries[0]:
            return
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".bin")
        with os.fdopen(fd, "wb") as f:
            f.write(binaries[0])
        os.replace(tmp, os.path.join(folder, key + ".bin"))  # atomic: readers never see half a file
    except (OSError, cl.Error) as e:
        log.info("nnplug: could not write the OpenCL binary cache in %s: %s", folder, e)

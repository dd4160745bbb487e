"""Helpers of the native backend tests: compiling test backends, reading their counters."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

import nnplug
from nnplug import CreationOptions, Runtime

HERE = os.path.dirname(__file__)
CSRC = os.path.join(HERE, "csrc")


def compiler(cpp=False):
    cc = shutil.which(os.environ.get("CXX" if cpp else "CC", "c++" if cpp else "cc"))
    if cc is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("no C/C++ compiler and NNPLUG_REQUIRE_NATIVE=1")
        pytest.skip("no C/C++ compiler to build the test backends")
    return cc


def compile_backend(src: str, out: str, flags=(), cpp=False, libs=()) -> str:
    cmd = [compiler(cpp), "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
           "-Wall", "-Wextra", "-Werror", f"-I{nnplug.get_include()}", *flags,
           os.path.join(CSRC, src), "-o", out, *libs]
    if not cpp:
        cmd.insert(1, "-std=c99")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


class Stats:
    """The call counters kept by testbackend.c (read through the same dlopen handle)."""

    NAMES = ["alloc", "free", "live", "ws_alloc", "ws_free", "h2d", "d2h", "d2d", "kernel_run",
             "run_steps", "streams", "stream_sync", "set_stream", "sync_from_to", "kernels_live",
             "init", "shutdown", "threads", "set_device", "get_attr", "strings_live", "run_dynamic",
             "host_flags", "kept_constants", "changed_at_destroy", "output_alloc"]

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)  # keeps the library mapped: counters survive unloads

    def __call__(self) -> dict:
        arr = (ctypes.c_longlong * len(self.NAMES))()
        self.lib.tb_stats(arr, len(self.NAMES))
        return dict(zip(self.NAMES, arr))


def bare_runtime(**kw) -> Runtime:
    """A Runtime that loads nothing by itself."""
    return Runtime(CreationOptions.isolated(**kw))


def guarded_page(fill: bytes):
    """A readable page of ``fill`` bytes followed by a PROT_NONE page: (address of the
    readable page, page size). Never unmapped: tests read across its end."""
    import mmap

    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    ctypes.memset(base, ord(fill), page)
    assert libc.mprotect(base + page, page, 0) == 0  # PROT_NONE: the guard page
    return base, page

"""The shipped .cl files compile; build failures carry the compiler log; compiled programs
are cached in memory per context and as binaries on disk, keyed so stale ones are not reused."""

from __future__ import annotations

import os

import pyopencl as cl
import pytest

from nnplug.errors import BackendError
from nnplug_backend_opencl import devices, programs
from nnplug_backend_opencl.ops.common import COPY_TYPES


def variants(name):
    if name == "copy.cl":  # built once per element size
        return [f"-DT={t}" for t in COPY_TYPES.values()]
    return [""]


@pytest.mark.parametrize("name", programs.kernel_files())
def test_every_shipped_kernel_file_compiles(name, tmp_path, monkeypatch):
    monkeypatch.setenv(programs.ENV_CACHE_DIR, "")  # compile for real, not from a cache
    st = devices.state(0)
    for options in variants(name):
        source = programs.kernel_source(name)
        prg = cl.Program(st.context, source).build(
            " ".join(o for o in (programs.BASE_OPTIONS, options) if o), devices=[st.device])
        assert prg.get_info(cl.program_info.NUM_KERNELS) >= 1


def test_the_kernel_files_ship_in_the_package():
    assert {"conv.cl", "gemm.cl", "elementwise.cl", "pool.cl", "normalize.cl",
            "copy.cl"} <= set(programs.kernel_files())
    with pytest.raises(BackendError, match="missing from the nnplug_backend_opencl package"):
        programs.kernel_source("nope.cl")


def test_a_compile_error_carries_the_compiler_log(monkeypatch):
    monkeypatch.setenv(programs.ENV_CACHE_DIR, "")
    broken = "__kernel void k(__global float* x) { x[0] = undeclared_thing_42; }"
    with pytest.raises(BackendError) as e:
        programs.get_program(devices.state(0), "broken.cl", source=broken)
    text = str(e.value)
    assert "broken.cl" in text and "failed to compile" in text
    assert "undeclared_thing_42" in text  # the compiler's own message, naming the identifier


def test_programs_are_cached_in_memory_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv(programs.ENV_CACHE_DIR, str(tmp_path))
    st = devices.state(0)
    source = "__kernel void k(__global float* x) { x[get_global_id(0)] += 1.0f; } // cache test"
    p1 = programs.get_program(st, "t.cl", source=source)
    assert programs.get_program(st, "t.cl", source=source) is p1  # memory cache
    key = programs.cache_key(programs.device_identity(st.device), source,
                             programs.BASE_OPTIONS)
    path = tmp_path / f"{key}.bin"
    assert path.exists() and path.stat().st_size > 0
    # a new context (a new process, in effect) loads the binary instead of compiling
    fresh = devices.DeviceState(st.device, cl.Context([st.device]), None)
    assert programs._load_binary(fresh, key, programs.BASE_OPTIONS) is not None
    # a corrupt binary is ignored and rewritten from source
    path.write_bytes(b"not a program binary")
    p3 = programs.get_program(fresh, "t.cl", source=source)
    assert p3.get_info(cl.program_info.NUM_KERNELS) == 1
    assert path.read_bytes() != b"not a program binary"


def test_cache_key_changes_with_driver_source_and_options():
    ident = {"device_name": "d", "platform_name": "p", "driver_version": "1",
             "opencl_version": "OpenCL 3.0"}
    base = programs.cache_key(ident, "src", "")
    assert programs.cache_key({**ident, "driver_version": "2"}, "src", "") != base
    assert programs.cache_key({**ident, "device_name": "e"}, "src", "") != base
    assert programs.cache_key(ident, "src2", "") != base
    assert programs.cache_key(ident, "src", "-DT=uint") != base


def test_cache_dir_location(monkeypatch, tmp_path):
    monkeypatch.delenv(programs.ENV_CACHE_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert programs.cache_dir() == os.path.join(str(tmp_path), "nnplug", "opencl")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert programs.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "nnplug",
                                                "opencl")
    monkeypatch.setenv(programs.ENV_CACHE_DIR, "")
    assert programs.cache_dir() is None

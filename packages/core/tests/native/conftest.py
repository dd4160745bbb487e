"""Builds the test backend (csrc/testbackend.c) and its broken variants with the system cc."""

from __future__ import annotations

import subprocess

import pytest
from nativelib import Stats, bare_runtime, compile_backend, compiler

# name -> (source, extra flags)
VARIANTS = {
    "testdev": ("testbackend.c", []),
    "testcpu": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", '-DTB_ID="testcpu"']),
    "testnorun": ("testbackend.c", ["-DTB_RUN_STEPS=0", '-DTB_ID="testnorun"']),
    "testcpu_perkernel": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_RUN_DYNAMIC=0",
                                            '-DTB_ID="testcpuk"']),
    "testown": ("testbackend.c", ["-DTB_OWN_CONSTANTS=1", '-DTB_ID="testown"']),
    "major": ("testbackend.c", ["-DTB_ABI_MAJOR=(NNP_BACKEND_ABI_MAJOR+1)", '-DTB_ID="testmajor"']),
    "old_major": ("testbackend.c", ["-DTB_ABI_MAJOR=0", '-DTB_ID="testoldmajor"']),
    "newer_minor": ("testbackend.c", ["-DTB_ABI_MINOR=(NNP_BACKEND_ABI_MINOR+1)",
                                      '-DTB_ID="testnewer"']),
    "empty_id": ("testbackend.c", ['-DTB_ID=""']),
    "reserved_id": ("testbackend.c", ['-DTB_ID="auto"']),
    "bad_id": ("testbackend.c", ['-DTB_ID="Bad Id"']),
    "init_fail": ("testbackend.c", ["-DTB_INIT_FAIL=1", '-DTB_ID="testinitfail"']),
    "short_table": ("testbackend.c", ["-DTB_STRUCT_SIZE=64", '-DTB_ID="testshort"']),
    "bad_shapes": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_BAD_OUTPUT_SHAPES=1",
                                     '-DTB_ID="testbadshapes"']),
    "unchecked_dynamic": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_BAD_OUTPUT_SHAPES=1",
                                            "-DTB_UNCHECKED_RUN_DYNAMIC=1",
                                            '-DTB_ID="testunchecked"']),
    "ask_every_output": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_ASK_EVERY_OUTPUT=1",
                                           '-DTB_ID="testaskall"']),
    "abi10": ("testbackend.c", ["-DTB_ABI_MINOR=0", '-DTB_ID="testabi10"', "-DTB_HOST_VISIBLE=1",
                                "-DTB_STRUCT_SIZE=offsetof(nnp_backend_v1,set_profile_hook)"]),
    "strings": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_STRINGS=1", '-DTB_ID="teststrings"']),
    "strings_norelease": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_STRINGS=2",
                                            '-DTB_ID="testnorelease"']),
    "strings_bad": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_STRINGS=1", "-DTB_BAD_STRINGS=1",
                                      '-DTB_ID="testbadstrings"']),
    "strings_device": ("testbackend.c", ["-DTB_STRINGS=1", '-DTB_ID="teststringsdev"']),
    "strings_abi12": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_STRINGS=1", "-DTB_ABI_MINOR=2",
                                        '-DTB_ID="testabi12"']),
    "strings_abi16": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_STRINGS=1", "-DTB_ABI_MINOR=6",
                                        '-DTB_ID="testabi16"']),
    "ctor_abort": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_CTOR_ABORT=1",
                                     '-DTB_ID="testctorabort"']),
    "entry_segv": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_ENTRY_SEGV=1",
                                     '-DTB_ID="testentrysegv"']),
    "misbehave": ("testbackend.c", ["-DTB_HOST_VISIBLE=1", "-DTB_MISBEHAVE=1",
                                    '-DTB_ID="testmisbehave"']),
    "misbehave_dev": ("testbackend.c", ["-DTB_MISBEHAVE=1", '-DTB_ID="testmisbehavedev"']),
    "no_entry": ("no_entry.c", []),
    "mangled": ("mangled.cpp", []),
}


@pytest.fixture(scope="session")
def libs(tmp_path_factory):
    """variant -> path of its compiled .so, each alone in its own folder."""
    root = tmp_path_factory.mktemp("native_backends")
    out = {}
    for name, (src, flags) in VARIANTS.items():
        d = root / name
        d.mkdir()
        out[name] = compile_backend(src, str(d / f"libnnplug_{name}.so"), flags,
                                    cpp=src.endswith(".cpp"))
    # a backend that needs a library that is missing at load time
    dep_dir = root / "dep"
    dep_dir.mkdir()
    dep_src = dep_dir / "dep.c"
    dep_src.write_text("int nnptest_dep_value(void) { return 42; }\n")
    dep = dep_dir / "libnnptestdep.so"
    subprocess.run([compiler(), "-shared", "-fPIC", str(dep_src), "-o", str(dep)], check=True)
    d = root / "missing_dep"
    d.mkdir()
    out["missing_dep"] = compile_backend(
        "testbackend.c", str(d / "libnnplug_missing_dep.so"), ['-DTB_ID="testdep"'],
        libs=[f"-L{dep_dir}", "-Wl,--no-as-needed", "-lnnptestdep"])
    dep.unlink()
    return out


@pytest.fixture(scope="session")
def stats(libs):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Stats(libs[name])
        return cache[name]()

    return get


@pytest.fixture
def rt():
    r = bare_runtime()
    yield r
    r.close()

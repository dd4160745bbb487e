"""Build hook: compiles the op library libnnplug_op_<name>.so with the system C compiler.

The C code includes nnplug's custom-op header. Nothing is vendored: the headers are found, in
order, in NNPLUG_INCLUDE, in the nnplug importable by the build (non-isolated builds), or in
the monorepo's core source tree beside this package (``pip install packages/core
packages/ops-...`` from a checkout). The .cl kernel source is embedded into the library as a
C string, so the .so alone is the whole op (it can be copied into a custom-op folder).

No compiler or no headers: the wheel is pure Python (the ops then run as numpy reference
code, with a warning), unless NNPLUG_REQUIRE_NATIVE=1 makes that an error.
NNPLUG_CFLAGS / NNPLUG_LDFLAGS are appended to the compiler flags (e.g. sanitizers).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "nnplug_ops_argmax"
LIBRARY = "libnnplug_op_argmax.so"
SOURCES = ["argmax.c"]
CL_SOURCES = {"argmax.cl": "argmax_cl"}  # file -> name of the generated C string


def find_include(root: str) -> str | None:
    def ok(d):
        return d and os.path.isfile(os.path.join(d, "nnplug", "custom_op.h"))

    env = os.environ.get("NNPLUG_INCLUDE")
    if env:
        if not ok(env):
            raise RuntimeError(f"NNPLUG_INCLUDE={env!r} has no nnplug/custom_op.h")
        return env
    try:
        import nnplug

        if ok(nnplug.get_include()):
            return nnplug.get_include()
    except ImportError:
        pass
    sibling = os.path.join(root, "..", "core", "src", "nnplug", "include")
    return os.path.abspath(sibling) if ok(sibling) else None


def c_string(name: str, text: str) -> str:
    lines = [line.replace("\\", "\\\\").replace('"', '\\"') for line in text.splitlines()]
    body = "\n".join(f'    "{line}\\n"' for line in lines)
    return f"static const char {name}[] =\n{body};\n"


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return  # the sdist ships sources only
        required = os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1"
        cc = shutil.which(os.environ.get("CC", "cc"))
        include = find_include(self.root)
        missing = ("no C compiler (cc)" if cc is None else
                   "no nnplug headers (set NNPLUG_INCLUDE, or install nnplug in the build "
                   "environment and build with --no-build-isolation)" if include is None else None)
        if missing:
            if required:
                raise RuntimeError(f"{MODULE}: cannot build {LIBRARY}: {missing}")
            self.app.display_warning(f"{MODULE}: {missing}; building a pure-Python wheel "
                                     f"(numpy reference kernels only)")
            return
        pkg = os.path.join(self.root, "src", MODULE)
        csrc = os.path.join(pkg, "csrc")
        gen = os.path.join(self.root, "build", "gen")
        os.makedirs(gen, exist_ok=True)
        for cl, name in CL_SOURCES.items():
            with open(os.path.join(csrc, cl)) as f:
                text = c_string(name, f.read())
            with open(os.path.join(gen, name + ".h"), "w") as f:
                f.write(text)
        editable = version == "editable"
        out_dir = pkg if editable else os.path.join(self.root, "build", "lib")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, LIBRARY)
        cmd = [cc, "-O3", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
               "-Wall", "-Wextra", f"-I{include}", f"-I{gen}",
               *[os.path.join(csrc, s) for s in SOURCES], "-o", out, "-lm",
               *shlex.split(os.environ.get("NNPLUG_CFLAGS", "")),
               *shlex.split(os.environ.get("NNPLUG_LDFLAGS", ""))]
        self.app.display_info(" ".join(cmd))
        subprocess.run(cmd, check=True)
        build_data["pure_python"] = False
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"py3-none-{plat}"  # ctypes library: no libpython ABI
        if not editable:
            build_data["force_include"][out] = f"{MODULE}/{LIBRARY}"
        build_data["artifacts"].append(os.path.relpath(out, self.root))

"""Build hook: compiles the backend's shared object libnnplug_backend_cpu.so with the system
C compiler.

The C code includes nnplug's backend ABI header (nnplug/backend.h). Nothing is vendored: the
headers are found, in order, in NNPLUG_INCLUDE, in the nnplug importable by the build
(non-isolated builds), or in the monorepo's core source tree beside this package.

The library links only the C library (matrix products run on its own GEMM, csrc/gemm.c), so
the same file works from the wheel and copied into a dynamic-backends folder.

No compiler or no headers: the wheel has no shared object and the backend reports that it was
installed without its native library, unless NNPLUG_REQUIRE_NATIVE=1 makes that a build error.
NNPLUG_CFLAGS / NNPLUG_LDFLAGS are appended to the compiler flags (e.g. sanitizers).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sysconfig

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "nnplug_backend_cpu"
LIBRARY = "libnnplug_backend_cpu.so"


def find_include(root: str) -> str | None:
    def ok(d):
        return d and os.path.isfile(os.path.join(d, "nnplug", "backend.h"))

    env = os.environ.get("NNPLUG_INCLUDE")
    if env:
        if not ok(env):
            raise RuntimeError(f"NNPLUG_INCLUDE={env!r} has no nnplug/backend.h")
        return env
    try:
        import nnplug

        if ok(nnplug.get_include()):
            return nnplug.get_include()
    except ImportError:
        pass
    sibling = os.path.join(root, "..", "core", "src", "nnplug", "include")
    return os.path.abspath(sibling) if ok(sibling) else None


def compile_command(cc: str, root: str, include: str, out: str) -> list[str]:
    """The one compile-and-link command (also used by the tests to build a fresh copy)."""
    csrc = os.path.join(root, "src", MODULE, "csrc")
    sources = sorted(os.path.join(csrc, f) for f in os.listdir(csrc) if f.endswith(".c"))
    with open(os.path.join(root, "src", MODULE, "_version.py")) as f:
        version = re.search(r'"([^"]+)"', f.read()).group(1)
    return [cc, "-O3", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
            "-fno-math-errno", "-fno-trapping-math", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
            f"-I{include}", f'-DNNC_VERSION="{version}"', *sources, "-o", out, "-lm", "-ldl",
            *shlex.split(os.environ.get("NNPLUG_CFLAGS", "")),
            *shlex.split(os.environ.get("NNPLUG_LDFLAGS", ""))]


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
            self.app.display_warning(f"{MODULE}: {missing}; the wheel will have no backend "
                                     f"library and the cpu backend will not load")
            return
        editable = version == "editable"
        pkg = os.path.join(self.root, "src", MODULE)
        out_dir = pkg if editable else os.path.join(self.root, "build", "lib")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, LIBRARY)
        cmd = compile_command(cc, self.root, include, out)
        self.app.display_info(" ".join(cmd))
        subprocess.run(cmd, check=True)
        build_data["pure_python"] = False
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"py3-none-{plat}"  # ctypes library: no libpython ABI
        if not editable:
            build_data["force_include"][out] = f"{MODULE}/{LIBRARY}"
        build_data["artifacts"].append(os.path.relpath(out, self.root))

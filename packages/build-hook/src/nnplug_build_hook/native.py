"""The build of a native nnplug plugin: one hatchling build hook, ``nnplug-native``, that every
native package uses, the in-tree ones and those ``nnplug new ... --native`` generates.

A package names this distribution as a build requirement and configures the hook in its
``pyproject.toml``::

    [build-system]
    requires = ["hatchling>=1.27", "nnplug-build-hook>=0.1"]
    build-backend = "hatchling.build"

    [tool.hatch.build.hooks.nnplug-native]
    package = "nnplug_backend_x"     # the import package under src/
    library = "libnnplug_backend_x.so"
    sources = ["csrc/*.c"]           # globs under src/<package>/
    embed = { "x.cl" = "x_cl" }      # optional: files compiled in as C strings (gen/<name>.h)
    libs = ["-lm"]                   # optional: extra link arguments
    cflags = ["-DX=1"]               # optional: extra compile arguments
    include_dirs_from = ["foo-devel"] # optional: distributions (build requirements) whose
                                     # installed include/ folders go on the include path

What it does:

- **wheel**: compiles the sources into ``<package>/<library>`` with the system C compiler and
  tags the wheel for the platform the library really needs (``manylinux_2_<glibc>`` from the
  GLIBC symbol versions it references; the library is loaded with ctypes and does not link
  libpython, hence ``py3-none``). No sources go into the wheel.
- **sdist**: ships nnplug's versioned C headers (``include/nnplug/*.h``), so the sdist builds
  anywhere with hatchling, this hook and a compiler, in pip's isolated build too.
- A library that cannot be built **fails the build** with the reason (no compiler, no headers,
  a compile error). ``NNPLUG_ALLOW_NO_NATIVE=1`` opts out: the wheel is then pure Python and
  the package must cope at run time (it reports the missing library).
- ``NNPLUG_CFLAGS`` / ``NNPLUG_LDFLAGS`` are appended (sanitizer builds); ``NNPLUG_INCLUDE``
  names another header folder; ``CC`` another compiler.

Headers are looked for in ``NNPLUG_INCLUDE``, ``include/`` in the project (sdists and generated
projects), the monorepo's core beside the package, then the nnplug importable by the build.

This module imports nothing but hatchling and the standard library: the build environment
has neither nnplug nor its dependencies.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sysconfig

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PLUGIN_NAME = "nnplug-native"
HEADER = os.path.join("nnplug", "common.h")
ALLOW_NO_NATIVE = "NNPLUG_ALLOW_NO_NATIVE"
CFLAGS = ["-O3", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
          "-fno-math-errno", "-fno-trapping-math", "-Wall", "-Wextra",
          "-Wno-missing-field-initializers"]
OLDEST_MANYLINUX = (2, 17)
SETTINGS = {"package", "library", "sources", "embed", "libs", "cflags", "include_dirs_from"}
REQUIRED = ("package", "library")
# options hatchling itself reads from every build hook's table
HATCH_SETTINGS = {"dependencies", "require-runtime-dependencies", "require-runtime-features",
                  "enable-by-default"}


class NativeBuildError(RuntimeError):
    """The native library cannot be built; the message says why and how to fix it."""


def find_include(root: str) -> str | None:
    """The folder holding nnplug/*.h, or None."""

    def ok(d):
        return bool(d) and os.path.isfile(os.path.join(d, HEADER))

    env = os.environ.get("NNPLUG_INCLUDE")
    if env:
        if not ok(env):
            raise NativeBuildError(f"NNPLUG_INCLUDE={env!r} has no {HEADER}")
        return os.path.abspath(env)
    for cand in (os.path.join(root, "include"),
                 os.path.join(root, "..", "core", "src", "nnplug", "include")):
        if ok(cand):
            return os.path.abspath(cand)
    try:
        import nnplug

        if ok(nnplug.get_include()):
            return nnplug.get_include()
    except ImportError:
        pass
    return None


def dist_include_dirs(dists: list[str]) -> list[str]:
    """The ``include/`` folders the named installed distributions put headers in (wheels such
    as ``onednn-devel-cpu-gomp`` install them under the environment's data path, which pip's
    isolated builds do not put on any standard include path)."""
    from importlib import metadata
    from pathlib import Path

    found: list[str] = []
    for name in dists:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            raise NativeBuildError(
                f"the build needs the headers of {name}, which is not installed in the build "
                f"environment. Fix: pip install {name} (and list it in [build-system] "
                f"requires)") from None
        dirs = []
        for f in files:
            if "include" in f.parts[:-1]:
                below = len(f.parts) - f.parts.index("include") - 2  # folders under include/
                d = str(Path(os.path.normpath(f.locate())).parents[below])
                if d not in dirs:
                    dirs.append(d)
        if not dirs:
            raise NativeBuildError(f"{name} is installed but has no include/ folder")
        found += [d for d in dirs if d not in found]
    return found


def c_string(name: str, text: str) -> str:
    """``text`` as a C string constant named ``name``."""
    lines = [line.replace("\\", "\\\\").replace('"', '\\"') for line in text.splitlines()]
    body = "\n".join(f'    "{line}\\n"' for line in lines)
    return f"static const char {name}[] =\n{body};\n"


def glibc_needed(library: str) -> tuple[int, int] | None:
    """The newest GLIBC_x.y symbol version ``library`` references (objdump, from binutils,
    which every gcc install has), or None when it cannot be read."""
    objdump = shutil.which("objdump")
    if not objdump:
        return None
    out = subprocess.run([objdump, "-p", library], capture_output=True, text=True).stdout
    versions = [tuple(int(p) for p in m.groups())
                for m in re.finditer(r"\bGLIBC_(\d+)\.(\d+)\b", out)]
    return max(versions, default=OLDEST_MANYLINUX)


def platform_tag(library: str) -> str:
    """``manylinux_2_<y>_<arch>`` for a Linux glibc library, else the build platform."""
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    if plat.startswith("linux_"):
        needed = glibc_needed(library)
        if needed is not None:
            major, minor = max(needed, OLDEST_MANYLINUX)
            return f"manylinux_{major}_{minor}_{plat[len('linux_'):]}"
    return plat


class NativeBuildHook(BuildHookInterface):
    """The hatchling build hook ``nnplug-native`` (registered in hooks.py)."""

    PLUGIN_NAME = PLUGIN_NAME

    def config_table(self) -> dict:
        where = f"{self.root}/pyproject.toml: [tool.hatch.build.hooks.{PLUGIN_NAME}]"
        missing = [key for key in REQUIRED if key not in self.config]
        if missing:
            raise NativeBuildError(f"{where} lacks {', '.join(map(repr, missing))}: nnplug's "
                                   f"native build hook needs the import package and the "
                                   f"library's file name (docs/native-build.md)")
        unknown = sorted(set(self.config) - SETTINGS - HATCH_SETTINGS)
        if unknown:
            raise NativeBuildError(f"{where} has unknown setting(s) {', '.join(map(repr, unknown))}; "
                                   f"known: {', '.join(sorted(SETTINGS))}")
        return {key: value for key, value in self.config.items() if key in SETTINGS}

    def initialize(self, version, build_data):
        cfg = self.config_table()
        if self.target_name == "sdist":
            self._ship_headers(build_data)
        elif self.target_name == "wheel":
            self._build_library(version, build_data, cfg)

    def _ship_headers(self, build_data):
        include = find_include(self.root)
        if include is None:
            raise NativeBuildError(self._no_headers())
        if os.path.abspath(include) != os.path.abspath(os.path.join(self.root, "include")):
            build_data["force_include"][os.path.join(include, "nnplug")] = "include/nnplug"

    def _no_headers(self) -> str:
        return ("nnplug's C headers were not found (looked in NNPLUG_INCLUDE, include/ in the "
                "project, the monorepo's packages/core, and an importable nnplug). Fix: build "
                "from the sdist, which ships them, or set NNPLUG_INCLUDE to the folder that "
                "holds nnplug/common.h (python -c 'import nnplug; print(nnplug.get_include())')")

    def _build_library(self, version, build_data, cfg):
        package, library = cfg["package"], cfg["library"]
        cc = shutil.which(os.environ.get("CC", "cc"))
        try:
            if cc is None:
                raise NativeBuildError(
                    f"no C compiler ({os.environ.get('CC', 'cc')} is not on PATH). Fix: "
                    f"install one (Debian/Ubuntu: apt install gcc libc6-dev), or install a "
                    f"prebuilt wheel")
            include = find_include(self.root)
            if include is None:
                raise NativeBuildError(self._no_headers())
            out = self._compile(version, cfg, cc, include)
        except (NativeBuildError, subprocess.CalledProcessError) as e:
            why = e if isinstance(e, NativeBuildError) else f"the compiler failed ({e})"
            if os.environ.get(ALLOW_NO_NATIVE) == "1":
                self.app.display_warning(f"{package}: {library} not built: {why}; "
                                         f"{ALLOW_NO_NATIVE}=1, so the wheel has no library")
                return
            raise NativeBuildError(f"{package}: cannot build {library}: {why}. (To build a "
                                   f"wheel without it anyway: {ALLOW_NO_NATIVE}=1)") from None
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{platform_tag(out)}"
        if version != "editable":
            build_data["force_include"][out] = f"{package}/{library}"
        build_data["artifacts"].append(os.path.relpath(out, self.root))

    def _compile(self, version, cfg, cc, include) -> str:
        package, library = cfg["package"], cfg["library"]
        pkg = os.path.join(self.root, "src", package)
        sources = sorted({s for pattern in cfg.get("sources", ["csrc/*.c"])
                          for s in glob.glob(os.path.join(pkg, pattern))})
        if not sources:
            raise NativeBuildError(f"no C sources match {cfg.get('sources')} under {pkg}")
        gen = os.path.join(self.root, "build", "gen")
        os.makedirs(gen, exist_ok=True)
        for src, name in cfg.get("embed", {}).items():
            with open(os.path.join(pkg, "csrc", src)) as f:
                text = c_string(name, f.read())
            with open(os.path.join(gen, name + ".h"), "w") as f:
                f.write(text)
        out_dir = pkg if version == "editable" else os.path.join(self.root, "build", "lib")
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, library)
        with open(os.path.join(pkg, "_version.py")) as f:
            found = re.search(r'"([^"]+)"', f.read())
        defines = [f'-DNNPLUG_PLUGIN_VERSION="{found.group(1)}"'] if found else []
        extra = [f"-I{d}" for d in dist_include_dirs(cfg.get("include_dirs_from", []))]
        cmd = [cc, *CFLAGS, f"-I{include}", f"-I{gen}", *extra, *defines, *cfg.get("cflags", []),
               *sources, "-o", out, *cfg.get("libs", []),
               *shlex.split(os.environ.get("NNPLUG_CFLAGS", "")),
               *shlex.split(os.environ.get("NNPLUG_LDFLAGS", ""))]
        self.app.display_info(" ".join(cmd))
        subprocess.run(cmd, check=True)
        return out

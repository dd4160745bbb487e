"""The maintainers' entry point: tests, isolation, wheels, sanitizers, lint and docs.

    nox --list              # the menu
    nox -s ci               # what CI runs: every package on one Python, plus the rest
    nox                     # the full matrix (every Python)
    nox -s "tests-3.12(package='backend-cpu')" -- -k conv -x

Packages are discovered from ``packages/*``. Every package is tested from its built wheel,
installed non-editable, never from the source tree. Wheels are built once per source state and
kept in ``.nox/_dist`` (keyed by a hash of the package's files and the build flags), so the core
is not rebuilt for every session.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

import nox
import nox.command

try:
    import tomllib
except ImportError:  # Python 3.10 runs nox too
    import tomli as tomllib

ROOT = os.path.dirname(os.path.abspath(__file__))
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
CI_PYTHON = "3.11"
CORE = "core"
DIST_CACHE = os.path.join(ROOT, ".nox", "_dist")
CORE_INCLUDE = os.path.join(ROOT, "packages", CORE, "src", "nnplug", "include")
BUILD_HOOK = "build-hook"
"""nnplug-build-hook, the hatchling hook native packages build with: not a plugin, and not on
PyPI, so the builds here find it through PIP_FIND_LINKS (see build())."""
BUILD_HOOK_DIST = "nnplug-build-hook"
BUILDER = os.path.join(ROOT, ".nox", "_builder")
KIT = "conformance"
"""nnplug-conformance, the conformance kit: the conformance and nodesuite sessions run it, and
packages whose tests use it name it in their test extra."""

SANITIZE_CFLAGS = ("-fsanitize=address,undefined -fno-sanitize-recover=undefined "
                   "-fno-omit-frame-pointer -g -O1")
SANITIZE_LDFLAGS = "-fsanitize=address,undefined"

nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests", "isolation", "wheels", "sanitize", "docs"]


DISCARD_ENVS = "NNPLUG_NOX_DISCARD_ENVS"
"""Set to 1 (``nox -s ci`` sets it): each session deletes its environment when it ends."""


def disposable_session(**kwargs):
    """``nox.session`` whose environment is deleted when the session ends if DISCARD_ENVS is 1.

    CI machines may have only a few GB of disk: the 27 environments of ``ci`` hold 0.4-1 GB
    each (onnxruntime, oneDNN, Ray), and kept side by side they filled one (ENOSPC in pip)."""
    def decorate(func):
        @functools.wraps(func)
        def run_then_discard(session: nox.Session, **params) -> None:
            try:
                func(session, **params)
            finally:
                where = getattr(session.virtualenv, "location", None)
                if os.environ.get(DISCARD_ENVS) == "1" and where and os.path.isdir(where):
                    session.log(f"discarding {os.path.relpath(where, ROOT)} ({DISCARD_ENVS}=1)")
                    shutil.rmtree(where, ignore_errors=True)
        return nox.session(**kwargs)(run_then_discard)
    return decorate


def _put_interpreters_on_path() -> None:
    """pyenv's shims refuse versions that are not 'global'; put each version's own bin
    folder (newest patch release of every minor we test) first on PATH."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for minor in PYTHONS:
        dirs = glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin"))
        dirs = [d for d in dirs if os.path.exists(os.path.join(d, f"python{minor}"))]
        if dirs:
            newest = max(dirs, key=lambda d: [int(x) if x.isdigit() else 0
                                              for x in os.path.basename(os.path.dirname(d)).split(".")])
            found.append(newest)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in found]
    os.environ["PATH"] = os.pathsep.join(found + path)


_put_interpreters_on_path()


# -- packages ----------------------------------------------------------------------------
class Package:
    """One folder under packages/ with a pyproject.toml."""

    def __init__(self, folder: str):
        self.folder = folder
        self.path = os.path.join(ROOT, "packages", folder)
        self.dist = self.project.get("name", f"nnplug-{folder}")
        src = os.path.join(self.path, "src")
        modules = sorted(d for d in os.listdir(src)
                         if os.path.isfile(os.path.join(src, d, "__init__.py"))) \
            if os.path.isdir(src) else []
        self.module = modules[0] if modules else self.dist.replace("-", "_")
        self.tests = os.path.join(self.path, "tests")

    @property
    def pyproject(self) -> dict:
        """``pyproject.toml``, read afresh: a long nox run sees edits made meanwhile."""
        with open(os.path.join(self.path, "pyproject.toml"), "rb") as f:
            return tomllib.load(f)

    @property
    def project(self) -> dict:
        return self.pyproject.get("project", {})

    @property
    def uses_build_hook(self) -> bool:
        """Whether the package builds native code with nnplug-build-hook (names it in
        ``[build-system] requires``)."""
        requires = self.pyproject.get("build-system", {}).get("requires", [])
        return BUILD_HOOK_DIST in {_requirement_name(r) for r in requires}

    @property
    def extras(self) -> dict[str, list[str]]:
        return self.project.get("optional-dependencies", {})

    @property
    def entry_points(self) -> dict[str, dict[str, str]]:
        return self.project.get("entry-points", {})

    @property
    def has_c(self) -> bool:
        """Whether the package has C sources (its own or its tests'): sanitize covers it."""
        return bool(glob.glob(os.path.join(self.path, "**", "*.c"), recursive=True))

    @property
    def backend_ids(self) -> list[str]:
        return sorted(self.entry_points.get("nnplug.backends", {}))

    def test_requirements(self) -> list[str]:
        return list(self.extras.get("test", []))

    def __repr__(self) -> str:
        return f"Package({self.folder!r})"


def _discover() -> dict[str, Package]:
    found = {}
    for pyproject in sorted(glob.glob(os.path.join(ROOT, "packages", "*", "pyproject.toml"))):
        folder = os.path.basename(os.path.dirname(pyproject))
        found[folder] = Package(folder)
    # the core first: everything else builds on it
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != CORE, kv[0])))


PACKAGES = _discover()
PLUGINS = [name for name in PACKAGES if name not in (CORE, BUILD_HOOK)]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_BY_DIST = {_normalize(p.dist): p for p in PACKAGES.values()}


def _requirement_name(req: str) -> str:
    return _normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def sibling_requirements(pkg: Package) -> list[Package]:
    """Packages from this repository named in ``pkg``'s test extra (built here, not from PyPI)."""
    return [_BY_DIST[_requirement_name(r)] for r in pkg.test_requirements()
            if _requirement_name(r) in _BY_DIST]


# -- building (cached) -------------------------------------------------------------------
_SKIP_DIRS = {"__pycache__", "build", "dist", ".nox", "_build", ".pytest_cache", ".ruff_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".o")


def _source_digest(pkg: Package, env: dict[str, str]) -> str:
    """A hash of what goes into the build: the package's files, the core's C headers and, for
    native packages, the build hook they compile with, and the build flags."""
    h = hashlib.sha256()
    hook = [os.path.join(PACKAGES[BUILD_HOOK].path, "src")] if pkg.uses_build_hook else []
    for top in (pkg.path, CORE_INCLUDE, *hook):
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs
                             if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
            for name in sorted(files):
                if name.endswith(_SKIP_SUFFIXES):
                    continue
                full = os.path.join(root, name)
                h.update(os.path.relpath(full, ROOT).encode() + b"\0")
                with open(full, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    for key in sorted(env):
        h.update(f"{key}={env[key]}\0".encode())
    return h.hexdigest()[:16]


class Dists:
    def __init__(self, sdist: str, wheel: str):
        self.sdist, self.wheel = sdist, wheel


def _builder(session: nox.Session) -> str:
    """The Python of a small environment holding `build`, shared by every session, so the
    environments under test get nothing but what they test."""
    python = os.path.join(BUILDER, "bin", "python")
    if os.path.exists(python) and subprocess.run([python, "-c", "import build"],
                                                 capture_output=True).returncode == 0:
        return python
    shutil.rmtree(BUILDER, ignore_errors=True)
    session.run(sys.executable, "-m", "virtualenv", "-q", BUILDER, external=True)
    session.run(python, "-m", "pip", "install", "-q", "build", external=True)
    return python


def build(session: nox.Session, pkg: Package, flags: dict[str, str] | None = None) -> Dists:
    """sdist and wheel of ``pkg`` (the wheel built from the sdist, as pip users get it).

    Reused while the package's files and ``flags`` (NNPLUG_CFLAGS / NNPLUG_LDFLAGS) are
    unchanged; wheels are ``py3-none-*``, so one build serves every Python.
    """
    flags = dict(flags or {})
    digest = _source_digest(pkg, flags)
    out = os.path.join(DIST_CACHE, pkg.folder, digest)
    wheels = glob.glob(os.path.join(out, "*.whl"))
    sdists = glob.glob(os.path.join(out, "*.tar.gz"))
    if len(wheels) == 1 and len(sdists) == 1:
        session.log(f"{pkg.dist}: reusing {os.path.relpath(wheels[0], ROOT)}")
        return Dists(sdists[0], wheels[0])
    python = _builder(session)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{digest}-", dir=os.path.dirname(out))
    env = {k: v for k, v in flags.items()}
    env.setdefault("NNPLUG_CFLAGS", os.environ.get("NNPLUG_CFLAGS", ""))
    env.setdefault("NNPLUG_LDFLAGS", os.environ.get("NNPLUG_LDFLAGS", ""))
    # No NNPLUG_INCLUDE: the wheel is built from the unpacked sdist, which must carry nnplug's
    # headers itself (the build hook ships them), as it does for pip users.
    if pkg.uses_build_hook:
        # The isolated build environments install the hook from its wheel, built here: it is
        # not on PyPI. Appended, so the machine's own find-links still count.
        hook = build(session, PACKAGES[BUILD_HOOK])
        links = [os.environ.get("PIP_FIND_LINKS", ""), os.path.dirname(hook.wheel)]
        env["PIP_FIND_LINKS"] = " ".join(link for link in links if link)
    try:
        session.run(python, "-m", "build", "--outdir", tmp, pkg.path, env=env, external=True)
        wheels = glob.glob(os.path.join(tmp, "*.whl"))
        sdists = glob.glob(os.path.join(tmp, "*.tar.gz"))
        if len(wheels) != 1 or len(sdists) != 1:
            session.error(f"{pkg.dist}: expected one sdist and one wheel, got {os.listdir(tmp)}")
        shutil.rmtree(out, ignore_errors=True)
        try:
            os.rename(tmp, out)  # atomic: a half-written build is never reused
        except OSError:  # another nox run finished the same build first: use that one
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Dists(os.path.join(out, os.path.basename(sdists[0])),
                 os.path.join(out, os.path.basename(wheels[0])))


def install_wheels(session: nox.Session, pkgs: list[Package], extras: dict[str, str] | None = None,
                   flags: dict[str, str] | None = None, also: tuple[str, ...] = ()) -> None:
    """Install the wheels of ``pkgs`` (plus the core) in one pip call, non-editable.

    ``extras``: package folder -> extra to install with it (e.g. ``test``). Sibling
    packages named in those extras are built here and installed from their wheels.
    """
    extras = dict(extras or {})
    wanted: dict[str, Package] = {CORE: PACKAGES[CORE]}
    for p in pkgs:
        wanted[p.folder] = p
    for folder, extra in extras.items():
        if extra == "test":
            for sib in sibling_requirements(PACKAGES[folder]):
                wanted.setdefault(sib.folder, sib)
    args = []
    for folder, p in wanted.items():
        wheel = build(session, p, flags).wheel
        extra = extras.get(folder)
        args.append(f"{wheel}[{extra}]" if extra and extra in p.extras else wheel)
    try:
        session.install(*args, *also)
    except nox.command.CommandFailed:
        # pip's own retries cover a dropped connection, not a registry that answers errors
        # for a minute: one more try after a pause, so a network hiccup is not a red run
        session.log("pip install failed; trying once more in 30 s")
        time.sleep(30)
        session.install(*args, *also)


@contextlib.contextmanager
def outside_the_repo(session: nox.Session):
    """Run commands from an empty temporary folder, so nothing imports from the checkout."""
    with tempfile.TemporaryDirectory(prefix="nnplug-") as tmp, session.chdir(tmp):
        yield tmp


def check_imports_installed(session: nox.Session, pkg: Package) -> None:
    """Import the package from the environment (not from src/) and say where it came from."""
    code = (f"import os, sys, {pkg.module} as m; p = os.path.realpath(m.__file__); "
            f"print('{pkg.module} from', p); "
            f"sys.exit(0 if p.startswith(os.path.realpath(sys.prefix)) else "
            f"'{pkg.module} was imported from outside the environment: ' + p)")
    with outside_the_repo(session):
        session.run("python", "-c", code)


TEST_TOOLS = ("pytest", "pytest-timeout")
TEST_TIMEOUT_S = 900
"""Per test: a hung test fails with its stack instead of stalling CI (posargs may override)."""


def run_pytest(session: nox.Session, pkg: Package, *args: str, env: dict | None = None) -> None:
    if not glob.glob(os.path.join(pkg.tests, "**", "test_*.py"), recursive=True):
        session.log(f"{pkg.folder}: no test_*.py under {os.path.relpath(pkg.tests, ROOT)}")
        raise nox.command.CommandFailed(f"{pkg.folder} has no tests")
    os.makedirs(REPORTS, exist_ok=True)
    stem = os.path.join(REPORTS, re.sub(r"[^\w.-]+", "_", f"{session.name}-{pkg.folder}"))
    with session.chdir(ROOT):
        # through run_logged: a pytest that dies before writing its report leaves its output;
        # -X faulthandler: a crash after pytest has turned its own handler off (while the
        # interpreter shuts down) still prints every thread's stack. Not PYTHONFAULTHANDLER:
        # the processes the tests start would inherit it, and under AddressSanitizer a
        # plugin's deliberate crash in one of them then ends in ASan's "nested bug", not in
        # the signal the test expects.
        session.run("python", os.path.join(ROOT, "tools", "run_logged.py"), stem + ".log",
                    "python", "-X", "faulthandler", "-m", "pytest", os.path.relpath(pkg.tests, ROOT),
                    f"--timeout={TEST_TIMEOUT_S}", f"--junitxml={stem}.xml", *args,
                    *session.posargs, env=env)


REPORTS = os.path.join(ROOT, ".nox", "_reports")
"""Each pytest run's JUnit XML and its output (``.log``), read back by the ``failures``
session at the end of ``ci``."""


# -- sessions ----------------------------------------------------------------------------
@disposable_session(python=PYTHONS)
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package on one Python: its wheel installed beside only the core, then its tests.

    The package's ``test`` extra and pytest come along; the import is checked to come from
    the environment, not from src/."""
    pkg = PACKAGES[package]
    install_wheels(session, [pkg], extras={package: "test"}, also=TEST_TOOLS)
    check_imports_installed(session, pkg)
    run_pytest(session, pkg)


# Plugins checked beside the one they are designed to run with: onednn declines what it does
# not run, for the cpu backend to take (tools/isolation_check.py runs its demo that way).
ISOLATION_PARTNERS = {"backend-onednn": ["backend-cpu"]}


@disposable_session(python=CI_PYTHON)
@nox.parametrize("plugin", [*PLUGINS, "all"])
def isolation(session: nox.Session, plugin: str) -> None:
    """The core plus exactly one plugin works; the others are reported absent.

    plugin='all': every plugin installed together, then the core's tests (plugins break
    nothing)."""
    check = os.path.join(ROOT, "tools", "isolation_check.py")
    if plugin == "all":
        install_wheels(session, [PACKAGES[p] for p in PLUGINS], extras={CORE: "test"},
                       also=TEST_TOOLS)
        with outside_the_repo(session):
            session.run("python", check, "--present", *[PACKAGES[p].dist for p in PLUGINS])
        run_pytest(session, PACKAGES[CORE])
        return
    pkg = PACKAGES[plugin]
    partners = [PACKAGES[p] for p in ISOLATION_PARTNERS.get(plugin, [])]
    install_wheels(session, [pkg, *partners])
    absent = [PACKAGES[p] for p in PLUGINS if p != plugin and p not in ISOLATION_PARTNERS.get(plugin, [])]
    args = ["--present", pkg.dist, *[p.dist for p in partners], "--absent", *[p.dist for p in absent]]
    for p in absent:
        for bid in p.backend_ids:
            args += ["--absent-backend", bid]
    with outside_the_repo(session):
        session.run("python", check, *args, *session.posargs)


@disposable_session(python=PYTHONS)
def wheels(session: nox.Session) -> None:
    """sdist and wheel of every package, contents checked, all installed together, demo runs.

    Each wheel is built from its sdist with nothing but the sdist and, for native packages, the
    build hook's wheel (no NNPLUG_INCLUDE); checked:
    manylinux tag confirmed by auditwheel, no C sources, LICENSE in both. The smoke inference (``nnplug demo --backend cpu``) runs from the installed wheels alone."""
    session.install("auditwheel")
    for pkg in PACKAGES.values():
        dists = build(session, pkg)
        _check_dists(session, pkg, dists)
    install_wheels(session, [PACKAGES[p] for p in PLUGINS])
    with outside_the_repo(session):
        session.run("python", os.path.join(ROOT, "tools", "isolation_check.py"),
                    "--present", *[PACKAGES[p].dist for p in PLUGINS])
        session.run("nnplug", "demo", "--backend", "cpu", *session.posargs)


def _check_dists(session: nox.Session, pkg: Package, dists: Dists) -> None:
    """The wheel is tagged honestly and holds the package; the sdist can rebuild it."""
    name = os.path.basename(dists.wheel)
    tag = name[:-4].split("-")[-3:]  # python, abi, platform
    with zipfile.ZipFile(dists.wheel) as z:
        names = z.namelist()
    libs = [n for n in names if n.endswith(".so") or ".so." in n]
    problems = []
    if not any(n.startswith(f"{pkg.module}/__init__.py") for n in names):
        problems.append(f"no {pkg.module}/__init__.py inside")
    if any(n.startswith(("tests/", "src/")) for n in names):
        problems.append("tests/ or src/ copied into the wheel")
    if pkg.uses_build_hook:
        if not libs:
            problems.append("the package has C sources but the wheel has no shared object")
        if tag[2] == "any":
            problems.append("a wheel with a shared object must carry a platform tag, not 'any'")
    if not libs and tag[2] != "any":
        problems.append(f"a pure-Python wheel is tagged for platform {tag[2]}")
    if tag[0] != "py3" or tag[1] != "none":
        problems.append(f"tag {'-'.join(tag)}: expected py3-none-* (ctypes libraries do not "
                        f"link libpython)")
    if libs and not tag[2].startswith("manylinux_"):
        problems.append(f"platform tag {tag[2]}: PyPI takes only manylinux tags for Linux")
    # .cl files are OpenCL programs compiled at run time (backend-opencl ships them); the
    # core's include/ is its public C headers
    sources = [n for n in names if n.endswith((".c", ".h", ".cc", ".cpp")) and "/include/" not in n]
    if sources:
        problems.append(f"C sources inside the wheel: {', '.join(sources[:3])}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("no LICENSE in the wheel's .dist-info")
    with tarfile.open(dists.sdist) as t:
        members = [m.split("/", 1)[-1] for m in t.getnames()]
    for needed in ("pyproject.toml", "README.md", "LICENSE"):
        if needed not in members:
            problems.append(f"sdist lacks {needed}")
    if libs:  # the sdist builds the library with the build hook alone: headers inside
        if "include/nnplug/common.h" not in members:
            problems.append("sdist lacks include/nnplug/common.h")
        problems += _auditwheel_problems(session, dists.wheel, tag[2])
    if problems:
        session.error(f"{pkg.dist}: " + "; ".join(problems))
    session.log(f"{pkg.dist}: {name} ({len(names)} files, {len(libs)} shared object(s)), "
                f"{os.path.basename(dists.sdist)}")


def _auditwheel_problems(session: nox.Session, wheel: str, platform: str) -> list[str]:
    """auditwheel's verdict: the wheel's tag must be one its libraries really meet."""
    out = session.run("auditwheel", "show", wheel, silent=True)
    found = re.search(r'platform tag:\s*"([^"]+)"', out or "")
    if not found:
        return [f"auditwheel could not read {os.path.basename(wheel)}: {out}"]
    if found.group(1) != platform:
        return [f"tagged {platform} but auditwheel says its libraries need {found.group(1)}"]
    return []


@disposable_session(python=CI_PYTHON)
def sanitize(session: nox.Session) -> None:
    """C code under AddressSanitizer and UndefinedBehaviorSanitizer: build, check, test.

    Every package is built with -fsanitize=address,undefined (NNPLUG_CFLAGS/NNPLUG_LDFLAGS),
    its shared objects checked to be instrumented, and the tests of packages with C code run
    with the ASan runtime preloaded (tests marked slow are left out unless posargs are given)."""
    flags = {"NNPLUG_CFLAGS": SANITIZE_CFLAGS, "NNPLUG_LDFLAGS": SANITIZE_LDFLAGS}
    native = [p for p in PACKAGES.values() if p.has_c]
    if not native:
        session.skip("no package has C sources yet")
    install_wheels(session, [p for p in PACKAGES.values() if p.folder != BUILD_HOOK], flags=flags,
                   extras={p.folder: "test" for p in native}, also=TEST_TOOLS)
    site = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                       silent=True).strip()
    for pkg in native:
        libs = glob.glob(os.path.join(site, pkg.module, "**", "*.so*"), recursive=True)
        for lib in libs:
            with open(lib, "rb") as f:
                if b"__asan_" not in f.read():
                    session.error(f"{pkg.dist}: {lib} is not built with AddressSanitizer; the "
                                  f"build hook must append NNPLUG_CFLAGS/NNPLUG_LDFLAGS")
        session.log(f"{pkg.dist}: {len(libs)} instrumented shared object(s)")
    libasan = _compiler_file("libasan.so")
    if not os.path.isabs(libasan):
        session.error("cannot find libasan.so (install gcc's AddressSanitizer runtime)")
    # Python is not instrumented, so the ASan runtime is preloaded. libstdc++ goes with it:
    # ASan's __cxa_throw interceptor binds the real one when it starts, and aborts on the first
    # C++ exception (onnx's checker throws them) if libstdc++ was not loaded by then.
    env = dict(flags)
    env.update({
        "LD_PRELOAD": f"{libasan} {_compiler_file('libstdc++.so.6')}",
        # allocator_may_return_null: a test feeds an input too large for memory and expects
        # nnplug's InputError (numpy's MemoryError), not ASan stopping the process
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:detect_odr_violation=0:"
                        "allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    })
    # --capture=sys: sanitizer reports are written to fd 2 by native code and the process
    # stops right after; with pytest's default fd capture they would be lost with it.
    args = ["--capture=sys", *([] if session.posargs else ["-m", "not slow"])]
    named = [a for a in session.posargs if a.startswith("packages/")]
    if named:  # `nox -s sanitize -- packages/ops-argmax/tests/...`: only the packages named
        native = [p for p in native if any(a.startswith(f"packages/{p.folder}/") for a in named)]
    failed = []
    for pkg in native:  # every package runs even when an earlier one fails
        try:
            run_pytest(session, pkg, *args, env=env)
        except nox.command.CommandFailed:
            failed.append(pkg.folder)
    if failed:
        session.error(f"sanitizer run failed for: {', '.join(failed)}")


def _compiler_file(name: str) -> str:
    """Where the C compiler finds ``name`` (the bare name when it does not know)."""
    return subprocess.run([os.environ.get("CC", "cc"), f"-print-file-name={name}"],
                          capture_output=True, text=True, check=True).stdout.strip()


CLANG_FORMAT = "clang-format==23.1.5"
"""The formatter of the C code, from its PyPI wheel; pinned: another release formats
differently, and the check would fail on code nobody changed."""
_C_SUFFIXES = (".c", ".h", ".c.tmpl")


def c_sources() -> list[str]:
    """The C sources and headers under packages/ (the scaffold's C templates too), build
    outputs left out; paths relative to the root."""
    found = []
    for root, dirs, files in os.walk(os.path.join(ROOT, "packages")):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")
                         and not d.endswith(".egg-info"))
        found += [os.path.relpath(os.path.join(root, f), ROOT) for f in sorted(files)
                  if f.endswith(_C_SUFFIXES)]
    return found


@disposable_session(python=CI_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the whole repository (config in the root pyproject.toml), then clang-format
    over the C code (config in the root .clang-format): a file it would change fails, and
    ``clang-format -i FILE`` fixes it. Arguments go to ruff."""
    session.install("ruff", CLANG_FORMAT)
    session.run("ruff", "check", ".", *session.posargs)
    with session.chdir(ROOT):
        session.run("clang-format", "--dry-run", "--Werror", *c_sources())


DOCS_TOOLS = ("mkdocs>=1.6", "mkdocstrings[python]>=0.26", "pymdown-extensions>=10",
              "onnxruntime-extensions",  # the onnxruntime custom-op library examples run
              "onnxruntime")  # pages check their answers against it (decoding, sessions)


@disposable_session(python=CI_PYTHON)
def docs(session: nox.Session) -> None:
    """Docs and READMEs: relative links resolve, python blocks run (all packages installed);
    then the site (mkdocs.yml, API reference from the docstrings) builds with warnings as
    errors into .nox/site."""
    install_wheels(session, [PACKAGES[p] for p in PLUGINS], also=DOCS_TOOLS)
    session.run("python", os.path.join(ROOT, "tools", "check_docs.py"), *session.posargs)
    with session.chdir(ROOT):
        session.run("mkdocs", "build", "--strict", "--config-file", "mkdocs.yml")


# The conformance suite's arguments per in-tree plugin (entry point names), and the backend an
# op package's CPU kernels run beside.
CONFORMANCE = {
    "backend-cpu": (["--nnplug-backend", "cpu"], []),
    "backend-opencl": (["--nnplug-backend", "opencl"], []),
    "backend-onednn": (["--nnplug-backend", "onednn"], []),
    "ops-softmax": (["--nnplug-op", "softmax"], ["backend-cpu"]),
    "ops-argmax": (["--nnplug-op", "argmax"], ["backend-cpu"]),
}


@disposable_session(python=CI_PYTHON)
@nox.parametrize("plugin", list(CONFORMANCE))
def conformance(session: nox.Session, plugin: str) -> None:
    """The conformance suite (nnplug-conformance) against one in-tree plugin, from its wheel.

    Writes the summary table to .nox/conformance/<plugin>.md (docs/conformance.md shows them)."""
    args, beside = CONFORMANCE[plugin]
    # onnxruntime gives the edge values' expected answers; without it onnx.reference would,
    # and it differs from onnxruntime on non-finite inputs (Clip's omitted max, pools of +-inf)
    install_wheels(session, [PACKAGES[plugin], *(PACKAGES[b] for b in beside), PACKAGES[KIT]],
                   also=(*TEST_TOOLS, "onnxruntime"))
    report = os.path.join(ROOT, ".nox", "conformance", f"{plugin}.md")
    os.makedirs(os.path.dirname(report), exist_ok=True)
    with outside_the_repo(session):
        session.run("pytest", "--pyargs", "nnplug_conformance", *args, f"--nnplug-report={report}",
                    f"--timeout={TEST_TIMEOUT_S}", *session.posargs)


# ONNX's node suite, whole, per backend preference: (packages to install, preference order).
NODESUITE = {
    "cpu": (["backend-cpu"], "cpu"),
    "opencl": (["backend-opencl", "backend-cpu"], "opencl,cpu"),
}


@disposable_session(python=CI_PYTHON)
@nox.parametrize("backend", list(NODESUITE))
def nodesuite(session: nox.Session, backend: str) -> None:
    """Every case of ONNX's node suite on nnplug and on onnxruntime in the same run; fails on
    a wrong answer, an error or a crash (see nnplug_conformance/node_suite.py).

    Writes the table to .nox/nodesuite/<backend>.md (docs/conformance.md shows them)."""
    folders, preference = NODESUITE[backend]
    install_wheels(session, [*(PACKAGES[f] for f in folders), PACKAGES[KIT]], also=("onnxruntime",))
    report = os.path.join(ROOT, ".nox", "nodesuite", f"{backend}.md")
    os.makedirs(os.path.dirname(report), exist_ok=True)
    with outside_the_repo(session):
        session.run("python", "-m", "nnplug_conformance.node_suite", "--backends", preference,
                    f"--markdown={report}", *session.posargs)


def _backend_packages() -> list[Package]:
    """The packages that provide backends (what the proof sessions run models on)."""
    return [PACKAGES[p] for p in PLUGINS if PACKAGES[p].backend_ids]


@disposable_session(python=CI_PYTHON)
def differential(session: nox.Session) -> None:
    """Proof: every zoo model (shipped and random weights), the repository's .onnx files and
    ONNX's node suite against onnxruntime, under OPENBLAS_CORETYPE unset/Haswell/Zen/SkylakeX
    and 1 and 2 backend threads (tools/differential.py; arguments go to it). Not in ``ci``:
    it takes far longer than CI's budget allows."""
    install_wheels(session, _backend_packages(), extras={CORE: "test"})
    with outside_the_repo(session):
        session.run("python", os.path.join(ROOT, "tools", "differential.py"), *session.posargs)


@disposable_session(python=CI_PYTHON)
def fuzz(session: nox.Session) -> None:
    """Proof: a few hundred seeded mutations of zoo models and node cases, each in a child
    process; a signal, a hang or a non-nnplug exception fails it (tools/fuzz.py; arguments
    go to it, e.g. ``-- --seed 7 --count 1000``). Bounded in time (240 s by default), so
    ``ci`` runs it."""
    install_wheels(session, _backend_packages(), extras={CORE: "test"})
    with outside_the_repo(session):
        session.run("python", os.path.join(ROOT, "tools", "fuzz.py"), *session.posargs)


@disposable_session(python=False)
def ci(session: nox.Session) -> None:
    """What CI runs: lint, every package's tests on 3.11, wheels, isolation, conformance,
    the whole node suite per backend, sanitize, fuzz, docs.

    Queues those sessions; the full Python matrix is ``nox`` (or ``nox -s tests wheels``).
    Each queued session deletes its environment when it ends (DISCARD_ENVS), so the run fits
    on a small disk; ``NNPLUG_NOX_DISCARD_ENVS=0 nox -s ci`` keeps them."""
    os.environ.setdefault(DISCARD_ENVS, "1")
    shutil.rmtree(REPORTS, ignore_errors=True)  # reports of this run only
    session.notify("lint")
    for name in PACKAGES:
        session.notify(f"tests-{CI_PYTHON}(package={name!r})")
    session.notify(f"wheels-{CI_PYTHON}")
    for name in [*PLUGINS, "all"]:
        session.notify(f"isolation(plugin={name!r})")
    for name in CONFORMANCE:
        session.notify(f"conformance(plugin={name!r})")
    for name in NODESUITE:
        session.notify(f"nodesuite(backend={name!r})")
    session.notify("sanitize")
    session.notify("fuzz")  # bounded: 300 mutations or 240 s
    session.notify("docs")
    session.notify("failures")  # last, so a failed test's report is what a log's tail shows


@nox.session(python=False)
def failures(session: nox.Session) -> None:
    """Every failed or erroring test of this run's pytest sessions again, with its message:
    ``ci`` queues it last, where a log cut to its tail still shows why a run went red."""
    import xml.etree.ElementTree as ET

    found = died = 0
    logs = sorted(glob.glob(os.path.join(REPORTS, "*.log")))
    for log in logs:
        name, xml = os.path.basename(log)[:-4], log[:-4] + ".xml"
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
        named = 0
        if os.path.exists(xml):
            for case in ET.parse(xml).getroot().iter("testcase"):
                for bad in [*case.iter("failure"), *case.iter("error")]:
                    named += 1
                    text = (bad.text or bad.get("message") or "").strip().splitlines()
                    session.log(f"{name}: {case.get('classname')}::{case.get('name')} "
                                f"{bad.tag}:\n" + "\n".join(text[-40:]))
        found += named
        if not os.path.exists(xml) or (lines and lines[-1] != "[exit status 0]"
                                       and not named):
            # pytest ended without a report, or failed with no failed test in it (a signal,
            # the OOM killer, os._exit, an error at exit): its own last lines say where
            died += 1
            session.log(f"{name}: pytest ended without a report of a failed test; its "
                        f"last lines:\n" + "\n".join(lines[-60:]))
    session.log(f"{found} failed test(s), {died} pytest run(s) that died, "
                f"in {len(logs)} run(s) recorded in {REPORTS}")


if __name__ == "__main__":  # `python noxfile.py` prints the package table
    for p in PACKAGES.values():
        print(f"{p.folder:<16} {p.dist:<24} {p.module:<24} C={p.has_c} "
              f"backends={p.backend_ids} test-extra={p.test_requirements()}")
    sys.exit(0)

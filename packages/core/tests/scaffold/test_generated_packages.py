"""Generate one package of each kind, pip install it into a fresh virtual environment (that
sees the test environment's packages, so the core under test is the one it uses), check
`nnplug info` finds it, and run its own generated tests, which include the conformance suite."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest

from nnplug.scaffold import Spec, generate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory, build_hook_wheelhouse):
    """A venv that sees the packages of the environment running the tests (nnplug under
    test, numpy, onnx, pytest), with hatchling and nnplug's build hook for the builds. ``--system-site-packages`` would not do: it shows the base
    interpreter's packages, not those of a venv (such as nox's) the tests run in."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = str(root / "bin" / "python")
    site_dir = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # addsitedir (not a bare path line) so the parent's own .pth files, such as editable
    # installs, are processed too.
    with open(os.path.join(site_dir, "_nnplug_tests_parent.pth"), "w") as f:
        f.write("".join(f"import site; site.addsitedir({d!r})\n" for d in sorted(here)))
    # --no-build-isolation below builds with this venv's own hatchling and build hook.
    subprocess.run([python, "-m", "pip", "install", "-q", "--find-links", build_hook_wheelhouse,
                    "hatchling", "editables", "nnplug-build-hook"], check=True)
    return python


def _run(cmd, cwd, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NNPLUG_REQUIRE_NATIVE": "1",
                               "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.parametrize("kind, name, listed", [
    ("backend-python", "scaffpy", "scaffpy "),
    pytest.param("backend-native", "scaffc", "scaffc ",
                 marks=pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")),
    ("op", "ScaffOp", "ScaffOp "),
    pytest.param("op-native", "ScaffCOp", "ScaffCOp ",
                 marks=pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")),
])
def test_generated_package_installs_is_found_and_passes_its_tests(tmp_path, venv, kind, name,
                                                                   listed):
    pkg = tmp_path / "pkg"
    generate(Spec(kind, name, str(pkg)))
    # no build isolation: the build (and the native hook) must use the nnplug under test
    _run([venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", str(pkg)], tmp_path)
    info = _run([venv, "-m", "nnplug", "info"], tmp_path)
    assert listed in info, info
    assert "load errors" not in info or name not in info.split("load errors")[1], info
    out = _run([venv, "-m", "pytest", "-q", "-p", "no:cacheprovider"], pkg)
    assert " passed" in out and "failed" not in out, out


def _sdist(python, pkg, out):
    """The package's sdist, built by hatchling (with its hooks) as `python -m build --sdist`."""
    code = ("import os, sys; from hatchling.builders.sdist import SdistBuilder; "
            "print(*SdistBuilder(os.getcwd()).build(directory=sys.argv[1]))")
    return _run([python, "-c", code, str(out)], pkg).strip().splitlines()[-1]


needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@needs_cc
def test_generated_native_op_installs_from_its_sdist_in_an_isolated_build(tmp_path, venv,
                                                                          build_hook_find_links):
    pkg = tmp_path / "pkg"
    generate(Spec("op-native", "SdistOp", str(pkg)))
    sdist = _sdist(venv, pkg, tmp_path / "dist")
    # pip's default: an isolated build environment with hatchling from the index and the build
    # hook from its wheel, no nnplug; the sdist carries nnplug's headers
    env_free = {k: v for k, v in os.environ.items() if k not in ("NNPLUG_INCLUDE",)}
    proc = subprocess.run([venv, "-m", "pip", "install", "--no-deps", "--force-reinstall", sdist],
                          capture_output=True, text=True, timeout=600,
                          env={**env_free, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                               "PIP_FIND_LINKS": build_hook_find_links})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    info = _run([venv, "-m", "nnplug", "info"], tmp_path)
    assert "SdistOp " in info, info
    out = _run([venv, "-m", "pytest", "-q", "-p", "no:cacheprovider"], pkg)
    assert re.search(r"^\d+ passed in ", out, re.M) and not re.search(r"\bfailed in ", out), out
    # the tests ran the installed copy, not ./src, and said so
    assert "WARNING (nnplug-ops-sdistop): these tests run the INSTALLED copy" in out, out


@needs_cc
def test_editable_install_tests_src_and_says_when_the_library_is_stale(tmp_path, venv):
    pkg = tmp_path / "pkg"
    generate(Spec("op-native", "EditOp", str(pkg)))
    _run([venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", str(pkg)],
         tmp_path)
    collect = [venv, "-m", "pytest", "--co", "-p", "no:cacheprovider"]  # not -q: it hides the header
    out = subprocess.run(collect, cwd=pkg, capture_output=True, text=True, timeout=300).stdout
    assert "nnplug-ops-editop: these tests run ./src (editable install)" in out, out
    assert "WARNING" not in out, out
    src = next(pkg.glob("src/*/csrc/op.c"))
    later = os.path.getmtime(next(pkg.glob("src/*/*.so"))) + 1
    os.utime(src, (later, later))  # an edit after the last build
    time.sleep(max(0.0, later + 1 - time.time()))  # so that a rebuild is newer still
    out = subprocess.run(collect, cwd=pkg, capture_output=True, text=True, timeout=300).stdout
    assert ("libnnplug_op_editop.so is older than csrc/op.c: these tests run the old library; "
            "run `pip install -e .` again to recompile") in out, out
    _run([venv, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-e", str(pkg)],
         tmp_path)  # what the warning says to do
    out = subprocess.run(collect, cwd=pkg, capture_output=True, text=True, timeout=300).stdout
    assert "WARNING" not in out, out

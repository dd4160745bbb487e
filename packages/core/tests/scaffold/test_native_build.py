"""nnplug's native build hook (nnplug-build-hook) as a plugin author meets it: a generated
native package builds in pip's isolated build with nothing but hatchling, the hook (its build
requirement) and a compiler (its own copy of the headers), gets a manylinux tag its library
meets and no C sources in the wheel; a library that cannot be built fails the build with the
reason, unless NNPLUG_ALLOW_NO_NATIVE=1 opts out."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from nnplug.scaffold import Spec, generate

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")]


@pytest.fixture(scope="module")
def pip_wheel(build_hook_find_links):
    def build(pkg, out, **env):
        # pip's default: an isolated build environment with hatchling from the index and the
        # hook from its wheel, no nnplug
        full = {k: v for k, v in os.environ.items() if k not in ("NNPLUG_INCLUDE", "PYTHONPATH")}
        full.update(env, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_FIND_LINKS=build_hook_find_links)
        return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out),
                               str(pkg)], capture_output=True, text=True, timeout=600, env=full)
    return build


@pytest.fixture(scope="module")
def native_pkg(tmp_path_factory):
    pkg = tmp_path_factory.mktemp("gen") / "pkg"
    generate(Spec("backend-native", "isobuild", str(pkg)))
    return pkg


def test_generated_native_package_builds_in_an_isolated_build(native_pkg, tmp_path, pip_wheel):
    proc = pip_wheel(native_pkg, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert "-py3-none-manylinux_2_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "nnplug_backend_isobuild/libnnplug_backend_isobuild.so" in names, names
    assert not [n for n in names if n.endswith((".c", ".h"))], names


def test_missing_compiler_fails_the_build_naming_the_reason(native_pkg, tmp_path, pip_wheel):
    proc = pip_wheel(native_pkg, tmp_path, CC="/nonexistent/cc")
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "cannot build libnnplug_backend_isobuild.so" in text and "no C compiler" in text, text[-3000:]
    assert "NNPLUG_ALLOW_NO_NATIVE=1" in text
    assert not list(tmp_path.glob("*.whl"))


def test_opting_out_builds_a_pure_wheel_with_a_warning(native_pkg, tmp_path, pip_wheel):
    proc = pip_wheel(native_pkg, tmp_path, CC="/nonexistent/cc", NNPLUG_ALLOW_NO_NATIVE="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]


def test_a_compile_error_fails_the_build_with_the_compiler_output(native_pkg, tmp_path, pip_wheel):
    broken = tmp_path / "pkg"
    shutil.copytree(native_pkg, broken)
    (src,) = broken.glob("src/*/csrc/backend.c")
    src.write_text(src.read_text() + "\nthis is not C;\n")
    proc = pip_wheel(broken, tmp_path / "out")
    assert proc.returncode != 0
    assert "cannot build libnnplug_backend_isobuild.so" in proc.stdout + proc.stderr

"""A plugin package installed without its native library (built with no C compiler, or with
NNPLUG_ALLOW_NO_NATIVE=1) fails the same way whether it is a backend or an op package, in-tree
or generated: its entry point raises nnplug.NativeLibraryMissingError naming the missing file
and the command that rebuilds it (a Runtime shows that as the plugin's load error). The
package's Python files are copied without the library and its declared entry point is called
in a fresh interpreter. The in-tree cases need the monorepo's packages/ beside the core."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nnplug
from nnplug.scaffold import Spec, generate

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PACKAGES = Path(__file__).resolve().parents[3]
IN_TREE = ["backend-cpu", "backend-onednn", "ops-softmax", "ops-argmax"]
GROUPS = ("nnplug.backends", "nnplug.ops")

# Calls the entry point `module:attr` of a package on sys.path[0]; prints what it raised.
CALL = """
import json, sys
sys.path.insert(0, sys.argv[1])
import importlib, nnplug
module, attr = sys.argv[2].split(":")
entry = getattr(importlib.import_module(module), attr)
try:
    if sys.argv[3] == "nnplug.ops":
        with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
            entry(rt)
    else:
        entry()
except Exception as e:
    print(json.dumps({"type": type(e).__name__, "text": str(e), "path": getattr(e, "path", None),
                      "stage": getattr(e, "stage", None), "fix": getattr(e, "fix", None),
                      "plugin_error": isinstance(e, nnplug.PluginError),
                      "file_not_found": isinstance(e, FileNotFoundError)}))
else:
    print(json.dumps(None))
"""


def _without_library(project: Path, dest: Path) -> tuple[Path, str, str]:
    """(folder to put on sys.path, entry point value, group) for a copy of the project's
    import package with no shared object in it."""
    with open(project / "pyproject.toml", "rb") as f:
        meta = tomllib.load(f)
    (group,) = [g for g in meta["project"]["entry-points"] if g in GROUPS]
    (value,) = meta["project"]["entry-points"][group].values()
    package = value.split(":")[0]
    shutil.copytree(project / "src" / package, dest / package,
                    ignore=shutil.ignore_patterns("*.so", "csrc", "__pycache__"))
    return dest, value, group


def _call(folder: Path, value: str, group: str):
    out = subprocess.run([sys.executable, "-c", CALL, str(folder), value, group],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(raised, folder: Path, value: str):
    package = value.split(":")[0]
    assert raised is not None, f"{value} gave no error for a missing library"
    assert raised["type"] == "NativeLibraryMissingError", raised
    assert raised["plugin_error"] and raised["file_not_found"], raised
    assert raised["stage"] == "not found"
    assert raised["path"].startswith(str(folder / package) + "/"), raised["path"]
    assert raised["path"] in raised["text"], raised["text"]  # names the file
    dist = package.replace("_", "-")
    assert f"pip install --force-reinstall --no-deps --no-binary {dist} {dist}" in raised["fix"]


@pytest.mark.parametrize("name", IN_TREE)
def test_an_in_tree_package_without_its_library_names_it_and_the_rebuild(tmp_path, name):
    if not (PACKAGES / name / "pyproject.toml").is_file():
        pytest.skip(f"needs nnplug's checkout: no {PACKAGES / name}")
    folder, value, group = _without_library(PACKAGES / name, tmp_path)
    _check(_call(folder, value, group), folder, value)


@pytest.mark.parametrize("kind, name", [("backend-native", "nolib"), ("op-native", "NoLibOp")])
def test_a_generated_package_without_its_library_names_it_and_the_rebuild(tmp_path, kind, name):
    spec = Spec(kind, name, str(tmp_path / "generated"))
    generate(spec)
    folder, value, group = _without_library(tmp_path / "generated", tmp_path / "path")
    _check(_call(folder, value, group), folder, value)


def test_a_present_library_is_returned_as_is(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "libnnplug_x.so").write_bytes(b"")
    got = nnplug.packaged_library(str(tmp_path / "__init__.py"), "libnnplug_x.so")
    assert got == str(tmp_path / "libnnplug_x.so")

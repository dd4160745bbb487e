"""The in-tree native packages are built and declared the way `nnplug new ... --native` generates
a package, so the templates and nnplug's own packages cannot drift apart: for each in-tree
package with C sources, the template of its kind is generated under its own name and the two
pyproject.toml files are compared (build system, build hook table, version source, wheel and
sdist targets, entry point, dependencies). Where they may differ, the difference is spelled out
here. Both also take what every plugin would otherwise copy from the core: the host-memory
device API (nnplug/host_device.h), the op library's entry block (nnplug/op_library.h) and
library_path (nnplug.packaged_library). Needs the monorepo's packages/ beside the core (skipped
in an installed copy)."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from nnplug.scaffold import Spec, generate

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PACKAGES = Path(__file__).resolve().parents[3]
if not (PACKAGES / "backend-cpu" / "pyproject.toml").is_file():
    pytest.skip("needs nnplug's checkout: packages/ is not beside the core's tests",
                allow_module_level=True)

HOOK = "nnplug-native"
# Settings an in-tree package may add to the hook table, or set to its own values (its
# sources, link arguments, embedded kernels, extra headers); the rest must be as generated.
OWN_SETTINGS = {"sources", "libs", "cflags", "embed", "include_dirs_from"}
KIND = {"nnplug.backends": "backend-native", "nnplug.ops": "op-native"}


def _native_packages() -> list[Path]:
    """The in-tree packages with C sources of their own (tests' C files do not count)."""
    return sorted(p for p in PACKAGES.iterdir()
                  if (p / "pyproject.toml").is_file() and list(p.glob("src/*/csrc/*.c")))


def _load(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def test_the_in_tree_native_packages_are_found():
    names = {p.name for p in _native_packages()}
    assert {"backend-cpu", "backend-onednn", "ops-softmax", "ops-argmax"} <= names, names


@pytest.fixture(params=[p.name for p in _native_packages()])
def pair(request, tmp_path):
    """(in-tree pyproject, the generated one for the same kind and name)."""
    ours = _load(PACKAGES / request.param / "pyproject.toml")
    groups = [g for g in ours["project"].get("entry-points", {}) if g in KIND]
    assert len(groups) == 1, f"{request.param}: one of {sorted(KIND)} entry points, got {groups}"
    (name,) = ours["project"]["entry-points"][groups[0]]
    spec = Spec(KIND[groups[0]], name, str(tmp_path / "generated"))
    assert spec.dist == ours["project"]["name"], (
        f"{request.param}: `nnplug new` names the {name!r} package {spec.dist}")
    generate(spec)
    return request.param, ours, _load(tmp_path / "generated" / "pyproject.toml")


def test_build_system_is_the_generated_one_plus_the_hooks_header_packages(pair):
    folder, ours, generated = pair
    assert ours["build-system"]["build-backend"] == generated["build-system"]["build-backend"]
    extra = [r for r in ours["build-system"]["requires"]
             if r not in generated["build-system"]["requires"]]
    missing = [r for r in generated["build-system"]["requires"]
               if r not in ours["build-system"]["requires"]]
    assert not missing, f"{folder}: [build-system] requires lacks {missing} (as generated)"
    # only distributions whose headers the hook puts on the include path may be added
    headers_from = ours["tool"]["hatch"]["build"]["hooks"][HOOK].get("include_dirs_from", [])
    assert sorted(Requirement(r).name for r in extra) == sorted(headers_from), (
        f"{folder}: build requirements beyond the generated ones must be the hook's "
        f"include_dirs_from, got {extra}")


def test_build_hook_table_is_the_generated_one(pair):
    folder, ours, generated = pair
    our_hooks = ours["tool"]["hatch"]["build"]["hooks"]
    their_hooks = generated["tool"]["hatch"]["build"]["hooks"]
    assert list(our_hooks) == list(their_hooks) == [HOOK], (folder, list(our_hooks))
    mine, theirs = our_hooks[HOOK], their_hooks[HOOK]
    assert set(theirs) <= set(mine), f"{folder}: the hook table lacks {set(theirs) - set(mine)}"
    assert set(mine) - set(theirs) <= OWN_SETTINGS, folder
    same = {k: v for k, v in theirs.items() if k not in OWN_SETTINGS}  # package, library
    assert {k: mine[k] for k in same} == same, folder


def test_version_and_targets_are_the_generated_ones(pair):
    folder, ours, generated = pair
    mine, theirs = ours["tool"]["hatch"], generated["tool"]["hatch"]
    assert mine["version"] == theirs["version"], folder
    assert mine["build"]["targets"]["wheel"] == theirs["build"]["targets"]["wheel"], folder
    our_sdist = dict(mine["build"]["targets"]["sdist"])
    their_sdist = dict(theirs["build"]["targets"]["sdist"])
    # a generated package carries nnplug's headers in include/ (in-tree ones take the core's,
    # which the hook puts into the sdist) and has no LICENSE until its author adds one
    their_sdist["include"] = [i for i in their_sdist["include"] if i != "include"] + ["LICENSE"]
    assert our_sdist == their_sdist, folder


def test_entry_point_and_dependencies_are_the_generated_ones(pair):
    folder, ours, generated = pair
    group = next(g for g in ours["project"]["entry-points"] if g in KIND)
    assert ours["project"]["entry-points"][group] == generated["project"]["entry-points"][group]
    missing = set(generated["project"]["dependencies"]) - set(ours["project"]["dependencies"])
    assert not missing, f"{folder}: dependencies lack {missing} (as generated)"


def test_no_package_loads_a_build_hook_from_a_file():
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        hooks = _load(pyproject).get("tool", {}).get("hatch", {}).get("build", {}).get("hooks", {})
        assert "custom" not in hooks, f"{pyproject}: a file-loaded hook; use {HOOK}"
        assert not (pyproject.parent / "hatch_build.py").exists(), pyproject.parent


# -- what the C and the Python take from the core's public API instead of copying -------------
# The generated package of the same kind must take it the same way, so each check runs over the
# in-tree package and its generated twin.
SHARED = {
    "backend-native": {  # nnplug/host_device.h: the host-memory device API and last_error
        "c_includes": "nnplug/host_device.h", "c_uses": "NNP_HOST_DEVICE_MEMORY",
        "c_defines_not": (".alloc_data_space =", ".free_data_space =", ".copy_data_from_to =",
                          ".last_error = last_error"),
    },
    "op-native": {  # nnplug/op_library.h: the library table and the entry symbol
        "c_includes": "nnplug/op_library.h", "c_uses": "NNP_OP_LIBRARY_ENTRY(",
        "c_defines_not": ("nnp_custom_op_entry(", "free(ctx->priv_data)"),
    },
}


@pytest.fixture(params=[p.name for p in _native_packages()])
def sources(request, tmp_path):
    """(kind, {in-tree: its C text, generated: the template's C text}, {…: __init__.py text})."""
    ours = _load(PACKAGES / request.param / "pyproject.toml")
    (group,) = [g for g in ours["project"]["entry-points"] if g in KIND]
    (name,) = ours["project"]["entry-points"][group]
    spec = Spec(KIND[group], name, str(tmp_path / "generated"))
    generate(spec)
    c, py = {}, {}
    for label, root in (("in-tree", PACKAGES / request.param), ("generated", tmp_path / "generated")):
        (package,) = [p for p in (root / "src").iterdir() if (p / "__init__.py").is_file()]
        c[label] = "\n".join(f.read_text() for f in sorted((package / "csrc").glob("*.c")))
        py[label] = (package / "__init__.py").read_text()
    return KIND[group], c, py


def test_the_c_takes_the_shared_api_from_the_core_headers(sources):
    kind, c, _ = sources
    want = SHARED[kind]
    for label, text in c.items():
        assert f"#include <{want['c_includes']}>" in text or \
            f'#include "{want["c_includes"]}"' in text, f"{label}: no {want['c_includes']}"
        assert want["c_uses"] in text, f"{label}: the table does not use {want['c_uses']}"
        for copied in want["c_defines_not"]:
            assert copied not in text, (
                f"{label}: writes {copied!r} itself; {want['c_includes']} has it")


def test_the_library_is_found_through_the_core(sources):
    _, _, py = sources
    for label, text in py.items():
        assert "packaged_library(__file__, LIBRARY)" in text, (
            f"{label}: library_path() does not use nnplug.packaged_library")
        assert "(__file__)), LIBRARY)" not in text, f"{label}: looks for its library itself"

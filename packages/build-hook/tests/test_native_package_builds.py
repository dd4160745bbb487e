"""The nnplug-native hook as hatchling runs it for a package that configures it: found by its
name through the ``hatch`` entry point, it compiles the library into the wheel (tagged for the
platform, no sources inside) with nnplug's headers from the installed nnplug, ships those
headers in the sdist, and rejects a table it cannot use, naming what is wrong."""

import shutil
import tarfile
import textwrap
import zipfile

import pytest
from hatchling.builders.sdist import SdistBuilder
from hatchling.builders.wheel import WheelBuilder
from hatchling.plugin.manager import PluginManager

from nnplug_build_hook import PLUGIN_NAME, NativeBuildError, NativeBuildHook

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

SOURCE = """\
#include <nnplug/common.h>

NNP_EXPORT int tiny_answer(void) { return 42; }
"""


def _project(root, hook_table):
    """A minimal native package under ``root`` whose hook table is ``hook_table`` (TOML)."""
    (root / "src" / "tinypkg" / "csrc").mkdir(parents=True)
    (root / "src" / "tinypkg" / "__init__.py").write_text("")
    (root / "src" / "tinypkg" / "_version.py").write_text('__version__ = "1.2.3"\n')
    (root / "src" / "tinypkg" / "csrc" / "tiny.c").write_text(SOURCE)
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["hatchling>=1.27", "nnplug-build-hook"]
        build-backend = "hatchling.build"

        [project]
        name = "tinypkg"
        version = "1.2.3"

        [tool.hatch.build.hooks.nnplug-native]
        """) + textwrap.dedent(hook_table) + textwrap.dedent("""
        [tool.hatch.build.targets.wheel]
        packages = ["src/tinypkg"]
        exclude = ["src/tinypkg/*.so", "src/tinypkg/csrc"]
        """))
    return root


GOOD = """\
package = "tinypkg"
library = "libtiny.so"
sources = ["csrc/*.c"]
"""


def test_hatchling_finds_the_hook_by_its_name():
    hooks = PluginManager().build_hook.collect()
    assert hooks.get(PLUGIN_NAME) is NativeBuildHook, sorted(hooks)


@needs_cc
def test_the_wheel_holds_the_compiled_library_and_no_sources(tmp_path):
    root = _project(tmp_path / "tiny", GOOD)
    wheel = next(WheelBuilder(str(root)).build(directory=str(tmp_path / "out"),
                                               versions=["standard"]))
    assert "-py3-none-manylinux_2_" in wheel, wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert "tinypkg/libtiny.so" in names, names
    assert not [n for n in names if n.endswith((".c", ".h"))], names


def test_the_sdist_ships_nnplugs_headers(tmp_path):
    root = _project(tmp_path / "tiny", GOOD)
    sdist = next(SdistBuilder(str(root)).build(directory=str(tmp_path / "out"),
                                               versions=["standard"]))
    members = [m.split("/", 1)[-1] for m in tarfile.open(sdist).getnames()]
    assert "include/nnplug/common.h" in members, members
    assert "src/tinypkg/csrc/tiny.c" in members, members


@pytest.mark.parametrize("table, message", [
    ('package = "tinypkg"\n', r"lacks 'library'"),
    (GOOD + 'source = ["csrc/tiny.c"]\n', r"unknown setting\(s\) 'source'"),
])
def test_a_table_it_cannot_use_fails_naming_the_problem(tmp_path, table, message):
    root = _project(tmp_path / "tiny", table)
    with pytest.raises(NativeBuildError, match=message) as e:
        next(WheelBuilder(str(root)).build(directory=str(tmp_path / "out"), versions=["standard"]))
    assert "[tool.hatch.build.hooks.nnplug-native]" in str(e.value)

"""The same shared object copied into a dynamic-backends folder loads on its own (it needs no
other library) and gives identical results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import isolated_runtime, zoo_input, zoo_model

import nnplug
import nnplug_backend_cpu


@pytest.fixture
def backend_folder(tmp_path):
    folder = tmp_path / "backends"
    folder.mkdir()
    shutil.copy2(nnplug_backend_cpu.library_path(), folder / nnplug_backend_cpu.LIBRARY)
    return folder


def test_copied_library_loads_as_dynamic_backend_with_identical_results(rt, backend_folder):
    model = zoo_model("squeezenet")
    inp, x = zoo_input(model, seed=5)
    with rt.load(model, backends=["cpu"]) as net:
        want = net.run({inp: x})
    with nnplug.Runtime(nnplug.CreationOptions(entry_points=False, custom_op_paths="",
                                               dynamic_backends_path=str(backend_folder))) as rt2:
        assert not rt2.load_errors, rt2.load_errors
        info = rt2.backends["cpu"]
        assert info.origin == "dynamic"
        assert str(backend_folder) in info.source
        with rt2.load(model, backends=["cpu"]) as net:
            got = net.run({inp: x})
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


CHILD = textwrap.dedent("""
    import json, sys
    import nnplug
    rt = nnplug.Runtime(nnplug.CreationOptions(entry_points=False, custom_op_paths="",
                                               dynamic_backends_path=sys.argv[1]))
    print(json.dumps({"backends": sorted(rt.backends),
                      "errors": [[e.stage, e.reason, e.fix or ""] for e in rt.load_errors]}))
""")


def run_child(folder):
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_copied_library_loads_in_a_fresh_process_with_nothing_else(backend_folder):
    # a fresh process that imported no backend package: the .so alone is enough
    result = run_child(backend_folder)
    assert result == {"backends": ["cpu"], "errors": []}


def test_library_links_nothing_beyond_the_c_runtime():
    needed = subprocess.run(["readelf", "-d", nnplug_backend_cpu.library_path()],
                            capture_output=True, text=True, check=True).stdout
    libs = sorted(line.split("[")[1].split("]")[0] for line in needed.splitlines()
                  if "(NEEDED)" in line)
    c_runtime = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "ld-linux",
                 "libasan.so", "libubsan.so")  # the sanitizer build adds its runtimes
    assert all(lib.startswith(c_runtime) for lib in libs), libs


def test_entry_point_gives_the_packaged_library():
    path = nnplug_backend_cpu.library_path()
    assert os.path.isfile(path) and path.endswith(nnplug_backend_cpu.LIBRARY)


def test_runtime_isolated_from_installed_plugins_has_no_cpu_backend():
    with isolated_runtime() as r:
        assert "cpu" not in r.backends

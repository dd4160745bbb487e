"""The same shared object copied into a dynamic-backends folder loads and gives identical
results; a missing OpenBLAS is a load error naming the library and the fix."""

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


def run_child(folder, env_updates):
    env = {k: v for k, v in os.environ.items() if k != nnplug_backend_cpu.OPENBLAS_ENV}
    env.update(env_updates)
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_copied_library_finds_openblas_on_its_own(backend_folder):
    # a fresh process: nothing set NNPLUG_CPU_OPENBLAS or loaded OpenBLAS beforehand
    result = run_child(backend_folder, {})
    assert result == {"backends": ["cpu"], "errors": []}


def test_unloadable_openblas_is_a_load_error_naming_it_and_the_fix(backend_folder, tmp_path):
    bogus = tmp_path / "libscipy_openblas.so"
    bogus.write_text("not a library")
    result = run_child(backend_folder, {nnplug_backend_cpu.OPENBLAS_ENV: str(bogus)})
    assert result["backends"] == []
    (stage, reason, _fix), = result["errors"]
    assert stage == "init"
    assert "libscipy_openblas.so" in reason and "NNPLUG_CPU_OPENBLAS" in reason
    assert "scipy-openblas32" in reason or "scipy_openblas32" in reason


def test_entry_point_gives_the_packaged_library():
    path = nnplug_backend_cpu.library_path()
    assert os.path.isfile(path) and path.endswith(nnplug_backend_cpu.LIBRARY)
    assert nnplug_backend_cpu.openblas_path() is not None


def test_runtime_isolated_from_installed_plugins_has_no_cpu_backend():
    with isolated_runtime() as r:
        assert "cpu" not in r.backends

"""A plugin module that calls sys.exit() (or raises another BaseException) at import is a load
error naming the plugin, for Runtime(), `nnplug info` and `nnplug doctor`; Ctrl-C
(KeyboardInterrupt) still stops the program. A typo in an entry point's module is said to be
one, and a backend that is not registered raises BackendNotAvailableError."""

import os
import subprocess
import sys

import pytest
from models import mlp
from test_discovery import install_dist

import nnplug

MODULES = {
    "plug_exits": "import sys\nsys.exit(3)\n",
    "plug_base": "class Stop(BaseException):\n    pass\nraise Stop('going away')\n",
    "plug_needs_dep": "import nnplug_no_such_dependency\n",
    "plug_ctrl_c": "raise KeyboardInterrupt\n",
    "plug_fine": "import numpy_backend\nclass Fine(numpy_backend.NumpyBackend):\n    id = 'fineplug'\n",
}
ENTRY_POINTS = ["exitplug = plug_exits:Backend", "baseplug = plug_base:Backend",
                "depplug = plug_needs_dep:Backend", "typoplug = plug_fien:Fine",
                "fineplug = plug_fine:Fine"]


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NNPLUG_DISABLE_PLUGINS", raising=False)
    install_dist(tmp_path, "nnplug-test-exits", {"nnplug.backends": ENTRY_POINTS}, MODULES)
    return tmp_path


def _runtime():
    return nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path="", custom_op_paths=""))


def _errors(rt):
    return {e.source.split(" = ")[0].split(":")[1]: e for e in rt.load_errors}


def test_sys_exit_and_other_base_exceptions_at_import_are_load_errors(site):
    with _runtime() as rt:
        errors = _errors(rt)
        assert "fineplug" in rt.backends
        assert errors["exitplug"].stage == "import"
        assert "sys.exit(3)" in errors["exitplug"].reason and "plug_exits" in errors["exitplug"].reason
        assert "Stop" in errors["baseplug"].reason and "going away" in errors["baseplug"].reason
        assert "NNPLUG_DISABLE_PLUGINS=exitplug" in errors["exitplug"].fix


def test_a_typo_in_the_entry_points_module_is_named_as_such(site):
    with _runtime() as rt:
        typo, dep = _errors(rt)["typoplug"], _errors(rt)["depplug"]
    assert "names module 'plug_fien', which does not exist" in typo.reason, typo
    assert "reinstall the distribution" not in typo.fix and "correct the module" in typo.fix
    assert "imports 'nnplug_no_such_dependency', which is not installed" in dep.reason, dep


def test_ctrl_c_during_a_plugin_import_still_stops_the_program(site, monkeypatch):
    install_dist(site, "nnplug-test-ctrl-c", {"nnplug.backends": ["ctrlcplug = plug_ctrl_c:B"]}, {})
    monkeypatch.setenv("NNPLUG_DISABLE_PLUGINS", "exitplug,baseplug")
    with pytest.raises(KeyboardInterrupt):
        _runtime()


@pytest.mark.parametrize("command, status", [(["info"], 0), (["doctor", "--path", ""], 1)])
def test_info_and_doctor_name_the_plugin_instead_of_exiting(site, command, status):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path]),
           "NNPLUG_BACKEND_PATH": "", "NNPLUG_CUSTOM_OP_PATH": ""}
    proc = subprocess.run([sys.executable, "-m", "nnplug", *command], capture_output=True,
                          text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out
    assert "exitplug" in out and "sys.exit(3)" in out, out
    assert "fineplug" in out, out


def test_a_backend_that_is_not_registered_has_its_own_error_class(site):
    with _runtime() as rt:
        with pytest.raises(nnplug.BackendNotAvailableError, match="'nosuch' is not available"):
            rt.load(mlp(), backends=["nosuch"])
    assert issubclass(nnplug.BackendNotAvailableError, nnplug.UnsupportedNodeError)

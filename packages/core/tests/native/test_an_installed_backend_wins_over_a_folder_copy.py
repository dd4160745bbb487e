"""The same backend id installed (entry point) and in a backends folder: the installed one is
registered and the folder file refused ("duplicate id"), as the docs say; `nnplug doctor --path`
reports the folder file as a problem instead of listing both as registered."""

import io
import os
import shutil
import sys

from nativelib import bare_runtime

import nnplug
from nnplug.doctor import doctor_main

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from test_discovery import install_dist  # noqa: E402


def _setup(tmp_path, monkeypatch, lib):
    site, folder = tmp_path / "site", tmp_path / "backends"
    site.mkdir()
    folder.mkdir()
    shutil.copy(lib, folder / "libnnplug_copy.so")
    installed = shutil.copy(lib, site / "libnnplug_installed.so")
    install_dist(site, "nnplug-test-dup", {"nnplug.backends": ["testcpu = plug_dup:path"]},
                 {"plug_dup": f"def path():\n    return {str(installed)!r}\n"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("NNPLUG_DISABLE_PLUGINS", raising=False)
    return folder, installed


def test_the_entry_point_wins_and_the_folder_copy_is_a_duplicate(tmp_path, monkeypatch, libs):
    folder, installed = _setup(tmp_path, monkeypatch, libs["testcpu"])
    with nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path=str(folder),
                                               custom_op_paths="")) as rt:
        assert rt.backends["testcpu"].origin == "entry_point"
        dup = [e for e in rt.load_errors if e.source.endswith("libnnplug_copy.so")]
        assert dup and dup[0].stage == "duplicate id", rt.load_errors
    monkeypatch.setenv("NNPLUG_DISABLE_PLUGINS", "testcpu")  # the documented way to the copy
    with bare_runtime(dynamic_backends_path=str(folder)) as rt:
        assert rt.backends["testcpu"].origin == "dynamic"


def test_doctor_reports_the_folder_copy_as_a_problem(tmp_path, monkeypatch, libs):
    folder, _ = _setup(tmp_path, monkeypatch, libs["testcpu"])
    out = io.StringIO()
    assert doctor_main(["--path", str(folder), "--op-path", str(tmp_path)], out=out) == 1
    text = out.getvalue()
    assert "libnnplug_copy.so: backend 'testcpu' is also installed" in text, text
    assert "NNPLUG_DISABLE_PLUGINS=testcpu" in text and "OK: no problems" not in text, text

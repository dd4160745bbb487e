"""`nnplug doctor`: each folder and file with its category and fix, node placement for a
model, and the exit status."""

import io
import os
import shutil
import subprocess
import sys

import onnx
from test_end_to_end import mlp

from nnplug import plugins
from nnplug.doctor import doctor_main
from nnplug.native.loader import lease_key


def run_doctor(*argv):
    out = io.StringIO()
    rc = doctor_main(["--no-entry-points", *map(str, argv)], out=out)
    return rc, out.getvalue()


def test_a_clean_folder_passes(tmp_path, libs):
    d = tmp_path / "ok"
    d.mkdir()
    shutil.copy(libs["testcpu"], d / "libnnplug_testcpu.so")
    rc, text = run_doctor("--path", d)
    assert rc == 0, text
    assert "libnnplug_testcpu.so: registered: backend 'testcpu' (device cpu" in text
    assert "OK: no problems found" in text
    assert plugins.BACKENDS.count(lease_key(str(d / "libnnplug_testcpu.so"))) == 0  # released


def test_every_failure_is_categorised_with_its_fix(tmp_path, libs):
    d = tmp_path / "mixed"
    d.mkdir()
    for name in ("testdev", "init_fail", "missing_dep", "newer_minor", "mangled"):
        shutil.copy(libs[name], d / f"lib_{name}.so")
    shutil.copy(libs["testdev"], d / "lib_zdup.so")
    (d / "x.so").write_text("not a library at all, just some text in a file\n" * 4)
    os.symlink(d / "gone.so", d / "dangling.so")
    rc, text = run_doctor("--path", f"{d}:{tmp_path}/missing")
    assert rc == 1
    lines = text.splitlines()

    def line_of(name):
        return next(i for i, t in enumerate(lines) if t.strip().startswith(name))

    assert "registered: backend 'testdev'" in lines[line_of("lib_testdev.so")]
    expect = {
        "lib_init_fail.so": ("loaded but not registered: init: testdev device /dev/nnptest0",
                             "backend's message"),
        "lib_zdup.so": ("loaded but not registered: duplicate id", "remove one"),
        "lib_missing_dep.so": ("found but not loadable", "LD_LIBRARY_PATH"),
        "lib_newer_minor.so": ("found but not loadable: abi version", "upgrade nnplug"),
        "lib_mangled.so": ("found but not loadable: no entry symbol", 'extern "C"'),
        "x.so": ("found but not loadable", "not a shared library"),
        "dangling.so": ("found but not loadable", "fix or remove the link"),
    }
    for name, (category, fix) in expect.items():
        i = line_of(name)
        assert category in lines[i], lines[i]
        assert lines[i + 1].strip().startswith("fix:") and fix in lines[i + 1], lines[i + 1]
    assert "missing': skipped: no such folder" in text
    assert f"{len(expect) + 1} problem(s) found" in text


def test_model_placement_lists_nodes_per_backend_and_the_unplaceable(tmp_path, libs):
    d = tmp_path / "b"
    d.mkdir()
    shutil.copy(libs["testdev"], d / "libnnplug_testdev.so")
    model = tmp_path / "m.onnx"
    onnx.save(mlp(sigmoid=True), model)
    rc, text = run_doctor("--path", d, model)
    assert rc == 1
    assert ("backend 'testdev' runs 6 node(s): mm1 (MatMul), add1 (Add), relu1 (Relu), "
            "mm2 (MatMul), add2 (Add), reshape (Reshape)") in text
    assert "no backend can run 1 node(s): sigmoid (Sigmoid)" in text
    assert "implements ai.onnx::Sigmoid" in text
    onnx.save(mlp(), model)
    rc, text = run_doctor("--path", d, model)
    assert rc == 0, text


def test_unreadable_model_is_a_problem(tmp_path):
    rc, text = run_doctor("--path", tmp_path, tmp_path / "nope.onnx")
    assert rc == 1 and "cannot load the model" in text


def test_the_command_line_entry(tmp_path, libs):
    d = tmp_path / "b"
    d.mkdir()
    shutil.copy(libs["no_entry"], d / "libplain.so")
    r = subprocess.run([sys.executable, "-m", "nnplug", "doctor", "--no-entry-points",
                        "--path", str(d)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "libplain.so: found but not loadable: no entry symbol" in r.stdout


def test_the_default_folders_are_listed_and_missing_ones_are_fine(monkeypatch):
    from nnplug.native import default_backend_dir, default_op_dir

    monkeypatch.delenv("NNPLUG_BACKEND_PATH", raising=False)
    monkeypatch.delenv("NNPLUG_CUSTOM_OP_PATH", raising=False)
    rc, text = run_doctor()
    assert "Native backend folders (the default folder):" in text
    assert "Custom-op folders (the default folder):" in text
    for d in (default_backend_dir(), default_op_dir()):
        if os.path.isdir(d):
            assert f"{d}: " in text, text
        else:
            assert f"{d}: does not exist (that is fine: nothing is loaded from it" in text, text
    if not os.path.isdir(default_backend_dir()) and not os.path.isdir(default_op_dir()):
        assert rc == 0 and "OK: no problems found" in text, text

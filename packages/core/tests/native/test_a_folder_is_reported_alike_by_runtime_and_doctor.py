"""One folder holding a backend, a custom-op library, a broken file and a dangling link, given
both as the backends' and the custom ops' folder: a Runtime and `nnplug doctor --path
--op-path` find the same files in the same order, register the same plugins, and report each
file that fails the same way (its stage), every failure skipped and never fatal."""

import io
import os
import re
import shutil
import subprocess

import pytest
from nativelib import compiler

import nnplug
from nnplug.doctor import doctor_main

OPS_C = os.path.join(os.path.dirname(os.path.dirname(__file__)), "custom_ops", "testops.c")
PROBLEM = re.compile(r"^ {4}(\S+): (?:found but not loadable|loaded but not registered): "
                     r"([^:]+): ")


@pytest.fixture
def mixed_folder(tmp_path, libs):
    d = tmp_path / "plugins"
    d.mkdir()
    shutil.copy(libs["testcpu"], d / "libnnplug_testcpu.so")
    subprocess.run([compiler(), "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
                    f"-I{nnplug.get_include()}", OPS_C, "-o", str(d / "libnnplug_op_good.so")],
                   check=True)
    (d / "libnnplug_op_broken.so").write_text("not a library, just text\n" * 4)
    os.symlink(d / "gone.so", d / "libnnplug_op_gone.so")
    (d / "notes.txt").write_text("neither kind of library: not a candidate\n")
    return d


def test_runtime_and_doctor_scan_and_report_a_folder_alike(mixed_folder):
    d = str(mixed_folder)
    rt = nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path=d, custom_op_paths=d,
                                               entry_points=False))
    try:
        runtime_found = [(os.path.basename(e.source), e.stage) for e in rt.load_errors]
        backends, ops = set(rt.backends), set(rt.ops)
    finally:
        rt.close()

    out = io.StringIO()
    rc = doctor_main(["--no-entry-points", "--path", d, "--op-path", d], out=out)
    text = out.getvalue()
    doctor_found = [m.groups() for m in map(PROBLEM.match, text.splitlines()) if m]

    # backends first (every *.so is tried as one), then the op libraries, each folder in
    # sorted name order
    assert runtime_found == [
        ("libnnplug_op_broken.so", "not loadable"),
        ("libnnplug_op_gone.so", "file"),
        ("libnnplug_op_good.so", "no entry symbol"),
        ("libnnplug_op_broken.so", "not loadable"),
        ("libnnplug_op_gone.so", "file"),
    ]
    assert doctor_found == runtime_found, text
    assert backends == {"testcpu"} and ops, (backends, ops)
    assert "libnnplug_testcpu.so: registered: backend 'testcpu'" in text
    assert all(f"op {op!r}" in text for op in ops), text
    assert rc == 1 and f"{len(runtime_found)} problem(s) found" in text

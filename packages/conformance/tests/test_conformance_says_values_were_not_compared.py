"""An op library tested by path (--nnplug-op-library) has no Python reference beside it: the
suite cannot check its values and must say so loudly (the check is skipped with the reason and
the summary ends with a warning), not report a wrong op as passing every check."""

import shutil
import subprocess

import pytest

import nnplug
from nnplug.scaffold import Spec, generate
from nnplug_conformance import run_conformance

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")]


def _library(tmp_path, formula=None):
    """The op of `nnplug new op WrongGelu --native`, compiled, with ``formula`` for y[i]."""
    pkg = tmp_path / "pkg"
    generate(Spec("op-native", "WrongGelu", str(pkg)))
    src = next(pkg.glob("src/*/csrc/op.c"))
    if formula:
        text = src.read_text()
        line = "y[i] = x[i] / (1.0f + expf(-beta * x[i]));"
        assert line in text
        src.write_text(text.replace(line, f"{{ y[i] = {formula}; (void)beta; }}"))
    lib = tmp_path / "libnnplug_op_wronggelu.so"
    subprocess.run([shutil.which("cc"), "-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Wextra",
                    "-Werror", "-fvisibility=hidden", f"-I{nnplug.get_include()}", str(src),
                    "-o", str(lib), "-lm"], check=True, capture_output=True, text=True)
    return lib


def test_a_wrong_op_by_path_is_not_reported_as_passing_silently(tmp_path):
    lib = _library(tmp_path, formula="3.0f * x[i]")  # y = 3x: not the op it claims to be
    report = tmp_path / "report.md"
    result = run_conformance(op_library=str(lib), cwd=str(tmp_path), timeout=600,
                             args=["-rs", f"--nnplug-report={report}"])
    out = result.stdout
    assert result.returncode == 0, out[-4000:]  # nothing it could check is wrong ...
    # ... but the value check is a skip naming why, and the summary says it loudly
    assert "SKIPPED" in out and "VALUES NOT COMPARED for WrongGelu: an op library given by path" in out, out[-4000:]
    assert "WARNING: the results of these ops were NOT compared with any reference" in out, out[-4000:]
    md = report.read_text()
    assert "NOT compared" in md and "VALUES NOT COMPARED for WrongGelu" in md, md

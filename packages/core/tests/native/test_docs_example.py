"""The backend written in docs/dynamic-backends.md compiles as shown, is found through
NNPLUG_BACKEND_PATH, passes `nnplug doctor`, runs a model and passes the conformance suite
(the page calls it complete: it must keep every rule the header sets, NULL checks included)."""

import io
import os
import re
import subprocess

import numpy as np
import pytest
from nativelib import bare_runtime, compiler
from onnx import TensorProto, helper

import nnplug
from nnplug.doctor import doctor_main

DOC = os.path.join(os.path.dirname(__file__), *[".."] * 4, "docs", "dynamic-backends.md")


def _example_source() -> str:
    if not os.path.isfile(DOC):
        pytest.skip("docs/ is not next to the tests (installed copy)")
    text = open(DOC).read()
    blocks = re.findall(r"```c\n(.*?)```", text, re.S)
    return next(b for b in blocks if "nnp_backend_entry" in b)


def _build(tmp_path):
    src = tmp_path / "relu_backend.c"
    src.write_text(_example_source())
    folder = tmp_path / "backends"
    folder.mkdir()
    lib = folder / "libnnplug_relu_demo.so"
    subprocess.run([compiler(), "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
                    "-Wextra", "-Werror", f"-I{nnplug.get_include()}", str(src), "-o", str(lib)],
                   check=True, capture_output=True, text=True)
    return folder, lib


@pytest.mark.slow
def test_the_documented_backend_passes_the_conformance_suite(tmp_path):
    from nnplug_conformance import run_conformance

    _, lib = _build(tmp_path)
    result = run_conformance(backend_path=str(lib), cwd=str(tmp_path), timeout=900)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert "nnplug conformance summary" in result.stdout
    assert re.search(r"^total\s+\d+\s+0\s", result.stdout, re.M), result.stdout[-3000:]


def test_the_documented_backend_builds_loads_and_runs(tmp_path, monkeypatch):
    folder, lib = _build(tmp_path)
    out = io.StringIO()
    assert doctor_main(["--no-entry-points", "--path", str(folder)], out=out) == 0, out.getvalue()
    assert "registered: backend 'relu_demo'" in out.getvalue()

    monkeypatch.setenv("NNPLUG_BACKEND_PATH", str(folder))
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    g = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with bare_runtime(dynamic_backends_path=None) as rt:
        assert rt.backends["relu_demo"].origin == "dynamic"
        with rt.load(model) as net:
            x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
            np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))


def test_the_documented_backend_runs_a_symbolic_batch(tmp_path):
    folder, _ = _build(tmp_path)
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    g = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with bare_runtime(dynamic_backends_path=str(folder)) as rt, rt.load(model) as net:
        assert net.assignment == {"relu": "relu_demo"}
        x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
        np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))

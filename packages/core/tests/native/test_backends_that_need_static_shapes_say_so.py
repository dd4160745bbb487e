"""The backend `nnplug new backend --native` generates runs a model with a symbolic batch as
it is (it has kernel_output_shapes), compiles under the build's -std=c11 without implicit
declarations; and the same backend without kernel_output_shapes says why it declines such
nodes: a warning at load, the reason in the error when nothing else runs them, a problem in
`nnplug doctor MODEL`."""

import io
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from nativelib import bare_runtime, compiler
from numpy_backend import NumpyBackend
from onnx import TensorProto, helper

import nnplug
from nnplug.doctor import doctor_main
from nnplug.scaffold import Spec, generate

NAME = "tmplshapes"


def _model(shape):
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    add = helper.make_node("Add", ["y", "b"], ["z"], name="add")
    g = helper.make_graph([relu, add], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])


def _template_source(tmp_path) -> str:
    generate(Spec("backend-native", NAME, str(tmp_path / "pkg")))
    return next((tmp_path / "pkg").rglob("backend.c")).read_text()


def _compile(tmp_path, source: str, flags=()) -> str:
    folder = tmp_path / "backends"
    folder.mkdir(exist_ok=True)
    src = tmp_path / "backend.c"
    src.write_text(source)
    lib = folder / f"libnnplug_{NAME}.so"
    proc = subprocess.run([compiler(), "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden",
                           "-Werror=implicit-function-declaration", *flags,
                           f"-I{nnplug.get_include()}", str(src), "-o", str(lib)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(folder)


def _without_output_shapes(source: str) -> str:
    line = "    .kernel_output_shapes = kernel_output_shapes,\n"
    assert line in source
    return source.replace(line, "")


def test_the_generated_backend_compiles_as_strict_c11(tmp_path):
    _compile(tmp_path, _template_source(tmp_path), ["-Wall", "-Wextra", "-Werror"])


def test_the_generated_backend_runs_a_symbolic_batch_itself(tmp_path):
    folder = _compile(tmp_path, _template_source(tmp_path))
    model = _model(["N", 4])
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4)
    b = np.array([0.5, -1, 2, 0], np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x, "b": b})[0]
    with bare_runtime(dynamic_backends_path=folder) as rt, \
            rt.load(model, backends=[NAME]) as net:
        assert net.assignment == {"relu": NAME, "add": NAME}
        np.testing.assert_array_equal(net.run({"x": x, "b": b})["z"], want)


def test_a_backend_without_output_shapes_warns_at_load_naming_node_and_entry(tmp_path):
    folder = _compile(tmp_path, _without_output_shapes(_template_source(tmp_path)))
    with bare_runtime(dynamic_backends_path=folder) as rt:
        rt.register_backend(NumpyBackend())
        with pytest.warns(nnplug.PluginWarning, match=rf"backend '{NAME}'.*'relu' \(Relu\)"
                          r".*kernel_output_shapes") as got, \
                rt.load(_model(["N", 4]), backends=[NAME, "numpy"]) as net:
            assert net.assignment == {"relu": "numpy", "add": "numpy"}
        assert len([w for w in got if w.category is nnplug.PluginWarning]) == 1
        import warnings

        with warnings.catch_warnings():  # static shapes: it runs them, nothing to say
            warnings.simplefilter("error", nnplug.PluginWarning)
            with rt.load(_model([3, 4]), backends=[NAME, "numpy"]) as net:
                assert net.assignment == {"relu": NAME, "add": NAME}


def test_alone_it_fails_naming_the_node_it_declined_and_why(tmp_path):
    folder = _compile(tmp_path, _without_output_shapes(_template_source(tmp_path)))
    with bare_runtime(dynamic_backends_path=folder) as rt, \
            pytest.raises(nnplug.UnsupportedNodeError) as e:
        rt.load(_model(["N", 4]), backends=[NAME])
    msg = str(e.value)
    assert msg.startswith(f"backend '{NAME}' runs node 'relu' (op Relu"), msg
    assert "only with static shapes" in msg and "kernel_output_shapes" in msg, msg


def test_doctor_reports_it_as_a_problem(tmp_path):
    folder = _compile(tmp_path, _without_output_shapes(_template_source(tmp_path)))
    path = tmp_path / "m.onnx"
    onnx.save(_model(["N", 4]), str(path))
    out = io.StringIO()
    assert doctor_main(["--no-entry-points", "--path", folder, str(path)], out=out) == 1
    text = out.getvalue()
    assert f"backend '{NAME}' runs node 'relu' (op Relu" in text, text
    assert "kernel_output_shapes" in text and "OK: no problems found" not in text, text

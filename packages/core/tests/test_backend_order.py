"""The default backend order comes from what each backend declares; the core names none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnx
import pytest
from models import mlp
from numpy_backend import NumpyBackend, make_runtime

import nnplug
from nnplug import onnx_backend, ranking

PACKAGE_MODULE = '''
import numpy as np
from nnplug import Backend, HostDeviceAPI, Module, Tensor


class Fast(Backend):
    """A third party's CPU backend that says it should go first (runs Relu and Add)."""

    id = "fastrelu"
    device_type = "cpu"
    priority = 1000
    provider_names = ("FastReluExecutionProvider",)

    def device_api(self):
        return HostDeviceAPI()

    def supports(self, node, graph):
        return node.op_type in ("Relu", "Add")

    def build(self, subgraph, target):
        def run(inputs):
            env = dict(zip(subgraph.inputs, (t.numpy() for t in inputs)))
            env.update(subgraph.constants)
            for n in subgraph.nodes:
                a = [env[x] for x in n.inputs]
                env[n.outputs[0]] = np.maximum(a[0], 0) if n.op_type == "Relu" else a[0] + a[1]
            return [Tensor.from_numpy(env[o]) for o in subgraph.outputs]
        return Module({"run": run})
'''

PYPROJECT = '''
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "nnplug-backend-fastrelu"
version = "1.0"

[project.entry-points."nnplug.backends"]
fastrelu = "nnplug_backend_fastrelu:Fast"

[tool.hatch.build.targets.wheel]
packages = ["nnplug_backend_fastrelu"]
'''

CHECK = '''
import json, numpy as np, onnx, nnplug
from onnx import TensorProto, helper
g = helper.make_graph(
    [helper.make_node("Add", ["x", "x"], ["s"], name="add"),
     helper.make_node("Relu", ["s"], ["y"], name="relu")], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
rt = nnplug.Runtime()
net = rt.load(model)
sess = nnplug.InferenceSession(model.SerializeToString())
cpu = nnplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print(json.dumps({
    "default": rt.default_backends(),
    "load": sorted(set(net.assignment.values())),
    "session": sorted(set(sess.network.assignment.values())),
    "cpu_provider": cpu.get_providers(),
    "own_provider": nnplug.InferenceSession(
        model.SerializeToString(), providers=["FastReluExecutionProvider"]).get_providers(),
    "available": nnplug.get_available_providers(),
    "y": net.run({"x": x})["y"].tolist(),
}))
'''


def test_an_installed_backend_that_declares_a_higher_priority_becomes_the_default(tmp_path):
    pkg = tmp_path / "src"
    (pkg / "nnplug_backend_fastrelu").mkdir(parents=True)
    (pkg / "nnplug_backend_fastrelu" / "__init__.py").write_text(PACKAGE_MODULE)
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    site = tmp_path / "site"
    # a real install of a real package: pip builds its wheel and installs it
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(pkg)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("NNPLUG_BACKENDS", None)
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["default"][0] == "fastrelu"
    assert got["load"] == got["session"] == ["fastrelu"]
    assert got["cpu_provider"][0] == "fastrelu"  # a CPU backend: CPUExecutionProvider means it too
    assert got["own_provider"] == ["fastrelu"]
    assert got["available"] == got["default"]
    assert got["y"] == [[0, 4, 0], [8, 0, 12]]


class Ranked(NumpyBackend):
    def __init__(self, id, priority, device_type="cpu", provider_names=()):
        super().__init__(id=id)
        self.priority = priority
        self.device_type = device_type
        self.provider_names = provider_names


@pytest.fixture
def ranked(monkeypatch):
    monkeypatch.delenv("NNPLUG_BACKENDS", raising=False)
    rt = make_runtime(Ranked("portable", 100), Ranked("plain", 0), Ranked("fast", 200),
                      Ranked("twin", 100), Ranked("gpuish", 50, "opencl"),
                      Ranked("npu", 10, nnplug.register_device_type("orderedtestnpu"),
                             ("NpuExecutionProvider",)))
    yield rt
    rt.close()


def test_higher_priority_first_and_ties_keep_registration_order(ranked):
    assert ranked.default_backends() == ["fast", "portable", "twin", "gpuish", "npu", "plain"]


def test_a_policy_moves_its_device_types_to_the_front(ranked):
    assert ranked.default_backends("prefer_gpu")[0] == "gpuish"
    assert ranked.default_backends("prefer_npu")[0] == "npu"  # an extension device type
    assert ranked.default_backends("prefer_cpu")[:4] == ["fast", "portable", "twin", "plain"]
    with pytest.raises(ValueError, match="unknown device policy 'fastest'"):
        ranked.default_backends("fastest")


def test_load_session_and_onnx_backend_share_one_default_order(ranked, monkeypatch):
    net = ranked.load(mlp())
    assert set(net.assignment.values()) <= {"fast", "fast (folded)"}
    sess = nnplug.InferenceSession(mlp(), runtime=ranked)
    assert sess.get_providers() == ranked.default_backends()
    assert nnplug.get_available_providers(ranked) == ranked.default_backends()
    onnx_backend.set_runtime(ranked)
    try:
        assert onnx_backend.preference() == ranked.default_backends()
        monkeypatch.setenv("NNPLUG_BACKENDS", "twin,portable")
        # the environment variable replaces the declared order for all three
        assert ranked.default_backends() == ["twin", "portable"]
        assert onnx_backend.preference() == ["twin", "portable"]
        assert nnplug.InferenceSession(mlp(), runtime=ranked).get_providers() == ["twin", "portable"]
    finally:
        onnx_backend.set_runtime(None)
    explicit = make_runtime(Ranked("a", 1), Ranked("b", 2), backend_preference=["a"])
    assert explicit.default_backends() == ["a"]  # creation options win over the variable
    explicit.close()


def test_a_provider_name_stands_for_every_backend_that_answers_to_it(ranked):
    ids, _ = nnplug.session.resolve_providers(ranked, ["CPUExecutionProvider"])
    assert ids == ["fast", "portable", "twin", "plain"]  # every CPU backend, best first
    ids, _ = nnplug.session.resolve_providers(ranked, ["NpuExecutionProvider", "portable"])
    assert ids == ["npu", "portable"]
    assert ranking.provider_names(ranked.backends["npu"]) == ["NpuExecutionProvider"]
    assert ranking.provider_names(ranked.backends["fast"]) == ["CPUExecutionProvider"]


def test_core_source_names_no_plugin():
    """No backend id, op type or distribution of an in-tree plugin appears in the core's code
    (string literals outside docstrings); device type names ("cpu", "opencl") are DLPack's
    and so are allowed, as are standard ONNX op names."""
    import ast

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    packages = os.path.join(os.path.dirname(__file__), "..", "..")
    core = os.path.dirname(nnplug.__file__)
    names = set()
    for folder in os.listdir(packages):
        pyproject = os.path.join(packages, folder, "pyproject.toml")
        if folder == "core" or not os.path.isfile(pyproject):
            continue
        with open(pyproject, "rb") as f:
            project = tomllib.load(f)["project"]
        names.add(project["name"])
        for group in ("nnplug.backends", "nnplug.ops"):
            names.update(project.get("entry-points", {}).get(group, {}))
    names.add("cstSoftmax")  # the op ops-softmax registers (its entry point is named softmax)
    device_types = {"cpu", "opencl"}
    standard_ops = {s.name for s in onnx.defs.get_all_schemas()}
    forbidden = {n for n in names if n not in device_types and n not in standard_ops}
    assert "onednn" in forbidden and "nnplug-backend-cpu" in forbidden
    found = []
    for root, _dirs, files in os.walk(core):
        if f"{os.sep}scaffold" in root:
            continue  # a satellite: the templates for new plugins
        for fname in files:
            if not fname.endswith(".py"):
                continue
            path = os.path.join(root, fname)
            tree = ast.parse(open(path).read())
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                    and n.body and isinstance(n.body[0], ast.Expr)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and id(node) not in docs:
                    for name in forbidden:
                        if name in node.value:
                            found.append(f"{os.path.relpath(path, core)}:{node.lineno}: {name}")
    assert not found, "\n".join(found)


def test_a_session_device_policy_orders_the_backends_it_is_not_given(ranked):
    so = nnplug.SessionOptions()
    so.device_policy = "prefer_gpu"
    assert nnplug.InferenceSession(mlp(), so, runtime=ranked).get_providers()[0] == "gpuish"
    with pytest.raises(nnplug.InvalidArgumentError, match="device_policy 'gpu' is not one of"):
        so.device_policy = "gpu"


def test_onnxruntime_module_takes_the_same_order_and_answers_in_the_callers_names(ranked):
    from nnplug import onnxruntime as ort

    model = mlp().SerializeToString()
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"], runtime=ranked)
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert set(s.network.assignment.values()) <= {"fast", "fast (folded)"}  # the best CPU backend
    s = ort.InferenceSession(model, providers=["NpuExecutionProvider"], runtime=ranked)
    assert s.get_providers() == ["NpuExecutionProvider", "CPUExecutionProvider"]  # CPU: fallback
    s = ort.InferenceSession(model, runtime=ranked)
    assert set(s.network.assignment.values()) <= {"fast", "fast (folded)"}


def test_devices_list_every_backend_device_pair_best_first(ranked):
    devs = ranked.devices()
    assert [d.backend for d in devs] == ranked.default_backends()  # one host device each
    first = devs[0]
    assert first.device == nnplug.device("cpu:0") and first.device_class == "cpu"
    assert first.provider_names == ("CPUExecutionProvider",)
    assert first.vendor == nnplug.device_api.cpu_vendor()
    assert ranked.devices("prefer_gpu")[0].backend == "gpuish"


def test_onnxruntime_device_listing_and_selection_policy(ranked):
    from nnplug import onnxruntime as ort

    devs = ort.get_ep_devices(ranked)
    assert [d.ep_metadata["nnplug_backend"] for d in devs] == ranked.default_backends()
    assert devs[0].ep_name == "CPUExecutionProvider"
    assert devs[0].device.type == ort.OrtHardwareDeviceType.CPU
    so = ort.SessionOptions()
    so.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_GPU)
    s = ort.InferenceSession(mlp().SerializeToString(), so, runtime=ranked)
    assert set(s.network.assignment.values()) <= {"gpuish", "gpuish (folded)"}

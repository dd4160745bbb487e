"""How a loaded network behaves: many threads at once, new input shapes, the entry point,
the tensors run() hands back, and errors after close."""

from __future__ import annotations

from importlib.metadata import entry_points

import numpy as np
import onnx
import pytest
from conftest import zoo_case
from onnx import TensorProto, helper

import nnplug
from nnplug import Target
from nnplug.errors import BackendError
from nnplug.graph import Node, SubGraph, ValueInfo
from nnplug_backend_opencl import OpenCLBackend, OpenCLDeviceAPI
from nnplug_conformance.fixtures import run_from_threads


def test_many_threads_share_one_network(rt):
    path, feeds, expected = zoo_case("squeezenet")
    (name,) = feeds
    rng = np.random.default_rng(5)
    inputs = [feeds[name]] + [rng.random(feeds[name].shape, np.float32) for _ in range(3)]
    with rt.load(path, backends=["opencl"]) as net:
        want = [net.run({name: x})[net.outputs[0].name] for x in inputs]
        got = run_from_threads(lambda x: net.run({name: x}), inputs, threads=8, rounds=3)
    assert len(got) == 24
    np.testing.assert_allclose(want[0], expected, rtol=1e-3, atol=1e-7)
    for j, out in got:
        np.testing.assert_array_equal(out[net.outputs[0].name], want[j])


def test_symbolic_batch_is_planned_per_shape(rt):
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model)
    with rt.load(model, backends=["opencl"]) as net:
        for n in (1, 3, 2):
            x = np.random.default_rng(n).standard_normal((n, 3, 6, 6)).astype(np.float32)
            y = net.run({"x": x})["y"]
            assert y.shape == (n, 4)
            np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_the_entry_point_registers_the_backend():
    eps = [ep for ep in entry_points(group="nnplug.backends") if ep.name == "opencl"]
    assert len(eps) == 1 and eps[0].load() is OpenCLBackend
    with nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path="",
                                               custom_op_paths="")) as rt:
        assert "opencl" in rt.backends
        assert rt.backends["opencl"].origin == "entry_point"


def _relu_subgraph():
    v = {"x": ValueInfo("x", np.dtype(np.float32), (2, 3)),
         "y": ValueInfo("y", np.dtype(np.float32), (2, 3))}
    return SubGraph([Node("r", "Relu", "", ["x"], ["y"], {}, opset=13)], ["x"], ["y"], {}, v)


def test_build_and_run_give_device_tensors(rt):
    module = OpenCLBackend().build(_relu_subgraph(), Target("opencl"))
    api = OpenCLBackend().device_api()
    assert isinstance(api, OpenCLDeviceAPI)
    x = nnplug.Tensor.from_numpy(np.array([[-1, 2, -3], [4, -5, 6]], np.float32))
    xd = x.to("opencl:0", api)
    (y,) = module["run"]([xd])
    assert str(y.device) == "opencl:0" and y.api is api and y.shape == (2, 3)
    np.testing.assert_array_equal(y.numpy(), np.maximum(x.numpy(), 0))
    # host tensors are accepted too (copied in), and each call returns fresh buffers
    (y2,) = module["run"]([x])
    assert y2.handle is not y.handle
    np.testing.assert_array_equal(y2.numpy(), y.numpy())
    module.close()
    with pytest.raises(BackendError, match="was closed"):
        module["run"]([xd])


def test_wrong_inputs_are_reported(rt):
    module = OpenCLBackend().build(_relu_subgraph(), Target("opencl"))
    with pytest.raises(BackendError, match="takes 1 inputs"):
        module["run"]([])
    with pytest.raises(BackendError, match="input 'x' is float64"):
        module["run"]([nnplug.Tensor.from_numpy(np.zeros((2, 3)))])
    module.close()

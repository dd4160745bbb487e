"""The opencl Target kind (filled from the device, overridable from JSON) and device choice
by index and NNPLUG_OPENCL_DEVICE."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import new_runtime
from onnx import TensorProto, helper

from nnplug import Target
from nnplug.errors import BackendError, TargetError
from nnplug_backend_opencl import OpenCLBackend, devices


@pytest.fixture
def kind_registered(rt):
    return rt  # registering the backend registers its target kind


def test_target_attributes_are_filled_from_the_device(kind_registered, cl_device):
    t = Target("opencl")
    assert t.attrs["device_name"] == cl_device.name.strip()
    assert t.attrs["max_num_threads"] == cl_device.max_work_group_size
    assert t.attrs["compute_units"] == cl_device.max_compute_units
    assert t.attrs["max_local_memory"] == cl_device.local_mem_size
    assert t.attrs["global_memory"] == cl_device.global_mem_size
    assert t.attrs["driver_version"] == cl_device.driver_version.strip()
    assert t.attrs["work_group_size"] == min(64, cl_device.max_work_group_size)
    assert str(t.device) == "opencl:0"


def test_json_overrides_win(kind_registered):
    t = Target('{"kind": "opencl", "max_num_threads": 32, "work_group_size": 8, '
               '"device_name": "renamed"}')
    assert (t.attrs["max_num_threads"], t.attrs["work_group_size"]) == (32, 8)
    assert t.attrs["device_name"] == "renamed"


def test_bad_targets_are_rejected_with_the_reason(kind_registered):
    with pytest.raises(TargetError, match="no OpenCL device opencl:7; visible devices: opencl:0"):
        Target('{"kind": "opencl", "device_id": 7}')
    with pytest.raises(TargetError, match="work_group_size 64 exceeds max_num_threads 16"):
        Target('{"kind": "opencl", "max_num_threads": 16, "work_group_size": 64}')
    with pytest.raises(TargetError, match="must be int"):
        Target('{"kind": "opencl", "work_group_size": "big"}')


@pytest.mark.parametrize("wg", [1, 8, 128])
def test_work_group_size_from_the_target_changes_launches_not_results(kind_registered, wg):
    x = np.random.default_rng(3).standard_normal((1, 3, 9, 9)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((5, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                      helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 9, 9])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    results = []
    for target in ("opencl", {"kind": "opencl", "work_group_size": wg}):
        with kind_registered.load(model, backends=["opencl"], targets={"opencl": target}) as net:
            results.append(net.run({"x": x, "w": w})["y"])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)


def test_device_selection_by_environment(monkeypatch, cl_device):
    everything = devices.all_devices()
    monkeypatch.setenv(devices.ENV_DEVICE, "0")
    assert devices.visible_devices() == [everything[0][2]]
    p, d, dev = everything[0]
    monkeypatch.setenv(devices.ENV_DEVICE, f"{p}:{d}")
    assert devices.visible_devices() == [dev]
    monkeypatch.setenv(devices.ENV_DEVICE, cl_device.name.strip()[:6].upper())
    assert devices.visible_devices()[0] == cl_device
    monkeypatch.setenv(devices.ENV_DEVICE, "no-such-device-anywhere")
    with pytest.raises(BackendError, match="matches no OpenCL device; devices: 0: "):
        devices.visible_devices()
    monkeypatch.setenv(devices.ENV_DEVICE, "42")
    with pytest.raises(BackendError, match="selector '42'"):
        devices.visible_devices()


def test_device_index_out_of_range_names_the_fix():
    with pytest.raises(BackendError, match="no OpenCL device opencl:5"):
        devices.device_for(5)


def test_backend_describes_its_device(cl_device):
    assert cl_device.name.strip() in OpenCLBackend().describe()
    rt = new_runtime(OpenCLBackend)
    assert "opencl" in rt.backends
    rt.close()

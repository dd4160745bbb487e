"""The adapter on its own: the device API over the C table, DLPack without copies, a
partition built by hand, arena planning."""

import numpy as np
import pytest

import nnplug
from nnplug import Device, Tensor
from nnplug.graph import Node, SubGraph, ValueInfo
from nnplug.native import NativeBuffer, load_backend_library
from nnplug.native.plan import plan_arena
from nnplug.target import Target, register_target_kind

DEV = Device(100, 0)


@pytest.fixture
def testdev(libs):
    b = load_backend_library(libs["testdev"])
    yield b
    b.close()


@pytest.fixture
def testcpu(libs):
    b = load_backend_library(libs["testcpu"])
    yield b
    b.close()


def test_device_attributes(testdev):
    api = testdev.device_api()
    assert api.get_attr(DEV, "exist") is True
    assert api.get_attr(Device(100, 3), "exist") is False
    assert api.get_attr(DEV, "device_name") == "nnplug test device"
    assert api.get_attr(DEV, "total_global_memory") == 1 << 30
    assert api.get_attr(DEV, "warp_size") is None
    with pytest.raises(ValueError, match="unknown device attribute kind"):
        api.get_attr(DEV, "colour")


def test_set_device_errors_carry_the_backends_message(testdev):
    api = testdev.device_api()
    api.set_device(DEV)
    with pytest.raises(nnplug.BackendError, match="set_device: no device 100:7"):
        api.set_device(Device(100, 7))


def test_alloc_copy_roundtrip_with_offsets_and_bounds(testdev, stats):
    api = testdev.device_api()
    before = stats("testdev")
    buf = api.alloc_data_space(DEV, 64, dtype=np.float32)
    assert isinstance(buf, NativeBuffer) and buf.nbytes == 64
    src = np.arange(16, dtype=np.float32)
    api.copy_data_from_to(src, 8, buf, 16, 32, nnplug.CPU, DEV)       # host -> device
    other = api.alloc_data_space(DEV, 64)
    api.copy_data_from_to(buf, 16, other, 0, 32, DEV, DEV)             # device -> device
    out = np.zeros(8, np.float32)
    api.copy_data_from_to(other, 0, out, 0, 32, DEV, nnplug.CPU)       # device -> host
    np.testing.assert_array_equal(out, src[2:10])
    with pytest.raises(ValueError, match="out of bounds"):
        api.copy_data_from_to(src, 0, buf, 40, 32, nnplug.CPU, DEV)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        api.copy_data_from_to(buf, 0, ro, 0, 16, DEV, nnplug.CPU)
    with pytest.raises(ValueError, match="power of two"):
        api.alloc_data_space(DEV, 16, alignment=3)
    api.free_data_space(DEV, buf)
    api.free_data_space(DEV, other)
    with pytest.raises(ValueError, match="freed"):
        api.copy_data_from_to(src, 0, buf, 0, 4, nnplug.CPU, DEV)
    d = {k: stats("testdev")[k] - before[k] for k in before}
    assert (d["h2d"], d["d2d"], d["d2h"], d["alloc"], d["free"]) == (1, 1, 1, 2, 2)


def test_garbage_collected_buffers_are_freed(testdev, stats):
    api = testdev.device_api()
    live = stats("testdev")["live"]
    buf = api.alloc_data_space(DEV, 128)
    assert stats("testdev")["live"] == live + 1
    del buf
    assert stats("testdev")["live"] == live


def test_workspaces_and_streams(testdev, stats):
    api = testdev.device_api()
    before = stats("testdev")
    ws = api.alloc_workspace(DEV, 100)
    api.copy_data_from_to(np.ones(25, np.float32), 0, ws, 0, 100, nnplug.CPU, DEV)
    api.free_workspace(DEV, ws)
    s1, s2 = api.create_stream(DEV), api.create_stream(DEV)
    api.set_stream(DEV, s1)
    buf = api.alloc_data_space(DEV, 16)
    api.copy_data_from_to(np.ones(4, np.float32), 0, buf, 0, 16, nnplug.CPU, DEV, stream=s1)
    api.sync_stream_from_to(DEV, s1, s2)
    api.stream_sync(DEV, s2)
    api.free_stream(DEV, s1)
    api.free_stream(DEV, s2)
    d = {k: stats("testdev")[k] - before[k] for k in before}
    assert (d["ws_alloc"], d["ws_free"], d["set_stream"], d["sync_from_to"], d["stream_sync"]) \
        == (1, 1, 1, 1, 1)
    assert d["streams"] == 0  # both freed


def test_tensor_to_and_from_the_device(testdev):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_numpy(x).to(DEV, testdev.device_api())
    assert t.device == DEV and isinstance(t.handle, NativeBuffer)
    np.testing.assert_array_equal(t.numpy(), x)
    with pytest.raises(BufferError, match="host-visible"):
        np.from_dlpack(t)


def test_dlpack_round_trip_with_numpy_is_zero_copy(testcpu):
    api = testcpu.device_api()
    # numpy -> nnplug: the same memory
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nnplug.from_dlpack(x)
    assert np.shares_memory(t.numpy(), x)
    # backend memory -> numpy: a view of the backend's buffer
    buf = api.alloc_data_space(nnplug.CPU, 24, dtype=np.float32)
    dev_t = Tensor(buf, (2, 3), np.float32, nnplug.CPU, api)
    view = np.from_dlpack(dev_t)
    assert view.ctypes.data == dev_t.handle.ptr
    api.copy_data_from_to(x * 2, 0, buf, 0, 24, nnplug.CPU, nnplug.CPU)  # written by the backend
    np.testing.assert_array_equal(view, x * 2)                          # ... seen through numpy
    back = nnplug.from_dlpack(view)        # and back again, still the same memory
    assert back.numpy().ctypes.data == dev_t.handle.ptr


def _hand_built(backend, symbolic=False):
    f = np.dtype(np.float32)
    n = "N" if symbolic else 2
    values = {"x": ValueInfo("x", f, (n, 3)), "m": ValueInfo("m", f, (n, 4)),
              "a": ValueInfo("a", f, (n, 4)), "y": ValueInfo("y", f, (n, 4))}
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [Node("mm", "MatMul", "", ["x", "w"], ["m"], opset=17),
             Node("add", "Add", "", ["m", "b"], ["a"], opset=17),
             Node("relu", "Relu", "", ["a"], ["y"], opset=17)]
    sg = SubGraph(nodes, ["x"], ["y"], {"w": w, "b": b}, values)
    register_target_kind(backend.target_kind_name, override=True, **backend.target_kind())
    return sg, w, b


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_partition_built_by_hand_fuses_and_runs(testcpu, symbolic, stats):
    sg, w, b = _hand_built(testcpu, symbolic)
    assert all(testcpu.supports(n, sg) for n in sg.nodes)
    module = testcpu.build(sg, Target("testcpu"))
    try:
        assert module["kernels"]() == ["node 'mm' (op MatMul)",
                                       "node 'add' (op Add) fused with 'relu' (Relu)"]
        assert module["is_static"]() is not symbolic
        x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
        (y,) = module["run"]([Tensor.from_numpy(x)])
        np.testing.assert_allclose(y.numpy(), np.maximum(x @ w + b, 0), rtol=1e-6)
        with pytest.raises(nnplug.InputError, match="'x'"):
            module["run"]([Tensor.from_numpy(np.zeros((2, 5), np.float32))])
    finally:
        module.close()
    with pytest.raises(nnplug.BackendError, match="closed"):
        module["run"]([Tensor.from_numpy(np.zeros((2, 3), np.float32))])


def test_fusion_stops_where_an_intermediate_is_needed_outside(testcpu):
    sg, _, _ = _hand_built(testcpu)
    sg.outputs = ["a", "y"]  # 'a' (Add's result) is wanted after the partition
    module = testcpu.build(sg, Target("testcpu"))
    try:
        assert len(module["kernels"]()) == 3
        x = np.ones((2, 3), np.float32)
        a, y = module["run"]([Tensor.from_numpy(x)])
        np.testing.assert_array_equal(y.numpy(), np.maximum(a.numpy(), 0))
    finally:
        module.close()


def test_supports_sees_attributes_and_dtypes(testcpu):
    sg, _, _ = _hand_built(testcpu)
    sg.values["s"] = ValueInfo("s", np.dtype(np.int64), (2,))
    ok = Node("r", "Reshape", "", ["y", "s"], ["z"], opset=17, attrs={"allowzero": 0})
    refused = Node("r2", "Reshape", "", ["y", "s"], ["z"], opset=17, attrs={"allowzero": 1})
    assert testcpu.supports(ok, sg) and not testcpu.supports(refused, sg)
    assert not testcpu.supports(Node("s", "Sigmoid", "", ["y"], ["z"], opset=17), sg)


def test_set_num_threads_reaches_the_backend(testdev, stats):
    testdev.set_num_threads(2)
    assert stats("testdev")["threads"] == 2
    assert testdev.device_api().get_attr(DEV, "multi_processor_count") == 2
    with pytest.raises(nnplug.BackendError, match="set_num_threads: -1 < 0"):
        testdev.set_num_threads(-1)


def test_arena_plan_reuses_memory_of_dead_values():
    offsets, total = plan_arena([("a", 100, 0, 1), ("b", 100, 1, 2), ("c", 100, 2, 3)])
    assert offsets["a"] != offsets["b"] and offsets["b"] != offsets["c"]
    assert offsets["a"] == offsets["c"]          # a is dead when c is made
    assert total == 2 * 128
    assert all(o % 64 == 0 for o in offsets.values())

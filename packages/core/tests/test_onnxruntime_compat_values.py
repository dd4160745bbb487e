"""nnplug.onnxruntime's OrtValue, SparseTensor, devices and IO binding side by side with
onnxruntime's on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nnplug.onnxruntime as nort
from nnplug.onnxruntime.capi import _pybind_state as C

ort = pytest.importorskip("onnxruntime")

X = np.array([[1, 2], [3, 4], [5, 6]], np.float32)


def relu_model():
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 2])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_an_ortvalue_answers_as_onnxruntimes():
    for mod in (ort, nort):
        v = mod.OrtValue.ortvalue_from_numpy(X)
        assert (v.device_name(), v.shape(), v.data_type(), v.element_type(), v.is_tensor(),
                v.has_value(), v.tensor_size_in_bytes()) == \
            ("cpu", [3, 2], "tensor(float)", 1, True, True, 24)
        assert v.data_ptr() == X.ctypes.data and np.shares_memory(v.numpy(), X)
        typed = mod.OrtValue.ortvalue_from_numpy_with_onnx_type(X.view(np.int32), 1)
        assert typed.element_type() == 1 and typed.numpy().dtype == np.float32
        empty = mod.OrtValue.ortvalue_from_shape_and_type([2, 5], np.int64)
        assert empty.shape() == [2, 5] and empty.data_type() == "tensor(int64)"


def test_ortvalues_run_and_come_back_as_an_ortvaluevector(rt):
    sess = nort.InferenceSession(relu_model(), runtime=rt)
    v = nort.OrtValue.ortvalue_from_numpy(X - 3)
    want = ort.InferenceSession(relu_model()).run(None, {"x": X - 3})[0]
    np.testing.assert_array_equal(sess.run(None, {"x": v})[0], want)
    out = sess._sess.run_with_ort_values({"x": v._get_c_value()}, ["y"], nort.RunOptions())
    assert isinstance(out, C.OrtValueVector)
    np.testing.assert_array_equal(out[0].numpy(), want)


def test_dlpack_both_ways_shares_memory():
    v = nort.OrtValue.ortvalue_from_numpy(X)
    capsule = v._ortvalue.to_dlpack()
    assert not C.is_dlpack_uint8_tensor(capsule)
    back = C.OrtValue.from_dlpack(capsule, False)
    assert back.data_ptr() == v.data_ptr()
    assert np.from_dlpack(v).ctypes.data == X.ctypes.data
    assert v.__dlpack_device__() == (1, 0)
    assert C.is_dlpack_uint8_tensor(np.zeros(3, np.uint8).__dlpack__())


def test_sparse_tensors_as_onnxruntimes():
    for mod in (ort, nort):
        cpu = mod.OrtDevice.make("cpu", 0)
        coo = mod.SparseTensor.sparse_coo_from_numpy([9, 9], np.array([1, 2], np.float32),
                                                     np.array([3, 5], np.int64), cpu)
        assert (coo.format(), coo.dense_shape(), coo.data_type(), coo.device_name()) == \
            (mod.OrtSparseFormat.ORT_SPARSE_COO, [9, 9], "sparse_tensor(float)", "cpu")
        assert not coo.values().flags.writeable
        assert coo.as_coo_view().indices().tolist() == [3, 5]
        csr = mod.SparseTensor.sparse_csr_from_numpy([2, 2], np.array(["a"]),
                                                     np.array([1], np.int64),
                                                     np.array([0, 1, 1], np.int64), cpu)
        assert csr.data_type() == "sparse_tensor(string)"
        assert csr.as_csrc_view().outer().tolist() == [0, 1, 1]
        back = mod.OrtValue.ort_value_from_sparse_tensor(coo).as_sparse_tensor()
        assert back.values().tolist() == [1, 2]
        with pytest.raises(RuntimeError):
            coo.to_cuda(mod.OrtDevice.make("cuda", 0))


def test_devices_memory_infos_and_arena_configs():
    for mod in (ort, nort):
        d = mod.OrtDevice.make("cpu", 0)
        assert (d.device_id(), d.device_type(), d.device_vendor_id(), d.device_mem_type()) == \
            (0, 0, 0, 0)
        m = mod.OrtMemoryInfo("Cpu", mod.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                              mod.OrtMemType.DEFAULT)
        assert (m.name, m.device_id, m.mem_type, m.allocator_type) == \
            ("Cpu", 0, mod.OrtMemType.DEFAULT, mod.OrtAllocatorType.ORT_ARENA_ALLOCATOR)
        cfg = mod.OrtArenaCfg({"max_mem": 16, "initial_growth_chunk_size_bytes": 2})
        assert (cfg.max_mem, cfg.initial_growth_chunk_size_bytes) == (16, 2)
        mod.create_and_register_allocator(m, None)


def test_io_binding_with_cpu_pointers_and_ortvalues(rt):
    sess = nort.InferenceSession(relu_model(), runtime=rt)
    x = X - 3
    out = np.empty((3, 2), np.float32)
    b = sess.io_binding()
    b.bind_input("x", "cpu", 0, np.float32, [3, 2], x.ctypes.data)
    b.bind_output("y", "cpu", 0, np.float32, [3, 2], out.ctypes.data)
    sess.run_with_iobinding(b)
    want = ort.InferenceSession(relu_model()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(out, want)
    b = sess.io_binding()
    b.bind_ortvalue_input("x", nort.OrtValue.ortvalue_from_numpy(x))
    b.bind_output("y")
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(b.get_outputs()[0].numpy(), want)
    np.testing.assert_array_equal(b.copy_outputs_to_cpu()[0], want)

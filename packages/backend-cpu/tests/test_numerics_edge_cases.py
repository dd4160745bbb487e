"""Edge cases where a fast kernel used to give a silently different answer: NaN through
Relu and max pooling, integer division by zero, extreme Slice steps, keepdims values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import one_node_model, reference, run_cpu
from onnx import TensorProto, helper, numpy_helper

import nnplug

NAN = np.float32(np.nan)


def nan_input(shape, seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    x.ravel()[:: 7] = NAN
    return x


def test_relu_keeps_nan(rt):
    x = np.array([1.0, NAN, -1.0, 0.0, NAN], np.float32)
    model, feeds = one_node_model("Relu", [x])
    got = run_cpu(rt, model, feeds)[0][0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    np.testing.assert_array_equal(got[~np.isnan(x)], [1.0, 0.0, 0.0])


def test_relu_fused_into_conv_keeps_nan(rt):
    # Conv -> Relu: the Relu runs as the Conv's epilogue
    x = nan_input((1, 2, 5, 5))
    w = np.random.default_rng(1).uniform(-1, 1, (3, 2, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 5, 5))],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    got = run_cpu(rt, model, {"x": x})[0][0]
    want = reference(model, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any()


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),  # the separable 2-D path, 3-tap rows
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[1, 4]),
    dict(kernel_shape=[3], strides=[1]),          # 1-D
    dict(kernel_shape=[2, 2, 2]),                 # 3-D, the direct loop
], ids=["3x3_pad", "2x2_s2", "1x4", "1d", "3d"])
def test_maxpool_window_with_nan_gives_nan(rt, attrs):
    rank = len(attrs["kernel_shape"])
    x = nan_input((1, 2) + (6,) * rank)
    model, feeds = one_node_model("MaxPool", [x], attrs)
    got = run_cpu(rt, model, feeds)[0][0]
    # NaN in a window gives NaN (numpy's and torch's max). onnxruntime 1.32 and onnx.reference
    # do not propagate it (onnx.reference drops NaN as it marks padding with NaN; onnxruntime's
    # result depends on where in its vector loop the NaN falls), so the reference is
    # onnx.reference run with NaN replaced by a value larger than every input.
    big = np.float32(1e30)
    want = reference(model, {"in0": np.where(np.isnan(x), big, x)})[0]
    want = np.where(want == big, NAN, want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any() and not np.isinf(got).any()
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)])


def test_global_maxpool_plane_with_nan_gives_nan(rt):
    x = np.random.default_rng(3).uniform(-1, 1, (2, 3, 4, 4)).astype(np.float32)
    x[0, 1, 2, 3] = NAN
    x[1, 2, 0, 0] = NAN
    model, feeds = one_node_model("GlobalMaxPool", [x])
    got = run_cpu(rt, model, feeds)[0][0]
    want = x.max(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("op", ["Div", "Mod"])
@pytest.mark.parametrize("dt", [np.int32, np.int64, np.uint8, np.int8])
def test_integer_division_by_zero_is_a_clear_error(rt, op, dt):
    a = np.array([4, 5, 6], dt)
    b = np.array([2, 0, 3], dt)
    model, feeds = one_node_model(op, [a, b])
    with pytest.raises(nnplug.NnplugError, match="division by zero"):
        run_cpu(rt, model, feeds)


def test_float_division_by_zero_still_gives_inf(rt):
    model, feeds = one_node_model("Div", [np.array([1, -1, 0], np.float32), np.zeros(3, np.float32)])
    got = run_cpu(rt, model, feeds)[0][0]
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


@pytest.mark.parametrize("start", [3, -1, 2**62])
def test_slice_step_int64_min_takes_one_element(rt, start):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i64 = np.iinfo(np.int64)
    ins = [x, np.array([start], np.int64), np.array([i64.min], np.int64), np.array([1], np.int64),
           np.array([i64.min], np.int64)]
    model, feeds = one_node_model("Slice", ins, const_inputs=(1, 2, 3, 4))
    got = run_cpu(rt, model, feeds)[0][0]
    assert got.shape == (3, 1)
    np.testing.assert_array_equal(got, x[:, 3:4])


def test_slice_huge_positive_step_takes_one_element(rt):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i64 = np.iinfo(np.int64)
    ins = [x, np.array([1], np.int64), np.array([i64.max], np.int64), np.array([1], np.int64),
           np.array([i64.max], np.int64)]
    model, feeds = one_node_model("Slice", ins, const_inputs=(1, 2, 3, 4))
    got = run_cpu(rt, model, feeds)[0][0]
    np.testing.assert_array_equal(got, x[:, 1:2])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ArgMax"])
@pytest.mark.parametrize("keepdims", [2, -1])
def test_keepdims_outside_0_and_1_is_rejected(rt, op, keepdims):
    x = np.ones((2, 3), np.float32)
    attrs = dict(keepdims=keepdims)
    if op == "ArgMax":
        attrs["axis"] = 1
    model, feeds = one_node_model(op, [x], attrs)
    with pytest.raises(nnplug.NnplugError, match="keepdims"):
        run_cpu(rt, model, feeds)


def test_onnx_checker_accepts_the_edge_models():
    # the models above are valid ONNX: what is rejected is the attribute value, not the form
    model, _ = one_node_model("ReduceSum", [np.ones((2, 3), np.float32)], dict(keepdims=2))
    onnx.checker.check_model(model)


def test_range_counts_int64_extremes_exactly(rt):
    # (limit - start) needs 65 bits: a double count says 2, the exact one is 3
    i64 = np.iinfo(np.int64)
    ins = [np.array(i64.min), np.array(i64.max), np.array(i64.max)]
    model, feeds = one_node_model("Range", ins)
    got = run_cpu(rt, model, feeds)[0][0]
    np.testing.assert_array_equal(got, np.array([i64.min, -1, i64.max - 1], np.int64))

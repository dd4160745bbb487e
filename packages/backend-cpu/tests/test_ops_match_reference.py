"""Every op the backend claims, on random inputs with edge attributes, against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, for_onnxruntime, kernel_level, one_node_model, reference, run_cpu

R = np.random.default_rng(1234)


def f32(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def conv_w(m, c, kh, kw=None):
    return f32(m, c, kh, kh if kw is None else kw)


# (id, op, inputs, attrs, opset, const_inputs, outputs, tolerance)
CASES = [
    # --- Conv ---------------------------------------------------------------------------
    ("conv_3x3_pad1_bias", "Conv", [f32(1, 3, 9, 9), conv_w(8, 3, 3), f32(8)], dict(pads=[1, 1, 1, 1]), 18, (1, 2), 1, 1e-4),
    ("conv_stride2_asym_pads", "Conv", [f32(2, 4, 11, 10), conv_w(6, 4, 3)], dict(strides=[2, 2], pads=[1, 0, 2, 1]), 18, (1,), 1, 1e-4),
    ("conv_dilation2", "Conv", [f32(1, 3, 12, 12), conv_w(5, 3, 3)], dict(dilations=[2, 2], pads=[2, 2, 2, 2]), 18, (1,), 1, 1e-4),
    ("conv_group2", "Conv", [f32(1, 8, 7, 7), conv_w(6, 4, 3), f32(6)], dict(group=2, pads=[1, 1, 1, 1]), 18, (1, 2), 1, 1e-4),
    ("conv_depthwise", "Conv", [f32(1, 16, 14, 14), conv_w(16, 1, 3), f32(16)], dict(group=16, pads=[1, 1, 1, 1]), 18, (1, 2), 1, 1e-4),
    ("conv_depthwise_stride2_dil", "Conv", [f32(1, 8, 15, 13), conv_w(8, 1, 3)], dict(group=8, strides=[2, 2], dilations=[2, 1], pads=[2, 1, 1, 1]), 18, (1,), 1, 1e-4),
    ("conv_same_upper_s2", "Conv", [f32(1, 3, 10, 9), conv_w(4, 3, 4)], dict(auto_pad="SAME_UPPER", strides=[2, 2]), 18, (1,), 1, 1e-4),
    ("conv_same_lower", "Conv", [f32(1, 3, 8, 8), conv_w(4, 3, 2)], dict(auto_pad="SAME_LOWER"), 18, (1,), 1, 1e-4),
    ("conv_valid", "Conv", [f32(1, 2, 7, 9), conv_w(3, 2, 3, 2)], dict(auto_pad="VALID", strides=[2, 1]), 18, (1,), 1, 1e-4),
    ("conv_1x1", "Conv", [f32(1, 32, 9, 9), conv_w(24, 32, 1), f32(24)], {}, 18, (1, 2), 1, 1e-4),
    ("conv_1x1_stride2", "Conv", [f32(1, 16, 9, 9), conv_w(8, 16, 1)], dict(strides=[2, 2]), 18, (1,), 1, 1e-4),
    ("conv_1d", "Conv", [f32(2, 3, 20), f32(4, 3, 5), f32(4)], dict(pads=[2, 1], strides=[2]), 18, (1, 2), 1, 1e-4),
    ("conv_weights_as_input", "Conv", [f32(1, 3, 8, 8), conv_w(4, 3, 3), f32(4)], dict(pads=[1, 1, 1, 1]), 18, (), 1, 1e-4),
    ("conv_big_tiles", "Conv", [f32(1, 64, 30, 30), conv_w(96, 64, 3), f32(96)], dict(pads=[1, 1, 1, 1]), 18, (1, 2), 1, 1e-3),
    ("conv_5x5_stride3", "Conv", [f32(1, 4, 17, 16), conv_w(7, 4, 5)], dict(strides=[3, 3], pads=[2, 1, 0, 2]), 18, (1,), 1, 1e-4),
    # --- Gemm / MatMul --------------------------------------------------------------------
    ("gemm_transB_bias", "Gemm", [f32(3, 5), f32(4, 5), f32(4)], dict(transB=1), 13, (1, 2), 1, 1e-5),
    ("gemm_transA_alpha_beta", "Gemm", [f32(5, 3), f32(5, 4), f32(3, 4)], dict(transA=1, alpha=0.5, beta=2.0), 13, (), 1, 1e-5),
    ("gemm_transA_constant_B", "Gemm", [f32(37, 3), f32(37, 45), f32(45)], dict(transA=1, alpha=0.5), 13, (1, 2), 1, 1e-5),
    ("gemm_transA_constant_B_transB", "Gemm", [f32(37, 3), f32(45, 37)], dict(transA=1, transB=1, alpha=1.5), 13, (1,), 1, 1e-5),
    ("gemm_row_bias", "Gemm", [f32(1, 64), f32(64, 10), f32(1, 10)], {}, 13, (1, 2), 1, 1e-5),
    ("gemm_col_bias", "Gemm", [f32(4, 6), f32(6, 3), f32(4, 1)], dict(beta=0.5), 13, (), 1, 1e-5),
    ("gemm_scalar_bias", "Gemm", [f32(2, 3), f32(3, 4), np.array(1.5, np.float32)], {}, 13, (), 1, 1e-5),
    ("gemm_no_bias_m1", "Gemm", [f32(1, 300), f32(200, 300)], dict(transB=1, alpha=2.0), 13, (1,), 1, 1e-5),
    ("gemm_m1_not_transposed", "Gemm", [f32(1, 37), f32(37, 45)], {}, 13, (1,), 1, 1e-5),
    ("matmul_2d", "MatMul", [f32(7, 9), f32(9, 5)], {}, 13, (), 1, 1e-5),
    ("matmul_1d_2d", "MatMul", [f32(9), f32(9, 5)], {}, 13, (), 1, 1e-5),
    ("matmul_2d_1d", "MatMul", [f32(7, 9), f32(9)], {}, 13, (), 1, 1e-5),
    ("matmul_batched_const_b", "MatMul", [f32(2, 3, 6, 8), f32(8, 4)], {}, 13, (1,), 1, 1e-5),
    ("matmul_broadcast", "MatMul", [f32(2, 1, 4, 5), f32(3, 5, 2)], {}, 13, (), 1, 1e-5),
    # --- normalisation ----------------------------------------------------------------------
    ("batchnorm_const", "BatchNormalization", [f32(2, 3, 4, 5), f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)], dict(epsilon=1e-3), 15, (1, 2, 3, 4), 1, 1e-5),
    ("batchnorm_9_inference", "BatchNormalization", [f32(1, 4, 3, 3), f32(4), f32(4), f32(4), f32(4, lo=0.5, hi=2)], {}, 9, (1, 2, 3, 4), 1, 1e-5),
    ("batchnorm_inputs_rank2", "BatchNormalization", [f32(4, 6), f32(6), f32(6), f32(6), f32(6, lo=0.5, hi=2)], {}, 15, (), 1, 1e-5),
    ("layernorm_last", "LayerNormalization", [f32(2, 3, 8), f32(8), f32(8)], {}, 17, (), 1, 1e-5),
    ("layernorm_axis1_outputs", "LayerNormalization", [f32(2, 3, 4), f32(3, 4), f32(3, 4)], dict(axis=1, epsilon=1e-3), 17, (), 3, 1e-5),
    ("layernorm_no_bias", "LayerNormalization", [f32(5, 6), f32(6)], dict(axis=-1), 17, (), 1, 1e-5),
    ("softmax_13_axis_last", "Softmax", [f32(2, 3, 5, lo=-5, hi=5)], {}, 13, (), 1, 1e-6),
    ("softmax_13_axis0", "Softmax", [f32(4, 3)], dict(axis=0), 13, (), 1, 1e-6),
    ("softmax_11_coerced", "Softmax", [f32(2, 3, 4)], dict(axis=1), 11, (), 1, 1e-6),
    ("logsoftmax_13", "LogSoftmax", [f32(3, 7, lo=-20, hi=20)], dict(axis=1), 13, (), 1, 1e-5),
    ("lrn_5", "LRN", [f32(1, 10, 6, 6)], dict(size=5, alpha=1e-2, beta=0.75, bias=2.0), 13, (), 1, 1e-5),
    ("lrn_3_beta", "LRN", [f32(2, 7, 3, 4)], dict(size=3, alpha=0.1, beta=0.5), 13, (), 1, 1e-5),
    # --- activations / unary ------------------------------------------------------------------
    ("relu", "Relu", [f32(3, 4, 5)], {}, 14, (), 1, 0),
    ("leakyrelu", "LeakyRelu", [f32(3, 4)], dict(alpha=0.2), 16, (), 1, 1e-6),
    ("sigmoid_wide", "Sigmoid", [f32(100, lo=-60, hi=60)], {}, 13, (), 1, 1e-6),
    ("tanh", "Tanh", [f32(50, lo=-5, hi=5)], {}, 13, (), 1, 1e-6),
    ("clip_6_attrs", "Clip", [f32(20)], dict(min=-0.3, max=0.4), 6, (), 1, 0),
    ("clip_13_inputs", "Clip", [f32(20), np.array(-0.2, np.float32), np.array(0.5, np.float32)], {}, 13, (), 1, 0),
    ("clip_13_min_only", "Clip", [f32(20), np.array(0.1, np.float32)], {}, 13, (), 1, 0),
    ("clip_13_max_only", "Clip", [f32(20), None, np.array(0.1, np.float32)], {}, 13, (), 1, 0),
    ("erf", "Erf", [f32(40, lo=-3, hi=3)], {}, 13, (), 1, 1e-6),
    ("gelu", "Gelu", [f32(40, lo=-4, hi=4)], {}, 20, (), 1, 1e-5),
    ("gelu_tanh", "Gelu", [f32(40, lo=-4, hi=4)], dict(approximate="tanh"), 20, (), 1, 1e-5),
    ("sqrt", "Sqrt", [f32(30, lo=0, hi=9)], {}, 13, (), 1, 1e-6),
    ("exp", "Exp", [f32(30, lo=-5, hi=5)], {}, 13, (), 1, 1e-6),
    ("log", "Log", [f32(30, lo=0.01, hi=9)], {}, 13, (), 1, 1e-6),
    ("identity_int64", "Identity", [i64(1, 2, 3)], {}, 16, (), 1, 0),
    ("dropout_inference_mask", "Dropout", [f32(3, 4)], {}, 13, (), 2, 0),
    ("dropout_7", "Dropout", [f32(3, 4)], dict(ratio=0.3), 7, (), 1, 0),
    # --- binary / variadic ----------------------------------------------------------------------
    ("add_broadcast", "Add", [f32(3, 1, 5), f32(4, 5)], {}, 14, (), 1, 0),
    ("sub_scalar", "Sub", [f32(2, 3), np.array(0.5, np.float32)], {}, 14, (), 1, 0),
    ("mul_per_channel", "Mul", [f32(1, 4, 3, 3), f32(4, 1, 1)], {}, 14, (1,), 1, 0),
    ("div", "Div", [f32(6, 7), f32(7, lo=0.5, hi=2)], {}, 14, (), 1, 1e-6),
    ("add_int64", "Add", [i64(1, 2, 3), i64(10)], {}, 14, (), 1, 0),
    ("div_int64", "Div", [i64(7, -7, 9), i64(2, 2, -4)], {}, 14, (), 1, 0),
    ("mul_int32", "Mul", [np.array([[1, 2], [3, 4]], np.int32), np.array([5, -6], np.int32)], {}, 14, (), 1, 0),
    ("pow_float", "Pow", [f32(10, lo=0.1, hi=3), f32(10, lo=-2, hi=2)], {}, 15, (), 1, 1e-5),
    ("pow_float_int_exp", "Pow", [f32(10, lo=-3, hi=3), i64(2)], {}, 15, (), 1, 1e-5),
    ("pow_int_float_exp", "Pow", [i64(2, 3, 4), np.array([2.0, 0.5, 3.0], np.float32)], {}, 15, (), 1, 0),
    ("sum_three_broadcast", "Sum", [f32(2, 3), f32(3), f32(2, 1)], {}, 13, (), 1, 1e-6),
    ("sum_one", "Sum", [f32(4)], {}, 13, (), 1, 0),
    ("max_variadic", "Max", [f32(2, 3), f32(3), f32(2, 3)], {}, 13, (), 1, 0),
    ("min_variadic", "Min", [f32(2, 3), f32(1, 3)], {}, 13, (), 1, 0),
    ("max_int64", "Max", [i64(1, 5, 3), i64(4, 2, 6)], {}, 13, (), 1, 0),
    ("mean", "Mean", [f32(2, 3), f32(2, 3), f32(3)], {}, 13, (), 1, 1e-6),
    ("equal_float", "Equal", [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 0.0, 3.0], np.float32)], {}, 13, (), 1, 0),
    ("equal_int64_broadcast", "Equal", [i64(1, 2, 3).reshape(3, 1), i64(1, 2)], {}, 13, (), 1, 0),
    ("where_broadcast", "Where", [R.random((3, 1)) > 0.5, f32(3, 4), f32(4)], {}, 16, (), 1, 0),
    ("where_int64", "Where", [np.array([True, False, True]), i64(1, 2, 3), i64(-1)], {}, 16, (), 1, 0),
    # --- pooling ------------------------------------------------------------------------------------
    ("maxpool_3x3_s2_p1", "MaxPool", [f32(1, 3, 11, 11)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 12, (), 1, 0),
    ("maxpool_ceil", "MaxPool", [f32(1, 2, 10, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 12, (), 1, 0),
    ("maxpool_dilation", "MaxPool", [f32(1, 2, 9, 9)], dict(kernel_shape=[2, 2], dilations=[2, 2]), 12, (), 1, 0),
    ("maxpool_same_upper", "MaxPool", [f32(1, 2, 7, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), 12, (), 1, 0),
    ("maxpool_1d", "MaxPool", [f32(2, 3, 12)], dict(kernel_shape=[4], strides=[3], pads=[1, 2]), 12, (), 1, 0),
    ("maxpool_3d", "MaxPool", [f32(1, 2, 5, 6, 7)], dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2]), 12, (), 1, 0),
    ("avgpool_pads_exclude", "AveragePool", [f32(1, 3, 7, 7)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 19, (), 1, 1e-6),
    ("avgpool_pads_include", "AveragePool", [f32(1, 3, 7, 7)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 19, (), 1, 1e-6),
    ("avgpool_ceil", "AveragePool", [f32(1, 2, 8, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 19, (), 1, 1e-6),
    ("avgpool_ceil_include_pad", "AveragePool", [f32(1, 2, 6, 6)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1), 19, (), 1, 1e-6),
    ("avgpool_stride2_asym", "AveragePool", [f32(1, 2, 9, 8)], dict(kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0]), 19, (), 1, 1e-6),
    ("globalavgpool", "GlobalAveragePool", [f32(2, 5, 6, 7)], {}, 1, (), 1, 1e-6),
    ("globalmaxpool", "GlobalMaxPool", [f32(2, 5, 3, 3, 2)], {}, 1, (), 1, 0),
    # --- shape and data movement ------------------------------------------------------------------
    ("concat_axis1", "Concat", [f32(1, 2, 3), f32(1, 4, 3), f32(1, 1, 3)], dict(axis=1), 13, (), 1, 0),
    ("concat_neg_axis_int64", "Concat", [i64(1, 2).reshape(1, 2), i64(3, 4, 5).reshape(1, 3)], dict(axis=-1), 13, (), 1, 0),
    ("split_equal", "Split", [f32(6, 4)], dict(axis=0), 13, (), 3, 0),
    ("split_sizes_input", "Split", [f32(3, 7), i64(2, 5)], dict(axis=1), 13, (1,), 2, 0),
    ("split_attr_11", "Split", [f32(5, 2)], dict(axis=0, split=[1, 4]), 11, (), 2, 0),
    ("split_num_outputs_uneven", "Split", [f32(7, 2)], dict(axis=0, num_outputs=3), 18, (), 3, 0),
    ("reshape_minus1_zero", "Reshape", [f32(2, 3, 4), i64(0, -1)], {}, 14, (1,), 1, 0),
    ("reshape_allowzero", "Reshape", [f32(0, 3), i64(3, 0)], dict(allowzero=1), 14, (1,), 1, 0),
    ("reshape_shape_input", "Reshape", [f32(2, 6), i64(3, 2, 2)], {}, 14, (), 1, 0),
    ("flatten_axis0", "Flatten", [f32(2, 3, 4)], dict(axis=0), 13, (), 1, 0),
    ("flatten_neg_axis", "Flatten", [f32(2, 3, 4, 5)], dict(axis=-2), 13, (), 1, 0),
    ("transpose_default", "Transpose", [f32(2, 3, 4)], {}, 13, (), 1, 0),
    ("transpose_shuffle5d", "Transpose", [f32(1, 4, 3, 5, 6)], dict(perm=[0, 2, 1, 3, 4]), 13, (), 1, 0),
    ("transpose_int64", "Transpose", [i64(*range(6)).reshape(2, 3)], dict(perm=[1, 0]), 13, (), 1, 0),
    ("squeeze_axes_input", "Squeeze", [f32(1, 3, 1, 2), i64(0, -2)], {}, 13, (1,), 1, 0),
    ("squeeze_all", "Squeeze", [f32(1, 3, 1, 2)], {}, 13, (), 1, 0),
    ("unsqueeze_11_attr", "Unsqueeze", [f32(3, 4)], dict(axes=[0, 3]), 11, (), 1, 0),
    ("unsqueeze_13_neg", "Unsqueeze", [f32(3, 4), i64(-1, 1)], {}, 13, (1,), 1, 0),
    ("slice_steps_negative", "Slice", [f32(5, 6), i64(4, 1), i64(0, 100), i64(0, 1), i64(-1, 2)], {}, 13, (1, 2, 3, 4), 1, 0),
    ("slice_clamp_axes", "Slice", [f32(4, 5, 6), i64(-100, 2), i64(3, 1000), i64(2, 0)], {}, 13, (1, 2, 3), 1, 0),
    ("slice_9_attrs", "Slice", [f32(4, 5)], dict(starts=[1, 0], ends=[3, -1], axes=[0, 1]), 9, (), 1, 0),
    ("slice_runtime_starts", "Slice", [f32(6, 4), i64(1), i64(5)], {}, 13, (), 1, 0),
    ("gather_axis0_neg", "Gather", [f32(5, 3), i64(0, -1, 2)], {}, 13, (1,), 1, 0),
    ("gather_axis1_2d_idx", "Gather", [f32(2, 6, 3), i64(1, 5, 0, 2).reshape(2, 2)], dict(axis=1), 13, (), 1, 0),
    ("gather_int32_idx", "Gather", [i64(10, 20, 30), np.array([2, 0], np.int32)], {}, 13, (), 1, 0),
    ("shape", "Shape", [f32(2, 3, 4)], {}, 13, (), 1, 0),
    ("shape_start_end", "Shape", [f32(2, 3, 4, 5)], dict(start=1, end=-1), 15, (), 1, 0),
    ("cast_f32_i64", "Cast", [f32(8, lo=-9, hi=9)], dict(to=7), 13, (), 1, 0),
    ("cast_i64_f32", "Cast", [i64(1, -2, 3)], dict(to=1), 13, (), 1, 0),
    ("cast_f32_bool", "Cast", [np.array([0.0, 1.5, -2.0], np.float32)], dict(to=9), 13, (), 1, 0),
    ("cast_bool_f32", "Cast", [np.array([True, False])], dict(to=1), 13, (), 1, 0),
    ("cast_i32_f64", "Cast", [np.array([1, 2], np.int32)], dict(to=11), 13, (), 1, 0),
    ("expand", "Expand", [f32(3, 1), i64(2, 3, 4)], {}, 13, (1,), 1, 0),
    # --- reductions --------------------------------------------------------------------------------
    ("reducemean_keep", "ReduceMean", [f32(2, 3, 4)], dict(axes=[1]), 13, (), 1, 1e-6),
    ("reducemean_18_input_nokeep", "ReduceMean", [f32(2, 3, 4), i64(0, 2)], dict(keepdims=0), 18, (1,), 1, 1e-6),
    ("reducemean_all", "ReduceMean", [f32(2, 3, 4)], dict(keepdims=0), 18, (), 1, 1e-6),
    ("reducesum_13_input", "ReduceSum", [f32(3, 4, 5), i64(-1)], {}, 13, (1,), 1, 1e-5),
    ("reducesum_noop_empty", "ReduceSum", [f32(3, 4)], dict(noop_with_empty_axes=1), 13, (), 1, 0),
    ("reducesum_11_attr", "ReduceSum", [f32(3, 4, 5)], dict(axes=[0, 2], keepdims=0), 11, (), 1, 1e-5),
    ("reducemax_18", "ReduceMax", [f32(4, 5, 6), i64(1)], dict(keepdims=1), 18, (1,), 1, 0),
    ("reducemax_separated_axes", "ReduceMax", [f32(3, 4, 5, 2), i64(0, 2)], {}, 18, (1,), 1, 0),
    # --- misc ----------------------------------------------------------------------------------------
    ("constantofshape_int64", "ConstantOfShape", [i64(2, 3)], dict(value=__import__("onnx").numpy_helper.from_array(np.array([7], np.int64))), 9, (), 1, 0),
    ("constantofshape_default", "ConstantOfShape", [i64(4)], {}, 9, (), 1, 0),
    ("pad_constant_value", "Pad", [f32(2, 3), i64(1, 0, 2, 3), np.array(1.5, np.float32)], {}, 18, (1, 2), 1, 0),
    ("pad_reflect", "Pad", [f32(3, 4), i64(0, 2, 0, 3)], dict(mode="reflect"), 18, (1,), 1, 0),
    ("pad_edge", "Pad", [f32(1, 2, 3, 3), i64(0, 0, 1, 2, 0, 0, 2, 1)], dict(mode="edge"), 18, (1,), 1, 0),
    ("pad_wrap", "Pad", [f32(3, 4), i64(1, 2, 2, 1)], dict(mode="wrap"), 19, (1,), 1, 0),
    ("pad_negative", "Pad", [f32(4, 5), i64(-1, 1, 0, -2)], {}, 18, (1,), 1, 0),
    ("pad_axes", "Pad", [f32(2, 3, 4), i64(1, 2), None, i64(-1)], {}, 18, (1, 3), 1, 0),
    ("pad_2_attrs", "Pad", [f32(2, 3)], dict(pads=[0, 1, 1, 0], value=-1.0), 2, (), 1, 0),
    ("argmax_keep", "ArgMax", [f32(3, 4, 5)], dict(axis=1), 13, (), 1, 0),
    ("argmax_nokeep_last", "ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], dict(axis=-1, keepdims=0, select_last_index=1), 13, (), 1, 0),
    ("argmax_first_tie", "ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], dict(axis=1, keepdims=0), 13, (), 1, 0),
]


# Cases where onnx.reference departs from the ONNX spec; onnxruntime is the reference there.
ORT_IS_REFERENCE = {
    # Softmax/LogSoftmax before opset 13 coerce the input to 2-D at `axis`; onnx.reference
    # normalises over `axis` alone.
    "softmax_11_coerced",
    # LRN: onnx.reference loops over the batch instead of the channels.
    "lrn_5", "lrn_3_beta",
    # GlobalMaxPool on 3 spatial dims: onnx.reference keeps an extra axis.
    "globalmaxpool",
    # BatchNormalization 9..14: onnx.reference computes batch statistics (training) whenever
    # momentum has its default; inference uses the given mean and variance.
    "batchnorm_9_inference",
    # Negative pads (cropping): onnx.reference hands them to numpy.pad, which refuses them.
    "pad_negative",
}


def onnxruntime_reference(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnx_reference(rt, case):
    name, op, inputs, attrs, opset, consts, nout, tol = case
    model, feeds = one_node_model(op, inputs, attrs, outputs=nout, opset=opset, const_inputs=consts)
    got, assignment = run_cpu(rt, model, feeds, kernel_level(model))
    assert set(assignment.values()) == {"cpu"}, f"{name}: not run on the cpu backend: {assignment}"
    want = (onnxruntime_reference if name in ORT_IS_REFERENCE else reference)(model, feeds)
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        if op == "Dropout" and j == 1 and w.dtype != g.dtype:
            w = w.astype(g.dtype)  # mask type: bool from opset 10
        assert_close(g, w, rtol=tol, atol=tol, what=f"{name} output {j}")

"""The ops added for model coverage (Resize/Upsample, ConvTranspose, normalisations, RNN/GRU/LSTM,
quantized ops, Einsum, NonMaxSuppression, RoiAlign, GridSample, MaxUnpool, Col2Im, Det, DFT/STFT,
MaxRoiPool) on random inputs and weights against onnxruntime, with 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, one_node_model, onnxruntime_run, run_cpu
from onnx import TensorProto, helper, numpy_helper

import nnplug

R = np.random.default_rng(4321)


def f32(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float64)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def fl(*vals):
    return np.array(vals, dtype=np.float32)


def u8(*shape):
    return R.integers(0, 256, shape).astype(np.uint8)


def i8(*shape):
    return R.integers(-128, 128, shape).astype(np.int8)


NONE = None
E = np.array([], np.float32)  # an empty optional input

# (id, op, inputs, attrs, opset, const_inputs, outputs, tolerance)
CASES = [
    # --- Resize / Upsample ------------------------------------------------------------------
    ("resize_nearest_scales_2x", "Resize", [f32(1, 3, 5, 7), NONE, fl(1, 1, 2, 2)], dict(mode="nearest"), 19, (2,), 1, 0),
    ("resize_nearest_asymmetric_floor", "Resize", [f32(2, 2, 6, 5), NONE, fl(1, 1, 1.7, 0.6)], dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), 19, (2,), 1, 0),
    ("resize_nearest_round_prefer_ceil_sizes", "Resize", [f32(1, 2, 7, 9), NONE, NONE, i64(1, 2, 12, 4)], dict(mode="nearest", nearest_mode="round_prefer_ceil"), 19, (3,), 1, 0),
    ("resize_nearest_ceil_align_corners", "Resize", [f32(1, 1, 4, 6), NONE, NONE, i64(1, 1, 9, 5)], dict(mode="nearest", nearest_mode="ceil", coordinate_transformation_mode="align_corners"), 19, (3,), 1, 0),
    ("resize_nearest_tf_half_pixel_for_nn", "Resize", [f32(1, 1, 5, 5), E, fl(1, 1, 1.5, 2.5)], dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"), 11, (1, 2), 1, 0),
    ("resize_nearest_int32_input", "Resize", [np.arange(24, dtype=np.int32).reshape(1, 2, 3, 4), NONE, fl(1, 1, 2, 3)], dict(mode="nearest"), 19, (2,), 1, 0),
    ("resize_nearest_uint8_pytorch_half_pixel", "Resize", [u8(1, 3, 8, 8), NONE, NONE, i64(1, 3, 5, 11)], dict(mode="nearest", coordinate_transformation_mode="pytorch_half_pixel"), 19, (3,), 1, 0),
    ("resize_nearest_scales_runtime", "Resize", [f32(1, 2, 4, 4), NONE, fl(1, 1, 3, 0.5)], dict(mode="nearest"), 19, (), 1, 0),
    ("resize_linear_half_pixel_up", "Resize", [f32(1, 3, 6, 7), NONE, fl(1, 1, 2, 1.5)], dict(mode="linear"), 19, (2,), 1, 1e-5),
    ("resize_linear_half_pixel_down", "Resize", [f32(2, 2, 9, 10), NONE, fl(1, 1, 0.5, 0.35)], dict(mode="linear"), 19, (2,), 1, 1e-5),
    ("resize_linear_align_corners_sizes", "Resize", [f32(1, 4, 5, 6), NONE, NONE, i64(1, 4, 11, 13)], dict(mode="linear", coordinate_transformation_mode="align_corners"), 19, (3,), 1, 1e-5),
    ("resize_linear_asymmetric", "Resize", [f32(1, 2, 5, 5), NONE, fl(1, 1, 2.5, 1.3)], dict(mode="linear", coordinate_transformation_mode="asymmetric"), 19, (2,), 1, 1e-5),
    ("resize_linear_pytorch_half_pixel_to_1", "Resize", [f32(1, 2, 6, 5), NONE, NONE, i64(1, 2, 1, 8)], dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), 19, (3,), 1, 1e-5),
    ("resize_linear_half_pixel_symmetric", "Resize", [f32(1, 2, 5, 6), NONE, fl(1, 1, 1.7, 0.6)], dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), 19, (2,), 1, 1e-5),
    ("resize_linear_tf_crop_extrapolation", "Resize", [f32(1, 1, 6, 6), fl(0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4), NONE, i64(1, 1, 5, 7)], dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0), 19, (1, 3), 1, 1e-5),
    ("resize_linear_3d_trilinear", "Resize", [f32(1, 2, 3, 4, 5), NONE, fl(1, 1, 2, 1.5, 0.8)], dict(mode="linear"), 19, (2,), 1, 1e-5),
    ("resize_linear_1d_rank3", "Resize", [f32(2, 3, 10), NONE, NONE, i64(2, 3, 23)], dict(mode="linear", coordinate_transformation_mode="align_corners"), 19, (3,), 1, 1e-5),
    ("resize_linear_axes_sizes", "Resize", [f32(1, 3, 6, 8), NONE, NONE, i64(12, 5)], dict(mode="linear", axes=[2, 3]), 19, (3,), 1, 1e-5),
    ("resize_linear_keep_aspect_not_larger", "Resize", [f32(1, 1, 6, 8), NONE, NONE, i64(9, 9)], dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger"), 19, (3,), 1, 1e-5),
    ("resize_linear_keep_aspect_not_smaller", "Resize", [f32(1, 1, 6, 8), NONE, NONE, i64(9, 9)], dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_smaller"), 19, (3,), 1, 1e-5),
    # an image upsampled (the width's pass first, then whole rows: the vector loops and their
    # tails), a 1x1 map broadcast, and a wide cubic upsampling (four taps per row)
    ("resize_linear_segmentation_head_16x", "Resize", [f32(1, 5, 20, 21), NONE, NONE, i64(1, 5, 320, 333)], dict(mode="linear"), 19, (3,), 1, 1e-5),
    ("resize_linear_1x1_map_broadcast", "Resize", [f32(1, 40, 1, 1), NONE, NONE, i64(1, 40, 20, 19)], dict(mode="linear"), 19, (3,), 1, 1e-5),
    ("resize_cubic_wide_upsampling", "Resize", [f32(1, 2, 9, 37), NONE, fl(1, 1, 3.5, 2)], dict(mode="cubic"), 19, (2,), 1, 1e-5),
    ("resize_cubic_half_pixel_up", "Resize", [f32(1, 2, 6, 7), NONE, fl(1, 1, 2, 1.5)], dict(mode="cubic"), 19, (2,), 1, 1e-5),
    ("resize_cubic_exclude_outside_a05", "Resize", [f32(1, 2, 8, 8), NONE, fl(1, 1, 0.6, 1.7)], dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), 19, (2,), 1, 1e-5),
    ("resize_cubic_align_corners_sizes", "Resize", [f32(2, 1, 5, 5), NONE, NONE, i64(2, 1, 9, 3)], dict(mode="cubic", coordinate_transformation_mode="align_corners"), 19, (3,), 1, 1e-5),
    ("resize_cubic_asymmetric", "Resize", [f32(1, 1, 7, 4), NONE, fl(1, 1, 1.5, 3)], dict(mode="cubic", coordinate_transformation_mode="asymmetric"), 19, (2,), 1, 1e-5),
    ("resize_cubic_antialias_upscale", "Resize", [f32(1, 1, 5, 6), NONE, fl(1, 1, 2, 1.5)], dict(mode="cubic", antialias=1), 19, (2,), 1, 1e-5),
    ("resize_linear_antialias_down", "Resize", [f32(1, 2, 13, 11), NONE, fl(1, 1, 0.6, 0.5)], dict(mode="linear", antialias=1), 19, (2,), 1, 1e-5),
    ("resize_cubic_antialias_down_exclude_outside", "Resize", [f32(1, 2, 13, 11), NONE, fl(1, 1, 0.5, 0.8)], dict(mode="cubic", antialias=1, exclude_outside=1, cubic_coeff_a=-0.5), 19, (2,), 1, 1e-5),
    ("resize_cubic_antialias_sizes_asymmetric", "Resize", [f32(1, 1, 16, 12), NONE, NONE, i64(1, 1, 5, 9)], dict(mode="cubic", antialias=1, coordinate_transformation_mode="asymmetric"), 19, (3,), 1, 1e-5),
    ("resize_linear_antialias_pytorch_half_pixel_mixed", "Resize", [f32(2, 3, 20, 8), NONE, NONE, i64(6, 12)], dict(mode="linear", antialias=1, axes=[2, 3], coordinate_transformation_mode="pytorch_half_pixel"), 19, (3,), 1, 1e-5),
    ("resize_11_linear_empty_roi_scales", "Resize", [f32(1, 3, 4, 5), E, fl(1, 1, 2, 2)], dict(mode="linear"), 11, (1, 2), 1, 1e-5),
    ("resize_13_nearest_sizes_only", "Resize", [f32(1, 2, 5, 5), NONE, NONE, i64(1, 2, 8, 3)], dict(mode="nearest"), 13, (3,), 1, 0),
    ("resize_10_nearest_downsample", "Resize", [f32(1, 1, 6, 8), fl(1, 1, 0.6, 0.4)], dict(mode="nearest"), 10, (1,), 1, 0),
    ("resize_10_linear", "Resize", [f32(1, 2, 4, 5), fl(1, 1, 2, 1.5)], dict(mode="linear"), 10, (1,), 1, 1e-5),
    ("upsample_9_nearest", "Upsample", [f32(1, 2, 3, 4), fl(1, 1, 2, 3)], dict(mode="nearest"), 9, (1,), 1, 0),
    ("upsample_9_linear", "Upsample", [f32(1, 2, 3, 4), fl(1, 1, 2, 2)], dict(mode="linear"), 9, (1,), 1, 1e-5),
    ("upsample_7_attr_scales", "Upsample", [f32(1, 2, 3, 4)], dict(mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]), 7, (), 1, 0),
    ("resize_nearest_big_2threads", "Resize", [f32(2, 8, 40, 40), NONE, fl(1, 1, 2, 2)], dict(mode="nearest"), 19, (2,), 1, 0),
    # nearest over height and width at once: extrapolated rows and columns, 2-byte
    # elements, and the 2x row doubling over whole vectors and a tail
    ("resize_nearest_tf_crop_extrapolation", "Resize", [f32(1, 2, 6, 6), fl(0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4), NONE, i64(1, 2, 5, 7)], dict(mode="nearest", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0), 19, (1, 3), 1, 0),
    ("resize_nearest_float16_sizes", "Resize", [f32(1, 3, 5, 6).astype(np.float16), NONE, NONE, i64(1, 3, 11, 4)], dict(mode="nearest"), 19, (3,), 1, 0),
    ("resize_nearest_2x_wide_2threads", "Resize", [f32(1, 16, 24, 48), NONE, fl(1, 1, 2, 2)], dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), 19, (2,), 1, 0),
    ("resize_nearest_rank3_4x", "Resize", [f32(3, 5, 21), NONE, fl(1, 4, 4)], dict(mode="nearest"), 19, (2,), 1, 0),
    ("resize_linear_big_2threads", "Resize", [f32(2, 8, 40, 40), NONE, fl(1, 1, 2, 2)], dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), 19, (2,), 1, 1e-5),
    # --- ConvTranspose -------------------------------------------------------------------------
    ("convtranspose_3x3_s1", "ConvTranspose", [f32(1, 3, 5, 6), f32(3, 4, 3, 3), f32(4)], {}, 18, (1, 2), 1, 1e-5),
    ("convtranspose_s2_pads_output_padding", "ConvTranspose", [f32(2, 4, 5, 5), f32(4, 3, 3, 3), f32(3)], dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), 18, (1, 2), 1, 1e-5),
    ("convtranspose_asym_pads_dilation", "ConvTranspose", [f32(1, 2, 6, 4), f32(2, 3, 2, 3)], dict(strides=[1, 2], dilations=[2, 1], pads=[0, 1, 2, 0]), 18, (1,), 1, 1e-5),
    ("convtranspose_group2", "ConvTranspose", [f32(1, 4, 5, 5), f32(4, 3, 3, 3), f32(6)], dict(group=2, strides=[2, 2]), 18, (1, 2), 1, 1e-5),
    ("convtranspose_depthwise_k4_s2", "ConvTranspose", [f32(1, 8, 6, 6), f32(8, 1, 4, 4)], dict(group=8, strides=[2, 2], pads=[1, 1, 1, 1]), 18, (1,), 1, 1e-5),
    ("convtranspose_output_shape", "ConvTranspose", [f32(1, 2, 4, 4), f32(2, 3, 3, 3)], dict(strides=[2, 2], output_shape=[9, 10]), 18, (1,), 1, 1e-5),
    ("convtranspose_output_shape_odd_total", "ConvTranspose", [f32(1, 2, 4, 4), f32(2, 3, 3, 3)], dict(strides=[2, 2], output_shape=[8, 7]), 18, (1,), 1, 1e-5),
    ("convtranspose_same_upper", "ConvTranspose", [f32(1, 2, 5, 4), f32(2, 3, 4, 3)], dict(strides=[2, 2], auto_pad="SAME_UPPER"), 18, (1,), 1, 1e-5),
    ("convtranspose_same_lower", "ConvTranspose", [f32(1, 2, 5, 4), f32(2, 3, 4, 3)], dict(strides=[2, 2], auto_pad="SAME_LOWER"), 18, (1,), 1, 1e-5),
    ("convtranspose_valid", "ConvTranspose", [f32(1, 2, 3, 3), f32(2, 2, 3, 3)], dict(strides=[2, 2], auto_pad="VALID"), 18, (1,), 1, 1e-5),
    ("convtranspose_1d_stride3", "ConvTranspose", [f32(2, 3, 7), f32(3, 5, 4), f32(5)], dict(strides=[3], pads=[1, 2], output_padding=[2]), 18, (1, 2), 1, 1e-5),
    ("convtranspose_3d_stride_pads", "ConvTranspose", [f32(1, 2, 3, 4, 3), f32(2, 3, 2, 3, 2), f32(3)], dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0]), 18, (1, 2), 1, 1e-5),
    ("convtranspose_3d_group_output_shape", "ConvTranspose", [f32(2, 4, 3, 3, 2), f32(4, 1, 3, 2, 2)], dict(group=2, strides=[2, 2, 2], output_shape=[8, 6, 5]), 18, (1,), 1, 1e-5),
    ("convtranspose_weights_as_input", "ConvTranspose", [f32(1, 3, 4, 4), f32(3, 2, 3, 3), f32(2)], dict(strides=[2, 2]), 18, (), 1, 1e-5),
    ("convtranspose_unet_up_2threads", "ConvTranspose", [f32(2, 32, 16, 16), f32(32, 16, 2, 2), f32(16)], dict(strides=[2, 2]), 18, (1, 2), 1, 1e-4),
    ("convtranspose_big_k4_2threads", "ConvTranspose", [f32(1, 24, 20, 20), f32(24, 12, 4, 4), f32(12)], dict(strides=[2, 2], pads=[1, 1, 1, 1]), 18, (1, 2), 1, 1e-4),
    # --- normalisation ---------------------------------------------------------------------------
    ("instancenorm_4d", "InstanceNormalization", [f32(2, 3, 5, 6, hi=4), f32(3), f32(3)], dict(epsilon=1e-3), 6, (1, 2), 1, 1e-5),
    ("instancenorm_3d_input_params", "InstanceNormalization", [f32(3, 4, 7), f32(4), f32(4)], {}, 6, (), 1, 1e-5),
    ("instancenorm_big_2threads", "InstanceNormalization", [f32(2, 16, 32, 32), f32(16), f32(16)], {}, 6, (1, 2), 1, 1e-5),
    ("instancenorm_long_rows_with_a_tail", "InstanceNormalization", [f32(1, 3, 20003), f32(3), f32(3)], {}, 6, (1, 2), 1, 1e-5),
    ("groupnorm_21_one_channel_per_group", "GroupNormalization", [f32(2, 6, 4, 3), f32(6), f32(6)], dict(num_groups=6, epsilon=1e-4), 21, (), 1, 1e-5),
    ("groupnorm_21_per_channel", "GroupNormalization", [f32(2, 6, 4, 3), f32(6), f32(6)], dict(num_groups=2), 21, (1, 2), 1, 1e-5),
    ("lpnorm_l2_last", "LpNormalization", [f32(3, 4, 5)], {}, 1, (), 1, 1e-6),
    ("lpnorm_l1_axis0", "LpNormalization", [f32(3, 4, 5)], dict(axis=0, p=1), 1, (), 1, 1e-6),
    ("lpnorm_l2_float64_axis1", "LpNormalization", [f64(2, 6, 3)], dict(axis=1), 1, (), 1, 1e-12),
    # --- RNN / GRU / LSTM (T=5, batch 3, input 4, hidden 6) --------------------------------------
    ("rnn_forward_defaults", "RNN", [f32(5, 3, 4), f32(1, 6, 4), f32(1, 6, 6)], dict(hidden_size=6), 14, (1, 2), 2, 1e-5),
    ("rnn_bidirectional_bias_h0", "RNN", [f32(5, 3, 4), f32(2, 6, 4), f32(2, 6, 6), f32(2, 12), NONE, f32(2, 3, 6)], dict(hidden_size=6, direction="bidirectional"), 14, (1, 2, 3), 2, 1e-5),
    ("rnn_reverse_seq_lens_relu", "RNN", [f32(5, 3, 4), f32(1, 6, 4), f32(1, 6, 6), f32(1, 12), np.array([5, 2, 3], np.int32)], dict(hidden_size=6, direction="reverse", activations=["Relu"]), 14, (1, 2, 3), 2, 1e-5),
    ("gru_forward_defaults", "GRU", [f32(5, 3, 4), f32(1, 18, 4), f32(1, 18, 6)], dict(hidden_size=6), 14, (1, 2), 2, 1e-5),
    ("gru_linear_before_reset_bias", "GRU", [f32(5, 3, 4), f32(1, 18, 4), f32(1, 18, 6), f32(1, 36)], dict(hidden_size=6, linear_before_reset=1), 14, (1, 2, 3), 2, 1e-5),
    ("gru_bidirectional_seq_lens_h0", "GRU", [f32(5, 3, 4), f32(2, 18, 4), f32(2, 18, 6), f32(2, 36), np.array([3, 5, 1], np.int32), f32(2, 3, 6)], dict(hidden_size=6, direction="bidirectional"), 14, (1, 2, 3), 2, 1e-5),
    ("gru_reverse_clip_activations", "GRU", [f32(5, 3, 4, lo=-3, hi=3), f32(1, 18, 4), f32(1, 18, 6), f32(1, 36)], dict(hidden_size=6, direction="reverse", clip=0.7, activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3], activation_beta=[0.4]), 14, (1, 2, 3), 2, 1e-5),
    ("gru_only_y_h", "GRU", [f32(5, 3, 4), f32(1, 18, 4), f32(1, 18, 6)], dict(hidden_size=6), 14, (1, 2), 2, 1e-5),
    ("lstm_forward_defaults", "LSTM", [f32(5, 3, 4), f32(1, 24, 4), f32(1, 24, 6)], dict(hidden_size=6), 14, (1, 2), 3, 1e-5),
    ("lstm_bidirectional_all_inputs", "LSTM", [f32(5, 3, 4), f32(2, 24, 4), f32(2, 24, 6), f32(2, 48), np.array([4, 5, 2], np.int32), f32(2, 3, 6), f32(2, 3, 6), f32(2, 18)], dict(hidden_size=6, direction="bidirectional"), 14, (1, 2, 3, 7), 3, 1e-5),
    ("lstm_reverse_peepholes_clip", "LSTM", [f32(5, 3, 4, lo=-3, hi=3), f32(1, 24, 4), f32(1, 24, 6), f32(1, 48), NONE, NONE, NONE, f32(1, 18)], dict(hidden_size=6, direction="reverse", clip=1.5), 14, (1, 2, 3, 7), 3, 1e-5),
    ("lstm_input_forget", "LSTM", [f32(5, 3, 4), f32(1, 24, 4), f32(1, 24, 6), f32(1, 48)], dict(hidden_size=6, input_forget=1), 14, (1, 2, 3), 3, 1e-5),
    ("lstm_activations_alpha_beta", "LSTM", [f32(5, 3, 4), f32(1, 24, 4), f32(1, 24, 6)], dict(hidden_size=6, activations=["HardSigmoid", "LeakyRelu", "ScaledTanh"], activation_alpha=[0.25, 0.1, 0.9], activation_beta=[0.45, 1.2]), 14, (1, 2), 3, 1e-5),
    ("lstm_weights_as_inputs_2threads", "LSTM", [f32(7, 4, 16), f32(2, 64, 16), f32(2, 64, 16), f32(2, 128)], dict(hidden_size=16, direction="bidirectional"), 14, (), 3, 1e-5),
    # --- quantization (ties x = (k + 0.5) * scale round to even) ----------------------------------
    ("quantize_uint8_ties_saturation", "QuantizeLinear", [np.arange(-80, 80, dtype=np.float32) * 2.25, np.float32(0.5), np.uint8(100)], {}, 19, (1, 2), 1, 0),
    ("quantize_int8_per_axis", "QuantizeLinear", [f32(2, 3, 4, hi=50), fl(0.3, 0.5, 0.25), np.array([-3, 0, 7], np.int8)], dict(axis=1), 19, (1, 2), 1, 0),
    ("quantize_default_uint8_no_zero_point", "QuantizeLinear", [f32(5, 6, lo=-2, hi=300), np.float32(1.25)], {}, 13, (1,), 1, 0),
    ("quantize_int16_uint16", "QuantizeLinear", [f32(40, lo=-40000, hi=40000), np.float32(0.75), np.int16(-5)], {}, 21, (1, 2), 1, 0),
    ("quantize_uint16", "QuantizeLinear", [f32(40, lo=-100, hi=80000), np.float32(1.5), np.uint16(1000)], {}, 21, (1, 2), 1, 0),
    ("quantize_blocked_axis0", "QuantizeLinear", [f32(6, 4, hi=20), f32(3, 4, lo=0.1, hi=0.5), np.full((3, 4), 3, np.uint8)], dict(axis=0, block_size=2), 21, (1, 2), 1, 0),
    ("quantize_runtime_scale", "QuantizeLinear", [f32(3, 4, hi=5), np.float32(0.05), np.int8(1)], {}, 19, (), 1, 0),
    ("dequantize_uint8", "DequantizeLinear", [u8(3, 5), np.float32(0.2), np.uint8(128)], {}, 19, (1, 2), 1, 0),
    ("dequantize_int8_per_axis_last", "DequantizeLinear", [i8(2, 3, 4), fl(0.1, 0.2, 0.3, 0.4), np.array([1, -2, 3, 0], np.int8)], dict(axis=-1), 19, (1, 2), 1, 0),
    ("dequantize_int32_no_zero_point", "DequantizeLinear", [np.array([-70000, 5, 0, 123456], np.int32), np.float32(0.001)], {}, 19, (1,), 1, 0),
    ("dequantize_int16", "DequantizeLinear", [np.array([-32768, -1, 0, 32767], np.int16), np.float32(0.5), np.int16(10)], {}, 21, (1, 2), 1, 0),
    ("dequantize_blocked_axis1", "DequantizeLinear", [u8(2, 6), f32(2, 2, lo=0.1, hi=1), u8(2, 2)], dict(axis=1, block_size=3), 21, (1, 2), 1, 0),
    ("dynamicquantizelinear", "DynamicQuantizeLinear", [f32(4, 7, lo=-3, hi=5)], {}, 11, (), 3, 0),
    ("dynamicquantizelinear_all_positive", "DynamicQuantizeLinear", [f32(10, lo=0.5, hi=9)], {}, 11, (), 3, 0),
    ("matmulinteger_uint8_zero_points", "MatMulInteger", [u8(4, 7), u8(7, 5), np.uint8(12), np.uint8(200)], {}, 10, (3,), 1, 0),
    ("matmulinteger_int8_batch_broadcast", "MatMulInteger", [i8(2, 3, 4, 6), i8(6, 5)], {}, 10, (1,), 1, 0),
    ("matmulinteger_per_column_b_zero_point", "MatMulInteger", [u8(3, 8), u8(8, 4), np.uint8(5), u8(4)], {}, 10, (1, 3), 1, 0),
    ("convinteger_pads_zero_points", "ConvInteger", [u8(1, 3, 6, 6), u8(4, 3, 3, 3), np.uint8(7), np.uint8(130)], dict(pads=[1, 1, 1, 1]), 10, (1, 3), 1, 0),
    ("convinteger_group_stride", "ConvInteger", [u8(2, 4, 7, 5), u8(6, 2, 2, 3)], dict(group=2, strides=[2, 1]), 10, (1,), 1, 0),
    ("qlinearmatmul_uint8", "QLinearMatMul", [u8(4, 9), np.float32(0.02), np.uint8(120), u8(9, 6), np.float32(0.03), np.uint8(130), np.float32(0.05), np.uint8(110)], {}, 10, (1, 2, 3, 4, 5, 6, 7), 1, 0),
    ("qlinearmatmul_int8_batched", "QLinearMatMul", [i8(2, 3, 8), np.float32(0.05), np.int8(-3), i8(8, 4), np.float32(0.04), np.int8(0), np.float32(0.3), np.int8(5)], {}, 10, (1, 2, 3, 4, 5, 6, 7), 1, 0),
    # uint8 x int8 weights in [-63, 63]: onnxruntime's AVX2 kernel saturates int16 pair sums beyond
    # (7-bit weights are what its quantizer emits); nnplug is exact for any weights
    ("qlinearconv_uint8_per_channel_bias", "QLinearConv", [u8(1, 3, 7, 7), np.float32(0.02), np.uint8(128), (i8(4, 3, 3, 3) // 2).astype(np.int8), f32(4, lo=0.005, hi=0.02), np.zeros(4, np.int8), np.float32(0.1), np.uint8(120), np.array([100, -200, 0, 5000], np.int32)], dict(pads=[1, 1, 1, 1]), 10, (1, 2, 3, 4, 5, 6, 7, 8), 1, 0),
    ("qlinearconv_int8_group_stride", "QLinearConv", [i8(1, 4, 8, 8), np.float32(0.05), np.int8(2), i8(6, 2, 3, 3), np.float32(0.01), np.int8(0), np.float32(0.2), np.int8(-4)], dict(group=2, strides=[2, 2]), 10, (1, 2, 3, 4, 5, 6, 7), 1, 0),
    ("qlinearconv_1d", "QLinearConv", [u8(2, 3, 11), np.float32(0.02), np.uint8(100), u8(4, 3, 3), np.float32(0.01), np.uint8(128), np.float32(0.07), np.uint8(128)], dict(pads=[1, 1]), 10, (1, 2, 3, 4, 5, 6, 7), 1, 0),
    # --- Einsum -----------------------------------------------------------------------------------
    ("einsum_matmul", "Einsum", [f32(4, 5), f32(5, 3)], dict(equation="ij,jk->ik"), 12, (), 1, 1e-5),
    ("einsum_batched_attention_scores", "Einsum", [f32(2, 3, 6, 8), f32(2, 3, 7, 8)], dict(equation="bhqd,bhkd->bhqk"), 12, (), 1, 1e-5),
    ("einsum_ellipsis_broadcast", "Einsum", [f32(2, 1, 4, 5), f32(1, 3, 5, 2)], dict(equation="...ij,...jk->...ik"), 12, (), 1, 1e-5),
    ("einsum_implicit_output", "Einsum", [f32(3, 4), f32(4, 5)], dict(equation="ab,bc"), 12, (), 1, 1e-5),
    ("einsum_trace_and_diagonal", "Einsum", [f32(4, 4, 3)], dict(equation="iij->j"), 12, (), 1, 1e-5),
    ("einsum_three_operands", "Einsum", [f32(3, 4), f32(4, 5), f32(5, 2)], dict(equation="ab,bc,cd->da"), 12, (), 1, 1e-5),
    ("einsum_outer_and_sum", "Einsum", [f32(3), f32(4)], dict(equation="i,j->ij"), 12, (), 1, 1e-6),
    ("einsum_reduce_all", "Einsum", [f32(3, 4, 5)], dict(equation="abc->"), 12, (), 1, 1e-5),
    ("einsum_transpose_spaces", "Einsum", [f32(2, 3, 4)], dict(equation="abc -> cab"), 12, (), 1, 0),
    ("einsum_float64", "Einsum", [f64(3, 4), f64(4, 2)], dict(equation="ij,jk->ki"), 12, (), 1, 1e-12),
    ("einsum_int64", "Einsum", [np.arange(12, dtype=np.int64).reshape(3, 4), np.arange(8, dtype=np.int64).reshape(4, 2)], dict(equation="ij,jk->ik"), 12, (), 1, 0),
    ("einsum_int32_ellipsis_implicit", "Einsum", [np.arange(24, dtype=np.int32).reshape(2, 3, 4)], dict(equation="...ij"), 12, (), 1, 0),
    ("einsum_big_2threads", "Einsum", [f32(4, 32, 40), f32(4, 40, 24)], dict(equation="bij,bjk->bik"), 12, (), 1, 1e-5),
    # --- NonMaxSuppression ------------------------------------------------------------------------
    ("nms_corners_two_batches_classes", "NonMaxSuppression", [np.sort(f32(2, 30, 4, lo=0, hi=10).reshape(2, 30, 2, 2), axis=2).reshape(2, 30, 4), f32(2, 3, 30, lo=0, hi=1), i64(5), fl(0.3), fl(0.2)], {}, 11, (2, 3, 4), 1, 0),
    ("nms_center_point_boxes", "NonMaxSuppression", [np.concatenate([f32(1, 25, 2, lo=0, hi=10), f32(1, 25, 2, lo=1, hi=4)], axis=2), f32(1, 2, 25), i64(10), fl(0.4)], dict(center_point_box=1), 11, (2, 3), 1, 0),
    ("nms_flipped_corners_tied_scores", "NonMaxSuppression", [f32(1, 20, 4, lo=0, hi=6), np.round(f32(1, 1, 20, lo=0, hi=1), 1), i64(20), fl(0.5), fl(0.0)], {}, 11, (2, 3, 4), 1, 0),
    ("nms_no_max_output_means_none", "NonMaxSuppression", [f32(1, 6, 4, lo=0, hi=6), f32(1, 1, 6)], {}, 11, (), 1, 0),
    # --- RoiAlign ---------------------------------------------------------------------------------
    ("roialign_avg_half_pixel_adaptive", "RoiAlign", [f32(2, 3, 10, 12), np.array([[0, 0, 9, 9], [2.5, 1.2, 11.5, 7.7], [-2, -1, 4, 3], [5, 5, 5.5, 5.2]], np.float32), i64(0, 1, 1, 0)], dict(output_height=3, output_width=4), 16, (), 1, 1e-5),
    ("roialign_max_sampling2_scale", "RoiAlign", [f32(1, 4, 8, 8, lo=0, hi=1), np.array([[1, 1, 14, 12], [0, 4, 8, 15]], np.float32), i64(0, 0)], dict(mode="max", output_height=2, output_width=2, sampling_ratio=2, spatial_scale=0.5), 16, (), 1, 1e-5),
    ("roialign_output_half_pixel", "RoiAlign", [f32(1, 2, 9, 9), np.array([[1.5, 2.5, 6.5, 8.0], [0, 0, 2, 2]], np.float32), i64(0, 0)], dict(coordinate_transformation_mode="output_half_pixel", output_height=5, output_width=3, sampling_ratio=3), 16, (), 1, 1e-5),
    ("roialign_10", "RoiAlign", [f32(1, 2, 6, 6), np.array([[0, 0, 5, 5]], np.float32), i64(0)], dict(output_height=2, output_width=2), 10, (), 1, 1e-5),
    # --- MeanVarianceNormalization (a kernel of its own, not the function body) ---------------------
    ("mvn_default_axes", "MeanVarianceNormalization", [f32(2, 3, 4, 5)], {}, 13, (), 1, 1e-5),
    ("mvn_last_axis_rank3", "MeanVarianceNormalization", [f32(3, 4, 7, lo=2, hi=3)], dict(axes=[-1]), 13, (), 1, 1e-5),
    ("mvn_axes_1_2", "MeanVarianceNormalization", [f32(2, 3, 4, 5, lo=-5, hi=9)], dict(axes=[1, 2]), 9, (), 1, 1e-5),
    # --- GridSample (grid partly outside [-1, 1]) ------------------------------------------------
    ("gridsample_bilinear_zeros", "GridSample", [f32(2, 3, 6, 7), f32(2, 5, 4, 2, lo=-1.3, hi=1.3)], {}, 16, (), 1, 1e-5),
    ("gridsample_bilinear_border_align", "GridSample", [f32(1, 2, 5, 5), f32(1, 6, 6, 2, lo=-1.5, hi=1.5)], dict(padding_mode="border", align_corners=1), 16, (), 1, 1e-5),
    ("gridsample_nearest_reflection", "GridSample", [f32(1, 2, 6, 5), f32(1, 7, 3, 2, lo=-2.5, hi=2.5)], dict(mode="nearest", padding_mode="reflection"), 16, (), 1, 0),
    ("gridsample_bicubic_zeros", "GridSample", [f32(1, 2, 6, 6), f32(1, 4, 5, 2, lo=-1.2, hi=1.2)], dict(mode="bicubic"), 16, (), 1, 1e-5),
    ("gridsample_cubic_reflection_align_20", "GridSample", [f32(1, 1, 5, 6), f32(1, 4, 4, 2, lo=-2, hi=2)], dict(mode="cubic", padding_mode="reflection", align_corners=1), 20, (), 1, 1e-5),
    ("gridsample_3d_linear_zeros", "GridSample", [f32(2, 2, 4, 5, 6), f32(2, 3, 4, 2, 3, lo=-1.3, hi=1.3)], dict(mode="linear"), 20, (), 1, 1e-5),
    ("gridsample_3d_nearest_border_align", "GridSample", [f32(1, 3, 3, 4, 5), f32(1, 2, 3, 4, 3, lo=-1.5, hi=1.5)], dict(mode="nearest", padding_mode="border", align_corners=1), 20, (), 1, 0),
    ("gridsample_3d_linear_reflection", "GridSample", [f32(1, 1, 4, 4, 4), f32(1, 3, 3, 3, 3, lo=-2, hi=2)], dict(mode="linear", padding_mode="reflection"), 20, (), 1, 1e-5),
    # bicubic border pads each tap (onnxruntime): an in-range axis keeps its place when the other is out
    ("gridsample_cubic_border_20", "GridSample", [f32(1, 2, 5, 6), f32(1, 9, 7, 2, lo=-1.6, hi=1.6)], dict(mode="cubic", padding_mode="border"), 20, (), 1, 1e-5),
    ("gridsample_cubic_border_align_20", "GridSample", [f32(1, 2, 5, 6), f32(1, 9, 7, 2, lo=-1.6, hi=1.6)], dict(mode="cubic", padding_mode="border", align_corners=1), 20, (), 1, 1e-5),
    ("gridsample_linear_border_20", "GridSample", [f32(2, 2, 4, 6), f32(2, 3, 3, 2, lo=-1.4, hi=1.4)], dict(mode="linear", padding_mode="border"), 20, (), 1, 1e-5),
    # --- MaxUnpool, Col2Im, Det --------------------------------------------------------------------
    ("maxunpool_2d_stride2", "MaxUnpool", [f32(1, 2, 3, 3), np.array([0, 3, 5, 12, 14, 17, 26, 29, 33, 36 + 1, 36 + 7, 36 + 10, 36 + 20, 36 + 22, 36 + 24, 36 + 30, 36 + 33, 36 + 35], np.int64).reshape(1, 2, 3, 3)], dict(kernel_shape=[2, 2], strides=[2, 2]), 11, (), 1, 0),
    ("maxunpool_1d_pads", "MaxUnpool", [f32(2, 1, 4), np.array([0, 2, 3, 5, 6, 7, 9, 11], np.int64).reshape(2, 1, 4)], dict(kernel_shape=[3], strides=[2], pads=[1, 0]), 11, (), 1, 0),
    ("col2im_2d", "Col2Im", [f32(2, 3 * 4, 12), i64(4, 5), i64(2, 2)], {}, 18, (1, 2), 1, 1e-6),
    ("col2im_strides_pads_dilations", "Col2Im", [f32(1, 2 * 6, 9), i64(6, 7), i64(2, 3)], dict(strides=[2, 2], pads=[1, 0, 0, 1], dilations=[2, 1]), 18, (1, 2), 1, 1e-6),
    ("det_batch_float32", "Det", [f32(3, 2, 4, 4)], {}, 11, (), 1, 1e-5),
    ("det_singular_and_permutation", "Det", [np.array([[[1, 2], [2, 4]], [[0, 1], [1, 0]]], np.float32)], {}, 11, (), 1, 1e-6),
    # --- DFT / STFT --------------------------------------------------------------------------------
    ("dft_17_real_axis1", "DFT", [f32(2, 12, 1)], {}, 17, (), 1, 1e-4),
    ("dft_17_complex_inverse", "DFT", [f32(3, 10, 2)], dict(inverse=1), 17, (), 1, 1e-5),
    ("dft_17_onesided_padded_length", "DFT", [f32(2, 9, 1), np.int64(16)], dict(onesided=1), 17, (1,), 1, 1e-4),
    ("dft_17_truncated_length_axis2", "DFT", [f32(2, 3, 14, 2), np.int64(10)], dict(axis=2), 17, (1,), 1, 1e-4),
    ("dft_20_axis_input_float64", "DFT", [f64(4, 6, 5, 2), NONE, np.int64(1)], {}, 20, (2,), 1, 1e-10),
    ("dft_20_irfft", "DFT", [f32(2, 7, 2), NONE, np.int64(-2)], dict(inverse=1, onesided=1), 20, (2,), 1, 1e-5),
    ("dft_20_irfft_odd_length", "DFT", [f32(2, 7, 2), np.int64(13), np.int64(1)], dict(inverse=1, onesided=1), 20, (1, 2), 1, 1e-5),
    ("stft_hann_onesided", "STFT", [f32(2, 64, 1), np.int64(8), (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(np.float32)], dict(onesided=1), 17, (1, 2), 1, 1e-4),
    ("stft_frame_length_two_sided", "STFT", [f32(1, 40, 1), np.int64(5), NONE, np.int64(12)], dict(onesided=0), 17, (1, 3), 1, 1e-4),
    ("stft_complex_signal", "STFT", [f32(1, 30, 2), np.int64(4), f32(10)], dict(onesided=0), 17, (1,), 1, 1e-4),
    ("maxroipool_scaled_rois", "MaxRoiPool", [f32(2, 3, 10, 12), np.array([[0, 0, 0, 11, 9], [1, 2.4, 3.6, 20, 15], [1, -3, -2, 4, 5], [0, 7, 7, 6, 6]], np.float32)], dict(pooled_shape=[3, 2], spatial_scale=0.6), 1, (), 1, 0),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(rt, threads, case):
    name, op, inputs, attrs, opset, consts, nout, tol = case
    model, feeds = one_node_model(op, inputs, attrs, outputs=nout, opset=opset, const_inputs=consts)
    want = onnxruntime_run(model, feeds)
    for out, w in zip(model.graph.output, want):
        if not out.type.tensor_type.HasField("shape"):
            # ONNX shape inference gives up on some (function ops, broadcast ellipsis): declare
            # the output onnxruntime computed, which nnplug's loader needs
            out.type.CopyFrom(helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(w.dtype), w.shape))
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, f"{name}: not run on the cpu backend: {assignment}"
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(w), rtol=tol, atol=tol, what=f"{name} output {j}")


# layout = 1 (batch first): onnxruntime runs only layout 0, so it gets the same data transposed.
LAYOUT1 = [
    ("lstm", [f32(3, 5, 4), f32(2, 24, 4), f32(2, 24, 6), f32(2, 48), NONE, f32(3, 2, 6), f32(3, 2, 6)], dict(hidden_size=6, direction="bidirectional"), 3),
    ("gru", [f32(3, 5, 4), f32(1, 18, 4), f32(1, 18, 6), f32(1, 36), np.array([2, 5, 4], np.int32)], dict(hidden_size=6, linear_before_reset=1), 2),
    ("rnn", [f32(3, 5, 4), f32(2, 6, 4), f32(2, 6, 6), NONE, NONE, f32(3, 2, 6)], dict(hidden_size=6, direction="bidirectional"), 2),
]


@pytest.mark.parametrize("case", LAYOUT1, ids=[c[0] for c in LAYOUT1])
def test_batch_first_layout_matches_onnxruntime_on_transposed_data(rt, threads, case):
    op, inputs, attrs, nout = case
    op = op.upper()
    model, feeds = one_node_model(op, inputs, dict(attrs, layout=1), outputs=nout, opset=14)
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}
    seq_major = list(inputs)
    seq_major[0] = inputs[0].transpose(1, 0, 2)
    for k in (5, 6):
        if k < len(inputs) and inputs[k] is not None:
            seq_major[k] = inputs[k].transpose(1, 0, 2)
    model0, feeds0 = one_node_model(op, seq_major, attrs, outputs=nout, opset=14)
    want = onnxruntime_run(model0, feeds0)
    assert_close(got[0], want[0].transpose(2, 0, 1, 3), what="Y")
    for j in range(1, nout):
        assert_close(got[j], want[j].transpose(1, 0, 2), what=f"output {j}")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_gridsample_far_and_infinite_coordinates(rt, mode):
    """A coordinate far outside the image or infinite (onnxruntime's integer conversion is
    undefined there) reads padding along that axis, as a coordinate 3 images away does (where
    onnxruntime is defined): 0 with zeros, the edge column with border."""
    x = f32(1, 2, 4, 5)
    far = np.float32([1e30, np.inf, -1e30, -np.inf])
    ys = np.float32([-0.9, 0.2, 0.7, -0.3])
    grid = np.stack([far, ys], -1).reshape(1, 1, 4, 2)
    near = np.stack([np.sign(far) * 3, ys], -1).reshape(1, 1, 4, 2)
    for pad in ("zeros", "border"):
        model, feeds = one_node_model("GridSample", [x, grid], dict(mode=mode, padding_mode=pad), opset=20)
        got = run_cpu(rt, model, feeds)[0][0]
        want = onnxruntime_run(model, {"in0": x, "in1": near})[0]
        assert_close(got, want, what=f"{mode} {pad}")
        if pad == "zeros":
            assert (got == 0).all(), got


# --- NaN, infinities, -0.0 and empty sequences in these ops ------------------------------------

def test_nms_nan_scores_come_after_every_finite_score(rt):
    """NaN scores (undefined in the spec; onnxruntime's order then depends on its heap) are taken
    last, so the finite boxes keep the greedy order and suppress as they would without them."""
    boxes = np.array([[[i * 10, 0, i * 10 + 5, 5] for i in range(8)]], np.float32)
    scores = np.array([[[0.248, np.nan, 0.779, 0.809, np.nan, np.inf, 0.143, 0.04]]], np.float32)
    for overlap, want in ((False, [5, 3, 2, 0, 6, 7, 1, 4]), (True, [5, 3, 2, 0, 6, 1, 4])):
        b = boxes.copy()
        if overlap:
            b[0, 7] = [0.2, 0, 5.2, 5]  # IoU ~0.92 with box 0, which scores higher
        model, feeds = one_node_model("NonMaxSuppression", [b, scores, i64(20), fl(0.5)], opset=11,
                                      const_inputs=(2, 3))
        got = run_cpu(rt, model, feeds)[0][0]
        assert got[:, 2].tolist() == want, (overlap, got[:, 2].tolist())


@pytest.mark.parametrize("iou", [np.nan, np.inf, -0.5])
def test_nms_iou_threshold_outside_0_1_is_rejected(rt, iou):
    # onnxruntime rejects these too ("iou_threshold must be in range [0, 1]")
    model, feeds = one_node_model("NonMaxSuppression", [f32(1, 3, 4), f32(1, 1, 3), i64(5), fl(iou)],
                                  opset=11, const_inputs=(2, 3))
    with pytest.raises(nnplug.NnplugError, match=r"nonmaxsuppression_node.*'iou_threshold' must be in \[0, 1\]"):
        run_cpu(rt, model, feeds)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ev", [5.0, -np.inf, 1e-7], ids=["5", "-inf", "1e-7"])
def test_resize_tf_crop_outside_points_are_exactly_the_extrapolation_value(rt, mode, ev):
    """The spec (and onnxruntime): not the value blended through the other axis' weights, which
    gave 4.999999 for 5 and NaN for -inf."""
    roi = fl(0, 0, -0.5, 0.2, 1, 1, 0.9, 1.4)  # rows above and columns right of the input
    # (onnxruntime ignores the roi of an axis whose size does not change: none here)
    for hw, sizes in (((5, 6), i64(1, 1, 4, 7)), ((4, 4), i64(1, 1, 3, 5))):
        x = (np.arange(hw[0] * hw[1], dtype=np.float32) / 3).reshape(1, 1, *hw)
        model, feeds = one_node_model("Resize", [x, roi, NONE, sizes],
                                      dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                                           extrapolation_value=ev), opset=19, const_inputs=(1, 3))
        got = run_cpu(rt, model, feeds)[0][0]
        want = onnxruntime_run(model, feeds)[0]
        outside = want == np.float32(ev)
        assert outside[0, 0, 0].all() and outside[0, 0, :, -1].all() and not outside.all()
        np.testing.assert_array_equal(got[outside], want[outside], err_msg=f"{mode} {hw} outside")
        assert_close(got[~outside], want[~outside], what=f"{mode} {hw} inside")


def test_einsum_copy_and_cumsum_keep_negative_zero(rt):
    x = np.array([[-0.0, -0.0], [2.0, -0.0]], np.float32)
    y = np.array([[-0.0, 1.0], [1.0, -0.0]], np.float32)
    runs = [("Einsum", [x], dict(equation=eq), 12) for eq in ("ij->ji", "ii->i")]
    # products and sums start from +0.0 as onnxruntime's do: these must stay as they are
    runs += [("Einsum", [x, y], dict(equation="ij,jk->ik"), 12), ("Einsum", [x], dict(equation="ij->j"), 12)]
    for dt in (np.float32, np.float64):
        v = np.array([-0.0, -0.0, 1.0, -1.0, 1.0], dt)
        for rev in (0, 1):
            for ex in (0, 1):  # exclusive: the first output is +0.0 in onnxruntime
                runs.append(("CumSum", [v[::-1].copy() if rev else v, np.array(0, np.int64)],
                             dict(reverse=rev, exclusive=ex), 14))
    for op, ins, attrs, opset in runs:
        model, feeds = one_node_model(op, ins, attrs, opset=opset)
        got = run_cpu(rt, model, feeds)[0][0]
        want = onnxruntime_run(model, feeds)[0]
        assert_close(got, want, what=f"{op} {attrs}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{op} {attrs}")


QZP = {"uint8": np.uint8(128), "int8": np.int8(3), "uint16": np.uint16(1000), "int16": np.int16(-5)}


@pytest.mark.parametrize("xdt", [np.float32, np.float16])
@pytest.mark.parametrize("zdt", sorted(QZP))
@pytest.mark.parametrize("scale", [0.05, 0.0, np.inf, np.nan])
def test_quantizelinear_nan_gives_the_lowest_value(rt, xdt, zdt, scale):
    """x / scale = NaN (x NaN, 0/0, inf/inf, a NaN scale) saturates to the type's lowest value,
    as onnxruntime (the spec leaves it undefined); +-inf saturate to the ends."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0], xdt)
    model, feeds = one_node_model("QuantizeLinear", [x, np.array(scale, xdt), QZP[zdt]], opset=21,
                                  const_inputs=(1, 2))
    got = run_cpu(rt, model, feeds)[0][0]
    assert_close(got, onnxruntime_run(model, feeds)[0], what=f"{zdt} scale {scale}")


@pytest.mark.parametrize("tp,zp", [(TensorProto.INT4, 2), (TensorProto.UINT4, 5)], ids=["int4", "uint4"])
@pytest.mark.parametrize("scale", [0.05, 0.0, np.inf, np.nan])
def test_quantizelinear_4bit_nan_gives_the_lowest_value(rt, tp, zp, scale):
    # onnxruntime's Python API has no 4-bit arrays: both read the result through a Cast to int8
    x = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0], np.float32)
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
         helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT8)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)],
        [numpy_helper.from_array(np.array(scale, np.float32), "s"), helper.make_tensor("zp", tp, [], [zp])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    got = run_cpu(rt, model, {"x": x})[0][0]
    assert_close(got, onnxruntime_run(model, {"x": x})[0], what=f"scale {scale}")


@pytest.mark.parametrize("x", [
    np.zeros(4, np.float32), np.array([-0.0, 0.0], np.float32), np.full(3, -2.0, np.float32),
    np.array([-np.inf, 1, 2, 3], np.float32), np.array([1, 2, np.inf], np.float32),
    np.array([-1, 2, np.inf, -np.inf], np.float32), np.array([1e-45, 0, 1e-45], np.float32),
], ids=["zeros", "signed_zeros", "negative_constant", "-inf", "inf", "both_infs", "denormal_range"])
def test_dynamicquantizelinear_zero_range_and_infinities_match_onnxruntime(rt, x):
    # an all-zero range has scale 1 (onnxruntime's max == min rule), not 0
    model, feeds = one_node_model("DynamicQuantizeLinear", [x], outputs=3, opset=11)
    got = run_cpu(rt, model, feeds)[0]
    for j, (g, w) in enumerate(zip(got, onnxruntime_run(model, feeds))):
        assert_close(g, w, rtol=0, atol=0, what=f"output {j}")


@pytest.mark.parametrize("pos", [0, 2, 5, 15, 19])
def test_dynamicquantizelinear_nan_gives_a_nan_scale_wherever_it_is(rt, pos):
    """onnxruntime's vector min/max keeps or drops the NaN by its position (here it drops it at
    0-10 and keeps it at 15); onnx.reference's numpy max always keeps it: scale NaN, zero point
    255 (min(255, NaN) picks 255 in both) and y the QuantizeLinear NaN rule's lowest value, 0."""
    x = np.linspace(-2, 3, 20).astype(np.float32)
    x[pos] = np.nan
    model, feeds = one_node_model("DynamicQuantizeLinear", [x], outputs=3, opset=11)
    y, scale, zp = run_cpu(rt, model, feeds)[0]
    assert np.isnan(scale) and scale.shape == () and scale.dtype == np.float32
    assert zp == 255 and zp.dtype == np.uint8
    np.testing.assert_array_equal(y, np.zeros(20, np.uint8))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn_sequence_length_0_gives_zero_states(rt, op, direction):
    # onnxruntime: Y and Y_h (LSTM's Y_c too) of an empty sequence are 0, not the initial state
    rng = np.random.default_rng(7)
    T, B, In, H = 3, 3, 2, 2
    G, D = {"RNN": 1, "GRU": 3, "LSTM": 4}[op], 2 if direction == "bidirectional" else 1
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    ins = [r(T, B, In), r(D, G * H, In), r(D, G * H, H), NONE, np.array([3, 0, 2], np.int32), r(D, B, H)]
    if op == "LSTM":
        ins.append(r(D, B, H))
    nout = 3 if op == "LSTM" else 2
    model, feeds = one_node_model(op, ins, dict(hidden_size=H, direction=direction), outputs=nout,
                                  opset=14, const_inputs=(1, 2))
    got = run_cpu(rt, model, feeds)[0]
    want = onnxruntime_run(model, feeds)
    for j in range(nout):
        assert_close(got[j], want[j], what=f"output {j}")
    for j in range(1, nout):
        assert (got[j][:, 1] == 0).all(), got[j]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_roialign_nonfinite_rois_are_rejected(rt, bad):
    # onnxruntime: "All 'rois' values must be finite"
    rois = np.array([[0, 0, 4, 4], [1, 1, 5, 5]], np.float32)
    rois[1, 2] = bad
    model, feeds = one_node_model("RoiAlign", [f32(1, 2, 8, 8), rois, i64(0, 0)],
                                  dict(output_height=2, output_width=2), opset=16)
    with pytest.raises(nnplug.NnplugError, match=r"roialign_node.*'rois' box 1 has the non-finite value"):
        run_cpu(rt, model, feeds)

"""The long tail of ONNX's node suite (LpPool, MaxPool's Indices output and its other element
types, EyeLike, Scatter, TensorScatter, TfIdfVectorizer, MelWeightMatrix, BatchNormalization in
training mode, DeformConv, the ai.onnx.preview.training optimizers) on seeded random inputs:
against onnxruntime where it runs the op, else against onnx.reference, with 1 and 2 threads;
and malformed nodes, which must fail with a message naming the node and what is wrong."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, one_node_model, onnxruntime_run, reference, run_cpu
from onnx import TensorProto, helper

import nnplug

R = np.random.default_rng(20261201)
NONE = None


def f32(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def f64(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def ints(lo, hi, *shape, dtype=np.int64):
    return R.integers(lo, hi, shape).astype(dtype)


def permuted_columns(rows, n, k):
    """int64 [rows, k]: distinct column indices per row (a scatter with no repeated target)."""
    return np.stack([R.permutation(n)[:k] for _ in range(rows)]).astype(np.int64)


TFIDF_POOL = dict(ngram_counts=[0, 4, 8], ngram_indexes=list(range(8)),
                  pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 0, 1, 4, 5, 3, 3, 2, 1, 0, 0])
TFIDF_POOL_3 = dict(ngram_counts=[0, 3, 7], ngram_indexes=[3, 0, 1, 2, 4, 5, 6, 5, 2],
                    pool_int64s=[1, 2, 3, 1, 2, 2, 3, 1, 2, 3, 3, 3, 1])

# (id, op, inputs, attrs, opset, const_inputs, outputs, tolerance), against onnxruntime
ORT_CASES = [
    ("lppool_2d_p2_pads", "LpPool", [f32(1, 3, 9, 8)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], p=2), 18, (), 1, 1e-5),
    ("lppool_2d_p3_strides", "LpPool", [f32(2, 2, 10, 9)], dict(kernel_shape=[3, 2], strides=[2, 3], p=3), 18, (), 1, 1e-5),
    ("lppool_1d_p1", "LpPool", [f32(2, 3, 12)], dict(kernel_shape=[4], strides=[3], pads=[1, 2], p=1), 18, (), 1, 1e-5),
    ("lppool_3d", "LpPool", [f32(1, 2, 5, 6, 7)], dict(kernel_shape=[2, 3, 2], p=2), 18, (), 1, 1e-5),
    ("lppool_same_upper", "LpPool", [f32(1, 2, 7, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", p=2), 18, (), 1, 1e-5),
    ("lppool_11_p4", "LpPool", [f32(1, 3, 6, 6)], dict(kernel_shape=[2, 2], p=4), 11, (), 1, 1e-5),
    ("maxpool_indices_2d_pads", "MaxPool", [f32(2, 3, 7, 8)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 12, (), 2, 0),
    ("maxpool_indices_column_major", "MaxPool", [f32(1, 2, 6, 7)], dict(kernel_shape=[2, 3], strides=[2, 2], storage_order=1), 12, (), 2, 0),
    ("maxpool_indices_3d", "MaxPool", [f32(1, 2, 5, 6, 4)], dict(kernel_shape=[2, 2, 2], strides=[1, 2, 2]), 12, (), 2, 0),
    ("maxpool_indices_1d", "MaxPool", [f32(2, 2, 11)], dict(kernel_shape=[3], strides=[2], pads=[1, 1]), 12, (), 2, 0),
    ("maxpool_indices_dilation_ceil", "MaxPool", [f32(1, 2, 10, 10)], dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 2], ceil_mode=1), 12, (), 2, 0),
    ("maxpool_uint8", "MaxPool", [ints(0, 256, 1, 3, 7, 7, dtype=np.uint8)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 12, (), 1, 0),
    ("maxpool_int8_strides", "MaxPool", [ints(-128, 128, 2, 2, 8, 9, dtype=np.int8)], dict(kernel_shape=[2, 2], strides=[2, 2]), 12, (), 1, 0),
    ("maxpool_float64", "MaxPool", [f64(1, 2, 6, 6)], dict(kernel_shape=[3, 3], strides=[1, 2]), 12, (), 1, 0),
    ("eyelike_default", "EyeLike", [f32(4, 5)], {}, 9, (), 1, 0),
    ("eyelike_k2_int32", "EyeLike", [f32(3, 6)], dict(k=2, dtype=TensorProto.INT32), 9, (), 1, 0),
    ("eyelike_k_negative_double", "EyeLike", [ints(0, 9, 5, 3)], dict(k=-1, dtype=TensorProto.DOUBLE), 9, (), 1, 0),
    ("eyelike_k_beyond", "EyeLike", [ints(0, 9, 2, 3)], dict(k=7), 9, (), 1, 0),
    ("scatter_10_axis1", "Scatter", [f32(3, 5), permuted_columns(3, 5, 2), f32(3, 2)], dict(axis=1), 10, (), 1, 0),
    ("scatter_9_axis0", "Scatter", [f32(4, 3), permuted_columns(3, 4, 2).T.copy(), f32(2, 3)], {}, 9, (), 1, 0),
    ("tfidf_tf_uni_bigrams", "TfIdfVectorizer", [ints(0, 9, 12, dtype=np.int32)], dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0, **TFIDF_POOL), 9, (), 1, 0),
    ("tfidf_idf_weights_batch", "TfIdfVectorizer", [ints(0, 9, 3, 10)], dict(mode="IDF", min_gram_length=1, max_gram_length=2, max_skip_count=2, weights=[0.5, 2.0, 3, 1, 1.5, 0.25, 4, 1], **TFIDF_POOL), 9, (), 1, 1e-6),
    ("tfidf_tfidf_skips_bigrams_only", "TfIdfVectorizer", [ints(0, 9, 2, 16, dtype=np.int32)], dict(mode="TFIDF", min_gram_length=2, max_gram_length=2, max_skip_count=3, weights=[1.0, 1, 1, 1, 2, 3, 4, 5], **TFIDF_POOL), 9, (), 1, 1e-6),
    ("tfidf_trigrams_shared_columns", "TfIdfVectorizer", [ints(1, 4, 2, 20)], dict(mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=1, **TFIDF_POOL_3), 9, (), 1, 0),
    ("melweightmatrix_suite_like", "MelWeightMatrix", [np.int32(8), np.int32(16), np.int32(8192), np.float32(0), np.float32(4096)], {}, 17, (), 1, 1e-6),
    ("melweightmatrix_speech", "MelWeightMatrix", [np.int64(20), np.int64(256), np.int64(16000), np.float32(30), np.float32(7600)], {}, 17, (), 1, 1e-6),
    ("melweightmatrix_double", "MelWeightMatrix", [np.int32(6), np.int32(64), np.int32(8000), np.float32(100), np.float32(3800)], dict(output_datatype=TensorProto.DOUBLE), 17, (), 1, 1e-12),
]

# against onnx.reference (onnxruntime's CPU build runs none of these)
REF_CASES = [
    ("batchnorm_training_4d", "BatchNormalization", [f32(2, 3, 4, 5), f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)], dict(training_mode=1), 15, (), 3, 1e-5),
    ("batchnorm_training_eps_momentum", "BatchNormalization", [f32(3, 4, 6), f32(4), f32(4), f32(4), f32(4, lo=0.5, hi=2)], dict(training_mode=1, epsilon=1e-2, momentum=0.7), 15, (1, 2, 3, 4), 3, 1e-5),
    ("batchnorm_training_rank2", "BatchNormalization", [f32(8, 5), f32(5), f32(5), f32(5), f32(5, lo=0.5, hi=2)], dict(training_mode=1), 15, (), 3, 1e-5),
    ("maxpool_float16", "MaxPool", [f32(1, 2, 6, 6).astype(np.float16)], dict(kernel_shape=[2, 2]), 12, (), 1, 0),
    ("tensorscatter_linear_4d", "TensorScatter", [f32(2, 3, 6, 4), f32(2, 3, 2, 4), i64(1, 4)], {}, 24, (), 1, 0),
    ("tensorscatter_circular", "TensorScatter", [f32(3, 5, 2), f32(3, 3, 2), i64(3, 0, 4)], dict(mode="circular", axis=1), 24, (), 1, 0),
    ("deformconv_pads_bias_mask", "DeformConv", [f32(1, 2, 5, 6), f32(3, 2, 2, 2), f32(1, 8, 6, 7, lo=-1.5, hi=1.5), f32(3), f32(1, 4, 6, 7, lo=0, hi=1)], dict(kernel_shape=[2, 2], pads=[1, 1, 1, 1]), 19, (), 1, 1e-5),
    ("deformconv_groups_strides_dilations", "DeformConv", [f32(2, 4, 7, 7), f32(4, 2, 3, 3), f32(2, 36, 3, 2, lo=-2, hi=2)], dict(group=2, offset_group=2, strides=[2, 2], dilations=[1, 2]), 19, (1,), 1, 1e-5),
    ("deformconv_kernel_from_weights", "DeformConv", [f32(1, 1, 4, 4), f32(1, 1, 3, 3), f32(1, 18, 2, 2, lo=-3, hi=3)], {}, 19, (), 1, 1e-5),
    ("tensorscatter_no_indices_int64", "TensorScatter", [ints(0, 9, 2, 2, 5, 3), ints(0, 9, 2, 2, 2, 3)], dict(axis=2), 24, (), 1, 0),
]

BAD = [
    # (id, op, inputs, attrs, opset, match)
    ("tensorscatter_linear_overflow", "TensorScatter", [f32(2, 4, 3), f32(2, 2, 3), i64(1, 3)], {}, 24, r"write_indices\[1\] = 3"),
    ("momentum_unknown_mode", "Momentum", None, dict(mode="heavy", alpha=0.9, beta=1.0, norm_coefficient=0.0), 1, r"attribute 'mode' is 'heavy'"),
    ("melweightmatrix_edge_beyond_nyquist", "MelWeightMatrix", [np.int32(8), np.int32(16), np.int32(8000), np.float32(0), np.float32(9000)], {}, 17, r"upper_edge_hertz"),
    ("scatter_index_out_of_range", "Scatter", [f32(3, 3), i64(0, 5, 1).reshape(1, 3), f32(1, 3)], {}, 10, r"out of range"),
    ("tfidf_more_ngrams_than_indexes", "TfIdfVectorizer", [ints(0, 9, 6)], dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[4, 5, 6]), 9, r"ngram_indexes"),
]


def check_case(rt, case, expected):
    name, op, inputs, attrs, opset, consts, nout, tol = case
    model, feeds = one_node_model(op, inputs, attrs, outputs=nout, opset=opset, const_inputs=consts)
    want = expected(model, feeds)
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, f"{name}: not run on the cpu backend: {assignment}"
    assert len(got) == len(want)
    for j, (g, w) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(w), rtol=tol, atol=tol, what=f"{name} output {j}")


@pytest.mark.parametrize("case", ORT_CASES, ids=[c[0] for c in ORT_CASES])
def test_op_matches_onnxruntime(rt, threads, case):
    check_case(rt, case, onnxruntime_run)


@pytest.mark.parametrize("case", REF_CASES, ids=[c[0] for c in REF_CASES])
def test_op_matches_onnx_reference(rt, threads, case):
    check_case(rt, case, reference)


def test_maxpool_indices_take_the_first_of_equal_maxima(rt):
    # ties everywhere: the index of the first maximum in scan order, as onnxruntime gives it
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1:3, 1:3] = 1.0
    model, feeds = one_node_model("MaxPool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), outputs=2, opset=12)
    got, _ = run_cpu(rt, model, feeds)
    for g, w in zip(got, onnxruntime_run(model, feeds)):
        assert_close(g, w)


# ---- ai.onnx.preview.training ------------------------------------------------------------------

TRAINING = "ai.onnx.preview.training"


def training_model(op, inputs, outputs, attrs):
    """inputs: (name, array) pairs, all graph inputs; outputs typed by ONNX shape inference."""
    node = helper.make_node(op, [n for n, _ in inputs], outputs, name=f"{op.lower()}_node", domain=TRAINING, **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs]
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(TRAINING, 1)]
    probe = helper.make_model(helper.make_graph([node], "g", ins, []), opset_imports=opsets)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    outs = [inferred.get(o) or helper.make_tensor_value_info(o, ins[2].type.tensor_type.elem_type, None) for o in outputs]
    return helper.make_model(helper.make_graph([node], "g", ins, outs), opset_imports=opsets), dict(inputs)


def optimizer_case(op, n, dtype, step):
    states = {"Adagrad": ["H"], "Adam": ["V", "H"], "Momentum": ["V"]}[op]
    shapes = [(3, 4), (5,), (2, 2, 3)][:n]
    inputs = [("R", np.array(0.1, dtype)), ("T", np.array(step, np.int64))]
    for kind in ["X", "G", *states]:
        for k, shape in enumerate(shapes):
            lo = 0.0 if kind == "H" else -1.0  # accumulated squares are not negative
            inputs.append((f"{kind}{k}", R.uniform(lo, 1.0, shape).astype(dtype)))
    outputs = [f"{kind}{k}_new" for kind in ["X", *states] for k in range(n)]
    return inputs, outputs


OPTIMIZERS = [
    ("adagrad", "Adagrad", dict(decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.001)),
    ("adagrad_defaults", "Adagrad", dict(epsilon=1e-5)),
    ("adam", "Adam", dict(alpha=0.95, beta=0.1, epsilon=1e-7, norm_coefficient=0.001, norm_coefficient_post=0.01)),
    ("adam_defaults", "Adam", dict(epsilon=1e-6)),
    ("momentum", "Momentum", dict(mode="standard", alpha=0.95, beta=0.1, norm_coefficient=0.001)),
    ("nesterov", "Momentum", dict(mode="nesterov", alpha=0.95, beta=0.9, norm_coefficient=0.01)),
]


@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("n,dtype", [(1, np.float32), (3, np.float32), (2, np.float64)], ids=["one", "three", "double"])
@pytest.mark.parametrize("case", OPTIMIZERS, ids=[c[0] for c in OPTIMIZERS])
def test_optimizer_matches_onnx_reference(rt, case, n, dtype, step):
    _, op, attrs = case
    inputs, outputs = optimizer_case(op, n, dtype, step)
    model, feeds = training_model(op, inputs, outputs, attrs)
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, assignment
    want = reference(model, feeds)
    assert len(got) == len(want) == len(outputs)
    for name, g, w in zip(outputs, got, want):
        # the reference rounds Adam's results to float32 when it updates several tensors
        tol = 1e-5 if dtype == np.float32 or (op == "Adam" and n > 1) else 1e-12
        assert_close(g, np.asarray(w).astype(dtype), rtol=tol, atol=tol, what=f"{op} {name}")


# ---- malformed nodes: an error naming the node and what is wrong ------------------------------

@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_malformed_node_fails_with_a_message_naming_it(rt, case):
    name, op, inputs, attrs, opset, match = case
    if op == "Momentum":
        ins, outs = optimizer_case(op, 1, np.float32, 1)
        model, feeds = training_model(op, ins, outs, attrs)
    else:
        model, feeds = one_node_model(op, inputs, attrs, opset=opset)
    with pytest.raises(nnplug.NnplugError, match=match) as err:
        with rt.load(model, backends=["cpu"]) as net:
            net.run(feeds)
    assert f"{op.lower()}_node" in str(err.value)


def test_string_pools_are_declined_not_guessed(rt):
    x = ints(0, 9, 6)
    model, _ = one_node_model("TfIdfVectorizer", [x], dict(mode="TF", min_gram_length=1, max_gram_length=1,
                                                           max_skip_count=0, ngram_counts=[0], ngram_indexes=[0],
                                                           pool_strings=["a"]), opset=9)
    with pytest.raises(nnplug.UnsupportedNodeError, match="tfidfvectorizer_node"):
        rt.load(model, backends=["cpu"])


def test_batchnormalization_9_listing_training_outputs_is_not_run_in_inference_mode(rt):
    """Before opset 14 a BatchNormalization with its five outputs is in training mode (batch
    statistics; onnxruntime computes it so) even when nothing reads the extra four: running it
    with the running statistics would be a wrong answer, so it is declined by name."""
    outs = ["y", "mean", "var", "saved_mean", "saved_var"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, name="batchnormalization_node")
    consts = [helper.make_tensor(k, TensorProto.FLOAT, [3], f32(3, lo=0.5, hi=1.5).tolist()) for k in "sbmv"]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 4])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(nnplug.UnsupportedNodeError, match="batchnormalization_node"):
        rt.load(model, backends=["cpu"])

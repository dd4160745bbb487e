"""Casts, logic, comparisons, elementwise math and indexing ops on every element type the
backend runs, on random inputs, against onnxruntime (onnx.reference where onnxruntime's CPU
provider has no kernel for that type)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from conftest import assert_close, kernel_level, one_node_model, reference, run_cpu
from onnx import TensorProto, helper

R = np.random.default_rng(20261201)
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(t) for t in (np.float32, np.float64, np.float16)] + [BF16]
SIGNED = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UNSIGNED = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
INTS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTS
BOOL = [np.dtype(bool)]


def is_float(dt):
    return np.dtype(dt) in FLOATS


TYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", BF16: "bfloat16"}


def allowed(op, opset, dt):
    """Whether ONNX's schema of op at opset lets its first input have element type dt."""
    schema = onnx.defs.get_schema(op, opset)
    first = schema.inputs[0].type_str
    types = next((c.allowed_type_strs for c in schema.type_constraints
                  if c.type_param_str == first), [first])
    return f"tensor({TYPE_NAMES.get(np.dtype(dt), np.dtype(dt).name)})" in types


def rand(dt, shape, lo=-20, hi=20, nonzero=False):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return R.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max), 2**63 - 2)
        a = R.integers(lo, hi + 1, shape, dtype=np.int64).astype(dt)
        if nonzero:
            a[a == 0] = 1
        return a
    a = R.uniform(lo, hi, shape)
    if nonzero:
        a[np.abs(a) < 0.1] = 0.5
    return a.astype(dt)


def for_onnxruntime(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = min(m.ir_version, 10)
    return m


def expected(model, feeds):
    """onnxruntime's outputs; onnx.reference's when onnxruntime has no kernel for the types."""
    import onnxruntime as ort

    g = model.graph
    if any(v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in [*g.input, *g.output]):
        # onnxruntime's Python API neither takes nor returns bfloat16 arrays
        return by_reference(model, feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as e:  # no kernel for these types (at load or at run)
        if not any(m in str(e) for m in NO_KERNEL):
            raise
        return by_reference(model, feeds)


def by_reference(model, feeds):
    """onnx.reference's outputs in the element types the model declares (its numpy kernels
    promote some integer results, e.g. uint32 sums to uint64)."""
    outs = reference(model, feeds)
    types = [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in model.graph.output]
    return [np.asarray(x).astype(t) if t is not None and np.asarray(x).dtype.kind in "iu" else np.asarray(x)
            for x, t in zip(outs, types)]


NO_KERNEL = ("NOT_IMPLEMENTED", "Could not find an implementation", "data type is not supported")


def check(rt, op, inputs, attrs=None, *, opset=18, outputs=1, tol=1e-5, const_inputs=()):
    model, feeds = one_node_model(op, inputs, attrs, opset=opset, outputs=outputs,
                                  const_inputs=const_inputs)
    first = next(np.asarray(i).dtype for i in inputs if i is not None)
    assert allowed(op, opset, first), f"test error: ONNX's {op}-{opset} does not take {first}"
    got, assignment = run_cpu(rt, model, feeds, kernel_level(model))
    assert set(assignment.values()) == {"cpu"}, f"{op} not run on the cpu backend: {assignment}"
    want = expected(model, feeds)
    what = f"{op} {[np.asarray(i).dtype.name for i in inputs if i is not None]} {attrs or ''}"
    for g, w in zip(got, want):
        w = np.asarray(w)
        if g.dtype in (np.float16, BF16):
            g, w = g.astype(np.float32), w.astype(np.float32)
            # 8 (bfloat16) or 11 (float16) significant bits; the references round every partial
            # result of a reduction to the type, this backend only the final one
            assert_close(g, w, rtol=2e-2, atol=1e-2, what=what)
        else:
            assert_close(g, w, rtol=tol, atol=tol, what=what)


def ids(dts):
    return [np.dtype(d).name for d in dts]


# --- Cast -------------------------------------------------------------------------------

CAST_TYPES = NUMERIC + BOOL


@pytest.mark.parametrize("src", CAST_TYPES, ids=ids(CAST_TYPES))
def test_cast_between_every_pair_of_types_matches_onnxruntime(rt, src):
    x = rand(src, (3, 17), -100, 100)
    if is_float(src):
        x.ravel()[:4] = np.array([0.5, -0.5, 1.5, -2.5]).astype(src)  # truncation toward zero
    for to in CAST_TYPES:
        tp = helper.np_dtype_to_tensor_dtype(to)
        if src == BF16 and to.kind in "iu":
            # the reference here is onnx.reference (numpy saturates); onnxruntime converts
            # through float32, whose out-of-range results the next test checks
            x = np.abs(x)
        check(rt, "Cast", [x], dict(to=tp))
        check(rt, "CastLike", [x, np.zeros((1,), to)], opset=19)


@pytest.mark.parametrize("to", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                np.int64, np.uint64, np.float16, BF16, bool])
def test_cast_float_out_of_range_and_nan_as_onnxruntime(rt, to):
    # x86-64: what cvttss2si gives for NaN / out-of-range values (then truncated)
    x = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3e38, 300.7, -300.7, 70000.5, -1.5,
                  4.3e9, 2.0**63, 1.9e19, -0.0], np.float32)
    if np.dtype(to) in (np.uint32, np.uint64):
        # onnxruntime's own result for these differs between its vector loop and the scalar
        # tail (an array's last elements); both agree from -2^31 up to the type's range
        x = np.array([-1.5, -300.7, 300.7, 2.0**31, 4.2e9, -2.0**31 + 128, 70000.5, -0.0] +
                     ([1.9e19, 2.0**63, 1e10, -1e10] if np.dtype(to) == np.uint64 else []),
                     np.float32)
    tp = helper.np_dtype_to_tensor_dtype(np.dtype(to))
    check(rt, "Cast", [x], dict(to=tp))
    check(rt, "Cast", [x.astype(np.float64)], dict(to=tp))


def test_cast_rounds_to_nearest_even_into_16_bit_floats(rt):
    # halfway cases and subnormals of float16 / bfloat16
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 2**-24, 2**-25, 3 * 2**-26, 65504, 65520, 1e-8,
                  1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1e-39], np.float32)
    for to in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        model, feeds = one_node_model("Cast", [x], dict(to=to))
        got = run_cpu(rt, model, feeds)[0][0]
        want = expected(model, feeds)[0]
        np.testing.assert_array_equal(got.view(np.uint16), np.asarray(want).view(np.uint16))


# --- binary arithmetic, comparisons, logic -------------------------------------------------

ARITH = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
COMPARE = ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"]


@pytest.mark.parametrize("dt", NUMERIC, ids=ids(NUMERIC))
def test_binary_arithmetic_and_comparisons_on_every_numeric_type(rt, dt):
    a = rand(dt, (2, 3, 5))
    b = rand(dt, (3, 1), nonzero=True)  # broadcast
    for op in ARITH + COMPARE:
        check(rt, op, [a, b])
    check(rt, "Equal", [a, a.copy()])
    if is_float(dt):
        check(rt, "Sum", [a, b, rand(dt, (5,))])
    if is_float(dt):
        check(rt, "Mod", [a, b], dict(fmod=1))
        if dt != BF16:  # onnxruntime's Pow has no bfloat16 kernel and onnx.reference none either
            check(rt, "Pow", [np.abs(a), rand(dt, (3, 1), -2, 2)], tol=1e-4)
    else:
        check(rt, "Mod", [a, b], dict(fmod=0))
        check(rt, "Mod", [a, b], dict(fmod=1))
    if dt in (np.float32, np.float64):
        check(rt, "Mean", [a, b, rand(dt, (5,))])


def test_integer_arithmetic_wraps_as_onnxruntime(rt):
    for dt in (np.int8, np.uint8, np.int32, np.int64, np.uint64):
        info = np.iinfo(dt)
        a = np.array([info.max, info.min, info.max - 1, 7], dt)
        b = np.array([2, 3, info.max, -1 if info.min < 0 else 1], dt)
        for op in ("Add", "Sub", "Mul"):
            check(rt, op, [a, b])


@pytest.mark.parametrize("base,exp", [(np.int32, np.int32), (np.int64, np.int64),
                                      (np.int64, np.float32), (np.float32, np.int64),
                                      (np.float32, np.int32), (np.float64, np.float64),
                                      (np.int32, np.float32)])
def test_pow_mixed_types_match_onnxruntime(rt, base, exp):
    check(rt, "Pow", [rand(base, (4, 3), 0, 6), rand(exp, (3,), 0, 4)], tol=1e-4)


def test_logic_and_bitwise_ops_on_their_types(rt):
    for op in ("And", "Or", "Xor"):
        check(rt, op, [rand(bool, (3, 4)), rand(bool, (4,))])
    check(rt, "Not", [rand(bool, (3, 4))])
    for dt in INTS:
        info = np.iinfo(dt)
        a, b = rand(dt, (3, 4), int(info.min), int(info.max)), rand(dt, (4,), int(info.min), int(info.max))
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            check(rt, op, [a, b])
        check(rt, "BitwiseNot", [a])
    for dt in UNSIGNED:
        a = rand(dt, (3, 4), 0, 200)
        for direction in ("LEFT", "RIGHT"):
            check(rt, "BitShift", [a, rand(dt, (4,), 0, 7)], dict(direction=direction))
    for dt in SIGNED:  # BitShift-28: arithmetic right shift; amounts < 0 or >= width: sign fill
        bits = dt.itemsize * 8
        a = rand(dt, (3, 5), -100, 100)
        amounts = np.array([0, 3, bits - 1, bits, -1], dt)
        for direction in ("LEFT", "RIGHT"):
            check(rt, "BitShift", [a, amounts], dict(direction=direction), opset=28)


@pytest.mark.parametrize("dt", NUMERIC + BOOL, ids=ids(NUMERIC + BOOL))
def test_where_expand_and_tile_move_every_type(rt, dt):
    x, y = rand(dt, (3, 1)), rand(dt, (1, 4))
    check(rt, "Where", [rand(bool, (3, 4)), x, y])
    check(rt, "Expand", [x, np.array([2, 3, 5], np.int64)], const_inputs=(1,))
    check(rt, "Tile", [rand(dt, (2, 3)), np.array([3, 2], np.int64)], const_inputs=(1,))


# --- unary -----------------------------------------------------------------------------------

FLOAT_UNARY = [("Exp", -3, 3), ("Log", 0.1, 9), ("Sqrt", 0, 9), ("Reciprocal", 1, 5),
               ("Floor", -9, 9), ("Ceil", -9, 9), ("Round", -9, 9), ("Sigmoid", -6, 6),
               ("Tanh", -3, 3), ("Erf", -2, 2), ("Softplus", -5, 5), ("Sin", -3, 3),
               ("Cos", -3, 3), ("Tan", -1, 1), ("Asin", -0.9, 0.9), ("Acos", -0.9, 0.9),
               ("Atan", -3, 3), ("Sinh", -3, 3), ("Cosh", -3, 3), ("Asinh", -3, 3),
               ("Acosh", 1.1, 5), ("Atanh", -0.9, 0.9), ("HardSigmoid", -5, 5),
               ("HardSwish", -5, 5), ("Elu", -3, 3), ("Selu", -3, 3), ("Celu", -3, 3),
               ("Mish", -3, 3), ("Softsign", -3, 3), ("ThresholdedRelu", -3, 3),
               ("LeakyRelu", -3, 3), ("Relu", -3, 3), ("Neg", -3, 3), ("Abs", -3, 3),
               ("Sign", -3, 3), ("Shrink", -3, 3), ("Gelu", -3, 3), ("Swish", -5, 5)]


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_float_unary_ops_on_every_float_type(rt, dt):
    for op, lo, hi in FLOAT_UNARY:
        x = rand(dt, (4, 7), lo, hi)
        opset = {"Gelu": 20, "Swish": 24}.get(op, 18)
        if allowed(op, opset, dt):
            check(rt, op, [x], opset=opset, tol=1e-4)
    for op, attrs in (("Elu", dict(alpha=0.5)), ("HardSigmoid", dict(alpha=0.3, beta=0.4)),
                      ("Shrink", dict(lambd=1.0, bias=0.5)), ("Celu", dict(alpha=2.0)),
                      ("ThresholdedRelu", dict(alpha=0.5)), ("LeakyRelu", dict(alpha=0.2))):
        if allowed(op, 18, dt):
            check(rt, op, [rand(dt, (9,), -3, 3)], attrs, tol=1e-4)
    check(rt, "Gelu", [rand(dt, (9,), -3, 3)], dict(approximate="tanh"), opset=20, tol=1e-4)
    x = np.array([np.nan, np.inf, -np.inf, 1.0, -2.0, 0.0], dt)
    check(rt, "IsNaN", [x], opset=20)
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        check(rt, "IsInf", [x], dict(detect_positive=pos, detect_negative=neg), opset=20)
    check(rt, "Clip", [rand(dt, (9,), -3, 3), np.array(-1, dt), np.array(1.5, dt)])


@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
def test_integer_unary_ops(rt, dt):
    x = rand(dt, (4, 7), -50, 50)
    check(rt, "Abs", [x])
    check(rt, "Sign", [x])
    check(rt, "Clip", [x, np.array(3, dt), np.array(30, dt)])
    check(rt, "Clip", [x])
    check(rt, "Shrink", [x], dict(lambd=4.0, bias=2.0))
    if dt.kind == "i":
        check(rt, "Neg", [x])
        check(rt, "Relu", [x])


# --- generation and indexing -------------------------------------------------------------------

@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int16, np.int32, np.int64, np.float16, BF16])
def test_range_matches_onnxruntime(rt, dt):
    opset = 27 if np.dtype(dt) in (np.float16, BF16) else 18  # 16-bit floats from Range-27
    for start, limit, delta in ((0, 10, 3), (10, -4, -2), (3, 3, 1), (1, 0, 1), (-5, 17, 4)):
        check(rt, "Range", [np.array(start, dt), np.array(limit, dt), np.array(delta, dt)],
              opset=opset)
    if is_float(dt):
        check(rt, "Range", [np.array(0.5, dt), np.array(3.3, dt), np.array(0.7, dt)], opset=opset)


def test_size_of_every_type(rt):
    for dt in NUMERIC + BOOL:
        check(rt, "Size", [rand(dt, (3, 0, 2))])
        check(rt, "Size", [rand(dt, (3, 4, 2))])


@pytest.mark.parametrize("dt", [np.float32, np.int64, np.uint8, bool, np.float16])
def test_trilu_all_diagonals(rt, dt):
    x = rand(dt, (2, 4, 5))
    for upper in (0, 1):
        for k in (-5, -1, 0, 2, 7):
            check(rt, "Trilu", [x, np.array(k, np.int64)], dict(upper=upper), opset=14)
        check(rt, "Trilu", [x], dict(upper=upper), opset=14)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64])
def test_cumsum_and_cumprod_exclusive_reverse(rt, dt):
    x = rand(dt, (3, 4, 5), 0, 20)
    for axis in (0, 1, -1):
        for ex in (0, 1):
            for rv in (0, 1):
                check(rt, "CumSum", [x, np.array(axis, np.int64)], dict(exclusive=ex, reverse=rv),
                      tol=1e-4)
                check(rt, "CumProd", [rand(dt, (3, 4, 5), 1, 3), np.array(axis, np.int64)],
                      dict(exclusive=ex, reverse=rv), opset=26, tol=1e-4)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int8, bool, np.float16])
def test_gather_scatter_elements_and_nd(rt, dt):
    data = rand(dt, (3, 4, 5))
    for axis in (0, 1, -1):
        dim = data.shape[axis]
        shape = list(data.shape)
        shape[axis] = 3
        idx = R.integers(-dim, dim, shape).astype(np.int64)
        check(rt, "GatherElements", [data, idx], dict(axis=axis))
        # ScatterElements: unique target positions along axis (duplicates are order-dependent)
        perm = np.argsort(R.random(data.shape), axis=axis).take(range(3), axis=axis).astype(np.int64)
        upd = rand(dt, perm.shape)
        check(rt, "ScatterElements", [data, perm, upd], dict(axis=axis))
        if np.dtype(dt) != np.bool_:
            for red in ("add", "mul", "max", "min"):
                check(rt, "ScatterElements", [data, perm, upd], dict(axis=axis, reduction=red))
    check(rt, "GatherND", [data, np.array([[0, 1], [2, 3], [-1, 0]], np.int64)])
    check(rt, "GatherND", [data, np.array([[1], [0]], np.int64)])
    check(rt, "GatherND", [data, np.array([[1, 2], [0, 0], [2, 1]], np.int64)], dict(batch_dims=1))
    check(rt, "ScatterND", [data, np.array([[0, 1], [2, 3]], np.int64), rand(dt, (2, 5))])
    if np.dtype(dt) != np.bool_:
        check(rt, "ScatterND", [data, np.array([[1], [2]], np.int64), rand(dt, (2, 4, 5))],
              dict(reduction="add"))


@pytest.mark.parametrize("dt", [np.float32, np.int64, np.int32, np.float64])
def test_onehot_axes_and_negative_indices(rt, dt):
    idx = np.array([[0, 3, -1], [5, 2, -4]], dt)  # 5 is out of range: all off
    vals = np.array([-2, 7], np.float32)
    for axis in (-1, 0, 1):
        check(rt, "OneHot", [idx, np.array(4, np.int64), vals], dict(axis=axis), opset=11)
    check(rt, "OneHot", [idx, np.array(4.0, np.float32), np.array([0, 1], np.int64)], opset=11)


@pytest.mark.parametrize("dt", [np.float32, np.int64, bool, np.uint8, np.float16])
def test_nonzero_compress_reverse_sequence(rt, dt):
    x = rand(dt, (3, 4), -2, 2)
    check(rt, "NonZero", [x])
    cond = np.array([True, False, True], bool)
    check(rt, "Compress", [x, cond], dict(axis=0))
    check(rt, "Compress", [x, np.array([False, True, True, False], bool)], dict(axis=1))
    check(rt, "Compress", [x, np.array([True, False, True, True, False], bool)])
    seq = rand(dt, (4, 3, 2))
    check(rt, "ReverseSequence", [seq, np.array([4, 1, 3], np.int64)], dict(batch_axis=1, time_axis=0))
    check(rt, "ReverseSequence", [seq.transpose(1, 0, 2).copy(), np.array([2, 0, 4], np.int64)],
          dict(batch_axis=0, time_axis=1))


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int32, np.uint8])
def test_topk_largest_smallest_with_ties(rt, dt):
    x = rand(dt, (3, 6, 4), 0, 5)  # small range: many ties (lower index first)
    for axis in (-1, 1):
        for largest in (1, 0):
            check(rt, "TopK", [x, np.array([3], np.int64)], dict(axis=axis, largest=largest),
                  outputs=2)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_hardmax_first_maximum(rt, dt):
    x = rand(dt, (3, 4, 5), 0, 3).round()
    for axis in (-1, 0, 1):
        check(rt, "Hardmax", [x], dict(axis=axis))
    if dt == np.float32:  # onnxruntime has float32 only; onnx.reference does not coerce to 2-D
        check(rt, "Hardmax", [x], dict(axis=1), opset=11)


def test_large_inputs_split_over_threads_match(rt):
    a, b = rand(np.int32, (300, 700), -1000, 1000), rand(np.int32, (700,), 1, 50)
    for op in ("Add", "Mul", "Div", "Greater"):
        check(rt, op, [a, b])
    check(rt, "Cast", [rand(np.float64, (300, 700), -1e3, 1e3)], dict(to=TensorProto.INT16))
    check(rt, "HardSwish", [rand(np.float32, (300, 700), -5, 5)], tol=1e-5)


# the types onnxruntime's Unique has (onnx.reference's fails on some of these cases)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int8])
def test_unique_sorted_and_in_first_occurrence_order(rt, dt):
    x = rand(dt, (4, 6), 0, 4)
    x[2] = x[0]  # a repeated row for axis=0
    for attrs in (dict(sorted=1), dict(sorted=0), dict(sorted=1, axis=0), dict(sorted=0, axis=0),
                  dict(sorted=1, axis=-1)):
        check(rt, "Unique", [x], attrs, outputs=4, opset=11)
    check(rt, "Unique", [x.ravel()], dict(sorted=1), outputs=1, opset=11)


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"]


@pytest.mark.parametrize("dt", NUMERIC, ids=ids(NUMERIC))
def test_reductions_on_every_type_over_any_axes(rt, dt):
    x = rand(dt, (3, 4, 5), 1, 4)
    for op in REDUCTIONS:
        if not allowed(op, 18, dt) or (not is_float(dt) and op in ("ReduceL2", "ReduceLogSumExp",
                                                                    "ReduceLogSum")):
            continue  # integer L2/LogSum*: not run by this backend (declined)
        for axes, keep in (([1], 1), ([0, 2], 0), ([-1], 0), (None, 1)):
            if op == "ReduceProd" and axes != [1]:
                continue  # products of many elements overflow (integers) or round (16-bit)
            ins = [x] if axes is None else [x, np.array(axes, np.int64)]
            check(rt, op, ins, dict(keepdims=keep), tol=1e-4, const_inputs=(1,) if axes else ())


def test_reduce_logsumexp_float32_over_separated_axes(rt):
    x = rand(np.float32, (3, 4, 5), -3, 3)
    check(rt, "ReduceLogSumExp", [x, np.array([0, 2], np.int64)], dict(keepdims=1), tol=1e-5,
          const_inputs=(1,))


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint32,
                                np.uint64])
def test_prelu_slope_broadcasts_to_the_input(rt, dt):
    x = rand(dt, (2, 3, 4, 5), -20, 20)
    for slope_shape in ((3, 1, 1), (5,), (1,), (2, 3, 4, 5)):
        check(rt, "PRelu", [x, rand(dt, slope_shape, 0, 3)], opset=16)


@pytest.mark.parametrize("dt", NUMERIC, ids=ids(NUMERIC))
def test_argmax_argmin_on_every_type_with_ties(rt, dt):
    x = rand(dt, (3, 4, 5), 0, 3)  # ties: first index, or last with select_last_index
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, -1):
            for last in (0, 1):
                check(rt, op, [x], dict(axis=axis, keepdims=1, select_last_index=last))
    big = np.array([2**62 + 1, 2**62, 2**62 + 3, 2**62 + 2], np.int64)  # distinct only as ints
    check(rt, "ArgMax", [big], dict(axis=0))

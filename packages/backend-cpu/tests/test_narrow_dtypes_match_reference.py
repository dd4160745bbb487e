"""The 8-, 4- and 2-bit types: Cast/CastLike, QuantizeLinear/DequantizeLinear and BitCast,
bit for bit against onnxruntime where its CPU provider has the kernel, else onnx.reference
(whose conversions are ml_dtypes'); and MatMul, Einsum, MaxPool, QLinearMatMul on the element
types they gained (float16, bfloat16, float64, integers).

The cast inputs hold every value of the narrow type, every midpoint between two neighbours
(the ties that round to even), the values just beside them, the overflow thresholds and the
special values, so that each rounding and saturation rule is met at its edge."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from conftest import one_node_model, reference, run_cpu
from onnx import TensorProto, helper

R = np.random.default_rng(20261201)
F8 = [np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                            ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)]
F4 = np.dtype(ml_dtypes.float4_e2m1fn)
MINIFLOATS = F8 + [F4]
SUBBYTE_INTS = [np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2,
                                      ml_dtypes.uint2)]
BF16 = np.dtype(ml_dtypes.bfloat16)
# what onnxruntime says when it has no kernel for a type or op, or does not know the opset
NO_KERNEL = ("NOT_IMPLEMENTED", "Could not find an implementation", "data type is not supported",
             "is not supported", "No Op registered", "opset")


def ids(dts):
    return [np.dtype(d).name for d in dts]


def onnxruntime_or_reference(model, feeds):
    """onnxruntime's outputs, or onnx.reference's where onnxruntime cannot load or run the
    model (no kernel for the type or opset) or cannot exchange the types with numpy."""
    narrow = {TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ,
              TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1,
              TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2,
              TensorProto.FLOAT8E8M0}
    g = model.graph
    if any(v.type.tensor_type.elem_type in narrow for v in [*g.input, *g.output]):
        return reference(model, feeds)  # onnxruntime's Python API takes none of them
    try:
        import onnxruntime as ort

        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.ir_version = min(m.ir_version, 10)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - any refusal by onnxruntime: the reference decides
        if not any(k in str(e) for k in NO_KERNEL):
            raise
        return reference(model, feeds)


def run_one(rt, op, inputs, attrs=None, *, opset=25, const_inputs=()):
    model, feeds = one_node_model(op, inputs, attrs, opset=opset, const_inputs=const_inputs)
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, f"{op} not run on the cpu backend: {assignment}"
    return got, onnxruntime_or_reference(model, feeds), model


def same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    g, w = got.view(np.uint8), want.view(np.uint8)
    bad = np.flatnonzero(g.ravel() != w.ravel())
    assert bad.size == 0, (
        f"{what}: {bad.size} of {g.size} differ; first at {bad[0]}: got {g.ravel()[bad[0]]:#04x}, "
        f"expected {w.ravel()[bad[0]]:#04x}")


def every_value(dt) -> np.ndarray:
    """Every value of a narrow float type, in order (NaN codes left out)."""
    codes = np.arange(1 << (4 if dt == F4 else 8), dtype=np.uint8)
    v = codes.view(dt).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def edge_values(dt) -> np.ndarray:
    """Float32 values at every rounding edge of dt (see the module docstring)."""
    v = every_value(dt)
    mid = (v[1:] + v[:-1]) / 2
    top = float(v.max())
    big = [top, top * 1.03, top * 1.0625, top * 1.07, top * 2, 1e6, 3.4e38, np.inf]
    x = np.concatenate([v, mid, -mid, big, -np.asarray(big), [0.0, -0.0, np.nan, -np.nan, 1e-7,
                                                                -1e-7, 1e-30]])
    x = x.astype(np.float32)
    return np.concatenate([x, np.nextafter(x, np.float32(np.inf)),
                           np.nextafter(x, np.float32(-np.inf))])


# --- Cast --------------------------------------------------------------------------------------

@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64], ids=["float32", "float16",
                                                                          "float64"])
@pytest.mark.parametrize("to", MINIFLOATS, ids=ids(MINIFLOATS))
def test_cast_to_8_and_4_bit_floats_rounds_and_saturates_as_onnx(rt, to, src, saturate):
    if to == F4 and not saturate:
        pytest.skip("saturate applies to the 8-bit floats only")
    with np.errstate(over="ignore"):
        x = edge_values(to).astype(src)
    tp = helper.np_dtype_to_tensor_dtype(to)
    got, want, _ = run_one(rt, "Cast", [x], dict(to=tp, saturate=saturate))
    same_bits(got[0], want[0], f"Cast {np.dtype(src).name} -> {to.name}, saturate={saturate}")
    like, want_like, _ = run_one(rt, "CastLike", [x, np.zeros((1,), to)], dict(saturate=saturate))
    same_bits(like[0], want_like[0], f"CastLike {np.dtype(src).name} -> {to.name}")


@pytest.mark.parametrize("src", MINIFLOATS + SUBBYTE_INTS, ids=ids(MINIFLOATS + SUBBYTE_INTS))
def test_cast_from_narrow_types_gives_every_value_exactly(rt, src):
    if src in MINIFLOATS:
        x = np.arange(16 if src == F4 else 256, dtype=np.uint8).view(src)
    else:
        info = ml_dtypes.iinfo(src)
        x = np.arange(int(info.min), int(info.max) + 1).astype(src)
    for to in [np.float32, np.float16, np.float64, BF16, np.int8, np.uint8, np.int32, np.int64,
               *MINIFLOATS, *SUBBYTE_INTS]:
        to = np.dtype(to)
        if to == src:
            continue
        got, want, _ = run_one(rt, "Cast", [x], dict(to=helper.np_dtype_to_tensor_dtype(to)))
        w = np.asarray(want[0])
        if src in MINIFLOATS and to in SUBBYTE_INTS:
            continue  # NaN and out-of-range float to int: implementation-defined
        if to in MINIFLOATS or to in SUBBYTE_INTS:
            same_bits(got[0], w, f"Cast {src.name} -> {to.name}")
        else:
            if src in MINIFLOATS and to.kind in "iu":
                continue  # NaN and out-of-range float to int: implementation-defined
            np.testing.assert_array_equal(got[0], w, err_msg=f"Cast {src.name} -> {to.name}")


@pytest.mark.parametrize("to", SUBBYTE_INTS, ids=ids(SUBBYTE_INTS))
def test_cast_to_4_and_2_bit_integers_wraps_as_onnx(rt, to):
    tp = helper.np_dtype_to_tensor_dtype(to)
    for x in (np.arange(-40, 40, dtype=np.int32), np.arange(-40, 40).astype(np.int8),
              np.arange(0, 80).astype(np.uint8), np.arange(-20, 20, dtype=np.int64),
              np.arange(-20, 20).astype(np.float32), np.arange(-20, 20).astype(np.float16)):
        got, want, _ = run_one(rt, "Cast", [x], dict(to=tp))
        same_bits(got[0], want[0], f"Cast {x.dtype.name} -> {to.name}")


def test_casts_between_narrow_types_keep_their_shape_and_run_in_a_chain(rt):
    # float32 -> e4m3fn -> float16 -> int4 -> float32: each step against the reference
    x = R.uniform(-10, 10, (4, 5, 6)).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["b"], ["c"], to=TensorProto.INT4),
             helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    got, assignment = run_cpu(rt, model, {"x": x})
    assert set(assignment.values()) == {"cpu"}
    np.testing.assert_array_equal(got[0], reference(model, {"x": x})[0])


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8e8m0_rounds_the_exponent_as_onnx(rt, saturate, round_mode):
    x = np.concatenate([edge_values(F8[2]), np.ldexp(np.float32(1.5), np.arange(-140, 128)),
                        np.float32([3.4e38, 1e-45, 0.75, 0.74, 0.76])]).astype(np.float32)
    got, want, _ = run_one(rt, "Cast", [x], dict(to=TensorProto.FLOAT8E8M0, saturate=saturate,
                                                 round_mode=round_mode))
    same_bits(got[0], want[0], f"Cast float32 -> float8e8m0 {round_mode} saturate={saturate}")
    back, want_back, _ = run_one(rt, "Cast", [np.asarray(want[0])], dict(to=TensorProto.FLOAT))
    np.testing.assert_array_equal(back[0], want_back[0])


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------------

QUANT_INTS = [np.dtype(t) for t in (np.uint8, np.int8)] + SUBBYTE_INTS


def zero_point(dt, shape):
    info = ml_dtypes.iinfo(dt)
    return R.integers(int(info.min), int(info.max) + 1, shape).astype(dt)


@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("dt", QUANT_INTS, ids=ids(QUANT_INTS))
def test_quantize_and_dequantize_integers_match(rt, dt, layout):
    x = R.uniform(-6, 6, (4, 6)).astype(np.float32)
    x.ravel()[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]  # ties to even, before the zero point
    attrs, shape = {}, ()
    if layout == "axis":
        attrs, shape = dict(axis=1), (6,)
    elif layout == "blocked":
        attrs, shape = dict(axis=1, block_size=2), (4, 3)
    scale = R.uniform(0.2, 1.5, shape).astype(np.float32)
    zp = zero_point(dt, shape)
    got, want, _ = run_one(rt, "QuantizeLinear", [x, scale, zp], attrs)
    same_bits(got[0], want[0], f"QuantizeLinear -> {dt.name} ({layout})")
    q = np.asarray(want[0])
    got, want, _ = run_one(rt, "DequantizeLinear", [q, scale, zp], attrs)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("dt", MINIFLOATS, ids=ids(MINIFLOATS))
def test_quantize_and_dequantize_8_and_4_bit_floats_match(rt, dt, saturate):
    if dt == F4 and not saturate:
        pytest.skip("saturate applies to the 8-bit floats only")
    x = (edge_values(dt) * 2).astype(np.float32)
    scale = np.float32(2.0)
    got, want, _ = run_one(rt, "QuantizeLinear", [x, scale, np.zeros((), dt)],
                           dict(saturate=saturate))
    same_bits(got[0], want[0], f"QuantizeLinear -> {dt.name}, saturate={saturate}")
    q = np.asarray(want[0])
    for sc in (np.float32(0.75), np.float16(0.75)):
        got, want, _ = run_one(rt, "DequantizeLinear", [q, sc])
        np.testing.assert_array_equal(got[0], want[0])


def test_quantize_float16_input_and_scale_rounds_the_quotient_to_float16(rt):
    x = R.uniform(-50, 50, 257).astype(np.float16)
    scale = np.float16(0.3)
    got, want, _ = run_one(rt, "QuantizeLinear", [x, scale, np.int8(3)])
    np.testing.assert_array_equal(got[0], want[0])


def test_qlinearmatmul_takes_float16_scales(rt):
    a = R.integers(0, 256, (3, 5)).astype(np.uint8)
    b = R.integers(0, 256, (5, 4)).astype(np.uint8)
    ins = [a, np.float16(0.02), np.uint8(120), b, np.float16(0.01), np.uint8(130),
           np.float16(0.05), np.uint8(128)]
    got, want, _ = run_one(rt, "QLinearMatMul", ins, opset=21)
    assert np.abs(got[0].astype(int) - np.asarray(want[0]).astype(int)).max() <= 1


# --- BitCast -----------------------------------------------------------------------------------

BITCASTS = [(np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64),
            (np.uint16, np.float16), (np.float16, BF16), (np.int8, np.uint8), (bool, np.uint8),
            (ml_dtypes.int4, ml_dtypes.uint4), (ml_dtypes.uint4, ml_dtypes.int4),
            (ml_dtypes.float8_e5m2, np.int8), (ml_dtypes.uint2, ml_dtypes.int2)]


@pytest.mark.parametrize("src,to", BITCASTS, ids=[f"{np.dtype(a).name}-{np.dtype(b).name}"
                                                  for a, b in BITCASTS])
def test_bitcast_reinterprets_the_bits(rt, src, to):
    src, to = np.dtype(src), np.dtype(to)
    if src in SUBBYTE_INTS:
        x = np.arange(-8, 8).astype(src) if src.name.startswith("int") else \
            np.arange(0, 4 if src.name == "uint2" else 16).astype(src)
    elif src.kind == "b":
        x = np.array([True, False, True])
    else:
        x = R.integers(0, 256, 48, dtype=np.uint8).view(src).reshape(2, -1)
    got, want, _ = run_one(rt, "BitCast", [x], dict(to=helper.np_dtype_to_tensor_dtype(to)),
                           opset=26)
    same_bits(got[0], np.asarray(want[0]), f"BitCast {src.name} -> {to.name}")


def test_bitcast_between_widths_is_an_error_that_names_both_types(rt):
    import nnplug

    model, feeds = one_node_model("BitCast", [np.ones(3, np.float32)], dict(to=TensorProto.INT64),
                                  opset=26)
    with pytest.raises(nnplug.errors.NnplugError):
        run_cpu(rt, model, feeds)


# --- MatMul, Einsum, MaxPool on more element types ---------------------------------------------

MATMUL_TYPES = [np.float16, BF16, np.float64, np.int32, np.int64, np.uint32, np.uint64]


@pytest.mark.parametrize("dt", MATMUL_TYPES, ids=ids(MATMUL_TYPES))
@pytest.mark.parametrize("shapes", [((3, 7), (7, 5)), ((2, 1, 4, 6), (3, 6, 2)), ((6,), (6, 300)),
                                    ((2, 3, 5), (5,))], ids=["2d", "broadcast", "vec-mat", "mat-vec"])
def test_matmul_on_more_types_matches(rt, dt, shapes):
    dt = np.dtype(dt)
    a, b = (R.integers(-9 if dt.kind == "i" else 0, 10, s).astype(dt) if dt.kind in "iu" else
            R.uniform(-2, 2, s).astype(dt) for s in shapes)
    if dt == BF16:  # numpy cannot multiply bfloat16 matrices: float32 sums, one rounding
        model, feeds = one_node_model("MatMul", [a, b], opset=21)
        got, _ = run_cpu(rt, model, feeds)
        want = [(a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)]
    else:
        got, want, _ = run_one(rt, "MatMul", [a, b], opset=21)
    g, w = got[0], np.asarray(want[0])
    assert g.dtype == w.dtype and g.shape == w.shape
    if dt.kind in "iu":
        np.testing.assert_array_equal(g, w)
    else:  # summed in float32 (float64 in double): a last-bit difference at most
        tol = {np.dtype(np.float16): 2e-3, BF16: 1.6e-2}.get(dt, 1e-12)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


# (ONNX 1.23's Einsum schema has no bfloat16, though its node suite runs it: the suite covers
# that type)
@pytest.mark.parametrize("dt", [np.float16], ids=["float16"])
@pytest.mark.parametrize("eqn,shapes", [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
                                        ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)])])
def test_einsum_on_16_bit_floats_matches(rt, dt, eqn, shapes):
    xs = [R.integers(-3, 4, s).astype(np.dtype(dt)) for s in shapes]  # exact in either type
    model, feeds = one_node_model("Einsum", xs, dict(equation=eqn), opset=12)
    got, assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}
    want = np.einsum(eqn, *[x.astype(np.float32) for x in xs]).astype(np.dtype(dt))
    assert got[0].dtype == want.dtype and got[0].shape == want.shape
    np.testing.assert_array_equal(got[0].astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.float16, np.float64],
                         ids=["uint8", "int8", "float16", "float64"])
def test_maxpool_on_more_types_matches(rt, dt):
    dt = np.dtype(dt)
    x = (R.integers(0 if dt.kind == "u" else -100, 100, (2, 3, 7, 9)) if dt.kind in "iu" else
         R.uniform(-5, 5, (2, 3, 7, 9))).astype(dt)
    for attrs in (dict(kernel_shape=[3, 3]), dict(kernel_shape=[2, 3], strides=[2, 2],
                                                 pads=[1, 0, 1, 1]),
                  dict(kernel_shape=[3, 2], dilations=[2, 1], ceil_mode=1, strides=[2, 2])):
        got, want, _ = run_one(rt, "MaxPool", [x], attrs, opset=12)
        np.testing.assert_array_equal(got[0], want[0], err_msg=str(attrs))


# --- thread counts ------------------------------------------------------------------------------

def test_thread_count_does_not_change_the_narrow_type_kernels(rt):
    # large enough for the parallel loops to split the work
    x = R.uniform(-500, 500, (64, 1031)).astype(np.float32)
    a = R.uniform(-2, 2, (3, 70, 90)).astype(BF16)
    b = R.uniform(-2, 2, (90, 110)).astype(BF16)
    cases = [
        one_node_model("Cast", [x], dict(to=TensorProto.FLOAT8E4M3FN, saturate=0), opset=25),
        one_node_model("QuantizeLinear", [x, np.float32(40.0), np.zeros((), ml_dtypes.int4)],
                       opset=25),
        one_node_model("MatMul", [a, b], opset=21),
        one_node_model("MaxPool", [R.integers(0, 256, (2, 8, 40, 40)).astype(np.uint8)],
                       dict(kernel_shape=[3, 3], strides=[2, 2]), opset=12),
    ]
    lib = rt.backends["cpu"].backend
    for model, feeds in cases:
        with rt.load(model, backends=["cpu"]) as net:
            base = net.run(feeds)
            try:
                for n in (1, 3):
                    lib.set_num_threads(n)
                    other = net.run(feeds)
                    for k in base:
                        same_bits(other[k], base[k], f"{model.graph.node[0].op_type}, {n} thread(s)")
            finally:
                lib.set_num_threads(0)

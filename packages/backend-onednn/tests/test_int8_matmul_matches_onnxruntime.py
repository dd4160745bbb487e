"""MatMulInteger runs on oneDNN's int8 matmul (int8.c) and gives onnxruntime's int32 results bit
for bit: uint8 and int8 operands, zero points at the ends of their range (0, 255, -128, 127),
per-column B zero points as quantize_dynamic writes them, saturated operands, odd and batched
(broadcast) shapes, constant and run-time B, at 1 and 2 threads. What onnxruntime itself refuses
or this backend does not take (a per-row A zero point, a vector operand) goes to the cpu
backend."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import graph_model, onnxruntime_run, run_both
from onnx import TensorProto, helper

import nnplug

RANGE = {np.uint8: (0, 255), np.int8: (-128, 127)}


def vnni() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx512_vnni" in flags or " avx_vnni" in flags


pytestmark = pytest.mark.skipif(not vnni(), reason="onednn claims MatMulInteger only with VNNI")


def rand(rng, dtype, shape, extreme=False):
    lo, hi = RANGE[dtype]
    if extreme:  # every element at an end of the range: the largest products and sums
        return rng.choice(np.array([lo, hi], dtype=dtype), size=shape)
    return rng.integers(lo, hi + 1, size=shape, dtype=dtype)


def matmul_integer(a_shape, b_shape, adt, bdt, azp=None, bzp=None, b_const=True, seed=0,
                   extreme=False, azp_input=False):
    """The model and its feeds: Y = MatMulInteger(A, B, a_zero_point, b_zero_point)."""
    rng = np.random.default_rng(seed)
    a = rand(rng, adt, a_shape, extreme)
    b = rand(rng, bdt, b_shape, extreme)
    feeds, inits, names = {"A": a}, {}, ["A", "B"]
    (inits if b_const else feeds)["B"] = b
    if azp is not None or bzp is not None:
        names.append("" if azp is None else "a_zp")
        if azp is not None:
            (feeds if azp_input else inits)["a_zp"] = np.asarray(azp, dtype=adt)
    if bzp is not None:
        names.append("b_zp")
        inits["b_zp"] = np.asarray(bzp, dtype=bdt)
    node = helper.make_node("MatMulInteger", names, ["Y"], name="mmi")
    return graph_model([node], feeds, inits), feeds


TYPES = [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)]
IDS = ["u8s8", "u8u8", "s8s8", "s8u8"]


def assert_onednn_exact(rt, model, feeds, threads):
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert assignment["mmi"] == "onednn", assignment
    assert got[0].dtype == np.int32 and got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("adt,bdt", TYPES, ids=IDS)
def test_zero_points_at_the_ends_of_the_range_match_exactly(rt, adt, bdt, threads):
    lo_a, hi_a = RANGE[adt]
    lo_b, hi_b = RANGE[bdt]
    for i, (za, zb) in enumerate([(None, None), (lo_a, lo_b), (hi_a, hi_b), (lo_a, hi_b),
                                  (hi_a, lo_b), (0, 0), (7, 3)]):
        model, feeds = matmul_integer((7, 13), (13, 5), adt, bdt, za, zb, seed=i)
        assert_onednn_exact(rt, model, feeds, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("adt,bdt", TYPES, ids=IDS)
def test_per_column_b_zero_points_match_exactly(rt, adt, bdt, threads):
    """quantize_dynamic's per_channel=True: one B zero point per output column."""
    lo, hi = RANGE[bdt]
    zb = np.array([lo, hi, 0, 1, hi - 1, lo + 1, 5, 9, 11], dtype=bdt)
    model, feeds = matmul_integer((2, 11, 33), (33, 9), adt, bdt, RANGE[adt][1] // 2, zb)
    assert_onednn_exact(rt, model, feeds, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("adt,bdt", TYPES, ids=IDS)
def test_saturated_operands_sum_exactly(rt, adt, bdt, threads):
    """Every element at an end of its range over a long row (K = 4099): sums of products up to
    255 * 128 each, where an int16 pair sum would saturate."""
    za = RANGE[adt][0]
    zb = RANGE[bdt][1]
    model, feeds = matmul_integer((3, 4099), (4099, 17), adt, bdt, za, zb, extreme=True)
    assert_onednn_exact(rt, model, feeds, threads)
    model, feeds = matmul_integer((3, 4099), (4099, 17), adt, bdt, extreme=True, seed=1)
    assert_onednn_exact(rt, model, feeds, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("a_shape,b_shape,b_const", [
    ((1, 1), (1, 1), True),
    ((3, 129, 65), (65, 31), True),          # quantize_dynamic's activations x weights
    ((2, 3, 5, 8), (2, 3, 8, 6), False),     # both at run time (attention's products)
    ((2, 1, 5, 8), (3, 8, 6), False),        # broadcast batch dims
    ((4, 5, 8), (1, 8, 6), True),
], ids=["1x1", "batched_const", "batched_runtime", "broadcast", "broadcast_const"])
def test_odd_and_batched_shapes_match_exactly(rt, a_shape, b_shape, b_const, threads):
    for adt, bdt in TYPES:
        model, feeds = matmul_integer(a_shape, b_shape, adt, bdt, RANGE[adt][1] // 3,
                                      RANGE[bdt][0] + 1, b_const=b_const)
        assert_onednn_exact(rt, model, feeds, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_zero_point_given_at_run_time_matches_exactly(rt, threads):
    """DynamicQuantizeLinear's zero point reaches MatMulInteger as a run-time scalar."""
    for za in (0, 255, 128, 1):
        model, feeds = matmul_integer((9, 40), (40, 12), np.uint8, np.int8, za, 0,
                                      azp_input=True, seed=za)
        assert_onednn_exact(rt, model, feeds, threads)


def test_symbolic_rows_run_for_each_shape(rt):
    """A batch known only at run time: one kernel, a matmul per shape (an empty one computes
    nothing), each exact."""
    rng = np.random.default_rng(3)
    b = rand(rng, np.int8, (16, 7))
    node = helper.make_node("MatMulInteger", ["A", "B", "a_zp"], ["Y"], name="mmi")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.UINT8, ["n", 16])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, ["n", 7])],
        [helper.make_tensor("B", TensorProto.INT8, b.shape, b.tobytes(), raw=True),
         helper.make_tensor("a_zp", TensorProto.UINT8, [], [131])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with rt.load(model, backends=["onednn", "cpu"]) as net:
        assert net.assignment["mmi"] == "onednn"
        for n in (1, 5, 0, 33, 5):
            a = rand(rng, np.uint8, (n, 16))
            got = net.run({"A": a})["Y"]
            want = onnxruntime_run(model, {"A": a})[0]
            assert got.shape == (n, 7)
            np.testing.assert_array_equal(got, want)


def test_empty_inner_dimension_gives_zeros(rt):
    """K = 0: every sum is of nothing, so zeros (numpy's answer; onnxruntime 1.32 leaves its
    output unwritten there, whatever the memory held)."""
    model, feeds = matmul_integer((4, 0), (0, 3), np.uint8, np.int8, 5, 2)
    with rt.load(model, backends=["onednn", "cpu"]) as net:
        assert net.assignment["mmi"] == "onednn"
        got = net.run(feeds)["Y"]
    np.testing.assert_array_equal(got, np.zeros((4, 3), np.int32))


def test_what_onednn_does_not_take_is_left_to_the_cpu_backend(rt):
    """A per-row A zero point (onnxruntime refuses it too) and a vector A are declined at load,
    so another backend's answer (or error) stands."""
    model, feeds = matmul_integer((13,), (13, 4), np.uint8, np.int8, 3, 1)
    with rt.load(model, backends=["onednn", "cpu"]) as net:
        assert net.assignment["mmi"] == "cpu"
        np.testing.assert_array_equal(net.run(feeds)["Y"], onnxruntime_run(model, feeds)[0])
    model, feeds = matmul_integer((3, 13), (13, 4), np.uint8, np.int8,
                                  np.array([1, 2, 3], np.uint8), 1)
    try:
        net = rt.load(model, backends=["onednn", "cpu"])
    except nnplug.NnplugError:
        return  # no backend takes it: a clean refusal at load
    with net:
        assert net.assignment["mmi"] != "onednn"

"""QLinearMatMul (QOperator models) runs on oneDNN's int8 matmul (int8.c): the exact int32 sums of
MatMulInteger, then round(float(acc) * (sa * sb / sy)) + zy, ties to even, saturated, as the cpu
backend and onnxruntime requantize: onnxruntime's uint8 / int8 outputs bit for bit, with
per-tensor and per-column B scales and zero points, zero points at the ends of their range,
outputs that saturate, odd and batched shapes, at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import graph_model, run_both
from onnx import helper
from test_int8_matmul_matches_onnxruntime import RANGE, rand, vnni

pytestmark = pytest.mark.skipif(not vnni(), reason="onednn claims QLinearMatMul only with VNNI")


def qlinear_matmul(a_shape, b_shape, adt, bdt, ydt, per_column=False, seed=0, y_scale=0.5,
                   zps=None):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, adt, a_shape), rand(rng, bdt, b_shape)
    N = b_shape[-1]
    za, zb, zy = zps if zps is not None else (RANGE[adt][1] // 2, RANGE[bdt][0] + 3,
                                              RANGE[ydt][0] + 7)
    inits = {"sa": np.float32(0.02), "za": adt(za),
             "B": b, "sb": (rng.uniform(0.005, 0.05, N).astype(np.float32) if per_column
                            else np.float32(0.013)),
             "zb": (np.array([RANGE[bdt][i % 2] for i in range(N)], bdt) if per_column
                    else bdt(zb)),
             "sy": np.float32(y_scale), "zy": ydt(zy)}
    node = helper.make_node("QLinearMatMul", ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], ["Y"],
                            name="qmm")
    return graph_model([node], {"A": a}, inits), {"A": a}


# the type combinations onnxruntime implements (its output has A's type)
TYPES = [(np.uint8, np.int8, np.uint8), (np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8)]
IDS = ["u8s8-u8", "u8u8-u8", "s8s8-s8"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("adt,bdt,ydt", TYPES, ids=IDS)
def test_qlinear_matmul_matches_exactly(rt, adt, bdt, ydt, threads):
    cases = [dict(a_shape=(7, 13), b_shape=(13, 5)),
             dict(a_shape=(2, 9, 40), b_shape=(40, 11), per_column=True),
             dict(a_shape=(3, 64), b_shape=(64, 17), y_scale=0.01),  # saturates
             dict(a_shape=(5, 33), b_shape=(33, 6),
                  zps=(RANGE[adt][0], RANGE[bdt][1], RANGE[ydt][1])),
             dict(a_shape=(5, 33), b_shape=(33, 6),
                  zps=(RANGE[adt][1], RANGE[bdt][0], RANGE[ydt][0]))]
    for i, case in enumerate(cases):
        model, feeds = qlinear_matmul(adt=adt, bdt=bdt, ydt=ydt, seed=i, **case)
        assignment, got, want = run_both(rt, model, feeds, threads)
        assert assignment["qmm"] == "onednn", assignment
        assert got[0].dtype == want[0].dtype
        np.testing.assert_array_equal(got[0], want[0], err_msg=str(case))

"""Gemm with a constant B (GPT-2's projections, a classifier's last layer) runs on the packed
product MatMul uses (op_gemm.c, gemm_run_packed): alpha and transB folded into B once, a constant
per-column C in the epilogue, a fed C of the output's shape as a residual, any other C added
after; a fused activation after the bias. Every combination against onnxruntime, at 1 and 2
threads, for one row, a few, and more than a tile's."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, onnxruntime_run, run_cpu
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(29)
K, N = 70, 37

# C: (shape as a function of rows, constant?)
C_KINDS = {
    "none": None,
    "const_cols": (lambda m: (N,), True),
    "const_row": (lambda m: (1, N), True),
    "const_scalar": (lambda m: (), True),
    "const_per_row": (lambda m: (m, 1), True),
    "fed_full": (lambda m: (m, N), False),
    "fed_cols": (lambda m: (N,), False),
}


def gemm_model(rows, c_kind, trans_b, alpha, beta, act):
    w = RNG.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, K])]
    feeds = {"a": RNG.standard_normal((rows, K)).astype(np.float32)}
    names = ["a", "w"]
    if C_KINDS[c_kind] is not None:
        shape_of, const = C_KINDS[c_kind]
        c = RNG.standard_normal(shape_of(rows)).astype(np.float32)
        names.append("c")
        if const:
            inits.append(numpy_helper.from_array(c, "c"))
        else:
            ins.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, list(c.shape)))
            feeds["c"] = c
    nodes = [helper.make_node("Gemm", names, ["g" if act else "y"], transB=int(trans_b),
                              alpha=alpha, beta=beta)]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    elif act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.1))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["g"], ["y"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, N])
    model = helper.make_model(helper.make_graph(nodes, "g", ins, [out], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    return model, feeds


@pytest.mark.parametrize("rows", [1, 5, 16])
@pytest.mark.parametrize("c_kind", list(C_KINDS))
@pytest.mark.parametrize("trans_b,alpha,beta", [(0, 1.0, 1.0), (1, 0.5, 2.0), (1, 1.0, 0.0)])
@pytest.mark.parametrize("act", [None, "Relu", "LeakyRelu", "HardSigmoid"])
def test_gemm_of_a_constant_weight_matches_onnxruntime(rt, threads, rows, c_kind, trans_b,
                                                       alpha, beta, act):
    model, feeds = gemm_model(rows, c_kind, trans_b, alpha, beta, act)
    (got,), assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, assignment
    assert_close(got, onnxruntime_run(model, feeds)[0], rtol=1e-5, atol=1e-4,
                 what=f"{rows} rows, C {c_kind}, transB {trans_b}, alpha {alpha}, beta {beta}")

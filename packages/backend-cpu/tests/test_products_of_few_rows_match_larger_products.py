"""A product of a few rows with a constant weight (a decoder's one new token, M = 1 to 4) runs
on its own tile, which reads each weight once (gemm.c, tile_few_avx512), as do the last 1 to 4
rows of a larger product (a 16-token prompt: a 12-row tile, then 4 rows; 10 rows: a 6-row tile,
then 4): every row count from 1 to 16 gives the bits the same rows get inside a 24-row product
(12-row tiles only), and onnxruntime's values, with the fused bias, residual and activation, over
one or several depth blocks and column counts off the tile."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, onnxruntime_run, run_cpu
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(11)


def dense_model(rows, k, n, tail):
    """x[rows, k] @ W[k, n] then, by ``tail``: nothing, + bias then Relu, or + a residual
    input r[rows, n] (fused into the product's epilogue)."""
    w = RNG.standard_normal((k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if tail == "plain" else "p"])]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])]
    if tail == "bias_relu":
        inits.append(numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "b"))
        nodes += [helper.make_node("Add", ["p", "b"], ["q"]), helper.make_node("Relu", ["q"], ["y"])]
    elif tail == "residual":
        ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [rows, n]))
        nodes.append(helper.make_node("Add", ["p", "r"], ["y"]))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                          [rows, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("tail", ["plain", "bias_relu", "residual"])
@pytest.mark.parametrize("k", [5, 300])  # one depth block, and two (KC is 256)
@pytest.mark.parametrize("n", [1, 17, 64, 70, 130])
def test_a_few_rows_match_a_larger_product_and_onnxruntime(rt, threads, tail, k, n):
    big_x = RNG.standard_normal((24, k)).astype(np.float32)
    big_r = RNG.standard_normal((24, n)).astype(np.float32)
    state = RNG.bit_generator.state
    (big,), _ = run_cpu(rt, dense_model(24, k, n, tail), {"x": big_x, "r": big_r}
                        if tail == "residual" else {"x": big_x})
    for rows in range(1, 17):
        RNG.bit_generator.state = state  # the same weights as the larger product's
        model = dense_model(rows, k, n, tail)
        feeds = {"x": big_x[:rows].copy()}
        if tail == "residual":
            feeds["r"] = big_r[:rows].copy()
        (got,), _ = run_cpu(rt, model, feeds)
        np.testing.assert_array_equal(got, big[:rows], err_msg=f"{rows} rows")
        assert_close(got, onnxruntime_run(model, feeds)[0], rtol=1e-5, atol=1e-4,
                     what=f"{rows} rows")

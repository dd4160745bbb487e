"""A MatMul or Gemm of a constant weight splits its columns across the threads (op_gemm.c,
run_packed): up to 4 rows in one contiguous share of B per thread, up to 512 rows in one equal
share per thread with A packed by each thread in its own memory, more rows in blocks of 128
columns. Each path against onnxruntime, with a static and a symbolic row count, rows that are
not a multiple of the 6-row panel and depths that are not a multiple of the 16 columns A is
packed by; and the same bits at 1 and 2 threads (a column's sums do not depend on the thread
that makes them)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, onnxruntime_run, run_cpu
from onnx import TensorProto, helper, numpy_helper

# (rows, depth, columns): each large enough to be split across threads
SHAPES = {
    "one_row": (1, 300, 700),
    "three_rows": (3, 1000, 200),
    "seven_rows_shallow": (7, 17, 2000),
    "prompt": (16, 300, 700),
    "sequence": (100, 129, 333),
    "many_rows": (513, 64, 300),
}


def product_model(rows, k, n, op, symbolic):
    rng = np.random.default_rng(rows * 7 + k)
    w = rng.standard_normal((k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    names = ["a", "w"]
    if op == "Gemm":  # with a bias per column and a Relu: the epilogue on each share
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        names.append("c")
    nodes = [helper.make_node(op, names, ["p"]), helper.make_node("Relu", ["p"], ["y"])]
    dim = "rows" if symbolic else rows
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [dim, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model, {"a": rng.standard_normal((rows, k)).astype(np.float32)}


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_thread_shares_match_onnxruntime_and_each_other(rt, shape, op, symbolic):
    rows, k, n = SHAPES[shape]
    model, feeds = product_model(rows, k, n, op, symbolic)
    lib = rt.backends["cpu"].backend
    got = {}
    try:
        for threads in (1, 2):
            lib.set_num_threads(threads)
            (got[threads],), assignment = run_cpu(rt, model, feeds)
            assert set(assignment.values()) == {"cpu"}, assignment
    finally:
        lib.set_num_threads(0)
    want = onnxruntime_run(model, feeds)[0]
    assert_close(got[1], want, rtol=1e-4, atol=1e-4, what=f"{shape} {op}, 1 thread")
    np.testing.assert_array_equal(got[2], got[1], err_msg=f"{shape} {op}: 2 threads != 1")

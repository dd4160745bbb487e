"""Matrix products give the same value for an element wherever it sits and whatever the thread
count: equal weight rows give bit-identical outputs (as onnxruntime does), and 1, 2 or 3 worker
threads give bit-identical results. The light SqueezeNet depends on it: its constant weights
make logits of about 1e10, and a one-ulp difference between them turns its softmax one-hot."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import one_node_model, run_cpu, zoo_input, zoo_model

RNG = np.random.default_rng(7)


def equal_rows(rows, cols):
    """A weight matrix whose rows are all the same random row."""
    return np.tile(RNG.standard_normal(cols, dtype=np.float32), (rows, 1))


CASES = {
    # Conv through im2col (3x3), the direct 1x1 path, and few pixels with many channels (the
    # output-channel split of late layers); channel counts off the kernel's tile sizes.
    "conv3x3": ("Conv", lambda: [RNG.standard_normal((1, 13, 17, 19), dtype=np.float32),
                                 equal_rows(70, 13 * 9).reshape(70, 13, 3, 3)], dict(pads=[1] * 4)),
    "conv1x1": ("Conv", lambda: [RNG.standard_normal((1, 37, 13, 13), dtype=np.float32),
                                 equal_rows(1000, 37).reshape(1000, 37, 1, 1)], {}),
    "gemm": ("Gemm", lambda: [RNG.standard_normal((23, 300), dtype=np.float32),
                              equal_rows(301, 300)], dict(transB=1)),
    "matmul": ("MatMul", lambda: [RNG.standard_normal((3, 29, 260), dtype=np.float32),
                                  equal_rows(35, 260).T.copy()], {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_equal_weight_rows_give_identical_outputs(rt, case):
    op, make, attrs = CASES[case]
    inputs = make()
    model, feeds = one_node_model(op, inputs, attrs, const_inputs=(1,))
    (got,), _ = run_cpu(rt, model, feeds)
    # every output channel (Conv: axis 1; Gemm/MatMul: last axis) holds the same values
    axis = 1 if op == "Conv" else -1
    first = np.take(got, [0], axis=axis)
    assert np.array_equal(got, np.broadcast_to(first, got.shape)), \
        f"{case}: outputs of equal weight rows differ (max {np.ptp(got, axis=axis).max()})"
    # and they are right
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_thread_count_gives_bit_identical_products(rt, case):
    op, make, attrs = CASES[case]
    inputs = make()
    inputs[1] = RNG.standard_normal(inputs[1].shape, dtype=np.float32)  # random weights
    model, feeds = one_node_model(op, inputs, attrs, const_inputs=(1,))
    lib = rt.backends["cpu"].backend
    results = []
    try:
        for threads in (1, 2, 3):
            lib.set_num_threads(threads)
            results.append(run_cpu(rt, model, feeds)[0][0])
    finally:
        lib.set_num_threads(0)
    for threads, r in zip((2, 3), results[1:]):
        np.testing.assert_array_equal(r, results[0], err_msg=f"{case}: {threads} threads vs 1")


def test_light_squeezenet_softmax_stays_uniform_like_onnxruntime(rt):
    model = zoo_model("squeezenet")
    inp, x = zoo_input(model, seed=3)
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run({inp: x})
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {inp: x})
    (out,) = got.values()
    assert np.ptp(want[0]) == 0.0  # onnxruntime: every class equally likely
    assert np.ptp(out) == 0.0, f"nnplug-cpu softmax is not uniform: max {out.max()}"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_has_the_same_bits_in_products_of_any_row_count(rt, threads):
    """A row of A gives the same product alone, in a few rows, in a prompt's 7 to 18 rows
    (one pass of the A panels over B), in 12 + a few rows, or in many: every tile sums in one
    order."""
    a = RNG.standard_normal((40, 260), dtype=np.float32)
    w = RNG.standard_normal((260, 75), dtype=np.float32)  # columns off the 16-column panels
    lib = rt.backends["cpu"].backend
    lib.set_num_threads(threads)
    try:
        products = {}
        for rows in (1, 4, 5, 6, 7, 8, 11, 12, 13, 16, 18, 19, 23, 40):
            model, feeds = one_node_model("MatMul", [a[:rows], w], {}, const_inputs=(1,))
            products[rows] = run_cpu(rt, model, feeds)[0][0]
    finally:
        lib.set_num_threads(0)
    for rows, got in products.items():
        np.testing.assert_array_equal(got, products[40][:rows], err_msg=f"{rows} rows vs 40")
    np.testing.assert_allclose(products[40], a @ w, rtol=1e-4, atol=1e-3)

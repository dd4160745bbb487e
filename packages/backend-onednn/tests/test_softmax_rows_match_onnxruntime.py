"""A Softmax along the last axis with nothing fused after it runs on the backend's own loop
(rows shared between threads, Cephes' exp, each row's max and sum in 16 lanes): it matches
onnxruntime on rows of every length around the 16-lane vectors, on attention's masks (-inf,
torch's finfo.min, a whole row masked) and non-finite rows (a NaN or +inf makes the whole row
NaN, as onnxruntime), at 1 and 2 threads; oneDNN itself runs no softmax for it; and the
portable loop (oneDNN's ISA cap below AVX-512) gives the AVX-512 loop's bits."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import graph_model, onednn_log, run_both
from onnx import helper

R = np.random.default_rng(7)


def softmax_model(shape, axis=-1):
    nodes = [helper.make_node("Add", ["x", "m"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["y"], axis=axis, name="softmax")]
    x = R.standard_normal(shape).astype(np.float32) * 4
    m = np.zeros(shape, np.float32)
    flat = m.reshape(-1, shape[-1])
    rows = flat.shape[0]
    flat[rows // 3, : shape[-1] // 2] = -np.inf           # a padding mask
    flat[rows // 2, 1::3] = np.finfo(np.float32).min      # torch's masked_fill value
    if rows > 4:
        flat[rows - 1, :] = -np.inf                       # a row masked whole: NaN, as ort
        flat[1, shape[-1] - 1] = np.nan                   # a NaN at the row's end
        flat[2, 0] = np.inf                               # +inf at its start
    feeds = {"x": x, "m": m}
    return graph_model(nodes, feeds), feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(3, 1), (2, 5), (4, 16), (3, 17), (2, 3, 31), (6, 100, 150),
                                   (1, 2, 300, 1000)], ids=str)
def test_last_axis_softmax_matches_onnxruntime(rt, threads, shape):
    model, feeds = softmax_model(shape)
    assignment, outs, want = run_both(rt, model, feeds, threads)
    assert assignment["softmax"] == "onednn", assignment
    np.testing.assert_array_equal(np.isnan(outs[0]), np.isnan(want[0]))
    # exp within 2 ulp, and sums in another order: a few ulp of each probability
    np.testing.assert_allclose(outs[0], want[0], rtol=2e-6, atol=1e-7, equal_nan=True)


SETUP = """
import numpy as np
from test_softmax_rows_match_onnxruntime import softmax_model
model, feeds = softmax_model((1, 2, 300, 1000))
"""


def test_oneDNN_runs_no_softmax_of_its_own_for_it():
    kinds = [line.split(",")[3] for line in onednn_log(SETUP)]
    assert "softmax" not in kinds, kinds


RUN = r"""
import sys, numpy as np, nnplug, nnplug_backend_onednn
sys.path.insert(0, sys.argv[1])
from test_softmax_rows_match_onnxruntime import softmax_model
model, feeds = softmax_model((2, 3, 200, 1000))
with nnplug.Runtime() as rt, rt.load(model, backends=["onednn", "cpu"]) as net:
    np.save(sys.argv[2], net.run(feeds)["y"])
"""


def test_the_portable_loop_gives_the_avx512_loops_bits(tmp_path):
    if " avx512f" not in open("/proc/cpuinfo").read():
        pytest.skip("the AVX-512 loop needs avx512f")
    outs = {}
    for cap in ["", "AVX2"]:
        env = dict(os.environ)
        env.pop("ONEDNN_MAX_CPU_ISA", None)
        if cap:
            env["ONEDNN_MAX_CPU_ISA"] = cap
        path = tmp_path / f"y{cap}.npy"
        subprocess.run([sys.executable, "-c", RUN, os.path.dirname(__file__), str(path)],
                       env=env, check=True, timeout=300)
        outs[cap] = np.load(path)
    assert np.array_equal(outs[""].view(np.uint32), outs["AVX2"].view(np.uint32))

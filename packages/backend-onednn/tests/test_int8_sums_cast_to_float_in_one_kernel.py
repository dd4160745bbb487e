"""quantize_dynamic's products, MatMulInteger -> Cast(float) -> Mul(scales), run the first two
as one oneDNN kernel (claimed together): the int32 sums are converted to float32 as the
zero points come out, on the pool's threads, and no int32 tensor leaves the kernel. The result
is onnxruntime's to the bit (every int32 to float32 conversion rounds once, the same way), at 1
and 2 threads, for a run-time zero point and for shapes that do and do not take threads. A lone
Cast of int32 to float32 runs on oneDNN too, so the float ops after it stay in its partition."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import BACKENDS, graph_model, make_runtime, onnxruntime_run
from onnx import TensorProto, helper
from test_int8_matmul_matches_onnxruntime import vnni

import nnplug

pytestmark = pytest.mark.skipif(not vnni(), reason="onednn claims MatMulInteger only with VNNI")


def dynamic_product(m, k, n, seed=0, bzp=None):
    """y = Cast(MatMulInteger(A, B, a_zp[, b_zp]), float) * s, A and a_zp fed at run time."""
    rng = np.random.default_rng(seed)
    feeds = {"A": rng.integers(0, 256, (m, k), dtype=np.uint8),
             "a_zp": np.array(rng.integers(0, 256), np.uint8),
             "s": np.array(rng.uniform(1e-4, 1e-2), np.float32)}
    inits = {"B": rng.integers(-128, 128, (k, n), dtype=np.int8)}
    names = ["A", "B", "a_zp"]
    if bzp is not None:
        inits["b_zp"] = np.asarray(bzp, np.int8)
        names.append("b_zp")
    nodes = [helper.make_node("MatMulInteger", names, ["sums"], name="mmi"),
             helper.make_node("Cast", ["sums"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["f", "s"], ["y"], name="scale")]
    return graph_model(nodes, feeds, inits), feeds


def kernels(model, feeds, threads):
    """The kernels one profiled run made, as (op types, backend), and its outputs."""
    so = nnplug.SessionOptions()
    so.enable_profiling = True
    rt = make_runtime()
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        sess = nnplug.InferenceSession(model.SerializeToString(), so, providers=BACKENDS,
                                       runtime=rt)
        out = sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            trace = json.load(f)
    finally:
        lib.set_num_threads(0)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    made = [(e["args"]["op_type"], e["args"]["backend"]) for e in events
            if isinstance(e, dict) and e.get("cat") == "kernel"]
    return made, out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,k,n", [(1, 7, 5), (9, 40, 12), (128, 96, 300)],
                         ids=["one_row", "small", "threaded"])
def test_sums_cast_to_float_are_one_kernel_and_exact(m, k, n, threads):
    model, feeds = dynamic_product(m, k, n, seed=m)
    made, got = kernels(model, feeds, threads)
    assert ("MatMulInteger+Cast", "onednn") in made, made
    want = onnxruntime_run(model, feeds)
    assert got[0].dtype == np.float32
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_per_column_b_zero_points_are_taken_out_before_the_conversion(threads):
    model, feeds = dynamic_product(64, 33, 520, seed=4,
                                   bzp=np.arange(520, dtype=np.int64) % 7 - 3)
    made, got = kernels(model, feeds, threads)
    assert ("MatMulInteger+Cast", "onednn") in made, made
    np.testing.assert_array_equal(got[0], onnxruntime_run(model, feeds)[0])


def test_a_lone_int32_cast_runs_on_onednn_exactly():
    rng = np.random.default_rng(1)
    x = rng.integers(-2**31, 2**31 - 1, (70, 600), dtype=np.int64).astype(np.int32)
    x[0, :4] = [2**31 - 1, -2**31, 16777217, -16777217]  # past float32's 24 bits: rounded
    model = graph_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT,
                                          name="cast")], {"x": x})
    with make_runtime().load(model, backends=BACKENDS) as net:
        assert net.assignment["cast"] == "onednn"
        got = net.run({"x": x})["y"]
    np.testing.assert_array_equal(got, onnxruntime_run(model, {"x": x})[0])


def test_other_casts_are_left_to_the_cpu_backend():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    model = graph_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT,
                                          name="cast")], {"x": x})
    with make_runtime().load(model, backends=BACKENDS) as net:
        assert net.assignment["cast"] == "cpu"
        np.testing.assert_array_equal(net.run({"x": x})["y"], x.astype(np.float32))

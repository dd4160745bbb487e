"""An RMS normalization as T5 and Llama export it, [Cast] -> Pow(x, 2) -> ReduceMean(last axis)
-> Add(eps) -> Sqrt -> Div(1, .) or Reciprocal -> Mul(x, .) [-> Cast -> Mul(weight, .)], runs
on the cpu backend as one node (a decoding step's nine nodes per normalization become one),
with static shapes and with unknown ones (a decoder's growing sequence: the chain is then a
kernel of its own). Against onnxruntime at 1 and 2 threads, non-finite values included;
near misses (another exponent, axis or constant, an intermediate read elsewhere) run as
written."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, onnxruntime_run, profiled_ops, run_cpu
from onnx import TensorProto, helper, numpy_helper

WIDTH = 48


def rms_model(*, dynamic=False, cast=True, weight=True, reciprocal=False, opset=18,
              two=2.0, one=1.0, axis=-1, leak=False):
    """x (B, S, WIDTH) -> the normalization -> Mul by 3 (so the chain's end is not the graph's
    output); leak: the mean of squares is a graph output too."""
    inits = {"two": np.float32(two), "eps": np.float32(1e-6), "one": np.float32(one),
             "w": np.random.default_rng(1).uniform(0.5, 1.5, WIDTH).astype(np.float32),
             "three": np.float32(3)}
    x = "x"
    nodes = []
    if cast:
        nodes.append(helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT, name="cast"))
        x = "xf"
    nodes.append(helper.make_node("Pow", [x, "two"], ["sq"], name="pow"))
    if opset >= 18:
        inits["axes"] = np.array([axis], np.int64)
        nodes.append(helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean"))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis], name="mean"))
    nodes += [helper.make_node("Add", ["ms", "eps"], ["mse"], name="add"),
              helper.make_node("Sqrt", ["mse"], ["rms"], name="sqrt")]
    nodes.append(helper.make_node("Reciprocal", ["rms"], ["inv"], name="recip") if reciprocal
                 else helper.make_node("Div", ["one", "rms"], ["inv"], name="div"))
    nodes.append(helper.make_node("Mul", [x, "inv"], ["n"], name="mul"))
    last = "n"
    if cast:
        nodes.append(helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT, name="cast1"))
        last = "nf"
    if weight:
        nodes.append(helper.make_node("Mul", ["w", last], ["nw"], name="weight"))
        last = "nw"
    nodes.append(helper.make_node("Mul", [last, "three"], ["y"], name="after"))
    dims = ["B", "S", WIDTH] if dynamic else [2, 7, WIDTH]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", WIDTH])]
    if leak:
        outputs.append(helper.make_tensor_value_info("ms", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         dims)],
                              outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(seed=0, rows=7):
    return {"x": np.random.default_rng(seed).standard_normal((2, rows, WIDTH)).astype(np.float32)}


VARIANTS = {
    "llama": {},
    "no_casts": {"cast": False},
    "no_weight": {"weight": False},
    "reciprocal": {"reciprocal": True},
    "opset13": {"opset": 13},
    "last_axis_by_number": {"axis": 2},
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_rms_norm_chain_matches_onnxruntime(rt, threads, variant, dynamic):
    model = rms_model(dynamic=dynamic, **VARIANTS[variant])
    for rows in (7, 1) if dynamic else (7,):
        f = feeds(rows=rows)
        got, placed = run_cpu(rt, model, f)
        assert set(placed.values()) == {"cpu"}
        assert_close(got[0], onnxruntime_run(model, f)[0], rtol=1e-5, atol=1e-5, what=variant)


NEAR_MISSES = {
    "cube": {"two": 3.0},
    "not_one_over": {"one": 2.0},
    "other_axis": {"axis": 1},
    "mean_read_elsewhere": {"leak": True},
}


@pytest.mark.parametrize("case", NEAR_MISSES)
def test_near_misses_run_as_written(rt, case):
    model = rms_model(dynamic=True, **NEAR_MISSES[case])
    f = feeds(3)
    got, _ = run_cpu(rt, model, f)
    for g, w in zip(got, onnxruntime_run(model, f)):
        assert_close(g, w, rtol=1e-5, atol=1e-5, what=case)


def test_non_finite_rows_match_onnxruntime(rt):
    model = rms_model(dynamic=True)
    x = feeds(5)["x"]
    x[0, 0, 3] = np.nan
    x[0, 1, 0] = np.inf
    x[0, 2, :] = 0.0  # 0 / sqrt(eps)
    x[1, 0, 5] = 3e38  # its square overflows float32; the sum in double does not
    got, _ = run_cpu(rt, model, {"x": x})
    want = onnxruntime_run(model, {"x": x})[0]
    ok = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want))
    assert_close(got[0][ok], want[ok], rtol=1e-5, atol=1e-5)


CHILD = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import nnplug_backend_cpu
from conftest import isolated_runtime
from test_rms_norm_chain_matches_onnxruntime import feeds, rms_model
rt = isolated_runtime()
rt.register_backend(nnplug_backend_cpu.library_path())
with rt.load(rms_model(dynamic=sys.argv[2] == "dynamic"), backends=["cpu"]) as net:
    net.run(feeds())
"""


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
def test_the_chain_runs_as_one_node(dynamic):
    """The backend's profile (NNPLUG_CPU_PROFILE=1, one line per node it runs) shows one
    RMSNormChain node and none of the nine it stands for."""
    ran = profiled_ops(CHILD, "dynamic" if dynamic else "static")
    assert ran.count("RMSNormChain") == 1, ran
    assert not {"Pow", "ReduceMean", "Sqrt", "Div", "Cast"} & set(ran), ran

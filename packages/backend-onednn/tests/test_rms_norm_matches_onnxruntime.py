"""An RMS normalization as T5 and Llama export it, Cast(float) -> Pow(x, 2) -> ReduceMean(last
axis) -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x, .) -> Mul(weight, .), runs wholly on onednn:
the float-to-float Cast as a view, Pow by 2 as oneDNN's square (x * x, exact), ReduceMean over
the last axis as a loop of the backend's own (sums in double), a constant divided by a value as
an exact division; and the chain as a whole (its variants too: operands either way round,
Div(x, .) for Mul(x, Div(1, .)), no weight) as one step of the backend's own that computes each
op's float32 in the same order. Each against onnxruntime at 1 and 2 threads, non-finite
values included; what it does not take (other exponents and axes, a Cast to another type) is
left to cpu."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, assert_matches, graph_model, profiled_steps, run_both
from onnx import TensorProto, helper, numpy_helper


def rms_norm_nodes(x: str, y: str) -> list:
    return [helper.make_node("Cast", [x], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Pow", ["xf", "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
            helper.make_node("Add", ["ms", "eps"], ["mse"]),
            helper.make_node("Sqrt", ["mse"], ["rms"]),
            helper.make_node("Div", ["one", "rms"], ["inv"]),
            helper.make_node("Mul", ["xf", "inv"], ["normed"]),
            helper.make_node("Mul", ["weight", "normed"], [y])]


def rms_model(rows: int, width: int, seed: int = 0, matmul: bool = True):
    """A projection, then the normalization (the T5 / Llama block's start), then a projection."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, rows, width)).astype(np.float32)
    inits = {"two": np.float32(2), "eps": np.float32(1e-6), "one": np.float32(1),
             "weight": rng.uniform(0.5, 1.5, width).astype(np.float32)}
    nodes = rms_norm_nodes("h" if matmul else "x", "n" if matmul else "y")
    if matmul:
        inits["w1"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits["w2"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), *nodes,
                 helper.make_node("MatMul", ["n", "w2"], ["y"])]
    return graph_model(nodes, {"x": x}, inits, opset=13), {"x": x}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,width", [(128, 512), (7, 64), (1, 1000)])
def test_rms_norm_runs_on_onednn_and_matches_onnxruntime(rt, rows, width, threads):
    model, feeds = rms_model(rows, width)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=1e-5, what=f"{rows}x{width}")


@pytest.mark.parametrize("threads", [1, 2])
def test_non_finite_values_go_through_as_onnxruntime_sends_them(rt, threads):
    model, _ = rms_model(4, 8, matmul=False)
    x = np.array([[[1, -2, 0, 0.5, 3, -1, 2, 1],
                   [0, 0, 0, 0, 0, 0, 0, 0],  # 0 / sqrt(eps): zeros
                   [np.inf, 1, 1, 1, 1, 1, 1, 1],
                   [np.nan, 1, -0.0, 1, 1, 1, 1, 1]]], np.float32)
    placed, got, want = run_both(rt, model, {"x": x}, threads)
    assert set(placed.values()) == {"onednn"}, placed
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0, equal_nan=True)


def op_model(node, x, inits=None, opset=18):
    return graph_model([node], {"x": x}, inits or {}, opset=opset)


SPECIAL = np.array([[0.0, -0.0, 1.5, -3.0, np.inf, -np.inf, np.nan, 1e-40, 3e38, -7.25]],
                   np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_each_op_alone_matches_onnxruntime_on_edge_values(rt, threads):
    cases = {
        "pow2": (helper.make_node("Pow", ["x", "e"], ["y"]), {"e": np.float32(2)}),
        "one_over": (helper.make_node("Div", ["c", "x"], ["y"]), {"c": np.float32(1)}),
        "three_over_1d_constant": (helper.make_node("Div", ["c", "x"], ["y"]),
                                   {"c": np.array([3], np.float32)}),
        "cast": (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT), {}),
    }
    for name, (node, inits) in cases.items():
        placed, got, want = run_both(rt, op_model(node, SPECIAL, inits), {"x": SPECIAL}, threads)
        assert set(placed.values()) == {"onednn"}, (name, placed)
        np.testing.assert_array_equal(got[0], want[0], err_msg=name)  # exact, NaN where NaN


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_mean_over_the_last_axis_in_either_form(rt, keepdims, opset):
    x = np.random.default_rng(opset + keepdims).standard_normal((3, 5, 300)).astype(np.float32)
    if opset < 18:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2], keepdims=keepdims)
        inits = {}
    else:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)
        inits = {"axes": np.array([-1], np.int64)}
    placed, got, want = run_both(rt, op_model(node, x, inits, opset), {"x": x}, 2)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=1e-6)


def test_what_it_does_not_take_goes_to_cpu_and_is_right(rt):
    x = np.random.default_rng(9).standard_normal((2, 3, 4)).astype(np.float32)
    cases = {
        "pow4": (helper.make_node("Pow", ["x", "e"], ["y"]), {"e": np.float32(4)}),
        "pow_of_a_value": (helper.make_node("Pow", ["x", "x"], ["y"]), {}),
        "mean_not_last": (helper.make_node("ReduceMean", ["x"], ["y"], axes=[1]), {}),
        "mean_two_axes": (helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2]), {}),
        "mean_all": (helper.make_node("ReduceMean", ["x"], ["y"]), {}),
        "cast_to_int": (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32), {}),
        "div_by_constant_vector": (helper.make_node("Div", ["c", "x"], ["y"]),
                                   {"c": np.arange(1, 5, dtype=np.float32)}),
    }
    for name, (node, inits) in cases.items():
        model = op_model(node, x, inits, opset=13)
        placed, got, want = run_both(rt, model, {"x": x}, 1)
        assert set(placed.values()) == {"cpu"}, (name, placed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, err_msg=name)
    assert BACKENDS[0] == "onednn"


R = np.random.default_rng(41)


def variant_model(shape, form="div_one", weighted=True, eps_first=False, x_first=True, eps=1e-6):
    """x -> Relu (so x is made inside) -> the RMS normalization -> Relu -> y."""
    d = shape[-1]
    inits = {"two": np.array(2.0, np.float32), "eps": np.array(eps, np.float32),
             "one": np.array(1.0, np.float32), "w": R.standard_normal(d).astype(np.float32),
             "axes": np.array([-1], np.int64)}
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["a"]), n("Pow", ["a", "two"], ["sq"]),
             n("ReduceMean", ["sq", "axes"], ["m"], keepdims=1),
             n("Add", ["eps", "m"] if eps_first else ["m", "eps"], ["me"]),
             n("Sqrt", ["me"], ["s"])]
    if form == "div_one":
        nodes += [n("Div", ["one", "s"], ["r"]), n("Mul", ["a", "r"] if x_first else ["r", "a"],
                                                    ["xn"])]
    else:
        nodes.append(n("Div", ["a", "s"], ["xn"]))
    last = "xn"
    if weighted:
        nodes.append(n("Mul", ["w", "xn"], ["xw"]))
        last = "xw"
    nodes.append(n("Relu", [last], ["y"]))
    graph = helper.make_graph(
        nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model, {"x": (R.standard_normal(shape) * 3).astype(np.float32)}


VARIANTS = {
    "T5: 1 / sqrt, weight": dict(shape=(1, 7, 64)),
    "operands the other way": dict(shape=(2, 5, 48), eps_first=True, x_first=False),
    "x / sqrt, no weight": dict(shape=(3, 40), form="divide", weighted=False),
    "x / sqrt, weight, long rows": dict(shape=(1, 3, 1030), form="divide"),
    "large eps": dict(shape=(1, 4, 16), eps=10.0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(VARIANTS))
def test_the_exported_variants_match_onnxruntime(rt, case, threads):
    model, feeds = variant_model(**VARIANTS[case])
    assignment, got, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert_matches(got[0], want[0], rtol=1e-5, what=case)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_nonfinite_value_spoils_its_row_in_a_variant_as_in_onnxruntime(rt, bad):
    """An infinity makes its row's mean infinite: 1 / inf is 0, so the row is 0 but for the
    infinite value itself (inf * 0: NaN); a NaN makes its whole row NaN. The other rows are
    untouched. NaNs where onnxruntime's are."""
    model, feeds = variant_model((1, 4, 32))
    feeds["x"][0, 2, 5] = bad
    _, got, want = run_both(rt, model, feeds, 1)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    ok = ~np.isnan(want[0])
    assert_matches(got[0][ok], want[0][ok], rtol=1e-5, what=str(bad))


def test_the_pattern_is_one_step():
    """The profile of a run: one 'rms normalization' step between the projections, no
    binary, eltwise or reduction steps for its seven ops (they were five primitives and two
    loops: T5-small's 13 took 0.9 ms of a 6 ms run)."""
    steps = [ln.split("|")[2].strip() for ln in profiled_steps(
        "from test_rms_norm_matches_onnxruntime import rms_model\n"
        "model, feeds = rms_model(7, 64)")]
    assert steps.count("rms normalization") == 1, steps
    assert "binary" not in steps and "reduce mean" not in steps, steps
    assert "eltwise" not in steps, steps

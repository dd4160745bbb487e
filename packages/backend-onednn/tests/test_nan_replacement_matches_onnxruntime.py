"""Where(IsNaN(x), C, x), PyTorch's export of attention's "NaN rows to 0": claimed by onednn as
one float->float step (the bool value never exists in the kernel): on a kernel input bit for
bit as onnxruntime; after a Softmax bit for bit np.where over onednn's own softmax (which may
differ from onnxruntime's by an ulp). Every other IsNaN or Where is declined and runs on cpu."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS, assert_matches, graph_model, onnxruntime_run, run_both
from onnx import helper
from test_transformer_ops_match_onnxruntime import SOFTMAX_ROWS


def nan_where(x: str, c: str, y: str = "y", cond_of: str | None = None):
    """[IsNaN(cond_of or x) -> 'isnan', Where('isnan', c, x) -> y]."""
    return [helper.make_node("IsNaN", [cond_of or x], ["isnan"], name="isnan"),
            helper.make_node("Where", ["isnan", c, x], [y], name="where")]


def scores_with_rows(shape=(2, 3, 5)):
    """Scores whose row [1, 1] is each kind of SOFTMAX_ROWS in turn: one array per kind."""
    rng = np.random.default_rng(0)
    for row in SOFTMAX_ROWS.values():
        s = rng.standard_normal(shape).astype(np.float32)
        s[1, 1] = row
        yield s


def assert_bitwise(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (got, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("s", list(scores_with_rows()), ids=list(SOFTMAX_ROWS))
def test_softmax_nan_rows_to_zero_is_claimed_and_bitwise_equal(rt, s, threads):
    nodes = [helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             *nan_where("p", "zero")]
    model = graph_model(nodes, {"s": s}, {"zero": np.array(0.0, np.float32)})
    assignment, (got,), (want,) = run_both(rt, model, {"s": s}, threads)
    assert assignment == {"softmax": "onednn", "isnan": "onednn", "where": "onednn"}, assignment
    assert not np.isnan(want).any()
    # oneDNN's softmax may differ from onnxruntime's by an ulp; the NaN rows are exact zeros
    # in both, and the replacement itself is exact: bit for bit np.where over onednn's softmax
    zero_rows = ~np.isfinite(s).all(axis=-1) & ~(np.isneginf(s) | np.isfinite(s)).all(axis=-1)
    assert_bitwise(got[zero_rows], want[zero_rows])
    assert_matches(got, want, rtol=1e-6)
    softmax_only = graph_model(nodes[:1], {"s": s})
    _, (p,), _ = run_both(rt, softmax_only, {"s": s}, threads)
    assert_bitwise(got, np.where(np.isnan(p), np.float32(0), p))


@pytest.mark.parametrize("c", [np.array(7.5, np.float32), np.full((1, 1), 7.5, np.float32)],
                         ids=["scalar", "shape [1,1]"])
def test_replacement_constant_of_any_rank_with_one_element(rt, c):
    s = next(scores_with_rows((2, 3, 5)))
    s[0, 2] = SOFTMAX_ROWS["a NaN"]
    nodes = [helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             *nan_where("p", "c")]
    model = graph_model(nodes, {"s": s}, {"c": c})
    assignment, (got,), (want,) = run_both(rt, model, {"s": s}, 1)
    assert assignment == {"softmax": "onednn", "isnan": "onednn", "where": "onednn"}, assignment
    assert (want == 7.5).sum() == 5 and ((got == 7.5) == (want == 7.5)).all()
    assert_matches(got, want, rtol=1e-6)


def special_values():
    """Every kind of float32: NaNs of several payloads and both signs, infinities, zeros of
    both signs, denormals, ordinary values."""
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFFFFFFF,
                     0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x807FFFFF,
                     0x3F800000, 0xC2F60000, 0x7F7FFFFF, 0x00800000], np.uint32)
    return bits.view(np.float32).reshape(2, 8)


@pytest.mark.parametrize("threads", [1, 2])
def test_on_a_kernel_input_every_nan_becomes_c_and_the_rest_passes_bit_for_bit(rt, threads):
    x = special_values()
    model = graph_model(nan_where("x", "c"), {"x": x}, {"c": np.array(-2.25, np.float32)})
    assignment, (got,), (want,) = run_both(rt, model, {"x": x}, threads)
    assert assignment == {"isnan": "onednn", "where": "onednn"}, assignment
    assert_bitwise(got, want)
    nan = np.isnan(x)
    assert (got[nan] == -2.25).all()
    assert np.array_equal(got[~nan].view(np.uint32), x[~nan].view(np.uint32))


def test_inside_a_kernel_after_a_blocked_op(rt):
    # the input to the replacement comes from an op inside the kernel (here a Relu after an Add),
    # and its result is read inside the kernel too
    x = special_values()
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"), *nan_where("a", "c", "r"),
             helper.make_node("Mul", ["r", "x"], ["y"], name="mul")]
    model = graph_model(nodes, {"x": x}, {"c": np.array(1.0, np.float32)})
    assignment, (got,), (want,) = run_both(rt, model, {"x": x}, 1)
    assert set(assignment.values()) == {"onednn"}, assignment
    np.testing.assert_array_equal(got, want)


def declined(rt, nodes, feeds, inits, on_cpu, extra_outputs=()):
    model = graph_model(nodes, feeds, inits)
    for name in extra_outputs:
        model.graph.output.append(helper.make_tensor_value_info(name, 9, feeds["x"].shape))  # BOOL
    want = onnxruntime_run(model, feeds)
    with rt.load(model, backends=BACKENDS) as net:
        assignment = dict(net.assignment)
        got = net.run(feeds)
    for name in on_cpu:
        assert assignment[name] == "cpu", assignment
    for o, w in zip(model.graph.output, want):
        np.testing.assert_array_equal(got[o.name], w)
    return assignment


def test_condition_on_another_value_is_declined(rt):
    x, other = special_values(), np.arange(16, dtype=np.float32).reshape(2, 8)
    nodes = [helper.make_node("IsNaN", ["x"], ["isnan"], name="isnan"),
             helper.make_node("Where", ["isnan", "c", "o"], ["y"], name="where")]
    declined(rt, nodes, {"x": x, "o": other}, {"c": np.array(0.0, np.float32)}, ["isnan", "where"])


def test_non_constant_replacement_is_declined(rt):
    x = special_values()
    c = np.array(3.0, np.float32)
    declined(rt, nan_where("x", "c"), {"x": x, "c": c}, {}, ["isnan", "where"])


def test_isnan_also_a_graph_output_is_declined(rt):
    x = special_values()
    declined(rt, nan_where("x", "c"), {"x": x}, {"c": np.array(0.0, np.float32)},
             ["isnan", "where"], extra_outputs=["isnan"])


def test_isnan_read_by_another_node_is_declined(rt):
    x = special_values()
    nodes = [*nan_where("x", "c", "w"),
             helper.make_node("Not", ["isnan"], ["notnan"], name="not"),
             helper.make_node("Where", ["notnan", "w", "c"], ["y"], name="where2")]
    declined(rt, nodes, {"x": x}, {"c": np.array(0.0, np.float32)}, ["isnan", "where", "not", "where2"])


def test_isnan_alone_and_a_plain_where_are_declined(rt):
    x = special_values()
    declined(rt, [helper.make_node("IsNaN", ["x"], ["y"], name="isnan")], {"x": x}, {}, ["isnan"])
    cond = np.isnan(x)
    nodes = [helper.make_node("Where", ["cond", "c", "x"], ["y"], name="where")]
    declined(rt, nodes, {"cond": cond, "x": x}, {"c": np.array(0.0, np.float32)}, ["where"])


@pytest.mark.parametrize("optimization", ["all", "basic"])
def test_bert_attention_block_is_one_onednn_step(rt, optimization):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    kt = rng.standard_normal((1, 2, 8, 4)).astype(np.float32)
    v = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    mask = np.zeros((1, 1, 1, 4), np.float32)
    mask[..., 3] = -np.inf  # one key masked out
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Add", ["s", "mask"], ["sm"], name="mask_add"),
             helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
             *nan_where("p", "zero", "pz"),
             helper.make_node("MatMul", ["pz", "v"], ["y"], name="pv")]
    feeds = {"q": q, "kt": kt, "v": v, "mask": mask}
    model = graph_model(nodes, feeds, {"zero": np.array(0.0, np.float32)})
    (want,) = onnxruntime_run(model, feeds)
    with rt.load(model, backends=BACKENDS, optimization=optimization) as net:
        assert set(net.assignment.values()) == {"onednn"}, net.assignment
        if optimization == "all":
            assert len(net._steps) == 1 and net._steps[0].label == "onednn", net._steps
        got = net.run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

"""LayerNormalization as the backend's own loop (plan_norm.c): against onnxruntime on rows of
every length class the loop splits differently (under 64 values, pieces of 512 and a tail),
over several axes, with and without a bias, at 1 and 2 threads; against float64 where a row's
mean dwarfs its spread (and against float64 there); NaN and infinities as
onnxruntime sends them; and under the bf16 hint, written as bf16 for the dense layers after it
with no reorder between them."""

import numpy as np
import pytest
from conftest import AMX, assert_matches, onednn_log, profiled_steps, run_both
from test_transformer_ops_match_onnxruntime import Graph, rand


def ln_graph(shape, axis=-1, bias=True, eps=1e-5) -> Graph:
    g = Graph()
    inner = int(np.prod(shape[axis:]))
    ins = ["x", g.const(rand(*shape[axis:])), *([g.const(rand(*shape[axis:]))] if bias else [])]
    assert inner > 0
    g.op("LayerNormalization", ins, axis=axis, epsilon=eps)
    return g


def run_ln(rt, g, x, threads):
    placed, got, want = run_both(rt, g.model({"x": x}), {"x": x}, threads)
    assert set(placed.values()) == {"onednn"}, placed
    return got[0], want[0]


CASES = {  # name: (shape, axis, bias)
    "short rows": ((2, 7, 24), -1, True),
    "ViT's rows": ((1, 197, 768), -1, True),
    "pieces and a tail": ((3, 1000), -1, True),
    "no bias": ((4, 130), -1, False),
    "two axes": ((2, 5, 6, 7), 2, True),
    "one value a row": ((5, 1), -1, True),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_layer_normalization_matches_onnxruntime(rt, case, threads):
    shape, axis, bias = CASES[case]
    x = rand(*shape, scale=3.0) + np.float32(0.5)
    got, want = run_ln(rt, ln_graph(shape, axis, bias), x, threads)
    assert_matches(got, want, rtol=1e-5, what=case)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_large_mean_over_a_small_spread_keeps_its_variance(rt, threads):
    """Rows of 1e4 + N(0, 1e-2): the variance summed as (x - mean)^2, not as E[x^2] - mean^2
    (which loses every digit of it in float32: zero, negative or noise). The mean itself is a
    float32 (spacing 1e-3 near 1e4, a tenth of the spread), which moves every value by up to
    a twentieth of the spread, in onnxruntime's too (whose mean may round the other way: it is
    no reference here): within 5e-2 of the range of a float64 computation."""
    g = ln_graph((4, 384), bias=False)
    x = (np.float32(1e4) + rand(4, 384, scale=1e-2)).astype(np.float32)
    got, _ = run_ln(rt, g, x, threads)
    scale = g.inits[g.nodes[0].input[1]].astype(np.float64)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    exact = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * scale
    assert np.abs(got - exact).max() <= 5e-2 * np.abs(exact).max()


@pytest.mark.parametrize("threads", [1, 2])
def test_nan_and_infinities_give_onnxruntimes_rows(rt, threads):
    """A row holding a NaN or an infinity comes out NaN as onnxruntime's does; the other rows
    are untouched by them."""
    x = rand(4, 100)
    x[1, 3], x[2, 50], x[3, 99] = np.nan, np.inf, -np.inf
    got, want = run_ln(rt, ln_graph((4, 100)), x, threads)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1:]).all(axis=1).all()
    assert_matches(got[0], want[0], rtol=1e-5, what="the finite row")


def test_it_runs_as_one_step_of_the_backends_own():
    steps = profiled_steps("from test_layer_normalization_matches_onnxruntime import ln_graph, rand\n"
                           "g = ln_graph((2, 7, 24))\nfeeds = {'x': rand(2, 7, 24)}\n"
                           "model = g.model(feeds)")
    assert len(steps) == 1 and "| layer normalization" in steps[0] and "| own" in steps[0], steps


PRE_NORM = """
from test_transformer_ops_match_onnxruntime import Graph, rand
g = Graph()
x = g.op("LayerNormalization", ["x", g.const(rand(64)), g.const(rand(64))], axis=-1)
y = g.op("Add", [g.dense(x, 64, 96), g.dense(x, 64, 96)])  # two dense readers of the norm
feeds = {"x": rand(1, 200, 64)}
model = g.model(feeds)
"""


def test_under_the_bf16_hint_a_norm_read_by_dense_layers_is_written_as_bf16(rt):
    """Both readers of the norm round it to bf16 anyway, so it writes bf16 itself and they
    read those bytes: no reorder of it before them (there was one, from float32, for each
    pre-norm projection); in float32 no bf16 at all. Within bf16's rounding of onnxruntime's
    float32 (2e-2 of the range, as the other bf16 products)."""
    lines = onednn_log(PRE_NORM, env={"NNPLUG_PRECISION": "bf16"})
    products = [ln for ln in lines if ",reorder," not in ln]
    reorders = [ln for ln in lines if ",reorder," in ln]
    if AMX:
        assert len(products) == 2 and all("src_bf16" in p for p in products), products
        assert not [r for r in reorders if "200x64" in r or "64x1x200" in r], reorders
    else:
        assert not [ln for ln in lines if "bf16" in ln], lines
    scope: dict = {}
    exec(PRE_NORM, scope)
    for threads in (1, 2):
        placed, got, want = run_both(rt, scope["model"], scope["feeds"], threads,
                                     targets={"onednn": {"kind": "onednn", "precision": "bf16"}})
        assert set(placed.values()) == {"onednn"}, placed
        assert_matches(got[0], want[0], rtol=2e-2, what=f"bf16 pre-norm, {threads} thread(s)")


@pytest.mark.parametrize("threads", [1, 2])
def test_under_the_bf16_hint_a_norm_also_read_by_a_residual_stays_float32(rt, threads):
    """The norm's result read by an Add as well as by a dense layer is float32 (the Add does
    not round it): the answer then as onnxruntime's up to the dense layer's bf16."""
    g = Graph()
    x = g.op("LayerNormalization", ["x", g.const(rand(64)), g.const(rand(64))], axis=-1)
    g.op("Add", [g.dense(x, 64, 64), x])
    feeds = {"x": rand(1, 150, 64)}
    placed, got, want = run_both(rt, g.model(feeds), feeds, threads,
                                 targets={"onednn": {"kind": "onednn", "precision": "bf16"}})
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=2e-2, what="norm + residual")

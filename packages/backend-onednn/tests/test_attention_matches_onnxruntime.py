"""Scaled dot-product attention as PyTorch exports it, MatMul(Q, K^T) -> [Add(mask)] ->
Softmax(last axis) -> [Where(IsNaN(p), 0, p)] -> MatMul(p, V), runs on onednn as one step: a
block of query rows at a time, its scores kept in the cache. Against onnxruntime at 1 and 2
threads: with and without masks (padding, causal, a row masked whole), Q, K^T and V read
through a Transpose or plain, batch axes broadcast, a mask that widens the scores (the ops then
run one by one), a batch changing between runs, NaN and infinities, and bf16 products."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    AMX,
    BACKENDS,
    assert_matches,
    graph_model,
    onednn_log,
    onnxruntime_run,
    profiled_steps,
    run_both,
)
from onnx import TensorProto, helper

NEG = float(np.finfo(np.float32).min)


def attention_nodes(mask: str | None, nanrep: bool, heads: int, depth: int) -> list:
    """x (B, T, C) -> projections -> heads -> attention -> (B, T, C) -> projection, as
    torch.onnx.export writes it (the scale applied to Q and K^T)."""
    n = [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}p"], name=f"{p}_proj") for p in "qkv"]
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        n += [helper.make_node("Reshape", [f"{p}p", "split"], [f"{p}r"]),
              helper.make_node("Transpose", [f"{p}r"], [f"{p}t"], perm=perm)]
    n += [helper.make_node("Mul", ["qt", "scale"], ["qs"]),
          helper.make_node("Mul", ["kt", "scale"], ["ks"]),
          helper.make_node("MatMul", ["qs", "ks"], ["s"], name="scores")]
    s = "s"
    if mask:
        n.append(helper.make_node("Add", ["s", mask], ["sm"]))
        s = "sm"
    n.append(helper.make_node("Softmax", [s], ["p"], axis=-1))
    p = "p"
    if nanrep:
        n += [helper.make_node("IsNaN", ["p"], ["isnan"]),
              helper.make_node("Where", ["isnan", "zero", "p"], ["pz"])]
        p = "pz"
    n += [helper.make_node("MatMul", [p, "vt"], ["o"], name="weighted"),
          helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
          helper.make_node("Reshape", ["ot", "merge"], ["om"]),
          helper.make_node("MatMul", ["om", "wo"], ["y"], name="o_proj")]
    return n


def attention_model(batch, t, heads, depth, mask=None, nanrep=False, seed=0, mask_value=None):
    rng = np.random.default_rng(seed)
    c = heads * depth
    x = rng.standard_normal((batch, t, c)).astype(np.float32)
    inits = {f"w{p}": (rng.standard_normal((c, c)) / np.sqrt(c)).astype(np.float32)
             for p in "qkvo"}
    inits.update(split=np.array([0, -1, heads, depth], np.int64),
                 merge=np.array([0, -1, c], np.int64),
                 scale=np.float32(depth ** -0.25), zero=np.float32(0))
    feeds = {"x": x}
    if mask == "padding":  # (B, 1, 1, T): the last keys of each batch entry left out
        m = np.zeros((batch, 1, 1, t), np.float32)
        for b in range(batch):
            m[b, ..., t - b * t // (batch + 1):] = -np.inf if mask_value is None else mask_value
        feeds["mask"] = m
    elif mask == "causal":  # (1, 1, T, T), a constant
        inits["mask"] = np.triu(np.full((t, t), NEG, np.float32), 1)[None, None]
    nodes = attention_nodes("mask" if mask else None, nanrep, heads, depth)
    return graph_model(nodes, feeds, inits, opset=17), feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch,t,heads,depth", [(1, 150, 6, 64), (2, 65, 3, 16), (1, 1, 2, 8),
                                                 (1, 700, 2, 32)])
def test_encoder_attention_matches_onnxruntime(rt, batch, t, heads, depth, threads):
    model, feeds = attention_model(batch, t, heads, depth)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=1e-5, what=f"{batch}x{t}x{heads}x{depth}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mask,mask_value", [("padding", None), ("padding", NEG),
                                             ("causal", None)])
def test_masked_attention_matches_onnxruntime(rt, mask, mask_value, threads):
    # batch 3 of 40: entry 0 keeps every key, the others fewer; with -inf and the NaN
    # replacement, an entry masked whole comes out of the softmax all NaN, then all 0
    model, feeds = attention_model(3, 40, 4, 16, mask=mask, nanrep=True, mask_value=mask_value)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=1e-5, what=f"{mask} {mask_value}")
    if mask == "padding" and mask_value is None:
        feeds = dict(feeds, mask=np.full_like(feeds["mask"], -np.inf))  # every key masked
        placed, got, want = run_both(rt, model, feeds, threads)
        assert not np.isnan(want[0]).any()
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)


def test_the_attention_runs_as_one_step_of_its_own():
    """The profile of a run names one 'attention' step for the two MatMuls and the Softmax,
    and no matmul or softmax primitive for them."""
    steps = profiled_steps(
        "from test_attention_matches_onnxruntime import attention_model\n"
        "model, feeds = attention_model(1, 150, 6, 64, mask='padding', nanrep=True)")
    mine = [s for s in steps if "scores" in s or "weighted" in s or "Softmax" in s]
    assert len(mine) == 1 and "| attention " in mine[0], "\n".join(steps)


def direct_model(shapes: dict, perms: dict, mask_shape=None, symbolic: dict | None = None):
    """MatMul(Q, K^T) -> [Add(mask)] -> Softmax -> MatMul(., V) on graph inputs, each read
    through a Transpose by perms[name] when given; symbolic: input name -> {axis: dim_param}."""
    nodes, inputs = [], {}
    for name in ("q", "k", "v"):
        if name in perms:
            nodes.append(helper.make_node("Transpose", [name], [f"{name}_"], perm=perms[name]))
    src = {n: f"{n}_" if n in perms else n for n in "qkv"}
    nodes.append(helper.make_node("MatMul", [src["q"], src["k"]], ["s"]))
    if mask_shape is not None:
        nodes.append(helper.make_node("Add", ["s", "m"], ["sm"]))
    nodes += [helper.make_node("Softmax", ["sm" if mask_shape is not None else "s"], ["p"],
                               axis=-1),
              helper.make_node("MatMul", ["p", src["v"]], ["y"])]
    for name, shape in shapes.items():
        dims = list(shape)
        for axis, param in (symbolic or {}).get(name, {}).items():
            dims[axis] = param
        inputs[name] = helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    graph = helper.make_graph(nodes, "g", list(inputs.values()),
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(shapes: dict, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


@pytest.mark.parametrize("threads", [1, 2])
def test_operands_read_plain_transposed_and_broadcast(rt, threads):
    cases = {
        # Q (D, Tq) and V (Dv, Tk) transposed: sgemm reads them by columns
        "columns": ({"q": (2, 3, 8, 5), "k": (2, 3, 8, 7), "v": (2, 3, 4, 7)},
                    {"q": [0, 1, 3, 2], "v": [0, 1, 3, 2]}),
        # plain operands, Q's and V's batch axes broadcast over K^T's
        "broadcast": ({"q": (2, 3, 5, 8), "k": (1, 1, 8, 7), "v": (2, 1, 7, 4)}, {}),
        # rank 3, K (Tk, D) read as K^T through a Transpose
        "rank3": ({"q": (4, 9, 16), "k": (4, 11, 16), "v": (4, 11, 6)}, {"k": [0, 2, 1]}),
    }
    for name, (shapes, perms) in cases.items():
        feeds = feeds_for(shapes)
        model = direct_model(shapes, perms)
        placed, got, want = run_both(rt, model, feeds, threads)
        assert set(placed.values()) == {"onednn"}, (name, placed)
        assert_matches(got[0], want[0], rtol=1e-5, what=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_mask_widening_the_scores_runs_op_by_op(rt, threads):
    """Declared (B, 1, Tq, Tk) and (B2, 1, Tq, Tk), the scores come out (1, 1, 5, 6) and the
    mask is (2, 1, 5, 6) at run time: the Add's result is wider than Q K^T, which the ops run
    one by one to give."""
    shapes = {"q": (1, 1, 5, 8), "k": (1, 1, 8, 6), "v": (1, 1, 6, 4), "m": (2, 1, 5, 6)}
    sym = {"q": {0: "B"}, "k": {0: "B"}, "v": {0: "B"}, "m": {0: "B2"}}
    model = direct_model(shapes, {}, mask_shape=shapes["m"], symbolic=sym)
    feeds = feeds_for(shapes)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    assert got[0].shape == (2, 1, 5, 4)
    assert_matches(got[0], want[0], rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_changing_from_run_to_run(rt, threads):
    """A batch known at run time only (the one unknown dim onednn plans per shape): a plan
    per batch size, each right, the mask's batch axis read per entry."""
    shapes = {"q": (1, 2, 3, 8), "k": (1, 2, 8, 5), "v": (1, 2, 5, 4), "m": (1, 1, 1, 5)}
    sym = {n: {0: "B"} for n in shapes}
    model = direct_model(shapes, {}, mask_shape=shapes["m"], symbolic=sym)
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=BACKENDS) as net:
            assert set(net.assignment.values()) == {"onednn"}, net.assignment
            for batch in (1, 3, 2, 3):
                feeds = feeds_for({k: (batch, *v[1:]) for k, v in shapes.items()}, seed=batch)
                got = net.run(feeds)["y"]
                assert_matches(got, onnxruntime_run(model, feeds)[0], rtol=1e-5,
                               what=f"batch {batch}")
    finally:
        lib.set_num_threads(0)


@pytest.mark.parametrize("threads", [1, 2])
def test_nan_and_infinities_go_through_as_onnxruntime_sends_them(rt, threads):
    shapes = {"q": (1, 2, 4, 8), "k": (1, 2, 8, 6), "v": (1, 2, 6, 4)}
    feeds = feeds_for(shapes)
    feeds["q"][0, 0, 1, 3] = np.nan  # a row of scores all NaN
    feeds["k"][0, 1, 2, 4] = np.inf  # +inf and -inf scores
    feeds["v"][0, 0, 5, 1] = -np.inf
    placed, got, want = run_both(rt, direct_model(shapes, {}), feeds, threads)
    assert set(placed.values()) == {"onednn"}, placed
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6, equal_nan=True)


BF16 = {"onednn": {"kind": "onednn", "precision": "bf16"}}


def bf16_cases() -> dict:
    """Attention under the bf16 hint: short (op by op on AMX), and long enough to run fused
    with bf16 products on AMX: keys in chunks with a shorter last one, a last block of fewer
    query rows, masks, NaN replacement, Q and V read by columns."""
    cases = {
        "op by op": attention_model(1, 96, 4, 32, mask="causal", nanrep=True),
        "causal, chunks of keys": attention_model(1, 600, 4, 32, mask="causal", nanrep=True),
        "padding, batch 2": attention_model(2, 700, 2, 64, mask="padding"),
    }
    model, feeds = attention_model(2, 700, 2, 64, mask="padding", nanrep=True)
    feeds["mask"][1] = -np.inf  # every key of the second entry masked: NaN rows, replaced by 0
    cases["a batch entry masked whole"] = (model, feeds)
    shapes = {"q": (1, 2, 32, 520), "k": (1, 2, 32, 530), "v": (1, 2, 16, 530)}
    cases["Q and V by columns"] = (direct_model(shapes, {"q": [0, 1, 3, 2], "v": [0, 1, 3, 2]}),
                                   feeds_for(shapes))
    return cases


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(bf16_cases()))
def test_bf16_products_stay_within_bf16_of_onnxruntime(rt, case, threads):
    """Each within bf16's rounding of onnxruntime's float32: 8 bits of mantissa (2**-8 of the
    inputs' scale) in Q, K, the probabilities and V, summed over the depth and the keys in
    float32; 3e-2 of the output's range is the bound the other bf16 products are held to."""
    model, feeds = bf16_cases()[case]
    placed, got, want = run_both(rt, model, feeds, threads, targets=BF16)
    assert set(placed.values()) == {"onednn"}, placed
    assert not np.isnan(want[0]).any()
    assert_matches(got[0], want[0], rtol=3e-2, what=case)


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_rows_of_nan_probabilities_stay_nan(rt, threads):
    """A batch entry whose keys are all masked (-inf) has NaN probabilities (inf - inf in its
    softmax), with no NaN replacement after it: its rows come out NaN as onnxruntime's do,
    though the fused step scales a row by 1 / sum after its product with V, and the other
    entry's rows stay within bf16's rounding."""
    model, feeds = attention_model(2, 700, 2, 64, mask="padding")
    feeds["mask"][1] = -np.inf
    placed, got, want = run_both(rt, model, feeds, threads, targets=BF16)
    assert set(placed.values()) == {"onednn"}, placed
    assert np.isnan(want[0][1]).all() and not np.isnan(want[0][0]).any()
    assert np.isnan(got[0][1]).all()
    assert_matches(got[0][0], want[0][0], rtol=3e-2, what="the unmasked entry")


def test_short_attention_under_the_bf16_hint_takes_the_softmax_read_as_bf16(monkeypatch):
    """Attention short enough to run op by op under the hint: its probabilities are read only
    by the product with V, which rounds them to bf16, so the softmax takes the cheaper exp
    of the fused step's (2.7e-6 relative); with a reader that does not round (the NaN
    replacement) the exact one, as in float32 (where the attention is one step)."""
    setup = ("from test_attention_matches_onnxruntime import attention_model\n"
             "model, feeds = attention_model(1, 96, 4, 32, nanrep={})")
    monkeypatch.setenv("NNPLUG_PRECISION", "bf16")
    kinds = [ln.split("|")[2].strip() for ln in profiled_steps(setup.format(False))]
    assert ("softmax, read as bf16" if AMX else "softmax") in kinds, kinds
    assert "softmax" in [ln.split("|")[2].strip() for ln in profiled_steps(setup.format(True))]
    monkeypatch.delenv("NNPLUG_PRECISION")  # float32: the fused step, its exact softmax
    assert [k for k in (ln.split("|")[2].strip() for ln in profiled_steps(setup.format(False)))
            if "softmax" in k or "attention" in k] == ["attention"]


@pytest.mark.parametrize("threads", [1, 2])
def test_short_bf16_attention_of_rows_masked_whole_is_nan_as_onnxruntimes(rt, threads):
    """Op by op under the hint, a batch entry whose keys are all -inf has NaN probabilities
    and no NaN replacement: its rows NaN, as onnxruntime's; the other entry within bf16's
    rounding."""
    model, feeds = attention_model(2, 96, 2, 32, mask="padding")
    feeds["mask"][1] = -np.inf
    placed, got, want = run_both(rt, model, feeds, threads, targets=BF16)
    assert set(placed.values()) == {"onednn"}, placed
    assert np.isnan(want[0][1]).all() and np.isnan(got[0][1]).all()
    assert_matches(got[0][0], want[0][0], rtol=3e-2, what="the unmasked entry")


def test_long_bf16_attention_runs_its_products_on_amx():
    """600 positions of depth 32 under the hint: on AMX each block's Q K^T runs as oneDNN's
    AMX matmuls on chunks of 256 keys (a whole row of 600 would be taken as too small a
    product for AMX and run five times slower) and its S V as one, nothing on sgemm; without
    AMX the fused step's products are sgemm's in float32."""
    lines = onednn_log(
        "from test_attention_matches_onnxruntime import attention_model\n"
        "model, feeds = attention_model(1, 600, 4, 32, mask='causal')",
        env={"NNPLUG_PRECISION": "bf16"})
    bf16 = [ln.split(",") for ln in lines if ",matmul," in ln and "src_bf16" in ln]
    sgemm = [ln for ln in lines if ",gemm_api," in ln]
    if not AMX:
        assert sgemm and not bf16, "\n".join(lines)
        return
    shapes = {f[-2] for f in bf16}
    # 128 query rows a block (4 of them, then 88), keys by 256, 256 and 88
    assert {"128x32:32x256", "128x32:32x88", "128x600:600x32", "88x32:32x256", "88x32:32x88",
            "88x600:600x32"} == shapes, shapes
    assert all("avx512_core_amx" in f[4] for f in bf16), {f[4] for f in bf16}
    assert not sgemm, sgemm[:3]


INFINITE_MASK = """
import numpy as np
from onnx import helper
from test_attention_matches_onnxruntime import attention_model
model, feeds = attention_model(2, 40, 2, 16, mask="padding")  # -inf on entry 1's last keys
model.graph.node.append(helper.make_node("Relu", ["y"], ["r"]))
model.graph.output[0].name = "r"
if sys.argv[2] == "nan":
    feeds["mask"][0, 0, 0, 3] = np.nan
elif sys.argv[2] == "whole":
    feeds["mask"][1] = -np.inf  # every key of entry 1 masked: inf - inf in its softmax, a NaN
"""


@pytest.mark.parametrize("mask,plans", [("inf", ["relu"]), ("nan", ["elu"]),
                                        ("whole", ["relu", "elu"])])
def test_an_infinite_mask_keeps_the_fast_plan(rt, mask, plans):
    """A mask of -inf (Where(mask, 0, -inf) in newer exports) reaches nothing but the
    attention's softmax, which makes 0 of it exactly, or a NaN for a row masked whole, with
    FE_INVALID raised: the run keeps the fast plan (oneDNN's relu post-op on the output
    projection) and runs again strict (an elu and a linear) only when a NaN was made; a NaN
    in the mask takes the strict plan at once. Each answer is onnxruntime's."""
    lines = onednn_log(INFINITE_MASK, mask)
    relus = ["elu" if "eltwise_elu" in ln else "relu" for ln in lines if "eltwise_" in ln and "elu" in ln]
    assert relus == plans, lines
    scope: dict = {"sys": type("S", (), {"argv": ["", "", mask]})}
    exec(INFINITE_MASK, scope)
    for threads in (1, 2):
        placed, got, want = run_both(rt, scope["model"], scope["feeds"], threads)
        assert set(placed.values()) == {"onednn"}, placed
        assert np.isnan(want[0]).any() == (mask != "inf")
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6, equal_nan=True)

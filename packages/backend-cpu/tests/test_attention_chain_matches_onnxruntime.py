"""Attention as exported, MatMul(Q, K^T) -> [Mul or Div by a constant] -> [Add(mask)] ->
Softmax(last axis) -> [Where(IsNaN(p), 0, p)] -> MatMul(p, V), runs on the cpu backend as one
node, the Transpose making K^T from K taken in when the product alone reads it; with static
shapes and with unknown ones (a decoder's growing cache: the chain is a kernel of its own).
Against onnxruntime at 1 and 2 threads: masks (padding, causal, rows masked whole), one query
row and many, batch axes and a mask that broadcast or widen the scores, empty and growing key
lengths, NaN and infinities; near misses run as written."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, onnxruntime_run, profiled_ops, run_cpu
from onnx import TensorProto, helper, numpy_helper

NEG = float(np.finfo(np.float32).min)


def chain_model(shapes: dict, *, k_transposed=True, scale=None, mask=None, nanrep=False,
                symbolic: dict | None = None, leak=None):
    """Graph inputs q, k (K: (..., Tk, D) read through a Transpose, or K^T itself), v and the
    mask; scale: ("Mul" | "Div", value); symbolic: input -> {axis: name}; leak: an
    intermediate that is a graph output too."""
    nodes, inits = [], {}
    kt = "k"
    if k_transposed:
        r = len(shapes["k"])
        perm = list(range(r - 2)) + [r - 1, r - 2]
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=perm, name="kT"))
        kt = "kt"
    nodes.append(helper.make_node("MatMul", ["q", kt], ["s"], name="scores"))
    s = "s"
    if scale:
        inits["scale"] = np.float32(scale[1])
        nodes.append(helper.make_node(scale[0], [s, "scale"], ["ss"], name="scale"))
        s = "ss"
    if mask is not None:
        nodes.append(helper.make_node("Add", [s, "m"], ["sm"], name="mask"))
        s = "sm"
    nodes.append(helper.make_node("Softmax", [s], ["p"], axis=-1, name="softmax"))
    p = "p"
    if nanrep:
        inits["zero"] = np.float32(0)
        nodes += [helper.make_node("IsNaN", ["p"], ["isnan"], name="isnan"),
                  helper.make_node("Where", ["isnan", "zero", "p"], ["pz"], name="where")]
        p = "pz"
    inits["two"] = np.float32(2)  # a node after it: a kernel group ends before a last MatMul
    nodes += [helper.make_node("MatMul", [p, "v"], ["o"], name="weighted"),
              helper.make_node("Mul", ["o", "two"], ["y"], name="after")]
    ins = []
    for name, shape in dict(shapes, **({"m": mask} if mask is not None else {})).items():
        dims = list(shape)
        for axis, param in (symbolic or {}).get(name, {}).items():
            dims[axis] = param
        ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if leak:
        outs.append(helper.make_tensor_value_info(leak, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "attention", ins, outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(shapes: dict, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def check(rt, model, feeds, what=""):
    got, placed = run_cpu(rt, model, feeds)
    assert set(placed.values()) == {"cpu"}
    for g, w in zip(got, onnxruntime_run(model, feeds)):
        assert_close(g, w, rtol=1e-5, atol=1e-5, what=what)
    return got


BERT = {"q": (2, 4, 33, 16), "k": (2, 4, 33, 16), "v": (2, 4, 33, 16)}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
def test_encoder_attention_matches_onnxruntime(rt, threads, dynamic):
    sym = {n: {2: "T"} for n in BERT} if dynamic else None
    for name, kw in {"plain": {}, "div": {"scale": ("Div", 4.0)},
                     "mul": {"scale": ("Mul", 0.25)},
                     "k_transposed_by_caller": {"k_transposed": False}}.items():
        shapes = dict(BERT)
        if not kw.get("k_transposed", True):
            shapes["k"] = (2, 4, 16, 33)
            sym = {"q": {2: "T"}, "k": {3: "T"}, "v": {2: "T"}} if dynamic else None
        check(rt, chain_model(shapes, symbolic=sym, **kw), feeds_for(shapes), name)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
def test_masked_attention_matches_onnxruntime(rt, threads, dynamic):
    # padding (B, 1, 1, T) with -inf: the second batch entry masked whole (NaN, then 0)
    pad = np.zeros((2, 1, 1, 33), np.float32)
    pad[0, ..., 20:] = -np.inf
    pad[1] = -np.inf
    causal = np.triu(np.full((33, 33), NEG, np.float32), 1)[None, None]
    sym = {n: {2: "T"} for n in BERT} if dynamic else None
    for name, m in {"padding": pad, "causal": causal}.items():
        model = chain_model(BERT, scale=("Mul", 0.25), mask=m.shape, nanrep=True,
                            symbolic=dict(sym, m={3: "T"}) if sym else None)
        got = check(rt, model, dict(feeds_for(BERT), m=m), name)
        if name == "padding":
            assert not got[0][1].any()


def test_one_query_row_over_a_growing_cache(rt, threads):
    """A decoding step: Q (1, H, 1, D) against a cache of a length known at run time only,
    K read through its Transpose, the mask (1, 1, 1, T); the chain is a kernel of its own."""
    shapes = {"q": (1, 4, 1, 32), "k": (1, 4, 9, 32), "v": (1, 4, 9, 32)}
    sym = {"k": {2: "T"}, "v": {2: "T"}, "m": {3: "T"}}
    model = chain_model(shapes, scale=("Mul", 32 ** -0.5), mask=(1, 1, 1, 9), symbolic=sym)
    for t in (1, 9, 17, 300, 0):
        f = feeds_for({"q": (1, 4, 1, 32), "k": (1, 4, t, 32), "v": (1, 4, t, 32),
                       "m": (1, 1, 1, t)}, seed=t)
        got = check(rt, model, f, f"T={t}")
        if t == 0:
            assert not got[0].any()


def test_broadcast_and_widening_operands(rt, threads):
    cases = {
        # a key/value head shared by the query heads; the mask over every head
        "shared_kv": ({"q": (2, 4, 5, 8), "k": (2, 1, 7, 8), "v": (2, 1, 7, 3)}, (2, 4, 5, 7)),
        # the mask widens the scores' batch axis and their rows (one query row)
        "widened": ({"q": (1, 1, 1, 8), "k": (1, 1, 6, 8), "v": (1, 1, 6, 4)}, (3, 1, 5, 6)),
        # rank 3, a mask of rank 1
        "rank3": ({"q": (4, 9, 16), "k": (4, 11, 16), "v": (4, 11, 6)}, (11,)),
    }
    for name, (shapes, mshape) in cases.items():
        f = feeds_for(dict(shapes, m=mshape))
        check(rt, chain_model(shapes, mask=mshape), f, name)


def test_nan_and_infinities_match_onnxruntime(rt):
    shapes = {"q": (1, 2, 4, 8), "k": (1, 2, 6, 8), "v": (1, 2, 6, 4)}
    f = feeds_for(shapes)
    f["q"][0, 0, 1, 3] = np.nan
    f["k"][0, 1, 2, 4] = np.inf
    f["v"][0, 0, 5, 1] = -np.inf
    model = chain_model(shapes)
    got, _ = run_cpu(rt, model, f)
    np.testing.assert_allclose(got[0], onnxruntime_run(model, f)[0], rtol=1e-5, atol=1e-6,
                               equal_nan=True)


def test_near_misses_run_as_written(rt):
    shapes = {"q": (1, 2, 5, 8), "k": (1, 2, 6, 8), "v": (1, 2, 6, 4)}
    f = feeds_for(shapes)
    check(rt, chain_model(shapes, leak="s"), f, "scores read elsewhere")
    check(rt, chain_model(shapes, leak="p"), f, "probabilities read elsewhere")


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import nnplug_backend_cpu
from conftest import isolated_runtime
from test_attention_chain_matches_onnxruntime import chain_model, feeds_for
shapes = {"q": (1, 4, 1, 32), "k": (1, 4, 9, 32), "v": (1, 4, 9, 32)}
dynamic = sys.argv[2] == "dynamic"
sym = {"k": {2: "T"}, "v": {2: "T"}, "m": {3: "T"}} if dynamic else None
model = chain_model(shapes, scale=("Mul", 0.5), mask=(1, 1, 1, 9), nanrep=True, symbolic=sym)
rt = isolated_runtime()
rt.register_backend(nnplug_backend_cpu.library_path())
with rt.load(model, backends=["cpu"]) as net:
    net.run(feeds_for(dict(shapes, m=(1, 1, 1, 9))))
"""


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
def test_the_chain_runs_as_one_node(dynamic):
    """The backend's profile (NNPLUG_CPU_PROFILE=1, one line per node it runs) shows one
    AttentionChain node and none of the eight it stands for."""
    ran = profiled_ops(CHILD, "dynamic" if dynamic else "static")
    assert ran == ["AttentionChain", "Mul"], ran

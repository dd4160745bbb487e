"""Transformer blocks as torch exports them (MatMul with a constant weight, bias Add, the exact
Gelu decomposed into Div, Erf, Add, Mul, Mul in either exporter's order, residual Add) give onnxruntime's answers on the
cpu backend, where it packs the weight and fuses bias, Gelu and residual into the GEMM, and
where it must not (a bias that broadcasts wider, other constants, an intermediate that leaves
the graph). Shapes static and with unknown dims (the fusions then run on the chain alone),
odd sizes, batch dims, 1 and 2 threads."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import assert_close, one_node_model, onnxruntime_run, run_cpu
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)
SQRT2 = np.float32(1.4142135381698608)


def const(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def block_model(shape, n, *, dynamic=False, bias_shape=None, gelu=True, half=0.5, one=1.0,
                residual=False, extra_output=False, halve_first=False):
    """x (shape[..., K]) -> MatMul W[K, n] -> Add bias -> Gelu(erf) -> [MatMul W2[n, K] -> Add
    bias2 -> Add x] -> y. Weights random. The Gelu ends x * (erf + 1), then * 0.5 as the
    TorchScript exporter writes it, or with halve_first (erf + 1) * 0.5, then x * that as the
    dynamo exporter does."""
    k = shape[-1]
    inits = [const("W", RNG.standard_normal((k, n)) / math.sqrt(k)),
             const("b", RNG.standard_normal(bias_shape or (n,)))]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h0"], name="mm"),
             helper.make_node("Add", ["h0", "b"], ["h1"], name="bias")]
    last = "h1"
    if gelu:
        inits += [const("sq", SQRT2), const("one", np.float32(one)), const("half", np.float32(half))]
        nodes += [helper.make_node("Div", ["h1", "sq"], ["g0"], name="div"),
                  helper.make_node("Erf", ["g0"], ["g1"], name="erf"),
                  helper.make_node("Add", ["g1", "one"], ["g2"], name="add1"),
                  helper.make_node("Mul", ["h1", "g2"], ["g3"], name="mulx"),
                  helper.make_node("Mul", ["g3", "half"], ["g4"], name="half")]
        if halve_first:
            nodes[-2:] = [helper.make_node("Mul", ["half", "g2"], ["g3"], name="half"),
                          helper.make_node("Mul", ["h1", "g3"], ["g4"], name="mulx")]
        last = "g4"
    if residual:
        inits += [const("W2", RNG.standard_normal((n, k)) / math.sqrt(n)),
                  const("b2", RNG.standard_normal((k,)))]
        nodes += [helper.make_node("MatMul", [last, "W2"], ["r0"], name="mm2"),
                  helper.make_node("Add", ["r0", "b2"], ["r1"], name="bias2"),
                  helper.make_node("Add", ["r1", "x"], ["r2"], name="res")]
        last = "r2"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    dims = [f"d{i}" for i in range(len(shape) - 1)] + [k] if dynamic else list(shape)
    rank = max(len(shape), len(bias_shape or ()))
    out_dims = [f"o{i}" for i in range(rank)]  # the rank only: the cpu backend infers the rest
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_dims)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("h1", TensorProto.FLOAT, out_dims))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal(shape).astype(np.float32) * 2
    return model, {"x": x}


def check(rt, model, feeds):
    got, _ = run_cpu(rt, model, feeds)
    want = onnxruntime_run(model, feeds)
    for g, w in zip(got, want):
        scale = float(np.abs(w[np.isfinite(w)]).max(initial=1.0))
        assert_close(g, w, rtol=1e-4, atol=2e-5 * scale)


SHAPES = [(1, 1), (5, 3), (6, 17), (7, 64), (37, 257), (130, 48), (2, 3, 13, 31), (1, 128, 96)]
WIDTHS = [1, 5, 16, 17, 130, 260]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_bias_gelu_matches_onnxruntime(rt, threads, shape, dynamic):
    for n in WIDTHS:
        check(rt, *block_model(shape, n, dynamic=dynamic))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("shape", [(1, 1), (6, 17), (2, 3, 13, 31), (1, 128, 96)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gelu_halved_first_matches_onnxruntime(rt, threads, shape, dynamic):
    for n in (1, 17, 130):
        check(rt, *block_model(shape, n, dynamic=dynamic, halve_first=True))


@pytest.mark.parametrize("halve_first", [False, True], ids=["torchscript", "dynamo"])
def test_fused_gelu_rounds_in_its_exporters_order(rt, halve_first):
    """Past 1.7e38 the two orders differ: x * (erf + 1) overflows before the halving, x * 1.0
    does not. The fused epilogue computes the order the model wrote, as onnxruntime does with
    its graph optimisations off (node by node; its own Gelu fusion rounds as the dynamo order)."""
    model, _ = block_model((4, 8), 16, halve_first=halve_first)
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "W"))
    b = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "b"))
    j = int(np.abs(w).sum(0).argmax())  # the column of h1 that reaches 2.5e38, the rest less
    x = np.tile(np.sign(w[:, j]) * np.float32(2.5e38 / np.abs(w[:, j]).sum()), (4, 1)).astype(np.float32)
    h1 = x.astype(np.float64) @ w + b
    assert np.isfinite(h1).all() and (np.abs(h1) > 2e38).any()
    (got,), _ = run_cpu(rt, model, {"x": x})
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    assert np.isinf(want).any() != halve_first
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], rtol=1e-4, atol=1e-4 * float(np.abs(want[finite]).max()))


def kernels_of(model, feeds, tmp_path):
    """The node names each kernel of the cpu backend ran, from a profiled run."""
    import json

    import nnplug

    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    so = nnplug.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    s = nnplug.InferenceSession(path, so, providers=["cpu"])
    s.run(None, feeds)
    with open(s.end_profiling()) as f:
        events = json.load(f)["traceEvents"]
    return [e["args"]["nodes"] for e in events if e["cat"] == "kernel"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("halve_first", [False, True], ids=["torchscript", "dynamo"])
def test_gelu_in_either_order_runs_in_the_matmul(tmp_path, halve_first, dynamic):
    model, feeds = block_model((2, 9, 20), 24, dynamic=dynamic, halve_first=halve_first)
    ran = kernels_of(model, feeds, tmp_path)
    mm = next(k for k in ran if "mm" in k)
    assert {"mm", "bias", "div", "erf", "add1", "mulx", "half"} <= set(mm), ran


def test_gelu_of_a_dynamo_exported_bert_runs_in_its_matmul(tmp_path):
    """tests/models/bert_tiny_dynamo.onnx (export_models.py dynamo): each layer's Erf runs in the
    kernel of the MatMul before it, as in the TorchScript export."""
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "bert_tiny_dynamo.onnx")
    model = onnx.load(path)
    op_of = {n.name: n.op_type for n in model.graph.node}
    feeds = {"input_ids": RNG.integers(0, 100, (2, 8)), "attention_mask": np.ones((2, 8), np.int64)}
    ran = [[op_of.get(n) for n in k] for k in kernels_of(model, feeds, tmp_path)]
    with_erf = [k for k in ran if "Erf" in k]
    assert len(with_erf) == 2 and all(k[0] == "MatMul" and len(k) == 7 for k in with_erf), ran


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("shape", [(5, 3), (37, 257), (2, 3, 13, 31), (1, 128, 96)],
                         ids=lambda s: "x".join(map(str, s)))
def test_mlp_with_residual_matches_onnxruntime(rt, threads, shape, dynamic):
    for n in (17, 130):
        check(rt, *block_model(shape, n, dynamic=dynamic, residual=True))
        check(rt, *block_model(shape, n, dynamic=dynamic, gelu=False, residual=True))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
@pytest.mark.parametrize("case", ["bias_broadcasts_wider", "bias_per_row", "not_half", "not_one",
                                  "h1_leaves_graph", "scalar_bias", "bias_1xN",
                                  "halved_first_not_half", "halved_first_h1_leaves_graph"])
def test_near_miss_patterns_match_onnxruntime(rt, threads, case, dynamic):
    shape, n = (2, 9, 20), 24
    kw = {
        "bias_broadcasts_wider": dict(bias_shape=(3, 1, 1, n)),
        "bias_per_row": dict(bias_shape=(9, 1)),
        "not_half": dict(half=0.25),
        "not_one": dict(one=2.0),
        "h1_leaves_graph": dict(extra_output=True),
        "scalar_bias": dict(bias_shape=()),
        "bias_1xN": dict(bias_shape=(1, 1, n)),
        "halved_first_not_half": dict(halve_first=True, half=0.25),
        "halved_first_h1_leaves_graph": dict(halve_first=True, extra_output=True),
    }[case]
    check(rt, *block_model(shape, n, dynamic=dynamic, **kw))


def test_fused_gelu_keeps_nan_and_infinities(rt):
    model, _ = block_model((4, 8), 16)
    x = np.zeros((4, 8), np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    check(rt, model, {"x": x})


def test_erf_matches_onnxruntime_on_a_dense_grid(rt):
    x = np.concatenate([np.linspace(-6, 6, 400_001, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, -0.0, 3.925, -3.925, 0.921875], np.float32)])
    model, feeds = one_node_model("Erf", [x])
    (got,), _ = run_cpu(rt, model, feeds)
    (want,) = onnxruntime_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-7)
    exact = np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=0, atol=2e-7)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 17, 197, 768])
def test_layernorm_and_softmax_rows_match_onnxruntime(rt, threads, length):
    x = (RNG.standard_normal((3, 5, length)) * 4 + 3).astype(np.float32)
    x[0, 0, 0] = np.nan  # one row with a NaN: NaN out, the other rows untouched
    g = RNG.standard_normal(length).astype(np.float32)
    b = RNG.standard_normal(length).astype(np.float32)
    for model, feeds in [one_node_model("LayerNormalization", [x, g, b], dict(axis=-1, epsilon=1e-5),
                                        opset=17, const_inputs=(1, 2)),
                         one_node_model("Softmax", [x], dict(axis=-1), opset=13),
                         one_node_model("LogSoftmax", [x], dict(axis=-1), opset=13)]:
        (got,), _ = run_cpu(rt, model, feeds)
        (want,) = onnxruntime_run(model, feeds)
        assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 12, 9, 8), (2, 12, 8, 9)),       # attention's Q.K^T: heads spread over the threads
    ((1, 12, 33, 17), (1, 12, 17, 5)),
    ((2, 3, 7, 5), (3, 5, 6)),            # B broadcast over the leading dim
    ((4, 1, 6, 16), (1, 5, 16, 19)),      # both broadcast
    ((3, 70, 40), (3, 40, 70)),           # few entries, each product split over the threads
], ids=lambda s: "x".join(map(str, s)))
def test_batched_matmul_matches_onnxruntime(rt, threads, a_shape, b_shape):
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal(b_shape).astype(np.float32)
    model, feeds = one_node_model("MatMul", [a, b], opset=13)
    (got,), _ = run_cpu(rt, model, feeds)
    (want,) = onnxruntime_run(model, feeds)
    assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unknown_dims"])
def test_fused_block_is_bit_identical_to_the_nodes_as_written(rt, monkeypatch, dynamic):
    # the epilogue computes bias and Gelu in the same operations as the separate nodes
    model, feeds = block_model((3, 29, 40), 53, dynamic=dynamic, residual=True)
    fused, _ = run_cpu(rt, model, feeds)
    monkeypatch.setenv("NNPLUG_CPU_FUSION", "0")
    plain, _ = run_cpu(rt, model, feeds)
    np.testing.assert_array_equal(fused[0], plain[0])


def test_batched_matmul_entries_are_bit_identical_to_single_products(rt, threads):
    # whole products per thread (packed, stored straight into C) sum as the 2-D kernel does
    a = RNG.standard_normal((6, 37, 300)).astype(np.float32)
    b = RNG.standard_normal((6, 300, 23)).astype(np.float32)
    model, feeds = one_node_model("MatMul", [a, b], opset=13)
    (got,), _ = run_cpu(rt, model, feeds)
    for t in range(6):
        m2, f2 = one_node_model("MatMul", [a[t], b[t]], opset=13)
        (one,), _ = run_cpu(rt, m2, f2)
        np.testing.assert_array_equal(got[t], one)

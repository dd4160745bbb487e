"""A decoder's attention over a KV cache, as GPT-2 exports it: the past keys and values
(``past_key``, ``past_value``, shape ``[batch, heads, past, head_dim]``) are concatenated with
the new ones along the symbolic ``past`` axis, then ``softmax(q k^T / sqrt(d)) v``. The first
decoding step feeds a past of length 0, so every backend that claims the Concat, the MatMuls or
the Softmax meets empty tensors at run time; a zero ``batch`` empties everything.
Shared by the backends' own tests (see docs/conformance.md, *Empty tensors*)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, HEAD_DIM = 2, 4
WIDTH = HEADS * HEAD_DIM

# (batch, sequence, past) of the runs: the first step (past 0), later steps, a zero batch and
# an empty sequence over a past
SHAPES = ((1, 1, 0), (2, 3, 0), (1, 1, 5), (2, 2, 3), (0, 2, 1), (0, 1, 0), (1, 0, 3))


def model(seed: int = 0, shape: tuple[int, int, int] | None = None) -> onnx.ModelProto:
    """Inputs ``x`` [batch, seq, WIDTH], ``past_key`` and ``past_value`` [batch, HEADS, past,
    HEAD_DIM]; outputs ``y`` [batch, seq, WIDTH], ``present_key`` and ``present_value``. With
    ``shape`` = (batch, seq, past) those dims are fixed (every shape known at load)."""
    rng = np.random.default_rng(seed)
    f = TensorProto.FLOAT
    b, s, p = ("batch", "seq", "past") if shape is None else shape
    total = "total" if shape is None else s + p
    past = [b, HEADS, p, HEAD_DIM]
    inits = {f"w{n}": (rng.standard_normal((WIDTH, WIDTH)) / 3).astype(np.float32) for n in "qkvo"}
    inits["heads"] = np.array([0, 0, HEADS, HEAD_DIM], np.int64)
    inits["merged"] = np.array([0, 0, WIDTH], np.int64)
    inits["scale"] = np.float32(1 / np.sqrt(HEAD_DIM))
    n = helper.make_node
    nodes = []
    for p in "qkv":  # [b, s, W] -> [b, H, s, D]
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}_flat"], name=f"proj_{p}"),
                  n("Reshape", [f"{p}_flat", "heads"], [f"{p}_split"], name=f"split_{p}"),
                  n("Transpose", [f"{p}_split"], [f"{p}_new"], name=f"heads_{p}", perm=[0, 2, 1, 3])]
    nodes += [
        n("Concat", ["past_key", "k_new"], ["present_key"], name="cache_k", axis=2),
        n("Concat", ["past_value", "v_new"], ["present_value"], name="cache_v", axis=2),
        n("Transpose", ["present_key"], ["k_t"], name="keys_t", perm=[0, 1, 3, 2]),
        n("MatMul", ["q_new", "k_t"], ["scores"], name="scores"),
        n("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        n("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        n("MatMul", ["probs", "present_value"], ["ctx"], name="context"),
        n("Transpose", ["ctx"], ["ctx_t"], name="merge_t", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["ctx_m"], name="merge"),
        n("MatMul", ["ctx_m", "wo"], ["y"], name="out_proj"),
    ]
    ins = [helper.make_tensor_value_info("x", f, [b, s, WIDTH]),
           helper.make_tensor_value_info("past_key", f, past),
           helper.make_tensor_value_info("past_value", f, past)]
    present = [b, HEADS, total, HEAD_DIM]
    outs = [helper.make_tensor_value_info("y", f, [b, s, WIDTH]),
            helper.make_tensor_value_info("present_key", f, present),
            helper.make_tensor_value_info("present_value", f, present)]
    graph = helper.make_graph(nodes, "kv_cache_attention", ins, outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 9)  # older onnxruntime builds read no newer IR
    onnx.checker.check_model(m, full_check=True)
    return m


def feeds(batch: int, seq: int, past: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, WIDTH)).astype(np.float32),
            "past_key": rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32),
            "past_value": rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32)}


def assert_matches_onnxruntime(rt, backends: list[str], rtol: float = 1e-4, atol: float = 1e-5,
                               static: bool = False) -> dict:
    """Run :func:`model` on ``rt`` with ``backends`` at every (batch, seq, past) of ``SHAPES``,
    each output against onnxruntime's CPU provider (same shape, values within rtol/atol). With
    ``static`` each shape is a model of its own, its dims fixed (a backend that claims nodes of
    known shapes only meets the empty tensors then). Returns the node assignment (of the first
    model: a first decoding step's, its past empty), for the caller to check where the nodes
    ran."""
    import onnxruntime as ort

    runs = [(model(shape=s), [s]) for s in SHAPES] if static else [(model(), list(SHAPES))]
    assignment: dict = {}
    for m, shapes in runs:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        with rt.load(m, backends=backends) as net:
            for shape in shapes:
                _check(m, sess, net.run(feeds(*shape)), shape, backends, rtol, atol)
            assignment = assignment or dict(net.assignment)
    return assignment


def _check(m, sess, got: dict, shape, backends, rtol, atol) -> None:
    """``got`` (a run of ``m`` at ``shape``) against onnxruntime's (``sess``, of ``m``)."""
    f = feeds(*shape)
    for o, want in zip(m.graph.output, sess.run(None, f)):
        name = o.name
        what = f"{name} at (batch, seq, past) = {shape} on {backends}"
        assert got[name].shape == want.shape, f"{what}: shape {got[name].shape}, expected {want.shape}"
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=what)

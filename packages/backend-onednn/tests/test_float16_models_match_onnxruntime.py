"""float16 models as onnxconverter-common writes them (backend-cpu's tests/models/*_fp16.onnx)
on onednn with cpu taking the rest, at one and two threads, against onnxruntime: the core
computes the float16 nodes in float32 (nnplug.stages.precision), so oneDNN, which runs float32 only,
takes the convolutions and matrix products. Tolerance: two float16 ulps at the output's
largest magnitude (why: backend-cpu's test_float16_models_match_onnxruntime.py)."""

from __future__ import annotations

import collections
import json
import os

import numpy as np
import onnxruntime as ort
import pytest
from conftest import BACKENDS

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "backend-cpu",
                      "tests", "models")
if not os.path.isdir(MODELS):
    pytest.skip("backend-cpu's test models are not beside this package", allow_module_level=True)


def feeds_of(name: str, seed: int) -> dict:
    with open(os.path.join(MODELS, "manifest.json")) as f:
        spec = json.load(f)[name]["inputs"]
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in spec:
        kind = s["kind"]
        a = (rng.integers(0, int(kind[4:]), s["shape"]) if kind.startswith("ids:")
             else np.ones(s["shape"]) if kind == "ones" else rng.standard_normal(s["shape"]))
        feeds[s["name"]] = a.astype(s["dtype"])
    return feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name,heavy", [("resnet_tiny", "Conv"), ("bert_tiny", "MatMul")])
def test_float16_model_runs_on_onednn_and_matches_onnxruntime(rt, name, heavy, threads):
    path = os.path.join(MODELS, f"{name}_fp16.onnx")
    feeds = feeds_of(name, seed=threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(path, backends=BACKENDS) as net:
            got = net.run(feeds)
            outs = [got[o.name] for o in net.outputs]
            where = collections.Counter(net.assignment[n] for n, op in net.op_types.items()
                                        if op == heavy)
            placed = list(net.assignment)
    finally:
        lib.set_num_threads(0)
    assert set(where) == {"onednn"}, where
    # no value is rounded to float16 and cast straight back: such a Cast pair runs on cpu and
    # would cut oneDNN's partition (and its fusions) between every two nodes
    to16 = {n.rsplit("/", 1)[0] for n in placed if n.endswith("/to_float16")}
    to32 = {n.rsplit("/", 1)[0] for n in placed if n.endswith("/to_float32")}
    assert not to16 & to32, sorted(to16 & to32)
    for g, w in zip(outs, want):
        ulp = float(np.spacing(np.float16(np.abs(w).max())))
        np.testing.assert_allclose(g, w, rtol=0, atol=2 * ulp, err_msg=name)

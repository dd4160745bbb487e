"""float16 models as onnxconverter-common writes them (tests/models/*_fp16.onnx, made by
tests/models/convert_fp16_models.py) load on the cpu backend and match onnxruntime, at one
and two threads.

The cpu backend declines float16 GlobalAveragePool and Gemm and runs float16 MatMul on a slow
scalar path; the core computes such nodes in float32 between casts (nnplug.stages.precision), as
onnxruntime's CPU provider does. Tolerance: two float16 ulps at the output's largest
magnitude. Both engines compute these nodes in float32 and round to float16 where a value goes
back to float16, but not at the same places: onnxruntime keeps Reshape, Transpose and
LayerNormalization in float16 (it has float16 kernels for them) and so rounds their inputs,
where nnplug keeps a chain of widened nodes in float32. Each rounding moves a value by at most
half an ulp, and the final float16 rounding of the output by another half: on these models the
two differ by one ulp, two at most (seen over seeds), and nnplug's distance from the float32
model's answers is never more than 1.5 times onnxruntime's (checked).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)


def feeds_of(name: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in MANIFEST[name]["inputs"]:
        kind = s["kind"]
        if kind.startswith("ids:"):
            a = rng.integers(0, int(kind[4:]), s["shape"])
        elif kind == "ones":
            a = np.ones(s["shape"])
        else:
            a = rng.standard_normal(s["shape"])
        feeds[s["name"]] = a.astype(s["dtype"])
    return feeds


def onnxruntime_run(path: str, feeds: dict, threads: int) -> list:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_float16_model_matches_onnxruntime(rt, name, threads):
    path = os.path.join(HERE, f"{name}_fp16.onnx")
    feeds = feeds_of(name, seed=threads)
    want = onnxruntime_run(path, feeds, threads)
    want32 = onnxruntime_run(os.path.join(HERE, f"{name}.onnx"), feeds, threads)
    lib = rt.backends["cpu"].backend
    try:
        lib.set_num_threads(threads)
        with rt.load(path, backends=["cpu"]) as net:
            got = net.run(feeds)
            outs = [got[o.name] for o in net.outputs]
            placed = list(net.assignment)
    finally:
        lib.set_num_threads(0)
    for g, w, w32 in zip(outs, want, want32):
        assert g.dtype == w.dtype == np.float32  # keep_io_types: float32 in and out
        ulp = float(np.spacing(np.float16(np.abs(w).max())))
        np.testing.assert_allclose(g, w, rtol=0, atol=2 * ulp, err_msg=name)
        assert np.abs(g - w32).max() <= 1.5 * np.abs(w - w32).max() + ulp / 2, name
    # widened nodes share their casts: no value goes to float16 and straight back
    to16 = {n.rsplit("/", 1)[0] for n in placed if n.endswith("/to_float16")}
    to32 = {n.rsplit("/", 1)[0] for n in placed if n.endswith("/to_float32")}
    assert not to16 & to32, sorted(to16 & to32)
    assert to32, "nothing was computed in float32"

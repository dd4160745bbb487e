"""Autoregressive decoding of the exported GPT-2 and Llama-style decoders (their caches in
optimum's layout) on ["onednn", "cpu"]: nnplug.generation gives onnxruntime's tokens, greedy
and sampled with a seed, at 1 and 2 threads, from the first step (an empty past) on (see
nnplug_conformance.decoding)."""

from __future__ import annotations

import onnx
import pytest

from nnplug_conformance import decoding


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", decoding.DECODERS)
def test_onednn_generated_tokens_match_onnxruntime(rt, name, threads):
    try:
        placement = decoding.assert_tokens_match_onnxruntime(
            decoding.model_path(name), rt, ["onednn", "cpu"], threads)
    finally:
        for bid in ("onednn", "cpu"):
            rt.backends[bid].backend.set_num_threads(0)
    # the projections (products with a constant weight) run on oneDNN; the attention products
    # of two activations, whose shapes change at every step, are left to cpu
    model = onnx.load(decoding.model_path(name))
    weights = {i.name for i in model.graph.initializer}
    second = {n.name: n.input[1] for n in model.graph.node if n.op_type in ("MatMul", "Gemm")}
    proj = [placement[n]["ran_on"] for n, w in second.items() if w in weights]
    assert proj.count("onednn") > len(proj) // 2, proj
    products = {placement[n]["ran_on"] for n, w in second.items() if w not in weights}
    assert products <= {"cpu"}, products

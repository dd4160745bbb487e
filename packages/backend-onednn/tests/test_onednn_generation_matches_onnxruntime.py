"""Autoregressive decoding of the exported GPT-2 and Llama-style decoders (their caches in
optimum's layout) on ["onednn", "cpu"]: nnplug.generation gives onnxruntime's tokens, greedy
and sampled with a seed, at 1 and 2 threads, from the first step (an empty past) on (see
nnplug_conformance.decoding)."""

from __future__ import annotations

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
    # the projections run on oneDNN (it declines some attention products, left to cpu)
    matmuls = [p["ran_on"] for p in placement.values() if p["op"] == "MatMul"]
    assert matmuls.count("onednn") > len(matmuls) // 2, matmuls

"""Autoregressive decoding of the exported GPT-2 and Llama-style decoders (their caches in
optimum's layout) on ["onednn", "cpu"]: nnplug.generation gives onnxruntime's tokens, greedy
and sampled with a seed, at 1 and 2 threads, from the first step (an empty past) on (see
nnplug_conformance.decoding). With fixed shapes this backend runs the same nodes:
test_empty_kv_cache_matches_onnxruntime.py."""

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
    # the sequence is symbolic, so every product's rows change from step to step: the
    # projections (products with a constant weight) are left to cpu with the light nodes, one
    # partition a step rather than one per projection (kernels.c, changing_shape_not_worth_a_plan)
    model = onnx.load(decoding.model_path(name))
    products = {placement[n.name]["ran_on"] for n in model.graph.node
                if n.op_type in ("MatMul", "Gemm")}
    assert products == {"cpu"}, products

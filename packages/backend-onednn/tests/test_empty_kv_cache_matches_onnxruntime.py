"""A decoder's first step concatenates an empty KV cache (past length 0): the Concat this
backend claims, and the MatMul, Softmax, Reshape and Transpose around it, run for every shape
the model allows (an empty past, a zero batch, an empty sequence) as onnxruntime does. An op
whose result is empty runs no step, a Concat leaves empty inputs out, and a kernel whose output
is empty computes nothing (plan.c empty_result, kernels.c ox_run)."""

from __future__ import annotations

import pytest

from nnplug_conformance import kv_cache


@pytest.mark.parametrize("threads", [1, 2])
def test_empty_kv_cache_matches_onnxruntime(rt, threads):
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        assignment = kv_cache.assert_matches_onnxruntime(rt, ["onednn", "cpu"])
    finally:
        lib.set_num_threads(0)
    assert assignment["cache_k"] == assignment["cache_v"] == "onednn", assignment
    assert assignment["scores"] == assignment["softmax"] == "onednn", assignment

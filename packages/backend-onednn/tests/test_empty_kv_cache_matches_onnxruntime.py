"""A decoder's first step concatenates an empty KV cache (past length 0). With the past's length
symbolic, this backend leaves every node whose rows change at every step to cpu, the
projections (MatMuls of constant weights) included (kernels.c, changing_shape_not_worth_a_plan);
with every shape fixed it claims the MatMuls, Softmax, Reshape and Transpose (and the
Concat where no input is empty), and runs them for every shape the model allows (an empty past,
a zero batch, an empty sequence) as onnxruntime does. An op whose result is empty runs no step, a Concat leaves empty inputs out,
and a kernel whose output is empty computes nothing (plan.c empty_result, kernels.c ox_run)."""

from __future__ import annotations

import pytest

from nnplug_conformance import kv_cache


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("static", [False, True])
def test_empty_kv_cache_matches_onnxruntime(rt, threads, static):
    lib = rt.backends["onednn"].backend
    try:
        lib.set_num_threads(threads)
        assignment = kv_cache.assert_matches_onnxruntime(rt, ["onednn", "cpu"], static=static)
    finally:
        lib.set_num_threads(0)
    # the first model's: a first step, its past empty
    here = "onednn" if static else "cpu"
    assert assignment["proj_q"] == assignment["proj_k"] == here, assignment
    assert assignment["cache_k"] == assignment["cache_v"] == "cpu", assignment
    assert assignment["scores"] == assignment["softmax"] == here, assignment

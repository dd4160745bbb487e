"""A decoder's first step concatenates an empty KV cache (past length 0): the Concat, MatMul
and Softmax run for every shape the model allows (an empty past, a zero batch, an empty
sequence) as onnxruntime does."""

from __future__ import annotations

from nnplug_conformance import kv_cache


def test_empty_kv_cache_matches_onnxruntime(rt):
    assignment = kv_cache.assert_matches_onnxruntime(rt, ["cpu"])
    assert set(assignment.values()) == {"cpu"}, assignment
